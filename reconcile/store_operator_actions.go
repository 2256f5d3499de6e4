package reconcile

import "context"

// OperatorActionStore is the part of Tx that appends to and reads the
// operator audit. The stores' operator_actions.go implement it.
type OperatorActionStore interface {
	// InsertOperatorAction appends to the operator audit: an action on a
	// purchase, or on one of its refunds when a.RefundID is set. a.ID is
	// ignored: the store numbers the rows in insertion order. Returns
	// ErrNotFound for an unknown purchase, or a refund that is not the
	// purchase's, and ErrInvalid for an action other than recheck,
	// resolve, note or refund.
	InsertOperatorAction(ctx context.Context, a OperatorAction) error
	// ListOperatorActions returns a purchase's operator actions, those on
	// its refunds included (with their RefundID), oldest first.
	ListOperatorActions(ctx context.Context, purchaseID string) ([]OperatorAction, error)
}
