package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/postgres"
	"github.com/payrecon/payrecon/statemachine"
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
	openFindings, _ := postgres.ListFindingsSQL("", reconcile.AnyAccount, false, 0)
	accountFindings, _ := postgres.ListFindingsSQL("", reconcile.OnlyAccount("acct_1A"), false, 0)
	return []planCase{
		{name: "CountByState", sql: postgres.CountByStateSQL, index: "purchase_state_counts"},
		{name: "CountEscalatedByAccount", sql: postgres.CountEscalatedByAccountSQL, index: "purchases_escalated_at_idx"},
		{name: "OldestUncertainSince", sql: postgres.OldestUncertainSinceSQL, index: "purchases_uncertain_since_idx"},
		{name: "CountOpenFindings", sql: postgres.CountOpenFindingsSQL, index: "audit_findings_open_idx"},
		{name: "ListOverdueUncertain", sql: postgres.ListOverdueUncertainSQL, args: []string{"now()", "500"},
			index: "purchases_overdue_idx", noSort: true},
		{name: "ListEscalated", sql: postgres.ListEscalatedSQL, index: "purchases_escalated_at_idx"},
		{name: "ListFindings(open)", sql: openFindings, args: []string{"NULL"}, index: "audit_findings_open_idx", noSort: true},
		{name: "ListSubmittedBetween", sql: postgres.ListSubmittedBetweenSQL, args: []string{"'succeeded'", "now() - interval '15 minutes'", "now()", "ARRAY['pi_1']"},
			index: "purchases_first_attempt_idx"},
		{name: "GetAuditRun", sql: postgres.GetAuditRunSQL, args: []string{"'scheduled'"}, index: "audit_runs_pkey"},
		// The rescue sweep's candidates, as the claim of expired leases
		// selects them: the few leased open jobs, not every open job.
		{name: "ClaimExpiredJobs candidates", sql: `SELECT id, purchase_id, refund_id FROM jobs
WHERE done_at IS NULL AND lease_owner IS NOT NULL AND lease_expires_at <= $1
ORDER BY lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED`, args: []string{"now()", "16"}, index: "jobs_leased_idx", noSort: true},
		// The refunds' (migration 00009): the gauges, the escalation
		// sweep and the operator list read their partial indexes.
		{name: "CountRefundsByState", sql: postgres.CountRefundsByStateSQL, index: "refunds_state_idx"},
		{name: "OldestUncertainRefundSince", sql: postgres.OldestUncertainRefundSinceSQL, index: "refunds_uncertain_since_idx"},
		{name: "ListOverdueUncertainRefunds", sql: postgres.ListOverdueUncertainRefundsSQL, args: []string{"now()", "500"},
			index: "refunds_overdue_idx", noSort: true},
		{name: "ListEscalatedRefunds", sql: postgres.ListEscalatedRefundsSQL, index: "refunds_escalated_at_idx"},
		// The disputes' (migration 00017): the open ones, from their
		// partial index.
		{name: "ListOpenDisputes", sql: postgres.ListOpenDisputesSQL, index: "disputes_open_idx"},
		// The books' accounts (migration 00018): one probe of the
		// partial index per account.
		{name: "ListAccounts", sql: postgres.ListAccountsSQL, index: "purchases_account_idx", noSort: true},
		// The operator lists of one account: the same partial indexes,
		// each row's purchase probed by its key.
		{name: "ListEscalated(account)", sql: postgres.ListEscalatedAccountSQL, args: []string{"'acct_1A'"}, index: "purchases_escalated_at_idx"},
		{name: "ListEscalatedRefunds(account)", sql: postgres.ListEscalatedRefundsAccountSQL, args: []string{"'acct_1A'"}, index: "refunds_escalated_at_idx"},
		{name: "ListOpenDisputes(account)", sql: postgres.ListOpenDisputesAccountSQL, args: []string{"'acct_1A'"}, index: "disputes_open_idx"},
		{name: "ListFindings(open, account)", sql: accountFindings, args: []string{"'acct_1A'", "NULL"}, index: "audit_findings_open_idx", noSort: true},
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

// benchRowsEnv names the variable that sets how many purchases
// BenchmarkPeriodicQueries loads (default 10000).
const benchRowsEnv = "PAYRECON_BENCH_ROWS"

// benchExplainEnv names the variable that, when set, makes
// BenchmarkPeriodicQueries log the EXPLAIN (ANALYZE, BUFFERS) of each
// query, in its custom and its generic plan, before timing them.
const benchExplainEnv = "PAYRECON_BENCH_EXPLAIN"

// The fixture's working set: the purchases the periodic queries return,
// as many whatever the number of purchases, so that a query's time can
// only grow with the table, not with its answer.
const (
	benchEscalated = 50 // uncertain, escalated: the operator list
	benchOverdue   = 20 // uncertain for more than a day, not yet escalated
	benchExpired   = 20 // reconciling under a lease that expired
	benchFindings  = 40 // audit findings, a quarter of them open
	benchUnlisted  = 3  // succeeded purchases in the audit's window whose payment the provider does not list
)

// BenchmarkPeriodicQueries times each query payrecon runs on a schedule,
// through the store, on a database of PAYRECON_BENCH_ROWS purchases
// (default 10000), each with its job, loaded with one INSERT ... SELECT
// generate_series per table and then vacuumed and analyzed. One purchase
// a second up to the store's now, about 97% succeeded or declined (done
// jobs), the rest created (due, their jobs sharing one run_at as after a
// bulk import: 100 k of them at 10 M, written last and together, as such
// an import writes them), submitted or reconciling (live leases) and
// uncertain for less than a day; and, whatever the size, the same
// working set: 50 escalated purchases, 20 overdue, 20 expired leases, 40
// findings (10 open), one audit run. The audit's window is 15 minutes
// (about 780 succeeded purchases). Each sub-benchmark reports ms/op.
//
// PAYRECON_TEST_DATABASE_URL points it at a server of your own (see
// internal/testing/pgtest); 10 M purchases take a few minutes to load and
// about 10 GB. With PAYRECON_BENCH_EXPLAIN set it logs each query's plan.
func BenchmarkPeriodicQueries(b *testing.B) {
	n := 10000
	if v := os.Getenv(benchRowsEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2000 {
			b.Fatalf("%s=%q: want a number of purchases, at least 2000", benchRowsEnv, v)
		}
	}
	now := base
	// Every reading of the store's clock is a millisecond later, so that
	// the leases the rescue benchmark takes (for a microsecond) have
	// expired by its next claim: each claim finds the same expired leases.
	// The live leases last a day.
	var ticks atomic.Int64
	clock := func() time.Time { return now.Add(time.Duration(ticks.Add(1)) * time.Millisecond) }
	url := pgtest.NewDatabase(b)
	ctx := context.Background()
	s, err := postgres.Open(ctx, postgres.Config{URL: url, Now: clock})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(context.Background()) })
	loadPeriodicFixture(b, conn, n, now)

	window := min(2*time.Hour, time.Duration(n/2)*time.Second)
	from := now.Add(-window)
	if os.Getenv(benchExplainEnv) != "" {
		explainPeriodic(b, conn, now, from)
	}

	// The audit passes the payments the provider listed in its window:
	// all of the window's but benchUnlisted.
	var listed []string
	if err := conn.QueryRow(ctx, `SELECT array_agg(provider_payment_id ORDER BY first_attempt_at) FROM purchases
WHERE state = 'succeeded' AND first_attempt_at >= $1 AND first_attempt_at < $2`, from, from.Add(15*time.Minute)).Scan(&listed); err != nil {
		b.Fatal(err)
	}
	if len(listed) < 700 {
		b.Fatalf("%d purchases in the audit's window, want about 780", len(listed))
	}
	listed = listed[benchUnlisted:]

	inTx := func(fn func(ctx context.Context, tx reconcile.Tx) error) func(context.Context) error {
		return func(ctx context.Context) error {
			return s.InTx(ctx, func(tx reconcile.Tx) error { return fn(ctx, tx) })
		}
	}
	for _, q := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"gauges/CountByState", inTx(func(ctx context.Context, tx reconcile.Tx) error {
			_, err := tx.CountByState(ctx)
			return err
		})},
		{"gauges/CountEscalatedByAccount", inTx(func(ctx context.Context, tx reconcile.Tx) error {
			_, err := tx.CountEscalatedByAccount(ctx)
			return err
		})},
		{"gauges/CountEscalatedByAccount", inTx(func(ctx context.Context, tx reconcile.Tx) error {
			_, err := tx.CountEscalatedByAccount(ctx)
			return err
		})},
		{"gauges/OldestUncertainSince", inTx(func(ctx context.Context, tx reconcile.Tx) error {
			_, err := tx.OldestUncertainSince(ctx)
			return err
		})},
		{"gauges/CountOpenFindings", inTx(func(ctx context.Context, tx reconcile.Tx) error {
			_, err := tx.CountOpenFindings(ctx)
			return err
		})},
		{"escalate/ListOverdueUncertain", inTx(func(ctx context.Context, tx reconcile.Tx) error {
			ps, err := tx.ListOverdueUncertain(ctx, now.Add(-24*time.Hour), 500)
			return want("overdue purchases", len(ps), benchOverdue, err)
		})},
		{"rescue/ClaimExpiredJobs", func(ctx context.Context) error {
			ls, err := s.ClaimExpiredJobs(ctx, "bench-rescue", 16, time.Microsecond)
			return want("expired leases claimed", len(ls), 16, err)
		}},
		{"ops/ListEscalated", inTx(func(ctx context.Context, tx reconcile.Tx) error {
			ps, err := tx.ListEscalated(ctx, reconcile.AnyAccount)
			return want("escalated purchases", len(ps), benchEscalated, err)
		})},
		{"ops/ListFindings(open)", inTx(func(ctx context.Context, tx reconcile.Tx) error {
			fs, err := tx.ListFindings(ctx, "", reconcile.AnyAccount, false, 0)
			return want("open findings", len(fs), benchFindings/4, err)
		})},
		{"audit/ListSubmittedBetween", inTx(func(ctx context.Context, tx reconcile.Tx) error {
			ps, err := tx.ListSubmittedBetween(ctx, from, from.Add(15*time.Minute), statemachine.Succeeded, listed)
			return want("purchases in the window the provider did not list", len(ps), benchUnlisted, err)
		})},
		{"audit/GetAuditRun", inTx(func(ctx context.Context, tx reconcile.Tx) error {
			_, err := tx.GetAuditRun(ctx, "scheduled")
			return err
		})},
	} {
		b.Run(q.name, func(b *testing.B) {
			for b.Loop() {
				if err := q.run(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/op")
		})
	}
	// The worker's claim of 64 jobs: the fixture's expired leases, then
	// due jobs, which include the created purchases' jobs that share one
	// run_at. Between claims, not timed, each claimed job is rescheduled
	// by its id, as the worker ends a lease, so that every claim finds as
	// many jobs. (ReleaseLeases would find them by their owner among the
	// fixture's 70 k live leases at 10 M, reading about 68 k pages: it
	// emptied shared_buffers between claims, and the benchmark timed the
	// cache, not the claim.)
	b.Run("claim/ClaimJobs", func(b *testing.B) {
		for b.Loop() {
			ls, err := s.ClaimJobs(ctx, "bench-claim", 64, time.Hour)
			if err = want("jobs claimed", len(ls), 64, err); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			err = s.InTx(ctx, func(tx reconcile.Tx) error {
				for _, l := range ls {
					if err := tx.RescheduleJob(ctx, l.JobID(), l.Now); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/op")
	})
	if os.Getenv(benchExplainEnv) != "" {
		explainClaim(b, conn, clock())
	}
}

// stamp is t as an SQL timestamptz literal.
func stamp(t time.Time) string { return "'" + t.Format(time.RFC3339Nano) + "'::timestamptz" }

// claimPlanCase is the worker's claim of 64 jobs at now, as a planCase.
func claimPlanCase(now time.Time) planCase {
	return planCase{name: "ClaimJobs", sql: postgres.ClaimDueSQL,
		args: []string{stamp(now), "64", "'bench-explain'", "'1 hour'::interval"}}
}

// explainClaim logs the EXPLAIN (ANALYZE, BUFFERS) of the worker's claim
// of 64 jobs, twice, as the claims before it left the fixture, each in a
// transaction rolled back afterwards: the second takes the same jobs,
// their pages cached by the first.
func explainClaim(b *testing.B, conn *pgx.Conn, now time.Time) {
	b.Helper()
	ctx := context.Background()
	for i := range 2 {
		tx, err := conn.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		plan, err := explain(ctx, tx.Conn(), claimPlanCase(now), "ANALYZE, BUFFERS")
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			b.Fatal(err)
		}
		b.Logf("claim after the benchmark, run %d:\n%s", i+1, plan)
	}
}

// want returns err, or an error when got is not the fixture's number.
func want(what string, got, want int, err error) error {
	if err == nil && got != want {
		err = fmt.Errorf("%d %s, want %d", got, what, want)
	}
	return err
}

// loadPeriodicFixture fills the empty, migrated database of conn with n
// purchases and their jobs, findings and an audit run, as
// BenchmarkPeriodicQueries describes, purchase i (1..n) created n-i
// seconds before now, but the created ones an hour before now, together
// (their ids neighbours, as reconcile.NewID makes them). The purchases are inserted in their states
// directly: the transition guard is off for that one statement (the
// counts of migration 00007 are kept by the same statement's trigger).
func loadPeriodicFixture(b *testing.B, conn *pgx.Conn, n int, now time.Time) {
	b.Helper()
	ctx := context.Background()
	// kind is what purchase i is in the fixture: the working set first,
	// the rest by a permutation of i mod 10000 (7919 is prime to 10000),
	// so that every stretch of 10000 purchases has the same mix, well
	// shuffled: 1% created, 0.5% submitted, 1.3% uncertain, 0.2%
	// reconciling, 87% succeeded, 10% declined.
	kind := fmt.Sprintf(`CASE
    WHEN i <= %[1]d THEN 'escalated'
    WHEN i <= %[1]d + %[2]d THEN 'overdue'
    WHEN i <= %[1]d + %[2]d + %[3]d THEN 'expired'
    WHEN i * 7919 %% 10000 < 100 THEN 'created'
    WHEN i * 7919 %% 10000 < 150 THEN 'submitted'
    WHEN i * 7919 %% 10000 < 280 THEN 'uncertain'
    WHEN i * 7919 %% 10000 < 300 THEN 'reconciling'
    WHEN i * 7919 %% 10000 < 9000 THEN 'succeeded'
    ELSE 'declined'
END`, benchEscalated, benchOverdue, benchExpired)
	// purchases is purchase i of the fixture for each i of from (a FROM
	// item with a column i): its kind, when it was created, and its id as
	// reconcile.NewID makes it, the millisecond of its creation first,
	// with i in place of the random digits. The created purchases came
	// in one bulk import an hour ago, so their ids are neighbours, as
	// NewID makes them.
	purchases := func(from string) string {
		return `(
    SELECT i, kind, created_at, 'cus_' || (i % 5000) AS customer, 100 + i % 10000 AS amount,
        'pur_' || lpad(to_hex(floor(extract(epoch FROM created_at) * 1000)::bigint), 12, '0') || lpad(to_hex(i), 12, '0') AS id
    FROM (
        SELECT i, kind, CASE kind WHEN 'created' THEN $2::timestamptz - interval '1 hour'
            ELSE $2::timestamptz - ($1 - i) * interval '1 second' END AS created_at
        FROM ` + from + `, LATERAL (SELECT ` + kind + ` AS kind) k
    ) t
) g`
	}
	gen := `FROM ` + purchases(`generate_series(1, $1::bigint) AS i`)
	// The created purchases and their jobs are written last, together, as
	// a bulk import writes them: the claim's purchases are then neighbours
	// in the table, not one page each spread through it.
	createdLast := `
ORDER BY kind = 'created', i`
	nowArgs := []any{n, now}
	steps := []struct {
		what string
		sql  string
		args []any
	}{
		{"turn the transition guard off", `ALTER TABLE purchases DISABLE TRIGGER purchases_guard_insert`, nil},
		{"insert the purchases", `INSERT INTO purchases (id, customer, amount, currency, description, payment_method, state, version,
    provider_key, provider_request, params_hash, provider_payment_id, first_attempt_at, uncertain_since,
    escalated_at, escalation_reason, settled_at, doubt, created_at, updated_at)
SELECT id, customer, amount, 'usd', 'bench purchase', 'pm_card_visa',
    CASE kind WHEN 'escalated' THEN 'uncertain' WHEN 'overdue' THEN 'uncertain' WHEN 'expired' THEN 'reconciling' ELSE kind END,
    CASE kind WHEN 'created' THEN 1 WHEN 'submitted' THEN 2 ELSE 3 END,
    CASE WHEN kind <> 'created' THEN 'payrecon-' || id END,
    CASE WHEN kind <> 'created' THEN jsonb_build_object('idempotency_key', 'payrecon-' || id, 'purchase_id', id,
        'customer', customer, 'amount', amount, 'currency', 'usd', 'description', 'bench purchase',
        'payment_method', 'pm_card_visa', 'version', 1) END,
    CASE WHEN kind <> 'created' THEN md5(id) END,
    CASE WHEN kind IN ('succeeded', 'declined') THEN 'pi_' || i END,
    CASE WHEN kind <> 'created' THEN created_at + interval '1 second' END,
    CASE kind
        WHEN 'escalated' THEN $2 - interval '30 hours' - i * interval '1 minute'
        WHEN 'overdue' THEN $2 - interval '25 hours' - i * interval '1 minute'
        WHEN 'expired' THEN $2 - interval '1 hour'
        WHEN 'uncertain' THEN $2 - (i * 7919 % 86000) * interval '1 second'
        WHEN 'reconciling' THEN $2 - (i * 7919 % 86000) * interval '1 second'
    END,
    CASE WHEN kind = 'escalated' THEN $2 - interval '6 hours' - i * interval '1 minute' END,
    CASE WHEN kind = 'escalated' THEN 'uncertain_too_long' END,
    CASE WHEN kind IN ('succeeded', 'declined') THEN created_at + interval '2 seconds' END,
    '', created_at, created_at + interval '2 seconds'
` + gen + createdLast, nowArgs},
		{"turn the transition guard on", `ALTER TABLE purchases ENABLE TRIGGER purchases_guard_insert`, nil},
		{"insert the jobs", `INSERT INTO jobs (purchase_id, run_at, lease_owner, lease_token, lease_expires_at, checks, done_at)
SELECT id,
    CASE kind
        WHEN 'uncertain' THEN $2 + (i % 3600) * interval '1 second'
        WHEN 'escalated' THEN $2 + (i % 21600) * interval '1 second'
        WHEN 'overdue' THEN $2 + (i % 600) * interval '1 second'
        WHEN 'created' THEN $2 - interval '1 hour'
        ELSE created_at
    END,
    CASE kind WHEN 'submitted' THEN 'worker-' || i % 4 WHEN 'reconciling' THEN 'worker-' || i % 4 WHEN 'expired' THEN 'worker-gone' END,
    CASE WHEN kind = 'created' THEN 0 ELSE 1 END,
    CASE kind
        WHEN 'submitted' THEN $2 + interval '1 day'
        WHEN 'reconciling' THEN $2 + interval '1 day'
        WHEN 'expired' THEN $2 - i * interval '1 minute'
    END,
    CASE WHEN kind = 'created' THEN 0 ELSE 1 END,
    CASE WHEN kind IN ('succeeded', 'declined') THEN created_at + interval '2 seconds' END
` + gen + createdLast, nowArgs},
		{"insert the findings", `INSERT INTO audit_findings (provider, payment_id, kind, purchase_id, amount, currency, status,
    evidence, found_at, closed_at, closed_by, close_note)
SELECT 'stripe', 'pi_found_' || j,
    (ARRAY['orphan_charge', 'duplicate_charge', 'amount_mismatch', 'currency_mismatch', 'state_disagreement', 'missing_at_provider'])[1 + j % 6],
    g.id, 100, 'usd', 'succeeded', 'bench finding',
    $2::timestamptz - j * interval '1 hour',
    CASE WHEN j % 4 <> 0 THEN $2::timestamptz - j * interval '1 hour' + interval '10 minutes' END,
    CASE WHEN j % 4 <> 0 THEN 'ops' ELSE '' END,
    CASE WHEN j % 4 <> 0 THEN 'checked' ELSE '' END
FROM generate_series(1, ` + strconv.Itoa(benchFindings) + `) AS j,
    LATERAL ` + purchases(`(SELECT j * 37 % $1 + 1 AS i) s`), nowArgs},
		{"insert the audit run", `INSERT INTO audit_runs (name, window_from, window_until, done_until, started_at, updated_at, findings)
VALUES ('scheduled', $1::timestamptz - interval '2 hours', $1::timestamptz - interval '5 minutes',
    $1::timestamptz - interval '5 minutes', $1, $1, 0)`, []any{now}},
		{"vacuum and analyze", `VACUUM (ANALYZE) purchases, jobs, audit_findings, audit_runs, purchase_state_counts`, nil},
		// The load leaves shared_buffers full of dirty pages: a claim that
		// then reads a page must first write one out, flushing the WAL up
		// to it (33 pages and 0.9 ms of writes in one claim's plan at 1 M;
		// 0.7 pages a claim after the checkpoint). A server writes them
		// in the background long before a real import's claims.
		{"checkpoint", `CHECKPOINT`, nil},
	}
	for _, st := range steps {
		start := time.Now()
		if _, err := conn.Exec(ctx, st.sql, st.args...); err != nil {
			b.Fatalf("fixture: %s: %v", st.what, err)
		}
		b.Logf("fixture of %d purchases: %s: %s", n, st.what, time.Since(start).Round(time.Millisecond))
	}
}

// explainPeriodic logs the EXPLAIN (ANALYZE, BUFFERS) of each periodic
// query on the fixture, in its custom plan (the arguments known) and in
// its generic plan (the one a prepared statement may settle on), in a
// transaction rolled back afterwards.
func explainPeriodic(b *testing.B, conn *pgx.Conn, now, from time.Time) {
	b.Helper()
	ctx := context.Background()
	cases := periodicPlanCases()
	for i := range cases {
		switch cases[i].name {
		case "ListOverdueUncertain":
			cases[i].args = []string{stamp(now.Add(-24 * time.Hour)), "500"}
		case "ListSubmittedBetween":
			cases[i].args = []string{"'succeeded'", stamp(from), stamp(from.Add(15 * time.Minute)), "ARRAY['pi_1']"}
		case "ClaimExpiredJobs candidates":
			cases[i].args = []string{stamp(now.Add(time.Minute)), "16"}
		}
	}
	// The rescue claim as reconcile/postgres sends it today: the same
	// candidates in run_at order.
	cases = append(cases, planCase{name: "ClaimExpiredJobs candidates (run_at order)", sql: `SELECT purchase_id FROM jobs
WHERE done_at IS NULL AND lease_owner IS NOT NULL AND lease_expires_at <= $1
ORDER BY run_at, purchase_id LIMIT $2 FOR UPDATE SKIP LOCKED`, args: []string{stamp(now.Add(time.Minute)), "16"}})
	// The worker's claim itself: it leases, so it runs in the transaction
	// rolled back below.
	cases = append(cases, claimPlanCase(now))
	tx, err := conn.Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // nothing to keep
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode); err != nil {
			b.Fatal(err)
		}
		for _, c := range cases {
			plan, err := explain(ctx, tx.Conn(), c, "ANALYZE, BUFFERS")
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("%s, %s:\n%s", c.name, mode, plan)
		}
	}
}
