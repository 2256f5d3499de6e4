package pgtest_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/internal/pgtest"
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
