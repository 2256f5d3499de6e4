package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// txn is the reconcile.Tx of one pgx transaction.
type txn struct {
	tx  pgx.Tx
	now func() time.Time // the store's Config.Now; nil for the server's clock
}

var _ reconcile.Tx = (*txn)(nil)

// exec runs one write under a savepoint, in a single round trip when it
// succeeds. When it fails the transaction is rolled back to the
// savepoint, so it stays usable (PostgreSQL otherwise aborts the whole
// transaction on the first error).
func (t *txn) exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT payrecon_write")
	b.Queue(query, args...)
	b.Queue("RELEASE SAVEPOINT payrecon_write")
	br := t.tx.SendBatch(ctx, b)
	var tag pgconn.CommandTag
	_, err := br.Exec()
	if err == nil {
		tag, err = br.Exec()
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		return tag, nil
	}
	if _, rerr := t.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT payrecon_write; RELEASE SAVEPOINT payrecon_write"); rerr != nil {
		return tag, errors.Join(err, fmt.Errorf("roll back to savepoint: %w", rerr))
	}
	return tag, err
}

// Now implements reconcile.Tx: the injected clock (Config.Now), else the
// server's statement_timestamp() of this statement (not the
// transaction's start), to the microsecond, in UTC.
func (t *txn) Now(ctx context.Context) (time.Time, error) {
	return storeNow(ctx, t.now, t.tx.QueryRow)
}

const purchaseColumns = `id, customer, reference, amount, currency, description, payment_method,
    state, version, provider_key, provider_request, params_hash, provider_payment_id,
    first_attempt_at, uncertain_since, escalated_at, escalation_reason, settled_at, doubt,
    created_at, updated_at`

// InsertPurchase implements reconcile.Tx. The database refuses a purchase
// whose state is not created (reconcile.ErrForbiddenTransition) and one
// with a non-positive amount or a zero CreatedAt or UpdatedAt
// (reconcile.ErrInvalid).
func (t *txn) InsertPurchase(ctx context.Context, p reconcile.Purchase) error {
	req, err := marshalRequest(p.ProviderRequest)
	if err != nil {
		return fmt.Errorf("postgres: insert purchase %s: %w", p.ID, err)
	}
	_, err = t.exec(ctx, `INSERT INTO purchases (`+purchaseColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)`,
		p.ID, p.Customer, nullString(p.Reference), p.Amount, p.Currency, p.Description, p.PaymentMethod,
		string(p.State), p.Version, nullString(p.ProviderKey), req, nullString(p.ParamsHash), nullString(p.ProviderPaymentID),
		nullTime(p.FirstAttemptAt), nullTime(p.UncertainSince), nullTime(p.EscalatedAt), nullString(string(p.EscalationReason)),
		nullTime(p.SettledAt), p.Doubt, nullTime(p.CreatedAt), nullTime(p.UpdatedAt))
	if err != nil {
		return wrap(err, "insert purchase %s", p.ID)
	}
	return nil
}

// GetPurchase implements reconcile.Tx.
func (t *txn) GetPurchase(ctx context.Context, id string) (reconcile.Purchase, error) {
	p, err := scanPurchase(t.tx.QueryRow(ctx, `SELECT `+purchaseColumns+` FROM purchases WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return reconcile.Purchase{}, fmt.Errorf("postgres: get purchase %s: %w", id, reconcile.ErrNotFound)
	}
	if err != nil {
		return reconcile.Purchase{}, wrap(err, "get purchase %s", id)
	}
	return p, nil
}

// FindPurchaseByPaymentID implements reconcile.Tx.
func (t *txn) FindPurchaseByPaymentID(ctx context.Context, paymentID string) (reconcile.Purchase, error) {
	if paymentID == "" {
		return reconcile.Purchase{}, fmt.Errorf("postgres: find purchase by payment id: empty id: %w", reconcile.ErrNotFound)
	}
	p, err := scanPurchase(t.tx.QueryRow(ctx, `SELECT `+purchaseColumns+` FROM purchases WHERE provider_payment_id = $1`, paymentID))
	if errors.Is(err, pgx.ErrNoRows) {
		return reconcile.Purchase{}, fmt.Errorf("postgres: find purchase by payment id %s: %w", paymentID, reconcile.ErrNotFound)
	}
	if err != nil {
		return reconcile.Purchase{}, wrap(err, "find purchase by payment id %s", paymentID)
	}
	return p, nil
}

// UpdatePurchase implements reconcile.Tx. It writes the state, the
// provider fields (key, request, params hash, payment id, first attempt),
// UncertainSince, the escalation, SettledAt, Doubt and UpdatedAt; the
// other fields are fixed at insert and left alone.
func (t *txn) UpdatePurchase(ctx context.Context, p reconcile.Purchase, from statemachine.State) error {
	req, err := marshalRequest(p.ProviderRequest)
	if err != nil {
		return fmt.Errorf("postgres: update purchase %s: %w", p.ID, err)
	}
	tag, err := t.exec(ctx, `UPDATE purchases SET
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
		nullString(p.ProviderKey), req, nullString(p.ParamsHash), nullString(p.ProviderPaymentID),
		nullTime(p.FirstAttemptAt), nullTime(p.UncertainSince), nullTime(p.EscalatedAt), nullString(string(p.EscalationReason)),
		nullTime(p.SettledAt), p.Doubt, nullTime(p.UpdatedAt))
	if err != nil {
		return wrap(err, "update purchase %s (%s -> %s)", p.ID, from, p.State)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var state string
	var version int64
	err = t.tx.QueryRow(ctx, `SELECT state, version FROM purchases WHERE id = $1`, p.ID).Scan(&state, &version)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("postgres: update purchase %s: %w", p.ID, reconcile.ErrNotFound)
	case err != nil:
		return wrap(err, "update purchase %s", p.ID)
	}
	return fmt.Errorf("postgres: update purchase %s: %w: it is %s at version %d, the write expected %s at version %d",
		p.ID, reconcile.ErrConflict, state, version, from, p.Version)
}

// InsertTransition implements reconcile.Tx. r.ID is ignored: the database
// numbers the rows in insertion order. An unknown purchase gives
// reconcile.ErrNotFound, a move that is not in the transition table
// (the foreign key transitions_move_fkey) reconcile.ErrForbiddenTransition.
func (t *txn) InsertTransition(ctx context.Context, r reconcile.TransitionRecord) error {
	_, err := t.exec(ctx, `INSERT INTO transitions
    (purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		r.PurchaseID, string(r.From), string(r.To), string(r.Cause), r.Evidence, r.Actor, r.LeaseToken, nullTime(r.At))
	if err != nil {
		return wrapRef(err, "insert transition %s -> %s of %s", r.From, r.To, r.PurchaseID)
	}
	return nil
}

// ListTransitions implements reconcile.Tx.
func (t *txn) ListTransitions(ctx context.Context, purchaseID string) ([]reconcile.TransitionRecord, error) {
	rows, err := t.tx.Query(ctx, `SELECT id, purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at
FROM transitions WHERE purchase_id = $1 ORDER BY id`, purchaseID)
	if err != nil {
		return nil, wrap(err, "list transitions of %s", purchaseID)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (reconcile.TransitionRecord, error) {
		var r reconcile.TransitionRecord
		var from, to, cause string
		err := row.Scan(&r.ID, &r.PurchaseID, &from, &to, &cause, &r.Evidence, &r.Actor, &r.LeaseToken, &r.At)
		r.From, r.To, r.Cause, r.At = statemachine.State(from), statemachine.State(to), reconcile.Cause(cause), r.At.UTC()
		return r, err
	})
	if err != nil {
		return nil, wrap(err, "list transitions of %s", purchaseID)
	}
	return out, nil
}

// InsertAttempt implements reconcile.Tx. a.ID is ignored: the database
// numbers the rows in insertion order. Latency is kept to the nanosecond.
// An unknown purchase gives reconcile.ErrNotFound.
func (t *txn) InsertAttempt(ctx context.Context, a reconcile.Attempt) error {
	_, err := t.exec(ctx, `INSERT INTO provider_attempts
    (purchase_id, op, idem_key, outcome, payment_id, status, latency_ns, error, actor, lease_token, applied, note, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		a.PurchaseID, string(a.Op), a.Key, string(a.Outcome), a.PaymentID, a.Status, int64(a.Latency), a.Error,
		a.Actor, a.LeaseToken, a.Applied, a.Note, nullTime(a.At))
	if err != nil {
		return wrapRef(err, "insert %s attempt of %s", a.Op, a.PurchaseID)
	}
	return nil
}

// ListAttempts implements reconcile.Tx.
func (t *txn) ListAttempts(ctx context.Context, purchaseID string) ([]reconcile.Attempt, error) {
	rows, err := t.tx.Query(ctx, `SELECT id, purchase_id, op, idem_key, outcome, payment_id, status, latency_ns,
    error, actor, lease_token, applied, note, at
FROM provider_attempts WHERE purchase_id = $1 ORDER BY id`, purchaseID)
	if err != nil {
		return nil, wrap(err, "list attempts of %s", purchaseID)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (reconcile.Attempt, error) {
		var a reconcile.Attempt
		var op, outcome string
		var latency int64
		err := row.Scan(&a.ID, &a.PurchaseID, &op, &a.Key, &outcome, &a.PaymentID, &a.Status, &latency,
			&a.Error, &a.Actor, &a.LeaseToken, &a.Applied, &a.Note, &a.At)
		a.Op, a.Outcome, a.Latency, a.At = provider.Op(op), provider.Outcome(outcome), time.Duration(latency), a.At.UTC()
		return a, err
	})
	if err != nil {
		return nil, wrap(err, "list attempts of %s", purchaseID)
	}
	return out, nil
}

// InsertJob implements reconcile.Tx: the job is due at job.RunAt, not
// leased, never run; the other fields of job are ignored. A second job for
// the same purchase gives reconcile.ErrDuplicate, an unknown purchase
// reconcile.ErrNotFound.
func (t *txn) InsertJob(ctx context.Context, job reconcile.Job) error {
	_, err := t.exec(ctx, `INSERT INTO jobs (purchase_id, run_at) VALUES ($1, $2)`, job.PurchaseID, nullTime(job.RunAt))
	if err != nil {
		return wrapRef(err, "insert job of %s", job.PurchaseID)
	}
	return nil
}

const jobColumns = `purchase_id, run_at, lease_owner, lease_token, lease_expires_at, checks, done_at`

// GetJob implements reconcile.Tx.
func (t *txn) GetJob(ctx context.Context, purchaseID string) (reconcile.Job, error) {
	j, err := scanJob(t.tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE purchase_id = $1`, purchaseID))
	if errors.Is(err, pgx.ErrNoRows) {
		return reconcile.Job{}, fmt.Errorf("postgres: get job of %s: %w", purchaseID, reconcile.ErrNotFound)
	}
	if err != nil {
		return reconcile.Job{}, wrap(err, "get job of %s", purchaseID)
	}
	return j, nil
}

// CheckLease implements reconcile.Tx. It judges expiry by the store's
// clock at this statement (not at the transaction's start), and takes the
// job row's lock (SELECT ... FOR UPDATE) when l is current, which ClaimJobs
// skips until this transaction ends.
func (t *txn) CheckLease(ctx context.Context, l reconcile.Lease) error {
	var one int
	err := t.tx.QueryRow(ctx, `SELECT 1 FROM jobs
WHERE purchase_id = $2 AND lease_owner = $3 AND lease_token = $4 AND lease_expires_at > `+nowSQL+`
FOR UPDATE`, clockArg(t.now), l.PurchaseID, l.Owner, l.Token).Scan(&one)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return wrap(err, "check lease of job %s", l.PurchaseID)
	}
	// Say what happened to the lease; this is the failure path only.
	why := "no such job"
	if j, err := t.GetJob(ctx, l.PurchaseID); err == nil {
		switch {
		case j.LeaseOwner != l.Owner || j.LeaseToken != l.Token:
			why = fmt.Sprintf("taken over: now held by %q with token %d", j.LeaseOwner, j.LeaseToken)
		default:
			why = fmt.Sprintf("expired at %s", j.LeaseExpiresAt.Format(time.RFC3339Nano))
		}
	}
	return fmt.Errorf("postgres: check lease of job %s (owner %q, token %d): %w: %s",
		l.PurchaseID, l.Owner, l.Token, reconcile.ErrLeaseLost, why)
}

// RescheduleJob implements reconcile.Tx. A done job stays done.
func (t *txn) RescheduleJob(ctx context.Context, purchaseID string, runAt time.Time) error {
	tag, err := t.exec(ctx, `UPDATE jobs SET run_at = $2, lease_owner = NULL, lease_expires_at = NULL
WHERE purchase_id = $1`, purchaseID, nullTime(runAt))
	if err != nil {
		return wrap(err, "reschedule job of %s", purchaseID)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: reschedule job of %s: %w", purchaseID, reconcile.ErrNotFound)
	}
	return nil
}

// CompleteJob implements reconcile.Tx.
func (t *txn) CompleteJob(ctx context.Context, purchaseID string, now time.Time) error {
	tag, err := t.exec(ctx, `UPDATE jobs SET done_at = $2, lease_owner = NULL, lease_expires_at = NULL
WHERE purchase_id = $1`, purchaseID, nullTime(now))
	if err != nil {
		return wrap(err, "complete job of %s", purchaseID)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: complete job of %s: %w", purchaseID, reconcile.ErrNotFound)
	}
	return nil
}

// ReopenJob implements reconcile.Tx: the job is no longer done and is due
// at runAt. Its lease, if any, is left as it is (owner, token, expiry):
// a live lease keeps its worker, an expired one is taken over by the next
// claim.
func (t *txn) ReopenJob(ctx context.Context, purchaseID string, runAt time.Time) error {
	tag, err := t.exec(ctx, `UPDATE jobs SET done_at = NULL, run_at = $2 WHERE purchase_id = $1`,
		purchaseID, nullTime(runAt))
	if err != nil {
		return wrap(err, "reopen job of %s", purchaseID)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: reopen job of %s: %w", purchaseID, reconcile.ErrNotFound)
	}
	return nil
}

// ListEscalated implements reconcile.Tx: every purchase with an
// escalation time, whatever its state (a contradiction can escalate a
// declined purchase), oldest escalation first.
func (t *txn) ListEscalated(ctx context.Context) ([]reconcile.Purchase, error) {
	rows, err := t.tx.Query(ctx, `SELECT `+purchaseColumns+` FROM purchases
WHERE escalated_at IS NOT NULL ORDER BY escalated_at, id`)
	if err != nil {
		return nil, wrap(err, "list escalated purchases")
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (reconcile.Purchase, error) {
		return scanPurchase(row)
	})
	if err != nil {
		return nil, wrap(err, "list escalated purchases")
	}
	return out, nil
}

// CountByState implements reconcile.Tx. Every known state is in the map,
// with 0 when no purchase is in it.
func (t *txn) CountByState(ctx context.Context) (map[statemachine.State]int, error) {
	rows, err := t.tx.Query(ctx, `SELECT state, count(*) FROM purchases GROUP BY state`)
	if err != nil {
		return nil, wrap(err, "count purchases by state")
	}
	counts := make(map[statemachine.State]int, len(statemachine.States))
	for _, s := range statemachine.States {
		counts[s] = 0
	}
	var state string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		counts[statemachine.State(state)] = n
		return nil
	})
	if err != nil {
		return nil, wrap(err, "count purchases by state")
	}
	return counts, nil
}

// CountEscalated implements reconcile.Tx: the purchases ListEscalated
// returns.
func (t *txn) CountEscalated(ctx context.Context) (int, error) {
	var n int
	if err := t.tx.QueryRow(ctx, `SELECT count(*) FROM purchases WHERE escalated_at IS NOT NULL`).Scan(&n); err != nil {
		return 0, wrap(err, "count escalated purchases")
	}
	return n, nil
}

// OldestUncertainSince implements reconcile.Tx. Purchases in uncertain or
// reconciling without an UncertainSince do not count.
func (t *txn) OldestUncertainSince(ctx context.Context) (time.Time, error) {
	// The states are literals so that the planner can use the partial
	// index purchases_uncertain_since_idx.
	var oldest *time.Time
	err := t.tx.QueryRow(ctx, `SELECT min(uncertain_since) FROM purchases
WHERE state IN ('uncertain', 'reconciling')`).Scan(&oldest)
	if err != nil {
		return time.Time{}, wrap(err, "oldest uncertain purchase")
	}
	return derefTime(oldest), nil
}

// ListOverdueUncertain implements reconcile.Tx: purchases in uncertain,
// not escalated, whose UncertainSince is strictly before uncertainBefore,
// oldest UncertainSince first (then by id). limit must be positive
// (reconcile.ErrInvalid otherwise).
func (t *txn) ListOverdueUncertain(ctx context.Context, uncertainBefore time.Time, limit int) ([]reconcile.Purchase, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("postgres: list overdue uncertain purchases: %w: limit %d", reconcile.ErrInvalid, limit)
	}
	rows, err := t.tx.Query(ctx, `SELECT `+purchaseColumns+` FROM purchases
WHERE state = 'uncertain' AND escalated_at IS NULL AND uncertain_since < $1
ORDER BY uncertain_since, id
LIMIT $2`, uncertainBefore, limit)
	if err != nil {
		return nil, wrap(err, "list overdue uncertain purchases")
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (reconcile.Purchase, error) {
		return scanPurchase(row)
	})
	if err != nil {
		return nil, wrap(err, "list overdue uncertain purchases")
	}
	return out, nil
}

// ListSubmittedBetween implements reconcile.Tx: the purchases in state
// whose FirstAttemptAt is at or after from and strictly before until,
// oldest FirstAttemptAt first (then by id), read from the index
// purchases_first_attempt_idx (migration 00004).
func (t *txn) ListSubmittedBetween(ctx context.Context, from, until time.Time, state statemachine.State) ([]reconcile.Purchase, error) {
	rows, err := t.tx.Query(ctx, `SELECT `+purchaseColumns+` FROM purchases
WHERE state = $1 AND first_attempt_at >= $2 AND first_attempt_at < $3
ORDER BY first_attempt_at, id`, string(state), from, until)
	if err != nil {
		return nil, wrap(err, "list %s purchases submitted in [%s, %s)", state, from.UTC().Format(time.RFC3339Nano), until.UTC().Format(time.RFC3339Nano))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (reconcile.Purchase, error) {
		return scanPurchase(row)
	})
	if err != nil {
		return nil, wrap(err, "list %s purchases submitted in [%s, %s)", state, from.UTC().Format(time.RFC3339Nano), until.UTC().Format(time.RFC3339Nano))
	}
	return out, nil
}

// FindPurchaseByReference implements reconcile.Tx. An empty reference
// finds nothing: purchases without one have none to match.
func (t *txn) FindPurchaseByReference(ctx context.Context, customer, reference string) (reconcile.Purchase, error) {
	if reference == "" {
		return reconcile.Purchase{}, fmt.Errorf("postgres: find purchase of %s by reference: empty reference: %w", customer, reconcile.ErrNotFound)
	}
	p, err := scanPurchase(t.tx.QueryRow(ctx, `SELECT `+purchaseColumns+` FROM purchases WHERE customer = $1 AND reference = $2`,
		customer, reference))
	if errors.Is(err, pgx.ErrNoRows) {
		return reconcile.Purchase{}, fmt.Errorf("postgres: find purchase of %s by reference %q: %w", customer, reference, reconcile.ErrNotFound)
	}
	if err != nil {
		return reconcile.Purchase{}, wrap(err, "find purchase of %s by reference %q", customer, reference)
	}
	return p, nil
}

// scanPurchase reads one row of purchaseColumns.
func scanPurchase(row pgx.Row) (reconcile.Purchase, error) {
	var p reconcile.Purchase
	var (
		reference, providerKey, paramsHash, paymentID, reason *string
		state                                                 string
		req                                                   []byte
		firstAttempt, uncertain, escalated, settled           *time.Time
	)
	err := row.Scan(&p.ID, &p.Customer, &reference, &p.Amount, &p.Currency, &p.Description, &p.PaymentMethod,
		&state, &p.Version, &providerKey, &req, &paramsHash, &paymentID,
		&firstAttempt, &uncertain, &escalated, &reason, &settled, &p.Doubt, &p.CreatedAt, &p.UpdatedAt)
	if err != nil {
		return reconcile.Purchase{}, err
	}
	p.State = statemachine.State(state)
	p.Reference = derefString(reference)
	p.ProviderKey = derefString(providerKey)
	p.ParamsHash = derefString(paramsHash)
	p.ProviderPaymentID = derefString(paymentID)
	p.EscalationReason = reconcile.EscalationReason(derefString(reason))
	p.FirstAttemptAt = derefTime(firstAttempt)
	p.UncertainSince = derefTime(uncertain)
	p.EscalatedAt = derefTime(escalated)
	p.SettledAt = derefTime(settled)
	p.CreatedAt = p.CreatedAt.UTC()
	p.UpdatedAt = p.UpdatedAt.UTC()
	if req != nil {
		p.ProviderRequest = new(provider.CreateRequest)
		if err := json.Unmarshal(req, p.ProviderRequest); err != nil {
			return reconcile.Purchase{}, fmt.Errorf("decode provider_request of %s: %w", p.ID, err)
		}
	}
	return p, nil
}

// scanJob reads one row of jobColumns.
func scanJob(row pgx.Row) (reconcile.Job, error) {
	var j reconcile.Job
	var owner *string
	var expires, done *time.Time
	if err := row.Scan(&j.PurchaseID, &j.RunAt, &owner, &j.LeaseToken, &expires, &j.Checks, &done); err != nil {
		return reconcile.Job{}, err
	}
	j.RunAt = j.RunAt.UTC()
	j.LeaseOwner = derefString(owner)
	j.LeaseExpiresAt = derefTime(expires)
	j.DoneAt = derefTime(done)
	return j, nil
}

// marshalRequest encodes the stored provider request for a jsonb
// parameter; nil stays NULL.
func marshalRequest(r *provider.CreateRequest) (any, error) {
	if r == nil {
		return nil, nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode provider request: %w", err)
	}
	return json.RawMessage(b), nil
}

// nullString maps "" to NULL.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// nullTime maps the zero time to NULL.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}
