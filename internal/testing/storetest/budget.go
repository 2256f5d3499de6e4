package storetest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/workertest"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/budget"
)

// The tests of budget.Store, and of budget.Shared on each store, on the
// store's injected clock.

// budgetStore returns s as a budget.Store, or fails the test.
func budgetStore(t *testing.T, s *testStore) budget.Store {
	t.Helper()
	bs, ok := s.Store.(budget.Store)
	if !ok {
		t.Fatalf("%T does not implement budget.Store", s.Store)
	}
	return bs
}

func testBudgetBuckets(t *testing.T, newStore func(*testing.T) *testStore) {
	parallel(t, "RoundTrip", func(t *testing.T) {
		s := newStore(t)
		bs := budgetStore(t, s)
		ctx := t.Context()
		want := budget.Bucket{Name: "create", Stored: true, Tokens: 0.75, Rate: 12.5,
			UpdatedAt: at(time.Second), BlockedUntil: at(3 * time.Second), Credit: 1.25, Throttled: 3}
		want.Demand[1] = at(2 * time.Second)
		err := bs.UpdateBuckets(ctx, "acct", []string{"create", "global"}, func(now time.Time, b []*budget.Bucket) error {
			if !now.Equal(base) {
				return fmt.Errorf("now %v, want the store's clock %v", now, base)
			}
			if b[0].Stored || b[1].Stored || b[0].Name != "create" || b[1].Name != "global" {
				return fmt.Errorf("fresh buckets: %+v %+v, want unstored create and global", *b[0], *b[1])
			}
			*b[0] = want
			b[1].Tokens, b[1].Rate, b[1].UpdatedAt = 1, 25, at(time.Second)
			return nil
		})
		if err != nil {
			t.Fatalf("UpdateBuckets: %v", err)
		}
		got, err := bs.Buckets(ctx, "acct")
		if err != nil {
			t.Fatalf("Buckets: %v", err)
		}
		if len(got) != 2 {
			t.Fatalf("Buckets: %+v, want create and global", got)
		}
		equal(t, "create bucket", got[0], want)
		if other, err := bs.Buckets(ctx, "other"); err != nil || len(other) != 0 {
			t.Fatalf("Buckets of another account: %+v, %v; want none", other, err)
		}
	})

	parallel(t, "RollsBackOnError", func(t *testing.T) {
		s := newStore(t)
		bs := budgetStore(t, s)
		boom := errors.New("boom")
		err := bs.UpdateBuckets(t.Context(), "acct", []string{"create"}, func(_ time.Time, b []*budget.Bucket) error {
			b[0].Stored, b[0].Tokens, b[0].Rate, b[0].UpdatedAt = true, 1, 1, base
			return boom
		})
		wantErr(t, "UpdateBuckets", err, boom)
		if got, err := bs.Buckets(t.Context(), "acct"); err != nil || len(got) != 0 {
			t.Fatalf("Buckets after a failed update: %+v, %v; want none", got, err)
		}
	})

	parallel(t, "ConcurrentUpdatesSerialise", func(t *testing.T) {
		// Every update of a bucket sees the one before it: none is lost,
		// whichever process makes it.
		s := newStore(t)
		bs := budgetStore(t, s)
		const n, each = racers, 10
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				for range each {
					err := bs.UpdateBuckets(t.Context(), "acct", []string{"search", "global"}, func(now time.Time, b []*budget.Bucket) error {
						for _, bk := range b {
							bk.Stored, bk.UpdatedAt, bk.Rate = true, now, 1
							bk.Throttled++
						}
						return nil
					})
					if err != nil {
						errs[i] = err
						return
					}
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("UpdateBuckets: %v", err)
		}
		got, err := bs.Buckets(t.Context(), "acct")
		if err != nil {
			t.Fatalf("Buckets: %v", err)
		}
		for _, bk := range got {
			if bk.Throttled != n*each {
				t.Errorf("bucket %s counted %d updates, want %d", bk.Name, bk.Throttled, n*each)
			}
		}
	})
}

// simBudget returns a budget.Shared on s, which a simulation drives with
// TryTake on the store's clock.
func simBudget(t *testing.T, s *testStore, cfg budget.Config) *budget.Shared {
	t.Helper()
	cfg.Now = s.clock.Now
	if cfg.Headroom == 0 {
		cfg.Headroom = -1 // exact figures
	}
	b, err := budget.New(budgetStore(t, s), cfg)
	if err != nil {
		t.Fatalf("budget.New: %v", err)
	}
	return b
}

// try is one try for a token: whether it was granted, and when its call
// may be sent.
func try(t *testing.T, s *testStore, b *budget.Shared, c reconcile.BudgetClass, p reconcile.Priority) (bool, time.Time) {
	t.Helper()
	ok, delay, _, err := b.TryTake(t.Context(), c, p)
	if err != nil {
		t.Fatalf("TryTake: %v", err)
	}
	return ok, s.clock.Now().Add(delay)
}

// got is try's first result.
func got(t *testing.T, s *testStore, b *budget.Shared, c reconcile.BudgetClass, p reconcile.Priority) bool {
	t.Helper()
	ok, _ := try(t, s, b, c, p)
	return ok
}

func testSharedBudget(t *testing.T, newStore func(*testing.T) *testStore) {
	const tick = 10 * time.Millisecond

	parallel(t, "PacesAtTheLimit", func(t *testing.T) {
		// Four workers try every tick for 5 s at a limit of 25/s: at most
		// 25 in any 1-second window and one more.
		s := newStore(t)
		cfg := budget.Config{Limits: budget.Limits{Create: 25, Global: 100}}
		workers := []*budget.Shared{simBudget(t, s, cfg), simBudget(t, s, cfg), simBudget(t, s, cfg), simBudget(t, s, cfg)}
		var grants []time.Time
		for s.clock.Now().Before(at(5 * time.Second)) {
			for _, w := range workers {
				if ok, sendAt := try(t, s, w, reconcile.ClassCreate, reconcile.PriorityNew); ok {
					grants = append(grants, sendAt)
				}
			}
			s.clock.Advance(tick)
		}
		slices.SortFunc(grants, time.Time.Compare)
		if n := len(grants); n < 124 || n > 127 {
			t.Errorf("%d grants in 5 s at 25/s, want 125 and the burst", n)
		}
		if worst := workertest.MaxInWindow(grants, time.Second); worst > 26 {
			t.Errorf("%d grants in one 1-second window, want at most 26", worst)
		}
	})

	parallel(t, "GlobalOnTop", func(t *testing.T) {
		s := newStore(t)
		b := simBudget(t, s, budget.Config{Limits: budget.Limits{Create: 25, Retrieve: 25, Global: 30}})
		n := 0
		for s.clock.Now().Before(at(5 * time.Second)) {
			for _, c := range []reconcile.BudgetClass{reconcile.ClassCreate, reconcile.ClassRetrieve} {
				if got(t, s, b, c, reconcile.PriorityReconcile) {
					n++
				}
			}
			s.clock.Advance(tick)
		}
		if n < 148 || n > 152 {
			t.Errorf("%d grants in 5 s under a global 30/s, want 150", n)
		}
	})

	parallel(t, "PrioritiesAndReserve", func(t *testing.T) {
		// New purchases (priority 1) and reconciliation (2) both want
		// everything: reconciliation gets its reserved share, no more;
		// the audit (4), behind both, gets nothing.
		s := newStore(t)
		b := simBudget(t, s, budget.Config{Limits: budget.Limits{Create: 25, Global: 100}, ReserveShare: 0.2})
		n := map[reconcile.Priority]int{}
		for s.clock.Now().Before(at(10 * time.Second)) {
			for _, p := range []reconcile.Priority{reconcile.PriorityAudit, reconcile.PriorityReconcile, reconcile.PriorityNew} {
				if got(t, s, b, reconcile.ClassCreate, p) {
					n[p]++
				}
			}
			s.clock.Advance(tick)
		}
		total := n[1] + n[2] + n[4]
		if share := float64(n[2]) / float64(total); math.Abs(share-0.2) > 0.03 {
			t.Errorf("reconciliation got %d of %d (%.2f), want its reserved share 0.2", n[2], total, share)
		}
		if n[4] > 1 {
			t.Errorf("the audit got %d tokens while others waited, want at most the first", n[4])
		}
		if total < 245 {
			t.Errorf("%d grants in 10 s at 25/s, want 250", total)
		}
	})

	parallel(t, "BacklogLeavesNewFirst", func(t *testing.T) {
		// A backlog of reconciliation wants everything; new purchases come
		// at 10/s: each is sent within a few token intervals, and the
		// backlog has the rest.
		s := newStore(t)
		b := simBudget(t, s, budget.Config{Limits: budget.Limits{Create: 25, Global: 100}})
		var newWaits []time.Duration
		var waitingSince time.Time
		backlog := 0
		for s.clock.Now().Before(at(10 * time.Second)) {
			now := s.clock.Now()
			if waitingSince.IsZero() && now.Sub(base)%(100*time.Millisecond) == 0 {
				waitingSince = now
			}
			if !waitingSince.IsZero() {
				if ok, sendAt := try(t, s, b, reconcile.ClassCreate, reconcile.PriorityNew); ok {
					newWaits = append(newWaits, sendAt.Sub(waitingSince))
					waitingSince = time.Time{}
				}
			}
			if got(t, s, b, reconcile.ClassCreate, reconcile.PriorityReconcile) {
				backlog++
			}
			s.clock.Advance(tick)
		}
		worst := time.Duration(0)
		for _, w := range newWaits {
			worst = max(worst, w)
		}
		// Four token intervals at 25/s: the slot after next, and a tick.
		if len(newWaits) < 98 || worst > 160*time.Millisecond {
			t.Errorf("%d new purchases served, the slowest after %s; want 100, each within 160ms", len(newWaits), worst)
		}
		if backlog < 140 {
			t.Errorf("the backlog got %d tokens in 10 s, want the ~150 new purchases left", backlog)
		}
	})

	parallel(t, "ThrottledDecreasesAndRecovers", func(t *testing.T) {
		s := newStore(t)
		b := simBudget(t, s, budget.Config{Limits: budget.Limits{Create: 20, Global: 100}, Increase: 1})
		ctx := t.Context()
		for range 3 {
			if err := b.Throttled(ctx, reconcile.ClassCreate, 0); err != nil {
				t.Fatalf("Throttled: %v", err)
			}
		}
		if r := rateOf(t, b, reconcile.ClassCreate); r != 2.5 {
			t.Fatalf("rate after three 429s: %v, want 20·0.5³ = 2.5", r)
		}
		// Retry-After blocks the class.
		if err := b.Throttled(ctx, reconcile.ClassCreate, 2*time.Second); err != nil {
			t.Fatalf("Throttled: %v", err)
		}
		s.clock.Advance(1900 * time.Millisecond)
		if got(t, s, b, reconcile.ClassCreate, reconcile.PriorityNew) {
			t.Fatal("a token within the provider's Retry-After")
		}
		s.clock.Advance(200 * time.Millisecond)
		if !got(t, s, b, reconcile.ClassCreate, reconcile.PriorityNew) {
			t.Fatal("no token after the Retry-After")
		}
		// Additive increase: 1/s per second, from 1.25 (+2.1 s) back to 20.
		s.clock.Advance(10 * time.Second)
		got(t, s, b, reconcile.ClassCreate, reconcile.PriorityNew)
		if r := rateOf(t, b, reconcile.ClassCreate); r < 13 || r > 14 {
			t.Fatalf("rate 10 s after: %v, want 1.25 + 12.1 ≈ 13.35", r)
		}
		s.clock.Advance(10 * time.Second)
		got(t, s, b, reconcile.ClassCreate, reconcile.PriorityNew)
		if r := rateOf(t, b, reconcile.ClassCreate); r != 20 {
			t.Fatalf("rate 20 s after: %v, want the limit 20 again", r)
		}
	})

	parallel(t, "CrashedWorkerLeaksNothing", func(t *testing.T) {
		// A worker that took tokens and died, or died inside the budget's
		// transaction, holds nothing: the others get the whole rate.
		s := newStore(t)
		cfg := budget.Config{Limits: budget.Limits{Create: 25, Global: 100}}
		dead, live := simBudget(t, s, cfg), simBudget(t, s, cfg)
		for range 50 {
			got(t, s, dead, reconcile.ClassCreate, reconcile.PriorityNew)
			s.clock.Advance(tick)
		}
		crash := errors.New("crash")
		err := budgetStore(t, s).UpdateBuckets(t.Context(), "default", []string{"create", "global"}, func(_ time.Time, b []*budget.Bucket) error {
			for _, bk := range b {
				bk.Tokens = -1000 // taken, never committed
			}
			return crash
		})
		wantErr(t, "UpdateBuckets", err, crash)
		n := 0
		start := s.clock.Now()
		for s.clock.Now().Before(start.Add(5 * time.Second)) {
			if got(t, s, live, reconcile.ClassCreate, reconcile.PriorityNew) {
				n++
			}
			s.clock.Advance(tick)
		}
		if n < 124 {
			t.Errorf("the live worker got %d tokens in 5 s at 25/s after the crash, want 125", n)
		}
	})
}

func rateOf(t *testing.T, b *budget.Shared, c reconcile.BudgetClass) float64 {
	t.Helper()
	rates, err := b.Rates(t.Context())
	if err != nil {
		t.Fatalf("Rates: %v", err)
	}
	return rates[c]
}

// testClaimsNewFirst: a job never leased (the first create of a new
// purchase) is claimed before jobs leased before, however long ago those
// became due, so that a backlog of reconciliation never holds new
// purchases back from the budget that serves them first.
func testClaimsNewFirst(t *testing.T, s *testStore) {
	for _, id := range []string{"pur_old1", "pur_old2"} {
		purchaseWithJob(t, s, id, base)
		claimOne(t, s, "w1", id, base, time.Minute)
		inTx(t, s, func(tx reconcile.Tx) error { return tx.RescheduleJob(t.Context(), id, at(time.Second)) })
	}
	purchaseWithJob(t, s, "pur_new", at(time.Hour))
	got := ids(claim(t, s, "w2", 2, at(2*time.Hour), time.Minute))
	equal(t, "claimed", sorted(got), []string{"pur_new", "pur_old1"})
}
