package reconcile

import (
	"context"
	"time"

	"github.com/payrecon/payrecon/statemachine"
)

// RefundStore is the part of Tx that writes and reads refunds, and the
// periodic reads over them. The stores' refunds.go implement it.
type RefundStore interface {
	// InsertRefund stores a new refund in state created, with its
	// provider key, request and hash. The database refuses, and the
	// transaction stays usable:
	//   - ErrDuplicate if its id or its provider key exists;
	//   - ErrForbiddenTransition if its state is not created;
	//   - ErrNotFound if its purchase does not exist;
	//   - ErrInvalid if its provider key, request or hash is missing, its
	//     amount is not positive, or its CreatedAt or UpdatedAt is zero;
	//   - ErrNotRefundable if r.FindingID is 0 and its purchase is not
	//     succeeded or r.PaymentID is not the purchase's payment id, or
	//     if r.FindingID names no finding of r.PaymentID for r.PurchaseID
	//     (or names a finding about a refund, FindingOrphanRefund or
	//     FindingRefundMismatch, whose PaymentID is no payment);
	//   - ErrDisputed if a dispute of r.PaymentID forbids a refund
	//     (Dispute.BlocksRefund: open and not refundable, or lost);
	//   - ErrRefundExceeds if the refunds of r.PaymentID not failed,
	//     pending ones included, would add up to more than the payment's
	//     amount (the purchase's amount for its own payment, the
	//     finding's amount for a finding's payment). Concurrent inserts
	//     for one payment are serialized, so two that together exceed it
	//     cannot both commit.
	//   ErrNotRefundable also refuses a finding about a dispute
	//   (FindingForeignDispute, FindingDisputeMismatch,
	//   FindingDisputeExceeds), whose PaymentID is no payment either.
	InsertRefund(ctx context.Context, r Refund) error
	// GetRefund returns the refund with id, or ErrNotFound.
	GetRefund(ctx context.Context, id string) (Refund, error)
	// ListRefunds returns a purchase's refunds, oldest CreatedAt first
	// (then by id).
	ListRefunds(ctx context.Context, purchaseID string) ([]Refund, error)
	// FindRefunds returns, in one read, the refunds whose id is in ids or
	// whose provider refund id is in providerIDs, each once, in no
	// particular order; unknown ids and empty strings find nothing.
	FindRefunds(ctx context.Context, ids, providerIDs []string) ([]Refund, error)
	// UpdateRefund writes r if the stored row is still in state from at
	// version r.Version; it stores version r.Version+1. It writes the
	// state, the provider refund id, the failure reason, the times, the
	// escalation and UpdatedAt; the other fields are fixed at insert and
	// left alone (amount, payment, key and request never change). Returns
	// ErrConflict if the row moved on (its DetailOf says what the row is
	// now), ErrNotFound if there is no such row, ErrForbiddenTransition if
	// statemachine.Refund refuses from → r.State, and ErrDuplicate if r's
	// provider refund id belongs to another refund.
	UpdateRefund(ctx context.Context, r Refund, from statemachine.State) error
	// ListEscalatedRefunds returns the refunds on the operator list:
	// every refund with an escalation time, whatever its state, whose
	// purchase is of the account that account selects, oldest escalation
	// first (then by id).
	ListEscalatedRefunds(ctx context.Context, account AccountFilter) ([]Refund, error)
	// ListOverdueUncertainRefunds returns up to limit refunds in state
	// uncertain, not escalated, whose UncertainSince is strictly before
	// uncertainBefore, oldest UncertainSince first (then by id). limit
	// must be positive (ErrInvalid otherwise).
	ListOverdueUncertainRefunds(ctx context.Context, uncertainBefore time.Time, limit int) ([]Refund, error)
	// CountRefundsByState returns how many refunds are in each state;
	// every statemachine.Refund state is present, 0 when it has none.
	CountRefundsByState(ctx context.Context) (map[statemachine.State]int, error)
	// OldestUncertainRefundSince returns the earliest UncertainSince of
	// the refunds now uncertain or reconciling, or the zero time. Those
	// without an UncertainSince do not count.
	OldestUncertainRefundSince(ctx context.Context) (time.Time, error)
}
