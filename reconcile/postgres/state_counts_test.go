package postgres_test

import (
	"context"
	"fmt"
	"maps"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/postgres"
	"github.com/payrecon/payrecon/statemachine"
)

// The counts of purchases per state that the triggers of migration 00007
// keep in purchase_state_counts, for statements the store never writes.

// storeCounts returns the store's CountByState.
func storeCounts(t *testing.T, s *postgres.Store) map[statemachine.State]int {
	t.Helper()
	var m map[statemachine.State]int
	err := s.InTx(t.Context(), func(tx reconcile.Tx) error {
		var err error
		m, err = tx.CountByState(t.Context())
		return err
	})
	if err != nil {
		t.Fatalf("CountByState: %v", err)
	}
	return m
}

// plainCounts counts the purchases by state with a GROUP BY, every state
// present.
func plainCounts(t *testing.T, conn *pgx.Conn) map[statemachine.State]int {
	t.Helper()
	m := map[statemachine.State]int{}
	for _, s := range statemachine.States {
		m[s] = 0
	}
	rows, _ := conn.Query(t.Context(), `SELECT state, count(*) FROM purchases GROUP BY state`)
	var state string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		m[statemachine.State(state)] = n
		return nil
	}); err != nil {
		t.Fatalf("count purchases: %v", err)
	}
	return m
}

// counterWrites returns how many rows of purchase_state_counts this
// transaction has inserted and updated so far.
func counterWrites(t *testing.T, tx pgx.Tx) int {
	t.Helper()
	var n int
	err := tx.QueryRow(t.Context(), `SELECT pg_stat_get_xact_tuples_inserted('purchase_state_counts'::regclass)
    + pg_stat_get_xact_tuples_updated('purchase_state_counts'::regclass)`).Scan(&n)
	if err != nil {
		t.Fatalf("counter writes: %v", err)
	}
	return n
}

// TestStateCountsFollowBatchedStatements writes purchases by SQL, many in
// one statement: each statement writes one counter row per state whose
// count it changes, whatever the number of purchases, and the counts
// stay equal to a GROUP BY of the purchases.
func TestStateCountsFollowBatchedStatements(t *testing.T) {
	s, url := newStore(t)
	conn := rawConn(t, url)
	exec(t, conn, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at)
SELECT 'pur_pre' || i, 'cus_1', 100, 'eur', 'created', 1, now(), now() FROM generate_series(1, 5) AS i`)

	for _, tc := range []struct {
		name       string
		sql        string
		wantWrites int // counter rows written by the statement
	}{
		{"1000 inserts", `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at)
SELECT 'pur_' || i, 'cus_1', 100, 'eur', 'created', 1, now(), now() FROM generate_series(1, 1000) AS i`, 1},
		{"256 moves", `UPDATE purchases SET state = 'submitted' WHERE id IN (SELECT 'pur_' || i FROM generate_series(1, 256) AS i)`, 2},
		{"moves to two states", `UPDATE purchases SET state = CASE WHEN id < 'pur_2' THEN 'succeeded' ELSE 'uncertain' END
WHERE state = 'submitted'`, 3},
		{"a write that keeps every state", `UPDATE purchases SET version = version + 1`, 0},
		{"a write that touches nothing", `UPDATE purchases SET state = 'declined' WHERE false`, 0},
		{"a move to reconciling", `UPDATE purchases SET state = 'reconciling' WHERE id = 'pur_200'`, 2},
		{"two moves that cancel out", `UPDATE purchases SET state = CASE state WHEN 'uncertain' THEN 'reconciling' ELSE 'uncertain' END
WHERE id IN ('pur_200', 'pur_201')`, 0},
		{"deletes", `DELETE FROM purchases WHERE id LIKE 'pur_pre%' OR id IN ('pur_1', 'pur_202', 'pur_300')`, 3},
	} {
		tx, err := conn.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		before := counterWrites(t, tx)
		if _, err := tx.Exec(t.Context(), tc.sql); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := counterWrites(t, tx) - before; got != tc.wantWrites {
			t.Errorf("%s: %d counter rows written, want %d", tc.name, got, tc.wantWrites)
		}
		if err := tx.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got, want := storeCounts(t, s), plainCounts(t, conn); !maps.Equal(got, want) {
			t.Fatalf("after %s: CountByState = %v, a GROUP BY says %v", tc.name, got, want)
		}
	}

	// A statement refused by the transition guard, and a transaction
	// rolled back, count nothing.
	if _, err := conn.Exec(t.Context(), `UPDATE purchases SET state = 'succeeded' WHERE state = 'created'`); err == nil {
		t.Fatal("created -> succeeded was not refused")
	}
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	exec(t, tx.Conn(), `UPDATE purchases SET state = 'submitted' WHERE state = 'created'`)
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, want := storeCounts(t, s), plainCounts(t, conn); !maps.Equal(got, want) {
		t.Fatalf("after a refusal and a rollback: CountByState = %v, a GROUP BY says %v", got, want)
	}

	// TRUNCATE sets every count to 0. It must take the audit tables
	// along, which refuse it: an administrator who really means it turns
	// their guards off first.
	for _, table := range []string{"transitions", "provider_attempts", "operator_actions"} {
		exec(t, conn, `ALTER TABLE `+table+` DISABLE TRIGGER `+table+`_append_only`)
	}
	exec(t, conn, `TRUNCATE purchases CASCADE`)
	want := map[statemachine.State]int{}
	for _, s := range statemachine.States {
		want[s] = 0
	}
	if got := storeCounts(t, s); !maps.Equal(got, want) {
		t.Fatalf("after TRUNCATE: CountByState = %v, want every state 0", got)
	}
}

// TestStateCountsWritersDoNotWait holds 16 transactions open, each having
// inserted and moved purchases, so that each holds counter rows of the
// states it wrote: none of them waits for another's counter rows (a wait
// would last until lock_timeout, as the others commit only at the end),
// and once they commit the counts are right.
func TestStateCountsWritersDoNotWait(t *testing.T) {
	const writers = 16 // the shards of a state
	s, url := newStore(t)
	ctx := t.Context()
	var txs []pgx.Tx
	for w := range writers {
		conn := rawConn(t, url)
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		exec(t, tx.Conn(), `SET LOCAL lock_timeout = '10s'`)
		txs = append(txs, tx)
		// Every writer inserts, then moves one of its purchases to
		// submitted and another to succeeded, while the writers before it
		// hold the shards of those states they wrote.
		if _, err := tx.Exec(ctx, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at)
SELECT $1 || i, 'cus_1', 100, 'eur', 'created', 1, now(), now() FROM generate_series(1, 3) AS i`, fmt.Sprintf("pur_w%d_", w)); err != nil {
			t.Fatalf("writer %d: insert: %v", w, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE purchases SET state = 'submitted' WHERE id IN ($1 || 1, $1 || 2)`, fmt.Sprintf("pur_w%d_", w)); err != nil {
			t.Fatalf("writer %d: move to submitted: %v", w, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE purchases SET state = 'succeeded' WHERE id = $1 || 2`, fmt.Sprintf("pur_w%d_", w)); err != nil {
			t.Fatalf("writer %d: move to succeeded: %v", w, err)
		}
	}
	for w, tx := range txs {
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("writer %d: commit: %v", w, err)
		}
	}
	want := map[statemachine.State]int{}
	for _, s := range statemachine.States {
		want[s] = 0
	}
	want[statemachine.Created], want[statemachine.Submitted], want[statemachine.Succeeded] = writers, writers, writers
	if got := storeCounts(t, s); !maps.Equal(got, want) {
		t.Fatalf("CountByState = %v, want %v", got, want)
	}
}
