package reconcile

import (
	"context"
	"time"
)

// SweepLockStore is the part of Tx that takes and frees the named locks
// under which the sweeps run. The stores' sweep_locks.go implement it.
type SweepLockStore interface {
	// AcquireSweepLock takes the named lock for owner until the store's
	// now+ttl, by the store's clock at this call, and reports whether it
	// got it: it is free, expired (its expiry at or before now), or
	// already owner's (which extends it to now+ttl). A concurrent
	// acquirer of the same lock waits for this transaction and then
	// judges the lock it left. The lock is held only once the transaction
	// commits. name and owner must not be empty and ttl must be positive
	// (ErrInvalid otherwise). With several replicas, each sweep runs
	// under its lock, so at most one runs at a time.
	AcquireSweepLock(ctx context.Context, name, owner string, ttl time.Duration) (bool, error)
	// ReleaseSweepLock frees the named lock if owner holds it. Releasing
	// a lock owner does not hold is not an error and changes nothing.
	ReleaseSweepLock(ctx context.Context, name, owner string) error
}
