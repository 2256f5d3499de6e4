package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// The tests of jobs and leases: claims (due, expired, one job), lease
// checks, releases and the job's writes.

func insertJob(t *testing.T, s reconcile.Store, id string, runAt time.Time) {
	t.Helper()
	inTx(t, s, func(tx reconcile.Tx) error {
		return tx.InsertJob(t.Context(), reconcile.Job{Kind: reconcile.JobPurchase, PurchaseID: id, RunAt: runAt})
	})
}

// purchaseWithJob creates a purchase and its job, due at runAt.
func purchaseWithJob(t *testing.T, s reconcile.Store, id string, runAt time.Time) {
	t.Helper()
	insertPurchase(t, s, newPurchase(id))
	insertJob(t, s, id, runAt)
}

func getJob(t *testing.T, s reconcile.Store, id string) reconcile.Job {
	t.Helper()
	var j reconcile.Job
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		j, err = tx.GetJob(t.Context(), id)
		return err
	})
	return j
}

// claim sets the store's clock to now and claims. Every lease must say
// it was granted at now.
func claim(t *testing.T, s *testStore, owner string, limit int, now time.Time, leaseFor time.Duration) []reconcile.Lease {
	t.Helper()
	s.clock.Set(now)
	leases, err := s.ClaimJobs(t.Context(), owner, limit, leaseFor)
	if err != nil {
		t.Fatalf("ClaimJobs(%s, %d) at %s: %v", owner, limit, now, err)
	}
	checkLeaseNow(t, s, leases, now)
	return leases
}

// checkLeaseNow fails unless every lease's Now is now, in UTC, its
// Purchase is its purchase as stored (a refund's job's: the purchase of
// its refund), and its Refund is, for a refund's job, its refund as
// stored, nil for a purchase's; it then clears each Purchase and Refund,
// so that tests compare the leases alone.
func checkLeaseNow(t *testing.T, s reconcile.Store, leases []reconcile.Lease, now time.Time) {
	t.Helper()
	for i, l := range leases {
		if !l.Now.Equal(now) || l.Now.Location() != time.UTC {
			t.Fatalf("lease of %s granted at store time %s: Now = %s, want it in UTC", l.JobID(), now, l.Now)
		}
		if l.Purchase == nil {
			t.Fatalf("lease of %s: no purchase read with the claim", l.JobID())
		}
		equal(t, "purchase read with the lease of "+l.JobID(), *l.Purchase, getPurchase(t, s, l.PurchaseID))
		switch {
		case l.Kind == reconcile.JobRefund && l.Refund == nil:
			t.Fatalf("lease of refund job %s: no refund read with the claim", l.JobID())
		case l.Kind == reconcile.JobRefund:
			equal(t, "refund read with the lease of "+l.JobID(), *l.Refund, getRefund(t, s, l.RefundID))
		case l.Refund != nil:
			t.Fatalf("lease of purchase job %s came with refund %s", l.JobID(), l.Refund.ID)
		}
		leases[i].Purchase, leases[i].Refund = nil, nil
	}
}

// claimOne claims at now and fails unless exactly the job id comes back.
func claimOne(t *testing.T, s *testStore, owner, id string, now time.Time, leaseFor time.Duration) reconcile.Lease {
	t.Helper()
	leases := claim(t, s, owner, 10, now, leaseFor)
	if len(leases) != 1 || leases[0].JobID() != id {
		t.Fatalf("ClaimJobs at %s: got %v, want the job of %s alone", now, ids(leases), id)
	}
	return leases[0]
}

// ids returns the job ids of leases: the purchase id of a purchase's job,
// the refund id of a refund's.
func ids(leases []reconcile.Lease) []string {
	out := make([]string, len(leases))
	for i, l := range leases {
		out[i] = l.JobID()
	}
	return out
}

// checkLease sets the store's clock to now and checks l.
func checkLease(t *testing.T, s *testStore, l reconcile.Lease, now time.Time) error {
	t.Helper()
	s.clock.Set(now)
	return txErr(t, s, func(tx reconcile.Tx) error { return tx.CheckLease(t.Context(), l) })
}

func testJobs(t *testing.T, newStore func(*testing.T) *testStore) {
	const leaseFor = 30 * time.Second

	parallel(t, "InsertGet", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", at(time.Minute+3*time.Microsecond))
		equal(t, "new job", getJob(t, s, "pur_1"), reconcile.Job{Kind: reconcile.JobPurchase, PurchaseID: "pur_1", RunAt: at(time.Minute + 3*time.Microsecond)})

		err := txErr(t, s, func(tx reconcile.Tx) error {
			return tx.InsertJob(t.Context(), reconcile.Job{Kind: reconcile.JobPurchase, PurchaseID: "pur_1", RunAt: base})
		})
		wantErr(t, "second InsertJob", err, reconcile.ErrDuplicate)
		err = txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetJob(t.Context(), "pur_missing"); return err })
		wantErr(t, "GetJob(unknown)", err, reconcile.ErrNotFound)
	})

	parallel(t, "ClaimsOnlyDueJobs", func(t *testing.T) {
		s := newStore(t)
		for i, id := range []string{"pur_1", "pur_2", "pur_3"} {
			purchaseWithJob(t, s, id, at(time.Duration(i+1)*time.Minute))
		}
		if got := claim(t, s, "w1", 10, at(59*time.Second), leaseFor); len(got) != 0 {
			t.Fatalf("claimed %v before anything was due", ids(got))
		}
		now := at(2 * time.Minute) // run_at <= now is due: pur_1 and pur_2
		got := claim(t, s, "w1", 10, now, leaseFor)
		want := []reconcile.Lease{
			{Kind: reconcile.JobPurchase, PurchaseID: "pur_1", Owner: "w1", Token: 1, ExpiresAt: now.Add(leaseFor), Checks: 1, Now: now},
			{Kind: reconcile.JobPurchase, PurchaseID: "pur_2", Owner: "w1", Token: 1, ExpiresAt: now.Add(leaseFor), Checks: 1, Now: now},
		}
		equal(t, "leases", got, want)
		equal(t, "leased job", getJob(t, s, "pur_1"), reconcile.Job{
			Kind: reconcile.JobPurchase, PurchaseID: "pur_1", RunAt: at(time.Minute), LeaseOwner: "w1", LeaseToken: 1, LeaseExpiresAt: now.Add(leaseFor), Checks: 1,
		})
		equal(t, "job not yet due", getJob(t, s, "pur_3"), reconcile.Job{Kind: reconcile.JobPurchase, PurchaseID: "pur_3", RunAt: at(3 * time.Minute)})
	})

	parallel(t, "LimitAndOrder", func(t *testing.T) {
		s := newStore(t)
		// Inserted out of run_at order.
		for _, j := range []struct {
			id  string
			run time.Duration
		}{{"pur_c", 3}, {"pur_e", 5}, {"pur_a", 1}, {"pur_d", 4}, {"pur_b", 2}} {
			purchaseWithJob(t, s, j.id, at(j.run*time.Second))
		}
		now := at(time.Minute)
		var order []string
		for _, wantN := range []int{2, 2, 1, 0} {
			got := claim(t, s, "w1", 2, now, leaseFor)
			if len(got) != wantN {
				t.Fatalf("claim with limit 2: got %v, want %d jobs", ids(got), wantN)
			}
			order = append(order, ids(got)...)
		}
		equal(t, "claim order", order, []string{"pur_a", "pur_b", "pur_c", "pur_d", "pur_e"})
	})

	parallel(t, "LeaseExpiryAndTakeover", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		first := claimOne(t, s, "w1", "pur_1", base, leaseFor)
		if first.TakenOver || first.Token != 1 {
			t.Fatalf("first claim: %+v, want token 1, not taken over", first)
		}
		if got := claim(t, s, "w2", 10, first.ExpiresAt.Add(-time.Microsecond), leaseFor); len(got) != 0 {
			t.Fatalf("claimed %v while the lease was still valid", ids(got))
		}
		now := first.ExpiresAt // lease_expires_at <= now: expired
		second := claimOne(t, s, "w2", "pur_1", now, leaseFor)
		equal(t, "takeover lease", second, reconcile.Lease{
			Kind: reconcile.JobPurchase, PurchaseID: "pur_1", Owner: "w2", Token: 2, ExpiresAt: now.Add(leaseFor), TakenOver: true, Checks: 2, Now: now,
		})
	})

	parallel(t, "TokensIncreaseOnEveryClaim", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		now := base
		var last int64
		for i := range 5 {
			l := claimOne(t, s, fmt.Sprintf("w%d", i%2), "pur_1", now, leaseFor)
			if l.Token <= last || l.Checks != i+1 || l.TakenOver {
				t.Fatalf("claim %d: %+v; want token > %d, checks %d, not taken over", i+1, l, last, i+1)
			}
			last = l.Token
			inTx(t, s, func(tx reconcile.Tx) error {
				if err := tx.CheckLease(t.Context(), l); err != nil {
					return err
				}
				return tx.RescheduleJob(t.Context(), "pur_1", now.Add(time.Second))
			})
			now = now.Add(time.Second)
		}
	})

	parallel(t, "RescheduleReleasesLease", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		l := claimOne(t, s, "w1", "pur_1", base, leaseFor)
		runAt := at(10 * time.Minute)
		inTx(t, s, func(tx reconcile.Tx) error {
			if err := tx.CheckLease(t.Context(), l); err != nil {
				return err
			}
			return tx.RescheduleJob(t.Context(), "pur_1", runAt)
		})
		equal(t, "rescheduled job", getJob(t, s, "pur_1"), reconcile.Job{Kind: reconcile.JobPurchase, PurchaseID: "pur_1", RunAt: runAt, LeaseToken: 1, Checks: 1})
		wantErr(t, "CheckLease after reschedule", checkLease(t, s, l, base), reconcile.ErrLeaseLost)
		if got := claim(t, s, "w2", 10, runAt.Add(-time.Microsecond), leaseFor); len(got) != 0 {
			t.Fatalf("claimed %v before its new run_at", ids(got))
		}
		next := claimOne(t, s, "w2", "pur_1", runAt, leaseFor)
		if next.TakenOver || next.Token != 2 {
			t.Fatalf("claim after reschedule: %+v; want token 2, not taken over (the lease was released)", next)
		}
		err := txErr(t, s, func(tx reconcile.Tx) error { return tx.RescheduleJob(t.Context(), "pur_missing", base) })
		wantErr(t, "RescheduleJob(unknown)", err, reconcile.ErrNotFound)
	})

	parallel(t, "DoneJobsNeverClaimed", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		purchaseWithJob(t, s, "pur_2", at(time.Hour))
		l := claimOne(t, s, "w1", "pur_1", base, leaseFor)
		inTx(t, s, func(tx reconcile.Tx) error {
			if err := tx.CheckLease(t.Context(), l); err != nil {
				return err
			}
			if err := tx.CompleteJob(t.Context(), "pur_1", at(time.Second)); err != nil {
				return err
			}
			return tx.CompleteJob(t.Context(), "pur_2", at(time.Second)) // never leased
		})
		equal(t, "done job", getJob(t, s, "pur_1"), reconcile.Job{Kind: reconcile.JobPurchase, PurchaseID: "pur_1", RunAt: base, LeaseToken: 1, Checks: 1, DoneAt: at(time.Second)})
		if got := claim(t, s, "w1", 10, at(1000*time.Hour), leaseFor); len(got) != 0 {
			t.Fatalf("claimed done jobs %v", ids(got))
		}
		err := txErr(t, s, func(tx reconcile.Tx) error { return tx.CompleteJob(t.Context(), "pur_missing", base) })
		wantErr(t, "CompleteJob(unknown)", err, reconcile.ErrNotFound)
	})

	parallel(t, "ReopenDoneJob", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		l := claimOne(t, s, "w1", "pur_1", base, leaseFor)
		inTx(t, s, func(tx reconcile.Tx) error {
			if err := tx.CheckLease(t.Context(), l); err != nil {
				return err
			}
			return tx.CompleteJob(t.Context(), "pur_1", at(time.Second))
		})
		runAt := at(time.Hour + 3*time.Microsecond)
		inTx(t, s, func(tx reconcile.Tx) error { return tx.ReopenJob(t.Context(), "pur_1", runAt) })
		equal(t, "reopened job", getJob(t, s, "pur_1"), reconcile.Job{Kind: reconcile.JobPurchase, PurchaseID: "pur_1", RunAt: runAt, LeaseToken: 1, Checks: 1})
		if got := claim(t, s, "w2", 10, runAt.Add(-time.Microsecond), leaseFor); len(got) != 0 {
			t.Fatalf("claimed %v before the reopened job's run_at", ids(got))
		}
		next := claimOne(t, s, "w2", "pur_1", runAt, leaseFor)
		if next.TakenOver || next.Token != 2 || next.Checks != 2 {
			t.Fatalf("claim of the reopened job: %+v; want token 2, checks 2, not taken over", next)
		}
		// ClaimJob takes a reopened job too.
		inTx(t, s, func(tx reconcile.Tx) error {
			if err := tx.CheckLease(t.Context(), next); err != nil {
				return err
			}
			return tx.CompleteJob(t.Context(), "pur_1", runAt)
		})
		inTx(t, s, func(tx reconcile.Tx) error { return tx.ReopenJob(t.Context(), "pur_1", at(24*time.Hour)) })
		if _, err := s.ClaimJob(t.Context(), "pur_1", "operator", leaseFor); err != nil {
			t.Fatalf("ClaimJob of a reopened job not yet due: %v", err)
		}
		err := txErr(t, s, func(tx reconcile.Tx) error { return tx.ReopenJob(t.Context(), "pur_missing", base) })
		wantErr(t, "ReopenJob(unknown)", err, reconcile.ErrNotFound)
	})

	parallel(t, "ReopenLeavesALiveLeaseAlone", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		l := claimOne(t, s, "w1", "pur_1", base, leaseFor)
		runAt := at(10 * time.Second)
		inTx(t, s, func(tx reconcile.Tx) error { return tx.ReopenJob(t.Context(), "pur_1", runAt) })
		equal(t, "leased job after ReopenJob", getJob(t, s, "pur_1"), reconcile.Job{
			Kind: reconcile.JobPurchase, PurchaseID: "pur_1", RunAt: runAt, LeaseOwner: "w1", LeaseToken: 1, LeaseExpiresAt: l.ExpiresAt, Checks: 1,
		})
		if err := checkLease(t, s, l, runAt); err != nil {
			t.Fatalf("the lease after ReopenJob: %v", err)
		}
		if got := claim(t, s, "w2", 10, l.ExpiresAt.Add(-time.Microsecond), leaseFor); len(got) != 0 {
			t.Fatalf("claimed %v while its lease, untouched by ReopenJob, was live", ids(got))
		}
		// The worker holding it finishes and reschedules; the job is due
		// again when that says.
		inTx(t, s, func(tx reconcile.Tx) error {
			if err := tx.CheckLease(t.Context(), l); err != nil {
				return err
			}
			return tx.RescheduleJob(t.Context(), "pur_1", runAt)
		})
		next := claimOne(t, s, "w2", "pur_1", l.ExpiresAt, leaseFor)
		if next.TakenOver || next.Token != 2 {
			t.Fatalf("claim after the holder released it: %+v; want token 2, not taken over", next)
		}
	})

	parallel(t, "CheckLease", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		old := claimOne(t, s, "w1", "pur_1", base, leaseFor)

		for _, tc := range []struct {
			name    string
			lease   reconcile.Lease
			now     time.Time
			wantErr error
		}{
			{"current", old, old.ExpiresAt.Add(-time.Microsecond), nil},
			{"expired", old, old.ExpiresAt, reconcile.ErrLeaseLost},
			{"other owner", func() reconcile.Lease { l := old; l.Owner = "w2"; return l }(), base, reconcile.ErrLeaseLost},
			{"other token", func() reconcile.Lease { l := old; l.Token++; return l }(), base, reconcile.ErrLeaseLost},
			{"unknown job", func() reconcile.Lease { l := old; l.PurchaseID = "pur_missing"; return l }(), base, reconcile.ErrLeaseLost},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := checkLease(t, s, tc.lease, tc.now)
				if tc.wantErr == nil {
					if err != nil {
						t.Fatalf("CheckLease: %v", err)
					}
					return
				}
				wantErr(t, "CheckLease", err, tc.wantErr)
			})
		}

		// After a takeover the old token is stale, even at a time its own
		// expiry has not reached.
		taken := claimOne(t, s, "w1", "pur_1", old.ExpiresAt, leaseFor) // same owner, new token
		wantErr(t, "CheckLease with the stale token", checkLease(t, s, old, old.ExpiresAt.Add(-time.Second)), reconcile.ErrLeaseLost)
		if err := checkLease(t, s, taken, old.ExpiresAt); err != nil {
			t.Fatalf("CheckLease with the new lease: %v", err)
		}
	})

	parallel(t, "ReleaseLeases", func(t *testing.T) {
		s := newStore(t)
		for _, id := range []string{"pur_1", "pur_2", "pur_3", "pur_4"} {
			purchaseWithJob(t, s, id, base)
		}
		w1 := claim(t, s, "w1", 2, base, leaseFor)
		w2 := claim(t, s, "w2", 2, base, leaseFor)
		if len(w1) != 2 || len(w2) != 2 {
			t.Fatalf("claims: w1 %v, w2 %v; want 2 each", ids(w1), ids(w2))
		}
		now := at(time.Second)
		s.clock.Set(now)
		n, err := s.ReleaseLeases(t.Context(), "w1")
		if err != nil || n != 2 {
			t.Fatalf("ReleaseLeases(w1) = %d, %v; want 2, nil", n, err)
		}
		for _, l := range w1 {
			equal(t, "released job", getJob(t, s, l.PurchaseID), reconcile.Job{Kind: reconcile.JobPurchase, PurchaseID: l.PurchaseID, RunAt: now, LeaseToken: 1, Checks: 1})
			wantErr(t, "CheckLease of a released lease", checkLease(t, s, l, now), reconcile.ErrLeaseLost)
		}
		for _, l := range w2 {
			if err := checkLease(t, s, l, now); err != nil {
				t.Fatalf("w2's lease of %s after releasing w1's: %v", l.PurchaseID, err)
			}
		}
		again := claim(t, s, "w3", 10, now, leaseFor)
		equal(t, "jobs claimable after release", sorted(ids(again)), sorted(ids(w1)))
		for _, l := range again {
			if l.TakenOver || l.Token != 2 {
				t.Fatalf("claim after release: %+v; want token 2, not taken over", l)
			}
		}
		if n, err := s.ReleaseLeases(t.Context(), "w-none"); err != nil || n != 0 {
			t.Fatalf("ReleaseLeases(unknown owner) = %d, %v; want 0, nil", n, err)
		}
	})
}

// testConcurrentClaims has several claimers race over many due jobs: each
// job must be handed out exactly once.
func testConcurrentClaims(t *testing.T, s *testStore) {
	const (
		jobs     = 200
		claimers = 4
	)
	inTx(t, s, func(tx reconcile.Tx) error {
		for i := range jobs {
			id := fmt.Sprintf("pur_%03d", i)
			p := newPurchase(id)
			if err := tx.InsertPurchase(t.Context(), p); err != nil {
				return err
			}
			if err := tx.InsertJob(t.Context(), reconcile.Job{Kind: reconcile.JobPurchase, PurchaseID: id, RunAt: at(time.Duration(i) * time.Millisecond)}); err != nil {
				return err
			}
		}
		return nil
	})
	now := at(time.Hour)
	s.clock.Set(now)
	start := make(chan struct{})
	var wg sync.WaitGroup
	got := make([][]reconcile.Lease, claimers)
	errs := make([]error, claimers)
	for c := range claimers {
		wg.Go(func() {
			<-start
			owner := fmt.Sprintf("w%d", c)
			for {
				leases, err := s.ClaimJobs(t.Context(), owner, 7, time.Minute)
				if err != nil {
					errs[c] = err
					return
				}
				if len(leases) == 0 {
					return
				}
				got[c] = append(got[c], leases...)
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("ClaimJobs: %v", err)
	}
	seen := map[string]string{}
	for c, leases := range got {
		for _, l := range leases {
			owner := fmt.Sprintf("w%d", c)
			if prev, dup := seen[l.PurchaseID]; dup {
				t.Fatalf("job %s handed to %s and %s", l.PurchaseID, prev, owner)
			}
			if l.Owner != owner || l.Token != 1 {
				t.Fatalf("lease %+v: want owner %s, token 1", l, owner)
			}
			seen[l.PurchaseID] = owner
		}
	}
	if len(seen) != jobs {
		t.Fatalf("%d jobs handed out, want %d", len(seen), jobs)
	}
	for _, leases := range got {
		checkLeaseNow(t, s, leases, now)
	}
	if rest := claim(t, s, "w-late", jobs, now, time.Minute); len(rest) != 0 {
		t.Fatalf("%d jobs still claimable after the race", len(rest))
	}
}

func testClaimExpiredJobs(t *testing.T, s *testStore) {
	const leaseFor = 30 * time.Second
	claimExpired := func(owner string, limit int, now time.Time) []reconcile.Lease {
		t.Helper()
		s.clock.Set(now)
		leases, err := s.ClaimExpiredJobs(t.Context(), owner, limit, leaseFor)
		if err != nil {
			t.Fatalf("ClaimExpiredJobs(%s, %d) at %s: %v", owner, limit, now, err)
		}
		checkLeaseNow(t, s, leases, now)
		return leases
	}

	// pur_exp1 and pur_exp2: leased at 0s until 30s, never released.
	purchaseWithJob(t, s, "pur_exp1", base)
	purchaseWithJob(t, s, "pur_exp2", base)
	dead := claim(t, s, "w-dead", 10, base, leaseFor)
	if len(dead) != 2 {
		t.Fatalf("ClaimJobs at 0s: %v, want pur_exp1 and pur_exp2", ids(dead))
	}
	// pur_live: leased at 20s until 50s.
	purchaseWithJob(t, s, "pur_live", at(20*time.Second))
	live := claimOne(t, s, "w-live", "pur_live", at(20*time.Second), leaseFor)
	// pur_due: due at 25s, never leased.
	purchaseWithJob(t, s, "pur_due", at(25*time.Second))
	// pur_released: leased, then released to be due at 10s.
	purchaseWithJob(t, s, "pur_released", at(time.Second))
	rel := claimOne(t, s, "w-live", "pur_released", at(time.Second), leaseFor)
	inTx(t, s, func(tx reconcile.Tx) error {
		if err := tx.CheckLease(t.Context(), rel); err != nil {
			return err
		}
		return tx.RescheduleJob(t.Context(), "pur_released", at(10*time.Second))
	})
	// pur_done: leased, then completed.
	purchaseWithJob(t, s, "pur_done", at(2*time.Second))
	done := claimOne(t, s, "w-live", "pur_done", at(2*time.Second), leaseFor)
	inTx(t, s, func(tx reconcile.Tx) error {
		if err := tx.CheckLease(t.Context(), done); err != nil {
			return err
		}
		return tx.CompleteJob(t.Context(), "pur_done", at(3*time.Second))
	})

	if got := claimExpired("w-rescue", 10, at(29*time.Second)); len(got) != 0 {
		t.Fatalf("ClaimExpiredJobs before any lease expired: %v", ids(got))
	}
	now := at(40 * time.Second)
	first := claimExpired("w-rescue", 1, now)
	if len(first) != 1 {
		t.Fatalf("ClaimExpiredJobs with limit 1: %v, want one job", ids(first))
	}
	rest := claimExpired("w-rescue", 10, now)
	got := append(first, rest...)
	equal(t, "expired jobs claimed", sorted(ids(got)), []string{"pur_exp1", "pur_exp2"})
	for _, l := range got {
		equal(t, "rescue lease", l, reconcile.Lease{
			Kind: reconcile.JobPurchase, PurchaseID: l.PurchaseID, Owner: "w-rescue", Token: 2, ExpiresAt: now.Add(leaseFor), TakenOver: true, Checks: 2, Now: now,
		})
	}
	for _, l := range dead {
		wantErr(t, "CheckLease of the dead worker", checkLease(t, s, l, at(29*time.Second)), reconcile.ErrLeaseLost)
	}
	if err := checkLease(t, s, live, now); err != nil {
		t.Fatalf("the live lease after a rescue claim: %v", err)
	}
	if got := claimExpired("w-rescue", 10, now); len(got) != 0 {
		t.Fatalf("ClaimExpiredJobs again: %v, want none", ids(got))
	}
	// The due, unleased jobs are still there for an ordinary claim.
	equal(t, "due jobs left for ClaimJobs", sorted(ids(claim(t, s, "w1", 10, now, leaseFor))), []string{"pur_due", "pur_released"})
}

// testClaimJob covers the operator's recheck: one job, due or not.
func testClaimJob(t *testing.T, s *testStore) {
	const leaseFor = 30 * time.Second
	// claimJob sets the store's clock to now and claims. A lease must
	// say it was granted at now.
	claimJob := func(id, owner string, now time.Time) (reconcile.Lease, error) {
		t.Helper()
		s.clock.Set(now)
		l, err := s.ClaimJob(t.Context(), id, owner, leaseFor)
		if err == nil {
			leases := []reconcile.Lease{l}
			checkLeaseNow(t, s, leases, now)
			l = leases[0]
		}
		return l, err
	}
	purchaseWithJob(t, s, "pur_1", at(time.Hour)) // not due for an hour
	first, err := claimJob("pur_1", "operator-w", base)
	if err != nil {
		t.Fatalf("ClaimJob of a job not yet due: %v", err)
	}
	equal(t, "first lease", first, reconcile.Lease{Kind: reconcile.JobPurchase, PurchaseID: "pur_1", Owner: "operator-w", Token: 1, ExpiresAt: base.Add(leaseFor), Checks: 1, Now: base})
	equal(t, "job leased by ClaimJob", getJob(t, s, "pur_1"), reconcile.Job{
		Kind: reconcile.JobPurchase, PurchaseID: "pur_1", RunAt: at(time.Hour), LeaseOwner: "operator-w", LeaseToken: 1, LeaseExpiresAt: first.ExpiresAt, Checks: 1,
	})

	_, err = claimJob("pur_1", "w2", first.ExpiresAt.Add(-time.Microsecond))
	wantErr(t, "ClaimJob while another owner holds the lease", err, reconcile.ErrConflict)

	// Expired: taken over, with a new token.
	second, err := claimJob("pur_1", "w2", first.ExpiresAt)
	if err != nil {
		t.Fatalf("ClaimJob after the lease expired: %v", err)
	}
	equal(t, "takeover lease", second, reconcile.Lease{
		Kind: reconcile.JobPurchase, PurchaseID: "pur_1", Owner: "w2", Token: 2, ExpiresAt: first.ExpiresAt.Add(leaseFor), TakenOver: true, Checks: 2, Now: first.ExpiresAt,
	})
	wantErr(t, "CheckLease of the lease ClaimJob took over", checkLease(t, s, first, base), reconcile.ErrLeaseLost)

	// Released: claimed again, not a takeover.
	s.clock.Set(first.ExpiresAt)
	inTx(t, s, func(tx reconcile.Tx) error {
		if err := tx.CheckLease(t.Context(), second); err != nil {
			return err
		}
		return tx.RescheduleJob(t.Context(), "pur_1", at(time.Hour))
	})
	third, err := claimJob("pur_1", "operator-w", first.ExpiresAt)
	if err != nil || third.Token != 3 || third.TakenOver {
		t.Fatalf("ClaimJob of a released job = %+v, %v; want token 3, not taken over", third, err)
	}

	// Done: never claimed again.
	inTx(t, s, func(tx reconcile.Tx) error {
		if err := tx.CheckLease(t.Context(), third); err != nil {
			return err
		}
		return tx.CompleteJob(t.Context(), "pur_1", first.ExpiresAt)
	})
	_, err = claimJob("pur_1", "operator-w", at(24*time.Hour))
	wantErr(t, "ClaimJob of a done job", err, reconcile.ErrConflict)

	_, err = claimJob("pur_missing", "operator-w", base)
	wantErr(t, "ClaimJob of an unknown job", err, reconcile.ErrNotFound)
}
