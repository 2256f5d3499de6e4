package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// The webhook inbox, the purchase API's idempotency keys, the operator
// audit and the sweep locks (migration 00002).
//
// The inserts that decide "first or not" (InsertInboxEvent,
// InsertIdempotencyKey, AcquireSweepLock) are single INSERT ... ON
// CONFLICT statements: the primary key decides, never a read before the
// write. A concurrent insert of the same key waits on the unique index for
// the other transaction and then sees its outcome (a conflict if it
// committed, a free key if it rolled back). Whether a row was written is
// read from the statement's row count, which for ON CONFLICT counts only
// the rows inserted or updated.

const inboxColumns = `provider, event_id, type, payload_hash, payload, object_id, result,
    purchase_id, outcome, received_at, processed_at, amount, currency, event_created`

// InsertInboxEvent implements reconcile.Tx. A nil or empty payload is
// stored empty and read back as nil. An empty Provider or EventID, or a
// zero ReceivedAt, is refused with reconcile.ErrInvalid.
func (t *txn) InsertInboxEvent(ctx context.Context, e reconcile.InboxEvent) (bool, error) {
	tag, err := t.exec(ctx, `INSERT INTO webhook_inbox (`+inboxColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
ON CONFLICT (provider, event_id) DO NOTHING`,
		e.Provider, e.EventID, e.Type, e.PayloadHash, notNullBytes(e.Payload), e.ObjectID, string(e.Result),
		nullString(e.PurchaseID), string(e.Outcome), nullTime(e.ReceivedAt), nullTime(e.ProcessedAt),
		e.Amount, e.Currency, nullTime(e.Created))
	if err != nil {
		return false, wrap(err, "insert inbox event %s/%s", e.Provider, e.EventID)
	}
	return tag.RowsAffected() == 1, nil
}

// GetInboxEvent implements reconcile.Tx.
func (t *txn) GetInboxEvent(ctx context.Context, provider, eventID string) (reconcile.InboxEvent, error) {
	e, err := scanInboxEvent(t.tx.QueryRow(ctx, `SELECT `+inboxColumns+` FROM webhook_inbox
WHERE provider = $1 AND event_id = $2`, provider, eventID))
	if errors.Is(err, pgx.ErrNoRows) {
		return reconcile.InboxEvent{}, fmt.Errorf("postgres: get inbox event %s/%s: %w", provider, eventID, reconcile.ErrNotFound)
	}
	if err != nil {
		return reconcile.InboxEvent{}, wrap(err, "get inbox event %s/%s", provider, eventID)
	}
	return e, nil
}

// UpdateInboxEvent implements reconcile.Tx. An empty purchaseID clears the
// event's purchase.
func (t *txn) UpdateInboxEvent(ctx context.Context, provider, eventID, purchaseID string, outcome reconcile.EventOutcome, processedAt time.Time) error {
	tag, err := t.exec(ctx, `UPDATE webhook_inbox SET purchase_id = $3, outcome = $4, processed_at = $5
WHERE provider = $1 AND event_id = $2`,
		provider, eventID, nullString(purchaseID), string(outcome), nullTime(processedAt))
	if err != nil {
		return wrap(err, "update inbox event %s/%s", provider, eventID)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: update inbox event %s/%s: %w", provider, eventID, reconcile.ErrNotFound)
	}
	return nil
}

// ListInboxEvents implements reconcile.Tx: the events whose purchase is
// purchaseID (as stored at insert or by UpdateInboxEvent), oldest received
// first, then by provider and event id.
func (t *txn) ListInboxEvents(ctx context.Context, purchaseID string) ([]reconcile.InboxEvent, error) {
	rows, err := t.tx.Query(ctx, `SELECT `+inboxColumns+` FROM webhook_inbox
WHERE purchase_id = $1 ORDER BY received_at, provider, event_id`, purchaseID)
	if err != nil {
		return nil, wrap(err, "list inbox events of %s", purchaseID)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (reconcile.InboxEvent, error) {
		return scanInboxEvent(row)
	})
	if err != nil {
		return nil, wrap(err, "list inbox events of %s", purchaseID)
	}
	return out, nil
}

// listUnmatchedEventsSQL lists the unmatched events least recently tried
// first. The outcome is a literal, not a parameter, so that the planner
// can use the partial index webhook_inbox_unmatched_idx (migration 00003),
// which holds the unmatched events in this order, in a generic plan too.
const listUnmatchedEventsSQL = `SELECT ` + inboxColumns + ` FROM webhook_inbox
WHERE outcome = '` + string(reconcile.EventUnmatched) + `'
ORDER BY processed_at NULLS FIRST, received_at, provider, event_id LIMIT $1`

// ListUnmatchedEvents implements reconcile.Tx: least recently tried
// first, that is never processed (processed_at NULL) first, then by
// processed_at, received_at, provider and event id. limit must be positive
// (reconcile.ErrInvalid otherwise).
func (t *txn) ListUnmatchedEvents(ctx context.Context, limit int) ([]reconcile.InboxEvent, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("postgres: list unmatched events: %w: limit %d", reconcile.ErrInvalid, limit)
	}
	rows, err := t.tx.Query(ctx, listUnmatchedEventsSQL, limit)
	if err != nil {
		return nil, wrap(err, "list unmatched events")
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (reconcile.InboxEvent, error) {
		return scanInboxEvent(row)
	})
	if err != nil {
		return nil, wrap(err, "list unmatched events")
	}
	return out, nil
}

// DeleteInboxEventsBefore implements reconcile.Tx: one batch of at most
// limit events received strictly before the given time, oldest first.
// limit must be positive (reconcile.ErrInvalid otherwise).
func (t *txn) DeleteInboxEventsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("postgres: delete inbox events: %w: limit %d", reconcile.ErrInvalid, limit)
	}
	tag, err := t.exec(ctx, `DELETE FROM webhook_inbox
WHERE (provider, event_id) IN (
    SELECT provider, event_id FROM webhook_inbox
    WHERE received_at < $1
    ORDER BY received_at
    LIMIT $2
)`, before, limit)
	if err != nil {
		return 0, wrap(err, "delete inbox events received before %s", before.UTC().Format(time.RFC3339Nano))
	}
	return int(tag.RowsAffected()), nil
}

// scanInboxEvent reads one row of inboxColumns.
func scanInboxEvent(row pgx.Row) (reconcile.InboxEvent, error) {
	var e reconcile.InboxEvent
	var result, outcome string
	var purchaseID *string
	var processed, created *time.Time
	err := row.Scan(&e.Provider, &e.EventID, &e.Type, &e.PayloadHash, &e.Payload, &e.ObjectID, &result,
		&purchaseID, &outcome, &e.ReceivedAt, &processed, &e.Amount, &e.Currency, &created)
	if err != nil {
		return reconcile.InboxEvent{}, err
	}
	if len(e.Payload) == 0 {
		e.Payload = nil
	}
	e.Result = provider.Outcome(result)
	e.PurchaseID = derefString(purchaseID)
	e.Outcome = reconcile.EventOutcome(outcome)
	e.ReceivedAt = e.ReceivedAt.UTC()
	e.ProcessedAt = derefTime(processed)
	e.Created = derefTime(created)
	return e, nil
}

const idempotencyColumns = `client, key, request_hash, status_code, response, purchase_id, created_at`

// InsertIdempotencyKey implements reconcile.Tx. An empty Key or a zero
// CreatedAt is refused with reconcile.ErrInvalid. An empty response is
// stored as NULL and read back as nil.
func (t *txn) InsertIdempotencyKey(ctx context.Context, k reconcile.IdempotencyKey) (bool, error) {
	tag, err := t.exec(ctx, `INSERT INTO idempotency_keys (`+idempotencyColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (client, key) DO NOTHING`,
		k.Client, k.Key, k.RequestHash, k.StatusCode, nullBytes(k.Response), nullString(k.PurchaseID), nullTime(k.CreatedAt))
	if err != nil {
		return false, wrap(err, "insert idempotency key %q of %q", k.Key, k.Client)
	}
	return tag.RowsAffected() == 1, nil
}

// GetIdempotencyKey implements reconcile.Tx.
func (t *txn) GetIdempotencyKey(ctx context.Context, client, key string) (reconcile.IdempotencyKey, error) {
	var k reconcile.IdempotencyKey
	var purchaseID *string
	err := t.tx.QueryRow(ctx, `SELECT `+idempotencyColumns+` FROM idempotency_keys WHERE client = $1 AND key = $2`,
		client, key).Scan(&k.Client, &k.Key, &k.RequestHash, &k.StatusCode, &k.Response, &purchaseID, &k.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return reconcile.IdempotencyKey{}, fmt.Errorf("postgres: get idempotency key %q of %q: %w", key, client, reconcile.ErrNotFound)
	}
	if err != nil {
		return reconcile.IdempotencyKey{}, wrap(err, "get idempotency key %q of %q", key, client)
	}
	if len(k.Response) == 0 {
		k.Response = nil
	}
	k.PurchaseID = derefString(purchaseID)
	k.CreatedAt = k.CreatedAt.UTC()
	return k, nil
}

// SaveIdempotencyResponse implements reconcile.Tx. It writes the status,
// the body and the purchase id as given (an empty purchaseID clears it).
func (t *txn) SaveIdempotencyResponse(ctx context.Context, client, key string, statusCode int, body []byte, purchaseID string) error {
	tag, err := t.exec(ctx, `UPDATE idempotency_keys SET status_code = $3, response = $4, purchase_id = $5
WHERE client = $1 AND key = $2`, client, key, statusCode, nullBytes(body), nullString(purchaseID))
	if err != nil {
		return wrap(err, "save response of idempotency key %q of %q", key, client)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: save response of idempotency key %q of %q: %w", key, client, reconcile.ErrNotFound)
	}
	return nil
}

// DeleteIdempotencyKeysBefore implements reconcile.Tx: one batch of at
// most limit keys created strictly before the given time, oldest first.
// limit must be positive (reconcile.ErrInvalid otherwise).
func (t *txn) DeleteIdempotencyKeysBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("postgres: delete idempotency keys: %w: limit %d", reconcile.ErrInvalid, limit)
	}
	tag, err := t.exec(ctx, `DELETE FROM idempotency_keys
WHERE (client, key) IN (
    SELECT client, key FROM idempotency_keys
    WHERE created_at < $1
    ORDER BY created_at
    LIMIT $2
)`, before, limit)
	if err != nil {
		return 0, wrap(err, "delete idempotency keys created before %s", before.UTC().Format(time.RFC3339Nano))
	}
	return int(tag.RowsAffected()), nil
}

// InsertOperatorAction implements reconcile.Tx. a.ID is ignored: the
// database numbers the rows in insertion order. An unknown purchase gives
// reconcile.ErrNotFound, an action other than recheck, resolve or note
// reconcile.ErrInvalid.
func (t *txn) InsertOperatorAction(ctx context.Context, a reconcile.OperatorAction) error {
	_, err := t.exec(ctx, `INSERT INTO operator_actions (purchase_id, operator, action, saw, did, evidence, at)
VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		a.PurchaseID, a.Operator, a.Action, a.Saw, a.Did, a.Evidence, nullTime(a.At))
	if err != nil {
		return wrapRef(err, "insert %s action of %s by %q", a.Action, a.PurchaseID, a.Operator)
	}
	return nil
}

// ListOperatorActions implements reconcile.Tx.
func (t *txn) ListOperatorActions(ctx context.Context, purchaseID string) ([]reconcile.OperatorAction, error) {
	rows, err := t.tx.Query(ctx, `SELECT id, purchase_id, operator, action, saw, did, evidence, at
FROM operator_actions WHERE purchase_id = $1 ORDER BY id`, purchaseID)
	if err != nil {
		return nil, wrap(err, "list operator actions of %s", purchaseID)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (reconcile.OperatorAction, error) {
		var a reconcile.OperatorAction
		err := row.Scan(&a.ID, &a.PurchaseID, &a.Operator, &a.Action, &a.Saw, &a.Did, &a.Evidence, &a.At)
		a.At = a.At.UTC()
		return a, err
	})
	if err != nil {
		return nil, wrap(err, "list operator actions of %s", purchaseID)
	}
	return out, nil
}

// AcquireSweepLock implements reconcile.Tx in one statement, which reads
// the store's clock: the lock row is inserted, or taken over when it
// expired (expires_at <= now) or is already owner's (which extends it to
// now+ttl). A concurrent acquirer of the same lock waits for this
// transaction and then judges the row it left. name and owner must not be
// empty and ttl must be positive (reconcile.ErrInvalid otherwise). The
// lock is held only once the transaction commits.
func (t *txn) AcquireSweepLock(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	switch {
	case name == "":
		return false, fmt.Errorf("postgres: acquire sweep lock: %w: empty name", reconcile.ErrInvalid)
	case owner == "":
		return false, fmt.Errorf("postgres: acquire sweep lock %s: %w: empty owner", name, reconcile.ErrInvalid)
	case ttl <= 0:
		return false, fmt.Errorf("postgres: acquire sweep lock %s: %w: ttl %s", name, reconcile.ErrInvalid, ttl)
	}
	tag, err := t.exec(ctx, `INSERT INTO sweep_locks AS l (name, owner, expires_at)
VALUES ($2, $3, `+nowSQL+` + $4::interval)
ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
WHERE l.expires_at <= `+nowSQL+` OR l.owner = EXCLUDED.owner`, clockArg(t.now), name, owner, ttl)
	if err != nil {
		return false, wrap(err, "acquire sweep lock %s for %s", name, owner)
	}
	return tag.RowsAffected() == 1, nil
}

// ReleaseSweepLock implements reconcile.Tx. Releasing a lock owner does
// not hold is not an error and changes nothing.
func (t *txn) ReleaseSweepLock(ctx context.Context, name, owner string) error {
	if _, err := t.exec(ctx, `DELETE FROM sweep_locks WHERE name = $1 AND owner = $2`, name, owner); err != nil {
		return wrap(err, "release sweep lock %s of %s", name, owner)
	}
	return nil
}

// notNullBytes maps nil to an empty byte string, for NOT NULL bytea
// columns.
func notNullBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// nullBytes maps an empty byte string to NULL.
func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}
