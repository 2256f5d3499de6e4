package sqlite

import (
	"context"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
)

// The operator audit (migration 00002): what an operator saw and did,
// append-only. An action about a refund (migration 00008) carries its
// refund_id beside its purchase's id.

// InsertOperatorAction implements reconcile.Tx.
func (t *txn) InsertOperatorAction(ctx context.Context, a reconcile.OperatorAction) error {
	_, err := t.exec(ctx, `INSERT INTO operator_actions (purchase_id, refund_id, operator, action, saw, did, evidence, at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)`,
		a.PurchaseID, sqlstore.NullString(a.RefundID), a.Operator, a.Action, a.Saw, a.Did, a.Evidence, micros(a.At))
	if err != nil {
		return t.wrapAuditRef(ctx, err, a.PurchaseID, "refund", a.RefundID, "insert %s action of %s by %q", a.Action, auditSubject(a.PurchaseID, a.RefundID), a.Operator)
	}
	return nil
}

// ListOperatorActions implements reconcile.Tx.
func (t *txn) ListOperatorActions(ctx context.Context, purchaseID string) ([]reconcile.OperatorAction, error) {
	return queryAll(ctx, t, func(row sqlstore.Row) (reconcile.OperatorAction, error) {
		var a reconcile.OperatorAction
		var refundID *string
		var at int64
		err := row.Scan(&a.ID, &a.PurchaseID, &refundID, &a.Operator, &a.Action, &a.Saw, &a.Did, &a.Evidence, &at)
		a.RefundID = sqlstore.DerefString(refundID)
		a.At = fromMicros(at)
		return a, err
	}, "list operator actions of "+purchaseID,
		`SELECT id, purchase_id, refund_id, operator, action, saw, did, evidence, at
FROM operator_actions WHERE purchase_id = ?1 ORDER BY id`, purchaseID)
}
