package postgres_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/reconcile/postgres"
)

// The claim reads its batch off the front of an index in its own order,
// with no sort of the open jobs, even when 100,000 open jobs share one
// run_at (a bulk import) beside 20,000 done ones: the planner, left to
// itself on analysed tables, must choose that plan.
func TestClaimPlanWithManyTiedJobs(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	exec(t, conn, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at)
SELECT 'pur_' || lpad(i::text, 7, '0'), 'cus_bulk', 100, 'usd', 'created', 1, now(), now()
FROM generate_series(1, 120000) AS i`)
	exec(t, conn, `INSERT INTO jobs (purchase_id, run_at, done_at)
SELECT 'pur_' || lpad(i::text, 7, '0'), '2026-01-01T00:00:00Z',
    CASE WHEN i > 100000 THEN timestamptz '2026-01-01T00:00:01Z' END
FROM generate_series(1, 120000) AS i`)
	exec(t, conn, `ANALYZE purchases`)
	exec(t, conn, `ANALYZE jobs`)
	exec(t, conn, `PREPARE claim AS `+postgres.ClaimDueSQL)

	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(t.Context()) }()
	rows, _ := tx.Query(t.Context(), `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE claim(NULL, 64, 'w1', '30 seconds')`)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	plan := strings.Join(lines, "\n")
	t.Logf("claim of 64 among 100,000 tied open jobs:\n%s", plan)
	if !strings.Contains(plan, "using jobs_due_idx") || strings.Contains(plan, "Sort") || strings.Contains(plan, "Seq Scan on jobs") {
		t.Errorf("the claim does not read jobs_due_idx in order:\n%s", plan)
	}
	var leased int
	if err := tx.QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE lease_owner = 'w1'`).Scan(&leased); err != nil || leased != 64 {
		t.Errorf("the claim leased %d jobs (%v), want 64", leased, err)
	}
}
