package sqlite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The audit trail of a purchase: its transitions and its provider calls,
// append-only (triggers refuse UPDATE and DELETE of both tables).

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
			return fmt.Errorf("%s: %s: %w %s -> %s: not in allowed_transitions: %w",
				dialect, what, reconcile.ErrForbiddenTransition, r.From, r.To, err)
		}
	}
	return wrapRef(err, "%s", what)
}

// ListTransitions implements reconcile.Tx.
func (t *txn) ListTransitions(ctx context.Context, purchaseID string) ([]reconcile.TransitionRecord, error) {
	return queryAll(ctx, t, func(row sqlstore.Row) (reconcile.TransitionRecord, error) {
		var r reconcile.TransitionRecord
		var from, to, cause string
		var at int64
		err := row.Scan(&r.ID, &r.PurchaseID, &from, &to, &cause, &r.Evidence, &r.Actor, &r.LeaseToken, &at)
		r.From, r.To, r.Cause, r.At = statemachine.State(from), statemachine.State(to), reconcile.Cause(cause), fromMicros(at)
		return r, err
	}, "list transitions of "+purchaseID,
		`SELECT id, purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at
FROM transitions WHERE purchase_id = ?1 ORDER BY id`, purchaseID)
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
	return queryAll(ctx, t, func(row sqlstore.Row) (reconcile.Attempt, error) {
		var a reconcile.Attempt
		var op, outcome string
		var latency, at int64
		err := row.Scan(&a.ID, &a.PurchaseID, &op, &a.Key, &outcome, &a.PaymentID, &a.Status, &latency,
			&a.Error, &a.Actor, &a.LeaseToken, &a.Applied, &a.Note, &at)
		a.Op, a.Outcome, a.Latency, a.At = provider.Op(op), provider.Outcome(outcome), time.Duration(latency), fromMicros(at)
		return a, err
	}, "list attempts of "+purchaseID,
		`SELECT id, purchase_id, op, idem_key, outcome, payment_id, status, latency_ns,
    error, actor, lease_token, applied, note, at
FROM provider_attempts WHERE purchase_id = ?1 ORDER BY id`, purchaseID)
}
