package migrations_test

import (
	"database/sql"
	"io/fs"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/payrecon/payrecon/migrations"
	"github.com/payrecon/payrecon/reconcile/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func openPostgres(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

var _ = stdlib.GetDefaultDriver // registers the "pgx" database/sql driver

func version(t *testing.T, db *sql.DB) (current, latest int64) {
	t.Helper()
	current, latest, err := migrations.Version(t.Context(), db, migrations.Postgres)
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	return current, latest
}

func tableCount(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPostgresUpDownUp(t *testing.T) {
	db := openPostgres(t)
	ctx := t.Context()

	current, latest := version(t, db)
	if current != 0 || latest < 1 {
		t.Fatalf("empty database: version %d of %d, want 0 of at least 1", current, latest)
	}
	if n := tableCount(t, db); n != 0 {
		t.Fatalf("Version created %d tables on an empty database", n)
	}

	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		t.Fatalf("Up: %v", err)
	}
	if current, latest := version(t, db); current != latest {
		t.Fatalf("after Up: version %d of %d", current, latest)
	}
	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		t.Fatalf("second Up: %v", err)
	}

	// Every Down undoes its Up: all the way down leaves only goose's table.
	fsys, err := migrations.FS(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	if n := tableCount(t, db); n != 1 {
		t.Fatalf("after down to 0: %d tables, want only goose_db_version", n)
	}
	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		t.Fatalf("Up after Down: %v", err)
	}
	if current, latest := version(t, db); current != latest {
		t.Fatalf("after Up again: version %d of %d", current, latest)
	}
}

func TestDialects(t *testing.T) {
	if _, err := migrations.FS("oracle"); err == nil {
		t.Fatal("FS(oracle) succeeded")
	}
	if err := migrations.Up(t.Context(), &sql.DB{}, "oracle"); err == nil {
		t.Fatal("Up(oracle) succeeded")
	}
	for _, d := range []migrations.Dialect{migrations.Postgres, migrations.SQLite} {
		fsys, err := migrations.FS(d)
		if err != nil {
			t.Fatalf("FS(%s): %v", d, err)
		}
		files, err := fs.Glob(fsys, "*.sql")
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: migrations %v, %v; want at least one", d, files, err)
		}
	}
}
