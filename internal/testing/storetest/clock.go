package storetest

import (
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/reconcile"
)

// The store owns the clock: claims, lease checks, releases and sweep
// locks read the store's now, not an argument. The suite injects a clock
// it sets by hand into every store it makes (the newStore argument of
// Run), and checks that the store follows it, to the microsecond, and
// returns it as each Lease's Now.

// testStore is a store under test with the clock injected into it.
type testStore struct {
	reconcile.Store
	clock *testclock.Clock
}

// openStore adapts Run's newStore: each call makes a fresh store whose
// clock starts at base.
func openStore(newStore func(*testing.T, func() time.Time) reconcile.Store) func(*testing.T) *testStore {
	return func(t *testing.T) *testStore {
		t.Helper()
		c := testclock.New(base)
		return &testStore{Store: newStore(t, c.Now), clock: c}
	}
}

// storeNow returns Store.Now, then Tx.Now, each in UTC to the
// microsecond.
func storeNow(t *testing.T, s reconcile.Store) (storeNow, txNow time.Time) {
	t.Helper()
	storeNow, err := s.Now(t.Context())
	if err != nil {
		t.Fatalf("Store.Now: %v", err)
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		txNow, err = tx.Now(t.Context())
		return err
	})
	for _, now := range []time.Time{storeNow, txNow} {
		if now.Location() != time.UTC || !now.Equal(now.Truncate(time.Microsecond)) {
			t.Fatalf("Now = %s: want UTC, to the microsecond", now)
		}
	}
	return storeNow, txNow
}

// testStoreClock checks that every time the store judges by is its
// injected clock's.
func testStoreClock(t *testing.T, newStore func(*testing.T) *testStore) {
	const leaseFor = 30 * time.Second

	parallel(t, "NowIsTheInjectedClock", func(t *testing.T) {
		s := newStore(t)
		for _, tc := range []struct {
			name      string
			set, want time.Time
		}{
			{"start", base, base},
			{"in another zone, finer than a microsecond", at(time.Hour + 1500*time.Nanosecond).In(time.FixedZone("UTC-7", -7*3600)), at(time.Hour + time.Microsecond)},
			{"set back", at(-time.Minute), at(-time.Minute)},
		} {
			s.clock.Set(tc.set)
			got, inTxNow := storeNow(t, s)
			equal(t, tc.name+": Store.Now", got, tc.want)
			equal(t, tc.name+": Tx.Now", inTxNow, tc.want)
		}
	})

	parallel(t, "ClaimsJudgeByTheClock", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", at(time.Minute))
		// Claim at 59s: not due. Every claim reads the clock itself.
		if got := claim(t, s, "w1", 10, at(59*time.Second), leaseFor); len(got) != 0 {
			t.Fatalf("claimed %v before the store's clock reached its run_at", ids(got))
		}
		now := at(time.Minute + 7*time.Microsecond)
		l := claimOne(t, s, "w1", "pur_1", now, leaseFor)
		equal(t, "lease", l, reconcile.Lease{Kind: reconcile.JobPurchase, PurchaseID: "pur_1", Owner: "w1", Token: 1, ExpiresAt: now.Add(leaseFor), Checks: 1, Now: now})
	})

	parallel(t, "LeaseLostOnceTheClockPassesItsExpiry", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		l := claimOne(t, s, "w1", "pur_1", base, leaseFor)
		// Nothing but the store's clock moves: the lease holds until it
		// reaches the expiry, and is lost from then on.
		for _, step := range []struct {
			now  time.Time
			lost bool
		}{
			{base, false},
			{l.ExpiresAt.Add(-time.Microsecond), false},
			{l.ExpiresAt, true},
			{l.ExpiresAt.Add(time.Hour), true},
		} {
			err := checkLease(t, s, l, step.now)
			if step.lost {
				wantErr(t, "CheckLease at "+step.now.Format(time.RFC3339Nano), err, reconcile.ErrLeaseLost)
			} else if err != nil {
				t.Fatalf("CheckLease at %s: %v", step.now.Format(time.RFC3339Nano), err)
			}
		}
		equal(t, "job after the checks", getJob(t, s, "pur_1"), reconcile.Job{
			Kind: reconcile.JobPurchase, PurchaseID: "pur_1", RunAt: base, LeaseOwner: "w1", LeaseToken: 1, LeaseExpiresAt: l.ExpiresAt, Checks: 1,
		})
	})

	parallel(t, "ReleaseLeasesAtTheClock", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		claimOne(t, s, "w1", "pur_1", base, leaseFor)
		now := at(10*time.Second + 3*time.Microsecond)
		s.clock.Set(now)
		if n, err := s.ReleaseLeases(t.Context(), "w1"); err != nil || n != 1 {
			t.Fatalf("ReleaseLeases = %d, %v; want 1, nil", n, err)
		}
		equal(t, "released job", getJob(t, s, "pur_1"), reconcile.Job{Kind: reconcile.JobPurchase, PurchaseID: "pur_1", RunAt: now, LeaseToken: 1, Checks: 1})
	})

	parallel(t, "SweepLocksExpireByTheClock", func(t *testing.T) {
		s := newStore(t)
		if !acquire(t, s, "retention", "a", base, time.Minute) {
			t.Fatal("AcquireSweepLock of a free lock refused")
		}
		if acquire(t, s, "retention", "b", at(time.Minute-time.Microsecond), time.Minute) {
			t.Fatal("AcquireSweepLock took a lock the store's clock says is held")
		}
		if !acquire(t, s, "retention", "b", at(time.Minute), time.Minute) {
			t.Fatal("AcquireSweepLock refused a lock the store's clock says expired")
		}
	})
}

// testDefaultClock checks a store without an injected clock (newStore's
// now nil): its clock is its default (the database server's, or this
// machine's for an embedded database), which the claims and lease checks
// read too.
func testDefaultClock(t *testing.T, s reconcile.Store) {
	const leaseFor = time.Hour
	ctx := t.Context()
	before, inTxNow := storeNow(t, s)
	if inTxNow.Before(before) {
		t.Fatalf("Tx.Now = %s, before the Store.Now read before it (%s)", inTxNow, before)
	}
	// The default clock is a real one: it cannot be far from this
	// machine's (a minute covers a remote server's drift).
	if d := time.Since(before); d < -time.Minute || d > time.Minute {
		t.Fatalf("Now = %s, %s away from this machine's clock", before, d)
	}
	purchaseWithJob(t, s, "pur_1", before)
	leases, err := s.ClaimJobs(ctx, "w1", 10, leaseFor)
	if err != nil || len(leases) != 1 {
		t.Fatalf("ClaimJobs of a job due at the store's now = %v, %v; want it", ids(leases), err)
	}
	l := leases[0]
	after, _ := storeNow(t, s)
	if l.Now.Before(before) || l.Now.After(after) || l.Now.Location() != time.UTC {
		t.Fatalf("Lease.Now = %s, want in UTC between the store's Now before (%s) and after (%s) the claim", l.Now, before, after)
	}
	equal(t, "lease expiry", l.ExpiresAt, l.Now.Add(leaseFor))
	if err := txErr(t, s, func(tx reconcile.Tx) error { return tx.CheckLease(ctx, l) }); err != nil {
		t.Fatalf("CheckLease of a lease of an hour, just taken: %v", err)
	}
	var locked bool
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		locked, err = tx.AcquireSweepLock(ctx, "retention", "w1", time.Minute)
		return err
	})
	if !locked {
		t.Fatal("AcquireSweepLock of a free lock refused")
	}
	if n, err := s.ReleaseLeases(ctx, "w1"); err != nil || n != 1 {
		t.Fatalf("ReleaseLeases = %d, %v; want 1, nil", n, err)
	}
	released := getJob(t, s, "pur_1").RunAt
	if now, _ := storeNow(t, s); released.Before(l.Now) || released.After(now) {
		t.Fatalf("released job due at %s, want the store's now at the release, between %s and %s", released, l.Now, now)
	}
}
