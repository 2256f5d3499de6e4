package budget_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/sqlite"
)

// The stores the shared budget's tests run against, and the helpers they
// share with reconcile's own tests.

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// newClock returns the manual clock shared by the store and the budget.
func newClock() *testclock.Clock { return testclock.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)) }

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// storeFactory returns a fresh, migrated, empty store on the clock now;
// nil means the store's own clock (the database's).
type storeFactory func(tb testing.TB, now func() time.Time) reconcile.Store

// storeFactories lists the stores every test runs against.
var storeFactories = map[string]storeFactory{
	"postgres": func(t testing.TB, now func() time.Time) reconcile.Store { return pgtest.NewStoreClock(t, now) },
	"sqlite":   newSQLiteStore,
}

// forEachStore runs fn once per store, as subtests.
func forEachStore(t *testing.T, fn func(t *testing.T, newStore storeFactory)) {
	t.Helper()
	for name, newStore := range storeFactories {
		t.Run(name, func(t *testing.T) { fn(t, newStore) })
	}
}

// newSQLiteStore returns a migrated store over a fresh file.
func newSQLiteStore(t testing.TB, now func() time.Time) reconcile.Store {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "payrecon.db"), Now: now})
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate sqlite: %v", err)
	}
	return st
}
