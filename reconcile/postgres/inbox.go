package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// The webhook inbox (migration 00002).
//
// The inserts that decide "first or not" (InsertInboxEvent here,
// InsertIdempotencyKey, AcquireSweepLock, InsertFinding and
// LinkAuditPayment alike) are single INSERT ... ON CONFLICT statements:
// the primary key decides, never a read before the write. A concurrent
// insert of the same key waits on the unique index for the other
// transaction and then sees its outcome (a conflict if it committed, a
// free key if it rolled back). Whether a row was written is read from
// the statement's row count, which for ON CONFLICT counts only the rows
// inserted or updated.

const inboxColumns = `provider, event_id, type, payload_hash, payload, object_id, result,
    purchase_id, outcome, received_at, processed_at, amount, currency, event_created,
    refund, refund_id, refunded_payment, dispute, account`

// inboxReadColumns are inboxColumns and the applier's bookkeeping, which
// an insert leaves at its defaults.
const inboxReadColumns = inboxColumns + `, attempts, retry_at, last_error`

var _ reconcile.InboxListener = (*Store)(nil)

// inboxChannel is the channel migration 00016's trigger notifies.
const inboxChannel = "payrecon_inbox"

// ListenInbox implements reconcile.InboxListener, on a connection of its
// own, outside the pool, so that listening never takes a pool slot.
func (s *Store) ListenInbox(ctx context.Context, wake func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return wrap(err, "listen for inbox events: connect")
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+inboxChannel); err != nil {
		return wrap(err, "listen for inbox events")
	}
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return wrap(err, "wait for inbox events")
		}
		wake()
	}
}

// InsertInboxEvent implements reconcile.Tx.
func (t *txn) InsertInboxEvent(ctx context.Context, e reconcile.InboxEvent) (bool, error) {
	what := fmt.Sprintf("insert inbox event %s/%s", e.Provider, e.EventID)
	dispute, err := sqlstore.EncodeDispute(e.Dispute)
	if err != nil {
		return false, wrap(err, "%s", what)
	}
	n, err := t.exec(ctx, `INSERT INTO webhook_inbox (`+inboxColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)
ON CONFLICT (provider, event_id) DO NOTHING`,
		e.Provider, e.EventID, e.Type, e.PayloadHash, sqlstore.NotNullBytes(e.Payload), e.ObjectID, string(e.Result),
		sqlstore.NullString(e.PurchaseID), string(e.Outcome), nullTime(e.ReceivedAt), nullTime(e.ProcessedAt),
		e.Amount, e.Currency, nullTime(e.Created), e.Refund, e.RefundID, e.Refunded, nullJSON(dispute), e.Account)
	if err != nil {
		return false, wrap(err, "%s", what)
	}
	return n == 1, nil
}

// insertInboxEventsSQL inserts a batch given as parallel arrays, one
// element per event, and returns the keys it stored. Its members have
// distinct keys (InsertInboxEvents drops repeats first), so that which
// of two repeats is stored never depends on the order the rows are
// inserted in.
const insertInboxEventsSQL = `INSERT INTO webhook_inbox (` + inboxColumns + `)
SELECT * FROM ` + inboxArraysSQL + `
ORDER BY 1, 2
ON CONFLICT (provider, event_id) DO NOTHING
RETURNING provider, event_id`

// inboxArraysSQL unnests a batch of inbox events given as parallel
// arrays, $1 to $19, in the order of inboxColumns.
const inboxArraysSQL = `unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::text[],
    $8::text[], $9::text[], $10::timestamptz[], $11::timestamptz[], $12::bigint[], $13::text[], $14::timestamptz[],
    $15::boolean[], $16::text[], $17::text[], $18::jsonb[], $19::text[]) AS e (` + inboxColumns + `)`

// receiveInboxEventsSQL is insertInboxEventsSQL with the store's clock
// for every row's received_at (the arrays' own are ignored), which it
// returns in a row of its own, provider and event_id NULL, after the keys
// it stored. The clock is $20, not $1 as nowSQL has it, so that both
// statements take the same arrays.
const receiveInboxEventsSQL = `WITH clock AS (SELECT COALESCE($20::timestamptz, statement_timestamp()) AS now),
ins AS (
    INSERT INTO webhook_inbox (` + inboxColumns + `)
    SELECT e.provider, e.event_id, e.type, e.payload_hash, e.payload, e.object_id, e.result,
        e.purchase_id, e.outcome, clock.now, e.processed_at, e.amount, e.currency, e.event_created,
        e.refund, e.refund_id, e.refunded_payment, e.dispute, e.account
    FROM ` + inboxArraysSQL + ` CROSS JOIN clock
    ORDER BY 1, 2
    ON CONFLICT (provider, event_id) DO NOTHING
    RETURNING provider, event_id
)
SELECT provider, event_id, NULL::timestamptz FROM ins
UNION ALL
SELECT NULL, NULL, now FROM clock`

// InsertInboxEvents implements reconcile.Tx in one statement, under a
// savepoint so that a refused batch leaves the transaction usable.
func (t *txn) InsertInboxEvents(ctx context.Context, events []reconcile.InboxEvent) ([]bool, error) {
	if len(events) == 0 {
		return nil, nil
	}
	inserted, _, err := t.insertInboxEvents(ctx, events, false)
	return inserted, err
}

// ReceiveInboxEvents implements reconcile.Tx in one statement, under a
// savepoint, as InsertInboxEvents: the statement reads the clock too.
func (t *txn) ReceiveInboxEvents(ctx context.Context, events []reconcile.InboxEvent) ([]bool, time.Time, error) {
	if len(events) == 0 {
		now, err := t.Now(ctx)
		return nil, now, err
	}
	return t.insertInboxEvents(ctx, events, true)
}

// insertInboxEvents inserts events in one statement: with their own
// ReceivedAt, or when stamp with the store's clock, which it returns.
func (t *txn) insertInboxEvents(ctx context.Context, events []reconcile.InboxEvent, stamp bool) ([]bool, time.Time, error) {
	type key struct{ provider, eventID string }
	var (
		providers, ids, types, hashes, objects, results, outcomes, currencies, refundIDs, refunded, accounts []string
		payloads                                                                                             [][]byte
		purchases, disputes                                                                                  []*string
		received, processed, created                                                                         []*time.Time
		amounts                                                                                              []int64
		refunds                                                                                              []bool
	)
	first := make(map[key]int, len(events)) // the index of each key's first member
	for i, e := range events {
		if _, seen := first[key{e.Provider, e.EventID}]; !seen {
			first[key{e.Provider, e.EventID}] = i
		}
	}
	// The rows go in key order, so that two transactions inserting the
	// same events in other orders take their locks in one order and
	// cannot deadlock each other.
	order := slices.SortedFunc(maps.Values(first), func(a, b int) int {
		return cmp.Or(strings.Compare(events[a].Provider, events[b].Provider), strings.Compare(events[a].EventID, events[b].EventID))
	})
	what := fmt.Sprintf("insert %d inbox events", len(events))
	for _, i := range order {
		e := events[i]
		dispute, err := sqlstore.EncodeDispute(e.Dispute)
		if err != nil {
			return nil, time.Time{}, wrap(err, "%s", what)
		}
		providers, ids, types, hashes = append(providers, e.Provider), append(ids, e.EventID), append(types, e.Type), append(hashes, e.PayloadHash)
		payloads, objects, results = append(payloads, sqlstore.NotNullBytes(e.Payload)), append(objects, e.ObjectID), append(results, string(e.Result))
		purchases, outcomes = append(purchases, strPtr(e.PurchaseID)), append(outcomes, string(e.Outcome))
		received, processed = append(received, timePtr(e.ReceivedAt)), append(processed, timePtr(e.ProcessedAt))
		amounts, currencies, created = append(amounts, e.Amount), append(currencies, e.Currency), append(created, timePtr(e.Created))
		refunds, refundIDs, refunded = append(refunds, e.Refund), append(refundIDs, e.RefundID), append(refunded, e.Refunded)
		disputes, accounts = append(disputes, strPtr(string(dispute))), append(accounts, e.Account)
	}
	args := []any{providers, ids, types, hashes, payloads, objects, results,
		purchases, outcomes, received, processed, amounts, currencies, created, refunds, refundIDs, refunded, disputes, accounts}
	query := insertInboxEventsSQL
	if stamp {
		query, args = receiveInboxEventsSQL, append(args, clockArg(t.now))
	}
	inserted := make([]bool, len(events))
	var (
		now      time.Time
		gotClock bool
	)
	err := t.queryUnderSavepoint(ctx, func(rows pgx.Rows) error {
		var provider, eventID *string
		var at *time.Time
		dest := []any{&provider, &eventID, &at}
		if !stamp {
			dest = dest[:2]
		}
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			if provider == nil || eventID == nil {
				// The clock row: its value, not the scan target's
				// pointer, which the next Scan may reuse.
				if at != nil {
					now, gotClock = *at, true
				}
				continue
			}
			inserted[first[key{*provider, *eventID}]] = true
		}
		return rows.Err()
	}, query, args...)
	if err == nil && stamp && !gotClock {
		err = errors.New("the statement returned no clock")
	}
	if err != nil {
		return nil, time.Time{}, wrap(err, "%s", what)
	}
	if !stamp {
		return inserted, time.Time{}, nil
	}
	return inserted, now.Truncate(time.Microsecond).UTC(), nil
}

// UpdateInboxEvents implements reconcile.Tx in one statement, under a
// savepoint. A batch naming a missing event writes nothing: the
// statement itself updates only when it finds every event, so the
// refusal needs no rollback (the savepoint is released in the same round
// trip) and the transaction goes on.
func (t *txn) UpdateInboxEvents(ctx context.Context, updates []reconcile.InboxUpdate) error {
	if len(updates) == 0 {
		return nil
	}
	var (
		providers, ids, outcomes []string
		purchases                []*string
		processed                []*time.Time
	)
	for _, u := range updates {
		providers, ids, outcomes = append(providers, u.Provider), append(ids, u.EventID), append(outcomes, string(u.Outcome))
		purchases, processed = append(purchases, strPtr(u.PurchaseID)), append(processed, timePtr(u.ProcessedAt))
	}
	what := fmt.Sprintf("update %d inbox events", len(updates))
	var found int
	err := t.queryUnderSavepointWith(ctx, byKeyPlan, func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&found); err != nil {
				return err
			}
		}
		return rows.Err()
	}, updateInboxEventsSQL, providers, ids, purchases, outcomes, processed, len(updates))
	if err != nil {
		return wrap(err, "%s", what)
	}
	if found != len(updates) {
		return dialect.NotFound(fmt.Sprintf("%s (%d of them)", what, len(updates)-found))
	}
	return nil
}

// updateInboxEventsSQL is UpdateInboxEvents' statement: it returns how
// many of the $6 updates name an event there is, and updates them only
// when that is all of them. Each event is found by its primary key: the
// statement runs on its generic plan made with sequential scans off
// (byKeyPlan). A plan made on a new database's empty inbox without that
// setting scanned the whole inbox for every group (1.7 ms a group, 1,600
// pages, at 10,000 events).
const updateInboxEventsSQL = `
WITH u AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[])
        AS u(provider, event_id, purchase_id, outcome, processed_at)
), found AS (
    SELECT count(*) AS n FROM u
    WHERE EXISTS (SELECT FROM webhook_inbox AS w WHERE w.provider = u.provider AND w.event_id = u.event_id)
), upd AS (
    UPDATE webhook_inbox AS w SET purchase_id = u.purchase_id, outcome = u.outcome, processed_at = u.processed_at
    FROM u
    WHERE w.provider = u.provider AND w.event_id = u.event_id AND (SELECT n FROM found) = $6
)
SELECT n FROM found`

// GetInboxEvent implements reconcile.Tx.
func (t *txn) GetInboxEvent(ctx context.Context, provider, eventID string) (reconcile.InboxEvent, error) {
	return queryOne(ctx, t, scanInboxEvent, fmt.Sprintf("get inbox event %s/%s", provider, eventID),
		`SELECT `+inboxReadColumns+` FROM webhook_inbox WHERE provider = $1 AND event_id = $2`, provider, eventID)
}

// UpdateInboxEvent implements reconcile.Tx.
func (t *txn) UpdateInboxEvent(ctx context.Context, provider, eventID, purchaseID string, outcome reconcile.EventOutcome, processedAt time.Time) error {
	return t.execOne(ctx, fmt.Sprintf("update inbox event %s/%s", provider, eventID),
		`UPDATE webhook_inbox SET purchase_id = $3, outcome = $4, processed_at = $5
WHERE provider = $1 AND event_id = $2`,
		provider, eventID, sqlstore.NullString(purchaseID), string(outcome), nullTime(processedAt))
}

// ListInboxEvents implements reconcile.Tx.
func (t *txn) ListInboxEvents(ctx context.Context, purchaseID string) ([]reconcile.InboxEvent, error) {
	return queryAll(ctx, t, scanInboxEvent, "list inbox events of "+purchaseID, `SELECT `+inboxReadColumns+` FROM webhook_inbox
WHERE purchase_id = $1 ORDER BY received_at, provider, event_id`, purchaseID)
}

// listUnmatchedEventsSQL lists the unmatched events least recently tried
// first. The outcome is a literal, not a parameter, so that the planner
// can use the partial index webhook_inbox_unmatched_idx (migration 00003),
// which holds the unmatched events in this order, in a generic plan too.
const listUnmatchedEventsSQL = `SELECT ` + inboxReadColumns + ` FROM webhook_inbox
WHERE outcome = '` + string(reconcile.EventUnmatched) + `'
ORDER BY processed_at NULLS FIRST, received_at, provider, event_id LIMIT $1`

// ListUnmatchedEvents implements reconcile.Tx.
func (t *txn) ListUnmatchedEvents(ctx context.Context, limit int) ([]reconcile.InboxEvent, error) {
	const what = "list unmatched events"
	if err := dialect.CheckLimit(what, limit); err != nil {
		return nil, err
	}
	return queryAll(ctx, t, scanInboxEvent, what, listUnmatchedEventsSQL, limit)
}

// claimPendingEventsSQL claims the due pending events, oldest received
// first. The outcome is a literal, so that the planner uses the partial
// index webhook_inbox_pending_idx (migration 00016) in a generic plan
// too. SKIP LOCKED: two appliers take disjoint batches, never wait for
// each other, and never hold one event both.
const claimPendingEventsSQL = `SELECT ` + inboxReadColumns + ` FROM webhook_inbox
WHERE outcome = '` + string(reconcile.EventPending) + `' AND (retry_at IS NULL OR retry_at <= $1)
ORDER BY received_at, provider, event_id LIMIT $2
FOR UPDATE SKIP LOCKED`

// ClaimPendingEvents implements reconcile.Tx.
func (t *txn) ClaimPendingEvents(ctx context.Context, now time.Time, limit int) ([]reconcile.InboxEvent, error) {
	const what = "claim pending events"
	if err := dialect.CheckLimit(what, limit); err != nil {
		return nil, err
	}
	return queryAll(ctx, t, scanInboxEvent, what, claimPendingEventsSQL, now, limit)
}

// ClaimInboxEvent implements reconcile.Tx.
func (t *txn) ClaimInboxEvent(ctx context.Context, provider, eventID string) (reconcile.InboxEvent, error) {
	return queryOne(ctx, t, scanInboxEvent, fmt.Sprintf("claim inbox event %s/%s", provider, eventID),
		`SELECT `+inboxReadColumns+` FROM webhook_inbox
WHERE provider = $1 AND event_id = $2 AND outcome = '`+string(reconcile.EventPending)+`'
FOR UPDATE SKIP LOCKED`, provider, eventID)
}

// RecordInboxFailure implements reconcile.Tx.
func (t *txn) RecordInboxFailure(ctx context.Context, f reconcile.InboxFailure) error {
	return t.execOne(ctx, fmt.Sprintf("record the failure of inbox event %s/%s", f.Provider, f.EventID),
		`UPDATE webhook_inbox SET attempts = $3, last_error = $4, processed_at = $5, outcome = $6,
    retry_at = CASE WHEN $6 = 'pending' THEN $7::timestamptz END
WHERE provider = $1 AND event_id = $2`,
		f.Provider, f.EventID, f.Attempts, f.Error, nullTime(f.At), string(f.Outcome), nullTime(f.RetryAt))
}

// InboxBacklog implements reconcile.Tx.
func (t *txn) InboxBacklog(ctx context.Context) (reconcile.InboxBacklog, error) {
	return queryOne(ctx, t, func(row sqlstore.Row) (reconcile.InboxBacklog, error) {
		var b reconcile.InboxBacklog
		var oldest *time.Time
		err := row.Scan(&b.Pending, &oldest, &b.Failed, &b.Retrying)
		b.Oldest = derefTime(oldest)
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
ORDER BY processed_at DESC, provider, event_id LIMIT $1`, limit)
}

// DeleteInboxEventsBefore implements reconcile.Tx.
func (t *txn) DeleteInboxEventsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := dialect.CheckLimit("delete inbox events", limit); err != nil {
		return 0, err
	}
	n, err := t.exec(ctx, `DELETE FROM webhook_inbox
WHERE (provider, event_id) IN (
    SELECT provider, event_id FROM webhook_inbox
    WHERE received_at < $1 AND outcome NOT IN ('pending', 'failed')
    ORDER BY received_at
    LIMIT $2
)`, before, limit)
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
	var processed, created, retryAt *time.Time
	var dispute []byte
	err := row.Scan(&e.Provider, &e.EventID, &e.Type, &e.PayloadHash, &e.Payload, &e.ObjectID, &result,
		&purchaseID, &outcome, &e.ReceivedAt, &processed, &e.Amount, &e.Currency, &created,
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
	e.ReceivedAt = e.ReceivedAt.UTC()
	e.ProcessedAt = derefTime(processed)
	e.Created = derefTime(created)
	e.RetryAt = derefTime(retryAt)
	return e, nil
}
