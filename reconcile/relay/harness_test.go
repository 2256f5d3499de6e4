package relay_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/postgres"
	"github.com/payrecon/payrecon/reconcile/sqlite"
	"github.com/payrecon/payrecon/statemachine"
)

// The stores the relay's tests run against, and the helpers they share
// with reconcile's own tests.

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// newClock returns the manual clock shared by the store, the service and
// the fake provider.
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

// outboxOf returns a purchase's outbox events.
func outboxOf(t *testing.T, st reconcile.Store, id string) []reconcile.OutboxEvent {
	t.Helper()
	var out []reconcile.OutboxEvent
	if err := st.InTx(t.Context(), func(tx reconcile.Tx) error {
		var err error
		out, err = tx.ListOutbox(t.Context(), id)
		return err
	}); err != nil {
		t.Fatalf("list outbox of %s: %v", id, err)
	}
	return out
}

// wantPurchaseState returns purchase id, failing unless it is in want.
func wantPurchaseState(t *testing.T, svc *reconcile.Service, id string, want statemachine.State) reconcile.Purchase {
	t.Helper()
	d, err := svc.Purchase(context.Background(), id)
	if err != nil || d.Purchase.State != want {
		t.Fatalf("purchase %s: %v (%v), want %s", id, d.Purchase.State, err, want)
	}
	return d.Purchase
}

// backupable is a store that can be backed up and restored the way an
// operator does it: open opens the books afresh (after a restore), dump
// takes a backup of them as they are, restore puts a backup back.
type backupable struct {
	open    func(t *testing.T) reconcile.Store
	dump    func(t *testing.T, st reconcile.Store) string
	restore func(t *testing.T, st reconcile.Store, backup string)
}

// backupables are the stores a restore is simulated on.
var backupables = []struct {
	name string
	make func(*testing.T, func() time.Time) backupable
}{
	{"postgres", postgresBackupable},
	{"sqlite", sqliteBackupable},
}

// postgresBackupable backs up with pg_dump and restores with
// pg_restore into a database dropped and created again.
func postgresBackupable(t *testing.T, now func() time.Time) backupable {
	t.Helper()
	url := pgtest.NewDatabase(t)
	return backupable{
		open: func(t *testing.T) reconcile.Store {
			t.Helper()
			st, err := postgres.Open(context.Background(), postgres.Config{URL: url, Now: now})
			if err != nil {
				t.Fatalf("open postgres: %v", err)
			}
			t.Cleanup(func() { st.Close() })
			if err := st.Migrate(context.Background()); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			return st
		},
		dump: func(t *testing.T, _ reconcile.Store) string { t.Helper(); return pgtest.Dump(t, url) },
		restore: func(t *testing.T, st reconcile.Store, backup string) {
			t.Helper()
			st.Close()
			pgtest.Restore(t, url, backup)
		},
	}
}

// sqliteBackupable backs up by copying the closed file (and its WAL),
// and restores by copying it back.
func sqliteBackupable(t *testing.T, now func() time.Time) backupable {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "payrecon.db")
	copyFiles := func(t *testing.T, from, to string) {
		t.Helper()
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(to + suffix)
			src, err := os.Open(from + suffix)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			dst, err := os.Create(to + suffix)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(dst, src); err != nil {
				t.Fatal(err)
			}
			src.Close()
			if err := dst.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	b := backupable{}
	b.open = func(t *testing.T) reconcile.Store {
		t.Helper()
		st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Now: now})
		if err != nil {
			t.Fatalf("open sqlite: %v", err)
		}
		t.Cleanup(func() { st.Close() })
		if err := st.Migrate(context.Background()); err != nil {
			t.Fatalf("migrate: %v", err)
		}
		return st
	}
	b.dump = func(t *testing.T, st reconcile.Store) string {
		t.Helper()
		st.Close() // a consistent copy: the file closed, its WAL checkpointed
		backup := filepath.Join(dir, "backup.db")
		copyFiles(t, path, backup)
		return backup
	}
	b.restore = func(t *testing.T, st reconcile.Store, backup string) {
		t.Helper()
		st.Close()
		copyFiles(t, backup, path)
	}
	return b
}
