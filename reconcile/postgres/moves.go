package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
)

// Batched writes: one read of what a batch of answers needs, and one
// statement that writes a batch of fenced moves to every table they touch.

// FindPurchases implements reconcile.Tx, in one statement.
func (t *txn) FindPurchases(ctx context.Context, ids, paymentIDs []string) ([]reconcile.Purchase, error) {
	ids, paymentIDs = sqlstore.NonEmpty(ids), sqlstore.NonEmpty(paymentIDs)
	if len(ids) == 0 && len(paymentIDs) == 0 {
		return nil, nil
	}
	return queryAllWith(ctx, t, byKeyPlan, scanPurchase, fmt.Sprintf("find %d purchases", len(ids)+len(paymentIDs)),
		findPurchasesSQL, ids, paymentIDs)
}

// findPurchasesSQL is FindPurchases' statement. It runs on its generic
// plan made with sequential scans off (byKeyPlan), which reads the two
// unique indexes.
const findPurchasesSQL = `SELECT ` + purchaseColumns + ` FROM purchases WHERE id = ANY($1) OR provider_payment_id = ANY($2)`

// applyMovesSQL writes a batch of moves, given as parallel arrays ($2 on,
// one element per move: moveArrays), in one statement: it locks the jobs
// whose lease is still the move's (FOR UPDATE, so that no claim takes one
// over before commit), updates the purchases still at the move's state
// and version, and for those alone (the rows upd returns, carrying what
// the other writes need, so that none joins the arrays again) appends the
// transitions and attempts and completes or reschedules the jobs. It
// returns the ids of the purchases it moved. The purchases' guard
// trigger and the audit's constraints check every row as they do for
// single writes. A move without a lease (empty owner, token 0) locks no job
// and is fenced by the purchase's state and version alone (its job action
// is keep: CheckMoves). Only purchases move here: a move's job is its
// purchase's own (kind 'purchase', whose id is the purchase id), and its
// audit rows are the purchase's (refund_id NULL).
//
// The plan must not depend on estimates, which are wrong here: the
// arrays' length is unknown to a generic plan, and the jobs' statistics
// predate their leases. So the jobs are locked one move at a time, by
// their primary key (a LATERAL subquery, which the planner cannot turn
// into a join), and the moves that hold their lease are passed on whole,
// so that no step joins the moves to another list of moves. As joins, a
// row estimate of 1 or 10 for hundreds of rows made the planner rescan
// every job, or every move, once per move: up to a second a batch.
var applyMovesSQL = `
WITH m AS (
    SELECT * FROM unnest(
        $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bigint[],
        $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
        $12::timestamptz[], $13::timestamptz[], $14::timestamptz[], $15::text[], $16::timestamptz[],
        $17::text[], $18::timestamptz[],
        $19::text[], $20::text[], $21::text[], $22::bigint[], $23::timestamptz[],
        $24::text[], $25::text[], $26::text[], $27::text[], $28::text[], $29::bigint[],
        $30::text[], $31::text[], $32::bigint[], $33::boolean[], $34::text[], $35::timestamptz[],
        $36::int[], $37::timestamptz[]
    ) AS m(id, owner, token, from_state, version,
        state, provider_key, provider_request, params_hash, payment_id,
        first_attempt_at, uncertain_since, escalated_at, escalation_reason, settled_at,
        doubt, updated_at,
        t_cause, t_evidence, t_actor, t_token, t_at,
        a_op, a_key, a_outcome, a_payment_id, a_status, a_latency_ns,
        a_error, a_actor, a_token, a_applied, a_note, a_at,
        job, job_at)
), leased AS (
    SELECT m.*
    FROM m CROSS JOIN LATERAL (
        SELECT j.id FROM jobs AS j
        WHERE j.id = m.id AND m.owner <> '' AND j.kind = 'purchase'
          AND j.lease_owner = m.owner AND j.lease_token = m.token
          AND j.lease_expires_at > ` + nowSQL + `
        FOR UPDATE OF j
    ) AS j
    UNION ALL
    SELECT m.* FROM m WHERE m.owner = '' AND m.token = 0
), upd AS (
    UPDATE purchases AS p SET
        state = m.state,
        version = p.version + 1,
        provider_key = m.provider_key,
        provider_request = m.provider_request::jsonb,
        params_hash = m.params_hash,
        provider_payment_id = m.payment_id,
        first_attempt_at = m.first_attempt_at,
        uncertain_since = m.uncertain_since,
        escalated_at = m.escalated_at,
        escalation_reason = m.escalation_reason,
        settled_at = m.settled_at,
        doubt = m.doubt,
        updated_at = m.updated_at
    FROM leased AS m
    WHERE p.id = m.id AND p.state = m.from_state AND p.version = m.version
    RETURNING p.id, m.from_state, m.state,
        m.t_cause, m.t_evidence, m.t_actor, m.t_token, m.t_at,
        m.a_op, m.a_key, m.a_outcome, m.a_payment_id, m.a_status, m.a_latency_ns,
        m.a_error, m.a_actor, m.a_token, m.a_applied, m.a_note, m.a_at,
        m.job, m.job_at
), tr AS (
    INSERT INTO transitions (purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at)
    SELECT id, from_state, state, t_cause, t_evidence, t_actor, t_token, t_at
    FROM upd
    WHERE t_cause IS NOT NULL
), at AS (
    INSERT INTO provider_attempts
        (purchase_id, op, idem_key, outcome, payment_id, status, latency_ns, error, actor, lease_token, applied, note, at)
    SELECT id, a_op, a_key, a_outcome, a_payment_id, a_status, a_latency_ns,
        a_error, a_actor, a_token, a_applied, a_note, a_at
    FROM upd
    WHERE a_op IS NOT NULL
), jb AS (
    UPDATE jobs AS j SET
        done_at = CASE WHEN upd.job = 1 THEN upd.job_at ELSE j.done_at END,
        run_at = CASE WHEN upd.job = 2 THEN upd.job_at ELSE j.run_at END,
        lease_owner = NULL,
        lease_expires_at = NULL
    FROM upd
    WHERE j.id = upd.id AND upd.job <> 0
)
SELECT id FROM upd`

// moveArrays holds a batch of moves as the parallel arrays of
// applyMovesSQL, NULL where a move has no value (no transition, no
// attempt, an empty optional field).
type moveArrays struct {
	id, owner                              []string
	token                                  []int64
	fromState                              []string
	version                                []int64
	state                                  []string
	key, req, hash, payment                []*string
	firstAttempt, uncertain, escalated     []*time.Time
	reason                                 []*string
	settled                                []*time.Time
	doubt                                  []string
	updated                                []*time.Time
	tCause, tEvidence, tActor              []*string
	tToken                                 []*int64
	tAt                                    []*time.Time
	aOp, aKey, aOutcome, aPayment, aStatus []*string
	aLatency                               []*int64
	aError, aActor                         []*string
	aToken                                 []*int64
	aApplied                               []*bool
	aNote                                  []*string
	aAt                                    []*time.Time
	job                                    []int32
	jobAt                                  []*time.Time
}

func (c *moveArrays) add(mv reconcile.Move) error {
	to := mv.To
	r, err := sqlstore.MarshalRequest[string](to.ProviderRequest)
	if err != nil {
		return err
	}
	req, _ := r.(string)
	c.id, c.owner, c.token = append(c.id, mv.From.ID), append(c.owner, mv.Lease.Owner), append(c.token, mv.Lease.Token)
	c.fromState, c.version = append(c.fromState, string(mv.From.State)), append(c.version, mv.From.Version)
	c.state = append(c.state, string(to.State))
	c.key, c.req = append(c.key, strPtr(to.ProviderKey)), append(c.req, strPtr(req))
	c.hash, c.payment = append(c.hash, strPtr(to.ParamsHash)), append(c.payment, strPtr(to.ProviderPaymentID))
	c.firstAttempt = append(c.firstAttempt, timePtr(to.FirstAttemptAt))
	c.uncertain = append(c.uncertain, timePtr(to.UncertainSince))
	c.escalated = append(c.escalated, timePtr(to.EscalatedAt))
	c.reason = append(c.reason, strPtr(string(to.EscalationReason)))
	c.settled, c.doubt = append(c.settled, timePtr(to.SettledAt)), append(c.doubt, to.Doubt)
	c.updated = append(c.updated, timePtr(to.UpdatedAt))
	var (
		tCause, tEvidence, tActor *string
		tToken                    *int64
		tAt                       *time.Time
	)
	if tr := mv.Transition; tr != nil {
		tCause, tEvidence, tActor, tToken, tAt = ptr(string(tr.Cause)), ptr(tr.Evidence), ptr(tr.Actor), ptr(tr.LeaseToken), timePtr(tr.At)
	}
	c.tCause, c.tEvidence, c.tActor = append(c.tCause, tCause), append(c.tEvidence, tEvidence), append(c.tActor, tActor)
	c.tToken, c.tAt = append(c.tToken, tToken), append(c.tAt, tAt)
	var (
		aOp, aKey, aOutcome, aPayment, aStatus, aError, aActor, aNote *string
		aLatency, aToken                                              *int64
		aApplied                                                      *bool
		aAt                                                           *time.Time
	)
	if a := mv.Attempt; a != nil {
		aOp, aKey, aOutcome, aPayment, aStatus = ptr(string(a.Op)), ptr(a.Key), ptr(string(a.Outcome)), ptr(a.PaymentID), ptr(a.Status)
		aLatency, aError, aActor, aToken = ptr(int64(a.Latency)), ptr(a.Error), ptr(a.Actor), ptr(a.LeaseToken)
		aApplied, aNote, aAt = ptr(a.Applied), ptr(a.Note), timePtr(a.At)
	}
	c.aOp, c.aKey, c.aOutcome, c.aPayment, c.aStatus = append(c.aOp, aOp), append(c.aKey, aKey), append(c.aOutcome, aOutcome), append(c.aPayment, aPayment), append(c.aStatus, aStatus)
	c.aLatency, c.aError, c.aActor, c.aToken = append(c.aLatency, aLatency), append(c.aError, aError), append(c.aActor, aActor), append(c.aToken, aToken)
	c.aApplied, c.aNote, c.aAt = append(c.aApplied, aApplied), append(c.aNote, aNote), append(c.aAt, aAt)
	c.job, c.jobAt = append(c.job, int32(mv.Job)), append(c.jobAt, timePtr(mv.RunAt))
	return nil
}

// args are applyMovesSQL's parameters from $2 on.
func (c *moveArrays) args() []any {
	return []any{
		c.id, c.owner, c.token, c.fromState, c.version,
		c.state, c.key, c.req, c.hash, c.payment,
		c.firstAttempt, c.uncertain, c.escalated, c.reason, c.settled,
		c.doubt, c.updated,
		c.tCause, c.tEvidence, c.tActor, c.tToken, c.tAt,
		c.aOp, c.aKey, c.aOutcome, c.aPayment, c.aStatus, c.aLatency,
		c.aError, c.aActor, c.aToken, c.aApplied, c.aNote, c.aAt,
		c.job, c.jobAt,
	}
}

// ApplyMoves implements reconcile.Tx in one statement, whatever the
// number of moves, under a savepoint, so that a refused batch leaves the
// transaction usable.
func (t *txn) ApplyMoves(ctx context.Context, moves []reconcile.Move) ([]bool, error) {
	if len(moves) == 0 {
		return nil, nil
	}
	what := fmt.Sprintf("apply %d moves", len(moves))
	if err := sqlstore.CheckMoves(moves); err != nil {
		return nil, dialect.Invalid(what, err.Error())
	}
	var c moveArrays
	for _, mv := range moves {
		if err := c.add(mv); err != nil {
			return nil, wrap(err, "%s: purchase %s", what, mv.From.ID)
		}
	}
	var moved []string
	err := t.queryUnderSavepointWith(ctx, byKeyPlan, func(rows pgx.Rows) error {
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			moved = append(moved, id)
		}
		return rows.Err()
	}, applyMovesSQL, append([]any{clockArg(t.now)}, c.args()...)...)
	if err != nil {
		return nil, wrapRef(err, "%s", what)
	}
	return sqlstore.AppliedOf(moves, moved), nil
}

// queryUnderSavepoint runs one statement that returns rows under a
// savepoint, in a single round trip when it succeeds, as exec does for
// writes.
func (t *txn) queryUnderSavepoint(ctx context.Context, read func(pgx.Rows) error, query string, args ...any) error {
	return t.queryUnderSavepointWith(ctx, nil, read, query, args...)
}

// plannerSetting is a setting of PostgreSQL's planner, name = value.
type plannerSetting struct{ name, value string }

// byKeyPlan are the settings of a batched statement that finds rows by
// the keys its arrays hold (applyMovesSQL, updateInboxEventsSQL,
// findPurchasesSQL).
//   - It runs on the generic plan the connection caches, which spares the
//     planning of a custom plan on every call: for the batch of moves,
//     0.58 ms a call, more than half its execution, in a webhook's group.
//   - That plan is made with sequential scans off. A generic plan does not
//     know the arrays' length, and it is made on the tables as they are
//     then: made on a new database's empty tables, it hash-joined the
//     moves to a sequential scan of every purchase, and kept doing so.
//     With sequential scans off it finds each row by its key, whatever the
//     tables held when it was made.
//   - JIT is off. A plan that has no choice but a sequential scan (a
//     trigger's statement, say) costs 10^10 with sequential scans off,
//     which is far above jit_above_cost: compiling it took 290 ms.
var byKeyPlan = []plannerSetting{
	{name: "plan_cache_mode", value: "force_generic_plan"},
	{name: "enable_seqscan", value: "off"},
	{name: "jit", value: "off"},
}

// genericPlan is the setting of a batched statement whose plan does not
// depend on the tables' size (an insert from arrays joined to a small
// table): it runs on the generic plan the connection caches.
var genericPlan = []plannerSetting{{name: "plan_cache_mode", value: "force_generic_plan"}}

// settingStatements returns the statements that put settings in force
// for the transaction (SET LOCAL, which a rollback to a savepoint made
// before undoes) and those that put their defaults back for the rest of
// it (SET LOCAL ... TO DEFAULT: the session's value comes back at the
// transaction's end). The store sets nothing else, so the default is
// what was in force before.
func settingStatements(settings []plannerSetting) (set, reset []string) {
	for _, s := range settings {
		set = append(set, "SET LOCAL "+s.name+" = "+s.value)
		reset = append(reset, "SET LOCAL "+s.name+" TO DEFAULT")
	}
	return set, reset
}

// queryUnderSavepointWith is queryUnderSavepoint with the planner
// settings in force for the statement alone (set after the savepoint,
// put back after its release, or undone by the rollback to it), still in
// one round trip. The settings are in
// force whenever the statement is planned, so they hold the plan the
// connection caches too. They are in force for the triggers the
// statement fires as well.
func (t *txn) queryUnderSavepointWith(ctx context.Context, settings []plannerSetting, read func(pgx.Rows) error, query string, args ...any) error {
	set, reset := settingStatements(settings)
	err := t.queryBetween(ctx, append([]string{"SAVEPOINT payrecon_write"}, set...),
		append([]string{"RELEASE SAVEPOINT payrecon_write"}, reset...), read, query, args...)
	if err == nil {
		return nil
	}
	if _, rerr := t.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT payrecon_write; RELEASE SAVEPOINT payrecon_write"); rerr != nil {
		return errors.Join(err, fmt.Errorf("roll back to savepoint: %w", rerr))
	}
	return err
}

// queryWith runs query with the planner settings in force for it alone,
// in one round trip, and reads its rows with read. A failure leaves the
// transaction aborted, as any failed statement does outside a savepoint.
func (t *txn) queryWith(ctx context.Context, settings []plannerSetting, read func(pgx.Rows) error, query string, args ...any) error {
	set, reset := settingStatements(settings)
	return t.queryBetween(ctx, set, reset, read, query, args...)
}

// queryBetween runs query, and the statements without arguments before
// and after it, in one batch, and reads query's rows with read. It stops
// at the first failure and returns it.
func (t *txn) queryBetween(ctx context.Context, before, after []string, read func(pgx.Rows) error, query string, args ...any) error {
	b := &pgx.Batch{}
	for _, q := range before {
		b.Queue(q)
	}
	b.Queue(query, args...)
	for _, q := range after {
		b.Queue(q)
	}
	br := t.tx.SendBatch(ctx, b)
	var err error
	for range before {
		if err == nil {
			_, err = br.Exec()
		}
	}
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			err = read(rows)
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
	}
	for range after {
		if err == nil {
			_, err = br.Exec()
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

func ptr[T any](v T) *T { return &v }

// strPtr is a NULL for an empty string, as the store keeps optional
// strings.
func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// timePtr is a NULL for the zero time.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// drain reads a statement's rows, if any, and ignores them.
func drain(rows pgx.Rows) error {
	for rows.Next() {
	}
	return rows.Err()
}
