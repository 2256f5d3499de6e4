package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/postgres"
	"github.com/payrecon/payrecon/statemachine"
)

var errRollback = errors.New("roll back")

// waitForLockWaiter returns once a session of conn's database waits on a
// lock (a heavyweight lock: a row, a unique index entry, a transaction id).
func waitForLockWaiter(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		if err != nil {
			t.Fatalf("waiting for a session to block on a lock: %v", err)
		}
		if n > 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// secondWaits runs first in a transaction and, while it is open, second in
// another transaction, which must block on first's row; first then
// commits (or rolls back when commit is false). It returns what second
// reported once it could go on.
func secondWaits(t *testing.T, s *postgres.Store, url string, commit bool,
	first func(tx reconcile.Tx) error, second func(tx reconcile.Tx) (bool, error),
) bool {
	t.Helper()
	conn := rawConn(t, url)
	ctx := t.Context()
	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	err := s.InTx(ctx, func(tx reconcile.Tx) error {
		if err := first(tx); err != nil {
			return err
		}
		go func() {
			var r result
			r.err = s.InTx(ctx, func(tx reconcile.Tx) error {
				var err error
				r.ok, err = second(tx)
				return err
			})
			done <- r
		}()
		waitForLockWaiter(t, conn)
		if !commit {
			return errRollback
		}
		return nil
	})
	if commit && err != nil || !commit && !errors.Is(err, errRollback) {
		t.Fatalf("first transaction: %v", err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("second transaction: %v", r.err)
	}
	return r.ok
}

// TestConcurrentInsertsWaitForTheFirst shows what "never reads first"
// buys: the second insert of a key blocks until the first transaction
// ends, then reports false if it committed and true if it rolled back.
func TestConcurrentInsertsWaitForTheFirst(t *testing.T) {
	s, url := newStore(t)
	ctx := t.Context()
	ev := func(id string) reconcile.InboxEvent {
		return reconcile.InboxEvent{Provider: "stripe", EventID: id, PayloadHash: "h", Outcome: reconcile.EventUnmatched, ReceivedAt: base}
	}
	key := func(k string) reconcile.IdempotencyKey {
		return reconcile.IdempotencyKey{Client: "c", Key: k, RequestHash: "h", CreatedAt: base}
	}
	insertEvent := func(id string) func(tx reconcile.Tx) (bool, error) {
		return func(tx reconcile.Tx) (bool, error) { return tx.InsertInboxEvent(ctx, ev(id)) }
	}
	insertKey := func(k string) func(tx reconcile.Tx) (bool, error) {
		return func(tx reconcile.Tx) (bool, error) { return tx.InsertIdempotencyKey(ctx, key(k)) }
	}
	lock := func(owner string) func(tx reconcile.Tx) (bool, error) {
		return func(tx reconcile.Tx) (bool, error) {
			return tx.AcquireSweepLock(ctx, "rescue-"+owner[:1], owner, time.Minute)
		}
	}
	must := func(f func(tx reconcile.Tx) (bool, error)) func(tx reconcile.Tx) error {
		return func(tx reconcile.Tx) error {
			ok, err := f(tx)
			if err == nil && !ok {
				err = errors.New("first insert reported not inserted")
			}
			return err
		}
	}
	for _, tc := range []struct {
		name          string
		first, second func(tx reconcile.Tx) (bool, error)
		commit, want  bool
	}{
		{"inbox event, first commits", insertEvent("evt_1"), insertEvent("evt_1"), true, false},
		{"inbox event, first rolls back", insertEvent("evt_2"), insertEvent("evt_2"), false, true},
		{"idempotency key, first commits", insertKey("k1"), insertKey("k1"), true, false},
		{"idempotency key, first rolls back", insertKey("k2"), insertKey("k2"), false, true},
		{"sweep lock, first commits", lock("a1"), lock("a2"), true, false},
		{"sweep lock, first rolls back", lock("b1"), lock("b2"), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := secondWaits(t, s, url, tc.commit, must(tc.first), tc.second); got != tc.want {
				t.Fatalf("second insert reported %v, want %v", got, tc.want)
			}
		})
	}
}

// TestClaimJobDoesNotWaitForABusyJob: while a worker's transaction holds
// the job row (after CheckLease), ClaimJob reports ErrConflict at once,
// even though the lease has expired by the store's clock.
func TestClaimJobDoesNotWaitForABusyJob(t *testing.T) {
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
	l, err := s.ClaimJob(ctx, "pur_1", "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	late := l.ExpiresAt.Add(time.Second)
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		c.Set(base)
		if err := tx.CheckLease(ctx, l); err != nil {
			return err
		}
		c.Set(late)
		_, err := s.ClaimJob(ctx, "pur_1", "operator", time.Minute)
		if !errors.Is(err, reconcile.ErrConflict) || !strings.Contains(err.Error(), "in progress") {
			t.Errorf("ClaimJob of a job locked by CheckLease: %v, want ErrConflict (in progress)", err)
		}
		return tx.RescheduleJob(ctx, "pur_1", late)
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.ClaimJob(ctx, "pur_1", "operator", time.Minute)
	if err != nil || got.Token != 2 || got.TakenOver {
		t.Fatalf("ClaimJob after commit = %+v, %v; want token 2, not taken over", got, err)
	}
	_, err = s.ClaimJob(ctx, "pur_1", "w1", time.Minute)
	if !errors.Is(err, reconcile.ErrConflict) || !strings.Contains(err.Error(), `leased by "operator"`) {
		t.Fatalf("ClaimJob of a leased job: %v, want ErrConflict naming the owner", err)
	}
}

// TestNewMethodsRefuseInvalidInput checks the ErrInvalid cases of the
// store's own documentation, and that each refusal leaves the
// transaction usable.
func TestNewMethodsRefuseInvalidInput(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		err  func() error
	}{
		{"ClaimExpiredJobs no owner", func() error { _, err := s.ClaimExpiredJobs(ctx, "", 1, time.Second); return err }},
		{"ClaimExpiredJobs limit 0", func() error { _, err := s.ClaimExpiredJobs(ctx, "w", 0, time.Second); return err }},
		{"ClaimExpiredJobs lease 0", func() error { _, err := s.ClaimExpiredJobs(ctx, "w", 1, 0); return err }},
		{"ClaimJob no owner", func() error { _, err := s.ClaimJob(ctx, "pur_1", "", time.Second); return err }},
		{"ClaimJob lease 0", func() error { _, err := s.ClaimJob(ctx, "pur_1", "w", 0); return err }},
	} {
		if err := tc.err(); !errors.Is(err, reconcile.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.name, err)
		}
	}

	p := reconcile.Purchase{ID: "pur_1", Customer: "cus_1", Amount: 100, Currency: "eur", State: statemachine.Created, Version: 1, CreatedAt: base, UpdatedAt: base}
	err := s.InTx(ctx, func(tx reconcile.Tx) error {
		if err := tx.InsertPurchase(ctx, p); err != nil {
			return err
		}
		for _, tc := range []struct {
			name string
			err  func() error
		}{
			{"inbox event without provider", func() error {
				_, err := tx.InsertInboxEvent(ctx, reconcile.InboxEvent{EventID: "evt_1", Outcome: reconcile.EventUnmatched, ReceivedAt: base})
				return err
			}},
			{"inbox event without id", func() error {
				_, err := tx.InsertInboxEvent(ctx, reconcile.InboxEvent{Provider: "stripe", Outcome: reconcile.EventUnmatched, ReceivedAt: base})
				return err
			}},
			{"inbox event without received time", func() error {
				_, err := tx.InsertInboxEvent(ctx, reconcile.InboxEvent{Provider: "stripe", EventID: "evt_1", Outcome: reconcile.EventUnmatched})
				return err
			}},
			{"idempotency key without key", func() error {
				_, err := tx.InsertIdempotencyKey(ctx, reconcile.IdempotencyKey{Client: "c", RequestHash: "h", CreatedAt: base})
				return err
			}},
			{"idempotency key without created time", func() error {
				_, err := tx.InsertIdempotencyKey(ctx, reconcile.IdempotencyKey{Client: "c", Key: "k", RequestHash: "h"})
				return err
			}},
			{"unknown operator action", func() error {
				return tx.InsertOperatorAction(ctx, reconcile.OperatorAction{PurchaseID: "pur_1", Operator: "alice", Action: "delete", At: base})
			}},
			{"operator action without time", func() error {
				return tx.InsertOperatorAction(ctx, reconcile.OperatorAction{PurchaseID: "pur_1", Operator: "alice", Action: "note"})
			}},
			{"sweep lock without name", func() error { _, err := tx.AcquireSweepLock(ctx, "", "w", time.Second); return err }},
			{"sweep lock without owner", func() error { _, err := tx.AcquireSweepLock(ctx, "x", "", time.Second); return err }},
			{"sweep lock ttl 0", func() error { _, err := tx.AcquireSweepLock(ctx, "x", "w", 0); return err }},
			{"unmatched events limit 0", func() error { _, err := tx.ListUnmatchedEvents(ctx, 0); return err }},
			{"overdue limit 0", func() error { _, err := tx.ListOverdueUncertain(ctx, base, 0); return err }},
			{"delete events limit 0", func() error { _, err := tx.DeleteInboxEventsBefore(ctx, base, 0); return err }},
			{"delete keys limit 0", func() error { _, err := tx.DeleteIdempotencyKeysBefore(ctx, base, 0); return err }},
		} {
			if err := tc.err(); !errors.Is(err, reconcile.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", tc.name, err)
			}
		}
		err := tx.InsertOperatorAction(ctx, reconcile.OperatorAction{PurchaseID: "pur_missing", Operator: "alice", Action: "note", At: base})
		if !errors.Is(err, reconcile.ErrNotFound) {
			t.Errorf("operator action on an unknown purchase: %v, want ErrNotFound", err)
		}
		// The transaction is still usable after all those refusals.
		return tx.InsertOperatorAction(ctx, reconcile.OperatorAction{PurchaseID: "pur_1", Operator: "alice", Action: "note", At: base})
	})
	if err != nil {
		t.Fatalf("transaction after refused writes: %v", err)
	}
	err = s.InTx(ctx, func(tx reconcile.Tx) error {
		as, err := tx.ListOperatorActions(ctx, "pur_1")
		if err == nil && len(as) != 1 {
			err = errors.New("the committed note is missing")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestInboxPayloadEmptyAndNil: the NOT NULL payload takes nil, and both
// nil and empty read back as nil.
func TestInboxPayloadEmptyAndNil(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	err := s.InTx(ctx, func(tx reconcile.Tx) error {
		for _, e := range []reconcile.InboxEvent{
			{Provider: "stripe", EventID: "evt_nil", Outcome: reconcile.EventUnmatched, ReceivedAt: base},
			{Provider: "stripe", EventID: "evt_empty", Payload: []byte{}, Outcome: reconcile.EventUnmatched, ReceivedAt: base},
		} {
			if _, err := tx.InsertInboxEvent(ctx, e); err != nil {
				return err
			}
			got, err := tx.GetInboxEvent(ctx, e.Provider, e.EventID)
			if err != nil {
				return err
			}
			if got.Payload != nil {
				t.Errorf("%s: payload %q, want nil", e.EventID, got.Payload)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRetentionQueriesUseTheirIndexes guards the indexes 00002 and 00003
// add for the sweeps against a rewrite of the queries that could not use
// them.
func TestRetentionQueriesUseTheirIndexes(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	exec(t, conn, `SET enable_seqscan = off`)
	for _, tc := range []struct{ query, index string }{
		{`SELECT provider, event_id FROM webhook_inbox WHERE received_at < now() ORDER BY received_at LIMIT 10`, "webhook_inbox_received_at_idx"},
		{`SELECT client, key FROM idempotency_keys WHERE created_at < now() ORDER BY created_at LIMIT 10`, "idempotency_keys_created_at_idx"},
		{`SELECT * FROM webhook_inbox WHERE outcome = 'unmatched' ORDER BY processed_at NULLS FIRST, received_at, provider, event_id LIMIT 10`, "webhook_inbox_unmatched_idx"},
		{`SELECT * FROM webhook_inbox WHERE purchase_id = 'pur_1' ORDER BY received_at`, "webhook_inbox_purchase_idx"},
		{`SELECT min(uncertain_since) FROM purchases WHERE state IN ('uncertain', 'reconciling')`, "purchases_uncertain_since_idx"},
		{`SELECT id FROM purchases WHERE state = 'uncertain' AND escalated_at IS NULL AND uncertain_since < now() ORDER BY uncertain_since LIMIT 10`, "purchases_overdue_idx"}, // 00007
		{`SELECT purchase_id FROM jobs WHERE done_at IS NULL AND lease_owner IS NOT NULL AND lease_expires_at <= now()`, "jobs_leased_idx"},
		{`SELECT id FROM audit_findings WHERE closed_at IS NULL ORDER BY found_at, id LIMIT 10`, "audit_findings_open_idx"},
		{`SELECT id FROM audit_findings WHERE purchase_id = 'pur_1' ORDER BY found_at, id`, "audit_findings_purchase_idx"},
		{`SELECT id FROM purchases WHERE state = 'succeeded' AND first_attempt_at >= now() AND first_attempt_at < now() ORDER BY first_attempt_at, id`, "purchases_first_attempt_idx"},
	} {
		rows, _ := conn.Query(t.Context(), "EXPLAIN "+tc.query)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("EXPLAIN %s: %v", tc.query, err)
		}
		plan := strings.Join(lines, "\n")
		if !strings.Contains(plan, tc.index) {
			t.Errorf("%s\ndoes not use %s:\n%s", tc.query, tc.index, plan)
		}
	}
}

// TestListUnmatchedEventsPlan: the sweep's own query reads the unmatched
// events from webhook_inbox_unmatched_idx in its order, without a sort,
// in a generic plan too (the one a prepared statement ends up with).
func TestListUnmatchedEventsPlan(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	exec(t, conn, `SET enable_seqscan = off`)
	exec(t, conn, `SET plan_cache_mode = force_generic_plan`)
	exec(t, conn, `PREPARE list_unmatched AS `+postgres.ListUnmatchedEventsSQL)
	rows, _ := conn.Query(t.Context(), `EXPLAIN EXECUTE list_unmatched(10)`)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	plan := strings.Join(lines, "\n")
	if !strings.Contains(plan, "webhook_inbox_unmatched_idx") || strings.Contains(plan, "Sort") {
		t.Errorf("ListUnmatchedEvents does not read webhook_inbox_unmatched_idx in order:\n%s", plan)
	}
}
