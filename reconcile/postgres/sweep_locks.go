package postgres

import (
	"context"
	"time"
)

// The sweep locks (migration 00002): with several replicas, each sweep
// runs under its lock, so at most one runs at a time.

// AcquireSweepLock implements reconcile.Tx in one statement, which reads
// the store's clock: the lock row is inserted, or taken over when it
// expired (expires_at <= now) or is already owner's. A concurrent
// acquirer of the same lock waits for this transaction's row lock.
func (t *txn) AcquireSweepLock(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	if err := dialect.CheckSweepLock(name, owner, ttl); err != nil {
		return false, err
	}
	n, err := t.exec(ctx, `INSERT INTO sweep_locks AS l (name, owner, expires_at)
VALUES ($2, $3, `+nowSQL+` + $4::interval)
ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
WHERE l.expires_at <= `+nowSQL+` OR l.owner = EXCLUDED.owner`, clockArg(t.now), name, owner, ttl)
	if err != nil {
		return false, wrap(err, "acquire sweep lock %s for %s", name, owner)
	}
	return n == 1, nil
}

// ReleaseSweepLock implements reconcile.Tx.
func (t *txn) ReleaseSweepLock(ctx context.Context, name, owner string) error {
	if _, err := t.exec(ctx, `DELETE FROM sweep_locks WHERE name = $1 AND owner = $2`, name, owner); err != nil {
		return wrap(err, "release sweep lock %s of %s", name, owner)
	}
	return nil
}
