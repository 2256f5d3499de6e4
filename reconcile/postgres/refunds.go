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

// Refunds (migration 00009): their own process, with their own guard,
// and the limits the database holds them to.

const refundColumns = `id, purchase_id, payment_id, finding_id, amount, currency, reason, client, requested_by,
    state, version, provider_key, provider_request, params_hash, provider_refund_id, failure_reason,
    first_attempt_at, uncertain_since, escalated_at, escalation_reason, settled_at, created_at, updated_at`

// InsertRefund implements reconcile.Tx; the database's constraints and
// triggers make the refusals. The limits' trigger takes a
// transaction-level lock on the payment first: a concurrent insert of a
// refund of the same payment waits for this transaction to end, then
// judges with this refund counted if it committed.
func (t *txn) InsertRefund(ctx context.Context, r reconcile.Refund) error {
	what := fmt.Sprintf("insert refund %s of %s", r.ID, r.PurchaseID)
	req, err := sqlstore.MarshalRequest[json.RawMessage](r.ProviderRequest)
	if err != nil {
		return wrap(err, "%s", what)
	}
	_, err = t.exec(ctx, `INSERT INTO refunds (`+refundColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)`,
		r.ID, r.PurchaseID, r.PaymentID, nullID(r.FindingID), r.Amount, r.Currency, r.Reason,
		sqlstore.NullString(r.Client), r.RequestedBy,
		string(r.State), r.Version, sqlstore.NullString(r.ProviderKey), req, sqlstore.NullString(r.ParamsHash),
		sqlstore.NullString(r.ProviderRefundID), r.FailureReason,
		nullTime(r.FirstAttemptAt), nullTime(r.UncertainSince), nullTime(r.EscalatedAt),
		sqlstore.NullString(string(r.EscalationReason)), nullTime(r.SettledAt),
		nullTime(r.CreatedAt), nullTime(r.UpdatedAt))
	if err != nil {
		return wrapRef(err, "%s", what)
	}
	return nil
}

// GetRefund implements reconcile.Tx.
func (t *txn) GetRefund(ctx context.Context, id string) (reconcile.Refund, error) {
	return queryOne(ctx, t, scanRefund, "get refund "+id,
		`SELECT `+refundColumns+` FROM refunds WHERE id = $1`, id)
}

// ListRefunds implements reconcile.Tx, from refunds_purchase_idx.
func (t *txn) ListRefunds(ctx context.Context, purchaseID string) ([]reconcile.Refund, error) {
	return queryAll(ctx, t, scanRefund, "list refunds of "+purchaseID,
		`SELECT `+refundColumns+` FROM refunds WHERE purchase_id = $1 ORDER BY created_at, id`, purchaseID)
}

// FindRefunds implements reconcile.Tx, in one statement.
func (t *txn) FindRefunds(ctx context.Context, ids, providerIDs []string) ([]reconcile.Refund, error) {
	ids, providerIDs = sqlstore.NonEmpty(ids), sqlstore.NonEmpty(providerIDs)
	if len(ids) == 0 && len(providerIDs) == 0 {
		return nil, nil
	}
	return queryAll(ctx, t, scanRefund, fmt.Sprintf("find %d refunds", len(ids)+len(providerIDs)),
		`SELECT `+refundColumns+` FROM refunds WHERE id = ANY($1) OR provider_refund_id = ANY($2)`,
		ids, providerIDs)
}

// UpdateRefund implements reconcile.Tx. The database refuses a change of
// the amount, payment, purchase or finding.
func (t *txn) UpdateRefund(ctx context.Context, r reconcile.Refund, from statemachine.State) error {
	n, err := t.exec(ctx, `UPDATE refunds SET
    state = $3,
    version = version + 1,
    provider_refund_id = $5,
    failure_reason = $6,
    first_attempt_at = $7,
    uncertain_since = $8,
    escalated_at = $9,
    escalation_reason = $10,
    settled_at = $11,
    updated_at = $12
WHERE id = $1 AND state = $2 AND version = $4`,
		r.ID, string(from), string(r.State), r.Version,
		sqlstore.NullString(r.ProviderRefundID), r.FailureReason,
		nullTime(r.FirstAttemptAt), nullTime(r.UncertainSince), nullTime(r.EscalatedAt),
		sqlstore.NullString(string(r.EscalationReason)), nullTime(r.SettledAt), nullTime(r.UpdatedAt))
	if err != nil {
		return wrap(err, "update refund %s (%s -> %s)", r.ID, from, r.State)
	}
	if n == 1 {
		return nil
	}
	var state string
	var version int64
	err = t.tx.QueryRow(ctx, `SELECT state, version FROM refunds WHERE id = $1`, r.ID).Scan(&state, &version)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return dialect.NotFound("update refund " + r.ID)
	case err != nil:
		return wrap(err, "update refund %s", r.ID)
	}
	return dialect.Conflict("update refund "+r.ID, sqlstore.ConflictDetail(statemachine.State(state), version, from, r.Version))
}

// ListEscalatedRefunds implements reconcile.Tx.
func (t *txn) ListEscalatedRefunds(ctx context.Context, account reconcile.AccountFilter) ([]reconcile.Refund, error) {
	if a, ok := account.Account(); ok {
		return queryAll(ctx, t, scanRefund, "list escalated refunds of "+reconcile.AccountLabel(a), listEscalatedRefundsAccountSQL, a)
	}
	return queryAll(ctx, t, scanRefund, "list escalated refunds", listEscalatedRefundsSQL)
}

// listEscalatedRefundsSQL is ListEscalatedRefunds' query, read from the
// partial index refunds_escalated_at_idx in its order.
const listEscalatedRefundsSQL = `SELECT ` + refundColumns + ` FROM refunds WHERE escalated_at IS NOT NULL ORDER BY escalated_at, id`

// listEscalatedRefundsAccountSQL is ListEscalatedRefunds' query for the
// refunds of purchases of one account ($1), from the same partial index,
// each row's purchase probed by its key.
var listEscalatedRefundsAccountSQL = `SELECT ` + refundColumns + ` FROM refunds
WHERE escalated_at IS NOT NULL AND ` + sqlstore.PurchaseOfAccount("refunds.purchase_id", "$1") + `
ORDER BY escalated_at, id`

// ListOverdueUncertainRefunds implements reconcile.Tx.
func (t *txn) ListOverdueUncertainRefunds(ctx context.Context, uncertainBefore time.Time, limit int) ([]reconcile.Refund, error) {
	const what = "list overdue uncertain refunds"
	if err := dialect.CheckLimit(what, limit); err != nil {
		return nil, err
	}
	return queryAll(ctx, t, scanRefund, what, listOverdueUncertainRefundsSQL, uncertainBefore, limit)
}

// listOverdueUncertainRefundsSQL is ListOverdueUncertainRefunds' query
// ($1 the time, $2 the limit). The partial index refunds_overdue_idx
// holds exactly the refunds it may return, in its order.
const listOverdueUncertainRefundsSQL = `SELECT ` + refundColumns + ` FROM refunds
WHERE state = 'uncertain' AND escalated_at IS NULL AND uncertain_since < $1
ORDER BY uncertain_since, id
LIMIT $2`

// CountRefundsByState implements reconcile.Tx. It counts
// refunds_state_idx.
func (t *txn) CountRefundsByState(ctx context.Context) (map[statemachine.State]int, error) {
	counts := sqlstore.RefundStateCounts()
	if _, err := queryAll(ctx, t, sqlstore.ScanCounts(counts), "count refunds by state",
		countRefundsByStateSQL); err != nil {
		return nil, err
	}
	return counts, nil
}

// countRefundsByStateSQL is CountRefundsByState's query.
const countRefundsByStateSQL = `SELECT state, count(*) FROM refunds GROUP BY state`

// OldestUncertainRefundSince implements reconcile.Tx.
func (t *txn) OldestUncertainRefundSince(ctx context.Context) (time.Time, error) {
	var oldest *time.Time
	if err := t.tx.QueryRow(ctx, oldestUncertainRefundSinceSQL).Scan(&oldest); err != nil {
		return time.Time{}, wrap(err, "oldest uncertain refund")
	}
	return derefTime(oldest), nil
}

// oldestUncertainRefundSinceSQL is OldestUncertainRefundSince's query.
// The states are literals so that the planner can use the partial index
// refunds_uncertain_since_idx, whose first entry is the answer.
const oldestUncertainRefundSinceSQL = `SELECT min(uncertain_since) FROM refunds
WHERE state IN ('uncertain', 'reconciling')`

// refundScan holds the destinations of one row of refundColumns, every
// one of them nullable, so that a claim's LEFT JOIN reads a purchase's
// job (no refund) with the same scan.
type refundScan struct {
	id, purchaseID, paymentID, currency, reason, client, requestedBy *string
	state, providerKey, paramsHash, providerRefundID, failureReason  *string
	escalationReason                                                 *string
	findingID, amount, version                                       *int64
	req                                                              []byte
	firstAttempt, uncertain, escalated, settled, created, updated    *time.Time
}

// dests returns the destinations in the order of refundColumns.
func (s *refundScan) dests() []any {
	return []any{&s.id, &s.purchaseID, &s.paymentID, &s.findingID, &s.amount, &s.currency, &s.reason, &s.client, &s.requestedBy,
		&s.state, &s.version, &s.providerKey, &s.req, &s.paramsHash, &s.providerRefundID, &s.failureReason,
		&s.firstAttempt, &s.uncertain, &s.escalated, &s.escalationReason, &s.settled, &s.created, &s.updated}
}

// refund returns the refund scanned, or nil when the row had none (its
// id is NULL).
func (s *refundScan) refund() (*reconcile.Refund, error) {
	if s.id == nil {
		return nil, nil
	}
	d := sqlstore.DerefString
	r := &reconcile.Refund{
		ID:               *s.id,
		PurchaseID:       d(s.purchaseID),
		PaymentID:        d(s.paymentID),
		Currency:         d(s.currency),
		Reason:           d(s.reason),
		Client:           d(s.client),
		RequestedBy:      d(s.requestedBy),
		State:            statemachine.State(d(s.state)),
		ProviderKey:      d(s.providerKey),
		ParamsHash:       d(s.paramsHash),
		ProviderRefundID: d(s.providerRefundID),
		FailureReason:    d(s.failureReason),
		EscalationReason: reconcile.EscalationReason(d(s.escalationReason)),
		FirstAttemptAt:   derefTime(s.firstAttempt),
		UncertainSince:   derefTime(s.uncertain),
		EscalatedAt:      derefTime(s.escalated),
		SettledAt:        derefTime(s.settled),
		CreatedAt:        derefTime(s.created),
		UpdatedAt:        derefTime(s.updated),
	}
	if s.findingID != nil {
		r.FindingID = *s.findingID
	}
	if s.amount != nil {
		r.Amount = *s.amount
	}
	if s.version != nil {
		r.Version = *s.version
	}
	var err error
	r.ProviderRequest, err = sqlstore.UnmarshalRefundRequest(r.ID, s.req)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// scanRefund reads one row of refundColumns.
func scanRefund(row sqlstore.Row) (reconcile.Refund, error) {
	var s refundScan
	if err := row.Scan(s.dests()...); err != nil {
		return reconcile.Refund{}, err
	}
	r, err := s.refund()
	if err != nil {
		return reconcile.Refund{}, err
	}
	if r == nil {
		return reconcile.Refund{}, errors.New("a refund row with a NULL id")
	}
	return *r, nil
}

// nullID maps the zero id (none) to NULL.
func nullID(id int64) any {
	if id == 0 {
		return nil
	}
	return id
}
