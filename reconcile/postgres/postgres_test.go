package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/internal/testing/storetest"
	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/postgres"
	"github.com/payrecon/payrecon/statemachine"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// openStore opens a store on a new, empty database, closed when t ends,
// with now as its clock (nil: the server's).
func openStore(t *testing.T, now func() time.Time) (*postgres.Store, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	s, err := postgres.Open(t.Context(), postgres.Config{URL: url, Now: now})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, url
}

// newStore opens a store with the server's clock on a new, migrated
// database.
func newStore(t *testing.T) (*postgres.Store, string) {
	t.Helper()
	return newStoreClock(t, nil)
}

// newStoreClock is newStore with now as the store's clock.
func newStoreClock(t *testing.T, now func() time.Time) (*postgres.Store, string) {
	t.Helper()
	s, url := openStore(t, now)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s, url
}

// rawConn connects to url directly, bypassing the store.
func rawConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// wantSQLState fails unless err is a database error with SQLSTATE code
// whose message contains every one of parts.
func wantSQLState(t *testing.T, what string, err error, code string, parts ...string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != code {
		t.Fatalf("%s: got %v, want SQLSTATE %s", what, err, code)
	}
	for _, p := range parts {
		if !strings.Contains(pgErr.Message, p) {
			t.Fatalf("%s: message %q does not mention %q", what, pgErr.Message, p)
		}
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) reconcile.Store {
		return pgtest.NewStoreClock(t, now)
	})
}

// insertRaw inserts a purchase by SQL and walks it along allowed moves.
func insertRaw(t *testing.T, conn *pgx.Conn, id string, path ...statemachine.State) {
	t.Helper()
	exec(t, conn, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at)
VALUES ($1, 'cus_1', 100, 'eur', 'created', 1, $2, $2)`, id, base)
	for _, st := range path {
		exec(t, conn, `UPDATE purchases SET state = $2 WHERE id = $1`, id, string(st))
	}
}

// TestSchemaTransitionTableMatchesStatemachine: each machine's tables
// in the database (the purchase's, the refund's, the dispute's) are its
// states and its moves in package statemachine.
func TestSchemaTransitionTableMatchesStatemachine(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	for _, tc := range []struct {
		moves, states string
		m             statemachine.Machine
	}{
		{"allowed_transitions", "purchase_states", statemachine.Purchase},
		{"refund_allowed_transitions", "refund_states", statemachine.Refund},
		{"dispute_allowed_transitions", "dispute_states", statemachine.Dispute},
	} {
		rows, _ := conn.Query(t.Context(), `SELECT from_state, to_state FROM `+tc.moves)
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (statemachine.Pair, error) {
			var from, to string
			err := r.Scan(&from, &to)
			return statemachine.Pair{From: statemachine.State(from), To: statemachine.State(to)}, err
		})
		if err != nil {
			t.Fatal(err)
		}
		want := tc.m.Transitions()
		cmp := func(a, b statemachine.Pair) int { return strings.Compare(a.String(), b.String()) }
		slices.SortFunc(got, cmp)
		slices.SortFunc(want, cmp)
		if !slices.Equal(got, want) {
			t.Fatalf("%s = %v, statemachine.%s.Transitions() = %v", tc.moves, got, tc.m.Name(), want)
		}

		rows, _ = conn.Query(t.Context(), `SELECT state FROM `+tc.states)
		states, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		var wantStates []string
		for _, s := range tc.m.States() {
			wantStates = append(wantStates, string(s))
		}
		slices.Sort(states)
		slices.Sort(wantStates)
		if !slices.Equal(states, wantStates) {
			t.Fatalf("%s = %v, want %v", tc.states, states, wantStates)
		}
	}
}

// TestRawSQLCannotWriteForbiddenMove checks that the guard is the
// database's: statements the store never wrote are refused too.
func TestRawSQLCannotWriteForbiddenMove(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	ctx := t.Context()
	insertRaw(t, conn, "pur_ok", statemachine.Submitted, statemachine.Succeeded)
	insertRaw(t, conn, "pur_new")

	_, err := conn.Exec(ctx, `UPDATE purchases SET state = 'uncertain' WHERE id = 'pur_ok'`)
	wantSQLState(t, "succeeded -> uncertain", err, "PR001", "forbidden transition succeeded -> uncertain", "pur_ok")

	_, err = conn.Exec(ctx, `UPDATE purchases SET state = 'succeeded' WHERE id = 'pur_new'`)
	wantSQLState(t, "created -> succeeded", err, "PR001", "forbidden transition created -> succeeded")

	// One bad row refuses the whole statement.
	_, err = conn.Exec(ctx, `UPDATE purchases SET state = 'submitted'`)
	wantSQLState(t, "bulk update", err, "PR001", "succeeded -> submitted")

	_, err = conn.Exec(ctx, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at)
VALUES ('pur_x', 'cus_1', 100, 'eur', 'succeeded', 1, now(), now())`)
	wantSQLState(t, "insert in succeeded", err, "PR001", "succeeded")

	// The audit cannot record a forbidden move either.
	_, err = conn.Exec(ctx, `INSERT INTO transitions (purchase_id, from_state, to_state, cause, at)
VALUES ('pur_ok', 'succeeded', 'uncertain', 'webhook', now())`)
	wantSQLState(t, "transition succeeded -> uncertain", err, "23514", "transitions_move_check")

	// Writing the same state is no move, and other columns are free.
	exec(t, conn, `UPDATE purchases SET state = state, description = 'x' WHERE id = 'pur_ok'`)
	exec(t, conn, `UPDATE purchases SET state = 'submitted' WHERE id = 'pur_new'`)

	var state string
	if err := conn.QueryRow(ctx, `SELECT state FROM purchases WHERE id = 'pur_ok'`).Scan(&state); err != nil || state != "succeeded" {
		t.Fatalf("pur_ok state = %q, %v; want succeeded", state, err)
	}
}

func TestAuditTablesAreAppendOnly(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	insertRaw(t, conn, "pur_1")
	exec(t, conn, `INSERT INTO transitions (purchase_id, from_state, to_state, cause, at) VALUES ('pur_1', 'created', 'submitted', 'submit', now())`)
	exec(t, conn, `INSERT INTO provider_attempts (purchase_id, op, outcome, applied, at) VALUES ('pur_1', 'create', 'unknown', true, now())`)
	exec(t, conn, `INSERT INTO operator_actions (purchase_id, operator, action, at) VALUES ('pur_1', 'alice', 'note', now())`)

	for _, table := range []string{"transitions", "provider_attempts", "operator_actions"} {
		for _, stmt := range []string{
			"UPDATE " + table + " SET at = now() - interval '1 day'",
			"UPDATE " + table + " SET at = now() WHERE false", // refused even when it would touch nothing
			"DELETE FROM " + table,
			"TRUNCATE " + table,
		} {
			_, err := conn.Exec(t.Context(), stmt)
			wantSQLState(t, stmt, err, "PR002", table, "append-only")
		}
		var n int
		if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%s has %d rows (%v), want 1", table, n, err)
		}
	}
}

// TestAuditRowsReferToPurchases: the statement-level checks that replace
// the audit rows' foreign keys (migration 00014) refuse a transition or
// an attempt of a missing purchase, naming the foreign key, in a batch as
// alone, and refuse deleting a purchase that has audit rows.
func TestAuditRowsReferToPurchases(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	insertRaw(t, conn, "pur_1")
	insertRaw(t, conn, "pur_2")
	for _, tc := range []struct{ stmt, constraint string }{
		{`INSERT INTO transitions (purchase_id, from_state, to_state, cause, at) VALUES ('pur_missing', 'created', 'submitted', 'submit', now())`, "transitions_purchase_id_fkey"},
		{`INSERT INTO transitions (purchase_id, from_state, to_state, cause, at)
SELECT id, 'created', 'submitted', 'submit', now() FROM unnest(ARRAY['pur_1', 'pur_missing', 'pur_2']) AS id`, "transitions_purchase_id_fkey"},
		{`INSERT INTO provider_attempts (purchase_id, op, outcome, applied, at) VALUES ('pur_missing', 'create', 'unknown', true, now())`, "provider_attempts_purchase_id_fkey"},
		{`INSERT INTO provider_attempts (purchase_id, op, outcome, applied, at)
SELECT id, 'create', 'unknown', true, now() FROM unnest(ARRAY['pur_1', 'pur_missing']) AS id`, "provider_attempts_purchase_id_fkey"},
	} {
		_, err := conn.Exec(t.Context(), tc.stmt)
		wantSQLState(t, tc.stmt, err, "23503", tc.constraint)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.ConstraintName != tc.constraint || !strings.Contains(pgErr.Detail, "pur_missing")) {
			t.Errorf("%s: constraint %q, detail %q; want %s and the missing id", tc.stmt, pgErr.ConstraintName, pgErr.Detail, tc.constraint)
		}
	}
	exec(t, conn, `INSERT INTO transitions (purchase_id, from_state, to_state, cause, at)
SELECT id, 'created', 'submitted', 'submit', now() FROM unnest(ARRAY['pur_1', 'pur_2', 'pur_1']) AS id`)
	exec(t, conn, `INSERT INTO provider_attempts (purchase_id, op, outcome, applied, at) VALUES ('pur_2', 'create', 'unknown', true, now())`)

	// pur_1 has transitions only, pur_2 both; pur_3 none, and goes.
	insertRaw(t, conn, "pur_3")
	for _, id := range []string{"pur_1", "pur_2"} {
		stmt := `DELETE FROM purchases WHERE id = '` + id + `'`
		_, err := conn.Exec(t.Context(), stmt)
		wantSQLState(t, stmt, err, "23503", "purchases_audit_rows")
	}
	exec(t, conn, `DELETE FROM purchases WHERE id = 'pur_3'`)
}

// TestPurchaseStateCheckMatchesStatemachine: the CHECK that holds a
// purchase's state (migration 00014) names exactly the machine's states.
func TestPurchaseStateCheckMatchesStatemachine(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	var def string
	if err := conn.QueryRow(t.Context(), `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'purchases_state_check'`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range regexp.MustCompile(`'([a-z_]+)'`).FindAllStringSubmatch(def, -1) {
		got = append(got, m[1])
	}
	var want []string
	for _, st := range statemachine.Purchase.States() {
		want = append(want, string(st))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("purchases_state_check %s names %v, statemachine.Purchase.States() = %v", def, got, want)
	}
}

// TestAuditFindingsRefuseChanges: a finding is evidence. The database
// lets it be closed once, through the close columns alone, and refuses
// every other change, whatever SQL path tries.
func TestAuditFindingsRefuseChanges(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	ctx := t.Context()
	exec(t, conn, `INSERT INTO audit_findings (provider, payment_id, kind, amount, currency, found_at)
VALUES ('stripe', 'pi_1', 'orphan_charge', 100, 'eur', now()), ('stripe', 'pi_2', 'orphan_charge', 200, 'eur', now())`)
	snapshot := func() string {
		t.Helper()
		var s string
		if err := conn.QueryRow(ctx, `SELECT string_agg(to_jsonb(f)::text, ',' ORDER BY id) FROM audit_findings f`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	refused := func(stmt, code string, parts ...string) {
		t.Helper()
		before := snapshot()
		_, err := conn.Exec(ctx, stmt)
		wantSQLState(t, stmt, err, code, parts...)
		if after := snapshot(); after != before {
			t.Fatalf("%s changed the findings:\n before %s\n after  %s", stmt, before, after)
		}
	}
	for _, stmt := range []string{
		`UPDATE audit_findings SET amount = 1 WHERE payment_id = 'pi_1'`,
		`UPDATE audit_findings SET amount = 1, closed_at = now(), closed_by = 'mallory', close_note = 'x' WHERE payment_id = 'pi_1'`,
		`UPDATE audit_findings SET close_note = 'x' WHERE payment_id = 'pi_1'`, // not a close: closed_at stays NULL
		`UPDATE audit_findings SET id = id + 100 WHERE payment_id = 'pi_1'`,
		`INSERT INTO audit_findings (provider, payment_id, kind, amount, found_at) VALUES ('stripe', 'pi_1', 'orphan_charge', 1, now())
ON CONFLICT (provider, payment_id, kind) DO UPDATE SET evidence = 'rewritten'`,
	} {
		refused(stmt, "PR002", "audit_findings", "only closing may change finding")
	}
	refused(`UPDATE audit_findings SET closed_at = now(), closed_by = '', close_note = 'x' WHERE payment_id = 'pi_1'`,
		"23514", "audit_findings_closed_check")

	// Closing, through the close columns alone, is the one change.
	exec(t, conn, `UPDATE audit_findings SET closed_at = now(), closed_by = 'alice', close_note = 'refunded' WHERE payment_id = 'pi_1'`)
	for _, stmt := range []string{
		`UPDATE audit_findings SET closed_at = now(), closed_by = 'bob', close_note = 'again' WHERE payment_id = 'pi_1'`,
		`UPDATE audit_findings SET closed_at = NULL, closed_by = '', close_note = '' WHERE payment_id = 'pi_1'`,
	} {
		refused(stmt, "PR002", "audit_findings", "finding", "is closed")
	}
	refused(`UPDATE audit_findings SET evidence = 'x'`, "PR002", "audit_findings", "UPDATE refused")
	for _, stmt := range []string{
		`DELETE FROM audit_findings WHERE payment_id = 'pi_2'`,
		`DELETE FROM audit_findings WHERE false`, // refused even when it would touch nothing
		`TRUNCATE audit_findings`,
	} {
		refused(stmt, "PR002", "audit_findings", "append-only")
	}
}

func TestReady(t *testing.T) {
	s, url := openStore(t, nil)
	err := s.Ready(t.Context())
	if !errors.Is(err, reconcile.ErrNotMigrated) {
		t.Fatalf("Ready on an empty database: %v, want ErrNotMigrated", err)
	}
	var exists bool
	if err := rawConn(t, url).QueryRow(t.Context(), `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Fatalf("Ready wrote to the database: goose_db_version exists = %v (%v)", exists, err)
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
}

func TestOpenUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	_, err = postgres.Open(t.Context(), postgres.Config{URL: "postgres://payrecon:secret@" + addr + "/payrecon?sslmode=disable&connect_timeout=5"})
	if err == nil {
		t.Fatal("Open on a closed port succeeded")
	}
	msg := err.Error()
	for _, want := range []string{"postgres: open: cannot reach database", addr, "payrecon"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("Open error %q does not mention %q", msg, want)
		}
	}
	if strings.Contains(msg, "secret") {
		t.Fatalf("Open error leaks the password: %q", msg)
	}
}

func TestOpenInvalidConfig(t *testing.T) {
	for _, cfg := range []postgres.Config{
		{},
		{URL: "postgres://localhost/x", MaxConns: -1},
		{URL: "postgres://localhost:notaport/x"},
	} {
		if _, err := postgres.Open(t.Context(), cfg); !errors.Is(err, reconcile.ErrInvalid) {
			t.Errorf("Open(%+v) = %v, want ErrInvalid", cfg, err)
		}
	}
}

// TestPoolMaxConns: the pool's cap is Config.MaxConns when set, else the
// URL's pool_max_conns (in a URL or a key=value DSN), else 8. No database
// is needed: Open builds the pool's configuration first.
func TestPoolMaxConns(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      postgres.Config
		want     int32
		wantErr  error
		minConns int32
	}{
		{name: "default", cfg: postgres.Config{URL: "postgres://app@db/payrecon"}, want: postgres.DefaultMaxConns},
		{name: "the URL's", cfg: postgres.Config{URL: "postgres://app@db/payrecon?sslmode=disable&pool_max_conns=20"}, want: 20},
		{name: "the URL's, below the default", cfg: postgres.Config{URL: "postgres://app@db/payrecon?pool_max_conns=2"}, want: 2},
		{name: "the DSN's", cfg: postgres.Config{URL: "host=db dbname=payrecon pool_max_conns=12"}, want: 12},
		{name: "Config.MaxConns over the default", cfg: postgres.Config{URL: "postgres://app@db/payrecon", MaxConns: 3}, want: 3},
		{name: "Config.MaxConns over the URL's", cfg: postgres.Config{URL: "postgres://app@db/payrecon?pool_max_conns=20", MaxConns: 3}, want: 3},
		{name: "other pool parameters kept", cfg: postgres.Config{URL: "postgres://app@db/payrecon?pool_min_conns=2&pool_max_conns=5"}, want: 5, minConns: 2},
		{name: "zero refused", cfg: postgres.Config{URL: "postgres://app@db/payrecon?pool_max_conns=0"}, wantErr: reconcile.ErrInvalid},
		{name: "not a number refused", cfg: postgres.Config{URL: "postgres://app@db/payrecon?pool_max_conns=many"}, wantErr: reconcile.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pcfg, err := postgres.PoolConfig(tc.cfg)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("PoolConfig(%+v) = %v, want %v", tc.cfg, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("PoolConfig(%+v): %v", tc.cfg, err)
			}
			if pcfg.MaxConns != tc.want || pcfg.MinConns != tc.minConns {
				t.Fatalf("PoolConfig(%+v): MaxConns %d, MinConns %d; want %d, %d", tc.cfg, pcfg.MaxConns, pcfg.MinConns, tc.want, tc.minConns)
			}
			if _, ok := pcfg.ConnConfig.RuntimeParams["pool_max_conns"]; ok {
				t.Fatal("pool_max_conns is sent to the server as a run-time parameter")
			}
		})
	}
}

func TestErrorsNameTheFailure(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	p := reconcile.Purchase{ID: "pur_1", Customer: "cus_1", Amount: 100, Currency: "eur", State: statemachine.Created, Version: 1, CreatedAt: base, UpdatedAt: base}
	if err := s.InTx(ctx, func(tx reconcile.Tx) error { return tx.InsertPurchase(ctx, p) }); err != nil {
		t.Fatal(err)
	}
	p.State = statemachine.Succeeded
	err := s.InTx(ctx, func(tx reconcile.Tx) error { return tx.UpdatePurchase(ctx, p, statemachine.Created) })
	if !errors.Is(err, reconcile.ErrForbiddenTransition) {
		t.Fatalf("got %v, want ErrForbiddenTransition", err)
	}
	for _, want := range []string{"postgres: update purchase pur_1", "forbidden transition created -> succeeded"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not mention %q", err, want)
		}
	}

	bad := p
	bad.ID, bad.State, bad.Amount = "pur_2", statemachine.Created, 0
	err = s.InTx(ctx, func(tx reconcile.Tx) error { return tx.InsertPurchase(ctx, bad) })
	if !errors.Is(err, reconcile.ErrInvalid) || !strings.Contains(err.Error(), "amount") {
		t.Fatalf("non-positive amount: got %v, want ErrInvalid naming amount", err)
	}

	if _, err := s.ClaimJobs(ctx, "", 1, time.Second); !errors.Is(err, reconcile.ErrInvalid) {
		t.Fatalf("ClaimJobs with no owner: %v, want ErrInvalid", err)
	}
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		return tx.InsertJob(ctx, reconcile.Job{PurchaseID: "pur_missing", RunAt: base})
	})
	if !errors.Is(err, reconcile.ErrNotFound) {
		t.Fatalf("InsertJob for an unknown purchase: %v, want ErrNotFound", err)
	}

	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		return tx.InsertTransition(ctx, reconcile.TransitionRecord{PurchaseID: "pur_1", From: "created", To: "succeeded", Cause: reconcile.CauseOperator, At: base})
	})
	if !errors.Is(err, reconcile.ErrForbiddenTransition) || errors.Is(err, reconcile.ErrNotFound) || errors.Is(err, reconcile.ErrInvalid) ||
		!strings.Contains(err.Error(), "transitions_move_check") {
		t.Fatalf("InsertTransition of a forbidden move: %v, want ErrForbiddenTransition naming transitions_move_check", err)
	}
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		return tx.InsertTransition(ctx, reconcile.TransitionRecord{PurchaseID: "pur_missing", From: "created", To: "submitted", Cause: reconcile.CauseSubmit, At: base})
	})
	if !errors.Is(err, reconcile.ErrNotFound) || errors.Is(err, reconcile.ErrForbiddenTransition) {
		t.Fatalf("InsertTransition for an unknown purchase: %v, want ErrNotFound", err)
	}

	// The refunds' refusals say what refused them.
	paid := reconcile.Purchase{ID: "pur_paid", Customer: "cus_1", Amount: 100, Currency: "eur", State: statemachine.Created, Version: 1, CreatedAt: base, UpdatedAt: base}
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
			[]string{"postgres: insert refund ref_over of pur_paid", "the payment's refunds would exceed its amount", "refund exceeds the payment"}},
		{refund("ref_open", "pur_1", 1), reconcile.ErrNotRefundable,
			[]string{"postgres: insert refund ref_open of pur_1", "not refundable: purchase pur_1 is created"}},
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
	for _, want := range []string{"postgres: insert refund ref_disputed of pur_paid", "the payment is disputed", "payment disputed: payment pi_paid has dispute dsp_1 in state open"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not mention %q", err, want)
		}
	}
}

// TestCheckLeaseHoldsOffClaims shows the fence: while a transaction that
// checked its lease is open, the job cannot be claimed, even once the
// lease has expired; after it commits, it can.
func TestCheckLeaseHoldsOffClaims(t *testing.T) {
	c := testclock.New(base)
	s, _ := newStoreClock(t, c.Now)
	ctx := t.Context()
	err := s.InTx(ctx, func(tx reconcile.Tx) error {
		p := reconcile.Purchase{ID: "pur_1", Customer: "cus_1", Amount: 100, Currency: "eur", State: statemachine.Created, Version: 1, CreatedAt: base, UpdatedAt: base}
		if err := tx.InsertPurchase(ctx, p); err != nil {
			return err
		}
		return tx.InsertJob(ctx, reconcile.Job{PurchaseID: "pur_1", RunAt: base})
	})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := s.ClaimJobs(ctx, "w1", 1, time.Minute)
	if err != nil || len(leases) != 1 {
		t.Fatalf("ClaimJobs = %v, %v", leases, err)
	}
	l := leases[0]
	late := l.ExpiresAt.Add(time.Second)
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		c.Set(l.ExpiresAt.Add(-time.Second))
		if err := tx.CheckLease(ctx, l); err != nil {
			return err
		}
		// Another worker, on another connection, tries to take over once
		// the lease has expired.
		c.Set(late)
		got, err := s.ClaimJobs(ctx, "w2", 1, time.Minute)
		if err != nil {
			return err
		}
		if len(got) != 0 {
			return fmt.Errorf("job claimed while a transaction holds its checked lease: %+v", got)
		}
		return tx.RescheduleJob(ctx, "pur_1", late)
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.ClaimJobs(ctx, "w2", 1, time.Minute)
	if err != nil || len(got) != 1 || got[0].TakenOver {
		t.Fatalf("claim after commit = %+v, %v; want the released job", got, err)
	}
}

func TestInTxRetriesSerializationFailures(t *testing.T) {
	s, _ := newStore(t)
	for _, code := range []string{"40001", "40P01"} {
		calls := 0
		err := s.InTx(t.Context(), func(tx reconcile.Tx) error {
			calls++
			if calls < 3 {
				return fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code})
			}
			return nil
		})
		if err != nil || calls != 3 {
			t.Fatalf("SQLSTATE %s: InTx = %v after %d calls; want nil after 3", code, err, calls)
		}
	}
	calls := 0
	boom := errors.New("boom")
	err := s.InTx(t.Context(), func(tx reconcile.Tx) error { calls++; return boom })
	if !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("plain error: InTx = %v after %d calls; want boom after 1", err, calls)
	}
	calls = 0
	err = s.InTx(t.Context(), func(tx reconcile.Tx) error { calls++; return &pgconn.PgError{Code: "40001"} })
	if err == nil || calls != 4 {
		t.Fatalf("persistent serialization failure: InTx = %v after %d calls; want an error after 4", err, calls)
	}
}

// countingTracer counts the statements pgx sends, and the round trips:
// one for each statement sent alone, one for each batch.
type countingTracer struct{ statements, roundTrips atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	c.roundTrips.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *countingTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.roundTrips.Add(1)
	return ctx
}

func (c *countingTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.statements.Add(1)
}

func (c *countingTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// newTracedStore is newStore with a countingTracer as its Config.Tracer.
func newTracedStore(t *testing.T) (*postgres.Store, *countingTracer) {
	t.Helper()
	_, url := newStore(t)
	tr := &countingTracer{}
	s, err := postgres.Open(t.Context(), postgres.Config{URL: url, Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, tr
}

// Config.Tracer sees the store's statements: BEGIN, the read, COMMIT.
// BEGIN costs no round trip of its own: it goes with the first
// statement, so a transaction of one read is two round trips, and one
// that sends nothing is none.
func TestTracerSeesStatements(t *testing.T) {
	s, tr := newTracedStore(t)
	statements, roundTrips := tr.statements.Load(), tr.roundTrips.Load()
	err := s.InTx(t.Context(), func(tx reconcile.Tx) error {
		_, err := tx.GetPurchase(t.Context(), "pur_none")
		if errors.Is(err, reconcile.ErrNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.statements.Load() - statements; got != 3 {
		t.Errorf("the tracer saw %d statements of a transaction with one read, want 3 (BEGIN, the read, COMMIT)", got)
	}
	if got := tr.roundTrips.Load() - roundTrips; got != 2 {
		t.Errorf("a transaction with one read took %d round trips, want 2", got)
	}
	roundTrips = tr.roundTrips.Load()
	if err := s.InTx(t.Context(), func(reconcile.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := tr.roundTrips.Load() - roundTrips; got != 0 {
		t.Errorf("a transaction that sent nothing took %d round trips, want 0", got)
	}
}

// TestConcurrentRefundInsertsTakeTurns shows how the refunds' limit
// holds under READ COMMITTED: while one transaction holds a refund of 700
// of a payment of 1250, uncommitted, another's insert of 700 of the same
// payment waits for it (on the payment's advisory lock, migration 00009),
// then, once the first commits, reads the sum with its refund and is
// refused. Without the lock each would read a sum without the other's
// refund, and both would commit.
func TestConcurrentRefundInsertsTakeTurns(t *testing.T) {
	s, url := newStore(t)
	ctx := t.Context()
	err := s.InTx(ctx, func(tx reconcile.Tx) error {
		p := reconcile.Purchase{ID: "pur_1", Customer: "cus_1", Amount: 1250, Currency: "eur", State: statemachine.Created, Version: 1, CreatedAt: base, UpdatedAt: base}
		if err := tx.InsertPurchase(ctx, p); err != nil {
			return err
		}
		p.State = statemachine.Submitted
		if err := tx.UpdatePurchase(ctx, p, statemachine.Created); err != nil {
			return err
		}
		p.State, p.Version, p.ProviderPaymentID = statemachine.Succeeded, 2, "pi_1"
		return tx.UpdatePurchase(ctx, p, statemachine.Submitted)
	})
	if err != nil {
		t.Fatal(err)
	}
	refund := func(id string) reconcile.Refund {
		req := &provider.RefundRequest{IdempotencyKey: reconcile.RefundKeyFor(id), RefundID: id, PurchaseID: "pur_1", PaymentID: "pi_1", Amount: 700, Currency: "eur"}
		return reconcile.Refund{ID: id, PurchaseID: "pur_1", PaymentID: "pi_1", Amount: 700, Currency: "eur", State: statemachine.Created, Version: 1,
			ProviderKey: req.IdempotencyKey, ProviderRequest: req, ParamsHash: req.Hash(), CreatedAt: base, UpdatedAt: base}
	}

	inserted, commit := make(chan struct{}), make(chan struct{})
	firstErr, secondErr := make(chan error, 1), make(chan error, 1)
	go func() {
		firstErr <- s.InTx(ctx, func(tx reconcile.Tx) error {
			if err := tx.InsertRefund(ctx, refund("ref_1")); err != nil {
				return err
			}
			close(inserted)
			<-commit
			return nil
		})
	}()
	select {
	case <-inserted:
	case err := <-firstErr:
		t.Fatalf("the first refund: %v", err)
	}
	go func() {
		secondErr <- s.InTx(ctx, func(tx reconcile.Tx) error { return tx.InsertRefund(ctx, refund("ref_2")) })
	}()

	// The second insert waits for the first transaction's advisory lock.
	conn := rawConn(t, url)
	for waiting := 0; waiting == 0; {
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-secondErr:
			t.Fatalf("the second refund did not wait for the first transaction: %v", err)
		default:
		}
	}
	close(commit)
	if err := <-firstErr; err != nil {
		t.Fatalf("the first refund's transaction: %v", err)
	}
	if err := <-secondErr; !errors.Is(err, reconcile.ErrRefundExceeds) {
		t.Fatalf("the second refund, after the first committed: %v, want ErrRefundExceeds", err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM refunds WHERE payment_id = 'pi_1'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d refunds of pi_1 (%v), want 1", n, err)
	}
}

// TestRawSQLCannotBreakTheRefundLimits checks that the refunds' guard and
// limits are the database's: statements the store never wrote are
// refused too, with the SQLSTATEs the store translates.
func TestRawSQLCannotBreakTheRefundLimits(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	ctx := t.Context()
	insertRaw(t, conn, "pur_ok", statemachine.Submitted)
	exec(t, conn, `UPDATE purchases SET state = 'succeeded', provider_payment_id = 'pi_1' WHERE id = 'pur_ok'`)
	insertRaw(t, conn, "pur_open", statemachine.Submitted, statemachine.Uncertain)
	insert := func(id, purchase, payment string, amount int, state string) error {
		_, err := conn.Exec(ctx, `INSERT INTO refunds (id, purchase_id, payment_id, amount, currency, state, version,
    provider_key, provider_request, params_hash, created_at, updated_at)
VALUES ($1, $2, $3, $4, 'eur', $5, 1, 'payrecon-' || $1, '{}', 'h', now(), now())`, id, purchase, payment, amount, state)
		return err
	}
	wantSQLState(t, "a refund inserted in submitted", insert("ref_x", "pur_ok", "pi_1", 1, "submitted"), "PR001", "refund ref_x inserted in state submitted")
	wantSQLState(t, "a refund of an uncertain purchase", insert("ref_x", "pur_open", "pi_x", 1, "created"), "PR004", "purchase pur_open is uncertain")
	wantSQLState(t, "a refund of another payment", insert("ref_x", "pur_ok", "pi_2", 1, "created"), "PR004", "pi_2", "pur_ok")
	wantSQLState(t, "a refund of more than the payment", insert("ref_x", "pur_ok", "pi_1", 101, "created"), "PR003", "pi_1", "101 of its 100")
	if err := insert("ref_1", "pur_ok", "pi_1", 100, "created"); err != nil {
		t.Fatal(err)
	}
	wantSQLState(t, "a second refund past the payment", insert("ref_x", "pur_ok", "pi_1", 1, "created"), "PR003", "101 of its 100")
	_, err := conn.Exec(ctx, `UPDATE refunds SET state = 'failed' WHERE id = 'ref_1'`)
	wantSQLState(t, "created -> failed", err, "PR001", "forbidden transition created -> failed", "ref_1")
	_, err = conn.Exec(ctx, `UPDATE refunds SET amount = 1 WHERE id = 'ref_1'`)
	wantSQLState(t, "a change of a refund's amount", err, "PR002", "fixed at insert")
	_, err = conn.Exec(ctx, `UPDATE refunds SET payment_id = 'pi_2' WHERE id = 'ref_1'`)
	wantSQLState(t, "a change of a refund's payment", err, "PR002", "fixed at insert")
	exec(t, conn, `UPDATE refunds SET state = 'submitted', amount = amount WHERE id = 'ref_1'`)
	_, err = conn.Exec(ctx, `INSERT INTO transitions (purchase_id, refund_id, from_state, to_state, cause, at)
VALUES ('pur_ok', 'ref_1', 'submitted', 'declined', 'operator', now())`)
	wantSQLState(t, "a refund's transition submitted -> declined", err, "23514", "transitions_move_check")
	exec(t, conn, `INSERT INTO transitions (purchase_id, refund_id, from_state, to_state, cause, at)
VALUES ('pur_ok', 'ref_1', 'submitted', 'failed', 'webhook', now())`)
}

// TestRawSQLCannotBreakTheDisputeGuards checks that the disputes' guard
// and their hold on refunds are the database's: statements the store
// never wrote are refused too, with the SQLSTATEs the store translates.
func TestRawSQLCannotBreakTheDisputeGuards(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	ctx := t.Context()
	insertRaw(t, conn, "pur_ok", statemachine.Submitted)
	exec(t, conn, `UPDATE purchases SET state = 'succeeded', provider_payment_id = 'pi_1' WHERE id = 'pur_ok'`)
	insert := func(id string, amount int, state string) error {
		_, err := conn.Exec(ctx, `INSERT INTO disputes (id, provider_dispute_id, purchase_id, payment_id, amount, currency,
    state, version, created_at, updated_at)
VALUES ($1, 'du_' || $1, 'pur_ok', 'pi_1', $2, 'eur', $3, 1, now(), now())`, id, amount, state)
		return err
	}
	refund := func(id string, amount int) error {
		_, err := conn.Exec(ctx, `INSERT INTO refunds (id, purchase_id, payment_id, amount, currency, state, version,
    provider_key, provider_request, params_hash, created_at, updated_at)
VALUES ($1, 'pur_ok', 'pi_1', $2, 'eur', 'created', 1, 'payrecon-' || $1, '{}', 'h', now(), now())`, id, amount)
		return err
	}
	wantSQLState(t, "a dispute inserted in lost", insert("dsp_x", 1, "lost"), "PR001", "dispute dsp_x inserted in state lost")
	if err := insert("dsp_1", 60, "open"); err != nil {
		t.Fatal(err)
	}
	wantSQLState(t, "a refund of a disputed payment", refund("ref_x", 1), "PR005", "pi_1", "dsp_1", "open")
	_, err := conn.Exec(ctx, `UPDATE disputes SET state = 'submitted' WHERE id = 'dsp_1'`)
	wantSQLState(t, "open -> submitted", err, "PR001", "forbidden transition open -> submitted", "dsp_1")
	for _, column := range []string{"amount = 1", "payment_id = 'pi_2'", "currency = 'usd'", "provider_dispute_id = 'du_x'"} {
		_, err = conn.Exec(ctx, `UPDATE disputes SET `+column+` WHERE id = 'dsp_1'`)
		wantSQLState(t, "a change of a dispute's "+column, err, "PR002", "fixed at insert")
	}
	exec(t, conn, `UPDATE disputes SET state = 'lost', amount = amount WHERE id = 'dsp_1'`)
	wantSQLState(t, "a refund past what the lost dispute left", refund("ref_x", 41), "PR003", "101 of its 100", "60 of it lost")
	wantSQLState(t, "a refund of a payment whose dispute was lost", refund("ref_x", 40), "PR005", "dsp_1", "lost")
	_, err = conn.Exec(ctx, `UPDATE disputes SET state = 'open' WHERE id = 'dsp_1'`)
	wantSQLState(t, "lost -> open", err, "PR001", "forbidden transition lost -> open", "dsp_1")
	_, err = conn.Exec(ctx, `INSERT INTO transitions (purchase_id, dispute_id, from_state, to_state, cause, at)
VALUES ('pur_ok', 'dsp_1', 'submitted', 'declined', 'operator', now())`)
	wantSQLState(t, "a dispute's transition submitted -> declined", err, "23514", "transitions_move_check")
	exec(t, conn, `INSERT INTO transitions (purchase_id, dispute_id, from_state, to_state, cause, at)
VALUES ('pur_ok', 'dsp_1', 'open', 'lost', 'webhook', now())`)
}

// TestRawSQLCannotChangeAnAccount checks that a purchase's account is
// fixed by the database, not only by UpdatePurchase, and that both
// tables refuse a malformed account.
func TestRawSQLCannotChangeAnAccount(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	ctx := t.Context()
	exec(t, conn, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at, account)
VALUES ('pur_1', 'cus_1', 100, 'eur', 'created', 1, now(), now(), 'acct_1')`)
	insertRaw(t, conn, "pur_platform")
	for _, c := range []struct{ id, to string }{{"pur_1", "acct_2"}, {"pur_1", ""}, {"pur_platform", "acct_1"}} {
		_, err := conn.Exec(ctx, `UPDATE purchases SET account = $2 WHERE id = $1`, c.id, c.to)
		wantSQLState(t, "a change of "+c.id+"'s account to "+c.to, err, "PR002", "fixed at insert", c.id)
	}
	exec(t, conn, `UPDATE purchases SET state = 'submitted', account = account WHERE id = 'pur_1'`)
	for _, bad := range []string{"acct_", "acct_1-2", "acct_1\n", "acct_" + strings.Repeat("1", 251)} {
		_, err := conn.Exec(ctx, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at, account)
VALUES ('pur_x', 'cus_1', 100, 'eur', 'created', 1, now(), now(), $1)`, bad)
		wantSQLState(t, "a purchase of account "+bad, err, "23514", "purchases_account_check")
		_, err = conn.Exec(ctx, `INSERT INTO webhook_inbox (provider, event_id, outcome, received_at, account)
VALUES ('stripe', 'evt_x', 'unmatched', now(), $1)`, bad)
		wantSQLState(t, "an event of account "+bad, err, "23514", "webhook_inbox_account_check")
	}
}

// A transaction whose statement failed, with fn's nil error nonetheless,
// is not reported committed: the server turns its COMMIT into a
// ROLLBACK, and InTx returns pgx.ErrTxCommitRollback. Nothing it wrote
// stays, and the connection goes back to the pool out of any
// transaction.
func TestInTxReportsACommitTurnedIntoRollback(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	err := s.InTx(ctx, func(tx reconcile.Tx) error {
		if err := tx.InsertPurchase(ctx, reconcile.Purchase{ID: "pur_1", Customer: "cus_1", Amount: 1250, Currency: "eur",
			State: statemachine.Created, Version: 1, CreatedAt: base, UpdatedAt: base}); err != nil {
			return err
		}
		if _, err := postgres.QueryString(ctx, tx, `SELECT (1/0)::text`); err == nil {
			t.Error("1/0 did not fail")
		}
		return nil // the failure is ignored: the commit must not be
	})
	if !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("InTx = %v, want pgx.ErrTxCommitRollback", err)
	}
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		if _, err := tx.GetPurchase(ctx, "pur_1"); !errors.Is(err, reconcile.ErrNotFound) {
			t.Errorf("GetPurchase after the rolled-back commit = %v, want ErrNotFound", err)
		}
		status, err := postgres.QueryString(ctx, tx, `SELECT count(*)::text FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'`)
		if err != nil {
			return err
		}
		if status != "0" {
			t.Errorf("%s connections idle in a transaction, want 0", status)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A send that fails before it reaches the server (here its context was
// already done) takes BEGIN with it, as it takes every pending statement.
// The transaction's next statement must begin the transaction again, or
// it would run, and commit, alone: here a write that fn's failure then
// takes back.
func TestInTxBeginsAgainAfterASendThatNeverLeft(t *testing.T) {
	s, url := newStore(t)
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if _, err := admin.Exec(ctx, `CREATE TABLE lost_begin (id int)`); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		done, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := postgres.QueryString(done, tx, `SELECT 'never sent'`); !errors.Is(err, context.Canceled) {
			t.Errorf("a read with its context done = %v, want context.Canceled", err)
		}
		if _, err := postgres.QueryString(ctx, tx, `INSERT INTO lost_begin VALUES (1) RETURNING id::text`); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx = %v, want boom", err)
	}
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM lost_begin`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d rows written by a transaction that was rolled back, want 0", n)
	}
}

// With the server's clock, ReceiveInboxEvents stamps the events with the
// statement's time and returns it, in the round trip of the insert: a
// transaction of one receive is two round trips (BEGIN with the insert,
// then COMMIT), where a Now before the insert made it three. The time
// lies between two reads of the server's clock around it.
func TestReceiveInboxEventsReadsTheServersClock(t *testing.T) {
	s, tr := newTracedStore(t)
	ctx := t.Context()
	before, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	events := []reconcile.InboxEvent{
		{Provider: "stripe", EventID: "evt_1", Type: "payment_intent.succeeded", PayloadHash: "h1", Outcome: reconcile.EventUnmatched},
		{Provider: "stripe", EventID: "evt_2", Type: "payment_intent.succeeded", PayloadHash: "h2", Outcome: reconcile.EventUnmatched, ReceivedAt: base},
	}
	roundTrips := tr.roundTrips.Load()
	var now time.Time
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		inserted, at, err := tx.ReceiveInboxEvents(ctx, events)
		if err == nil && !slices.Equal(inserted, []bool{true, true}) {
			err = fmt.Errorf("inserted %v, want both", inserted)
		}
		now = at
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.roundTrips.Load() - roundTrips; got != 2 {
		t.Errorf("a transaction of one receive took %d round trips, want 2", got)
	}
	after, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if now.Before(before) || now.After(after) || now.Location() != time.UTC || !now.Equal(now.Truncate(time.Microsecond)) {
		t.Errorf("now = %s, want UTC to the microsecond, within [%s, %s]", now, before, after)
	}
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		for _, e := range events {
			got, err := tx.GetInboxEvent(ctx, e.Provider, e.EventID)
			if err != nil {
				return err
			}
			if !got.ReceivedAt.Equal(now) {
				t.Errorf("%s received at %s, want %s", e.EventID, got.ReceivedAt, now)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
