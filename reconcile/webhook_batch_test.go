package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/events"
	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The tests of webhooks applied set-based in a group (webhook_batch.go).
// Each forms one group for sure, as the group commit tests do
// (groupFixture.inOneGroup), over a eventCountingStore beneath the gated one.

// eventCountingStore counts, per transaction, the calls of the Tx methods a
// webhook's path makes, and can refuse batches of moves and change a
// purchase right after a batch read it.
type eventCountingStore struct {
	reconcile.Store
	mu  sync.Mutex
	txs []map[string]int // per transaction run, calls by method
	// refuseMoves, when set, refuses the ApplyMoves batches it returns an
	// error for, before they reach the store.
	refuseMoves func([]reconcile.Move) error
	// afterFind, when set, runs in the transaction right after the first
	// FindPurchases that looks for purchase findID.
	afterFind func(ctx context.Context, tx reconcile.Tx) error
	findID    string
}

func (s *eventCountingStore) InTx(ctx context.Context, fn func(reconcile.Tx) error) error {
	return s.Store.InTx(ctx, func(tx reconcile.Tx) error {
		s.mu.Lock()
		s.txs = append(s.txs, map[string]int{})
		n := len(s.txs) - 1
		s.mu.Unlock()
		return fn(eventCountingTx{tx, s, n})
	})
}

// last returns the calls of the latest transaction run.
func (s *eventCountingStore) last(t *testing.T) map[string]int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.txs) == 0 {
		t.Fatal("no transaction ran")
	}
	return s.txs[len(s.txs)-1]
}

func (s *eventCountingStore) count(n int, method string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.txs[n][method]++
}

// eventCountingTx is a Tx of eventCountingStore's; its savepoints count too.
type eventCountingTx struct {
	reconcile.Tx
	s *eventCountingStore
	n int // its transaction
}

func (t eventCountingTx) Savepoint(ctx context.Context, fn func(reconcile.Tx) error) error {
	t.s.count(t.n, "Savepoint")
	return t.Tx.Savepoint(ctx, func(tx reconcile.Tx) error { return fn(eventCountingTx{tx, t.s, t.n}) })
}

func (t eventCountingTx) Now(ctx context.Context) (time.Time, error) {
	t.s.count(t.n, "Now")
	return t.Tx.Now(ctx)
}

func (t eventCountingTx) InsertInboxEvent(ctx context.Context, e reconcile.InboxEvent) (bool, error) {
	t.s.count(t.n, "InsertInboxEvent")
	return t.Tx.InsertInboxEvent(ctx, e)
}

func (t eventCountingTx) InsertInboxEvents(ctx context.Context, es []reconcile.InboxEvent) ([]bool, error) {
	t.s.count(t.n, "InsertInboxEvents")
	return t.Tx.InsertInboxEvents(ctx, es)
}

func (t eventCountingTx) ReceiveInboxEvents(ctx context.Context, es []reconcile.InboxEvent) ([]bool, time.Time, error) {
	t.s.count(t.n, "ReceiveInboxEvents")
	return t.Tx.ReceiveInboxEvents(ctx, es)
}

func (t eventCountingTx) GetInboxEvent(ctx context.Context, prov, id string) (reconcile.InboxEvent, error) {
	t.s.count(t.n, "GetInboxEvent")
	return t.Tx.GetInboxEvent(ctx, prov, id)
}

func (t eventCountingTx) UpdateInboxEvent(ctx context.Context, prov, id, purchaseID string, outcome reconcile.EventOutcome, at time.Time) error {
	t.s.count(t.n, "UpdateInboxEvent")
	return t.Tx.UpdateInboxEvent(ctx, prov, id, purchaseID, outcome, at)
}

func (t eventCountingTx) UpdateInboxEvents(ctx context.Context, us []reconcile.InboxUpdate) error {
	t.s.count(t.n, "UpdateInboxEvents")
	return t.Tx.UpdateInboxEvents(ctx, us)
}

func (t eventCountingTx) FindPurchases(ctx context.Context, ids, payments []string) ([]reconcile.Purchase, error) {
	t.s.count(t.n, "FindPurchases")
	found, err := t.Tx.FindPurchases(ctx, ids, payments)
	t.s.mu.Lock()
	hook := t.s.afterFind
	if !slices.Contains(ids, t.s.findID) {
		hook = nil
	}
	if hook != nil {
		t.s.afterFind = nil
	}
	t.s.mu.Unlock()
	if err == nil && hook != nil {
		err = hook(ctx, t.Tx)
	}
	return found, err
}

func (t eventCountingTx) GetPurchase(ctx context.Context, id string) (reconcile.Purchase, error) {
	t.s.count(t.n, "GetPurchase")
	return t.Tx.GetPurchase(ctx, id)
}

func (t eventCountingTx) FindPurchaseByPaymentID(ctx context.Context, id string) (reconcile.Purchase, error) {
	t.s.count(t.n, "FindPurchaseByPaymentID")
	return t.Tx.FindPurchaseByPaymentID(ctx, id)
}

func (t eventCountingTx) UpdatePurchase(ctx context.Context, p reconcile.Purchase, from statemachine.State) error {
	t.s.count(t.n, "UpdatePurchase")
	return t.Tx.UpdatePurchase(ctx, p, from)
}

func (t eventCountingTx) InsertTransition(ctx context.Context, r reconcile.TransitionRecord) error {
	t.s.count(t.n, "InsertTransition")
	return t.Tx.InsertTransition(ctx, r)
}

func (t eventCountingTx) ApplyMoves(ctx context.Context, moves []reconcile.Move) ([]bool, error) {
	t.s.count(t.n, "ApplyMoves")
	t.s.mu.Lock()
	refuse := t.s.refuseMoves
	t.s.mu.Unlock()
	if refuse != nil {
		if err := refuse(moves); err != nil {
			return nil, err
		}
	}
	return t.Tx.ApplyMoves(ctx, moves)
}

func (t eventCountingTx) AppendOutbox(ctx context.Context, es ...events.Event) ([]reconcile.OutboxEvent, error) {
	t.s.count(t.n, "AppendOutbox")
	return t.Tx.AppendOutbox(ctx, es...)
}

// setupCounted is setupGroup over a eventCountingStore.
func setupCounted(t *testing.T, newStore stores.Factory) (*groupFixture, *eventCountingStore) {
	t.Helper()
	f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
	cs := &eventCountingStore{Store: f.store}
	gs := &gatedStore{Store: cs}
	svc, err := reconcile.New(gs, f.fake, reconcile.Config{
		WorkerID: "worker-g", GroupCommitLeaders: 1, Now: f.clock.Now, Logger: discardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return &groupFixture{fixture: f, gs: gs, svc: svc}, cs
}

// settlingEvents returns a succeeded event per charge, evt_0 on.
func (g *groupFixture) settlingEvents(charges []fakeprovider.Charge) []reconcile.Event {
	g.t.Helper()
	var evs []reconcile.Event
	for i, c := range charges {
		evs = append(evs, event(fmt.Sprintf("evt_%d", i), provider.Succeeded, c, g.clock.Now()))
	}
	return evs
}

// A group of N webhooks that settle their purchases costs the same
// statements whatever N: one insert of the inbox rows, which reads the
// store's clock too (no Now of its own), one read of the purchases, two
// batches of moves (uncertain → reconciling → succeeded), one update of
// the events' outcomes, one append to the outbox, and no read or write
// of a purchase or an inbox row per event.
func TestWebhookBatchCostsConstantStatements(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		perGroup := map[int]map[string]int{}
		for _, n := range []int{2, 8} {
			g, cs := setupCounted(t, newStore)
			charges := g.uncertainCharges(n)
			reqs, got := g.applyAll(g.settlingEvents(charges))
			g.inOneGroup(nil, reqs...)
			for i, c := range charges {
				if got[i].err != nil || got[i].outcome != reconcile.EventApplied {
					t.Fatalf("n=%d evt_%d: %s, %v; want applied", n, i, got[i].outcome, got[i].err)
				}
				wantPath(t, g.wantState(c.PurchaseID, statemachine.Succeeded), settledByWebhook...)
			}
			calls := cs.last(t)
			for _, m := range []string{"GetPurchase", "FindPurchaseByPaymentID", "UpdatePurchase", "InsertTransition", "InsertInboxEvent", "GetInboxEvent"} {
				if calls[m] != 0 {
					t.Fatalf("n=%d: %d calls of %s, want none: %v", n, calls[m], m, calls)
				}
			}
			perGroup[n] = map[string]int{}
			for _, m := range []string{"Now", "InsertInboxEvents", "ReceiveInboxEvents", "FindPurchases", "ApplyMoves", "UpdateInboxEvent", "UpdateInboxEvents", "AppendOutbox", "Savepoint"} {
				perGroup[n][m] = calls[m]
			}
		}
		// The events' outcomes, and the outbox's events of the group's
		// moves, are written together.
		want := map[string]int{"Now": 0, "InsertInboxEvents": 0, "ReceiveInboxEvents": 1, "FindPurchases": 1, "ApplyMoves": 2, "UpdateInboxEvent": 0, "UpdateInboxEvents": 1, "AppendOutbox": 1, "Savepoint": 1}
		for n, calls := range perGroup {
			equalCalls(t, fmt.Sprintf("group of %d", n), calls, want)
		}
	})
}

// A webhook whose id was stored before with another payload is answered
// a conflict in its group, and its neighbours are applied.
func TestWebhookBatchConflictSparesNeighbours(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g, _ := setupCounted(t, newStore)
		charges := g.uncertainCharges(3)
		evs := g.settlingEvents(charges)
		first := evs[1]
		first.PayloadHash = "h-earlier"
		first.Outcome, first.Type = "", "charge.updated" // stored, ignored
		if _, err := g.svc.ApplyEvent(context.Background(), first); err != nil {
			t.Fatal(err)
		}
		reqs, got := g.applyAll(evs)
		g.inOneGroup(nil, reqs...)
		if !errors.Is(got[1].err, reconcile.ErrEventConflict) || got[1].outcome != reconcile.EventConflict {
			t.Fatalf("evt_1: %s, %v; want a conflict", got[1].outcome, got[1].err)
		}
		g.wantState(charges[1].PurchaseID, statemachine.Uncertain)
		for _, i := range []int{0, 2} {
			if got[i].err != nil || got[i].outcome != reconcile.EventApplied {
				t.Fatalf("evt_%d next to a conflict: %s, %v; want applied", i, got[i].outcome, got[i].err)
			}
			wantPath(t, g.wantState(charges[i].PurchaseID, statemachine.Succeeded), settledByWebhook...)
		}
	})
}

// When the store refuses the group's batch of moves, nothing of the set
// is kept and each webhook is applied the per-event way, in the same
// transaction: every one is applied and answered, the refused one too.
func TestWebhookBatchRefusedMovesGoOneByOne(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g, cs := setupCounted(t, newStore)
		charges := g.uncertainCharges(3)
		refused := charges[1].PurchaseID
		cs.refuseMoves = func(moves []reconcile.Move) error {
			for _, mv := range moves {
				if mv.From.ID == refused {
					return fmt.Errorf("injected: %s: %w", refused, reconcile.ErrForbiddenTransition)
				}
			}
			return nil
		}
		before := g.gs.count()
		reqs, got := g.applyAll(g.settlingEvents(charges))
		g.inOneGroup(nil, reqs...)
		for i, c := range charges {
			if got[i].err != nil || got[i].outcome != reconcile.EventApplied {
				t.Fatalf("evt_%d: %s, %v; want applied", i, got[i].outcome, got[i].err)
			}
			wantPath(t, g.wantState(c.PurchaseID, statemachine.Succeeded), settledByWebhook...)
		}
		calls := cs.last(t)
		if calls["UpdatePurchase"] != 2*len(charges) || calls["InsertInboxEvent"] != len(charges) {
			t.Fatalf("calls %v; want each event applied the per-event way", calls)
		}
		g.wantTxs(before+2, "the blocker and the group")
	})
}

// Deliveries of one event in one group are applied once: the first
// inserts and settles, a repeat is a duplicate, one with another payload
// a conflict, and an event of another purchase in between is applied.
func TestWebhookBatchDuplicatesAppliedOnce(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g, cs := setupCounted(t, newStore)
		charges := g.uncertainCharges(2)
		evs := g.settlingEvents(charges)
		other := evs[0]
		other.PayloadHash = "h-other"
		reqs, got := g.applyAll([]reconcile.Event{evs[0], evs[1], evs[0], other, evs[0]})
		g.inOneGroup(nil, reqs...)
		want := []reconcile.EventOutcome{reconcile.EventApplied, reconcile.EventApplied, reconcile.EventDuplicate, reconcile.EventConflict, reconcile.EventDuplicate}
		for i, a := range got {
			if a.outcome != want[i] || (a.err != nil) != (want[i] == reconcile.EventConflict) {
				t.Fatalf("delivery %d: %s, %v; want %s", i, a.outcome, a.err, want[i])
			}
		}
		for _, c := range charges {
			wantPath(t, g.wantState(c.PurchaseID, statemachine.Succeeded), settledByWebhook...)
		}
		calls := cs.last(t)
		if calls["AppendOutbox"] != 1 || calls["ApplyMoves"] != 2 {
			t.Fatalf("calls %v; want the group's moves and their events written together", calls)
		}
		for _, c := range charges {
			var out []reconcile.OutboxEvent
			if err := g.store.InTx(context.Background(), func(tx reconcile.Tx) error {
				var err error
				out, err = tx.ListOutbox(context.Background(), c.PurchaseID)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if len(out) != 1 || out[0].Type != events.PurchaseSucceeded {
				t.Fatalf("outbox of %s: %+v; want one purchase.succeeded: settled once", c.PurchaseID, out)
			}
		}
		var stored []reconcile.InboxEvent
		if err := g.store.InTx(context.Background(), func(tx reconcile.Tx) error {
			var err error
			stored, err = tx.ListInboxEvents(context.Background(), charges[0].PurchaseID)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if len(stored) != 1 || stored[0].PayloadHash != evs[0].PayloadHash || stored[0].Outcome != reconcile.EventApplied {
			t.Fatalf("inbox events of %s: %+v, want evt_0 once, applied", charges[0].PurchaseID, stored)
		}
	})
}

// A webhook whose purchase moved after the batch read it (here the
// worker moves it to reconciling in between) is not written by the
// batch's move, which its version fences, but judged again the
// per-event way, and settles the purchase from where it is.
func TestWebhookBatchMovedPurchaseJudgedAgain(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		g, cs := setupCounted(t, newStore)
		charges := g.uncertainCharges(3)
		moved := charges[2].PurchaseID
		cs.findID = moved
		cs.afterFind = func(ctx context.Context, tx reconcile.Tx) error {
			p, err := tx.GetPurchase(ctx, moved)
			if err != nil {
				return err
			}
			next := p
			next.State = statemachine.Reconciling
			if err := tx.UpdatePurchase(ctx, next, p.State); err != nil {
				return err
			}
			return tx.InsertTransition(ctx, reconcile.TransitionRecord{
				PurchaseID: moved, From: p.State, To: next.State, Cause: reconcile.CauseStatusQuery,
				Evidence: "the worker's status query", Actor: "worker-b", At: next.UpdatedAt,
			})
		}
		reqs, got := g.applyAll(g.settlingEvents(charges))
		g.inOneGroup(nil, reqs...)
		for i, c := range charges {
			if got[i].err != nil || got[i].outcome != reconcile.EventApplied {
				t.Fatalf("evt_%d: %s, %v; want applied", i, got[i].outcome, got[i].err)
			}
			d := g.wantState(c.PurchaseID, statemachine.Succeeded)
			if c.PurchaseID != moved {
				wantPath(t, d, settledByWebhook...)
				continue
			}
			wantPath(t, d, "created→submitted:submit", "submitted→uncertain:submit_response",
				"uncertain→reconciling:status_query", "reconciling→succeeded:webhook")
		}
		if calls := cs.last(t); calls["UpdatePurchase"] != 1 || calls["ApplyMoves"] != 2 {
			t.Fatalf("calls %v; want the moved purchase written the per-event way alone", calls)
		}
	})
}
