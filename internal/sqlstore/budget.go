package sqlstore

import (
	"time"

	"github.com/payrecon/payrecon/reconcile/budget"
)

// BucketColumns are provider_budget's columns as ScanBucket reads them and
// BucketArgs writes them, after account.
const BucketColumns = `bucket, tokens, rate, updated_at, blocked_until, demand_1, demand_2, demand_3, demand_4, credit, throttled`

// micros is t in microseconds since the Unix epoch, 0 for the zero time.
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// unmicros is micros's inverse.
func unmicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// ScanBucket reads one provider_budget row, in BucketColumns' order.
func ScanBucket(row Row) (budget.Bucket, error) {
	var (
		b                budget.Bucket
		updated, blocked int64
		d1, d2, d3, d4   int64
	)
	if err := row.Scan(&b.Name, &b.Tokens, &b.Rate, &updated, &blocked, &d1, &d2, &d3, &d4, &b.Credit, &b.Throttled); err != nil {
		return budget.Bucket{}, err
	}
	// A row with updated_at 0 is a placeholder, inserted only to be locked.
	b.Stored = updated != 0
	b.UpdatedAt, b.BlockedUntil = unmicros(updated), unmicros(blocked)
	b.Demand = [4]time.Time{unmicros(d1), unmicros(d2), unmicros(d3), unmicros(d4)}
	return b, nil
}

// BucketArgs are b's values in BucketColumns' order.
func BucketArgs(b *budget.Bucket) []any {
	return []any{b.Name, b.Tokens, b.Rate, micros(b.UpdatedAt), micros(b.BlockedUntil),
		micros(b.Demand[0]), micros(b.Demand[1]), micros(b.Demand[2]), micros(b.Demand[3]), b.Credit, b.Throttled}
}

// BucketUpsert is the statement that stores a bucket of account ($1), its
// values ($2 on) in BucketColumns' order. SQLite speaks it with ? for $.
const BucketUpsert = `INSERT INTO provider_budget (account, ` + BucketColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (account, bucket) DO UPDATE SET
    tokens = excluded.tokens, rate = excluded.rate, updated_at = excluded.updated_at,
    blocked_until = excluded.blocked_until, demand_1 = excluded.demand_1, demand_2 = excluded.demand_2,
    demand_3 = excluded.demand_3, demand_4 = excluded.demand_4, credit = excluded.credit,
    throttled = excluded.throttled`

// BucketsByName orders rows as names lists them, giving a zero Bucket
// (Stored false) named for each name no row has.
func BucketsByName(names []string, rows []budget.Bucket) []*budget.Bucket {
	by := make(map[string]budget.Bucket, len(rows))
	for _, r := range rows {
		by[r.Name] = r
	}
	out := make([]*budget.Bucket, len(names))
	for i, n := range names {
		b, ok := by[n]
		if !ok {
			b = budget.Bucket{Name: n}
		}
		out[i] = &b
	}
	return out
}
