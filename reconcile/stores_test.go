package reconcile_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/sqlite"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func init() {
	storeFactories["postgres"] = newPostgresStore
}

// newPostgresStore returns a migrated store over a fresh database of the
// throwaway cluster.
func newPostgresStore(t testing.TB, now func() time.Time) reconcile.Store {
	return pgtest.NewStoreClock(t, now)
}

func init() {
	storeFactories["sqlite"] = newSQLiteStore
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
