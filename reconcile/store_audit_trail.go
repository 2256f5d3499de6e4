package reconcile

import "context"

// AuditTrailStore is the part of Tx that appends to and reads the
// append-only audit of purchases and refunds: their transitions and
// their provider calls. The stores' audit_trail.go implement it.
type AuditTrailStore interface {
	// InsertTransition appends to the transition audit: a purchase's move,
	// a refund's when r.RefundID is set, or a dispute's when r.DisputeID
	// is set (never both). r.ID is ignored: the store
	// numbers the rows in insertion order. Returns ErrNotFound for an
	// unknown purchase, or a refund or dispute that is not the
	// purchase's, and ErrForbiddenTransition for a move that is not in its
	// machine's table (a purchase's moves for a purchase's row, a refund's
	// for a refund's, a dispute's for a dispute's).
	InsertTransition(ctx context.Context, r TransitionRecord) error
	// ListTransitions returns a purchase's own transitions (not its
	// refunds' or disputes'), oldest first.
	ListTransitions(ctx context.Context, purchaseID string) ([]TransitionRecord, error)
	// ListRefundTransitions returns a refund's transitions, oldest first.
	ListRefundTransitions(ctx context.Context, refundID string) ([]TransitionRecord, error)
	// ListDisputeTransitions returns a dispute's transitions, oldest
	// first.
	ListDisputeTransitions(ctx context.Context, disputeID string) ([]TransitionRecord, error)

	// InsertAttempt appends to the provider call audit: a call about the
	// purchase's charge, or about a refund when a.RefundID is set. a.ID
	// is ignored: the store numbers the rows in insertion order. Latency
	// is kept to the nanosecond. Returns ErrNotFound for an unknown
	// purchase, or a refund that is not the purchase's.
	InsertAttempt(ctx context.Context, a Attempt) error
	// ListAttempts returns the provider calls about a purchase's own
	// charge (not its refunds), oldest first.
	ListAttempts(ctx context.Context, purchaseID string) ([]Attempt, error)
	// ListRefundAttempts returns a refund's provider calls, oldest first.
	ListRefundAttempts(ctx context.Context, refundID string) ([]Attempt, error)
}
