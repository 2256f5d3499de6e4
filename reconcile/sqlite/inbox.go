package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// The webhook inbox (migration 00002).
//
// The inserts that decide "first or not" (InsertInboxEvent here,
// InsertIdempotencyKey, AcquireSweepLock, InsertFinding and
// LinkAuditPayment alike) are single INSERT ... ON CONFLICT statements:
// the primary key decides, from the statement's row count, never a read
// before the write. Writers are serialized, so a concurrent insert of the
// same key runs after the other transaction ended and sees its outcome
// (a conflict if it committed, a free key if it rolled back).

const inboxColumns = `provider, event_id, type, payload_hash, payload, object_id, result,
    purchase_id, outcome, received_at, processed_at, amount, currency, event_created,
    refund, refund_id, refunded_payment`

// InsertInboxEvent implements reconcile.Tx.
func (t *txn) InsertInboxEvent(ctx context.Context, e reconcile.InboxEvent) (bool, error) {
	n, err := t.exec(ctx, `INSERT INTO webhook_inbox (`+inboxColumns+`)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)
ON CONFLICT (provider, event_id) DO NOTHING`,
		e.Provider, e.EventID, e.Type, e.PayloadHash, sqlstore.NotNullBytes(e.Payload), e.ObjectID, string(e.Result),
		sqlstore.NullString(e.PurchaseID), string(e.Outcome), micros(e.ReceivedAt), micros(e.ProcessedAt),
		e.Amount, e.Currency, micros(e.Created), e.Refund, e.RefundID, e.Refunded)
	if err != nil {
		return false, wrap(err, "insert inbox event %s/%s", e.Provider, e.EventID)
	}
	return n == 1, nil
}

// InsertInboxEvents implements reconcile.Tx, one insert per event under
// one savepoint: SQLite has no round trips to save, and the savepoint
// undoes the batch when one fails.
func (t *txn) InsertInboxEvents(ctx context.Context, events []reconcile.InboxEvent) ([]bool, error) {
	if len(events) == 0 {
		return nil, nil
	}
	var inserted []bool
	err := t.Savepoint(ctx, func(tx reconcile.Tx) error {
		inserted = make([]bool, len(events))
		for i, e := range events {
			ok, err := tx.InsertInboxEvent(ctx, e)
			if err != nil {
				return err
			}
			inserted[i] = ok
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return inserted, nil
}

// ReceiveInboxEvents implements reconcile.Tx: InsertInboxEvents at the
// store's clock, which costs no round trip here.
func (t *txn) ReceiveInboxEvents(ctx context.Context, events []reconcile.InboxEvent) ([]bool, time.Time, error) {
	now := storeNow(t.now)
	stamped := make([]reconcile.InboxEvent, len(events))
	for i, e := range events {
		e.ReceivedAt = now
		stamped[i] = e
	}
	inserted, err := t.InsertInboxEvents(ctx, stamped)
	if err != nil {
		return nil, time.Time{}, err
	}
	return inserted, now, nil
}

// UpdateInboxEvents implements reconcile.Tx, one update per event under
// one savepoint, so that a missing event undoes the batch.
func (t *txn) UpdateInboxEvents(ctx context.Context, updates []reconcile.InboxUpdate) error {
	if len(updates) == 0 {
		return nil
	}
	return t.Savepoint(ctx, func(tx reconcile.Tx) error {
		for _, u := range updates {
			if err := tx.UpdateInboxEvent(ctx, u.Provider, u.EventID, u.PurchaseID, u.Outcome, u.ProcessedAt); err != nil {
				return err
			}
		}
		return nil
	})
}

// GetInboxEvent implements reconcile.Tx.
func (t *txn) GetInboxEvent(ctx context.Context, provider, eventID string) (reconcile.InboxEvent, error) {
	return queryOne(ctx, t, scanInboxEvent, fmt.Sprintf("get inbox event %s/%s", provider, eventID),
		`SELECT `+inboxColumns+` FROM webhook_inbox WHERE provider = ?1 AND event_id = ?2`, provider, eventID)
}

// UpdateInboxEvent implements reconcile.Tx.
func (t *txn) UpdateInboxEvent(ctx context.Context, provider, eventID, purchaseID string, outcome reconcile.EventOutcome, processedAt time.Time) error {
	return t.execOne(ctx, fmt.Sprintf("update inbox event %s/%s", provider, eventID),
		`UPDATE webhook_inbox SET purchase_id = ?3, outcome = ?4, processed_at = ?5
WHERE provider = ?1 AND event_id = ?2`,
		provider, eventID, sqlstore.NullString(purchaseID), string(outcome), micros(processedAt))
}

// ListInboxEvents implements reconcile.Tx.
func (t *txn) ListInboxEvents(ctx context.Context, purchaseID string) ([]reconcile.InboxEvent, error) {
	return queryAll(ctx, t, scanInboxEvent, "list inbox events of "+purchaseID, `SELECT `+inboxColumns+` FROM webhook_inbox
WHERE purchase_id = ?1 ORDER BY received_at, provider, event_id`, purchaseID)
}

// listUnmatchedEventsSQL lists the unmatched events least recently tried
// first (SQLite sorts NULL first: never processed). The outcome is a
// literal, not a parameter, so that the planner can use the partial index
// webhook_inbox_unmatched_idx (migration 00003), which holds the
// unmatched events in this order.
const listUnmatchedEventsSQL = `SELECT ` + inboxColumns + ` FROM webhook_inbox
WHERE outcome = '` + string(reconcile.EventUnmatched) + `'
ORDER BY processed_at, received_at, provider, event_id LIMIT ?1`

// ListUnmatchedEvents implements reconcile.Tx.
func (t *txn) ListUnmatchedEvents(ctx context.Context, limit int) ([]reconcile.InboxEvent, error) {
	const what = "list unmatched events"
	if err := dialect.CheckLimit(what, limit); err != nil {
		return nil, err
	}
	return queryAll(ctx, t, scanInboxEvent, what, listUnmatchedEventsSQL, limit)
}

// DeleteInboxEventsBefore implements reconcile.Tx.
func (t *txn) DeleteInboxEventsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := dialect.CheckLimit("delete inbox events", limit); err != nil {
		return 0, err
	}
	n, err := t.exec(ctx, `DELETE FROM webhook_inbox WHERE rowid IN (
    SELECT rowid FROM webhook_inbox WHERE received_at < ?1 ORDER BY received_at, provider, event_id LIMIT ?2)`,
		before.UnixMicro(), limit)
	if err != nil {
		return 0, wrap(err, "delete inbox events received before %s", sqlstore.Stamp(before))
	}
	return int(n), nil
}

// scanInboxEvent reads one row of inboxColumns.
func scanInboxEvent(row sqlstore.Row) (reconcile.InboxEvent, error) {
	var e reconcile.InboxEvent
	var purchaseID *string
	var result, outcome string
	var received int64
	var processed, created *int64
	err := row.Scan(&e.Provider, &e.EventID, &e.Type, &e.PayloadHash, &e.Payload, &e.ObjectID, &result,
		&purchaseID, &outcome, &received, &processed, &e.Amount, &e.Currency, &created,
		&e.Refund, &e.RefundID, &e.Refunded)
	if err != nil {
		return reconcile.InboxEvent{}, err
	}
	e.Payload = sqlstore.NilIfEmpty(e.Payload)
	e.PurchaseID = sqlstore.DerefString(purchaseID)
	e.Result = provider.Outcome(result)
	e.Outcome = reconcile.EventOutcome(outcome)
	e.ReceivedAt = fromMicros(received)
	e.ProcessedAt = fromNullMicros(processed)
	e.Created = fromNullMicros(created)
	return e, nil
}
