package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The group commit tests. Each forms one group for sure: with one leader
// (Config.GroupCommitLeaders 1), a blocker's transaction waits at its
// start (gatedStore) until every request of the group has queued behind
// it, in a known order (reconcile.SetGroupQueued tells when).

// gatedStore is a store whose next transaction, once armed, waits at its
// start for release. It counts transactions, can fail the next one after
// its function succeeded (as a failed commit does), and hands out Txs
// whose UpdateInboxEvent(s) and SaveIdempotencyResponse run fault first.
type gatedStore struct {
	reconcile.Store
	mu       sync.Mutex
	txs      int
	gate     chan struct{}
	waiting  chan struct{}
	failNext error
	fault    func(id string) error // by event id or idempotency key; nil: none
}

func (g *gatedStore) InTx(ctx context.Context, fn func(reconcile.Tx) error) error {
	g.mu.Lock()
	g.txs++
	gate, waiting, fail := g.gate, g.waiting, g.failNext
	g.gate, g.failNext = nil, nil
	g.mu.Unlock()
	if gate != nil {
		close(waiting)
		<-gate
	}
	return g.Store.InTx(ctx, func(tx reconcile.Tx) error {
		if err := fn(faultTx{tx, g}); err != nil {
			return err
		}
		return fail
	})
}

// arm makes the next transaction wait; the channel it returns is closed
// once it waits.
func (g *gatedStore) arm() (waiting chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate, g.waiting = make(chan struct{}), make(chan struct{})
	gate := g.gate
	return g.waiting, func() { close(gate) }
}

// failNextTx makes the next transaction fail after its function
// succeeded.
func (g *gatedStore) failNextTx(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failNext = err
}

func (g *gatedStore) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.txs
}

func (g *gatedStore) faultFor(id string) error {
	g.mu.Lock()
	fault := g.fault
	g.mu.Unlock()
	if fault == nil {
		return nil
	}
	return fault(id)
}

// faultTx is a Tx of gatedStore's. Savepoint hands fn a faultTx too, so
// that faults reach group members.
type faultTx struct {
	reconcile.Tx
	g *gatedStore
}

func (t faultTx) Savepoint(ctx context.Context, fn func(reconcile.Tx) error) error {
	return t.Tx.Savepoint(ctx, func(tx reconcile.Tx) error { return fn(faultTx{tx, t.g}) })
}

func (t faultTx) UpdateInboxEvent(ctx context.Context, prov, eventID, purchaseID string, outcome reconcile.EventOutcome, at time.Time) error {
	if err := t.g.faultFor(eventID); err != nil {
		return err
	}
	return t.Tx.UpdateInboxEvent(ctx, prov, eventID, purchaseID, outcome, at)
}

// UpdateInboxEvents refuses the whole batch, writing none of it, when
// one of its events has a fault, as a store refuses a statement.
func (t faultTx) UpdateInboxEvents(ctx context.Context, us []reconcile.InboxUpdate) error {
	for _, u := range us {
		if err := t.g.faultFor(u.EventID); err != nil {
			return err
		}
	}
	return t.Tx.UpdateInboxEvents(ctx, us)
}

func (t faultTx) SaveIdempotencyResponse(ctx context.Context, client, key string, status int, body []byte, purchaseID string) error {
	if err := t.g.faultFor(key); err != nil {
		return err
	}
	return t.Tx.SaveIdempotencyResponse(ctx, client, key, status, body, purchaseID)
}

// groupFixture is a fixture whose service groups over a gatedStore with
// one leader.
type groupFixture struct {
	*fixture
	gs  *gatedStore
	svc *reconcile.Service // groups over gs
}

func setupGroup(t *testing.T, newStore stores.Factory) *groupFixture {
	t.Helper()
	f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
	gs := &gatedStore{Store: f.store}
	svc, err := reconcile.New(gs, f.fake, reconcile.Config{
		WorkerID: "worker-g", GroupCommitLeaders: 1, Now: f.clock.Now, Logger: discardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return &groupFixture{fixture: f, gs: gs, svc: svc}
}

// settledByWebhook is the path of a purchase left uncertain by a lost
// reply and settled by a webhook.
var settledByWebhook = []string{"created→submitted:submit", "submitted→uncertain:submit_response",
	"uncertain→reconciling:webhook", "reconciling→succeeded:webhook"}

// uncertainCharges returns n purchases left uncertain by a lost reply,
// each with its charge at the fake.
func (g *groupFixture) uncertainCharges(n int) []fakeprovider.Charge {
	g.t.Helper()
	var ids []string
	for i := range n {
		p := g.create(fmt.Sprintf("cus-%d", i))
		g.fake.Script(p.ID, fakeprovider.LostReply)
		ids = append(ids, p.ID)
	}
	g.runUntilIdle(g.fixture.svc)
	var out []fakeprovider.Charge
	for _, id := range ids {
		g.wantState(id, statemachine.Uncertain)
		out = append(out, g.fake.ChargesFor(id)[0])
	}
	return out
}

// inOneGroup runs reqs as one group: behind a blocker (an event for no
// purchase) whose transaction waits until every request has queued, in
// order, and then for queued, if set. It returns once all have returned.
func (g *groupFixture) inOneGroup(queued func(), reqs ...func()) {
	g.t.Helper()
	lengths := make(chan int, len(reqs)+1)
	reconcile.SetGroupQueued(g.svc, func(n int) { lengths <- n })
	defer reconcile.SetGroupQueued(g.svc, nil)
	waiting, release := g.gs.arm()
	var wg sync.WaitGroup
	wg.Go(func() {
		blocker := event("evt_blocker", provider.Succeeded, fakeprovider.Charge{ID: "pi_none", PurchaseID: "pur_none"}, g.clock.Now())
		if _, err := g.svc.ApplyEvent(context.Background(), blocker); err != nil {
			g.t.Errorf("blocker: %v", err)
		}
	})
	<-waiting
	<-lengths // the blocker's own
	for i, req := range reqs {
		wg.Go(req)
		if n := <-lengths; n != i+1 {
			g.t.Fatalf("queue length %d after request %d", n, i)
		}
	}
	if queued != nil {
		queued()
	}
	release()
	wg.Wait()
}

// wantTxs fails unless the store ran want transactions since it was made.
func (g *groupFixture) wantTxs(want int, why string) {
	g.t.Helper()
	if got := g.gs.count(); got != want {
		g.t.Fatalf("%d transactions, want %d (%s)", got, want, why)
	}
}

type applied struct {
	outcome reconcile.EventOutcome
	err     error
}

// applyAll returns a request per event, each recording what ApplyEvent
// answered.
func (g *groupFixture) applyAll(evs []reconcile.Event) ([]func(), []applied) {
	got := make([]applied, len(evs))
	reqs := make([]func(), len(evs))
	for i, ev := range evs {
		reqs[i] = func() {
			got[i].outcome, got[i].err = g.svc.ApplyEvent(context.Background(), ev)
		}
	}
	return reqs, got
}

// A webhook whose neighbour in the group fails (its application errors)
// is applied and answered as if alone; the failing one is rolled back to
// its savepoint, runs again alone after the group's commit, fails again,
// and stores nothing.
func TestGroupCommitNeighbourFails(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g := setupGroup(t, newStore)
		charges := g.uncertainCharges(4)
		var evs []reconcile.Event
		for i, c := range charges {
			evs = append(evs, event(fmt.Sprintf("evt_%d", i), provider.Succeeded, c, g.clock.Now()))
		}
		injected := errors.New("injected: the inbox refuses evt_2")
		g.gs.fault = func(id string) error {
			if id == "evt_2" {
				return injected
			}
			return nil
		}
		before := g.gs.count()
		reqs, got := g.applyAll(evs)
		g.inOneGroup(nil, reqs...)
		for i, c := range charges {
			if i == 2 {
				if !errors.Is(got[i].err, injected) {
					t.Fatalf("evt_2: %s, %v; want the injected error", got[i].outcome, got[i].err)
				}
				g.wantState(c.PurchaseID, statemachine.Uncertain)
				continue
			}
			if got[i].err != nil || got[i].outcome != reconcile.EventApplied {
				t.Fatalf("evt_%d next to a failing one: %s, %v; want applied", i, got[i].outcome, got[i].err)
			}
			g.wantState(c.PurchaseID, statemachine.Succeeded)
		}
		err := g.store.InTx(context.Background(), func(tx reconcile.Tx) error {
			_, err := tx.GetInboxEvent(context.Background(), "stripe", "evt_2")
			return err
		})
		if !errors.Is(err, reconcile.ErrNotFound) {
			t.Fatalf("evt_2 in the inbox: %v", err)
		}
		g.wantTxs(before+3, "the blocker, the group, evt_2 again alone")
	})
}

// A member that panics is rolled back to its savepoint, its neighbours
// commit, and the panic goes on in its own request's goroutine.
func TestGroupCommitMemberPanics(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g := setupGroup(t, newStore)
		charges := g.uncertainCharges(3)
		g.gs.fault = func(id string) error {
			if id == "evt_1" {
				panic("evt_1 breaks")
			}
			return nil
		}
		var recovered any
		reqs := make([]func(), len(charges))
		got := make([]applied, len(charges))
		for i, c := range charges {
			ev := event(fmt.Sprintf("evt_%d", i), provider.Succeeded, c, g.clock.Now())
			reqs[i] = func() {
				defer func() {
					if p := recover(); p != nil {
						recovered = p
					}
				}()
				got[i].outcome, got[i].err = g.svc.ApplyEvent(context.Background(), ev)
			}
		}
		g.inOneGroup(nil, reqs...)
		if recovered != "evt_1 breaks" {
			t.Fatalf("the panicking request recovered %v", recovered)
		}
		for _, i := range []int{0, 2} {
			if got[i].err != nil || got[i].outcome != reconcile.EventApplied {
				t.Fatalf("evt_%d: %s, %v; want applied", i, got[i].outcome, got[i].err)
			}
			g.wantState(charges[i].PurchaseID, statemachine.Succeeded)
		}
		g.wantState(charges[1].PurchaseID, statemachine.Uncertain)
	})
}

// When the group's transaction fails as a whole (here at its end, as a
// failed commit), nothing of it is kept and every member runs again in a
// transaction of its own.
func TestGroupCommitFailedCommitFallsBackToSingles(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g := setupGroup(t, newStore)
		charges := g.uncertainCharges(4)
		var evs []reconcile.Event
		for i, c := range charges {
			evs = append(evs, event(fmt.Sprintf("evt_%d", i), provider.Succeeded, c, g.clock.Now()))
		}
		before := g.gs.count()
		reqs, got := g.applyAll(evs)
		lost := errors.New("injected: connection lost at commit")
		g.inOneGroup(func() { g.gs.failNextTx(lost) }, reqs...)
		for i, c := range charges {
			if got[i].err != nil || got[i].outcome != reconcile.EventApplied {
				t.Fatalf("evt_%d after the group failed: %s, %v; want applied", i, got[i].outcome, got[i].err)
			}
			wantPath(t, g.wantState(c.PurchaseID, statemachine.Succeeded), settledByWebhook...)
		}
		g.wantTxs(before+2+len(evs), "the blocker, the failed group, each event alone")
	})
}

// Concurrent deliveries of one event in one group: the inbox's unique key
// decides as between transactions. The first applies it, the others read
// its row and answer duplicate, and the purchase moves once.
func TestGroupCommitDuplicatesInOneGroup(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g := setupGroup(t, newStore)
		c := g.uncertainCharges(1)[0]
		ev := event("evt_dup", provider.Succeeded, c, g.clock.Now())
		before := g.gs.count()
		reqs, got := g.applyAll([]reconcile.Event{ev, ev, ev, ev, ev})
		g.inOneGroup(nil, reqs...)
		for i, a := range got {
			want := reconcile.EventDuplicate
			if i == 0 {
				want = reconcile.EventApplied
			}
			if a.err != nil || a.outcome != want {
				t.Fatalf("delivery %d: %s, %v; want %s", i, a.outcome, a.err, want)
			}
		}
		wantPath(t, g.wantState(c.PurchaseID, statemachine.Succeeded), settledByWebhook...)
		g.wantTxs(before+2, "the blocker and the group")
	})
}

// Purchase API requests in one group: the same key and body replays the
// first one's answer, the same key with another body is refused, a
// reference already used in the group is a conflict naming its purchase;
// each refusal is its member's own, and the rest commit.
func TestGroupCommitPurchaseRequests(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g := setupGroup(t, newStore)
		type req struct {
			key, hash, customer, reference string
		}
		reqs := []req{
			{"k1", "h1", "cus-a", ""},
			{"k1", "h1", "cus-a", ""},
			{"k1", "h2", "cus-b", ""},
			{"k1", "h1", "cus-a", ""},
			{"k2", "h3", "cus-c", "order-1"},
			{"k3", "h4", "cus-c", "order-1"},
			{"k4", "h5", "cus-d", ""},
		}
		type result struct {
			saved reconcile.SavedResponse
			err   error
		}
		got := make([]result, len(reqs))
		calls := make([]func(), len(reqs))
		for i, r := range reqs {
			calls[i] = func() {
				np := reconcile.NewPurchase{Customer: r.customer, Reference: r.reference, Amount: 300, Currency: "usd"}
				got[i].saved, got[i].err = g.svc.CreatePurchaseOnce(context.Background(), "shop", r.key, r.hash, np,
					func(p reconcile.Purchase) (int, []byte, error) { return 201, []byte(p.ID), nil })
			}
		}
		before := g.gs.count()
		g.inOneGroup(nil, calls...)

		first := got[0].saved
		if got[0].err != nil || first.Replayed || string(first.Body) != first.PurchaseID {
			t.Fatalf("first k1: %+v, %v", first, got[0].err)
		}
		for _, i := range []int{1, 3} {
			if s := got[i].saved; got[i].err != nil || !s.Replayed || s.PurchaseID != first.PurchaseID || string(s.Body) != string(first.Body) {
				t.Fatalf("k1 again (%d): %+v, %v; want the first answer replayed", i, s, got[i].err)
			}
		}
		if !errors.Is(got[2].err, reconcile.ErrKeyMismatch) || got[2].saved.PurchaseID != first.PurchaseID {
			t.Fatalf("k1 with another body: %+v, %v; want a key mismatch naming the first", got[2].saved, got[2].err)
		}
		var conflict *reconcile.ReferenceConflictError
		if got[4].err != nil || !errors.As(got[5].err, &conflict) || conflict.ExistingPurchaseID != got[4].saved.PurchaseID {
			t.Fatalf("order-1 twice: %v, then %v; want the second refused naming the first", got[4].err, got[5].err)
		}
		if got[6].err != nil || got[6].saved.Replayed {
			t.Fatalf("k4: %+v, %v", got[6].saved, got[6].err)
		}
		counts := countStates(t, g.store)
		if counts[statemachine.Created] != 3 {
			t.Fatalf("%d purchases created, want 3 (k1, k2, k4)", counts[statemachine.Created])
		}
		g.wantTxs(before+2, "the blocker and the group: every refusal is of a known kind")
	})
}

// A purchase whose transaction fails in the group for an unknown reason
// runs again alone, and its neighbours commit.
func TestGroupCommitPurchaseNeighbourFails(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g := setupGroup(t, newStore)
		injected := errors.New("injected: cannot save the response of k2")
		g.gs.fault = func(key string) error {
			if key == "k2" {
				return injected
			}
			return nil
		}
		errs := make([]error, 3)
		calls := make([]func(), 3)
		for i := range calls {
			calls[i] = func() {
				np := reconcile.NewPurchase{Customer: "cus", Amount: 300, Currency: "usd"}
				_, errs[i] = g.svc.CreatePurchaseOnce(context.Background(), "shop", fmt.Sprintf("k%d", i+1), "h", np,
					func(p reconcile.Purchase) (int, []byte, error) { return 201, nil, nil })
			}
		}
		before := g.gs.count()
		g.inOneGroup(nil, calls...)
		if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], injected) {
			t.Fatalf("errors %v; want k2's alone", errs)
		}
		if n := countStates(t, g.store)[statemachine.Created]; n != 2 {
			t.Fatalf("%d purchases, want 2", n)
		}
		g.wantTxs(before+3, "the blocker, the group, k2 again alone")
	})
}

// A request whose context ends while it waits in the queue leaves at
// once, and the group goes on without it.
func TestGroupCommitCancelledWhileQueued(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g := setupGroup(t, newStore)
		charges := g.uncertainCharges(3)
		ctx, cancel := context.WithCancel(context.Background())
		left := make(chan error, 1)
		got := make([]applied, 3)
		reqs := make([]func(), 3)
		for i, c := range charges {
			ev := event(fmt.Sprintf("evt_%d", i), provider.Succeeded, c, g.clock.Now())
			reqs[i] = func() { got[i].outcome, got[i].err = g.svc.ApplyEvent(context.Background(), ev) }
		}
		reqs[1] = func() {
			_, err := g.svc.ApplyEvent(ctx, event("evt_1", provider.Succeeded, charges[1], g.clock.Now()))
			left <- err
		}
		// Cancelled once queued, before the group runs.
		g.inOneGroup(func() {
			cancel()
			if err := <-left; !errors.Is(err, context.Canceled) {
				t.Errorf("the cancelled request: %v, want context.Canceled", err)
			}
		}, reqs...)
		for _, i := range []int{0, 2} {
			if got[i].err != nil || got[i].outcome != reconcile.EventApplied {
				t.Fatalf("evt_%d: %s, %v; want applied", i, got[i].outcome, got[i].err)
			}
		}
		g.wantState(charges[1].PurchaseID, statemachine.Uncertain)
	})
}

// Concurrent deliveries of one event, grouped or not (Config.GroupCommitOff),
// apply it once.
func TestConcurrentDuplicateEvents(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("group commit off %v", off), func(t *testing.T) {
			stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
				f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{GroupCommitOff: off})
				p := f.create("dup")
				f.fake.Script(p.ID, fakeprovider.LostReply)
				f.runUntilIdle(f.svc)
				ev := event("evt_dup", provider.Succeeded, f.fake.ChargesFor(p.ID)[0], f.clock.Now())
				const n = 8
				outcomes := make([]reconcile.EventOutcome, n)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						<-start
						var err error
						if outcomes[i], err = f.svc.ApplyEvent(context.Background(), ev); err != nil {
							t.Errorf("delivery %d: %v", i, err)
						}
					})
				}
				close(start)
				wg.Wait()
				count := map[reconcile.EventOutcome]int{}
				for _, o := range outcomes {
					count[o]++
				}
				if count[reconcile.EventApplied] != 1 || count[reconcile.EventDuplicate] != n-1 {
					t.Fatalf("outcomes %v; want 1 applied, %d duplicates", count, n-1)
				}
				wantPath(t, f.wantState(p.ID, statemachine.Succeeded), settledByWebhook...)
			})
		})
	}
}
