package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	driver "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/payrecon/payrecon/internal/testing/storetest"
	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/migrations"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/sqlite"
	"github.com/payrecon/payrecon/statemachine"
)

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// dbPath returns the path of a database file, not yet created, in a new
// temporary directory.
func dbPath(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "payrecon.db")
}

// openAt opens a store on path, closed when t ends.
func openAt(t testing.TB, cfg sqlite.Config) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newStore opens a store on a new, migrated database file, with the
// default clock.
func newStore(t testing.TB) (*sqlite.Store, string) {
	t.Helper()
	return newStoreClock(t, nil)
}

// newStoreClock is newStore with now as the store's clock.
func newStoreClock(t testing.TB, now func() time.Time) (*sqlite.Store, string) {
	t.Helper()
	path := dbPath(t)
	s := openAt(t, sqlite.Config{Path: path, Now: now})
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s, path
}

// fixed returns a clock that always says now.
func fixed(now time.Time) func() time.Time { return func() time.Time { return now } }

// rawDB opens the file directly, bypassing the store, as another process
// (a script, the sqlite3 shell) would.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func exec(t *testing.T, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// wantRaise fails unless err is a trigger's RAISE whose message contains
// every one of parts.
func wantRaise(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	var se *driver.Error
	if !errors.As(err, &se) || se.Code() != sqlite3.SQLITE_CONSTRAINT_TRIGGER {
		t.Fatalf("%s: got %v, want a trigger's RAISE (SQLITE_CONSTRAINT_TRIGGER)", what, err)
	}
	for _, p := range parts {
		if !strings.Contains(se.Error(), p) {
			t.Fatalf("%s: message %q does not mention %q", what, se.Error(), p)
		}
	}
}

// insertRaw inserts a purchase by SQL and walks it along allowed moves.
func insertRaw(t *testing.T, db *sql.DB, id string, path ...statemachine.State) {
	t.Helper()
	exec(t, db, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at)
VALUES (?1, 'cus_1', 100, 'eur', 'created', 1, ?2, ?2)`, id, base.UnixMicro())
	for _, st := range path {
		exec(t, db, `UPDATE purchases SET state = ?2 WHERE id = ?1`, id, string(st))
	}
}

func queryString(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	var s string
	if err := db.QueryRowContext(t.Context(), query, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return s
}

// purchase returns a valid purchase in state created.
func purchase(id string) reconcile.Purchase {
	return reconcile.Purchase{ID: id, Customer: "cus_1", Amount: 100, Currency: "eur", State: statemachine.Created, Version: 1, CreatedAt: base, UpdatedAt: base}
}

// purchasesWithJobs inserts n purchases, pur_000..., each with a job due
// at base + i ms, in one transaction.
func purchasesWithJobs(t testing.TB, s reconcile.Store, n int) {
	t.Helper()
	ctx := context.Background()
	err := s.InTx(ctx, func(tx reconcile.Tx) error {
		for i := range n {
			id := fmt.Sprintf("pur_%03d", i)
			if err := tx.InsertPurchase(ctx, purchase(id)); err != nil {
				return err
			}
			if err := tx.InsertJob(ctx, reconcile.Job{PurchaseID: id, RunAt: base.Add(time.Duration(i) * time.Millisecond)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("insert %d purchases with jobs: %v", n, err)
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) reconcile.Store {
		s, _ := newStoreClock(t, now)
		return s
	})
}

// TestSchemaTransitionTableMatchesStatemachine: each machine's tables
// in the database (the purchase's, the refund's, the dispute's) are its
// states and its moves in package statemachine.
func TestSchemaTransitionTableMatchesStatemachine(t *testing.T) {
	t.Parallel()
	_, path := newStore(t)
	db := rawDB(t, path)
	for _, tc := range []struct {
		moves, states string
		m             statemachine.Machine
	}{
		{"allowed_transitions", "purchase_states", statemachine.Purchase},
		{"refund_allowed_transitions", "refund_states", statemachine.Refund},
		{"dispute_allowed_transitions", "dispute_states", statemachine.Dispute},
	} {
		var got []statemachine.Pair
		for _, row := range queryStrings(t, db, `SELECT from_state || ' ' || to_state FROM `+tc.moves) {
			from, to, _ := strings.Cut(row, " ")
			got = append(got, statemachine.Pair{From: statemachine.State(from), To: statemachine.State(to)})
		}
		want := tc.m.Transitions()
		cmp := func(a, b statemachine.Pair) int { return strings.Compare(a.String(), b.String()) }
		slices.SortFunc(got, cmp)
		slices.SortFunc(want, cmp)
		if !slices.Equal(got, want) {
			t.Fatalf("%s = %v, statemachine.%s.Transitions() = %v", tc.moves, got, tc.m.Name(), want)
		}

		states := queryStrings(t, db, `SELECT state FROM `+tc.states+` ORDER BY state`)
		var wantStates []string
		for _, s := range tc.m.States() {
			wantStates = append(wantStates, string(s))
		}
		slices.Sort(wantStates)
		if !slices.Equal(states, wantStates) {
			t.Fatalf("%s = %v, want %v", tc.states, states, wantStates)
		}
	}
}

// queryStrings returns the one column of every row of query.
func queryStrings(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRawSQLCannotWriteForbiddenMove checks that the guard is the
// database's: statements the store never wrote are refused too.
func TestRawSQLCannotWriteForbiddenMove(t *testing.T) {
	t.Parallel()
	_, path := newStore(t)
	db := rawDB(t, path)
	ctx := t.Context()
	insertRaw(t, db, "pur_ok", statemachine.Submitted, statemachine.Succeeded)
	insertRaw(t, db, "pur_new")

	_, err := db.ExecContext(ctx, `UPDATE purchases SET state = 'uncertain' WHERE id = 'pur_ok'`)
	wantRaise(t, "succeeded -> uncertain", err, "forbidden transition succeeded -> uncertain", "pur_ok")

	_, err = db.ExecContext(ctx, `UPDATE purchases SET state = 'succeeded' WHERE id = 'pur_new'`)
	wantRaise(t, "created -> succeeded", err, "forbidden transition created -> succeeded", "pur_new")

	_, err = db.ExecContext(ctx, `UPDATE purchases SET state = 'bogus' WHERE id = 'pur_new'`)
	wantRaise(t, "created -> unknown state", err, "forbidden transition created -> bogus")

	// One bad row refuses the whole statement: pur_new's allowed move is
	// undone with it.
	_, err = db.ExecContext(ctx, `UPDATE purchases SET state = 'submitted'`)
	wantRaise(t, "bulk update", err, "succeeded -> submitted")
	if st := queryString(t, db, `SELECT state FROM purchases WHERE id = 'pur_new'`); st != "created" {
		t.Fatalf("pur_new is %s after the refused bulk update, want created", st)
	}

	_, err = db.ExecContext(ctx, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at)
VALUES ('pur_x', 'cus_1', 100, 'eur', 'succeeded', 1, 0, 0)`)
	wantRaise(t, "insert in succeeded", err, "forbidden transition", "pur_x", "succeeded")
	_, err = db.ExecContext(ctx, `INSERT OR REPLACE INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at)
VALUES ('pur_ok', 'cus_1', 100, 'eur', 'submitted', 1, 0, 0)`)
	wantRaise(t, "insert or replace in submitted", err, "forbidden transition", "submitted")

	// The audit cannot record a forbidden move either.
	_, err = db.ExecContext(ctx, `INSERT INTO transitions (purchase_id, from_state, to_state, cause, at)
VALUES ('pur_ok', 'succeeded', 'uncertain', 'webhook', 0)`)
	wantRaise(t, "transition succeeded -> uncertain", err, "forbidden transition succeeded -> uncertain", "purchase pur_ok")

	// Writing the same state is no move, and other columns are free.
	exec(t, db, `UPDATE purchases SET state = state, description = 'x' WHERE id = 'pur_ok'`)
	exec(t, db, `UPDATE purchases SET state = 'submitted' WHERE id = 'pur_new'`)

	if st := queryString(t, db, `SELECT state FROM purchases WHERE id = 'pur_ok'`); st != "succeeded" {
		t.Fatalf("pur_ok state = %q; want succeeded", st)
	}
}

// TestStateCountsFollowRawSQL writes purchases by SQL, many in one
// statement, as a script would: the counts the triggers of migration
// 00007 keep stay equal to a GROUP BY of the purchases, and a refused
// statement or a rolled-back transaction counts nothing.
func TestStateCountsFollowRawSQL(t *testing.T) {
	t.Parallel()
	s, path := newStore(t)
	db := rawDB(t, path)
	ctx := t.Context()
	plain := func() map[statemachine.State]int {
		t.Helper()
		m := map[statemachine.State]int{}
		for _, st := range statemachine.States {
			m[st] = 0
		}
		rows, err := db.QueryContext(ctx, `SELECT state, count(*) FROM purchases GROUP BY state`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var st string
			var n int
			if err := rows.Scan(&st, &n); err != nil {
				t.Fatal(err)
			}
			m[statemachine.State(st)] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	check := func(after string) {
		t.Helper()
		var got map[statemachine.State]int
		err := s.InTx(ctx, func(tx reconcile.Tx) error {
			var err error
			got, err = tx.CountByState(ctx)
			return err
		})
		if err != nil {
			t.Fatalf("CountByState: %v", err)
		}
		if want := plain(); !maps.Equal(got, want) {
			t.Fatalf("after %s: CountByState = %v, a GROUP BY says %v", after, got, want)
		}
	}
	for _, tc := range []struct{ name, sql string }{
		{"1000 inserts", `WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < 1000)
INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at)
SELECT 'pur_' || n, 'cus_1', 100, 'eur', 'created', 1, 0, 0 FROM i`},
		{"256 moves", `UPDATE purchases SET state = 'submitted' WHERE rowid <= 256`},
		{"moves to two states", `UPDATE purchases SET state = CASE WHEN id < 'pur_2' THEN 'succeeded' ELSE 'uncertain' END
WHERE state = 'submitted'`},
		{"a write that keeps every state", `UPDATE purchases SET version = version + 1, state = state`},
		{"deletes", `DELETE FROM purchases WHERE id IN ('pur_1', 'pur_200', 'pur_999')`},
	} {
		exec(t, db, tc.sql)
		check(tc.name)
	}
	if _, err := db.ExecContext(ctx, `UPDATE purchases SET state = 'succeeded' WHERE state = 'created'`); err == nil {
		t.Fatal("created -> succeeded was not refused")
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE purchases SET state = 'submitted' WHERE state = 'created'`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	check("a refusal and a rollback")
}

// TestRefusalUndoesOnlyTheStatement checks, in raw SQL, what the store's
// "a refused write leaves the transaction usable" rests on: RAISE(ABORT)
// and constraint failures undo their statement, not the transaction.
func TestRefusalUndoesOnlyTheStatement(t *testing.T) {
	t.Parallel()
	_, path := newStore(t)
	db := rawDB(t, path)
	ctx := t.Context()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ins := `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at)
VALUES (?1, 'cus_1', 100, 'eur', 'created', 1, 0, 0)`
	if _, err := tx.ExecContext(ctx, ins, "pur_a"); err != nil {
		t.Fatal(err)
	}
	_, err = tx.ExecContext(ctx, `UPDATE purchases SET state = 'succeeded' WHERE id = 'pur_a'`)
	wantRaise(t, "forbidden move in a transaction", err, "forbidden transition created -> succeeded")
	if _, err := tx.ExecContext(ctx, ins, "pur_a"); err == nil {
		t.Fatal("duplicate insert succeeded")
	}
	if _, err := tx.ExecContext(ctx, ins, "pur_b"); err != nil {
		t.Fatalf("insert after two refusals: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit after refusals: %v", err)
	}
	if n := queryString(t, db, `SELECT group_concat(id || ':' || state, ',') FROM (SELECT id, state FROM purchases ORDER BY id)`); n != "pur_a:created,pur_b:created" {
		t.Fatalf("purchases after commit: %s", n)
	}
}

func TestAuditTablesAreAppendOnly(t *testing.T) {
	t.Parallel()
	_, path := newStore(t)
	db := rawDB(t, path)
	insertRaw(t, db, "pur_1")
	exec(t, db, `INSERT INTO transitions (purchase_id, from_state, to_state, cause, at) VALUES ('pur_1', 'created', 'submitted', 'submit', 0)`)
	exec(t, db, `INSERT INTO provider_attempts (purchase_id, op, outcome, applied, at) VALUES ('pur_1', 'create', 'unknown', 1, 0)`)
	exec(t, db, `INSERT INTO operator_actions (purchase_id, operator, action, at) VALUES ('pur_1', 'alice', 'note', 0)`)

	for table, col := range map[string]string{"transitions": "actor", "provider_attempts": "actor", "operator_actions": "operator"} {
		for _, stmt := range []string{
			"UPDATE " + table + " SET " + col + " = 'someone else'",
			"UPDATE " + table + " SET id = id + 100 WHERE id = 1",
			"DELETE FROM " + table, // no TRUNCATE in SQLite: a DELETE without WHERE fires the triggers too
			"DELETE FROM " + table + " WHERE id = 1",
			"REPLACE INTO " + table + " SELECT * FROM " + table,
			"INSERT OR REPLACE INTO " + table + " (id, purchase_id, " + col + ") SELECT id, purchase_id, 'mallory' FROM " + table,
		} {
			_, err := db.ExecContext(t.Context(), stmt)
			wantRaise(t, stmt, err, table, "append-only")
		}
		if n := queryString(t, db, "SELECT count(*) || ':' || min(id) FROM "+table); n != "1:1" {
			t.Fatalf("%s has count:min(id) %s, want 1:1", table, n)
		}
	}
	// The purchase they refer to cannot go either.
	if _, err := db.ExecContext(t.Context(), `DELETE FROM purchases WHERE id = 'pur_1'`); err == nil {
		t.Fatal("deleting a purchase with an audit trail succeeded")
	}
}

// TestAuditFindingsRefuseChanges: a finding is evidence. The database
// lets it be closed once, through the close columns alone, and refuses
// every other change, whatever SQL path tries.
func TestAuditFindingsRefuseChanges(t *testing.T) {
	t.Parallel()
	_, path := newStore(t)
	db := rawDB(t, path)
	ctx := t.Context()
	exec(t, db, `INSERT INTO audit_findings (provider, payment_id, kind, amount, currency, found_at)
VALUES ('stripe', 'pi_1', 'orphan_charge', 100, 'eur', 0), ('stripe', 'pi_2', 'orphan_charge', 200, 'eur', 0)`)
	snapshot := func() string {
		t.Helper()
		return queryString(t, db, `SELECT group_concat(row, ';') FROM (SELECT json_array(id, provider, payment_id, kind, purchase_id,
    amount, currency, status, evidence, found_at, closed_at, closed_by, close_note) AS row FROM audit_findings ORDER BY id)`)
	}
	unchanged := func(stmt string, check func(err error)) {
		t.Helper()
		before := snapshot()
		_, err := db.ExecContext(ctx, stmt)
		check(err)
		if after := snapshot(); after != before {
			t.Fatalf("%s changed the findings:\n before %s\n after  %s", stmt, before, after)
		}
	}
	refused := func(stmt string, parts ...string) {
		t.Helper()
		unchanged(stmt, func(err error) { t.Helper(); wantRaise(t, stmt, err, parts...) })
	}
	for _, stmt := range []string{
		`UPDATE audit_findings SET amount = 1 WHERE payment_id = 'pi_1'`,
		`UPDATE audit_findings SET amount = 1, closed_at = 5, closed_by = 'mallory', close_note = 'x' WHERE payment_id = 'pi_1'`,
		`UPDATE audit_findings SET close_note = 'x' WHERE payment_id = 'pi_1'`, // not a close: closed_at stays NULL
		`UPDATE audit_findings SET id = id + 100 WHERE payment_id = 'pi_1'`,
	} {
		refused(stmt, "audit_findings", "only closing may change finding")
	}
	unchanged(`UPDATE audit_findings SET closed_at = 5, closed_by = '', close_note = 'x' WHERE payment_id = 'pi_1'`, func(err error) {
		var se *driver.Error
		if !errors.As(err, &se) || se.Code() != sqlite3.SQLITE_CONSTRAINT_CHECK || !strings.Contains(se.Error(), "audit_findings_closed_check") {
			t.Fatalf("close without an operator: got %v, want audit_findings_closed_check to fail", err)
		}
	})

	// Closing, through the close columns alone, is the one change.
	exec(t, db, `UPDATE audit_findings SET closed_at = 5, closed_by = 'alice', close_note = 'refunded' WHERE payment_id = 'pi_1'`)
	for _, stmt := range []string{
		`UPDATE audit_findings SET closed_at = 6, closed_by = 'bob', close_note = 'again' WHERE payment_id = 'pi_1'`,
		`UPDATE audit_findings SET closed_at = NULL, closed_by = '', close_note = '' WHERE payment_id = 'pi_1'`,
	} {
		refused(stmt, "audit_findings", "finding 1 is closed")
	}
	refused(`UPDATE audit_findings SET evidence = 'x'`, "audit_findings", "UPDATE refused") // one closed row refuses the whole statement
	for _, stmt := range []string{
		`DELETE FROM audit_findings WHERE payment_id = 'pi_2'`,
		`DELETE FROM audit_findings`,
		`REPLACE INTO audit_findings SELECT * FROM audit_findings`,
	} {
		refused(stmt, "audit_findings", "append-only")
	}
	// An insert of a stored (provider, payment_id, kind) is ignored
	// before any conflict clause is reached: INSERT OR REPLACE would
	// delete the finding, an upsert rewrite it. The first one stays.
	for _, stmt := range []string{
		`INSERT OR REPLACE INTO audit_findings (provider, payment_id, kind, amount, found_at) VALUES ('stripe', 'pi_1', 'orphan_charge', 1, 9)`,
		`INSERT INTO audit_findings (provider, payment_id, kind, amount, found_at) VALUES ('stripe', 'pi_2', 'orphan_charge', 1, 9)
ON CONFLICT (provider, payment_id, kind) DO UPDATE SET evidence = 'rewritten'`,
	} {
		unchanged(stmt, func(err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v, want it ignored", stmt, err)
			}
		})
	}
}

func TestReady(t *testing.T) {
	t.Parallel()
	path := dbPath(t)
	s := openAt(t, sqlite.Config{Path: path})
	err := s.Ready(t.Context())
	if !errors.Is(err, reconcile.ErrNotMigrated) {
		t.Fatalf("Ready on a fresh file: %v, want ErrNotMigrated", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("Ready's error %q does not name the file", err)
	}
	db := rawDB(t, path)
	if n := queryString(t, db, `SELECT count(*) FROM sqlite_schema`); n != "0" {
		t.Fatalf("Ready wrote to the database: %s schema objects", n)
	}
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if err := s.Ready(t.Context()); err != nil {
		t.Fatalf("Ready after Migrate: %v", err)
	}
	current, latest, err := migrations.Version(t.Context(), db, migrations.SQLite)
	if err != nil || current != latest || latest < 2 {
		t.Fatalf("Version = %d, %d, %v; want the latest (at least 2) twice", current, latest, err)
	}
}

// TestMigrationsDownUp checks that every Down undoes its Up.
func TestMigrationsDownUp(t *testing.T) {
	t.Parallel()
	s, path := newStore(t)
	db := rawDB(t, path)
	fsys, err := migrations.FS(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, fsys)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(t.Context(), 0); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	left := queryString(t, db, `SELECT group_concat(name, ',') FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'`)
	if left != goose.DefaultTablename {
		t.Fatalf("after down to 0, the schema has %q; want only %s", left, goose.DefaultTablename)
	}
	if err := s.Ready(t.Context()); !errors.Is(err, reconcile.ErrNotMigrated) {
		t.Fatalf("Ready after down to 0: %v, want ErrNotMigrated", err)
	}
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate after Down: %v", err)
	}
	if err := s.Ready(t.Context()); err != nil {
		t.Fatalf("Ready after Migrate again: %v", err)
	}
}

// TestListUnmatchedEventsPlan: the sweep's query reads the unmatched
// events from webhook_inbox_unmatched_idx in its order, without sorting
// them.
func TestListUnmatchedEventsPlan(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	rows, err := s.DB().QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+sqlite.ListUnmatchedEventsSQL, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notUsed int
		var detail string
		if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(plan, "\n")
	if !strings.Contains(all, "webhook_inbox_unmatched_idx") || strings.Contains(all, "TEMP B-TREE") {
		t.Errorf("ListUnmatchedEvents does not read webhook_inbox_unmatched_idx in order:\n%s", all)
	}
}

// TestPeriodicQueriesUseTheirIndexes: each query payrecon runs on a
// schedule (the gauges, the escalation and rescue sweeps, the operator
// list, the audit's window and watermark) reads an index that holds only
// what it asks for, never every purchase (migration 00007 and before);
// CountByState reads the counts, not the purchases. The plans are
// SQLite's without statistics, as a store that never ran ANALYZE has
// them.
func TestPeriodicQueriesUseTheirIndexes(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	openFindings, findingsArgs := sqlite.ListFindingsSQL("", reconcile.AnyAccount, false, 0)
	accountFindings, accountFindingsArgs := sqlite.ListFindingsSQL("", reconcile.OnlyAccount("acct_1A"), false, 0)
	for _, tc := range []struct {
		name   string
		sql    string
		args   []any
		index  string // the plan reads it
		noSort bool   // and needs no sort
	}{
		{"CountByState", sqlite.CountByStateSQL, nil, "purchase_state_counts", true},
		{"CountEscalatedByAccount", sqlite.CountEscalatedByAccountSQL, nil, "purchases_escalated_at_idx", false},
		{"OldestUncertainSince", sqlite.OldestUncertainSinceSQL, nil, "purchases_uncertain_since_idx", true},
		{"CountOpenFindings", sqlite.CountOpenFindingsSQL, nil, "audit_findings_open_idx", false},
		{"ListOverdueUncertain", sqlite.ListOverdueUncertainSQL, []any{base.UnixMicro(), 500}, "purchases_overdue_idx", true},
		{"ListEscalated", sqlite.ListEscalatedSQL, nil, "purchases_escalated_at_idx", false},
		{"ListFindings(open)", openFindings, findingsArgs, "audit_findings_open_idx", true},
		{"ListSubmittedBetween", sqlite.ListSubmittedBetweenSQL, []any{"succeeded", 0, base.UnixMicro(), `["pi_1"]`}, "purchases_first_attempt_idx", false},
		{"GetAuditRun", sqlite.GetAuditRunSQL, []any{"scheduled"}, "PRIMARY KEY", true},
		// The rescue sweep's candidates, as the claim of expired leases
		// selects them: the few leased open jobs, not every open job.
		{"ClaimExpiredJobs candidates", `SELECT id, 1 AS taken FROM jobs
WHERE done_at IS NULL AND lease_owner IS NOT NULL AND lease_expires_at <= ?1
ORDER BY lease_expires_at LIMIT ?2`, []any{base.UnixMicro(), 16}, "jobs_leased_idx", true},
		// The refunds' (migration 00008).
		{"CountRefundsByState", sqlite.CountRefundsByStateSQL, nil, "refunds_state_idx", true},
		{"OldestUncertainRefundSince", sqlite.OldestUncertainRefundSinceSQL, nil, "refunds_uncertain_since_idx", true},
		{"ListOverdueUncertainRefunds", sqlite.ListOverdueUncertainRefundsSQL, []any{base.UnixMicro(), 500}, "refunds_overdue_idx", true},
		{"ListEscalatedRefunds", sqlite.ListEscalatedRefundsSQL, nil, "refunds_escalated_at_idx", true},
		// The disputes' (migration 00015).
		{"ListOpenDisputes", sqlite.ListOpenDisputesSQL, nil, "disputes_open_idx", true},
		// The books' accounts (migration 00016): one probe per account.
		{"ListAccounts", sqlite.ListAccountsSQL, nil, "purchases_account_idx", true},
		// The operator lists of one account: the same partial indexes,
		// each row's purchase probed by its key.
		{"ListEscalated(account)", sqlite.ListEscalatedAccountSQL, []any{"acct_1A"}, "purchases_escalated_at_idx", false},
		{"ListEscalatedRefunds(account)", sqlite.ListEscalatedRefundsAccountSQL, []any{"acct_1A"}, "refunds_escalated_at_idx", true},
		{"ListOpenDisputes(account)", sqlite.ListOpenDisputesAccountSQL, []any{"acct_1A"}, "disputes_open_idx", true},
		{"ListFindings(open, account)", accountFindings, accountFindingsArgs, "audit_findings_open_idx", true},
	} {
		rows, err := s.DB().QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+tc.sql, tc.args...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notUsed int
			var detail string
			if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		all := strings.Join(plan, "\n")
		if !strings.Contains(all, tc.index) || (tc.noSort && strings.Contains(all, "TEMP B-TREE")) {
			t.Errorf("%s does not read %s%s:\n%s", tc.name, tc.index, map[bool]string{true: " in order"}[tc.noSort], all)
		}
		if strings.Contains(all, "SCAN purchases") || strings.Contains(all, "purchases_state_idx") {
			t.Errorf("%s reads every purchase:\n%s", tc.name, all)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	missing := filepath.Join(dir, "no", "such", "dir")
	_, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(missing, "payrecon.db")})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open in a missing directory: %v, want an error wrapping fs.ErrNotExist", err)
	}
	for _, want := range []string{"sqlite: open", missing, "does not exist"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("Open error %q does not mention %q", err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "no")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open created the missing directory (stat: %v)", err)
	}

	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(file, "payrecon.db")}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("Open under a file: %v, want an error saying it is not a directory", err)
	}

	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("this is not a database\n", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Open(t.Context(), sqlite.Config{Path: garbage}); err == nil || !strings.Contains(err.Error(), garbage) {
		t.Fatalf("Open of a file that is not a database: %v, want an error naming it", err)
	}

	for _, cfg := range []sqlite.Config{
		{},
		{Path: ":memory:"},
		{Path: "file:payrecon.db?mode=memory"},
		{Path: filepath.Join(dir, "what?.db")},
		{Path: filepath.Join(dir, "x.db"), BusyTimeout: -time.Second},
		{Path: filepath.Join(dir, "x.db"), Synchronous: "OFF"},
		{Path: filepath.Join(dir, "x.db"), Synchronous: "EXTRA"},
		{Path: filepath.Join(dir, "x.db"), Synchronous: "1"},
	} {
		if _, err := sqlite.Open(t.Context(), cfg); !errors.Is(err, reconcile.ErrInvalid) {
			t.Errorf("Open(%+v) = %v, want ErrInvalid", cfg, err)
		}
	}
	_, err = sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(dir, "x.db"), Synchronous: "off"})
	for _, want := range []string{`Config.Synchronous "off"`, "FULL", "NORMAL"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open with synchronous off: %v, want an error mentioning %q", err, want)
		}
	}
}

func TestOpenRelativePath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	s := openAt(t, sqlite.Config{Path: "payrecon.db"})
	if want := filepath.Join(dir, "payrecon.db"); s.Path() != want {
		t.Fatalf("Path() = %q, want %q", s.Path(), want)
	}
	if _, err := os.Stat(filepath.Join(dir, "payrecon.db")); err != nil {
		t.Fatalf("the database file: %v", err)
	}
}

func TestConnectionSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		busy        time.Duration
		synchronous string
		wantBusy    string
		wantSync    string // PRAGMA synchronous: 1 NORMAL, 2 FULL
	}{
		{0, "", "5000", "2"},
		{250 * time.Millisecond, "FULL", "250", "2"},
		{0, "NORMAL", "5000", "1"},
		{0, "normal", "5000", "1"},
	} {
		cfg := sqlite.Config{Path: dbPath(t), BusyTimeout: tc.busy, Synchronous: tc.synchronous}
		s := openAt(t, cfg)
		db := s.DB()
		for pragma, want := range map[string]string{
			"journal_mode": "wal",
			"foreign_keys": "1",
			"synchronous":  tc.wantSync,
			"busy_timeout": tc.wantBusy,
		} {
			if got := queryString(t, db, "PRAGMA "+pragma); got != want {
				t.Errorf("BusyTimeout %s, Synchronous %q: PRAGMA %s = %s, want %s", tc.busy, tc.synchronous, pragma, got, want)
			}
		}
		if n := db.Stats().MaxOpenConnections; n != 1 {
			t.Errorf("MaxOpenConnections = %d, want 1", n)
		}
	}
}

// TestInTxHoldsTheWriteLock shows BEGIN IMMEDIATE: even a transaction that
// only reads holds the write lock from its start, so no other connection
// can begin writing until it ends.
func TestInTxHoldsTheWriteLock(t *testing.T) {
	t.Parallel()
	s, path := newStore(t)
	other, err := sql.Open("sqlite", path) // no busy timeout: fail at once
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := t.Context()
	tryWrite := func() error {
		c, err := other.Conn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return err
		}
		_, err = c.ExecContext(ctx, "ROLLBACK")
		return err
	}
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		if _, err := tx.CountByState(ctx); err != nil {
			return err
		}
		err := tryWrite()
		var se *driver.Error
		if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY {
			return fmt.Errorf("another connection began writing during InTx: %v, want SQLITE_BUSY", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tryWrite(); err != nil {
		t.Fatalf("another connection after InTx: %v", err)
	}
}

// TestBusyTimeout: a process that cannot get the write lock within its
// busy timeout gets ErrLockTimeout, naming the file, and its transaction
// never ran.
func TestBusyTimeout(t *testing.T) {
	t.Parallel()
	holder, path := newStore(t)
	waiter := openAt(t, sqlite.Config{Path: path, BusyTimeout: 50 * time.Millisecond})
	holding, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- holder.InTx(context.Background(), func(reconcile.Tx) error {
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	ran := false
	err := waiter.InTx(t.Context(), func(reconcile.Tx) error { ran = true; return nil })
	close(release)
	if herr := <-done; herr != nil {
		t.Fatalf("the holder's InTx: %v", herr)
	}
	if !errors.Is(err, sqlite.ErrLockTimeout) || ran {
		t.Fatalf("InTx while another process holds the write lock: %v (fn ran: %v), want ErrLockTimeout without running fn", err, ran)
	}
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("ErrLockTimeout error %q does not name the file", err)
	}
	if err := waiter.InTx(t.Context(), func(reconcile.Tx) error { return nil }); err != nil {
		t.Fatalf("InTx once the lock is free: %v", err)
	}
}

// TestLockTimeoutIsUnavailable: a lock timeout is of kind unavailable
// (retry later), not reconcile.ErrBusy (a worker holds the job).
func TestLockTimeoutIsUnavailable(t *testing.T) {
	err := fmt.Errorf("sqlite: transaction: begin: %w", sqlite.ErrLockTimeout)
	if !errors.Is(err, reconcile.ErrUnavailable) || reconcile.KindOf(err) != reconcile.KindUnavailable {
		t.Fatalf("%v: kind %q, want %q", err, reconcile.KindOf(err), reconcile.KindUnavailable)
	}
	if errors.Is(err, reconcile.ErrBusy) || errors.Is(reconcile.ErrUnavailable, sqlite.ErrLockTimeout) {
		t.Fatalf("%v: ErrLockTimeout must be neither reconcile.ErrBusy nor every unavailable error", err)
	}
}

// TestStoreCallInsideInTx: a Store method called from inside InTx needs
// the connection the transaction holds. It fails with ErrLockTimeout
// after the busy timeout instead of waiting forever.
func TestStoreCallInsideInTx(t *testing.T) {
	t.Parallel()
	path := dbPath(t)
	s := openAt(t, sqlite.Config{Path: path, BusyTimeout: 50 * time.Millisecond})
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	err := s.InTx(t.Context(), func(reconcile.Tx) error {
		_, err := s.ClaimJobs(t.Context(), "w1", 1, time.Minute)
		return err
	})
	if !errors.Is(err, sqlite.ErrLockTimeout) || !strings.Contains(err.Error(), "inside InTx") {
		t.Fatalf("ClaimJobs inside InTx: %v, want ErrLockTimeout explaining the nesting", err)
	}
}

// TestConcurrentProcesses has four stores on one file, as four processes
// would, claim and complete 200 jobs at once: each job is handed out
// exactly once, and no SQLITE_BUSY escapes (the writers queue on the
// write lock within the busy timeout).
func TestConcurrentProcesses(t *testing.T) {
	t.Parallel()
	const (
		jobs      = 200
		processes = 4
	)
	now := base.Add(time.Hour)
	first, path := newStoreClock(t, fixed(now))
	purchasesWithJobs(t, first, jobs)
	stores := []*sqlite.Store{first}
	for len(stores) < processes {
		stores = append(stores, openAt(t, sqlite.Config{Path: path, Now: fixed(now)}))
	}
	ctx := t.Context()
	start := make(chan struct{})
	var wg sync.WaitGroup
	got := make([][]reconcile.Lease, processes)
	errs := make([]error, processes)
	for p, s := range stores {
		wg.Go(func() {
			<-start
			owner := fmt.Sprintf("w%d", p)
			for {
				leases, err := s.ClaimJobs(ctx, owner, 7, time.Minute)
				if err != nil {
					errs[p] = err
					return
				}
				if len(leases) == 0 {
					return
				}
				got[p] = append(got[p], leases...)
				// Finish each job under its lease, as a worker does.
				for _, l := range leases {
					err := s.InTx(ctx, func(tx reconcile.Tx) error {
						if err := tx.CheckLease(ctx, l); err != nil {
							return err
						}
						return tx.CompleteJob(ctx, l.PurchaseID, now)
					})
					if err != nil {
						errs[p] = err
						return
					}
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent processes: %v", err)
	}
	seen := map[string]string{}
	for p, leases := range got {
		owner := fmt.Sprintf("w%d", p)
		for _, l := range leases {
			if prev, dup := seen[l.PurchaseID]; dup {
				t.Fatalf("job %s handed to %s and %s", l.PurchaseID, prev, owner)
			}
			if l.Owner != owner || l.Token != 1 || l.TakenOver {
				t.Fatalf("lease %+v: want owner %s, token 1, not taken over", l, owner)
			}
			seen[l.PurchaseID] = owner
		}
	}
	if len(seen) != jobs {
		t.Fatalf("%d jobs handed out, want %d", len(seen), jobs)
	}
	var open int
	err := first.InTx(ctx, func(tx reconcile.Tx) error {
		for i := range jobs {
			j, err := tx.GetJob(ctx, fmt.Sprintf("pur_%03d", i))
			if err != nil {
				return err
			}
			if j.DoneAt.IsZero() {
				open++
			}
		}
		return nil
	})
	if err != nil || open != 0 {
		t.Fatalf("after the race: %d jobs not done (%v)", open, err)
	}
}

// TestCheckedLeaseHoldsOffOtherProcesses shows the fence: while a
// transaction that checked its lease is open, another process's claim
// waits for it, and then sees what it committed (the job released, not a
// lease to take over).
func TestCheckedLeaseHoldsOffOtherProcesses(t *testing.T) {
	t.Parallel()
	c := testclock.New(base)
	s, path := newStoreClock(t, c.Now)
	late := base.Add(time.Minute + time.Second) // the lease has expired by then
	other := openAt(t, sqlite.Config{Path: path, Now: fixed(late)})
	ctx := t.Context()
	purchasesWithJobs(t, s, 1)
	leases, err := s.ClaimJobs(ctx, "w1", 1, time.Minute)
	if err != nil || len(leases) != 1 {
		t.Fatalf("ClaimJobs = %v, %v", leases, err)
	}
	l := leases[0]
	type result struct {
		leases []reconcile.Lease
		err    error
	}
	claimed := make(chan result, 1)
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		c.Set(l.ExpiresAt.Add(-time.Second))
		if err := tx.CheckLease(ctx, l); err != nil {
			return err
		}
		go func() {
			got, err := other.ClaimJobs(ctx, "w2", 1, time.Minute)
			claimed <- result{got, err}
		}()
		return tx.RescheduleJob(ctx, l.PurchaseID, late)
	})
	if err != nil {
		t.Fatal(err)
	}
	r := <-claimed
	if r.err != nil || len(r.leases) != 1 || r.leases[0].TakenOver || r.leases[0].Token != 2 {
		t.Fatalf("the other process's claim = %+v, %v; want the released job, token 2, not taken over", r.leases, r.err)
	}
}

func TestErrorsNameTheFailure(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()
	p := purchase("pur_1")
	if err := s.InTx(ctx, func(tx reconcile.Tx) error { return tx.InsertPurchase(ctx, p) }); err != nil {
		t.Fatal(err)
	}
	p.State = statemachine.Succeeded
	err := s.InTx(ctx, func(tx reconcile.Tx) error { return tx.UpdatePurchase(ctx, p, statemachine.Created) })
	if !errors.Is(err, reconcile.ErrForbiddenTransition) {
		t.Fatalf("got %v, want ErrForbiddenTransition", err)
	}
	for _, want := range []string{"sqlite: update purchase pur_1", "forbidden transition created -> succeeded"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not mention %q", err, want)
		}
	}

	err = s.InTx(ctx, func(tx reconcile.Tx) error { return tx.InsertPurchase(ctx, purchase("pur_1")) })
	if !errors.Is(err, reconcile.ErrDuplicate) || !strings.Contains(err.Error(), "purchases.id") {
		t.Fatalf("duplicate id: got %v, want ErrDuplicate naming purchases.id", err)
	}

	bad := purchase("pur_2")
	bad.Amount = 0
	err = s.InTx(ctx, func(tx reconcile.Tx) error { return tx.InsertPurchase(ctx, bad) })
	if !errors.Is(err, reconcile.ErrInvalid) || !strings.Contains(err.Error(), "amount") {
		t.Fatalf("non-positive amount: got %v, want ErrInvalid naming amount", err)
	}
	bad = purchase("pur_3")
	bad.CreatedAt = time.Time{}
	err = s.InTx(ctx, func(tx reconcile.Tx) error { return tx.InsertPurchase(ctx, bad) })
	if !errors.Is(err, reconcile.ErrInvalid) || !strings.Contains(err.Error(), "created_at") {
		t.Fatalf("zero CreatedAt: got %v, want ErrInvalid naming created_at", err)
	}

	if _, err := s.ClaimJobs(ctx, "", 1, time.Second); !errors.Is(err, reconcile.ErrInvalid) {
		t.Fatalf("ClaimJobs with no owner: %v, want ErrInvalid", err)
	}
	for what, fn := range map[string]func(tx reconcile.Tx) error{
		"InsertJob": func(tx reconcile.Tx) error {
			return tx.InsertJob(ctx, reconcile.Job{PurchaseID: "pur_missing", RunAt: base})
		},
		"InsertTransition": func(tx reconcile.Tx) error {
			return tx.InsertTransition(ctx, reconcile.TransitionRecord{PurchaseID: "pur_missing", From: "created", To: "submitted", Cause: reconcile.CauseSubmit, At: base})
		},
		"InsertOperatorAction": func(tx reconcile.Tx) error {
			return tx.InsertOperatorAction(ctx, reconcile.OperatorAction{PurchaseID: "pur_missing", Operator: "alice", Action: "note", At: base})
		},
	} {
		if err := s.InTx(ctx, fn); !errors.Is(err, reconcile.ErrNotFound) {
			t.Fatalf("%s for an unknown purchase: %v, want ErrNotFound", what, err)
		}
	}
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		return tx.InsertOperatorAction(ctx, reconcile.OperatorAction{PurchaseID: "pur_1", Operator: "alice", Action: "delete", At: base})
	})
	if !errors.Is(err, reconcile.ErrInvalid) {
		t.Fatalf("unknown operator action: %v, want ErrInvalid", err)
	}
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		return tx.InsertTransition(ctx, reconcile.TransitionRecord{PurchaseID: "pur_1", From: "created", To: "succeeded", Cause: reconcile.CauseOperator, At: base})
	})
	if !errors.Is(err, reconcile.ErrForbiddenTransition) || errors.Is(err, reconcile.ErrNotFound) ||
		!strings.Contains(err.Error(), "forbidden transition created -> succeeded") {
		t.Fatalf("InsertTransition of a forbidden move: %v, want ErrForbiddenTransition naming the move", err)
	}

	// The refunds' refusals say what refused them.
	paid := purchase("pur_paid")
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		if err := tx.InsertPurchase(ctx, paid); err != nil {
			return err
		}
		paid.State = statemachine.Submitted
		if err := tx.UpdatePurchase(ctx, paid, statemachine.Created); err != nil {
			return err
		}
		paid.State, paid.Version, paid.ProviderPaymentID = statemachine.Succeeded, 2, "pi_paid"
		return tx.UpdatePurchase(ctx, paid, statemachine.Submitted)
	})
	if err != nil {
		t.Fatal(err)
	}
	refund := func(id, purchaseID string, amount int64) reconcile.Refund {
		req := &provider.RefundRequest{IdempotencyKey: reconcile.RefundKeyFor(id), RefundID: id, PurchaseID: purchaseID, PaymentID: "pi_paid", Amount: amount, Currency: "eur"}
		return reconcile.Refund{ID: id, PurchaseID: purchaseID, PaymentID: "pi_paid", Amount: amount, Currency: "eur", State: statemachine.Created, Version: 1,
			ProviderKey: req.IdempotencyKey, ProviderRequest: req, ParamsHash: req.Hash(), CreatedAt: base, UpdatedAt: base}
	}
	for _, tc := range []struct {
		r    reconcile.Refund
		kind error
		says []string
	}{
		{refund("ref_over", "pur_paid", paid.Amount+1), reconcile.ErrRefundExceeds,
			[]string{"sqlite: insert refund ref_over of pur_paid", "the payment's refunds would exceed its amount", "refund exceeds the payment"}},
		{refund("ref_open", "pur_1", 1), reconcile.ErrNotRefundable,
			[]string{"sqlite: insert refund ref_open of pur_1", "not refundable: purchase pur_1 is created"}},
	} {
		err := s.InTx(ctx, func(tx reconcile.Tx) error { return tx.InsertRefund(ctx, tc.r) })
		if !errors.Is(err, tc.kind) {
			t.Fatalf("InsertRefund(%s): %v, want %v", tc.r.ID, err, tc.kind)
		}
		for _, want := range tc.says {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not mention %q", err, want)
			}
		}
	}
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		return tx.InsertTransition(ctx, reconcile.TransitionRecord{PurchaseID: "pur_paid", RefundID: "ref_missing", From: "created", To: "submitted", Cause: reconcile.CauseSubmit, At: base})
	})
	if !errors.Is(err, reconcile.ErrNotFound) || !strings.Contains(err.Error(), "refund not found") {
		t.Fatalf("InsertTransition of an unknown refund: %v, want ErrNotFound saying the refund is not found", err)
	}

	// So do the disputes'.
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		return tx.InsertTransition(ctx, reconcile.TransitionRecord{PurchaseID: "pur_paid", DisputeID: "dsp_missing", From: "open", To: "won", Cause: reconcile.CauseWebhook, At: base})
	})
	if !errors.Is(err, reconcile.ErrNotFound) || !strings.Contains(err.Error(), "dispute not found") {
		t.Fatalf("InsertTransition of an unknown dispute: %v, want ErrNotFound saying the dispute is not found", err)
	}
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		d := reconcile.Dispute{ID: "dsp_1", ProviderDisputeID: "du_1", PurchaseID: "pur_paid", PaymentID: "pi_paid", Amount: 50, Currency: "eur",
			State: statemachine.Open, Version: 1, CreatedAt: base, UpdatedAt: base}
		if err := tx.InsertDispute(ctx, d); err != nil {
			return err
		}
		return tx.InsertRefund(ctx, refund("ref_disputed", "pur_paid", 1))
	})
	if !errors.Is(err, reconcile.ErrDisputed) {
		t.Fatalf("InsertRefund of a disputed payment: %v, want ErrDisputed", err)
	}
	for _, want := range []string{"sqlite: insert refund ref_disputed of pur_paid", "the payment is disputed", "payment disputed: payment pi_paid has dispute dsp_1 in state open"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not mention %q", err, want)
		}
	}
}

// TestTimesTruncateToTheMicrosecond: finer digits are dropped (toward the
// past, also before 1970), and the result comes back exactly, in UTC.
func TestTimesTruncateToTheMicrosecond(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()
	for i, tc := range []struct{ in, want time.Time }{
		{base.Add(999 * time.Nanosecond), base},
		{base.Add(time.Microsecond + 1), base.Add(time.Microsecond)},
		{time.Date(1969, 12, 31, 23, 59, 59, 999_999_500, time.UTC), time.Date(1969, 12, 31, 23, 59, 59, 999_999_000, time.UTC)},
		{time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.FixedZone("x", 3600)), time.Date(9999, 12, 31, 22, 59, 59, 999_999_000, time.UTC)},
	} {
		p := purchase(fmt.Sprintf("pur_%d", i))
		p.CreatedAt = tc.in
		var got reconcile.Purchase
		err := s.InTx(ctx, func(tx reconcile.Tx) error {
			if err := tx.InsertPurchase(ctx, p); err != nil {
				return err
			}
			var err error
			got, err = tx.GetPurchase(ctx, p.ID)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if got.CreatedAt != tc.want {
			t.Errorf("CreatedAt %s came back as %s, want %s", tc.in, got.CreatedAt, tc.want)
		}
	}
}

// BenchmarkClaimJobs measures one claim of 10 due jobs out of 1000 and the
// release of their leases: two write transactions.
func BenchmarkClaimJobs(b *testing.B) {
	s, _ := newStoreClock(b, fixed(base.Add(time.Hour)))
	purchasesWithJobs(b, s, 1000)
	ctx := context.Background()
	for b.Loop() {
		leases, err := s.ClaimJobs(ctx, "w1", 10, time.Minute)
		if err != nil || len(leases) != 10 {
			b.Fatalf("ClaimJobs = %d leases, %v", len(leases), err)
		}
		if _, err := s.ReleaseLeases(ctx, "w1"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRawSQLCannotBreakTheRefundLimits checks that the refunds' guard and
// limits are the database's: statements the store never wrote are
// refused too, with the messages the store translates.
func TestRawSQLCannotBreakTheRefundLimits(t *testing.T) {
	t.Parallel()
	_, path := newStore(t)
	db := rawDB(t, path)
	ctx := t.Context()
	insertRaw(t, db, "pur_ok", statemachine.Submitted)
	exec(t, db, `UPDATE purchases SET state = 'succeeded', provider_payment_id = 'pi_1' WHERE id = 'pur_ok'`)
	insertRaw(t, db, "pur_open", statemachine.Submitted, statemachine.Uncertain)
	insert := func(id, purchase, payment string, amount int, state string) error {
		_, err := db.ExecContext(ctx, `INSERT INTO refunds (id, purchase_id, payment_id, amount, currency, state, version,
    provider_key, provider_request, params_hash, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, 'eur', ?5, 1, 'payrecon-' || ?1, '{}', 'h', 0, 0)`, id, purchase, payment, amount, state)
		return err
	}
	wantRaise(t, "a refund inserted in submitted", insert("ref_x", "pur_ok", "pi_1", 1, "submitted"), "forbidden transition", "refund ref_x inserted in state submitted")
	wantRaise(t, "a refund of an uncertain purchase", insert("ref_x", "pur_open", "pi_x", 1, "created"), "not refundable", "purchase pur_open is uncertain")
	wantRaise(t, "a refund of another payment", insert("ref_x", "pur_ok", "pi_2", 1, "created"), "not refundable", "pi_2", "pur_ok")
	wantRaise(t, "a refund of more than the payment", insert("ref_x", "pur_ok", "pi_1", 101, "created"), "refund exceeds the payment", "pi_1", "101 of its 100")
	if err := insert("ref_1", "pur_ok", "pi_1", 100, "created"); err != nil {
		t.Fatal(err)
	}
	wantRaise(t, "a second refund past the payment", insert("ref_x", "pur_ok", "pi_1", 1, "created"), "refund exceeds the payment", "101 of its 100")
	_, err := db.ExecContext(ctx, `UPDATE refunds SET state = 'failed' WHERE id = 'ref_1'`)
	wantRaise(t, "created -> failed", err, "forbidden transition created -> failed", "ref_1")
	_, err = db.ExecContext(ctx, `UPDATE refunds SET amount = 1 WHERE id = 'ref_1'`)
	wantRaise(t, "a change of a refund's amount", err, "fixed at insert")
	_, err = db.ExecContext(ctx, `UPDATE refunds SET payment_id = 'pi_2' WHERE id = 'ref_1'`)
	wantRaise(t, "a change of a refund's payment", err, "fixed at insert")
	exec(t, db, `UPDATE refunds SET state = 'submitted', amount = amount WHERE id = 'ref_1'`)
	_, err = db.ExecContext(ctx, `INSERT INTO transitions (purchase_id, refund_id, from_state, to_state, cause, at)
VALUES ('pur_ok', 'ref_1', 'submitted', 'declined', 'operator', 0)`)
	wantRaise(t, "a refund's transition submitted -> declined", err, "forbidden transition submitted -> declined", "refund ref_1")
	exec(t, db, `INSERT INTO transitions (purchase_id, refund_id, from_state, to_state, cause, at)
VALUES ('pur_ok', 'ref_1', 'submitted', 'failed', 'webhook', 0)`)
}

// TestRawSQLCannotBreakTheDisputeGuards checks that the disputes' guard
// and their hold on refunds are the database's: statements the store
// never wrote are refused too, with the messages the store translates.
func TestRawSQLCannotBreakTheDisputeGuards(t *testing.T) {
	t.Parallel()
	_, path := newStore(t)
	db := rawDB(t, path)
	ctx := t.Context()
	insertRaw(t, db, "pur_ok", statemachine.Submitted)
	exec(t, db, `UPDATE purchases SET state = 'succeeded', provider_payment_id = 'pi_1' WHERE id = 'pur_ok'`)
	insert := func(id string, amount int, state string) error {
		_, err := db.ExecContext(ctx, `INSERT INTO disputes (id, provider_dispute_id, purchase_id, payment_id, amount, currency,
    state, version, created_at, updated_at)
VALUES (?1, 'du_' || ?1, 'pur_ok', 'pi_1', ?2, 'eur', ?3, 1, 0, 0)`, id, amount, state)
		return err
	}
	refund := func(id string, amount int) error {
		_, err := db.ExecContext(ctx, `INSERT INTO refunds (id, purchase_id, payment_id, amount, currency, state, version,
    provider_key, provider_request, params_hash, created_at, updated_at)
VALUES (?1, 'pur_ok', 'pi_1', ?2, 'eur', 'created', 1, 'payrecon-' || ?1, '{}', 'h', 0, 0)`, id, amount)
		return err
	}
	wantRaise(t, "a dispute inserted in lost", insert("dsp_x", 1, "lost"), "forbidden transition", "dispute dsp_x inserted in state lost")
	if err := insert("dsp_1", 60, "open"); err != nil {
		t.Fatal(err)
	}
	wantRaise(t, "a refund of a disputed payment", refund("ref_x", 1), "payment disputed", "pi_1", "dsp_1", "open")
	_, err := db.ExecContext(ctx, `UPDATE disputes SET state = 'submitted' WHERE id = 'dsp_1'`)
	wantRaise(t, "open -> submitted", err, "forbidden transition open -> submitted", "dsp_1")
	for _, column := range []string{"amount = 1", "payment_id = 'pi_2'", "currency = 'usd'", "provider_dispute_id = 'du_x'"} {
		_, err = db.ExecContext(ctx, `UPDATE disputes SET `+column+` WHERE id = 'dsp_1'`)
		wantRaise(t, "a change of a dispute's "+column, err, "fixed at insert")
	}
	exec(t, db, `UPDATE disputes SET state = 'lost', amount = amount WHERE id = 'dsp_1'`)
	wantRaise(t, "a refund past what the lost dispute left", refund("ref_x", 41), "refund exceeds the payment", "101 of its 100", "60 of it lost")
	wantRaise(t, "a refund of a payment whose dispute was lost", refund("ref_x", 40), "payment disputed", "dsp_1", "lost")
	_, err = db.ExecContext(ctx, `UPDATE disputes SET state = 'open' WHERE id = 'dsp_1'`)
	wantRaise(t, "lost -> open", err, "forbidden transition lost -> open", "dsp_1")
	_, err = db.ExecContext(ctx, `INSERT INTO transitions (purchase_id, dispute_id, from_state, to_state, cause, at)
VALUES ('pur_ok', 'dsp_1', 'submitted', 'declined', 'operator', 0)`)
	wantRaise(t, "a dispute's transition submitted -> declined", err, "forbidden transition submitted -> declined", "dispute dsp_1")
	exec(t, db, `INSERT INTO transitions (purchase_id, dispute_id, from_state, to_state, cause, at)
VALUES ('pur_ok', 'dsp_1', 'open', 'lost', 'webhook', 0)`)
}

// TestRawSQLCannotChangeAnAccount checks that a purchase's account is
// fixed by the database, not only by UpdatePurchase, and that both
// tables refuse a malformed account.
func TestRawSQLCannotChangeAnAccount(t *testing.T) {
	t.Parallel()
	_, path := newStore(t)
	db := rawDB(t, path)
	ctx := t.Context()
	exec(t, db, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at, account)
VALUES ('pur_1', 'cus_1', 100, 'eur', 'created', 1, 0, 0, 'acct_1')`)
	insertRaw(t, db, "pur_platform")
	for _, c := range []struct{ id, to string }{{"pur_1", "acct_2"}, {"pur_1", ""}, {"pur_platform", "acct_1"}} {
		_, err := db.ExecContext(ctx, `UPDATE purchases SET account = ?2 WHERE id = ?1`, c.id, c.to)
		wantRaise(t, "a change of "+c.id+"'s account to "+c.to, err, "fixed at insert", c.id)
	}
	exec(t, db, `UPDATE purchases SET state = 'submitted', account = account WHERE id = 'pur_1'`)
	for _, bad := range []string{"acct_", "acct_1-2", "acct_1\n", "acct_" + strings.Repeat("1", 251)} {
		_, err := db.ExecContext(ctx, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at, account)
VALUES ('pur_x', 'cus_1', 100, 'eur', 'created', 1, 0, 0, ?1)`, bad)
		wantCheck(t, "a purchase of account "+bad, err)
		_, err = db.ExecContext(ctx, `INSERT INTO webhook_inbox (provider, event_id, outcome, received_at, account)
VALUES ('stripe', 'evt_x', 'unmatched', 0, ?1)`, bad)
		wantCheck(t, "an event of account "+bad, err)
	}
}

// wantCheck fails unless err is a CHECK constraint's refusal.
func wantCheck(t *testing.T, what string, err error) {
	t.Helper()
	var se *driver.Error
	if !errors.As(err, &se) || se.Code() != sqlite3.SQLITE_CONSTRAINT_CHECK {
		t.Fatalf("%s: got %v, want a CHECK's refusal (SQLITE_CONSTRAINT_CHECK)", what, err)
	}
}
