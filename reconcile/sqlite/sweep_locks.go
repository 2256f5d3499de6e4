package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/internal/sqlstore"
)

// The sweep locks (migration 00002): with several replicas, each sweep
// runs under its lock, so at most one runs at a time.

// AcquireSweepLock implements reconcile.Tx in one upsert, by the store's
// clock read now: the lock row is inserted, or taken over when it
// expired (expires_at <= now) or is already owner's; RETURNING yields a
// row only then. Writers are serialized, so a concurrent acquirer of the
// same lock runs after this transaction and judges the row it left.
func (t *txn) AcquireSweepLock(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	if err := dialect.CheckSweepLock(name, owner, ttl); err != nil {
		return false, err
	}
	now := storeNow(t.now)
	got, err := queryAll(ctx, t, func(row sqlstore.Row) (int, error) {
		var one int
		return one, row.Scan(&one)
	}, fmt.Sprintf("acquire sweep lock %s for %s", name, owner),
		`INSERT INTO sweep_locks (name, owner, expires_at) VALUES (?1, ?2, ?3)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE sweep_locks.expires_at <= ?4 OR sweep_locks.owner = excluded.owner
RETURNING 1`, name, owner, micros(now.Add(ttl)), now.UnixMicro())
	if err != nil {
		return false, err
	}
	return len(got) == 1, nil
}

// ReleaseSweepLock implements reconcile.Tx.
func (t *txn) ReleaseSweepLock(ctx context.Context, name, owner string) error {
	if _, err := t.exec(ctx, `DELETE FROM sweep_locks WHERE name = ?1 AND owner = ?2`, name, owner); err != nil {
		return wrap(err, "release sweep lock %s of %s", name, owner)
	}
	return nil
}
