package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// Refunds (migration 00008): their own process, with their own guard,
// and the limits the database holds them to.

const refundColumns = `id, purchase_id, payment_id, finding_id, amount, currency, reason, client, requested_by,
    state, version, provider_key, provider_request, params_hash, provider_refund_id, failure_reason,
    first_attempt_at, uncertain_since, escalated_at, escalation_reason, settled_at, created_at, updated_at`

// InsertRefund implements reconcile.Tx; the database's constraints and
// triggers make the refusals. The insert's trigger reads the payment's
// refunds under the write lock this transaction holds since BEGIN
// IMMEDIATE: no other insert comes between that read and the commit.
func (t *txn) InsertRefund(ctx context.Context, r reconcile.Refund) error {
	what := fmt.Sprintf("insert refund %s of %s", r.ID, r.PurchaseID)
	req, err := sqlstore.MarshalRequest[string](r.ProviderRequest)
	if err != nil {
		return wrap(err, "%s", what)
	}
	_, err = t.exec(ctx, `INSERT INTO refunds (`+refundColumns+`)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23)`,
		r.ID, r.PurchaseID, r.PaymentID, nullID(r.FindingID), r.Amount, r.Currency, r.Reason,
		sqlstore.NullString(r.Client), r.RequestedBy,
		string(r.State), r.Version, sqlstore.NullString(r.ProviderKey), req, sqlstore.NullString(r.ParamsHash),
		sqlstore.NullString(r.ProviderRefundID), r.FailureReason,
		micros(r.FirstAttemptAt), micros(r.UncertainSince), micros(r.EscalatedAt),
		sqlstore.NullString(string(r.EscalationReason)), micros(r.SettledAt),
		micros(r.CreatedAt), micros(r.UpdatedAt))
	if err != nil {
		// The purchase is the refunds' only foreign key.
		return wrapRef(err, "%s", what)
	}
	return nil
}

// GetRefund implements reconcile.Tx.
func (t *txn) GetRefund(ctx context.Context, id string) (reconcile.Refund, error) {
	return queryOne(ctx, t, scanRefund, "get refund "+id,
		`SELECT `+refundColumns+` FROM refunds WHERE id = ?1`, id)
}

// ListRefunds implements reconcile.Tx, from refunds_purchase_idx.
func (t *txn) ListRefunds(ctx context.Context, purchaseID string) ([]reconcile.Refund, error) {
	return queryAll(ctx, t, scanRefund, "list refunds of "+purchaseID,
		`SELECT `+refundColumns+` FROM refunds WHERE purchase_id = ?1 ORDER BY created_at, id`, purchaseID)
}

// FindRefunds implements reconcile.Tx, in one statement.
func (t *txn) FindRefunds(ctx context.Context, ids, providerIDs []string) ([]reconcile.Refund, error) {
	ids, providerIDs = sqlstore.NonEmpty(ids), sqlstore.NonEmpty(providerIDs)
	if len(ids) == 0 && len(providerIDs) == 0 {
		return nil, nil
	}
	what := fmt.Sprintf("find %d refunds", len(ids)+len(providerIDs))
	idList, err := json.Marshal(ids)
	if err != nil {
		return nil, wrap(err, "%s", what)
	}
	providerList, err := json.Marshal(providerIDs)
	if err != nil {
		return nil, wrap(err, "%s", what)
	}
	return queryAll(ctx, t, scanRefund, what, `SELECT `+refundColumns+` FROM refunds
WHERE id IN (SELECT value FROM json_each(?1))
   OR provider_refund_id IN (SELECT value FROM json_each(?2))`, string(idList), string(providerList))
}

// UpdateRefund implements reconcile.Tx. The database refuses a change of
// the amount, payment, purchase or finding.
func (t *txn) UpdateRefund(ctx context.Context, r reconcile.Refund, from statemachine.State) error {
	n, err := t.exec(ctx, `UPDATE refunds SET
    state = ?3,
    version = version + 1,
    provider_refund_id = ?5,
    failure_reason = ?6,
    first_attempt_at = ?7,
    uncertain_since = ?8,
    escalated_at = ?9,
    escalation_reason = ?10,
    settled_at = ?11,
    updated_at = ?12
WHERE id = ?1 AND state = ?2 AND version = ?4`,
		r.ID, string(from), string(r.State), r.Version,
		sqlstore.NullString(r.ProviderRefundID), r.FailureReason,
		micros(r.FirstAttemptAt), micros(r.UncertainSince), micros(r.EscalatedAt),
		sqlstore.NullString(string(r.EscalationReason)), micros(r.SettledAt), micros(r.UpdatedAt))
	if err != nil {
		return wrap(err, "update refund %s (%s -> %s)", r.ID, from, r.State)
	}
	if n == 1 {
		return nil
	}
	var state string
	var version int64
	err = t.tx.QueryRowContext(ctx, `SELECT state, version FROM refunds WHERE id = ?1`, r.ID).Scan(&state, &version)
	switch {
	case errors.Is(err, sql.ErrNoRows):
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
// partial index refunds_escalated_at_idx in its order. Without
// statistics SQLite's planner would rather read refunds_state_idx (as it
// did purchases_state_idx, which 00007 dropped); INDEXED BY holds it to
// the partial index (and fails the query, rather than scan, should the
// index go).
const listEscalatedRefundsSQL = `SELECT ` + refundColumns + ` FROM refunds INDEXED BY refunds_escalated_at_idx
WHERE escalated_at IS NOT NULL ORDER BY escalated_at, id`

// listEscalatedRefundsAccountSQL is ListEscalatedRefunds' query for the
// refunds of purchases of one account (?1), from the same partial index,
// each row's purchase probed by its key.
var listEscalatedRefundsAccountSQL = `SELECT ` + refundColumns + ` FROM refunds INDEXED BY refunds_escalated_at_idx
WHERE escalated_at IS NOT NULL AND ` + sqlstore.PurchaseOfAccount("refunds.purchase_id", "?1") + `
ORDER BY escalated_at, id`

// ListOverdueUncertainRefunds implements reconcile.Tx.
func (t *txn) ListOverdueUncertainRefunds(ctx context.Context, uncertainBefore time.Time, limit int) ([]reconcile.Refund, error) {
	const what = "list overdue uncertain refunds"
	if err := dialect.CheckLimit(what, limit); err != nil {
		return nil, err
	}
	return queryAll(ctx, t, scanRefund, what, listOverdueUncertainRefundsSQL, uncertainBefore.UnixMicro(), limit)
}

// listOverdueUncertainRefundsSQL is ListOverdueUncertainRefunds' query
// (?1 the time, ?2 the limit). The partial index refunds_overdue_idx
// holds exactly the refunds it may return, in its order; INDEXED BY
// holds the planner to it (see listEscalatedRefundsSQL).
const listOverdueUncertainRefundsSQL = `SELECT ` + refundColumns + ` FROM refunds INDEXED BY refunds_overdue_idx
WHERE state = 'uncertain' AND escalated_at IS NULL AND uncertain_since < ?1
ORDER BY uncertain_since, id
LIMIT ?2`

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
	var oldest *int64
	if err := t.tx.QueryRowContext(ctx, oldestUncertainRefundSinceSQL).Scan(&oldest); err != nil {
		return time.Time{}, wrap(err, "oldest uncertain refund")
	}
	return fromNullMicros(oldest), nil
}

// oldestUncertainRefundSinceSQL is OldestUncertainRefundSince's query.
// The states are literals so that the planner can use the partial index
// refunds_uncertain_since_idx, and INDEXED BY holds it to it (see
// listEscalatedRefundsSQL).
const oldestUncertainRefundSinceSQL = `SELECT min(uncertain_since) FROM refunds INDEXED BY refunds_uncertain_since_idx
WHERE state IN ('uncertain', 'reconciling')`

// scanRefund reads one row of refundColumns.
func scanRefund(row sqlstore.Row) (reconcile.Refund, error) {
	var r reconcile.Refund
	var (
		findingID, firstAttempt, uncertain, escalated, settled *int64
		client, providerRefundID, reason                       *string
		state                                                  string
		req                                                    []byte
		created, updated                                       int64
	)
	err := row.Scan(&r.ID, &r.PurchaseID, &r.PaymentID, &findingID, &r.Amount, &r.Currency, &r.Reason, &client, &r.RequestedBy,
		&state, &r.Version, &r.ProviderKey, &req, &r.ParamsHash, &providerRefundID, &r.FailureReason,
		&firstAttempt, &uncertain, &escalated, &reason, &settled, &created, &updated)
	if err != nil {
		return reconcile.Refund{}, err
	}
	if findingID != nil {
		r.FindingID = *findingID
	}
	r.State = statemachine.State(state)
	r.Client = sqlstore.DerefString(client)
	r.ProviderRefundID = sqlstore.DerefString(providerRefundID)
	r.EscalationReason = reconcile.EscalationReason(sqlstore.DerefString(reason))
	r.FirstAttemptAt = fromNullMicros(firstAttempt)
	r.UncertainSince = fromNullMicros(uncertain)
	r.EscalatedAt = fromNullMicros(escalated)
	r.SettledAt = fromNullMicros(settled)
	r.CreatedAt = fromMicros(created)
	r.UpdatedAt = fromMicros(updated)
	r.ProviderRequest, err = sqlstore.UnmarshalRefundRequest(r.ID, req)
	if err != nil {
		return reconcile.Refund{}, err
	}
	return r, nil
}

// nullID maps the zero id (none) to NULL.
func nullID(id int64) any {
	if id == 0 {
		return nil
	}
	return id
}
