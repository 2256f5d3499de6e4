package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The set-based group create tests: the purchase API's requests of one
// group are created in one statement (reconcile.KeyedPurchaseInserter).
// The groups form as in groupcommit_test.go, behind a gated blocker, but
// over a store whose Tx forwards the set insert (gatedStore's faultTx
// does not, and so gives the one-row path) and counts the Tx calls of
// each transaction.

// countingStore is a gatedStore whose transactions count their Tx calls
// and keep the store's set insert (and, as gatedStore's, can be made to
// fail after their function succeeded).
type countingStore struct {
	*gatedStore
	mu    sync.Mutex
	calls []map[string]int // per transaction, in the order they began
	// panicSet, when set, makes the next set insert panic after it wrote.
	panicSet atomic.Bool
}

func (c *countingStore) InTx(ctx context.Context, fn func(reconcile.Tx) error) error {
	g := c.gatedStore
	g.mu.Lock()
	g.txs++
	gate, waiting, fail := g.gate, g.waiting, g.failNext
	g.gate, g.failNext = nil, nil
	g.mu.Unlock()
	if gate != nil {
		close(waiting)
		<-gate
	}
	c.mu.Lock()
	calls := map[string]int{}
	c.calls = append(c.calls, calls)
	c.mu.Unlock()
	return g.Store.InTx(ctx, func(tx reconcile.Tx) error {
		clear(calls) // InTx may run fn again: count the last run
		if err := fn(countingTx{Tx: tx, c: c, calls: calls}); err != nil {
			return err
		}
		return fail
	})
}

// lastTx returns the Tx calls of the transaction begun last.
func (c *countingStore) lastTx() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[len(c.calls)-1]
}

// countingTx counts the calls a purchase create may make. Every call of
// it is one statement at most.
type countingTx struct {
	reconcile.Tx
	c     *countingStore
	calls map[string]int
}

func (t countingTx) count(name string) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.calls[name]++
}

func (t countingTx) Savepoint(ctx context.Context, fn func(reconcile.Tx) error) error {
	t.count("Savepoint")
	return t.Tx.Savepoint(ctx, func(tx reconcile.Tx) error { return fn(countingTx{Tx: tx, c: t.c, calls: t.calls}) })
}

func (t countingTx) Now(ctx context.Context) (time.Time, error) {
	t.count("Now")
	return t.Tx.Now(ctx)
}

func (t countingTx) InsertKeyedPurchases(ctx context.Context, items []reconcile.KeyedPurchase) ([]bool, error) {
	t.count("InsertKeyedPurchases")
	inserted, err := t.Tx.(reconcile.KeyedPurchaseInserter).InsertKeyedPurchases(ctx, items)
	if t.c.panicSet.CompareAndSwap(true, false) {
		panic("injected: a bug after the set insert")
	}
	return inserted, err
}

func (t countingTx) InsertIdempotencyKey(ctx context.Context, k reconcile.IdempotencyKey) (bool, error) {
	t.count("InsertIdempotencyKey")
	return t.Tx.InsertIdempotencyKey(ctx, k)
}

func (t countingTx) GetIdempotencyKey(ctx context.Context, client, key string) (reconcile.IdempotencyKey, error) {
	t.count("GetIdempotencyKey")
	return t.Tx.GetIdempotencyKey(ctx, client, key)
}

func (t countingTx) SaveIdempotencyResponse(ctx context.Context, client, key string, status int, body []byte, purchaseID string) error {
	t.count("SaveIdempotencyResponse")
	return t.Tx.SaveIdempotencyResponse(ctx, client, key, status, body, purchaseID)
}

func (t countingTx) InsertPurchase(ctx context.Context, p reconcile.Purchase) error {
	t.count("InsertPurchase")
	return t.Tx.InsertPurchase(ctx, p)
}

func (t countingTx) InsertJob(ctx context.Context, j reconcile.Job) error {
	t.count("InsertJob")
	return t.Tx.InsertJob(ctx, j)
}

func (t countingTx) FindPurchaseByReference(ctx context.Context, customer, reference string) (reconcile.Purchase, error) {
	t.count("FindPurchaseByReference")
	return t.Tx.FindPurchaseByReference(ctx, customer, reference)
}

// setupSetGroup is setupGroup over a countingStore.
func setupSetGroup(t *testing.T, newStore stores.Factory) (*groupFixture, *countingStore) {
	t.Helper()
	f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
	cs := &countingStore{gatedStore: &gatedStore{Store: f.store}}
	svc, err := reconcile.New(cs, f.fake, reconcile.Config{
		WorkerID: "worker-g", GroupCommitLeaders: 1, Now: f.clock.Now, Logger: discardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return &groupFixture{fixture: f, gs: cs.gatedStore, svc: svc}, cs
}

// createReq is one purchase API request of a group test.
type createReq struct {
	key, hash, customer, reference string
}

// created is what CreatePurchaseOnce answered a createReq.
type created struct {
	saved reconcile.SavedResponse
	err   error
}

// createAll returns a call per request, each recording its answer; the
// saved body is the purchase's id, customer and reference.
func createAll(g *groupFixture, reqs []createReq) ([]func(), []created) {
	got := make([]created, len(reqs))
	calls := make([]func(), len(reqs))
	for i, r := range reqs {
		calls[i] = func() { got[i].saved, got[i].err = createOnce(g, r) }
	}
	return calls, got
}

func createOnce(g *groupFixture, r createReq) (reconcile.SavedResponse, error) {
	np := reconcile.NewPurchase{Customer: r.customer, Reference: r.reference, Amount: 300, Currency: "usd"}
	return g.svc.CreatePurchaseOnce(context.Background(), "shop", r.key, r.hash, np,
		func(p reconcile.Purchase) (int, []byte, error) {
			return 201, fmt.Appendf(nil, "%s %s %s %s", p.ID, p.Customer, p.Reference, p.CreatedAt.Format(time.RFC3339Nano)), nil
		})
}

// wantCreatedNow fails unless c is a first answer (201, not replayed)
// whose purchase exists, and a retry replays it byte for byte.
func wantCreatedNow(t *testing.T, g *groupFixture, what string, r createReq, c created) {
	t.Helper()
	if c.err != nil || c.saved.Replayed || c.saved.StatusCode != 201 || c.saved.PurchaseID == "" {
		t.Fatalf("%s: %+v, %v; want created", what, c.saved, c.err)
	}
	d, err := g.svc.ClientPurchase(context.Background(), "shop", c.saved.PurchaseID)
	if err != nil || d.Purchase.Customer != r.customer || d.Job.PurchaseID != c.saved.PurchaseID {
		t.Fatalf("%s: purchase %s: %+v, %v", what, c.saved.PurchaseID, d, err)
	}
	again, err := createOnce(g, r)
	if err != nil || !again.Replayed || string(again.Body) != string(c.saved.Body) || again.PurchaseID != c.saved.PurchaseID {
		t.Fatalf("%s again: %+v, %v; want %q replayed", what, again, err, c.saved.Body)
	}
}

// A request of the group that reuses a reference is refused alone
// (ReferenceConflictError), and its neighbours are created and answered
// 201 in the same group transaction.
func TestGroupCreateReferenceConflict(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g, _ := setupSetGroup(t, newStore)
		before, err := createOnce(g, createReq{"k0", "h0", "cus-a", "order-1"})
		if err != nil {
			t.Fatal(err)
		}
		reqs := []createReq{
			{"k1", "h1", "cus-b", ""},
			{"k2", "h2", "cus-a", "order-1"}, // used by k0
			{"k3", "h3", "cus-c", "order-1"}, // another customer's: free
			{"k4", "h4", "cus-d", "order-2"},
			{"k5", "h5", "cus-d", "order-2"}, // k4's, in the same group
		}
		calls, got := createAll(g, reqs)
		txs := g.gs.count()
		g.inOneGroup(nil, calls...)
		g.wantTxs(txs+2, "the blocker and the group: a conflict is its member's own")
		var conflict *reconcile.ReferenceConflictError
		if !errors.As(got[1].err, &conflict) || conflict.ExistingPurchaseID != before.PurchaseID {
			t.Fatalf("k2: %+v, %v; want a conflict naming %s", got[1].saved, got[1].err, before.PurchaseID)
		}
		if !errors.As(got[4].err, &conflict) || conflict.ExistingPurchaseID != got[3].saved.PurchaseID {
			t.Fatalf("k5: %+v, %v; want a conflict naming k4's %s", got[4].saved, got[4].err, got[3].saved.PurchaseID)
		}
		for _, i := range []int{0, 2, 3} {
			wantCreatedNow(t, g, reqs[i].key, reqs[i], got[i])
		}
		if n := countStates(t, g.store)[statemachine.Created]; n != 4 {
			t.Fatalf("%d purchases, want 4 (k0, k1, k3, k4)", n)
		}
		// The refused keys stored nothing: a corrected retry is a first
		// attempt.
		fixed, err := createOnce(g, createReq{"k2", "h2-fixed", "cus-a", "order-3"})
		if err != nil || fixed.Replayed {
			t.Fatalf("k2 corrected: %+v, %v; want created", fixed, err)
		}
	})
}

// Two requests with one key in one group: the first creates, the second
// replays its answer (the same body) or is refused as a mismatch (another
// body), exactly as in a later transaction; never two purchases.
func TestGroupCreateSameKeyTwice(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g, _ := setupSetGroup(t, newStore)
		reqs := []createReq{
			{"k1", "h1", "cus-a", ""},
			{"k2", "h2", "cus-b", ""},
			{"k1", "h1", "cus-a", ""},
			{"k1", "h1-other", "cus-z", ""},
			{"k2", "h2", "cus-b", ""},
		}
		calls, got := createAll(g, reqs)
		g.inOneGroup(nil, calls...)
		for _, p := range [][2]int{{0, 2}, {1, 4}} {
			first, again := got[p[0]], got[p[1]]
			wantCreatedNow(t, g, reqs[p[0]].key, reqs[p[0]], first)
			if again.err != nil || !again.saved.Replayed || again.saved.PurchaseID != first.saved.PurchaseID ||
				string(again.saved.Body) != string(first.saved.Body) || again.saved.StatusCode != 201 {
				t.Fatalf("%s twice in the group: %+v, %v; want the first's answer replayed", reqs[p[0]].key, again.saved, again.err)
			}
		}
		if !errors.Is(got[3].err, reconcile.ErrKeyMismatch) || got[3].saved.PurchaseID != got[0].saved.PurchaseID {
			t.Fatalf("k1 with another body: %+v, %v; want a mismatch naming the first", got[3].saved, got[3].err)
		}
		if n := countStates(t, g.store)[statemachine.Created]; n != 2 {
			t.Fatalf("%d purchases, want 2", n)
		}
	})
}

// A group of creates costs the same handful of statements whatever its
// size: the clock and one set insert.
func TestGroupCreateStatementsPerGroup(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g, cs := setupSetGroup(t, newStore)
		var per []map[string]int
		for _, n := range []int{2, 16} {
			reqs := make([]createReq, n)
			for i := range reqs {
				reqs[i] = createReq{fmt.Sprintf("k%d-%d", n, i), "h", fmt.Sprintf("cus-%d", i), fmt.Sprintf("order-%d-%d", n, i)}
			}
			calls, got := createAll(g, reqs)
			g.inOneGroup(nil, calls...)
			per = append(per, cs.lastTx())
			for i, c := range got {
				if c.err != nil || c.saved.Replayed {
					t.Fatalf("group of %d, request %d: %+v, %v", n, i, c.saved, c.err)
				}
			}
		}
		want := map[string]int{"Now": 1, "InsertKeyedPurchases": 1}
		for i, calls := range per {
			equalCalls(t, fmt.Sprintf("group %d", i+1), calls, want)
		}
		if n := countStates(t, g.store)[statemachine.Created]; n != 18 {
			t.Fatalf("%d purchases, want 18", n)
		}
	})
}

func equalCalls(t *testing.T, what string, got, want map[string]int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: Tx calls %v, want %v", what, got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("%s: Tx calls %v, want %v", what, got, want)
		}
	}
}

// When the group's transaction fails as a whole (here its commit), each
// create runs again alone, and is created once and answered as a first
// attempt.
func TestGroupCreateFailedGroupRunsAlone(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g, _ := setupSetGroup(t, newStore)
		reqs := []createReq{{"k1", "h1", "cus-a", "order-1"}, {"k2", "h2", "cus-b", ""}, {"k3", "h3", "cus-c", ""}}
		calls, got := createAll(g, reqs)
		txs := g.gs.count()
		g.inOneGroup(func() { g.gs.failNextTx(errors.New("injected: the group's commit failed")) }, calls...)
		g.wantTxs(txs+2+len(reqs), "the blocker, the failed group, each request alone")
		for i, r := range reqs {
			wantCreatedNow(t, g, r.key, r, got[i])
		}
		if n := countStates(t, g.store)[statemachine.Created]; n != len(reqs) {
			t.Fatalf("%d purchases, want %d", n, len(reqs))
		}
	})
}

// A panic in a group's set insert, after the insert wrote, fails the
// group's transaction: nothing of it commits, every request runs alone
// and is created once, and the process goes on.
func TestGroupCreatePanicRunsEachAlone(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g, cs := setupSetGroup(t, newStore)
		reqs := []createReq{{"k1", "h1", "cus-a", "order-1"}, {"k2", "h2", "cus-b", ""}}
		calls, got := createAll(g, reqs)
		cs.panicSet.Store(true)
		txs := g.gs.count()
		g.inOneGroup(nil, calls...)
		g.wantTxs(txs+2+len(reqs), "the blocker, the failed group, each request alone")
		for i, r := range reqs {
			wantCreatedNow(t, g, r.key, r, got[i])
		}
		if n := countStates(t, g.store)[statemachine.Created]; n != len(reqs) {
			t.Fatalf("%d purchases, want %d", n, len(reqs))
		}
	})
}
