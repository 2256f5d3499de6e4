package pgtest_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/internal/testing/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func TestNewDatabase(t *testing.T) {
	ctx := context.Background()
	urls := []string{pgtest.NewDatabase(t), pgtest.NewDatabase(t)}
	if urls[0] == urls[1] {
		t.Fatalf("two databases share the URL %s", urls[0])
	}
	for _, u := range urls {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatalf("connect %s: %v", u, err)
		}
		var db string
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
			t.Fatalf("database %s is not writable: %v", db, err)
		}
		conn.Close(ctx)
	}
}

// TestClusterRestartImmediate: a cluster of its own survives `pg_ctl
// restart -m immediate` with what it had committed.
func TestClusterRestartImmediate(t *testing.T) {
	c := pgtest.NewCluster(t)
	url := c.NewDatabase(t)
	exec := func(sql string) {
		t.Helper()
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(t.Context())
		if _, err := conn.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec("CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
	c.RestartImmediate(t)
	exec("DO $$ BEGIN IF (SELECT count(*) FROM t) <> 1 THEN RAISE 'lost the row'; END IF; END $$")
}
