package reconcile

import (
	"context"

	"github.com/payrecon/payrecon/statemachine"
)

// DisputeStore is the part of Tx that writes and reads disputes. The
// stores' disputes.go implement it.
type DisputeStore interface {
	// InsertDispute stores a new dispute in state open (the start of
	// statemachine.Dispute), linked to its purchase. The database refuses,
	// and the transaction stays usable:
	//   - ErrDuplicate if its id or its provider dispute id exists;
	//   - ErrForbiddenTransition if its state is not open;
	//   - ErrNotFound if its purchase does not exist;
	//   - ErrInvalid if its provider dispute id, payment id or currency is
	//     empty, its amount is not positive, or its CreatedAt or UpdatedAt
	//     is zero.
	InsertDispute(ctx context.Context, d Dispute) error
	// GetDispute returns the dispute with payrecon's id, or ErrNotFound.
	// The reads of disputes set Dispute.Account from the dispute's
	// purchase.
	GetDispute(ctx context.Context, id string) (Dispute, error)
	// FindDispute returns the dispute with the provider's dispute id, or
	// ErrNotFound.
	FindDispute(ctx context.Context, providerDisputeID string) (Dispute, error)
	// ListDisputes returns a purchase's disputes, oldest CreatedAt first
	// (then by id).
	ListDisputes(ctx context.Context, purchaseID string) ([]Dispute, error)
	// UpdateDispute writes d if the stored row is still in state from at
	// version d.Version; it stores version d.Version+1. It writes the
	// state, the provider's status, the inquiry flag, the evidence due
	// date, the refundable flag, the funds withdrawn and reinstated, the
	// reason, ProviderUpdatedAt, ClosedAt and UpdatedAt; the purchase,
	// payment, provider id, amount and currency are fixed at insert and
	// left alone. Returns ErrConflict if the row moved on, ErrNotFound if
	// there is no such row, and ErrForbiddenTransition if
	// statemachine.Dispute refuses from → d.State.
	UpdateDispute(ctx context.Context, d Dispute, from statemachine.State) error
	// ListOpenDisputes returns every dispute not final (open or evidence
	// submitted) whose purchase is of the account that account selects,
	// soonest evidence due date first, those with no due date last, then
	// by id.
	ListOpenDisputes(ctx context.Context, account AccountFilter) ([]Dispute, error)
}
