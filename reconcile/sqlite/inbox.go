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
    refund, refund_id, refunded_payment, dispute, account`

// inboxReadColumns are inboxColumns and the applier's bookkeeping, which
// an insert leaves at its defaults.
const inboxReadColumns = inboxColumns + `, attempts, retry_at, last_error`

// InsertInboxEvent implements reconcile.Tx.
func (t *txn) InsertInboxEvent(ctx context.Context, e reconcile.InboxEvent) (bool, error) {
	what := fmt.Sprintf("insert inbox event %s/%s", e.Provider, e.EventID)
	dispute, err := sqlstore.EncodeDispute(e.Dispute)
	if err != nil {
		return false, wrap(err, "%s", what)
	}
	n, err := t.exec(ctx, `INSERT INTO webhook_inbox (`+inboxColumns+`)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)
ON CONFLICT (provider, event_id) DO NOTHING`,
		e.Provider, e.EventID, e.Type, e.PayloadHash, sqlstore.NotNullBytes(e.Payload), e.ObjectID, string(e.Result),
		sqlstore.NullString(e.PurchaseID), string(e.Outcome), micros(e.ReceivedAt), micros(e.ProcessedAt),
		e.Amount, e.Currency, micros(e.Created), e.Refund, e.RefundID, e.Refunded, sqlstore.NullString(string(dispute)), e.Account)
	if err != nil {
		return false, wrap(err, "%s", what)
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
		`SELECT `+inboxReadColumns+` FROM webhook_inbox WHERE provider = ?1 AND event_id = ?2`, provider, eventID)
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
	return queryAll(ctx, t, scanInboxEvent, "list inbox events of "+purchaseID, `SELECT `+inboxReadColumns+` FROM webhook_inbox
WHERE purchase_id = ?1 ORDER BY received_at, provider, event_id`, purchaseID)
}

// listUnmatchedEventsSQL lists the unmatched events least recently tried
// first (SQLite sorts NULL first: never processed). The outcome is a
// literal, not a parameter, so that the planner can use the partial index
// webhook_inbox_unmatched_idx (migration 00003), which holds the
// unmatched events in this order.
const listUnmatchedEventsSQL = `SELECT ` + inboxReadColumns + ` FROM webhook_inbox
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

// claimPendingEventsSQL lists the due pending events, oldest received
// first, by the partial index webhook_inbox_pending_idx (migration
// 00014). The transaction is the only writer (BEGIN IMMEDIATE): no other
// applier can claim them until it ends.
const claimPendingEventsSQL = `SELECT ` + inboxReadColumns + ` FROM webhook_inbox
WHERE outcome = '` + string(reconcile.EventPending) + `' AND (retry_at IS NULL OR retry_at <= ?1)
ORDER BY received_at, provider, event_id LIMIT ?2`

// ClaimPendingEvents implements reconcile.Tx.
func (t *txn) ClaimPendingEvents(ctx context.Context, now time.Time, limit int) ([]reconcile.InboxEvent, error) {
	const what = "claim pending events"
	if err := dialect.CheckLimit(what, limit); err != nil {
		return nil, err
	}
	return queryAll(ctx, t, scanInboxEvent, what, claimPendingEventsSQL, now.UnixMicro(), limit)
}

// ClaimInboxEvent implements reconcile.Tx.
func (t *txn) ClaimInboxEvent(ctx context.Context, provider, eventID string) (reconcile.InboxEvent, error) {
	return queryOne(ctx, t, scanInboxEvent, fmt.Sprintf("claim inbox event %s/%s", provider, eventID),
		`SELECT `+inboxReadColumns+` FROM webhook_inbox
WHERE provider = ?1 AND event_id = ?2 AND outcome = '`+string(reconcile.EventPending)+`'`, provider, eventID)
}

// RecordInboxFailure implements reconcile.Tx.
func (t *txn) RecordInboxFailure(ctx context.Context, f reconcile.InboxFailure) error {
	retryAt := micros(f.RetryAt)
	if f.Outcome != reconcile.EventPending {
		retryAt = nil
	}
	return t.execOne(ctx, fmt.Sprintf("record the failure of inbox event %s/%s", f.Provider, f.EventID),
		`UPDATE webhook_inbox SET attempts = ?3, last_error = ?4, processed_at = ?5, outcome = ?6, retry_at = ?7
WHERE provider = ?1 AND event_id = ?2`,
		f.Provider, f.EventID, f.Attempts, f.Error, micros(f.At), string(f.Outcome), retryAt)
}

// InboxBacklog implements reconcile.Tx.
func (t *txn) InboxBacklog(ctx context.Context) (reconcile.InboxBacklog, error) {
	return queryOne(ctx, t, func(row sqlstore.Row) (reconcile.InboxBacklog, error) {
		var b reconcile.InboxBacklog
		var oldest *int64
		err := row.Scan(&b.Pending, &oldest, &b.Failed, &b.Retrying)
		b.Oldest = fromNullMicros(oldest)
		return b, err
	}, "inbox backlog", `SELECT
    (SELECT count(*) FROM webhook_inbox WHERE outcome = 'pending'),
    (SELECT min(received_at) FROM webhook_inbox WHERE outcome = 'pending'),
    (SELECT count(*) FROM webhook_inbox WHERE outcome = 'failed'),
    (SELECT count(*) FROM webhook_inbox WHERE outcome = 'pending' AND retry_at IS NOT NULL)`)
}

// ListFailedEvents implements reconcile.Tx.
func (t *txn) ListFailedEvents(ctx context.Context, limit int) ([]reconcile.InboxEvent, error) {
	const what = "list failed events"
	if err := dialect.CheckLimit(what, limit); err != nil {
		return nil, err
	}
	return queryAll(ctx, t, scanInboxEvent, what, `SELECT `+inboxReadColumns+` FROM webhook_inbox
WHERE outcome = '`+string(reconcile.EventFailed)+`'
ORDER BY processed_at DESC, provider, event_id LIMIT ?1`, limit)
}

// DeleteInboxEventsBefore implements reconcile.Tx.
func (t *txn) DeleteInboxEventsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := dialect.CheckLimit("delete inbox events", limit); err != nil {
		return 0, err
	}
	n, err := t.exec(ctx, `DELETE FROM webhook_inbox WHERE rowid IN (
    SELECT rowid FROM webhook_inbox WHERE received_at < ?1 AND outcome NOT IN ('pending', 'failed')
    ORDER BY received_at, provider, event_id LIMIT ?2)`,
		before.UnixMicro(), limit)
	if err != nil {
		return 0, wrap(err, "delete inbox events received before %s", sqlstore.Stamp(before))
	}
	return int(n), nil
}

// scanInboxEvent reads one row of inboxReadColumns.
func scanInboxEvent(row sqlstore.Row) (reconcile.InboxEvent, error) {
	var e reconcile.InboxEvent
	var purchaseID *string
	var result, outcome string
	var received int64
	var processed, created, retryAt *int64
	var dispute []byte
	err := row.Scan(&e.Provider, &e.EventID, &e.Type, &e.PayloadHash, &e.Payload, &e.ObjectID, &result,
		&purchaseID, &outcome, &received, &processed, &e.Amount, &e.Currency, &created,
		&e.Refund, &e.RefundID, &e.Refunded, &dispute, &e.Account, &e.Attempts, &retryAt, &e.LastError)
	if err != nil {
		return reconcile.InboxEvent{}, err
	}
	if e.Dispute, err = sqlstore.DecodeDispute(dispute); err != nil {
		return reconcile.InboxEvent{}, fmt.Errorf("inbox event %s/%s: %w", e.Provider, e.EventID, err)
	}
	e.Payload = sqlstore.NilIfEmpty(e.Payload)
	e.PurchaseID = sqlstore.DerefString(purchaseID)
	e.Result = provider.Outcome(result)
	e.Outcome = reconcile.EventOutcome(outcome)
	e.ReceivedAt = fromMicros(received)
	e.ProcessedAt = fromNullMicros(processed)
	e.Created = fromNullMicros(created)
	e.RetryAt = fromNullMicros(retryAt)
	return e, nil
}
