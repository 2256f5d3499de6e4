package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// txn is the reconcile.Tx of one BEGIN IMMEDIATE transaction. A statement
// that fails (a constraint, a trigger's RAISE(ABORT)) is undone alone, so
// the transaction stays usable without savepoints.
type txn struct {
	tx  *sql.Tx
	now func() time.Time // the store's clock
}

var _ reconcile.Tx = (*txn)(nil)

// exec runs one write and returns how many rows it changed.
func (t *txn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Now implements reconcile.Tx: the store's clock (see Store.Now).
func (t *txn) Now(context.Context) (time.Time, error) { return storeNow(t.now), nil }

const purchaseColumns = `id, customer, reference, amount, currency, description, payment_method,
    state, version, provider_key, provider_request, params_hash, provider_payment_id,
    first_attempt_at, uncertain_since, escalated_at, escalation_reason, settled_at, doubt,
    created_at, updated_at`

// InsertPurchase implements reconcile.Tx. The database refuses a purchase
// whose state is not created (reconcile.ErrForbiddenTransition) and one
// with a non-positive amount or a zero CreatedAt or UpdatedAt
// (reconcile.ErrInvalid).
func (t *txn) InsertPurchase(ctx context.Context, p reconcile.Purchase) error {
	req, err := marshalRequest(p.ProviderRequest)
	if err != nil {
		return fmt.Errorf("sqlite: insert purchase %s: %w", p.ID, err)
	}
	_, err = t.exec(ctx, `INSERT INTO purchases (`+purchaseColumns+`)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)`,
		p.ID, p.Customer, nullString(p.Reference), p.Amount, p.Currency, p.Description, p.PaymentMethod,
		string(p.State), p.Version, nullString(p.ProviderKey), req, nullString(p.ParamsHash), nullString(p.ProviderPaymentID),
		micros(p.FirstAttemptAt), micros(p.UncertainSince), micros(p.EscalatedAt), nullString(string(p.EscalationReason)),
		micros(p.SettledAt), p.Doubt, micros(p.CreatedAt), micros(p.UpdatedAt))
	if err != nil {
		return wrap(err, "insert purchase %s", p.ID)
	}
	return nil
}

// GetPurchase implements reconcile.Tx.
func (t *txn) GetPurchase(ctx context.Context, id string) (reconcile.Purchase, error) {
	p, err := scanPurchase(t.tx.QueryRowContext(ctx, `SELECT `+purchaseColumns+` FROM purchases WHERE id = ?1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return reconcile.Purchase{}, fmt.Errorf("sqlite: get purchase %s: %w", id, reconcile.ErrNotFound)
	}
	if err != nil {
		return reconcile.Purchase{}, wrap(err, "get purchase %s", id)
	}
	return p, nil
}

// FindPurchaseByPaymentID implements reconcile.Tx.
func (t *txn) FindPurchaseByPaymentID(ctx context.Context, paymentID string) (reconcile.Purchase, error) {
	if paymentID == "" {
		return reconcile.Purchase{}, fmt.Errorf("sqlite: find purchase by payment id: empty id: %w", reconcile.ErrNotFound)
	}
	p, err := scanPurchase(t.tx.QueryRowContext(ctx, `SELECT `+purchaseColumns+` FROM purchases WHERE provider_payment_id = ?1`, paymentID))
	if errors.Is(err, sql.ErrNoRows) {
		return reconcile.Purchase{}, fmt.Errorf("sqlite: find purchase by payment id %s: %w", paymentID, reconcile.ErrNotFound)
	}
	if err != nil {
		return reconcile.Purchase{}, wrap(err, "find purchase by payment id %s", paymentID)
	}
	return p, nil
}

// ListOverdueUncertain implements reconcile.Tx: purchases in uncertain,
// not escalated, whose UncertainSince is strictly before uncertainBefore,
// oldest UncertainSince first (then by id). limit must be positive
// (reconcile.ErrInvalid otherwise).
func (t *txn) ListOverdueUncertain(ctx context.Context, uncertainBefore time.Time, limit int) ([]reconcile.Purchase, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("sqlite: list overdue uncertain purchases: %w: limit %d", reconcile.ErrInvalid, limit)
	}
	rows, err := t.tx.QueryContext(ctx, `SELECT `+purchaseColumns+` FROM purchases
WHERE state = 'uncertain' AND escalated_at IS NULL AND uncertain_since < ?1
ORDER BY uncertain_since, id
LIMIT ?2`, uncertainBefore.UnixMicro(), limit)
	out, err := collect(rows, err, func(rows *sql.Rows) (reconcile.Purchase, error) { return scanPurchase(rows) })
	if err != nil {
		return nil, wrap(err, "list overdue uncertain purchases")
	}
	return out, nil
}

// ListSubmittedBetween implements reconcile.Tx: the purchases in state
// whose FirstAttemptAt is at or after from and strictly before until,
// oldest FirstAttemptAt first (then by id), read from the index
// purchases_first_attempt_idx (migration 00004).
func (t *txn) ListSubmittedBetween(ctx context.Context, from, until time.Time, state statemachine.State) ([]reconcile.Purchase, error) {
	rows, err := t.tx.QueryContext(ctx, `SELECT `+purchaseColumns+` FROM purchases
WHERE state = ?1 AND first_attempt_at >= ?2 AND first_attempt_at < ?3
ORDER BY first_attempt_at, id`, string(state), from.UnixMicro(), until.UnixMicro())
	out, err := collect(rows, err, func(rows *sql.Rows) (reconcile.Purchase, error) { return scanPurchase(rows) })
	if err != nil {
		return nil, wrap(err, "list %s purchases submitted in [%s, %s)", state, from.UTC().Format(time.RFC3339Nano), until.UTC().Format(time.RFC3339Nano))
	}
	return out, nil
}

// FindPurchaseByReference implements reconcile.Tx. An empty reference
// finds nothing: purchases without one have none to match.
func (t *txn) FindPurchaseByReference(ctx context.Context, customer, reference string) (reconcile.Purchase, error) {
	if reference == "" {
		return reconcile.Purchase{}, fmt.Errorf("sqlite: find purchase of %s by reference: empty reference: %w", customer, reconcile.ErrNotFound)
	}
	p, err := scanPurchase(t.tx.QueryRowContext(ctx, `SELECT `+purchaseColumns+` FROM purchases
WHERE customer = ?1 AND reference = ?2`, customer, reference))
	if errors.Is(err, sql.ErrNoRows) {
		return reconcile.Purchase{}, fmt.Errorf("sqlite: find purchase of %s by reference %q: %w", customer, reference, reconcile.ErrNotFound)
	}
	if err != nil {
		return reconcile.Purchase{}, wrap(err, "find purchase of %s by reference %q", customer, reference)
	}
	return p, nil
}

// UpdatePurchase implements reconcile.Tx. It writes the state, the
// provider fields (key, request, params hash, payment id, first attempt),
// UncertainSince, the escalation, SettledAt, Doubt and UpdatedAt; the
// other fields are fixed at insert and left alone.
func (t *txn) UpdatePurchase(ctx context.Context, p reconcile.Purchase, from statemachine.State) error {
	req, err := marshalRequest(p.ProviderRequest)
	if err != nil {
		return fmt.Errorf("sqlite: update purchase %s: %w", p.ID, err)
	}
	n, err := t.exec(ctx, `UPDATE purchases SET
    state = ?3,
    version = version + 1,
    provider_key = ?5,
    provider_request = ?6,
    params_hash = ?7,
    provider_payment_id = ?8,
    first_attempt_at = ?9,
    uncertain_since = ?10,
    escalated_at = ?11,
    escalation_reason = ?12,
    settled_at = ?13,
    doubt = ?14,
    updated_at = ?15
WHERE id = ?1 AND state = ?2 AND version = ?4`,
		p.ID, string(from), string(p.State), p.Version,
		nullString(p.ProviderKey), req, nullString(p.ParamsHash), nullString(p.ProviderPaymentID),
		micros(p.FirstAttemptAt), micros(p.UncertainSince), micros(p.EscalatedAt), nullString(string(p.EscalationReason)),
		micros(p.SettledAt), p.Doubt, micros(p.UpdatedAt))
	if err != nil {
		return wrap(err, "update purchase %s (%s -> %s)", p.ID, from, p.State)
	}
	if n == 1 {
		return nil
	}
	var state string
	var version int64
	err = t.tx.QueryRowContext(ctx, `SELECT state, version FROM purchases WHERE id = ?1`, p.ID).Scan(&state, &version)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("sqlite: update purchase %s: %w", p.ID, reconcile.ErrNotFound)
	case err != nil:
		return wrap(err, "update purchase %s", p.ID)
	}
	return fmt.Errorf("sqlite: update purchase %s: %w: it is %s at version %d, the write expected %s at version %d",
		p.ID, reconcile.ErrConflict, state, version, from, p.Version)
}

// InsertTransition implements reconcile.Tx. r.ID is ignored: the database
// numbers the rows in insertion order. A move that is not in the
// transition table gives reconcile.ErrForbiddenTransition, an unknown
// purchase reconcile.ErrNotFound. Both are foreign keys (migration
// 00004), and SQLite does not say which one failed: on that failure
// path only, InsertTransition looks the move up in allowed_transitions.
func (t *txn) InsertTransition(ctx context.Context, r reconcile.TransitionRecord) error {
	what := fmt.Sprintf("insert transition %s -> %s of %s", r.From, r.To, r.PurchaseID)
	_, err := t.exec(ctx, `INSERT INTO transitions
    (purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)`,
		r.PurchaseID, string(r.From), string(r.To), string(r.Cause), r.Evidence, r.Actor, r.LeaseToken, micros(r.At))
	if err == nil {
		return nil
	}
	if isForeignKey(err) {
		var allowed bool
		lerr := t.tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM allowed_transitions WHERE from_state = ?1 AND to_state = ?2)`,
			string(r.From), string(r.To)).Scan(&allowed)
		switch {
		case lerr != nil:
			return wrap(errors.Join(err, lerr), "%s", what)
		case !allowed:
			return fmt.Errorf("sqlite: %s: %w %s -> %s: not in allowed_transitions: %w",
				what, reconcile.ErrForbiddenTransition, r.From, r.To, err)
		}
	}
	return wrapRef(err, "%s", what)
}

// ListTransitions implements reconcile.Tx.
func (t *txn) ListTransitions(ctx context.Context, purchaseID string) ([]reconcile.TransitionRecord, error) {
	rows, err := t.tx.QueryContext(ctx, `SELECT id, purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at
FROM transitions WHERE purchase_id = ?1 ORDER BY id`, purchaseID)
	out, err := collect(rows, err, func(rows *sql.Rows) (reconcile.TransitionRecord, error) {
		var r reconcile.TransitionRecord
		var from, to, cause string
		var at int64
		err := rows.Scan(&r.ID, &r.PurchaseID, &from, &to, &cause, &r.Evidence, &r.Actor, &r.LeaseToken, &at)
		r.From, r.To, r.Cause, r.At = statemachine.State(from), statemachine.State(to), reconcile.Cause(cause), fromMicros(at)
		return r, err
	})
	if err != nil {
		return nil, wrap(err, "list transitions of %s", purchaseID)
	}
	return out, nil
}

// InsertAttempt implements reconcile.Tx. a.ID is ignored: the database
// numbers the rows in insertion order. Latency is kept to the nanosecond.
// An unknown purchase gives reconcile.ErrNotFound.
func (t *txn) InsertAttempt(ctx context.Context, a reconcile.Attempt) error {
	_, err := t.exec(ctx, `INSERT INTO provider_attempts
    (purchase_id, op, idem_key, outcome, payment_id, status, latency_ns, error, actor, lease_token, applied, note, at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)`,
		a.PurchaseID, string(a.Op), a.Key, string(a.Outcome), a.PaymentID, a.Status, int64(a.Latency), a.Error,
		a.Actor, a.LeaseToken, a.Applied, a.Note, micros(a.At))
	if err != nil {
		return wrapRef(err, "insert %s attempt of %s", a.Op, a.PurchaseID)
	}
	return nil
}

// ListAttempts implements reconcile.Tx.
func (t *txn) ListAttempts(ctx context.Context, purchaseID string) ([]reconcile.Attempt, error) {
	rows, err := t.tx.QueryContext(ctx, `SELECT id, purchase_id, op, idem_key, outcome, payment_id, status, latency_ns,
    error, actor, lease_token, applied, note, at
FROM provider_attempts WHERE purchase_id = ?1 ORDER BY id`, purchaseID)
	out, err := collect(rows, err, func(rows *sql.Rows) (reconcile.Attempt, error) {
		var a reconcile.Attempt
		var op, outcome string
		var latency, at int64
		err := rows.Scan(&a.ID, &a.PurchaseID, &op, &a.Key, &outcome, &a.PaymentID, &a.Status, &latency,
			&a.Error, &a.Actor, &a.LeaseToken, &a.Applied, &a.Note, &at)
		a.Op, a.Outcome, a.Latency, a.At = provider.Op(op), provider.Outcome(outcome), time.Duration(latency), fromMicros(at)
		return a, err
	})
	if err != nil {
		return nil, wrap(err, "list attempts of %s", purchaseID)
	}
	return out, nil
}

// InsertJob implements reconcile.Tx: the job is due at job.RunAt, not
// leased, never run; the other fields of job are ignored. A second job for
// the same purchase gives reconcile.ErrDuplicate, an unknown purchase
// reconcile.ErrNotFound.
func (t *txn) InsertJob(ctx context.Context, job reconcile.Job) error {
	_, err := t.exec(ctx, `INSERT INTO jobs (purchase_id, run_at) VALUES (?1, ?2)`, job.PurchaseID, micros(job.RunAt))
	if err != nil {
		return wrapRef(err, "insert job of %s", job.PurchaseID)
	}
	return nil
}

const jobColumns = `purchase_id, run_at, lease_owner, lease_token, lease_expires_at, checks, done_at`

// GetJob implements reconcile.Tx.
func (t *txn) GetJob(ctx context.Context, purchaseID string) (reconcile.Job, error) {
	j, err := scanJob(t.tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE purchase_id = ?1`, purchaseID))
	if errors.Is(err, sql.ErrNoRows) {
		return reconcile.Job{}, fmt.Errorf("sqlite: get job of %s: %w", purchaseID, reconcile.ErrNotFound)
	}
	if err != nil {
		return reconcile.Job{}, wrap(err, "get job of %s", purchaseID)
	}
	return j, nil
}

// CheckLease implements reconcile.Tx. It judges expiry by the store's
// clock read now (not at the transaction's start). It is a plain read:
// the transaction holds the database's write lock since BEGIN IMMEDIATE,
// so no claim, in this process or another, can take the job over before
// it ends.
func (t *txn) CheckLease(ctx context.Context, l reconcile.Lease) error {
	now := storeNow(t.now)
	j, err := t.GetJob(ctx, l.PurchaseID)
	var why string
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		why = "no such job"
	case err != nil:
		return fmt.Errorf("sqlite: check lease of job %s: %w", l.PurchaseID, err)
	case j.LeaseOwner != l.Owner || j.LeaseToken != l.Token:
		why = fmt.Sprintf("taken over: now held by %q with token %d", j.LeaseOwner, j.LeaseToken)
	case j.LeaseOwner == "" || !j.LeaseExpiresAt.After(now):
		why = fmt.Sprintf("expired at %s", j.LeaseExpiresAt.Format(time.RFC3339Nano))
	default:
		return nil
	}
	return fmt.Errorf("sqlite: check lease of job %s (owner %q, token %d): %w: %s",
		l.PurchaseID, l.Owner, l.Token, reconcile.ErrLeaseLost, why)
}

// RescheduleJob implements reconcile.Tx. A done job stays done.
func (t *txn) RescheduleJob(ctx context.Context, purchaseID string, runAt time.Time) error {
	n, err := t.exec(ctx, `UPDATE jobs SET run_at = ?2, lease_owner = NULL, lease_expires_at = NULL
WHERE purchase_id = ?1`, purchaseID, micros(runAt))
	if err != nil {
		return wrap(err, "reschedule job of %s", purchaseID)
	}
	if n == 0 {
		return fmt.Errorf("sqlite: reschedule job of %s: %w", purchaseID, reconcile.ErrNotFound)
	}
	return nil
}

// CompleteJob implements reconcile.Tx.
func (t *txn) CompleteJob(ctx context.Context, purchaseID string, now time.Time) error {
	n, err := t.exec(ctx, `UPDATE jobs SET done_at = ?2, lease_owner = NULL, lease_expires_at = NULL
WHERE purchase_id = ?1`, purchaseID, micros(now))
	if err != nil {
		return wrap(err, "complete job of %s", purchaseID)
	}
	if n == 0 {
		return fmt.Errorf("sqlite: complete job of %s: %w", purchaseID, reconcile.ErrNotFound)
	}
	return nil
}

// ReopenJob implements reconcile.Tx: the job is no longer done and is due
// at runAt. Its lease, if any, is left as it is (owner, token, expiry):
// a live lease keeps its worker, an expired one is taken over by the next
// claim.
func (t *txn) ReopenJob(ctx context.Context, purchaseID string, runAt time.Time) error {
	n, err := t.exec(ctx, `UPDATE jobs SET done_at = NULL, run_at = ?2 WHERE purchase_id = ?1`,
		purchaseID, micros(runAt))
	if err != nil {
		return wrap(err, "reopen job of %s", purchaseID)
	}
	if n == 0 {
		return fmt.Errorf("sqlite: reopen job of %s: %w", purchaseID, reconcile.ErrNotFound)
	}
	return nil
}

// ListEscalated implements reconcile.Tx: every purchase with an
// escalation time, whatever its state (a contradiction can escalate a
// declined purchase), oldest escalation first.
func (t *txn) ListEscalated(ctx context.Context) ([]reconcile.Purchase, error) {
	rows, err := t.tx.QueryContext(ctx, `SELECT `+purchaseColumns+` FROM purchases
WHERE escalated_at IS NOT NULL ORDER BY escalated_at, id`)
	out, err := collect(rows, err, func(rows *sql.Rows) (reconcile.Purchase, error) { return scanPurchase(rows) })
	if err != nil {
		return nil, wrap(err, "list escalated purchases")
	}
	return out, nil
}

// CountByState implements reconcile.Tx. Every known state is in the map,
// with 0 when no purchase is in it.
func (t *txn) CountByState(ctx context.Context) (map[statemachine.State]int, error) {
	counts := make(map[statemachine.State]int, len(statemachine.States))
	for _, s := range statemachine.States {
		counts[s] = 0
	}
	rows, err := t.tx.QueryContext(ctx, `SELECT state, count(*) FROM purchases GROUP BY state`)
	_, err = collect(rows, err, func(rows *sql.Rows) (struct{}, error) {
		var state string
		var n int
		err := rows.Scan(&state, &n)
		counts[statemachine.State(state)] = n
		return struct{}{}, err
	})
	if err != nil {
		return nil, wrap(err, "count purchases by state")
	}
	return counts, nil
}

// CountEscalated implements reconcile.Tx.
func (t *txn) CountEscalated(ctx context.Context) (int, error) {
	var n int
	if err := t.tx.QueryRowContext(ctx, `SELECT count(*) FROM purchases WHERE escalated_at IS NOT NULL`).Scan(&n); err != nil {
		return 0, wrap(err, "count escalated purchases")
	}
	return n, nil
}

// OldestUncertainSince implements reconcile.Tx. Purchases in uncertain or
// reconciling without an UncertainSince are ignored.
func (t *txn) OldestUncertainSince(ctx context.Context) (time.Time, error) {
	var oldest sql.NullInt64
	err := t.tx.QueryRowContext(ctx, `SELECT min(uncertain_since) FROM purchases
WHERE state IN ('uncertain', 'reconciling')`).Scan(&oldest)
	if err != nil {
		return time.Time{}, wrap(err, "oldest uncertain purchase")
	}
	return fromNullMicros(oldest), nil
}

// The webhook inbox, the purchase API's idempotency keys, the operator
// audit and the sweep locks (migration 00002).

const inboxColumns = `provider, event_id, type, payload_hash, payload, object_id, result, purchase_id,
    outcome, received_at, processed_at, amount, currency, event_created`

// InsertInboxEvent implements reconcile.Tx with INSERT ... ON CONFLICT
// DO NOTHING: the primary key (provider, event_id) decides, from the
// statement's row count. Writers are serialized, so a concurrent insert
// of the same key runs after the other transaction ended and sees its
// outcome. A nil or empty payload is stored empty and read back as nil.
// An empty Provider or EventID, or a zero ReceivedAt, is refused with
// reconcile.ErrInvalid.
func (t *txn) InsertInboxEvent(ctx context.Context, e reconcile.InboxEvent) (bool, error) {
	n, err := t.exec(ctx, `INSERT INTO webhook_inbox (`+inboxColumns+`)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
ON CONFLICT (provider, event_id) DO NOTHING`,
		e.Provider, e.EventID, e.Type, e.PayloadHash, notNullBytes(e.Payload), e.ObjectID, string(e.Result),
		nullString(e.PurchaseID), string(e.Outcome), micros(e.ReceivedAt), micros(e.ProcessedAt),
		e.Amount, e.Currency, micros(e.Created))
	if err != nil {
		return false, wrap(err, "insert inbox event %s/%s", e.Provider, e.EventID)
	}
	return n == 1, nil
}

// GetInboxEvent implements reconcile.Tx.
func (t *txn) GetInboxEvent(ctx context.Context, provider, eventID string) (reconcile.InboxEvent, error) {
	e, err := scanInboxEvent(t.tx.QueryRowContext(ctx, `SELECT `+inboxColumns+` FROM webhook_inbox
WHERE provider = ?1 AND event_id = ?2`, provider, eventID))
	if errors.Is(err, sql.ErrNoRows) {
		return reconcile.InboxEvent{}, fmt.Errorf("sqlite: get inbox event %s/%s: %w", provider, eventID, reconcile.ErrNotFound)
	}
	if err != nil {
		return reconcile.InboxEvent{}, wrap(err, "get inbox event %s/%s", provider, eventID)
	}
	return e, nil
}

// UpdateInboxEvent implements reconcile.Tx. An empty purchaseID clears the
// event's purchase.
func (t *txn) UpdateInboxEvent(ctx context.Context, provider, eventID, purchaseID string, outcome reconcile.EventOutcome, processedAt time.Time) error {
	n, err := t.exec(ctx, `UPDATE webhook_inbox SET purchase_id = ?3, outcome = ?4, processed_at = ?5
WHERE provider = ?1 AND event_id = ?2`,
		provider, eventID, nullString(purchaseID), string(outcome), micros(processedAt))
	if err != nil {
		return wrap(err, "update inbox event %s/%s", provider, eventID)
	}
	if n == 0 {
		return fmt.Errorf("sqlite: update inbox event %s/%s: %w", provider, eventID, reconcile.ErrNotFound)
	}
	return nil
}

// ListInboxEvents implements reconcile.Tx: the events whose purchase is
// purchaseID (as stored at insert or by UpdateInboxEvent), oldest received
// first, then by provider and event id.
func (t *txn) ListInboxEvents(ctx context.Context, purchaseID string) ([]reconcile.InboxEvent, error) {
	rows, err := t.tx.QueryContext(ctx, `SELECT `+inboxColumns+` FROM webhook_inbox
WHERE purchase_id = ?1 ORDER BY received_at, provider, event_id`, purchaseID)
	out, err := collect(rows, err, func(rows *sql.Rows) (reconcile.InboxEvent, error) { return scanInboxEvent(rows) })
	if err != nil {
		return nil, wrap(err, "list inbox events of %s", purchaseID)
	}
	return out, nil
}

// listUnmatchedEventsSQL lists the unmatched events least recently tried
// first (SQLite sorts NULL first: never processed). The outcome is a
// literal, not a parameter, so that the planner can use the partial index
// webhook_inbox_unmatched_idx (migration 00003), which holds the
// unmatched events in this order.
const listUnmatchedEventsSQL = `SELECT ` + inboxColumns + ` FROM webhook_inbox
WHERE outcome = '` + string(reconcile.EventUnmatched) + `'
ORDER BY processed_at, received_at, provider, event_id LIMIT ?1`

// ListUnmatchedEvents implements reconcile.Tx: least recently tried
// first, that is never processed (processed_at NULL) first, then by
// processed_at, received_at, provider and event id. limit must be positive
// (reconcile.ErrInvalid otherwise).
func (t *txn) ListUnmatchedEvents(ctx context.Context, limit int) ([]reconcile.InboxEvent, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("sqlite: list unmatched events: %w: limit %d", reconcile.ErrInvalid, limit)
	}
	rows, err := t.tx.QueryContext(ctx, listUnmatchedEventsSQL, limit)
	out, err := collect(rows, err, func(rows *sql.Rows) (reconcile.InboxEvent, error) { return scanInboxEvent(rows) })
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
		return 0, fmt.Errorf("sqlite: delete inbox events: %w: limit %d", reconcile.ErrInvalid, limit)
	}
	n, err := t.exec(ctx, `DELETE FROM webhook_inbox WHERE rowid IN (
    SELECT rowid FROM webhook_inbox WHERE received_at < ?1 ORDER BY received_at, provider, event_id LIMIT ?2)`,
		before.UnixMicro(), limit)
	if err != nil {
		return 0, wrap(err, "delete inbox events received before %s", before.UTC().Format(time.RFC3339Nano))
	}
	return int(n), nil
}

// InsertIdempotencyKey implements reconcile.Tx with INSERT ... ON
// CONFLICT DO NOTHING: the primary key (client, key) decides, as for
// InsertInboxEvent. An empty Key or a zero CreatedAt is refused with
// reconcile.ErrInvalid. An empty response is stored as NULL and read back
// as nil.
func (t *txn) InsertIdempotencyKey(ctx context.Context, k reconcile.IdempotencyKey) (bool, error) {
	n, err := t.exec(ctx, `INSERT INTO idempotency_keys
    (client, key, request_hash, status_code, response, purchase_id, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (client, key) DO NOTHING`,
		k.Client, k.Key, k.RequestHash, k.StatusCode, nullBytes(k.Response), nullString(k.PurchaseID), micros(k.CreatedAt))
	if err != nil {
		return false, wrap(err, "insert idempotency key %q of %q", k.Key, k.Client)
	}
	return n == 1, nil
}

// GetIdempotencyKey implements reconcile.Tx.
func (t *txn) GetIdempotencyKey(ctx context.Context, client, key string) (reconcile.IdempotencyKey, error) {
	var k reconcile.IdempotencyKey
	var purchaseID sql.NullString
	var created int64
	err := t.tx.QueryRowContext(ctx, `SELECT client, key, request_hash, status_code, response, purchase_id, created_at
FROM idempotency_keys WHERE client = ?1 AND key = ?2`, client, key).
		Scan(&k.Client, &k.Key, &k.RequestHash, &k.StatusCode, &k.Response, &purchaseID, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return reconcile.IdempotencyKey{}, fmt.Errorf("sqlite: get idempotency key %q of %q: %w", key, client, reconcile.ErrNotFound)
	}
	if err != nil {
		return reconcile.IdempotencyKey{}, wrap(err, "get idempotency key %q of %q", key, client)
	}
	if len(k.Response) == 0 {
		k.Response = nil
	}
	k.PurchaseID = purchaseID.String
	k.CreatedAt = fromMicros(created)
	return k, nil
}

// SaveIdempotencyResponse implements reconcile.Tx. It writes the status,
// the body and the purchase id as given (an empty purchaseID clears it).
func (t *txn) SaveIdempotencyResponse(ctx context.Context, client, key string, statusCode int, body []byte, purchaseID string) error {
	n, err := t.exec(ctx, `UPDATE idempotency_keys SET status_code = ?3, response = ?4, purchase_id = ?5
WHERE client = ?1 AND key = ?2`, client, key, statusCode, nullBytes(body), nullString(purchaseID))
	if err != nil {
		return wrap(err, "save response of idempotency key %q of %q", key, client)
	}
	if n == 0 {
		return fmt.Errorf("sqlite: save response of idempotency key %q of %q: %w", key, client, reconcile.ErrNotFound)
	}
	return nil
}

// DeleteIdempotencyKeysBefore implements reconcile.Tx: one batch of at
// most limit keys created strictly before the given time, oldest first.
// limit must be positive (reconcile.ErrInvalid otherwise).
func (t *txn) DeleteIdempotencyKeysBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("sqlite: delete idempotency keys: %w: limit %d", reconcile.ErrInvalid, limit)
	}
	n, err := t.exec(ctx, `DELETE FROM idempotency_keys WHERE rowid IN (
    SELECT rowid FROM idempotency_keys WHERE created_at < ?1 ORDER BY created_at, client, key LIMIT ?2)`,
		before.UnixMicro(), limit)
	if err != nil {
		return 0, wrap(err, "delete idempotency keys created before %s", before.UTC().Format(time.RFC3339Nano))
	}
	return int(n), nil
}

// InsertOperatorAction implements reconcile.Tx. a.ID is ignored: the
// database numbers the rows in insertion order. An unknown purchase gives
// reconcile.ErrNotFound, an action other than recheck, resolve or note
// reconcile.ErrInvalid.
func (t *txn) InsertOperatorAction(ctx context.Context, a reconcile.OperatorAction) error {
	_, err := t.exec(ctx, `INSERT INTO operator_actions (purchase_id, operator, action, saw, did, evidence, at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)`,
		a.PurchaseID, a.Operator, a.Action, a.Saw, a.Did, a.Evidence, micros(a.At))
	if err != nil {
		return wrapRef(err, "insert %s action of %s by %q", a.Action, a.PurchaseID, a.Operator)
	}
	return nil
}

// ListOperatorActions implements reconcile.Tx.
func (t *txn) ListOperatorActions(ctx context.Context, purchaseID string) ([]reconcile.OperatorAction, error) {
	rows, err := t.tx.QueryContext(ctx, `SELECT id, purchase_id, operator, action, saw, did, evidence, at
FROM operator_actions WHERE purchase_id = ?1 ORDER BY id`, purchaseID)
	out, err := collect(rows, err, func(rows *sql.Rows) (reconcile.OperatorAction, error) {
		var a reconcile.OperatorAction
		var at int64
		err := rows.Scan(&a.ID, &a.PurchaseID, &a.Operator, &a.Action, &a.Saw, &a.Did, &a.Evidence, &at)
		a.At = fromMicros(at)
		return a, err
	})
	if err != nil {
		return nil, wrap(err, "list operator actions of %s", purchaseID)
	}
	return out, nil
}

// AcquireSweepLock implements reconcile.Tx in one upsert, by the store's
// clock read now: the lock row is inserted, or taken over when it expired
// (expires_at <= now) or is already owner's (which extends it to
// now+ttl); RETURNING yields a row only then. Writers are serialized, so
// a concurrent acquirer of the same lock runs after this transaction and
// judges the row it left. name and owner must not be empty and ttl must
// be positive (reconcile.ErrInvalid otherwise). The lock is held only
// once the transaction commits.
func (t *txn) AcquireSweepLock(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	switch {
	case name == "":
		return false, fmt.Errorf("sqlite: acquire sweep lock: %w: empty name", reconcile.ErrInvalid)
	case owner == "":
		return false, fmt.Errorf("sqlite: acquire sweep lock %s: %w: empty owner", name, reconcile.ErrInvalid)
	case ttl <= 0:
		return false, fmt.Errorf("sqlite: acquire sweep lock %s: %w: ttl %s", name, reconcile.ErrInvalid, ttl)
	}
	now := storeNow(t.now)
	rows, err := t.tx.QueryContext(ctx, `INSERT INTO sweep_locks (name, owner, expires_at) VALUES (?1, ?2, ?3)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE sweep_locks.expires_at <= ?4 OR sweep_locks.owner = excluded.owner
RETURNING 1`, name, owner, micros(now.Add(ttl)), now.UnixMicro())
	got, err := collect(rows, err, func(rows *sql.Rows) (int, error) {
		var one int
		return one, rows.Scan(&one)
	})
	if err != nil {
		return false, wrap(err, "acquire sweep lock %s for %s", name, owner)
	}
	return len(got) == 1, nil
}

// ReleaseSweepLock implements reconcile.Tx. Releasing a lock owner does
// not hold is not an error and changes nothing.
func (t *txn) ReleaseSweepLock(ctx context.Context, name, owner string) error {
	if _, err := t.exec(ctx, `DELETE FROM sweep_locks WHERE name = ?1 AND owner = ?2`, name, owner); err != nil {
		return wrap(err, "release sweep lock %s of %s", name, owner)
	}
	return nil
}

// rowScanner is *sql.Row or *sql.Rows.
type rowScanner interface {
	Scan(dest ...any) error
}

// collect reads every row of a query with scan and closes rows. err is
// the query's error, which collect returns as is.
func collect[T any](rows *sql.Rows, err error, scan func(*sql.Rows) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, rows.Close()
}

// scanPurchase reads one row of purchaseColumns.
func scanPurchase(row rowScanner) (reconcile.Purchase, error) {
	var p reconcile.Purchase
	var (
		reference, providerKey, req, paramsHash, paymentID, reason sql.NullString
		state                                                      string
		firstAttempt, uncertain, escalated, settled                sql.NullInt64
		created, updated                                           int64
	)
	err := row.Scan(&p.ID, &p.Customer, &reference, &p.Amount, &p.Currency, &p.Description, &p.PaymentMethod,
		&state, &p.Version, &providerKey, &req, &paramsHash, &paymentID,
		&firstAttempt, &uncertain, &escalated, &reason, &settled, &p.Doubt, &created, &updated)
	if err != nil {
		return reconcile.Purchase{}, err
	}
	p.State = statemachine.State(state)
	p.Reference = reference.String
	p.ProviderKey = providerKey.String
	p.ParamsHash = paramsHash.String
	p.ProviderPaymentID = paymentID.String
	p.EscalationReason = reconcile.EscalationReason(reason.String)
	p.FirstAttemptAt = fromNullMicros(firstAttempt)
	p.UncertainSince = fromNullMicros(uncertain)
	p.EscalatedAt = fromNullMicros(escalated)
	p.SettledAt = fromNullMicros(settled)
	p.CreatedAt = fromMicros(created)
	p.UpdatedAt = fromMicros(updated)
	if req.Valid {
		p.ProviderRequest = new(provider.CreateRequest)
		if err := json.Unmarshal([]byte(req.String), p.ProviderRequest); err != nil {
			return reconcile.Purchase{}, fmt.Errorf("decode provider_request of %s: %w", p.ID, err)
		}
	}
	return p, nil
}

// scanJob reads one row of jobColumns.
func scanJob(row rowScanner) (reconcile.Job, error) {
	var j reconcile.Job
	var owner sql.NullString
	var runAt int64
	var expires, done sql.NullInt64
	if err := row.Scan(&j.PurchaseID, &runAt, &owner, &j.LeaseToken, &expires, &j.Checks, &done); err != nil {
		return reconcile.Job{}, err
	}
	j.RunAt = fromMicros(runAt)
	j.LeaseOwner = owner.String
	j.LeaseExpiresAt = fromNullMicros(expires)
	j.DoneAt = fromNullMicros(done)
	return j, nil
}

// scanInboxEvent reads one row of inboxColumns.
func scanInboxEvent(row rowScanner) (reconcile.InboxEvent, error) {
	var e reconcile.InboxEvent
	var purchaseID sql.NullString
	var result, outcome string
	var received int64
	var processed, created sql.NullInt64
	err := row.Scan(&e.Provider, &e.EventID, &e.Type, &e.PayloadHash, &e.Payload, &e.ObjectID, &result, &purchaseID,
		&outcome, &received, &processed, &e.Amount, &e.Currency, &created)
	if err != nil {
		return reconcile.InboxEvent{}, err
	}
	if len(e.Payload) == 0 {
		e.Payload = nil
	}
	e.PurchaseID = purchaseID.String
	e.Result = provider.Outcome(result)
	e.Outcome = reconcile.EventOutcome(outcome)
	e.ReceivedAt = fromMicros(received)
	e.ProcessedAt = fromNullMicros(processed)
	e.Created = fromNullMicros(created)
	return e, nil
}

// marshalRequest encodes the stored provider request as JSON text; nil
// stays NULL.
func marshalRequest(r *provider.CreateRequest) (any, error) {
	if r == nil {
		return nil, nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode provider request: %w", err)
	}
	return string(b), nil
}

// nullString maps "" to NULL.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// notNullBytes maps nil to an empty BLOB, for NOT NULL BLOB columns. The
// driver reads an empty BLOB back as nil.
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

// micros maps t to its column value: microseconds since the Unix epoch
// (finer digits truncated), or NULL for the zero time.
func micros(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

// fromMicros is the inverse of micros for a non-NULL column, in UTC.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// fromNullMicros maps NULL to the zero time.
func fromNullMicros(us sql.NullInt64) time.Time {
	if !us.Valid {
		return time.Time{}
	}
	return fromMicros(us.Int64)
}
