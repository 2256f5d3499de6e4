package sqlite

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/budget"
)

var _ budget.Store = (*Store)(nil)

// bucketUpsert is sqlstore.BucketUpsert with SQLite's placeholders.
var bucketUpsert = strings.ReplaceAll(sqlstore.BucketUpsert, "$", "?")

// UpdateBuckets implements budget.Store in one BEGIN IMMEDIATE
// transaction: SQLite's single writer serialises every taker, in any
// process, from the read of the buckets to the write of what fn left.
func (s *Store) UpdateBuckets(ctx context.Context, account string, names []string, fn func(now time.Time, b []*budget.Bucket) error) error {
	return s.InTx(ctx, func(rtx reconcile.Tx) error {
		t := rtx.(*txn)
		rows, err := queryAll(ctx, t, sqlstore.ScanBucket, "read budget of "+account,
			`SELECT `+sqlstore.BucketColumns+` FROM provider_budget
WHERE account = ?1 AND bucket IN (SELECT value FROM json_each(?2)) ORDER BY bucket`, account, jsonList(names))
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
			if _, err := t.exec(ctx, bucketUpsert, append([]any{account}, sqlstore.BucketArgs(b)...)...); err != nil {
				return wrap(err, "budget of %s: store %s", account, b.Name)
			}
		}
		return nil
	})
}

// jsonList is names as a JSON array of strings, for json_each.
func jsonList(names []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(n))
	}
	b.WriteByte(']')
	return b.String()
}

// Buckets implements budget.Store.
func (s *Store) Buckets(ctx context.Context, account string) ([]budget.Bucket, error) {
	var out []budget.Bucket
	err := s.InTx(ctx, func(rtx reconcile.Tx) error {
		rows, err := queryAll(ctx, rtx.(*txn), sqlstore.ScanBucket, "read budget of "+account,
			`SELECT `+sqlstore.BucketColumns+` FROM provider_budget WHERE account = ?1 AND updated_at <> 0 ORDER BY bucket`, account)
		out = rows
		return err
	})
	return out, err
}
