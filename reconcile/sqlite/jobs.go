package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
)

// expiredCandOf selects, oldest expiry first, up to ?2 open jobs (of
// both kinds) whose lease expired at ?1 (now) without being released,
// from the partial index jobs_leased_idx, that also meet where ("" or
// "AND ...").
func expiredCandOf(where string) string {
	return `SELECT id, 1 AS taken FROM jobs
WHERE done_at IS NULL AND lease_owner IS NOT NULL AND lease_expires_at <= ?1 ` + where + `
ORDER BY lease_expires_at
LIMIT ?2`
}

// claimCandOf selects what ClaimJobs leases at ?1 among the jobs meeting
// where: jobs whose lease expired, then open, unleased jobs due at ?1, of
// both kinds, in the order of the partial index jobs_due_idx
// ((lease_token <> 0), run_at, id), or of jobs_account_due_idx after its
// account, never-leased jobs (the first create of a new purchase) first,
// which the scan reads off the front however many jobs share one run_at.
func claimCandOf(where string) string {
	return `SELECT * FROM (` + expiredCandOf(where) + `)
UNION ALL
SELECT * FROM (SELECT id, 0 AS taken FROM jobs
    WHERE done_at IS NULL AND lease_owner IS NULL AND run_at <= ?1 ` + where + `
    ORDER BY (lease_token <> 0), run_at, id
    LIMIT ?2)
LIMIT ?2`
}

var (
	expiredCand = expiredCandOf("")
	claimCand   = claimCandOf("")
	// accountCand is claimCand over the jobs of account ?3.
	accountCand = claimCandOf("AND account = ?3")
)

// dueAccountsSQL finds the accounts with a claimable job at ?1, at most
// ?2, after ?3: under SQLite's single writer a scan of jobs_account_due_idx's
// distinct accounts is cheap enough, and the expired leases are few.
const dueAccountsSQL = `SELECT account FROM jobs
WHERE done_at IS NULL AND lease_owner IS NULL AND run_at <= ?1 AND (account > ?3 OR ?3 = '')
UNION
SELECT account FROM jobs
WHERE done_at IS NULL AND lease_owner IS NOT NULL AND lease_expires_at <= ?1 AND (account > ?3 OR ?3 = '')
ORDER BY account
LIMIT ?2`

// DueAccounts implements reconcile.Store.
func (s *Store) DueAccounts(ctx context.Context, after string, limit int) ([]string, error) {
	if err := dialect.CheckLimit("due accounts", limit); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, dueAccountsSQL, storeNow(s.now).UnixMicro(), limit, after)
	if err != nil {
		return nil, wrap(err, "due accounts")
	}
	defer rows.Close()
	var accounts []string
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			return nil, wrap(err, "due accounts")
		}
		accounts = append(accounts, a)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err, "due accounts")
	}
	return accounts, nil
}

// ClaimAccountJobs implements reconcile.Store, as ClaimJobs does.
func (s *Store) ClaimAccountJobs(ctx context.Context, owner, account string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
	return s.claim(ctx, "claim jobs of account "+account, accountCand, owner, limit, leaseFor, account)
}

// ClaimJobs implements reconcile.Store. It reads the store's clock once
// it holds the write lock, and the leases' purchases and refunds under
// the same lock.
func (s *Store) ClaimJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
	return s.claim(ctx, "claim jobs", claimCand, owner, limit, leaseFor)
}

// ClaimExpiredJobs implements reconcile.Store.
func (s *Store) ClaimExpiredJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
	return s.claim(ctx, "claim expired jobs", expiredCand, owner, limit, leaseFor)
}

// ClaimJob implements reconcile.Store. It reads and leases the job under
// the write lock of one transaction, so it waits for a worker between
// CheckLease and its commit (at most the busy timeout) and then judges
// the row that worker left, by the store's clock read then.
func (s *Store) ClaimJob(ctx context.Context, purchaseID, owner string, leaseFor time.Duration) (reconcile.Lease, error) {
	what := "claim job of " + purchaseID
	if err := dialect.CheckClaim(what, owner, 1, leaseFor); err != nil {
		return reconcile.Lease{}, err
	}
	var l reconcile.Lease
	err := s.inTx(ctx, what, func(tx *sql.Tx) error {
		now := storeNow(s.now)
		l = reconcile.Lease{Kind: reconcile.JobPurchase, PurchaseID: purchaseID, Owner: owner, ExpiresAt: fromMicros(now.Add(leaseFor).UnixMicro()), Now: now}
		t := &txn{tx: tx, now: s.now}
		j, err := t.GetJob(ctx, purchaseID)
		switch {
		case errors.Is(err, reconcile.ErrNotFound), err == nil && j.Kind != reconcile.JobPurchase:
			return dialect.NotFound(what + ": no such job")
		case err != nil:
			return err
		}
		if why := sqlstore.ClaimRefusal(j, now); why != "" {
			return dialect.Conflict(what+" for "+owner, why)
		}
		l.TakenOver = j.LeaseOwner != ""
		err = tx.QueryRowContext(ctx, `UPDATE jobs
SET lease_owner = ?2,
    lease_token = lease_token + 1,
    lease_expires_at = ?3,
    checks = checks + 1
WHERE id = ?1
RETURNING lease_token, checks`, purchaseID, owner, l.ExpiresAt.UnixMicro()).Scan(&l.Token, &l.Checks)
		if err != nil {
			return wrap(err, "%s for %s", what, owner)
		}
		p, err := t.GetPurchase(ctx, purchaseID)
		if err != nil {
			return err
		}
		l.Purchase = &p
		return nil
	})
	if err != nil {
		return reconcile.Lease{}, err
	}
	return l, nil
}

// claim leases the jobs cand selects (id, taken: a statement reading the
// clock as ?1, the limit as ?2 and extra as ?3 on) and returns their leases in run_at
// order, each with its purchase and, for a refund's job, its refund.
func (s *Store) claim(ctx context.Context, what, cand, owner string, limit int, leaseFor time.Duration, extra ...any) ([]reconcile.Lease, error) {
	if err := dialect.CheckClaim(what, owner, limit, leaseFor); err != nil {
		return nil, err
	}
	fail := func(err error) error { return wrap(err, "%s for %s", what, owner) }
	var leases []reconcile.Lease
	err := s.inTx(ctx, what, func(tx *sql.Tx) error {
		leases = nil
		// The clock is read under the write lock: a claim that waited for
		// it judges by the time it got it.
		now := storeNow(s.now)
		// The lease's expiry as stored: to the microsecond.
		expires := fromMicros(now.Add(leaseFor).UnixMicro())
		// The write lock is ours until commit: what this reads is what
		// the UPDATE below leases, and nobody else can claim it between.
		rows, err := tx.QueryContext(ctx, cand, append([]any{now.UnixMicro(), limit}, extra...)...)
		if err != nil {
			return fail(err)
		}
		var ids []string
		taken := map[string]bool{}
		for rows.Next() {
			var id string
			var wasTaken bool
			if err := rows.Scan(&id, &wasTaken); err != nil {
				rows.Close()
				return fail(err)
			}
			ids = append(ids, id)
			taken[id] = wasTaken
		}
		if err := rows.Err(); err != nil {
			return fail(err)
		}
		if len(ids) == 0 {
			return nil
		}
		list, err := json.Marshal(ids)
		if err != nil {
			return fail(err)
		}
		rows, err = tx.QueryContext(ctx, `UPDATE jobs
SET lease_owner = ?1,
    lease_token = lease_token + 1,
    lease_expires_at = ?2,
    checks = checks + 1
WHERE id IN (SELECT value FROM json_each(?3))
RETURNING id, kind, purchase_id, refund_id, lease_token, checks, run_at`, owner, expires.UnixMicro(), string(list))
		if err != nil {
			return fail(err)
		}
		runAt := make(map[string]int64, len(ids))
		var purchaseIDs, refundIDs []string
		for rows.Next() {
			var id, kind string
			var refundID *string
			var at int64
			l := reconcile.Lease{Owner: owner, ExpiresAt: expires, Now: now}
			if err := rows.Scan(&id, &kind, &l.PurchaseID, &refundID, &l.Token, &l.Checks, &at); err != nil {
				rows.Close()
				return fail(err)
			}
			l.Kind, l.RefundID, l.TakenOver = reconcile.JobKind(kind), sqlstore.DerefString(refundID), taken[id]
			runAt[id] = at
			purchaseIDs = append(purchaseIDs, l.PurchaseID)
			if l.RefundID != "" {
				refundIDs = append(refundIDs, l.RefundID)
			}
			leases = append(leases, l)
		}
		if err := rows.Err(); err != nil {
			return fail(err)
		}
		if len(leases) != len(ids) {
			return fmt.Errorf("%s: %s for %s: %d jobs were selected but %d leased", dialect, what, owner, len(ids), len(leases))
		}
		// The leases in run_at order, as the store promises, each with what
		// it moves read under the same write lock.
		slices.SortFunc(leases, func(a, b reconcile.Lease) int {
			if c := cmp.Compare(runAt[a.JobID()], runAt[b.JobID()]); c != 0 {
				return c
			}
			return strings.Compare(a.JobID(), b.JobID())
		})
		t := &txn{tx: tx, now: s.now}
		ps, err := t.FindPurchases(ctx, purchaseIDs, nil)
		if err != nil {
			return err
		}
		purchases := make(map[string]*reconcile.Purchase, len(ps))
		for i := range ps {
			purchases[ps[i].ID] = &ps[i]
		}
		rs, err := t.FindRefunds(ctx, refundIDs, nil)
		if err != nil {
			return err
		}
		refunds := make(map[string]*reconcile.Refund, len(rs))
		for i := range rs {
			refunds[rs[i].ID] = &rs[i]
		}
		for i := range leases {
			leases[i].Purchase = purchases[leases[i].PurchaseID]
			if leases[i].RefundID != "" {
				leases[i].Refund = refunds[leases[i].RefundID]
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return leases, nil
}

// ReleaseLeases implements reconcile.Store.
func (s *Store) ReleaseLeases(ctx context.Context, owner string) (int, error) {
	var n int64
	err := s.inTx(ctx, "release leases", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE jobs SET lease_owner = NULL, lease_expires_at = NULL, run_at = ?2
WHERE lease_owner = ?1 AND done_at IS NULL`, owner, storeNow(s.now).UnixMicro())
		if err != nil {
			return wrap(err, "release leases of %s", owner)
		}
		n, err = res.RowsAffected()
		if err != nil {
			return wrap(err, "release leases of %s", owner)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return int(n), nil
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
VALUES (?1, ?2, ?3, ?4, COALESCE((SELECT account FROM purchases WHERE id = ?2), ''))`,
		sqlstore.JobKind(job.Kind), job.PurchaseID, sqlstore.NullString(job.RefundID), micros(job.RunAt))
	if err != nil {
		return t.wrapAuditRef(ctx, err, job.PurchaseID, "refund", job.RefundID, "%s", what)
	}
	return nil
}

// GetJob implements reconcile.Tx.
func (t *txn) GetJob(ctx context.Context, jobID string) (reconcile.Job, error) {
	return queryOne(ctx, t, scanJob, "get job "+jobID,
		`SELECT `+jobColumns+` FROM jobs WHERE id = ?1`, jobID)
}

// CheckLease implements reconcile.Tx with a plain read: the transaction
// holds the database's write lock since BEGIN IMMEDIATE, so no claim, in
// this process or another, can take the job over before it ends.
func (t *txn) CheckLease(ctx context.Context, l reconcile.Lease) error {
	now := storeNow(t.now)
	j, err := t.GetJob(ctx, l.JobID())
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		return dialect.LeaseLost(l, sqlstore.NoSuchJob)
	case err != nil:
		return fmt.Errorf("%s: check lease of job %s: %w", dialect, l.JobID(), err)
	case j.LeaseOwner == l.Owner && j.LeaseToken == l.Token && j.LeaseOwner != "" && j.LeaseExpiresAt.After(now):
		return nil
	}
	// Say what happened to the lease.
	return dialect.LeaseLost(l, sqlstore.LeaseLostDetail(j, l))
}

// RescheduleJob implements reconcile.Tx.
func (t *txn) RescheduleJob(ctx context.Context, jobID string, runAt time.Time) error {
	return t.execOne(ctx, "reschedule job "+jobID,
		`UPDATE jobs SET run_at = ?2, lease_owner = NULL, lease_expires_at = NULL WHERE id = ?1`,
		jobID, micros(runAt))
}

// CompleteJob implements reconcile.Tx.
func (t *txn) CompleteJob(ctx context.Context, jobID string, now time.Time) error {
	return t.execOne(ctx, "complete job "+jobID,
		`UPDATE jobs SET done_at = ?2, lease_owner = NULL, lease_expires_at = NULL WHERE id = ?1`,
		jobID, micros(now))
}

// ReopenJob implements reconcile.Tx.
func (t *txn) ReopenJob(ctx context.Context, jobID string, runAt time.Time) error {
	return t.execOne(ctx, "reopen job "+jobID,
		`UPDATE jobs SET done_at = NULL, run_at = ?2,
    account = COALESCE((SELECT p.account FROM purchases AS p WHERE p.id = jobs.purchase_id), '')
WHERE id = ?1`,
		jobID, micros(runAt))
}

// scanJob reads one row of jobColumns.
func scanJob(row sqlstore.Row) (reconcile.Job, error) {
	var j reconcile.Job
	var kind string
	var owner, refundID *string
	var runAt int64
	var expires, done *int64
	if err := row.Scan(&kind, &j.PurchaseID, &refundID, &runAt, &owner, &j.LeaseToken, &expires, &j.Checks, &done); err != nil {
		return reconcile.Job{}, err
	}
	j.Kind = reconcile.JobKind(kind)
	j.RefundID = sqlstore.DerefString(refundID)
	j.RunAt = fromMicros(runAt)
	j.LeaseOwner = sqlstore.DerefString(owner)
	j.LeaseExpiresAt = fromNullMicros(expires)
	j.DoneAt = fromNullMicros(done)
	return j, nil
}
