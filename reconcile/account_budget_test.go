package reconcile_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/stores"
	"github.com/payrecon/payrecon/internal/testing/workertest"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/budget"
	"github.com/payrecon/payrecon/statemachine"
)

// budgetClasses are the fake's rate-limit classes.
var budgetClasses = []string{"create", "retrieve", "search", "list", "refund"}

// admitted returns when fake let each call through, every class merged,
// in order.
func admitted(fake *fakeprovider.Fake) []time.Time {
	var ts []time.Time
	for _, c := range budgetClasses {
		ts = append(ts, fake.AdmittedTimes(c)...)
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	return ts
}

func TestAccountBudgetsSharedByFourWorkers(t *testing.T) {
	// Two connected accounts, each with limits of its own that the
	// provider enforces apart (A test mode's 25 calls a second, B 10),
	// and the platform's. Four workers share each account's budget
	// through the store: every purchase is charged once, no call is
	// answered 429, and no account is over its limit in any second
	// but for the one call early that the budget allows.
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		st := newStore(t, nil)
		limitsOf := map[string]fakeprovider.RateLimits{
			"":    {Global: 25, Create: 25, Retrieve: 25, Search: 20, List: 25, Refund: 25},
			acctA: {Global: 25, Create: 25, Retrieve: 25, Search: 20, List: 25, Refund: 25},
			acctB: {Global: 10, Create: 10, Retrieve: 10, Search: 10, List: 10, Refund: 10},
		}
		fake := fakeprovider.New(fakeprovider.Config{RateLimits: limitsOf[""],
			AccountRateLimits: map[string]fakeprovider.RateLimits{acctA: limitsOf[acctA], acctB: limitsOf[acctB]}})
		want := map[string]int{"": 20, acctA: 60, acctB: 30}
		obs := &finalCounter{done: make(chan struct{})}
		obs.n.Store(int64(want[""] + want[acctA] + want[acctB]))
		var workers []*reconcile.Service
		for _, id := range []string{"w1", "w2", "w3", "w4"} {
			platform, err := budget.New(st.(budget.Store), budget.Config{})
			if err != nil {
				t.Fatal(err)
			}
			accounts, err := budget.NewAccounts(st.(budget.Store), budget.Config{},
				map[string]budget.Limits{acctB: {Global: 10, Create: 10, Retrieve: 10, Search: 10, List: 10, Refund: 10}})
			if err != nil {
				t.Fatal(err)
			}
			cfg := accountsConfig()
			cfg.WorkerID, cfg.Concurrency, cfg.BatchSize, cfg.LeaseDuration = id, 16, 32, 6*time.Second
			cfg.ProviderTimeout, cfg.PollInterval, cfg.Logger = 2*time.Second, 20*time.Millisecond, discardLogger()
			cfg.Budget, cfg.AccountBudgets, cfg.Observer = platform, accounts, obs
			svc, err := reconcile.New(st, fake, cfg)
			if err != nil {
				t.Fatal(err)
			}
			workers = append(workers, svc)
		}
		var ids []string
		for account, n := range want {
			for range n {
				p, err := workers[0].CreatePurchase(t.Context(), reconcile.NewPurchase{Customer: "budget", Amount: 300, Currency: "usd", Account: account})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, p.ID)
			}
		}
		stop := workertest.Work(t, workers)
		select {
		case <-obs.done:
		case <-time.After(5 * time.Minute): // a hang, not a measure
			t.Fatalf("%d of %d purchases final", obs.final.Load(), len(ids))
		}
		stop()

		for _, id := range ids {
			d, err := workers[0].Purchase(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if d.Purchase.State != statemachine.Succeeded {
				t.Errorf("purchase %s of %q: %s, want succeeded", id, d.Purchase.Account, d.Purchase.State)
			}
			if got := fake.Account(d.Purchase.Account).MoneyTaken(id); got != 1 {
				t.Errorf("purchase %s: %d charges in its account, want 1", id, got)
			}
		}
		for account, n := range want {
			books := fake.Account(account)
			throttled := 0
			for _, c := range budgetClasses {
				throttled += books.ThrottledCalls(c)
			}
			times := admitted(books)
			worst := workertest.MaxInWindow(times, time.Second)
			limit := int(limitsOf[account].Global)
			t.Logf("account %q: %d purchases, %d calls over %.1fs, at most %d in any second (limit %d), %d answered 429",
				account, n, len(times), times[len(times)-1].Sub(times[0]).Seconds(), worst, limit, throttled)
			if throttled != 0 {
				t.Errorf("account %q: %d calls answered 429, want none", account, throttled)
			}
			// The provider's limiter is a token bucket of the limit (the 429s
			// above); the budget's own contract is stricter, "the rate and one
			// call" in any 1-second window (budget.Config.Burst), since a
			// grant may come one token early.
			if worst > limit+1 {
				t.Errorf("account %q: %d calls in one second, over its limit of %d and one", account, worst, limit)
			}
			if got := books.Calls(provider.OpCreate); got < n {
				t.Errorf("account %q: %d creates for %d purchases", account, got, n)
			}
		}
	})
}

func TestClaimsShareTheWorkerAmongAccounts(t *testing.T) {
	// Account A has a backlog of 60 new purchases, older than B's one. A
	// claim of 10 serves both: B's purchase is among them, and A takes
	// the rest of the claim. Then the next claims drain A.
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		cfg := accountsConfig()
		cfg.BatchSize, cfg.Concurrency = 10, 10
		f := setup(t, newStore, fakeprovider.Config{}, cfg)
		var backlog []reconcile.Purchase
		for range 60 {
			backlog = append(backlog, f.createIn(acctA, "hot"))
		}
		f.clock.Advance(time.Second) // B's purchase is the newest job
		b := f.createIn(acctB, "quiet")
		n, err := f.svc.RunOnce(t.Context())
		if err != nil || n != 10 {
			t.Fatalf("RunOnce: %d claimed, %v; want 10", n, err)
		}
		f.wantState(b.ID, statemachine.Succeeded)
		done := 0
		for _, p := range backlog {
			if d := f.detail(p.ID); d.Purchase.State == statemachine.Succeeded {
				done++
			}
		}
		if done != 9 {
			t.Errorf("%d of A's purchases settled in the first claim, want 9 (the claim less B's one)", done)
		}
		f.runUntilIdle(f.svc)
		for _, p := range backlog {
			f.wantState(p.ID, statemachine.Succeeded)
		}
	})
}

func TestHotAccountHoldsAboutASecondOfSlots(t *testing.T) {
	// Account A has a backlog of 100 new purchases and a budget of 10
	// calls a second; B has one new purchase. A worker with 64 free slots
	// claims once: B's purchase is among the jobs, and A takes no more
	// than about a second of its budget, however many slots are free, so
	// that A's backlog never holds the slots B's next purchase needs (a
	// claim reserving a quarter of the lease ahead would take 64).
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		st := newStore(t, nil)
		limitA := budget.Limits{Global: 10, Create: 10, Retrieve: 10, Search: 10, List: 10, Refund: 10}
		fake := fakeprovider.New(fakeprovider.Config{})
		platform, err := budget.New(st.(budget.Store), budget.Config{})
		if err != nil {
			t.Fatal(err)
		}
		accounts, err := budget.NewAccounts(st.(budget.Store), budget.Config{}, map[string]budget.Limits{acctA: limitA})
		if err != nil {
			t.Fatal(err)
		}
		cfg := accountsConfig()
		cfg.WorkerID, cfg.Concurrency, cfg.BatchSize, cfg.Logger = "w1", 64, 64, discardLogger()
		cfg.Budget, cfg.AccountBudgets = platform, accounts
		svc, err := reconcile.New(st, fake, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for range 100 {
			if _, err := svc.CreatePurchase(t.Context(), reconcile.NewPurchase{Customer: "hot", Amount: 300, Currency: "usd", Account: acctA}); err != nil {
				t.Fatal(err)
			}
		}
		quiet, err := svc.CreatePurchase(t.Context(), reconcile.NewPurchase{Customer: "quiet", Amount: 300, Currency: "usd", Account: acctB})
		if err != nil {
			t.Fatal(err)
		}
		n, err := svc.RunOnce(t.Context())
		if err != nil {
			t.Fatalf("RunOnce: %v", err)
		}
		hot := fake.Account(acctA).Calls(provider.OpCreate)
		t.Logf("one claim of 64 slots: %d jobs, %d of them A's (10 calls a second)", n, hot)
		if got := fake.Account(acctB).MoneyTaken(quiet.ID); got != 1 {
			t.Errorf("B's purchase: %d charges after the claim, want 1", got)
		}
		// A second of A's budget, its first token at once, and the one
		// early token the budget allows.
		if hot < 1 || hot > 12 {
			t.Errorf("A's jobs in one claim: %d creates, want 1 to 12 (a second of its budget)", hot)
		}
		if n != hot+1 {
			t.Errorf("claimed %d jobs, want A's %d and B's one", n, hot)
		}
	})
}

func TestClaimsTakeAccountsInTurn(t *testing.T) {
	// The platform, A and B each have a backlog, and the worker has one
	// free slot a claim: the claims take the accounts in turn, the
	// platform's (which sorts first) included, so that none waits while
	// another's backlog drains.
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		cfg := accountsConfig()
		cfg.BatchSize, cfg.Concurrency = 1, 1
		f := setup(t, newStore, fakeprovider.Config{}, cfg)
		accounts := []string{provider.PlatformAccount, acctA, acctB}
		for range 3 {
			for _, a := range accounts {
				f.createIn(a, "turn")
			}
		}
		var order []string
		creates := map[string]int{}
		for range 6 {
			if n, err := f.svc.RunOnce(t.Context()); err != nil || n != 1 {
				t.Fatalf("RunOnce: %d claimed, %v; want 1", n, err)
			}
			for _, a := range accounts {
				if k := f.fake.Account(a).Calls(provider.OpCreate); k > creates[a] {
					creates[a] = k
					order = append(order, reconcile.AccountLabel(a))
				}
			}
		}
		want := []string{reconcile.PlatformName, acctA, acctB, reconcile.PlatformName, acctA, acctB}
		if !slices.Equal(order, want) {
			t.Errorf("claims took %v, want each account in turn %v", order, want)
		}
	})
}
