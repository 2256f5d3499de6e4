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

// expiredCand selects, oldest expiry first, up to ?2 open jobs whose
// lease expired at ?1 (now) without being released, from the partial
// index jobs_leased_idx.
const expiredCand = `SELECT purchase_id, 1 AS taken FROM jobs
WHERE done_at IS NULL AND lease_owner IS NOT NULL AND lease_expires_at <= ?1
ORDER BY lease_expires_at
LIMIT ?2`

// claimCand selects what ClaimJobs leases at ?1: jobs whose lease
// expired, then open, unleased jobs due at ?1 in the order of the partial
// index jobs_due_idx (run_at, purchase_id), which the scan reads off the
// front however many jobs share one run_at.
const claimCand = `SELECT * FROM (` + expiredCand + `)
UNION ALL
SELECT * FROM (SELECT purchase_id, 0 AS taken FROM jobs
    WHERE done_at IS NULL AND lease_owner IS NULL AND run_at <= ?1
    ORDER BY run_at, purchase_id
    LIMIT ?2)
LIMIT ?2`

// ClaimJobs implements reconcile.Store. It judges due and expired by the
// store's clock, read once it holds the write lock, and returns that time
// as each Lease's Now. owner must not be empty, limit and leaseFor must be
// positive (reconcile.ErrInvalid otherwise). A job whose previous lease
// was never released (it expired) comes back with TakenOver set. The
// leases come in run_at order, oldest first.
func (s *Store) ClaimJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
	return s.claim(ctx, "claim jobs", claimCand, owner, limit, leaseFor)
}

// ClaimExpiredJobs implements reconcile.Store: ClaimJobs restricted to
// jobs whose lease expired at the store's now without being released.
// Every lease it returns has TakenOver set.
func (s *Store) ClaimExpiredJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
	return s.claim(ctx, "claim expired jobs", expiredCand, owner, limit, leaseFor)
}

// ClaimJob implements reconcile.Store: it leases purchaseID's job, due or
// not, unless the job is done or holds an unexpired lease (whoever its
// owner, this one included), which give reconcile.ErrConflict. It reads
// and leases the job under the write lock of one transaction, so it waits
// for a worker between CheckLease and its commit (at most the busy
// timeout) and then judges the row that worker left, by the store's clock
// read then. owner must not be empty and leaseFor must be positive
// (reconcile.ErrInvalid otherwise).
func (s *Store) ClaimJob(ctx context.Context, purchaseID, owner string, leaseFor time.Duration) (reconcile.Lease, error) {
	what := "claim job of " + purchaseID
	if err := dialect.CheckClaim(what, owner, 1, leaseFor); err != nil {
		return reconcile.Lease{}, err
	}
	var l reconcile.Lease
	err := s.inTx(ctx, what, func(tx *sql.Tx) error {
		now := storeNow(s.now)
		l = reconcile.Lease{PurchaseID: purchaseID, Owner: owner, ExpiresAt: fromMicros(now.Add(leaseFor).UnixMicro()), Now: now}
		t := &txn{tx: tx, now: s.now}
		j, err := t.GetJob(ctx, purchaseID)
		switch {
		case errors.Is(err, reconcile.ErrNotFound):
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
WHERE purchase_id = ?1
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

// claim leases the jobs cand selects (purchase_id, taken: a statement
// reading the clock as ?1 and the limit as ?2) and returns their leases in
// run_at order, each with its purchase.
func (s *Store) claim(ctx context.Context, what, cand, owner string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
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
		rows, err := tx.QueryContext(ctx, cand, now.UnixMicro(), limit)
		if err != nil {
			return fail(err)
		}
		var ids []string
		for rows.Next() {
			l := reconcile.Lease{Owner: owner, ExpiresAt: expires, Now: now}
			if err := rows.Scan(&l.PurchaseID, &l.TakenOver); err != nil {
				rows.Close()
				return fail(err)
			}
			ids = append(ids, l.PurchaseID)
			leases = append(leases, l)
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
WHERE purchase_id IN (SELECT value FROM json_each(?3))
RETURNING purchase_id, lease_token, checks, run_at`, owner, expires.UnixMicro(), string(list))
		if err != nil {
			return fail(err)
		}
		type claimed struct {
			token  int64
			checks int
			runAt  int64
		}
		got := make(map[string]claimed, len(ids))
		for rows.Next() {
			var id string
			var c claimed
			if err := rows.Scan(&id, &c.token, &c.checks, &c.runAt); err != nil {
				rows.Close()
				return fail(err)
			}
			got[id] = c
		}
		if err := rows.Err(); err != nil {
			return fail(err)
		}
		for i := range leases {
			c, ok := got[leases[i].PurchaseID]
			if !ok {
				return fmt.Errorf("%s: %s for %s: job %s was selected but not leased", dialect, what, owner, leases[i].PurchaseID)
			}
			leases[i].Token, leases[i].Checks = c.token, c.checks
		}
		// The leases in run_at order, as the store promises, each with its
		// purchase read under the same write lock.
		slices.SortStableFunc(leases, func(a, b reconcile.Lease) int {
			if c := cmp.Compare(got[a.PurchaseID].runAt, got[b.PurchaseID].runAt); c != 0 {
				return c
			}
			return strings.Compare(a.PurchaseID, b.PurchaseID)
		})
		t := &txn{tx: tx, now: s.now}
		ps, err := t.FindPurchases(ctx, ids, nil)
		if err != nil {
			return err
		}
		byID := make(map[string]*reconcile.Purchase, len(ps))
		for i := range ps {
			byID[ps[i].ID] = &ps[i]
		}
		for i := range leases {
			leases[i].Purchase = byID[leases[i].PurchaseID]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return leases, nil
}

// ReleaseLeases implements reconcile.Store: every open job leased by
// owner, expired or not, loses its lease and becomes due at the store's
// now.
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

const jobColumns = `purchase_id, run_at, lease_owner, lease_token, lease_expires_at, checks, done_at`

// InsertJob implements reconcile.Tx: the job is due at job.RunAt, not
// leased, never run; the other fields of job are ignored. A second job for
// the same purchase gives reconcile.ErrDuplicate, an unknown purchase
// reconcile.ErrNotFound.
func (t *txn) InsertJob(ctx context.Context, job reconcile.Job) error {
	_, err := t.exec(ctx, `INSERT INTO jobs (purchase_id, run_at) VALUES (?1, ?2)`, job.PurchaseID, micros(job.RunAt))
	if err != nil {
		return wrapRef(err, "insert job of %s", job.PurchaseID)
	}
	return nil
}

// GetJob implements reconcile.Tx.
func (t *txn) GetJob(ctx context.Context, purchaseID string) (reconcile.Job, error) {
	return queryOne(ctx, t, scanJob, "get job of "+purchaseID,
		`SELECT `+jobColumns+` FROM jobs WHERE purchase_id = ?1`, purchaseID)
}

// CheckLease implements reconcile.Tx. It judges expiry by the store's
// clock read now (not at the transaction's start). It is a plain read:
// the transaction holds the database's write lock since BEGIN IMMEDIATE,
// so no claim, in this process or another, can take the job over before
// it ends.
func (t *txn) CheckLease(ctx context.Context, l reconcile.Lease) error {
	now := storeNow(t.now)
	j, err := t.GetJob(ctx, l.PurchaseID)
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		return dialect.LeaseLost(l, sqlstore.NoSuchJob)
	case err != nil:
		return fmt.Errorf("%s: check lease of job %s: %w", dialect, l.PurchaseID, err)
	case j.LeaseOwner == l.Owner && j.LeaseToken == l.Token && j.LeaseOwner != "" && j.LeaseExpiresAt.After(now):
		return nil
	}
	// Say what happened to the lease.
	return dialect.LeaseLost(l, sqlstore.LeaseLostDetail(j, l))
}

// RescheduleJob implements reconcile.Tx. A done job stays done.
func (t *txn) RescheduleJob(ctx context.Context, purchaseID string, runAt time.Time) error {
	return t.execOne(ctx, "reschedule job of "+purchaseID,
		`UPDATE jobs SET run_at = ?2, lease_owner = NULL, lease_expires_at = NULL WHERE purchase_id = ?1`,
		purchaseID, micros(runAt))
}

// CompleteJob implements reconcile.Tx.
func (t *txn) CompleteJob(ctx context.Context, purchaseID string, now time.Time) error {
	return t.execOne(ctx, "complete job of "+purchaseID,
		`UPDATE jobs SET done_at = ?2, lease_owner = NULL, lease_expires_at = NULL WHERE purchase_id = ?1`,
		purchaseID, micros(now))
}

// ReopenJob implements reconcile.Tx: the job is no longer done and is due
// at runAt. Its lease, if any, is left as it is (owner, token, expiry):
// a live lease keeps its worker, an expired one is taken over by the next
// claim.
func (t *txn) ReopenJob(ctx context.Context, purchaseID string, runAt time.Time) error {
	return t.execOne(ctx, "reopen job of "+purchaseID,
		`UPDATE jobs SET done_at = NULL, run_at = ?2 WHERE purchase_id = ?1`,
		purchaseID, micros(runAt))
}

// scanJob reads one row of jobColumns.
func scanJob(row sqlstore.Row) (reconcile.Job, error) {
	var j reconcile.Job
	var owner *string
	var runAt int64
	var expires, done *int64
	if err := row.Scan(&j.PurchaseID, &runAt, &owner, &j.LeaseToken, &expires, &j.Checks, &done); err != nil {
		return reconcile.Job{}, err
	}
	j.RunAt = fromMicros(runAt)
	j.LeaseOwner = sqlstore.DerefString(owner)
	j.LeaseExpiresAt = fromNullMicros(expires)
	j.DoneAt = fromNullMicros(done)
	return j, nil
}
