package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

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
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (client, key) DO NOTHING`,
		k.Client, k.Key, k.RequestHash, k.StatusCode, sqlstore.NullBytes(k.Response), sqlstore.NullString(k.PurchaseID), nullTime(k.CreatedAt))
	if err != nil {
		return false, wrap(err, "insert idempotency key %q of %q", k.Key, k.Client)
	}
	return n == 1, nil
}

// GetIdempotencyKey implements reconcile.Tx.
func (t *txn) GetIdempotencyKey(ctx context.Context, client, key string) (reconcile.IdempotencyKey, error) {
	return queryOne(ctx, t, scanIdempotencyKey, fmt.Sprintf("get idempotency key %q of %q", key, client),
		`SELECT `+idempotencyColumns+` FROM idempotency_keys WHERE client = $1 AND key = $2`, client, key)
}

// SaveIdempotencyResponse implements reconcile.Tx.
func (t *txn) SaveIdempotencyResponse(ctx context.Context, client, key string, statusCode int, body []byte, purchaseID string) error {
	return t.execOne(ctx, fmt.Sprintf("save response of idempotency key %q of %q", key, client),
		`UPDATE idempotency_keys SET status_code = $3, response = $4, purchase_id = $5
WHERE client = $1 AND key = $2`, client, key, statusCode, sqlstore.NullBytes(body), sqlstore.NullString(purchaseID))
}

// DeleteIdempotencyKeysBefore implements reconcile.Tx.
func (t *txn) DeleteIdempotencyKeysBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := dialect.CheckLimit("delete idempotency keys", limit); err != nil {
		return 0, err
	}
	n, err := t.exec(ctx, `DELETE FROM idempotency_keys
WHERE (client, key) IN (
    SELECT client, key FROM idempotency_keys
    WHERE created_at < $1
    ORDER BY created_at
    LIMIT $2
)`, before, limit)
	if err != nil {
		return 0, wrap(err, "delete idempotency keys created before %s", sqlstore.Stamp(before))
	}
	return int(n), nil
}

// scanIdempotencyKey reads one row of idempotencyColumns.
func scanIdempotencyKey(row sqlstore.Row) (reconcile.IdempotencyKey, error) {
	var k reconcile.IdempotencyKey
	var purchaseID *string
	err := row.Scan(&k.Client, &k.Key, &k.RequestHash, &k.StatusCode, &k.Response, &purchaseID, &k.CreatedAt)
	if err != nil {
		return reconcile.IdempotencyKey{}, err
	}
	k.Response = sqlstore.NilIfEmpty(k.Response)
	k.PurchaseID = sqlstore.DerefString(purchaseID)
	k.CreatedAt = k.CreatedAt.UTC()
	return k, nil
}

var _ reconcile.KeyedPurchaseInserter = (*txn)(nil)

// insertKeyedPurchasesSQL is InsertKeyedPurchases' one statement: the
// keys, with ON CONFLICT DO NOTHING, then the purchases and jobs of the
// keys inserted (chained on the keys' RETURNING rows), and the ordinals of
// the inputs whose key was inserted. Foreign keys are checked at the end
// of the statement, so a job may refer to a purchase inserted by it.
const insertKeyedPurchasesSQL = `WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::bytea[], $6::timestamptz[],
        $7::text[], $8::text[], $9::text[], $10::bigint[], $11::text[], $12::text[], $13::text[],
        $14::text[], $15::bigint[], $16::timestamptz[], $17::timestamptz[], $18::text[])
        WITH ORDINALITY AS i(client, key, request_hash, status_code, response, key_created_at,
            id, customer, reference, amount, currency, description, payment_method,
            state, version, created_at, updated_at, account, n)
),
keys AS (
    INSERT INTO idempotency_keys (` + idempotencyColumns + `)
    SELECT client, key, request_hash, status_code, NULLIF(response, ''::bytea), NULLIF(id, ''), key_created_at
    FROM input ORDER BY n
    ON CONFLICT (client, key) DO NOTHING
    RETURNING client, key
),
created AS (
    INSERT INTO purchases (id, customer, reference, amount, currency, description, payment_method,
        state, version, doubt, created_at, updated_at, client, account)
    SELECT i.id, i.customer, NULLIF(i.reference, ''), i.amount, i.currency, i.description, i.payment_method,
        i.state, i.version, '', i.created_at, i.updated_at, NULLIF(i.client, ''), i.account
    FROM input i JOIN keys k ON k.client = i.client AND k.key = i.key
    ORDER BY i.n
    RETURNING id, created_at, account
),
jobs AS (
    INSERT INTO jobs (kind, purchase_id, refund_id, run_at, account)
    SELECT 'purchase', id, NULL, created_at, account FROM created
)
SELECT i.n FROM input i JOIN keys k ON k.client = i.client AND k.key = i.key`

// InsertKeyedPurchases implements reconcile.KeyedPurchaseInserter in one
// statement (insertKeyedPurchasesSQL), under a savepoint as exec's
// writes are, so that a refusal (a reference the customer used: the
// unique index fails the statement as a whole) leaves nothing written
// and the transaction usable. The keys are inserted in (client, key)
// order, so that two groups that hold a key each of the other's wait for
// each other in one order rather than deadlock.
func (t *txn) InsertKeyedPurchases(ctx context.Context, items []reconcile.KeyedPurchase) ([]bool, error) {
	what := fmt.Sprintf("insert %d keyed purchases", len(items))
	if err := dialect.CheckKeyedPurchases(what, items); err != nil {
		return nil, err
	}
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ka, kb := items[a].Key, items[b].Key
		return cmp.Or(cmp.Compare(ka.Client, kb.Client), cmp.Compare(ka.Key, kb.Key))
	})
	n := len(items)
	var (
		clients, keys, hashes, ids, customers, refs, currencies = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		descriptions, methods, states, accounts                 = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		statuses                                                = make([]int32, n)
		responses                                               = make([][]byte, n)
		amounts, versions                                       = make([]int64, n), make([]int64, n)
		keyTimes, created, updated                              = make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
	)
	for j, i := range order {
		k, p := items[i].Key, items[i].Purchase
		clients[j], keys[j], hashes[j], statuses[j], responses[j], keyTimes[j] = k.Client, k.Key, k.RequestHash, int32(k.StatusCode), k.Response, k.CreatedAt
		ids[j], customers[j], refs[j], amounts[j], currencies[j] = p.ID, p.Customer, p.Reference, p.Amount, p.Currency
		descriptions[j], methods[j], states[j], versions[j], accounts[j] = p.Description, p.PaymentMethod, string(p.State), p.Version, p.Account
		created[j], updated[j] = p.CreatedAt, p.UpdatedAt
	}
	ns, err := t.queryInts(ctx, insertKeyedPurchasesSQL,
		clients, keys, hashes, statuses, responses, keyTimes,
		ids, customers, refs, amounts, currencies, descriptions, methods,
		states, versions, created, updated, accounts)
	if err != nil {
		return nil, wrapRef(err, "%s", what)
	}
	inserted := make([]bool, n)
	for _, ord := range ns {
		inserted[order[ord-1]] = true
	}
	return inserted, nil
}

// queryInts runs a query of one bigint column under a savepoint, as exec
// runs a write: one round trip when it succeeds, and when it fails the
// transaction rolled back to the savepoint and usable.
func (t *txn) queryInts(ctx context.Context, query string, args ...any) ([]int64, error) {
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT payrecon_write")
	b.Queue(query, args...)
	b.Queue("RELEASE SAVEPOINT payrecon_write")
	br := t.tx.SendBatch(ctx, b)
	var out []int64
	_, err := br.Exec()
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			out, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		return out, nil
	}
	if _, rerr := t.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT payrecon_write; RELEASE SAVEPOINT payrecon_write"); rerr != nil {
		return nil, errors.Join(err, fmt.Errorf("roll back to savepoint: %w", rerr))
	}
	return nil, err
}
