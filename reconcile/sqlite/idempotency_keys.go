package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
)

// The purchase API's idempotency keys (migration 00002).

const idempotencyColumns = `client, key, request_hash, status_code, response, purchase_id, created_at`

// InsertIdempotencyKey implements reconcile.Tx with INSERT ... ON
// CONFLICT DO NOTHING: the primary key (client, key) decides. An empty
// response is stored as NULL.
func (t *txn) InsertIdempotencyKey(ctx context.Context, k reconcile.IdempotencyKey) (bool, error) {
	n, err := t.exec(ctx, `INSERT INTO idempotency_keys (`+idempotencyColumns+`)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (client, key) DO NOTHING`,
		k.Client, k.Key, k.RequestHash, k.StatusCode, sqlstore.NullBytes(k.Response), sqlstore.NullString(k.PurchaseID), micros(k.CreatedAt))
	if err != nil {
		return false, wrap(err, "insert idempotency key %q of %q", k.Key, k.Client)
	}
	return n == 1, nil
}

// GetIdempotencyKey implements reconcile.Tx.
func (t *txn) GetIdempotencyKey(ctx context.Context, client, key string) (reconcile.IdempotencyKey, error) {
	return queryOne(ctx, t, scanIdempotencyKey, fmt.Sprintf("get idempotency key %q of %q", key, client),
		`SELECT `+idempotencyColumns+` FROM idempotency_keys WHERE client = ?1 AND key = ?2`, client, key)
}

// SaveIdempotencyResponse implements reconcile.Tx.
func (t *txn) SaveIdempotencyResponse(ctx context.Context, client, key string, statusCode int, body []byte, purchaseID string) error {
	return t.execOne(ctx, fmt.Sprintf("save response of idempotency key %q of %q", key, client),
		`UPDATE idempotency_keys SET status_code = ?3, response = ?4, purchase_id = ?5
WHERE client = ?1 AND key = ?2`, client, key, statusCode, sqlstore.NullBytes(body), sqlstore.NullString(purchaseID))
}

// DeleteIdempotencyKeysBefore implements reconcile.Tx.
func (t *txn) DeleteIdempotencyKeysBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := dialect.CheckLimit("delete idempotency keys", limit); err != nil {
		return 0, err
	}
	n, err := t.exec(ctx, `DELETE FROM idempotency_keys WHERE rowid IN (
    SELECT rowid FROM idempotency_keys WHERE created_at < ?1 ORDER BY created_at, client, key LIMIT ?2)`,
		before.UnixMicro(), limit)
	if err != nil {
		return 0, wrap(err, "delete idempotency keys created before %s", sqlstore.Stamp(before))
	}
	return int(n), nil
}

// scanIdempotencyKey reads one row of idempotencyColumns.
func scanIdempotencyKey(row sqlstore.Row) (reconcile.IdempotencyKey, error) {
	var k reconcile.IdempotencyKey
	var purchaseID *string
	var created int64
	err := row.Scan(&k.Client, &k.Key, &k.RequestHash, &k.StatusCode, &k.Response, &purchaseID, &created)
	if err != nil {
		return reconcile.IdempotencyKey{}, err
	}
	k.Response = sqlstore.NilIfEmpty(k.Response)
	k.PurchaseID = sqlstore.DerefString(purchaseID)
	k.CreatedAt = fromMicros(created)
	return k, nil
}

var _ reconcile.KeyedPurchaseInserter = (*txn)(nil)

// InsertKeyedPurchases implements reconcile.KeyedPurchaseInserter with
// the one-row writes, item by item, under one savepoint: SQLite's
// statements run in the process, so one per row costs no round trip, and
// the savepoint makes a refusal write nothing, as PostgreSQL's one
// statement does.
func (t *txn) InsertKeyedPurchases(ctx context.Context, items []reconcile.KeyedPurchase) ([]bool, error) {
	what := fmt.Sprintf("insert %d keyed purchases", len(items))
	if err := dialect.CheckKeyedPurchases(what, items); err != nil {
		return nil, err
	}
	inserted := make([]bool, len(items))
	err := t.Savepoint(ctx, func(reconcile.Tx) error {
		for i, it := range items {
			ok, err := t.InsertIdempotencyKey(ctx, it.Key)
			if err != nil {
				return err
			}
			if !ok {
				continue // its purchase is not created: the key's owner did
			}
			if err := t.InsertPurchase(ctx, it.Purchase); err != nil {
				return err
			}
			if err := t.InsertJob(ctx, reconcile.Job{PurchaseID: it.Purchase.ID, RunAt: it.Purchase.CreatedAt}); err != nil {
				return err
			}
			inserted[i] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return inserted, nil
}
