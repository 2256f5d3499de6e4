package postgres

import (
	"cmp"
	"context"
	"time"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The audit trail of a purchase, of its refunds and of its disputes:
// their transitions and their provider calls, append-only (the database
// refuses UPDATE and DELETE of both tables). A refund's rows carry its
// refund_id beside its purchase's id, a dispute's transitions its
// dispute_id; a purchase's own rows have neither.

// InsertTransition implements reconcile.Tx. The check
// transitions_move_check refuses a move that is not in its machine's
// table, transitions_subject_check a row of both a refund and a dispute
// (reconcile.ErrInvalid).
func (t *txn) InsertTransition(ctx context.Context, r reconcile.TransitionRecord) error {
	_, err := t.exec(ctx, `INSERT INTO transitions
    (purchase_id, refund_id, dispute_id, from_state, to_state, cause, evidence, actor, lease_token, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		r.PurchaseID, sqlstore.NullString(r.RefundID), sqlstore.NullString(r.DisputeID), string(r.From), string(r.To),
		string(r.Cause), r.Evidence, r.Actor, r.LeaseToken, nullTime(r.At))
	if err != nil {
		return wrapRef(err, "insert transition %s -> %s of %s", r.From, r.To, auditSubject(r.PurchaseID, cmp.Or(r.RefundID, r.DisputeID)))
	}
	return nil
}

const transitionColumns = `id, purchase_id, refund_id, dispute_id, from_state, to_state, cause, evidence, actor, lease_token, at`

// ListTransitions implements reconcile.Tx, from
// transitions_purchase_idx.
func (t *txn) ListTransitions(ctx context.Context, purchaseID string) ([]reconcile.TransitionRecord, error) {
	return queryAll(ctx, t, scanTransition, "list transitions of "+purchaseID,
		`SELECT `+transitionColumns+` FROM transitions
WHERE purchase_id = $1 AND refund_id IS NULL AND dispute_id IS NULL ORDER BY id`, purchaseID)
}

// ListRefundTransitions implements reconcile.Tx, from
// transitions_refund_idx.
func (t *txn) ListRefundTransitions(ctx context.Context, refundID string) ([]reconcile.TransitionRecord, error) {
	return queryAll(ctx, t, scanTransition, "list transitions of "+refundID,
		`SELECT `+transitionColumns+` FROM transitions WHERE refund_id = $1 ORDER BY id`, refundID)
}

// ListDisputeTransitions implements reconcile.Tx, from
// transitions_dispute_idx.
func (t *txn) ListDisputeTransitions(ctx context.Context, disputeID string) ([]reconcile.TransitionRecord, error) {
	return queryAll(ctx, t, scanTransition, "list transitions of "+disputeID,
		`SELECT `+transitionColumns+` FROM transitions WHERE dispute_id = $1 ORDER BY id`, disputeID)
}

// scanTransition reads one row of transitionColumns.
func scanTransition(row sqlstore.Row) (reconcile.TransitionRecord, error) {
	var r reconcile.TransitionRecord
	var from, to, cause string
	var refundID, disputeID *string
	err := row.Scan(&r.ID, &r.PurchaseID, &refundID, &disputeID, &from, &to, &cause, &r.Evidence, &r.Actor, &r.LeaseToken, &r.At)
	r.RefundID, r.DisputeID = sqlstore.DerefString(refundID), sqlstore.DerefString(disputeID)
	r.From, r.To, r.Cause, r.At = statemachine.State(from), statemachine.State(to), reconcile.Cause(cause), r.At.UTC()
	return r, err
}

// InsertAttempt implements reconcile.Tx.
func (t *txn) InsertAttempt(ctx context.Context, a reconcile.Attempt) error {
	_, err := t.exec(ctx, `INSERT INTO provider_attempts
    (purchase_id, refund_id, op, idem_key, outcome, payment_id, status, latency_ns, error, actor, lease_token, applied, note, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
		a.PurchaseID, sqlstore.NullString(a.RefundID), string(a.Op), a.Key, string(a.Outcome), a.PaymentID, a.Status, int64(a.Latency), a.Error,
		a.Actor, a.LeaseToken, a.Applied, a.Note, nullTime(a.At))
	if err != nil {
		return wrapRef(err, "insert %s attempt of %s", a.Op, auditSubject(a.PurchaseID, a.RefundID))
	}
	return nil
}

const attemptColumns = `id, purchase_id, refund_id, op, idem_key, outcome, payment_id, status, latency_ns,
    error, actor, lease_token, applied, note, at`

// ListAttempts implements reconcile.Tx, from
// provider_attempts_purchase_idx.
func (t *txn) ListAttempts(ctx context.Context, purchaseID string) ([]reconcile.Attempt, error) {
	return queryAll(ctx, t, scanAttempt, "list attempts of "+purchaseID,
		`SELECT `+attemptColumns+` FROM provider_attempts WHERE purchase_id = $1 AND refund_id IS NULL ORDER BY id`, purchaseID)
}

// ListRefundAttempts implements reconcile.Tx, from
// provider_attempts_refund_idx.
func (t *txn) ListRefundAttempts(ctx context.Context, refundID string) ([]reconcile.Attempt, error) {
	return queryAll(ctx, t, scanAttempt, "list attempts of "+refundID,
		`SELECT `+attemptColumns+` FROM provider_attempts WHERE refund_id = $1 ORDER BY id`, refundID)
}

// scanAttempt reads one row of attemptColumns.
func scanAttempt(row sqlstore.Row) (reconcile.Attempt, error) {
	var a reconcile.Attempt
	var op, outcome string
	var refundID *string
	var latency int64
	err := row.Scan(&a.ID, &a.PurchaseID, &refundID, &op, &a.Key, &outcome, &a.PaymentID, &a.Status, &latency,
		&a.Error, &a.Actor, &a.LeaseToken, &a.Applied, &a.Note, &a.At)
	a.RefundID = sqlstore.DerefString(refundID)
	a.Op, a.Outcome, a.Latency, a.At = provider.Op(op), provider.Outcome(outcome), time.Duration(latency), a.At.UTC()
	return a, err
}

// auditSubject names what a row of the audit is about in errors: the
// purchase, or its refund or dispute (sub).
func auditSubject(purchaseID, sub string) string {
	if sub == "" {
		return purchaseID
	}
	return sub + " (of " + purchaseID + ")"
}
