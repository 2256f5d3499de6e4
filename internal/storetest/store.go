package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The tests of the store itself: Ready, InTx and what a refused write
// leaves of a transaction.

func testReady(t *testing.T, s *testStore) {
	if err := s.Ready(t.Context()); err != nil {
		t.Fatalf("Ready on a migrated store: %v", err)
	}
}

func testInTx(t *testing.T, newStore func(*testing.T) *testStore) {
	parallel(t, "RollsBackOnError", func(t *testing.T) {
		s := newStore(t)
		boom := errors.New("boom")
		err := txErr(t, s, func(tx reconcile.Tx) error {
			if err := tx.InsertPurchase(t.Context(), newPurchase("pur_1")); err != nil {
				return err
			}
			if _, err := tx.GetPurchase(t.Context(), "pur_1"); err != nil {
				return fmt.Errorf("the transaction does not see its own write: %w", err)
			}
			return boom
		})
		wantErr(t, "InTx", err, boom)
		err = txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetPurchase(t.Context(), "pur_1"); return err })
		wantErr(t, "GetPurchase after rollback", err, reconcile.ErrNotFound)
	})

	parallel(t, "StaleLeaseWritesNothing", func(t *testing.T) {
		s := newStore(t)
		const leaseFor = time.Minute
		purchaseWithJob(t, s, "pur_1", base)
		old := claimOne(t, s, "w1", "pur_1", base, leaseFor)
		claimOne(t, s, "w2", "pur_1", old.ExpiresAt, leaseFor) // takes over

		// The stale worker writes its result, then checks its lease
		// before committing, as the protocol requires, at a time its own
		// lease has not reached.
		s.clock.Set(old.ExpiresAt.Add(-time.Second))
		err := txErr(t, s, func(tx reconcile.Tx) error {
			ctx := t.Context()
			p, err := tx.GetPurchase(ctx, "pur_1")
			if err != nil {
				return err
			}
			p.State = statemachine.Submitted
			if err := tx.UpdatePurchase(ctx, p, statemachine.Created); err != nil {
				return err
			}
			if err := tx.InsertTransition(ctx, reconcile.TransitionRecord{PurchaseID: "pur_1", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, Actor: "w1", LeaseToken: old.Token, At: base}); err != nil {
				return err
			}
			if err := tx.RescheduleJob(ctx, "pur_1", at(time.Hour)); err != nil {
				return err
			}
			return tx.CheckLease(ctx, old)
		})
		wantErr(t, "InTx with a stale lease", err, reconcile.ErrLeaseLost)
		if p := getPurchase(t, s, "pur_1"); p.State != statemachine.Created || p.Version != 1 {
			t.Fatalf("purchase written under a stale lease: %+v", p)
		}
		inTx(t, s, func(tx reconcile.Tx) error {
			rs, err := tx.ListTransitions(t.Context(), "pur_1")
			if err == nil && len(rs) != 0 {
				err = fmt.Errorf("transitions written under a stale lease: %+v", rs)
			}
			return err
		})
		if j := getJob(t, s, "pur_1"); j.LeaseOwner != "w2" || j.LeaseToken != 2 {
			t.Fatalf("job after the stale worker's rollback: %+v; want w2's lease, token 2", j)
		}
	})
}

// testTxUsableAfterRefusal checks that a refused write (duplicate,
// forbidden move, conflict) fails alone: the transaction goes on and its
// other writes commit.
func testTxUsableAfterRefusal(t *testing.T, s *testStore) {
	insertPurchase(t, s, newPurchase("pur_1"))
	inTx(t, s, func(tx reconcile.Tx) error {
		ctx := t.Context()
		wantErr(t, "duplicate insert", tx.InsertPurchase(ctx, newPurchase("pur_1")), reconcile.ErrDuplicate)
		p, err := tx.GetPurchase(ctx, "pur_1")
		if err != nil {
			return fmt.Errorf("read after a refused insert: %w", err)
		}
		forbidden := p
		forbidden.State = statemachine.Succeeded
		wantErr(t, "forbidden move", tx.UpdatePurchase(ctx, forbidden, statemachine.Created), reconcile.ErrForbiddenTransition)
		stale := p
		stale.Version--
		stale.State = statemachine.Submitted
		wantErr(t, "stale update", tx.UpdatePurchase(ctx, stale, statemachine.Created), reconcile.ErrConflict)
		p.State = statemachine.Submitted
		if err := tx.UpdatePurchase(ctx, p, statemachine.Created); err != nil {
			return fmt.Errorf("allowed move after refusals: %w", err)
		}
		return tx.InsertPurchase(ctx, newPurchase("pur_2"))
	})
	if got := getPurchase(t, s, "pur_1"); got.State != statemachine.Submitted || got.Version != 2 {
		t.Fatalf("pur_1: state %s version %d, want submitted 2", got.State, got.Version)
	}
	getPurchase(t, s, "pur_2")
}
