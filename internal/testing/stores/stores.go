// Package stores gives tests the stores they run against: a fresh,
// migrated store of each kind, and stores that can be backed up and
// restored the way an operator does it. It is for tests only.
package stores

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/postgres"
	"github.com/payrecon/payrecon/reconcile/sqlite"
)

// Factory returns a fresh, migrated, empty store on the clock now; nil
// means the store's own clock (the database's).
type Factory func(tb testing.TB, now func() time.Time) reconcile.Store

// All lists the stores every test runs against, by name.
var All = map[string]Factory{
	"postgres": Postgres,
	"sqlite":   SQLite,
}

// ForEach runs fn once per store of All, as subtests.
func ForEach(t *testing.T, fn func(t *testing.T, newStore Factory)) {
	t.Helper()
	for name, newStore := range All {
		t.Run(name, func(t *testing.T) { fn(t, newStore) })
	}
}

// Postgres returns a migrated store over a fresh database of the test
// binary's throwaway cluster (see pgtest).
func Postgres(tb testing.TB, now func() time.Time) reconcile.Store {
	tb.Helper()
	return pgtest.NewStoreClock(tb, now)
}

// SQLite returns a migrated store over a fresh file.
func SQLite(tb testing.TB, now func() time.Time) reconcile.Store {
	tb.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(tb.TempDir(), "payrecon.db"), Now: now})
	if err != nil {
		tb.Fatalf("open sqlite: %v", err)
	}
	tb.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		tb.Fatalf("migrate sqlite: %v", err)
	}
	return st
}

// Backupable is a store that can be backed up and restored the way an
// operator does it: Open opens the books afresh (after a restore), Dump
// takes a backup of them as they are, Restore puts a backup back.
type Backupable struct {
	Open    func(t *testing.T) reconcile.Store
	Dump    func(t *testing.T, st reconcile.Store) string
	Restore func(t *testing.T, st reconcile.Store, backup string)
}

// Backupables are the stores a restore is simulated on, by name.
var Backupables = []struct {
	Name string
	Make func(*testing.T, func() time.Time) Backupable
}{
	{"postgres", PostgresBackupable},
	{"sqlite", SQLiteBackupable},
}

// PostgresBackupable backs up with pg_dump and restores with pg_restore
// into a database dropped and created again.
func PostgresBackupable(t *testing.T, now func() time.Time) Backupable {
	t.Helper()
	url := pgtest.NewDatabase(t)
	return Backupable{
		Open: func(t *testing.T) reconcile.Store {
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
		Dump: func(t *testing.T, _ reconcile.Store) string { t.Helper(); return pgtest.Dump(t, url) },
		Restore: func(t *testing.T, st reconcile.Store, backup string) {
			t.Helper()
			st.Close()
			pgtest.Restore(t, url, backup)
		},
	}
}

// SQLiteBackupable backs up by copying the closed file (and its WAL),
// and restores by copying it back.
func SQLiteBackupable(t *testing.T, now func() time.Time) Backupable {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "payrecon.db")
	return Backupable{
		Open: func(t *testing.T) reconcile.Store {
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
		},
		Dump: func(t *testing.T, st reconcile.Store) string {
			t.Helper()
			st.Close() // a consistent copy: the file closed, its WAL checkpointed
			backup := filepath.Join(dir, "backup.db")
			copyDatabase(t, path, backup)
			return backup
		},
		Restore: func(t *testing.T, st reconcile.Store, backup string) {
			t.Helper()
			st.Close()
			copyDatabase(t, backup, path)
		},
	}
}

// copyDatabase copies the SQLite database from, with its WAL and shared
// memory files when they exist, over to.
func copyDatabase(t *testing.T, from, to string) {
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
