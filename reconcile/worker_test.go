package reconcile_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// faultMix30 injects a fault into 30% of create calls.
var faultMix30 = fakeprovider.Faults{
	LostReply:       0.10,
	Timeout:         0.06,
	FailBefore:      0.04,
	Processing:      0.04,
	StaleProcessing: 0.03,
	Decline:         0.03,
}

// raceWorkers runs workers concurrently, each until no job is due, then
// advances the clock by step; it repeats until every purchase in ids is
// terminal or escalated, or rounds run out.
func raceWorkers(t *testing.T, f *fixture, workers []*reconcile.Service, ids []string, step time.Duration, rounds int) {
	t.Helper()
	for round := 0; round < rounds; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, len(workers))
		for _, w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					n, err := w.RunOnce(context.Background())
					if err != nil {
						errs <- err
						return
					}
					if n == 0 {
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("worker: %v", err)
		}
		if settled(t, f, ids) {
			return
		}
		f.clock.Advance(step)
	}
	t.Fatalf("purchases still unsettled after %d rounds", rounds)
}

// settled reports whether every purchase is terminal or escalated.
func settled(t *testing.T, f *fixture, ids []string) bool {
	t.Helper()
	all := true
	err := f.store.InTx(context.Background(), func(tx reconcile.Tx) error {
		for _, id := range ids {
			p, err := tx.GetPurchase(context.Background(), id)
			if err != nil {
				return err
			}
			if !p.State.Terminal() && !p.Escalated() {
				all = false
				return nil
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read purchases: %v", err)
	}
	return all
}

// TestRaceWorkersWithFaults: 4 workers race over 1,000 purchases with 30%
// of provider calls faulty. Every purchase ends terminal or escalated, each
// succeeded one has exactly one charge, declined ones none, and the audit
// holds no transition outside the table.
func TestRaceWorkersWithFaults(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		n := 1000
		if testing.Short() {
			n = 200
		}
		f := setup(t, newStore, fakeprovider.Config{Seed: 7, Faults: faultMix30, SearchLag: 30 * time.Second}, reconcile.Config{})
		var workers []*reconcile.Service
		for _, id := range []string{"w1", "w2", "w3", "w4"} {
			workers = append(workers, f.service(f.fake, id, reconcile.Config{}))
		}
		ids := make([]string, n)
		for i := range ids {
			ids[i] = f.create("race").ID
		}
		raceWorkers(t, f, workers, ids, time.Hour, 40)

		states := map[statemachine.State]int{}
		escalated := 0
		for _, id := range ids {
			d := f.detail(id)
			p := d.Purchase
			states[p.State]++
			if p.Escalated() {
				escalated++
			}
			switch p.State {
			case statemachine.Succeeded:
				if got := f.fake.MoneyTaken(id); got != 1 {
					t.Errorf("succeeded purchase %s has %d charges, want 1\n%s", id, got, history(d))
				}
			case statemachine.Declined:
				if got := f.fake.MoneyTaken(id); got != 0 {
					t.Errorf("declined purchase %s has %d charges, want 0", id, got)
				}
			default:
				if got := f.fake.MoneyTaken(id); got > 1 {
					t.Errorf("purchase %s has %d charges", id, got)
				}
			}
			prev := statemachine.Created
			for _, tr := range d.Transitions {
				if err := statemachine.Transition(tr.From, tr.To); err != nil {
					t.Errorf("purchase %s: audit holds a forbidden move: %v", id, err)
				}
				if tr.From != prev {
					t.Errorf("purchase %s: audit chain broken: %s→%s after reaching %s", id, tr.From, tr.To, prev)
				}
				prev = tr.To
			}
			if len(d.Transitions) > 0 && d.Transitions[len(d.Transitions)-1].To != p.State {
				t.Errorf("purchase %s: audit ends in %s but state is %s", id, d.Transitions[len(d.Transitions)-1].To, p.State)
			}
			if p.State == statemachine.Reconciling {
				t.Errorf("purchase %s left reconciling once every worker stopped\n%s", id, history(d))
			}
		}
		t.Logf("%d purchases: %v, %d escalated; %d creates, %d status, %d searches",
			n, states, escalated, f.fake.Calls(provider.OpCreate), f.fake.Calls(provider.OpStatus), f.fake.Calls(provider.OpSearch))
		if states[statemachine.Succeeded] == 0 || states[statemachine.Declined] == 0 {
			t.Fatalf("fault mix produced no variety: %v", states)
		}
	})
}

// countingObserver counts terminal transitions and signals when want is
// reached.
type countingObserver struct {
	terminal atomic.Int64
	want     int64
	reached  chan struct{}
	once     sync.Once
}

func (o *countingObserver) Transition(from, to statemachine.State, cause reconcile.Cause) {
	if to.Terminal() && o.terminal.Add(1) == o.want {
		o.once.Do(func() { close(o.reached) })
	}
}
func (o *countingObserver) ProviderCall(provider.Op, provider.Outcome, time.Duration) {}
func (o *countingObserver) JobsClaimed(int)                                           {}
func (o *countingObserver) LeaseLost()                                                {}
func (o *countingObserver) Resolved(time.Duration)                                    {}
func (o *countingObserver) RefundTransition(statemachine.State, statemachine.State, reconcile.Cause) {
}
func (*countingObserver) EventApplied(string, reconcile.EventOutcome, time.Duration) {}

// TestWorkLoopStopsCleanly: the Work loop settles due purchases and, when
// its context ends, returns with no lease held.
func TestWorkLoopStopsCleanly(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		obs := &countingObserver{want: 20, reached: make(chan struct{})}
		svc := f.service(f.fake, "loop", reconcile.Config{Observer: obs, PollInterval: 10 * time.Millisecond})
		var ids []string
		for range 20 {
			ids = append(ids, f.create("loop").ID)
		}
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- svc.Work(ctx) }()
		<-obs.reached
		cancel()
		if err := <-stopped; err != nil {
			t.Fatalf("Work: %v", err)
		}
		for _, id := range ids {
			d := f.wantState(id, statemachine.Succeeded)
			if d.Job.LeaseOwner != "" || d.Job.DoneAt.IsZero() {
				t.Fatalf("job after stop: %+v", d.Job)
			}
		}
	})
}

// TestShutdownMidCallLosesNothing: SIGTERM arrives while a create call
// hangs. After the grace period the call is cancelled, its outcome is
// recorded as unknown, the lease is released, and the next worker settles
// the purchase with the same key: one charge.
func TestShutdownMidCallLosesNothing(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		g := newGate(f.fake, provider.OpCreate)
		svc := f.service(g, "stopping", reconcile.Config{ShutdownGrace: 20 * time.Millisecond, PollInterval: 10 * time.Millisecond})
		p := f.create("term")
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- svc.Work(ctx) }()
		<-g.entered
		cancel() // SIGTERM
		if err := <-stopped; err != nil {
			t.Fatalf("Work: %v", err)
		}
		d := f.wantState(p.ID, statemachine.Uncertain)
		if d.Job.LeaseOwner != "" {
			t.Fatalf("lease still held after shutdown: %+v", d.Job)
		}
		if last := d.Attempts[len(d.Attempts)-1]; last.Outcome != provider.Unknown || !last.Applied {
			t.Fatalf("cancelled call recorded as %+v, want an applied unknown", last)
		}
		f.clock.Advance(30 * time.Second)
		f.runUntilIdle(f.svc)
		f.wantState(p.ID, statemachine.Succeeded)
		f.wantMoneyTaken(p.ID, 1)
	})
}
