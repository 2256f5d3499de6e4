package reconcile_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/workertest"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/budget"
	"github.com/payrecon/payrecon/statemachine"
)

// waitCounter is a budget.Observer that counts the calls each class let
// through.
type waitCounter struct {
	mu    sync.Mutex
	waits map[reconcile.BudgetClass]int
}

func (o *waitCounter) BudgetRate(reconcile.BudgetClass, float64) {}
func (o *waitCounter) BudgetThrottled(reconcile.BudgetClass)     {}
func (o *waitCounter) BudgetWait(c reconcile.BudgetClass, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.waits == nil {
		o.waits = map[reconcile.BudgetClass]int{}
	}
	o.waits[c]++
}

func (o *waitCounter) of(c reconcile.BudgetClass) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.waits[c]
}

func TestBudgetAuditTakesATokenPerPage(t *testing.T) {
	// The provider counts every page of a listing as a request: the audit
	// takes one token of the budget for each, of payments, refunds and
	// disputes alike, and no page goes without one.
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		st := newStore(t, nil)
		const pageSize, n = 2, 5 // 3 pages: 2, 2 and 1
		fake := fakeprovider.New(fakeprovider.Config{ListPageSize: pageSize})
		obs := &waitCounter{}
		b, err := budget.New(st.(budget.Store), budget.Config{
			Limits: budget.Limits{Global: 1000, List: 1000, Refund: 1000}, Observer: obs,
		})
		if err != nil {
			t.Fatal(err)
		}
		svc, err := reconcile.New(st, fake, reconcile.Config{WorkerID: "auditor", Logger: discardLogger(), Budget: b})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var pay fakeprovider.Charge
		for range n {
			pay = fake.ChargeOutside(fakeprovider.OutsideCharge{Amount: 1000, Currency: "usd"})
		}
		for range n {
			if _, err := fake.RefundOutside(fakeprovider.OutsideRefund{PaymentID: pay.ID, Amount: 1}); err != nil {
				t.Fatal(err)
			}
		}
		rep, err := svc.Audit(t.Context(), provider.Window{From: start.Add(-time.Minute), Until: start.Add(time.Minute)})
		if err != nil {
			t.Fatalf("Audit: %v", err)
		}
		pages := n/pageSize + 1
		for _, c := range []struct {
			class reconcile.BudgetClass
			op    provider.Op
		}{{reconcile.ClassList, provider.OpList}, {reconcile.ClassRefund, provider.OpRefundList}} {
			tokens, requests := obs.of(c.class), fake.Calls(c.op)
			if c.class == reconcile.ClassList {
				// The disputes' listing is a listing too: one page, none.
				if d := fake.Calls(provider.OpDisputeList); d != 1 {
					t.Errorf("%d requests listing disputes, want 1", d)
				}
				tokens--
			}
			t.Logf("%s: %d objects a page of %d, %d requests, %d tokens", c.op, n, pageSize, requests, tokens)
			if requests != pages || tokens != pages {
				t.Errorf("%s of %d objects, %d a page: %d requests and %d tokens, want %d of each", c.op, n, pageSize, requests, tokens, pages)
			}
		}
		if rep.Payments != n || rep.Refunds != n {
			t.Errorf("audit listed %d payments and %d refunds, want %d of each", rep.Payments, rep.Refunds, n)
		}
	})
}

// finalCounter is an Observer that closes done once n purchases reached a
// final state.
type finalCounter struct {
	n, final atomic.Int64
	once     sync.Once
	done     chan struct{}
}

func (o *finalCounter) Transition(_, to statemachine.State, _ reconcile.Cause) {
	if to.Terminal() && o.final.Add(1) == o.n.Load() {
		o.once.Do(func() { close(o.done) })
	}
}

func (o *finalCounter) ProviderCall(provider.Op, provider.Outcome, time.Duration) {}
func (o *finalCounter) JobsClaimed(int)                                           {}
func (o *finalCounter) LeaseLost()                                                {}
func (o *finalCounter) Resolved(time.Duration)                                    {}
func (o *finalCounter) RefundTransition(statemachine.State, statemachine.State, reconcile.Cause) {
}
func (*finalCounter) EventApplied(string, reconcile.EventOutcome, time.Duration) {}

func TestBudgetDrainLosesNoLease(t *testing.T) {
	// Four workers with large batches drain a burst of new purchases
	// under one shared budget of test mode's limits, which the provider
	// enforces too. A claim takes no more purchases than the budget serves
	// within their leases, so none waits for a token past its lease: no
	// purchase is left submitted for another worker to take over as
	// uncertain (lease_lost), and no call is answered 429. The leases are
	// short, so that the queue behind the budget outlasts them: 240
	// purchases are about 10 s of budget, and the 4 × 64 that claims without
	// the limit would take wait up to that long; a lease is 9 s.
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		st := newStore(t, nil)
		limits := fakeprovider.RateLimits{Global: 25, Create: 25, Retrieve: 25, Search: 20, List: 25, Refund: 25}
		fake := fakeprovider.New(fakeprovider.Config{RateLimits: limits})
		const n = 240
		obs := &finalCounter{done: make(chan struct{})}
		obs.n.Store(n)
		var workers []*reconcile.Service
		for _, id := range []string{"w1", "w2", "w3", "w4"} {
			b, err := budget.New(st.(budget.Store), budget.Config{}) // test mode
			if err != nil {
				t.Fatal(err)
			}
			svc, err := reconcile.New(st, fake, reconcile.Config{
				WorkerID: id, Concurrency: 32, BatchSize: 64, LeaseDuration: 9 * time.Second, ProviderTimeout: 2 * time.Second,
				PollInterval: 20 * time.Millisecond, Logger: discardLogger(), Budget: b, Observer: obs,
			})
			if err != nil {
				t.Fatal(err)
			}
			workers = append(workers, svc)
		}
		ids := workertest.CreatePurchases(t, workers[0], n)
		stop := workertest.Work(t, workers)
		select {
		case <-obs.done:
		case <-time.After(5 * time.Minute): // a hang, not a measure
			t.Fatalf("%d of %d purchases final", obs.final.Load(), n)
		}
		stop()

		leaseLost, charges := 0, 0
		for _, id := range ids {
			d, err := workers[0].Purchase(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			for _, tr := range d.Transitions {
				if tr.Cause == reconcile.CauseLeaseLost {
					leaseLost++
				}
			}
			charges += len(fake.ChargesFor(id))
		}
		throttled := 0
		for _, c := range []string{"create", "retrieve", "search", "list", "refund"} {
			throttled += fake.ThrottledCalls(c)
		}
		times := fake.AdmittedTimes("create")
		t.Logf("%d purchases, %d charges, %d creates (%.1f/s), %d lease_lost transitions, %d answered 429, at most %d creates in any second",
			n, charges, fake.Calls(provider.OpCreate), float64(len(times)-1)/times[len(times)-1].Sub(times[0]).Seconds(),
			leaseLost, throttled, workertest.MaxInWindow(times, time.Second))
		if leaseLost != 0 {
			t.Errorf("%d transitions of cause lease_lost, want none", leaseLost)
		}
		if throttled != 0 {
			t.Errorf("%d calls answered 429, want none", throttled)
		}
		if charges != n {
			t.Errorf("%d charges for %d purchases", charges, n)
		}
	})
}
