package postgres

import (
	"context"
	"time"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/budget"
)

var _ budget.Store = (*Store)(nil)

// UpdateBuckets implements budget.Store in one transaction: it
// makes sure the rows exist (placeholders, ON CONFLICT DO NOTHING), locks
// them with SELECT ... ORDER BY bucket FOR UPDATE (one order for every
// taker, so that two takers never deadlock), calls fn with the store's
// clock and upserts what fn left. Every replica's takes of a bucket are
// serialised on its row lock.
func (s *Store) UpdateBuckets(ctx context.Context, account string, names []string, fn func(now time.Time, b []*budget.Bucket) error) error {
	return s.InTx(ctx, func(rtx reconcile.Tx) error {
		t := rtx.(*txn)
		if _, err := t.tx.Exec(ctx, `INSERT INTO provider_budget (account, bucket, tokens, rate, updated_at)
SELECT $1, unnest($2::text[]), 0, 0, 0
ON CONFLICT (account, bucket) DO NOTHING`, account, names); err != nil {
			return wrap(err, "budget of %s: placeholders", account)
		}
		rows, err := queryAll(ctx, t, sqlstore.ScanBucket, "lock budget of "+account,
			`SELECT `+sqlstore.BucketColumns+` FROM provider_budget
WHERE account = $1 AND bucket = ANY($2::text[]) ORDER BY bucket FOR UPDATE`, account, names)
		if err != nil {
			return err
		}
		now, err := t.Now(ctx)
		if err != nil {
			return err
		}
		bks := sqlstore.BucketsByName(names, rows)
		if err := fn(now, bks); err != nil {
			return err
		}
		for _, b := range bks {
			if _, err := t.tx.Exec(ctx, sqlstore.BucketUpsert, append([]any{account}, sqlstore.BucketArgs(b)...)...); err != nil {
				return wrap(err, "budget of %s: store %s", account, b.Name)
			}
		}
		return nil
	})
}

// Buckets implements budget.Store.
func (s *Store) Buckets(ctx context.Context, account string) ([]budget.Bucket, error) {
	var out []budget.Bucket
	err := s.InTx(ctx, func(rtx reconcile.Tx) error {
		rows, err := queryAll(ctx, rtx.(*txn), sqlstore.ScanBucket, "read budget of "+account,
			`SELECT `+sqlstore.BucketColumns+` FROM provider_budget WHERE account = $1 AND updated_at <> 0 ORDER BY bucket`, account)
		out = rows
		return err
	})
	return out, err
}
