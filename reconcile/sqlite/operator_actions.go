package sqlite

import (
	"context"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
)

// The operator audit (migration 00002): what an operator saw and did,
// append-only.

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
	return queryAll(ctx, t, func(row sqlstore.Row) (reconcile.OperatorAction, error) {
		var a reconcile.OperatorAction
		var at int64
		err := row.Scan(&a.ID, &a.PurchaseID, &a.Operator, &a.Action, &a.Saw, &a.Did, &a.Evidence, &at)
		a.At = fromMicros(at)
		return a, err
	}, "list operator actions of "+purchaseID,
		`SELECT id, purchase_id, operator, action, saw, did, evidence, at
FROM operator_actions WHERE purchase_id = ?1 ORDER BY id`, purchaseID)
}
