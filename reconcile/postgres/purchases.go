package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

const purchaseColumns = `id, customer, reference, amount, currency, description, payment_method,
    state, version, provider_key, provider_request, params_hash, provider_payment_id,
    first_attempt_at, uncertain_since, escalated_at, escalation_reason, settled_at, doubt,
    created_at, updated_at, client, account`

// InsertPurchase implements reconcile.Tx.
func (t *txn) InsertPurchase(ctx context.Context, p reconcile.Purchase) error {
	req, err := sqlstore.MarshalRequest[json.RawMessage](p.ProviderRequest)
	if err != nil {
		return wrap(err, "insert purchase %s", p.ID)
	}
	_, err = t.exec(ctx, `INSERT INTO purchases (`+purchaseColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)`,
		p.ID, p.Customer, sqlstore.NullString(p.Reference), p.Amount, p.Currency, p.Description, p.PaymentMethod,
		string(p.State), p.Version, sqlstore.NullString(p.ProviderKey), req, sqlstore.NullString(p.ParamsHash),
		sqlstore.NullString(p.ProviderPaymentID),
		nullTime(p.FirstAttemptAt), nullTime(p.UncertainSince), nullTime(p.EscalatedAt),
		sqlstore.NullString(string(p.EscalationReason)),
		nullTime(p.SettledAt), p.Doubt, nullTime(p.CreatedAt), nullTime(p.UpdatedAt),
		sqlstore.NullString(p.Client), p.Account)
	if err != nil {
		return wrap(err, "insert purchase %s", p.ID)
	}
	return nil
}

// GetPurchase implements reconcile.Tx.
func (t *txn) GetPurchase(ctx context.Context, id string) (reconcile.Purchase, error) {
	return queryOne(ctx, t, scanPurchase, "get purchase "+id,
		`SELECT `+purchaseColumns+` FROM purchases WHERE id = $1`, id)
}

// FindPurchaseByPaymentID implements reconcile.Tx.
func (t *txn) FindPurchaseByPaymentID(ctx context.Context, paymentID string) (reconcile.Purchase, error) {
	if paymentID == "" {
		return reconcile.Purchase{}, dialect.NotFound("find purchase by payment id: empty id")
	}
	return queryOne(ctx, t, scanPurchase, "find purchase by payment id "+paymentID,
		`SELECT `+purchaseColumns+` FROM purchases WHERE provider_payment_id = $1`, paymentID)
}

// FindPurchaseByReference implements reconcile.Tx.
func (t *txn) FindPurchaseByReference(ctx context.Context, customer, reference string) (reconcile.Purchase, error) {
	what := "find purchase of " + customer + " by reference"
	if reference == "" {
		return reconcile.Purchase{}, dialect.NotFound(what + ": empty reference")
	}
	return queryOne(ctx, t, scanPurchase, fmt.Sprintf("%s %q", what, reference),
		`SELECT `+purchaseColumns+` FROM purchases WHERE customer = $1 AND reference = $2`, customer, reference)
}

// UpdatePurchase implements reconcile.Tx.
func (t *txn) UpdatePurchase(ctx context.Context, p reconcile.Purchase, from statemachine.State) error {
	req, err := sqlstore.MarshalRequest[json.RawMessage](p.ProviderRequest)
	if err != nil {
		return wrap(err, "update purchase %s", p.ID)
	}
	n, err := t.exec(ctx, `UPDATE purchases SET
    state = $3,
    version = version + 1,
    provider_key = $5,
    provider_request = $6,
    params_hash = $7,
    provider_payment_id = $8,
    first_attempt_at = $9,
    uncertain_since = $10,
    escalated_at = $11,
    escalation_reason = $12,
    settled_at = $13,
    doubt = $14,
    updated_at = $15
WHERE id = $1 AND state = $2 AND version = $4`,
		p.ID, string(from), string(p.State), p.Version,
		sqlstore.NullString(p.ProviderKey), req, sqlstore.NullString(p.ParamsHash), sqlstore.NullString(p.ProviderPaymentID),
		nullTime(p.FirstAttemptAt), nullTime(p.UncertainSince), nullTime(p.EscalatedAt),
		sqlstore.NullString(string(p.EscalationReason)),
		nullTime(p.SettledAt), p.Doubt, nullTime(p.UpdatedAt))
	if err != nil {
		return wrap(err, "update purchase %s (%s -> %s)", p.ID, from, p.State)
	}
	if n == 1 {
		return nil
	}
	var state string
	var version int64
	err = t.tx.QueryRow(ctx, `SELECT state, version FROM purchases WHERE id = $1`, p.ID).Scan(&state, &version)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return dialect.NotFound("update purchase " + p.ID)
	case err != nil:
		return wrap(err, "update purchase %s", p.ID)
	}
	return dialect.Conflict("update purchase "+p.ID, sqlstore.ConflictDetail(statemachine.State(state), version, from, p.Version))
}

// ListEscalated implements reconcile.Tx.
func (t *txn) ListEscalated(ctx context.Context, account reconcile.AccountFilter) ([]reconcile.Purchase, error) {
	if a, ok := account.Account(); ok {
		return queryAll(ctx, t, scanPurchase, "list escalated purchases of "+reconcile.AccountLabel(a), listEscalatedAccountSQL, a)
	}
	return queryAll(ctx, t, scanPurchase, "list escalated purchases", listEscalatedSQL)
}

// listEscalatedSQL is ListEscalated's query, read from the partial index
// purchases_escalated_at_idx: the purchases on the operator list, not
// the settled ones.
const listEscalatedSQL = `SELECT ` + purchaseColumns + ` FROM purchases WHERE escalated_at IS NOT NULL ORDER BY escalated_at, id`

// listEscalatedAccountSQL is ListEscalated's query for one account
// ($1), from the same partial index: the operator list is short.
const listEscalatedAccountSQL = `SELECT ` + purchaseColumns + ` FROM purchases
WHERE escalated_at IS NOT NULL AND account = $1 ORDER BY escalated_at, id`

// CountByState implements reconcile.Tx. It reads purchase_state_counts
// (migration 00007), which triggers on purchases keep in the transaction
// of every write: the sum of a state's 16 shards, read in one snapshot,
// is the number of purchases in that state in the same snapshot. Its
// cost does not grow with the number of purchases.
func (t *txn) CountByState(ctx context.Context) (map[statemachine.State]int, error) {
	counts := sqlstore.StateCounts()
	if _, err := queryAll(ctx, t, sqlstore.ScanCounts(counts), "count purchases by state",
		countByStateSQL); err != nil {
		return nil, err
	}
	return counts, nil
}

// countByStateSQL is CountByState's query.
const countByStateSQL = `SELECT state, sum(n)::bigint FROM purchase_state_counts GROUP BY state`

// CountEscalatedByAccount implements reconcile.Tx.
func (t *txn) CountEscalatedByAccount(ctx context.Context) (map[string]int, error) {
	counts := map[string]int{}
	if _, err := queryAll(ctx, t, sqlstore.ScanCounts(counts), "count escalated purchases by account",
		countEscalatedByAccountSQL); err != nil {
		return nil, err
	}
	return counts, nil
}

// countEscalatedByAccountSQL is CountEscalatedByAccount's query, read
// from the partial index purchases_escalated_at_idx: the purchases on the
// operator list only, however many the books hold.
const countEscalatedByAccountSQL = `SELECT account, count(*) FROM purchases
WHERE escalated_at IS NOT NULL GROUP BY account`

// OldestUncertainSince implements reconcile.Tx.
func (t *txn) OldestUncertainSince(ctx context.Context) (time.Time, error) {
	var oldest *time.Time
	if err := t.tx.QueryRow(ctx, oldestUncertainSinceSQL).Scan(&oldest); err != nil {
		return time.Time{}, wrap(err, "oldest uncertain purchase")
	}
	return derefTime(oldest), nil
}

// oldestUncertainSinceSQL is OldestUncertainSince's query. The states are
// literals so that the planner can use the partial index
// purchases_uncertain_since_idx, whose first entry is the answer.
const oldestUncertainSinceSQL = `SELECT min(uncertain_since) FROM purchases
WHERE state IN ('uncertain', 'reconciling')`

// ListOverdueUncertain implements reconcile.Tx.
func (t *txn) ListOverdueUncertain(ctx context.Context, uncertainBefore time.Time, limit int) ([]reconcile.Purchase, error) {
	const what = "list overdue uncertain purchases"
	if err := dialect.CheckLimit(what, limit); err != nil {
		return nil, err
	}
	return queryAll(ctx, t, scanPurchase, what, listOverdueUncertainSQL, uncertainBefore, limit)
}

// listOverdueUncertainSQL is ListOverdueUncertain's query ($1 the time,
// $2 the limit). The partial index purchases_overdue_idx (migration
// 00007) holds exactly the purchases it may return, in its order.
const listOverdueUncertainSQL = `SELECT ` + purchaseColumns + ` FROM purchases
WHERE state = 'uncertain' AND escalated_at IS NULL AND uncertain_since < $1
ORDER BY uncertain_since, id
LIMIT $2`

// ListSubmittedBetween implements reconcile.Tx, read from the index
// purchases_first_attempt_idx (migration 00004).
func (t *txn) ListSubmittedBetween(ctx context.Context, from, until time.Time, state statemachine.State, listed []string) ([]reconcile.Purchase, error) {
	what := fmt.Sprintf("list %s purchases submitted in [%s, %s)", state, sqlstore.Stamp(from), sqlstore.Stamp(until))
	if listed == nil {
		listed = []string{}
	}
	return queryAll(ctx, t, scanPurchase, what, listSubmittedBetweenSQL, string(state), from, until, listed)
}

// listSubmittedBetweenSQL is ListSubmittedBetween's query ($1 the state,
// [$2, $3) the window, $4 the payment ids to leave out).
// The listed ids are anti-joined as a hashed set: a comparison with
// each, row by row, costs milliseconds over a busy window.
const listSubmittedBetweenSQL = `SELECT ` + purchaseColumns + ` FROM purchases AS p
WHERE state = $1 AND first_attempt_at >= $2 AND first_attempt_at < $3
  AND NOT EXISTS (SELECT FROM unnest($4::text[]) AS l(id) WHERE l.id = p.provider_payment_id)
ORDER BY first_attempt_at, id`

// ListSucceededWithoutPayment implements reconcile.Tx, read from the
// partial index purchases_succeeded_no_payment_idx (migration 00015).
func (t *txn) ListSucceededWithoutPayment(ctx context.Context, from, until time.Time) ([]reconcile.Purchase, error) {
	what := fmt.Sprintf("list succeeded purchases without payment settled in [%s, %s)", sqlstore.Stamp(from), sqlstore.Stamp(until))
	return queryAll(ctx, t, scanPurchase, what, listSucceededWithoutPaymentSQL, from, until)
}

// listSucceededWithoutPaymentSQL is ListSucceededWithoutPayment's query
// ([$1, $2) the window of settlement times).
const listSucceededWithoutPaymentSQL = `SELECT ` + purchaseColumns + ` FROM purchases
WHERE state = 'succeeded' AND provider_payment_id IS NULL AND settled_at >= $1 AND settled_at < $2
ORDER BY settled_at, id`

// scanPurchase reads one row of purchaseColumns.
func scanPurchase(row sqlstore.Row) (reconcile.Purchase, error) {
	var p reconcile.Purchase
	var (
		reference, providerKey, paramsHash, paymentID, reason, client *string
		state                                                         string
		req                                                           []byte
		firstAttempt, uncertain, escalated, settled                   *time.Time
	)
	err := row.Scan(&p.ID, &p.Customer, &reference, &p.Amount, &p.Currency, &p.Description, &p.PaymentMethod,
		&state, &p.Version, &providerKey, &req, &paramsHash, &paymentID,
		&firstAttempt, &uncertain, &escalated, &reason, &settled, &p.Doubt, &p.CreatedAt, &p.UpdatedAt, &client, &p.Account)
	if err != nil {
		return reconcile.Purchase{}, err
	}
	p.State = statemachine.State(state)
	p.Reference = sqlstore.DerefString(reference)
	p.Client = sqlstore.DerefString(client)
	p.ProviderKey = sqlstore.DerefString(providerKey)
	p.ParamsHash = sqlstore.DerefString(paramsHash)
	p.ProviderPaymentID = sqlstore.DerefString(paymentID)
	p.EscalationReason = reconcile.EscalationReason(sqlstore.DerefString(reason))
	p.FirstAttemptAt = derefTime(firstAttempt)
	p.UncertainSince = derefTime(uncertain)
	p.EscalatedAt = derefTime(escalated)
	p.SettledAt = derefTime(settled)
	p.CreatedAt = p.CreatedAt.UTC()
	p.UpdatedAt = p.UpdatedAt.UTC()
	p.ProviderRequest, err = sqlstore.UnmarshalRequest(p.ID, req)
	if err != nil {
		return reconcile.Purchase{}, err
	}
	return p, nil
}
