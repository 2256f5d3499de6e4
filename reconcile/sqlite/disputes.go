package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// Disputes (migration 00015): their own process, opened by the card
// network and moved by the provider's answers, with their own guard. A
// dispute that forbids a refund of its payment is the refunds' limits'
// to judge (refunds_check_insert).

const disputeColumns = sqlstore.DisputeColumns

// disputeReadColumns are disputeColumns and the account of the dispute's
// purchase, which scanDispute reads.
var disputeReadColumns = disputeColumns + `, ` + sqlstore.AccountOfPurchase("disputes.purchase_id")

// InsertDispute implements reconcile.Tx; the database's constraints and
// triggers make the refusals.
func (t *txn) InsertDispute(ctx context.Context, d reconcile.Dispute) error {
	_, err := t.exec(ctx, `INSERT INTO disputes (`+disputeColumns+`)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)`,
		d.ID, d.ProviderDisputeID, d.PurchaseID, d.PaymentID, d.Amount, d.Currency, d.Reason,
		string(d.State), d.Version, d.ProviderStatus, d.Inquiry, micros(d.EvidenceDueBy), d.ChargeRefundable,
		d.Withdrawn, d.Reinstated, micros(d.ProviderUpdatedAt), micros(d.CreatedAt), micros(d.UpdatedAt),
		micros(d.ClosedAt))
	if err != nil {
		// The purchase is the disputes' only foreign key a valid state
		// can fail (the guard refuses any state but open first).
		return wrapRef(err, "insert dispute %s of %s", d.ID, d.PurchaseID)
	}
	return nil
}

// GetDispute implements reconcile.Tx.
func (t *txn) GetDispute(ctx context.Context, id string) (reconcile.Dispute, error) {
	return queryOne(ctx, t, scanDispute, "get dispute "+id,
		`SELECT `+disputeReadColumns+` FROM disputes WHERE id = ?1`, id)
}

// FindDispute implements reconcile.Tx, from the provider id's unique
// index.
func (t *txn) FindDispute(ctx context.Context, providerDisputeID string) (reconcile.Dispute, error) {
	return queryOne(ctx, t, scanDispute, "find dispute "+providerDisputeID,
		`SELECT `+disputeReadColumns+` FROM disputes WHERE provider_dispute_id = ?1`, providerDisputeID)
}

// ListDisputes implements reconcile.Tx, from disputes_purchase_idx.
func (t *txn) ListDisputes(ctx context.Context, purchaseID string) ([]reconcile.Dispute, error) {
	return queryAll(ctx, t, scanDispute, "list disputes of "+purchaseID,
		`SELECT `+disputeReadColumns+` FROM disputes WHERE purchase_id = ?1 ORDER BY created_at, id`, purchaseID)
}

// UpdateDispute implements reconcile.Tx. The database refuses a change of
// the purchase, payment, provider id, amount or currency; this statement
// writes none of them.
func (t *txn) UpdateDispute(ctx context.Context, d reconcile.Dispute, from statemachine.State) error {
	n, err := t.exec(ctx, `UPDATE disputes SET
    state = ?3,
    version = version + 1,
    provider_status = ?5,
    inquiry = ?6,
    evidence_due_by = ?7,
    charge_refundable = ?8,
    withdrawn = ?9,
    reinstated = ?10,
    reason = ?11,
    provider_updated_at = ?12,
    closed_at = ?13,
    updated_at = ?14
WHERE id = ?1 AND state = ?2 AND version = ?4`,
		d.ID, string(from), string(d.State), d.Version,
		d.ProviderStatus, d.Inquiry, micros(d.EvidenceDueBy), d.ChargeRefundable,
		d.Withdrawn, d.Reinstated, d.Reason, micros(d.ProviderUpdatedAt), micros(d.ClosedAt),
		micros(d.UpdatedAt))
	if err != nil {
		return wrap(err, "update dispute %s (%s -> %s)", d.ID, from, d.State)
	}
	if n == 1 {
		return nil
	}
	var state string
	var version int64
	err = t.tx.QueryRowContext(ctx, `SELECT state, version FROM disputes WHERE id = ?1`, d.ID).Scan(&state, &version)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return dialect.NotFound("update dispute " + d.ID)
	case err != nil:
		return wrap(err, "update dispute %s", d.ID)
	}
	return dialect.Conflict("update dispute "+d.ID, sqlstore.ConflictDetail(statemachine.State(state), version, from, d.Version))
}

// ListOpenDisputes implements reconcile.Tx.
func (t *txn) ListOpenDisputes(ctx context.Context, account reconcile.AccountFilter) ([]reconcile.Dispute, error) {
	if a, ok := account.Account(); ok {
		return queryAll(ctx, t, scanDispute, "list open disputes of "+reconcile.AccountLabel(a), listOpenDisputesAccountSQL, a)
	}
	return queryAll(ctx, t, scanDispute, "list open disputes", listOpenDisputesSQL)
}

// listOpenDisputesSQL is ListOpenDisputes' query, read from the partial
// index disputes_open_idx in its order: SQLite sorts NULL first, so the
// index and the order lead with evidence_due_by IS NULL, which puts the
// disputes with no due date last. INDEXED BY holds the planner to the
// index, as the refunds' periodic reads do.
var listOpenDisputesSQL = `SELECT ` + disputeReadColumns + ` FROM disputes INDEXED BY disputes_open_idx
WHERE state IN ('open', 'evidence_submitted')
ORDER BY evidence_due_by IS NULL, evidence_due_by, id`

// listOpenDisputesAccountSQL is ListOpenDisputes' query for the disputes
// of purchases of one account (?1), from the same partial index, each
// row's purchase probed by its key.
var listOpenDisputesAccountSQL = `SELECT ` + disputeReadColumns + ` FROM disputes INDEXED BY disputes_open_idx
WHERE state IN ('open', 'evidence_submitted') AND ` + sqlstore.PurchaseOfAccount("disputes.purchase_id", "?1") + `
ORDER BY evidence_due_by IS NULL, evidence_due_by, id`

// scanDispute reads one row of disputeColumns.
func scanDispute(row sqlstore.Row) (reconcile.Dispute, error) {
	var d reconcile.Dispute
	var state string
	var dueBy, providerUpdated, closed *int64
	var created, updated int64
	err := row.Scan(&d.ID, &d.ProviderDisputeID, &d.PurchaseID, &d.PaymentID, &d.Amount, &d.Currency, &d.Reason,
		&state, &d.Version, &d.ProviderStatus, &d.Inquiry, &dueBy, &d.ChargeRefundable, &d.Withdrawn, &d.Reinstated,
		&providerUpdated, &created, &updated, &closed, &d.Account)
	if err != nil {
		return reconcile.Dispute{}, err
	}
	d.State = statemachine.State(state)
	d.EvidenceDueBy = fromNullMicros(dueBy)
	d.ProviderUpdatedAt = fromNullMicros(providerUpdated)
	d.CreatedAt, d.UpdatedAt = fromMicros(created), fromMicros(updated)
	d.ClosedAt = fromNullMicros(closed)
	return d, nil
}
