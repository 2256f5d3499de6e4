package reconcile

import (
	"context"
	"time"
)

// Store is the persistence payrecon's protocol needs. reconcile/postgres
// and reconcile/sqlite implement it; internal/testing/storetest is the
// suite both must pass unchanged.
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

	// Now returns the store's clock: the database server's clock by
	// default, the one clock every worker and replica shares, so that a
	// worker whose own clock is off changes no decision. Tests and the demo
	// inject a clock into the store instead (its Config.Now).
	Now(ctx context.Context) (time.Time, error)

	// ClaimJobs leases up to limit jobs that are due (run_at <= now and not
	// leased) or whose lease expired (lease_expires_at <= now), now being
	// the store's clock at the claim, giving each a new fencing token
	// greater than any before it, owner as its owner and now+leaseFor as
	// its expiry. Concurrent callers never receive the same job. Jobs
	// whose lease expired are taken first (their purchases may be
	// mid-call), then due jobs oldest run_at first; the leases come back
	// in run_at order (then by job id). A job whose previous lease was
	// never released (it expired) comes back with TakenOver set. Each
	// Lease's Now is the store's time of the claim. Jobs of both kinds are
	// claimed alike, each Lease with its Kind set and its Purchase as the
	// claim read it; a JobRefund's Lease carries its RefundID and Refund
	// too, and the purchase it belongs to as PurchaseID and Purchase.
	// owner must not be empty, limit and leaseFor must be positive
	// (ErrInvalid otherwise).
	ClaimJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]Lease, error)

	// ClaimAccountJobs is ClaimJobs over the jobs of account alone (those
	// of its purchases and of their refunds), so that a claim for one
	// account never fills up with another's backlog.
	ClaimAccountJobs(ctx context.Context, owner, account string, limit int, leaseFor time.Duration) ([]Lease, error)

	// DueAccounts returns the accounts that have a job ClaimJobs would
	// take now (due and not leased, or its lease expired) and come after
	// after (every one, the platform's "" first, when after is ""), in
	// account order, at most limit of them (positive; ErrInvalid
	// otherwise): a cursor, so that a worker serves them in turn however
	// many there are.
	DueAccounts(ctx context.Context, after string, limit int) ([]string, error)

	// ClaimExpiredJobs is ClaimJobs restricted to the open jobs whose
	// lease expired without being released (their worker died or
	// stalled); a job that is due but not leased is left alone, and every
	// lease comes back with TakenOver set. The rescue sweep uses it to
	// move such purchases on promptly.
	ClaimExpiredJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]Lease, error)

	// ClaimJob leases the purchase job of purchaseID (never one of its
	// refunds' jobs), whether due or not, if it is not done and not leased
	// (or its lease expired), with a new fencing token as ClaimJobs does.
	// For an operator's recheck. Returns ErrConflict if the job is done or
	// holds an unexpired lease (whoever its owner, this one included),
	// ErrNotFound if there is no such job, and ErrInvalid for an empty
	// owner or a leaseFor not positive.
	ClaimJob(ctx context.Context, purchaseID, owner string, leaseFor time.Duration) (Lease, error)

	// ReleaseLeases gives up every lease owner holds, on open jobs of
	// either kind, expired or not, making those jobs due at the store's
	// now. Used on shutdown so that another worker picks them up at once.
	// Returns how many were released.
	ReleaseLeases(ctx context.Context, owner string) (int, error)

	// Ready returns nil when the database is reachable and migrated to the
	// version this binary expects; ErrNotMigrated when it is not.
	Ready(ctx context.Context) error

	// Close releases the store's connections.
	Close() error
}

// Tx is the set of operations available inside one transaction. Reads see
// the transaction's own writes. A refused write (ErrDuplicate, ErrConflict,
// ErrForbiddenTransition, ...) leaves the transaction usable: the caller
// may read on and decide. Times round-trip exactly to the microsecond, in
// UTC; a zero time.Time is stored as NULL.
//
// Tx is made of one small interface per concept, each named after the
// stores' file that implements it (reconcile/postgres/purchases.go,
// reconcile/sqlite/purchases.go, ...) and each in a file of its own here
// (store_purchases.go, ...). Each carries its methods' contract; the
// stores' comments say only what is particular to their database.
type Tx interface {
	PurchaseStore
	MoveStore
	AuditTrailStore
	JobStore
	RefundStore
	DisputeStore
	InboxStore
	IdempotencyKeyStore
	OperatorActionStore
	SweepLockStore
	FindingStore
	RecoveryStore
	OutboxStore

	// Now returns the store's clock (see Store.Now), read at this call,
	// not at the transaction's start, to the microsecond, in UTC.
	Now(ctx context.Context) (time.Time, error)

	// Savepoint runs fn under a savepoint of its own, nested in the
	// transaction (and in any savepoint around it). fn must use only the
	// Tx it is given. If fn returns nil, its writes stay in the
	// transaction, to commit with it. If fn returns an error, everything
	// fn wrote is rolled back to the savepoint, the transaction stays
	// usable (its writes before and after fn commit as usual), and
	// Savepoint returns fn's error unchanged. Any other error (the
	// savepoint could not be set, released or rolled back to, e.g. the
	// connection was lost) means the transaction is unusable: its caller
	// must end it with an error.
	Savepoint(ctx context.Context, fn func(Tx) error) error
}
