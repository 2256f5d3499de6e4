package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/reconcile/postgres"
)

// The queries payrecon runs on a schedule: the gauges (every 15s), the
// escalation and rescue sweeps, the operator list, the audit's window
// and watermark. None of them may grow with the settled purchases.

// planCase is one periodic query of the store and the index its plan
// must read.
type planCase struct {
	name   string
	sql    string
	args   []string // the EXECUTE arguments, as SQL
	index  string   // the plan reads it
	noSort bool     // and needs no sort
}

// periodicPlanCases are the store's periodic queries (their SQL as the
// store sends it) and their indexes.
func periodicPlanCases() []planCase {
	openFindings, _ := postgres.ListFindingsSQL("", false, 0)
	return []planCase{
		{name: "CountByState", sql: postgres.CountByStateSQL, index: "purchase_state_counts"},
		{name: "CountEscalated", sql: postgres.CountEscalatedSQL, index: "purchases_escalated_at_idx"},
		{name: "OldestUncertainSince", sql: postgres.OldestUncertainSinceSQL, index: "purchases_uncertain_since_idx"},
		{name: "CountOpenFindings", sql: postgres.CountOpenFindingsSQL, index: "audit_findings_open_idx"},
		{name: "ListOverdueUncertain", sql: postgres.ListOverdueUncertainSQL, args: []string{"now()", "500"},
			index: "purchases_overdue_idx", noSort: true},
		{name: "ListEscalated", sql: postgres.ListEscalatedSQL, index: "purchases_escalated_at_idx"},
		{name: "ListFindings(open)", sql: openFindings, args: []string{"NULL"}, index: "audit_findings_open_idx", noSort: true},
		{name: "ListSubmittedBetween", sql: postgres.ListSubmittedBetweenSQL, args: []string{"'succeeded'", "now() - interval '15 minutes'", "now()"},
			index: "purchases_first_attempt_idx"},
		{name: "GetAuditRun", sql: postgres.GetAuditRunSQL, args: []string{"'scheduled'"}, index: "audit_runs_pkey"},
		// The rescue sweep's candidates, as the claim of expired leases
		// selects them: the few leased open jobs, not every open job.
		{name: "ClaimExpiredJobs candidates", sql: `SELECT purchase_id FROM jobs
WHERE done_at IS NULL AND lease_owner IS NOT NULL AND lease_expires_at <= $1
ORDER BY lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED`, args: []string{"now()", "16"}, index: "jobs_leased_idx", noSort: true},
	}
}

// explain returns the plan of the prepared query c, run with its
// arguments (EXPLAIN options opts, e.g. "ANALYZE, BUFFERS").
func explain(ctx context.Context, conn *pgx.Conn, c planCase, opts string) (string, error) {
	if _, err := conn.Exec(ctx, `PREPARE periodic AS `+c.sql); err != nil {
		return "", fmt.Errorf("prepare %s: %w", c.name, err)
	}
	defer conn.Exec(ctx, `DEALLOCATE periodic`) //nolint:errcheck // the plan is what matters
	execute := `EXECUTE periodic`
	if len(c.args) > 0 {
		execute += `(` + strings.Join(c.args, `, `) + `)`
	}
	if opts != "" {
		opts = "(" + opts + ") "
	}
	rows, _ := conn.Query(ctx, `EXPLAIN `+opts+execute)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("explain %s: %w", c.name, err)
	}
	return strings.Join(lines, "\n"), nil
}

// TestPeriodicQueriesUseTheirIndexes guards the indexes of the periodic
// queries (migration 00007 and before) against a rewrite of a query, or a
// dropped index, that could not use them: each of the store's queries,
// in the generic plan a prepared statement ends up with, reads its index
// (and, where its order is the index's, without a sort). CountByState
// reads the counts, not the purchases.
func TestPeriodicQueriesUseTheirIndexes(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	exec(t, conn, `SET enable_seqscan = off`)
	exec(t, conn, `SET plan_cache_mode = force_generic_plan`)
	for _, c := range periodicPlanCases() {
		tx, err := conn.Begin(t.Context()) // the claim's FOR UPDATE locks nothing for good
		if err != nil {
			t.Fatal(err)
		}
		plan, err := explain(t.Context(), tx.Conn(), c, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan, c.index) || (c.noSort && strings.Contains(plan, "Sort")) {
			t.Errorf("%s does not read %s%s:\n%s", c.name, c.index, map[bool]string{true: " in order"}[c.noSort], plan)
		}
		if c.name == "CountByState" && strings.Contains(plan, "on purchases") {
			t.Errorf("CountByState reads the purchases:\n%s", plan)
		}
	}
}
