package reconcile_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// takeoverStore hands another worker the job of victim right after a
// claim of worker's has leased it: the batch then carries a lease that is
// no longer the job's.
type takeoverStore struct {
	reconcile.Store
	t      *testing.T
	worker string
	victim string
	once   sync.Once

	mu      sync.Mutex
	batches []map[string]bool // each ApplyMoves: applied by purchase
}

func (s *takeoverStore) InTx(ctx context.Context, fn func(reconcile.Tx) error) error {
	return s.Store.InTx(ctx, func(tx reconcile.Tx) error { return fn(movesTx{tx, s}) })
}

// movesTx records what each batch applied.
type movesTx struct {
	reconcile.Tx
	s *takeoverStore
}

func (tx movesTx) ApplyMoves(ctx context.Context, moves []reconcile.Move) ([]bool, error) {
	applied, err := tx.Tx.ApplyMoves(ctx, moves)
	if err == nil {
		got := map[string]bool{}
		for i, mv := range moves {
			got[mv.From.ID] = applied[i]
		}
		tx.s.mu.Lock()
		tx.s.batches = append(tx.s.batches, got)
		tx.s.mu.Unlock()
	}
	return applied, err
}

func (s *takeoverStore) ClaimJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
	leases, err := s.Store.ClaimJobs(ctx, owner, limit, leaseFor)
	if owner != s.worker || err != nil {
		return leases, err
	}
	for _, l := range leases {
		if l.PurchaseID != s.victim {
			continue
		}
		s.once.Do(func() {
			if err := s.Store.InTx(ctx, func(tx reconcile.Tx) error {
				return tx.RescheduleJob(ctx, s.victim, l.Now) // its lease released...
			}); err != nil {
				s.t.Fatal(err)
			}
			if _, err := s.Store.ClaimJob(ctx, s.victim, "worker-b", leaseFor); err != nil { // ...and taken
				s.t.Fatal(err)
			}
		})
	}
	return leases, nil
}

// A batch member whose lease was taken over commits nothing, and sends
// nothing, while the rest of its batch commits and is charged once.
func TestBatchMemberWithLeaseTakenOverCommitsNothing(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		var ps []reconcile.Purchase
		for _, c := range []string{"b1", "b2", "b3", "b4"} {
			ps = append(ps, f.create(c))
		}
		victim := ps[2]
		ts := &takeoverStore{Store: f.store, t: t, worker: "worker-a", victim: victim.ID}
		w, err := reconcile.New(ts, f.fake, reconcile.Config{WorkerID: "worker-a", BatchSize: 4, Concurrency: 4, Now: f.clock.Now, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := w.RunOnce(context.Background()); err != nil || n != 4 {
			t.Fatalf("RunOnce = %d, %v; want the batch of 4", n, err)
		}
		for _, p := range ps {
			if p.ID == victim.ID {
				continue
			}
			f.wantState(p.ID, statemachine.Succeeded)
			f.wantMoneyTaken(p.ID, 1)
		}
		d := f.wantState(victim.ID, statemachine.Created)
		if len(d.Transitions) != 0 || len(d.Attempts) != 0 {
			t.Fatalf("the member whose lease was taken over wrote: %s", history(d))
		}
		if n := f.fake.CreateCalls(reconcile.ProviderKeyFor(victim.ID)); n != 0 {
			t.Fatalf("%d creates sent for the member whose lease was taken over", n)
		}
		// The intents went in one batch, the victim's refused alone.
		first := ts.batches[0]
		if len(first) != 4 || first[victim.ID] {
			t.Fatalf("the first batch applied %v, want the 4 intents but the victim's", first)
		}
		for id, ok := range first {
			if !ok && id != victim.ID {
				t.Fatalf("the first batch applied %v: %s refused too", first, id)
			}
		}
		if d.Job.LeaseOwner != "worker-b" {
			t.Fatalf("victim's job %+v, want worker-b's lease untouched", d.Job)
		}
	})
}
