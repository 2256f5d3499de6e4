package reconcile

import (
	"context"
	"time"

	"github.com/payrecon/payrecon/statemachine"
)

// Store is the persistence payrecon's protocol needs. reconcile/postgres
// and reconcile/sqlite implement it; reconcile/storetest is the suite both
// must pass unchanged.
//
// Implementations must be safe for concurrent use, translate driver errors
// into this package's errors (wrapped with %w), and enforce the transition
// table in the database itself, so that no SQL path can write a forbidden
// move.
type Store interface {
	// InTx runs fn in one transaction, committing if fn returns nil and
	// rolling back otherwise. fn must use only the Tx it is given, and may
	// be called more than once if the database asks for a retry
	// (serialization failures), so it must not have side effects outside
	// the transaction.
	InTx(ctx context.Context, fn func(Tx) error) error

	// ClaimJobs leases up to limit jobs that are due (run_at <= now and not
	// leased) or whose lease expired (lease_expires_at <= now), giving each
	// a new fencing token greater than any before it, owner as its owner
	// and now+leaseFor as its expiry. Concurrent callers never receive the
	// same job. Due jobs come oldest run_at first.
	ClaimJobs(ctx context.Context, owner string, limit int, now time.Time, leaseFor time.Duration) ([]Lease, error)

	// ReleaseLeases gives up every lease owner holds, making those jobs due
	// at now. Used on shutdown so that another worker picks them up at
	// once. Returns how many were released.
	ReleaseLeases(ctx context.Context, owner string, now time.Time) (int, error)

	// Ready returns nil when the database is reachable and migrated to the
	// version this binary expects; ErrNotMigrated when it is not.
	Ready(ctx context.Context) error

	// Close releases the store's connections.
	Close() error
}

// Tx is the set of operations available inside one transaction. Reads see
// the transaction's own writes.
type Tx interface {
	// InsertPurchase stores a new purchase. Returns ErrDuplicate if its id,
	// or its (customer, reference) when reference is set, exists.
	InsertPurchase(ctx context.Context, p Purchase) error

	// GetPurchase returns the purchase with id, or ErrNotFound.
	GetPurchase(ctx context.Context, id string) (Purchase, error)

	// FindPurchaseByPaymentID returns the purchase whose provider payment id
	// is paymentID, or ErrNotFound.
	FindPurchaseByPaymentID(ctx context.Context, paymentID string) (Purchase, error)

	// UpdatePurchase writes p (state, provider fields, escalation,
	// updated_at) if the stored row is still in state from at version
	// p.Version; it stores version p.Version+1. Returns ErrConflict if the
	// row moved on, ErrNotFound if there is no such row, and
	// ErrForbiddenTransition if the database refuses from → p.State.
	UpdatePurchase(ctx context.Context, p Purchase, from statemachine.State) error

	// InsertTransition appends to the transition audit.
	InsertTransition(ctx context.Context, r TransitionRecord) error
	// ListTransitions returns a purchase's transitions, oldest first.
	ListTransitions(ctx context.Context, purchaseID string) ([]TransitionRecord, error)

	// InsertAttempt appends to the provider call audit.
	InsertAttempt(ctx context.Context, a Attempt) error
	// ListAttempts returns a purchase's provider calls, oldest first.
	ListAttempts(ctx context.Context, purchaseID string) ([]Attempt, error)

	// InsertJob creates the job for a purchase, due at job.RunAt.
	InsertJob(ctx context.Context, job Job) error
	// GetJob returns a purchase's job, or ErrNotFound.
	GetJob(ctx context.Context, purchaseID string) (Job, error)

	// CheckLease returns nil if l is still the job's current lease (same
	// owner and token) and unexpired at now, and locks the job row for the
	// rest of the transaction so that no claim can take it over before
	// commit. Returns ErrLeaseLost otherwise.
	CheckLease(ctx context.Context, l Lease, now time.Time) error

	// RescheduleJob releases the job's lease and makes it due at runAt.
	// Call it after CheckLease (or for a job not leased).
	RescheduleJob(ctx context.Context, purchaseID string, runAt time.Time) error

	// CompleteJob releases the job's lease and marks it done at now; a done
	// job is never claimed again.
	CompleteJob(ctx context.Context, purchaseID string, now time.Time) error

	// ListEscalated returns the purchases on the operator list, oldest
	// escalation first.
	ListEscalated(ctx context.Context) ([]Purchase, error)

	// CountByState returns how many purchases are in each state.
	CountByState(ctx context.Context) (map[statemachine.State]int, error)
}
