package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
)

// claimSQL returns the statement that leases the jobs cand selects (a
// set of CTEs ending in cand(id, purchase_id, refund_id, taken), reading
// the clock with nowSQL and locking what they select FOR UPDATE SKIP
// LOCKED) and reads what they move, in one statement: every job's
// purchase (a refund's job: the purchase its refund belongs to) and a
// refund's job's refund (a LEFT JOIN on the candidate's refund_id, NULL
// for a purchase's job, which finds nothing). SKIP LOCKED makes
// concurrent claimers take disjoint rows; it also skips a job whose
// lease a transaction is checking (CheckLease locks the row), so a lease
// cannot be taken over between that check and the commit. It returns,
// with each lease, its job's kind, purchase and refund, whether the job
// was still leased (its lease expired without being released), the
// clock's time the claim judged by, the purchase and the refund.
func claimSQL(cand string) string {
	return `
WITH ` + cand + `
UPDATE jobs AS j
SET lease_owner = $3,
    lease_token = j.lease_token + 1,
    lease_expires_at = ` + nowSQL + ` + $4::interval,
    checks = j.checks + 1
FROM cand
    JOIN purchases AS p ON p.id = cand.purchase_id
    LEFT JOIN refunds AS r ON r.id = cand.refund_id
WHERE j.id = cand.id
RETURNING j.kind, j.purchase_id, j.refund_id, j.run_at, j.lease_token, j.lease_expires_at, j.checks, cand.taken, ` + nowSQL + `,
    ` + sqlstore.Qualified("p", purchaseColumns) + `,
    ` + sqlstore.Qualified("r", refundColumns)
}

// expiredCandOf selects, oldest expiry first, up to $2 open jobs whose
// lease expired without being released, from the partial index
// jobs_leased_idx, that also meet where ("" or "AND ...").
func expiredCandOf(where string) string {
	return `expired AS (
    SELECT id, purchase_id, refund_id FROM jobs
    WHERE done_at IS NULL AND lease_owner IS NOT NULL AND lease_expires_at <= ` + nowSQL + ` ` + where + `
    ORDER BY lease_expires_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)`
}

// dueCandOf selects up to $2 open, unleased jobs that are due and meet
// where ("" or "AND ..."), of both kinds, never-leased jobs (the first
// create of a new purchase) first, in the order of the partial index
// jobs_due_idx ((lease_token <> 0), run_at, id), or of
// jobs_account_due_idx after its account: the scan stops after $2 rows
// however many jobs share one run_at, with no sort of the open jobs.
func dueCandOf(where string) string {
	return `due AS (
    SELECT id, purchase_id, refund_id FROM jobs
    WHERE done_at IS NULL AND lease_owner IS NULL AND run_at <= ` + nowSQL + ` ` + where + `
    ORDER BY (lease_token <> 0), run_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)`
}

// claimCandOf leases the jobs meeting where whose lease expired, then
// those that are due.
func claimCandOf(where string) string {
	return claimSQL(expiredCandOf(where) + `, ` + dueCandOf(where) + `, cand AS (
    (SELECT id, purchase_id, refund_id, true AS taken FROM expired)
    UNION ALL
    (SELECT id, purchase_id, refund_id, false FROM due)
    LIMIT $2
)`)
}

var (
	// claimDueSQL leases jobs whose lease expired, then jobs that are due.
	claimDueSQL = claimCandOf("")
	// claimAccountSQL is claimDueSQL over the jobs of account $5.
	claimAccountSQL = claimCandOf("AND account = $5")
	// claimExpiredSQL leases only jobs whose lease expired.
	claimExpiredSQL = claimSQL(expiredCandOf("") + `, cand AS (SELECT id, purchase_id, refund_id, true AS taken FROM expired)`)
	// claimOneSQL leases the purchase job of purchase $5, due or not,
	// unless it is done, or leased and the lease has not expired.
	claimOneSQL = claimSQL(`cand AS (
    SELECT id, purchase_id, refund_id, lease_owner IS NOT NULL AS taken FROM jobs
    WHERE id = $5 AND kind = 'purchase' AND done_at IS NULL AND (lease_owner IS NULL OR lease_expires_at <= ` + nowSQL + `)
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)`)
)

// ClaimJobs implements reconcile.Store. It reads the store's clock in
// the claiming statement itself.
func (s *Store) ClaimJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
	return s.claim(ctx, "claim jobs", claimDueSQL, owner, limit, leaseFor)
}

// ClaimAccountJobs implements reconcile.Store, from the partial index
// jobs_account_due_idx.
func (s *Store) ClaimAccountJobs(ctx context.Context, owner, account string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
	return s.claim(ctx, "claim jobs of account "+account, claimAccountSQL, owner, limit, leaseFor, account)
}

// dueAccountsSQL finds the accounts with a claimable job: a skip scan of
// jobs_account_due_idx, one probe per account with open unleased jobs
// (each then asked for one that is due), and the expired leases of
// jobs_leased_idx, which are few: a backlog of any size costs a probe.
const dueAccountsSQL = `
WITH RECURSIVE open_accounts(account) AS (
    (SELECT account FROM jobs WHERE done_at IS NULL AND lease_owner IS NULL AND account >= $3 ORDER BY account LIMIT 1)
    UNION ALL
    SELECT (SELECT j.account FROM jobs AS j
            WHERE j.done_at IS NULL AND j.lease_owner IS NULL AND j.account > o.account
            ORDER BY j.account LIMIT 1)
    FROM open_accounts AS o WHERE o.account IS NOT NULL
)
SELECT account FROM (
    SELECT o.account FROM open_accounts AS o
    WHERE o.account IS NOT NULL AND EXISTS (
        SELECT 1 FROM jobs AS j
        WHERE j.account = o.account AND j.done_at IS NULL AND j.lease_owner IS NULL
          AND (j.lease_token <> 0) = false AND j.run_at <= ` + nowSQL + `
        UNION ALL
        SELECT 1 FROM jobs AS j
        WHERE j.account = o.account AND j.done_at IS NULL AND j.lease_owner IS NULL
          AND (j.lease_token <> 0) = true AND j.run_at <= ` + nowSQL + `)
    UNION
    SELECT account FROM jobs
    WHERE done_at IS NULL AND lease_owner IS NOT NULL AND lease_expires_at <= ` + nowSQL + `
) AS due
WHERE account > $3 OR $3 = ''
ORDER BY account
LIMIT $2`

// DueAccounts implements reconcile.Store.
func (s *Store) DueAccounts(ctx context.Context, after string, limit int) ([]string, error) {
	if err := dialect.CheckLimit("due accounts", limit); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, dueAccountsSQL, clockArg(s.now), limit, after)
	if err != nil {
		return nil, wrap(err, "due accounts")
	}
	accounts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, wrap(err, "due accounts")
	}
	return accounts, nil
}

// ClaimExpiredJobs implements reconcile.Store.
func (s *Store) ClaimExpiredJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
	return s.claim(ctx, "claim expired jobs", claimExpiredSQL, owner, limit, leaseFor)
}

// ClaimJob implements reconcile.Store. A job whose row another
// transaction has locked (a worker between CheckLease and its commit) is
// busy too: reconcile.ErrConflict, at once, without waiting.
func (s *Store) ClaimJob(ctx context.Context, purchaseID, owner string, leaseFor time.Duration) (reconcile.Lease, error) {
	what := "claim job of " + purchaseID
	leases, err := s.claim(ctx, what, claimOneSQL, owner, 1, leaseFor, purchaseID)
	if err != nil {
		return reconcile.Lease{}, err
	}
	if len(leases) == 1 {
		return leases[0], nil
	}
	// Say why not; this is the failure path only.
	var owned *string
	var expires, done *time.Time
	var now time.Time
	err = s.pool.QueryRow(ctx, `SELECT lease_owner, lease_expires_at, done_at, `+nowSQL+` FROM jobs WHERE id = $2 AND kind = 'purchase'`,
		clockArg(s.now), purchaseID).Scan(&owned, &expires, &done, &now)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return reconcile.Lease{}, dialect.NotFound(what + ": no such job")
	case err != nil:
		return reconcile.Lease{}, wrap(err, "%s", what)
	}
	j := reconcile.Job{LeaseOwner: sqlstore.DerefString(owned), LeaseExpiresAt: derefTime(expires), DoneAt: derefTime(done)}
	why := sqlstore.ClaimRefusal(j, now)
	if why == "" {
		why = "a transaction holding its lease is in progress"
	}
	return reconcile.Lease{}, dialect.Conflict(what+" for "+owner, why)
}

// claim runs one of the claim statements and returns its leases in run_at
// order. extra are the statement's parameters after the first four.
func (s *Store) claim(ctx context.Context, what, query, owner string, limit int, leaseFor time.Duration, extra ...any) ([]reconcile.Lease, error) {
	if err := dialect.CheckClaim(what, owner, limit, leaseFor); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, query, append([]any{clockArg(s.now), limit, owner, leaseFor}, extra...)...)
	if err != nil {
		return nil, wrap(err, "%s for %s", what, owner)
	}
	type claimed struct {
		lease reconcile.Lease
		runAt time.Time
	}
	var got []claimed
	for rows.Next() {
		var c claimed
		var kind string
		var refundID *string
		var rs refundScan
		p, err := scanPurchase(sqlstore.Around(rows,
			[]any{&kind, &c.lease.PurchaseID, &refundID, &c.runAt, &c.lease.Token, &c.lease.ExpiresAt, &c.lease.Checks, &c.lease.TakenOver, &c.lease.Now},
			rs.dests()))
		if err == nil {
			c.lease.Refund, err = rs.refund()
		}
		if err != nil {
			rows.Close()
			return nil, wrap(err, "%s for %s", what, owner)
		}
		c.lease.Kind = reconcile.JobKind(kind)
		c.lease.RefundID = sqlstore.DerefString(refundID)
		c.lease.Purchase = &p
		c.lease.Owner = owner
		c.lease.ExpiresAt = c.lease.ExpiresAt.UTC()
		c.lease.Now = c.lease.Now.UTC()
		got = append(got, c)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err, "%s for %s", what, owner)
	}
	// RETURNING does not keep the CTE's order.
	slices.SortFunc(got, func(a, b claimed) int {
		if c := a.runAt.Compare(b.runAt); c != 0 {
			return c
		}
		return strings.Compare(a.lease.JobID(), b.lease.JobID())
	})
	leases := make([]reconcile.Lease, len(got))
	for i, c := range got {
		leases[i] = c.lease
	}
	return leases, nil
}

// ReleaseLeases implements reconcile.Store.
func (s *Store) ReleaseLeases(ctx context.Context, owner string) (int, error) {
	tag, err := s.pool.Exec(ctx, `
UPDATE jobs SET lease_owner = NULL, lease_expires_at = NULL, run_at = `+nowSQL+`
WHERE lease_owner = $2 AND done_at IS NULL`, clockArg(s.now), owner)
	if err != nil {
		return 0, wrap(err, "release leases of %s", owner)
	}
	return int(tag.RowsAffected()), nil
}

const jobColumns = `kind, purchase_id, refund_id, run_at, lease_owner, lease_token, lease_expires_at, checks, done_at`

// InsertJob implements reconcile.Tx. The job's id is jobs.id, a
// generated column.
func (t *txn) InsertJob(ctx context.Context, job reconcile.Job) error {
	what := "insert job of " + job.JobID()
	if err := dialect.CheckJob(what, job); err != nil {
		return err
	}
	_, err := t.exec(ctx, `INSERT INTO jobs (kind, purchase_id, refund_id, run_at, account)
VALUES ($1, $2, $3, $4, COALESCE((SELECT account FROM purchases WHERE id = $2), ''))`,
		sqlstore.JobKind(job.Kind), job.PurchaseID, sqlstore.NullString(job.RefundID), nullTime(job.RunAt))
	if err != nil {
		return wrapRef(err, "%s", what)
	}
	return nil
}

// GetJob implements reconcile.Tx.
func (t *txn) GetJob(ctx context.Context, jobID string) (reconcile.Job, error) {
	return queryOne(ctx, t, scanJob, "get job "+jobID,
		`SELECT `+jobColumns+` FROM jobs WHERE id = $1`, jobID)
}

// CheckLease implements reconcile.Tx. It reads the clock in its
// statement, and takes the job row's lock (SELECT ... FOR UPDATE) when l
// is current, which ClaimJobs skips until this transaction ends.
func (t *txn) CheckLease(ctx context.Context, l reconcile.Lease) error {
	var one int
	err := t.tx.QueryRow(ctx, `SELECT 1 FROM jobs
WHERE id = $2 AND lease_owner = $3 AND lease_token = $4 AND lease_expires_at > `+nowSQL+`
FOR UPDATE`, clockArg(t.now), l.JobID(), l.Owner, l.Token).Scan(&one)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return wrap(err, "check lease of job %s", l.JobID())
	}
	// Say what happened to the lease; this is the failure path only.
	why := sqlstore.NoSuchJob
	if j, err := t.GetJob(ctx, l.JobID()); err == nil {
		why = sqlstore.LeaseLostDetail(j, l)
	}
	return dialect.LeaseLost(l, why)
}

// RescheduleJob implements reconcile.Tx.
func (t *txn) RescheduleJob(ctx context.Context, jobID string, runAt time.Time) error {
	return t.execOne(ctx, "reschedule job "+jobID,
		`UPDATE jobs SET run_at = $2, lease_owner = NULL, lease_expires_at = NULL WHERE id = $1`,
		jobID, nullTime(runAt))
}

// CompleteJob implements reconcile.Tx.
func (t *txn) CompleteJob(ctx context.Context, jobID string, now time.Time) error {
	return t.execOne(ctx, "complete job "+jobID,
		`UPDATE jobs SET done_at = $2, lease_owner = NULL, lease_expires_at = NULL WHERE id = $1`,
		jobID, nullTime(now))
}

// ReopenJob implements reconcile.Tx.
func (t *txn) ReopenJob(ctx context.Context, jobID string, runAt time.Time) error {
	return t.execOne(ctx, "reopen job "+jobID,
		`UPDATE jobs SET done_at = NULL, run_at = $2,
    account = COALESCE((SELECT p.account FROM purchases AS p WHERE p.id = jobs.purchase_id), '')
WHERE id = $1`,
		jobID, nullTime(runAt))
}

// scanJob reads one row of jobColumns.
func scanJob(row sqlstore.Row) (reconcile.Job, error) {
	var j reconcile.Job
	var kind string
	var owner, refundID *string
	var expires, done *time.Time
	if err := row.Scan(&kind, &j.PurchaseID, &refundID, &j.RunAt, &owner, &j.LeaseToken, &expires, &j.Checks, &done); err != nil {
		return reconcile.Job{}, err
	}
	j.Kind = reconcile.JobKind(kind)
	j.RefundID = sqlstore.DerefString(refundID)
	j.RunAt = j.RunAt.UTC()
	j.LeaseOwner = sqlstore.DerefString(owner)
	j.LeaseExpiresAt = derefTime(expires)
	j.DoneAt = derefTime(done)
	return j, nil
}
