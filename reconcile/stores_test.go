package reconcile_test

import (
	"context"
	"os"
	"testing"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/postgres"
	"github.com/payrecon/payrecon/reconcile/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func init() {
	storeFactories["postgres"] = newPostgresStore
}

// newPostgresStore returns a migrated store over a fresh database of the
// throwaway cluster.
func newPostgresStore(t testing.TB) reconcile.Store {
	t.Helper()
	ctx := context.Background()
	st, err := postgres.Open(ctx, postgres.Config{URL: pgtest.NewDatabase(t)})
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate postgres: %v", err)
	}
	return st
}
