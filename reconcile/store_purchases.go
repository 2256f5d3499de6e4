package reconcile

import (
	"context"
	"time"

	"github.com/payrecon/payrecon/statemachine"
)

// PurchaseStore is the part of Tx that writes and reads purchases one by
// one, and the periodic reads over them (the operator list, the counts,
// the sweeps' and the audit's windows). The stores' purchases.go
// implement it.
type PurchaseStore interface {
	// InsertPurchase stores a new purchase. Returns ErrDuplicate if its id,
	// or its (customer, reference) when reference is set, exists,
	// ErrForbiddenTransition if its state is not created, and ErrInvalid
	// if its amount is not positive or its CreatedAt or UpdatedAt is zero.
	InsertPurchase(ctx context.Context, p Purchase) error

	// GetPurchase returns the purchase with id, or ErrNotFound.
	GetPurchase(ctx context.Context, id string) (Purchase, error)

	// ListAccounts returns every connected account the books hold a
	// purchase of, in order; the platform's own is not listed.
	ListAccounts(ctx context.Context) ([]string, error)

	// FindPurchaseByPaymentID returns the purchase whose provider payment id
	// is paymentID, or ErrNotFound.
	FindPurchaseByPaymentID(ctx context.Context, paymentID string) (Purchase, error)

	// FindPurchaseByReference returns the customer's purchase with that
	// reference, or ErrNotFound. An empty reference finds nothing:
	// purchases without one have none to match.
	FindPurchaseByReference(ctx context.Context, customer, reference string) (Purchase, error)

	// UpdatePurchase writes p if the stored row is still in state from at
	// version p.Version; it stores version p.Version+1. It writes the
	// state, the provider fields (key, request, params hash, payment id,
	// first attempt), UncertainSince, the escalation, SettledAt, Doubt and
	// UpdatedAt; the other fields are fixed at insert and left alone.
	// Returns ErrConflict if the row moved on (its DetailOf says what the
	// row is now), ErrNotFound if there is no such row,
	// ErrForbiddenTransition if the database refuses from → p.State, and
	// ErrDuplicate if p's provider payment id belongs to another purchase.
	UpdatePurchase(ctx context.Context, p Purchase, from statemachine.State) error

	// ListEscalated returns the purchases on the operator list: every
	// purchase with an escalation time, whatever its state (a
	// contradiction can escalate a declined purchase), of the account
	// that account selects, oldest escalation first (then by id).
	ListEscalated(ctx context.Context, account AccountFilter) ([]Purchase, error)

	// CountByState returns how many purchases are in each state; every
	// state is present, with 0 when it has none.
	CountByState(ctx context.Context) (map[statemachine.State]int, error)

	// CountEscalatedByAccount returns how many purchases are on the
	// operator list (those ListEscalated returns) of each provider
	// account, keyed by the account (provider.PlatformAccount for the
	// platform's own); an account with none is absent. It reads only the
	// purchases on the list.
	CountEscalatedByAccount(ctx context.Context) (map[string]int, error)

	// OldestUncertainSince returns the earliest UncertainSince of the
	// purchases now in uncertain or reconciling, or the zero time if there
	// are none. Those without an UncertainSince do not count.
	OldestUncertainSince(ctx context.Context) (time.Time, error)

	// ListOverdueUncertain returns up to limit purchases in state uncertain,
	// not escalated, whose UncertainSince is strictly before
	// uncertainBefore, oldest UncertainSince first (then by id). limit
	// must be positive (ErrInvalid otherwise).
	ListOverdueUncertain(ctx context.Context, uncertainBefore time.Time, limit int) ([]Purchase, error)

	// ListSubmittedBetween returns the purchases in state whose first
	// attempt (FirstAttemptAt) falls in [from, until) and whose provider
	// payment id is not one of listed (a purchase with none is returned),
	// oldest FirstAttemptAt first (then by id). The audit uses it to find
	// succeeded purchases whose payment the provider does not list: it
	// passes the ones the provider listed, so that the store returns only
	// the few it did not, not every purchase of the window.
	ListSubmittedBetween(ctx context.Context, from, until time.Time, state statemachine.State, listed []string) ([]Purchase, error)

	// ListSucceededWithoutPayment returns the succeeded purchases that hold
	// no provider payment id and whose SettledAt falls in [from, until),
	// oldest SettledAt first (then by id). The books say such a purchase
	// took the money yet name no payment: the audit asks the provider for
	// one in the chunk that holds the settlement.
	ListSucceededWithoutPayment(ctx context.Context, from, until time.Time) ([]Purchase, error)
}
