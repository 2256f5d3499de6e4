package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The tests of the recovery epochs, the books' latest write and the
// system identifier.

func testRecoveries(t *testing.T, s *testStore) {
	ctx := t.Context()
	var (
		open reconcile.Recovery
		err  error
	)
	inTx(t, s, func(tx reconcile.Tx) error {
		_, err = tx.OpenRecovery(ctx)
		return nil
	})
	if !errors.Is(err, reconcile.ErrNotFound) {
		t.Fatalf("OpenRecovery on empty books: %v, want ErrNotFound", err)
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		_, err = tx.InsertRecovery(ctx, reconcile.Recovery{RestoredAt: at(time.Hour)})
		return nil
	})
	if !errors.Is(err, reconcile.ErrInvalid) {
		t.Fatalf("InsertRecovery without its times: %v, want ErrInvalid", err)
	}

	// A purchase and a refund before the epoch, a purchase after it.
	old := newPurchase("pur_before")
	insertPurchase(t, s, old)
	settled := newPurchase("pur_settled")
	insertPurchase(t, s, settled)
	inTx(t, s, func(tx reconcile.Tx) error {
		return moveTx(ctx, tx, settled.ID, statemachine.Submitted, statemachine.Succeeded)
	})
	late := newPurchase("pur_after")
	late.CreatedAt, late.UpdatedAt = at(3*time.Hour), at(3*time.Hour)
	insertPurchase(t, s, late)

	want := reconcile.Recovery{RestoredAt: at(time.Hour), RecordedAt: at(2 * time.Hour), AuditFrom: at(-23 * time.Hour), AuditUntil: at(2 * time.Hour)}
	inTx(t, s, func(tx reconcile.Tx) error {
		want.ID, err = tx.InsertRecovery(ctx, want)
		return err
	})
	inTx(t, s, func(tx reconcile.Tx) error {
		open, err = tx.OpenRecovery(ctx)
		return err
	})
	if open != want || !open.Open() {
		t.Fatalf("OpenRecovery: %+v, want %+v", open, want)
	}
	var held, heldRefunds int
	inTx(t, s, func(tx reconcile.Tx) error {
		held, heldRefunds, err = tx.CountRecoveryHeld(ctx, open.RecordedAt)
		return err
	})
	if held != 1 || heldRefunds != 0 {
		t.Fatalf("CountRecoveryHeld: %d purchases, %d refunds, want 1 (created before, not final) and 0", held, heldRefunds)
	}
	var latest time.Time
	inTx(t, s, func(tx reconcile.Tx) error {
		latest, err = tx.LatestWrite(ctx)
		return err
	})
	if !latest.Equal(at(3 * time.Hour)) {
		t.Fatalf("LatestWrite: %s, want %s (the latest purchase's)", latest, at(3*time.Hour))
	}

	inTx(t, s, func(tx reconcile.Tx) error { return tx.CompleteRecovery(ctx, want.ID, 2, 3, at(4*time.Hour)) })
	inTx(t, s, func(tx reconcile.Tx) error {
		err = tx.CompleteRecovery(ctx, want.ID, 2, 3, at(4*time.Hour))
		return nil
	})
	if !errors.Is(err, reconcile.ErrConflict) {
		t.Fatalf("CompleteRecovery again: %v, want ErrConflict", err)
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		err = tx.CompleteRecovery(ctx, want.ID+100, 0, 0, at(4*time.Hour))
		return nil
	})
	if !errors.Is(err, reconcile.ErrNotFound) {
		t.Fatalf("CompleteRecovery of an unknown epoch: %v, want ErrNotFound", err)
	}
	var all []reconcile.Recovery
	inTx(t, s, func(tx reconcile.Tx) error {
		if _, err := tx.OpenRecovery(ctx); !errors.Is(err, reconcile.ErrNotFound) {
			t.Errorf("OpenRecovery after completion: %v, want ErrNotFound", err)
		}
		all, err = tx.ListRecoveries(ctx, 0)
		return err
	})
	want.CompletedAt, want.Relinked, want.Orphans = at(4*time.Hour), 2, 3
	if len(all) != 1 || all[0] != want {
		t.Fatalf("ListRecoveries: %+v, want [%+v]", all, want)
	}

	// The system identifier: Postgres's cluster has one, and it is
	// recorded as given; a store without one says errors.ErrUnsupported.
	var current, recorded string
	inTx(t, s, func(tx reconcile.Tx) error {
		current, _, err = tx.SystemIdentifier(ctx)
		if errors.Is(err, errors.ErrUnsupported) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := tx.RecordSystemIdentifier(ctx, "42", at(time.Hour)); err != nil {
			return err
		}
		_, recorded, err = tx.SystemIdentifier(ctx)
		return err
	})
	if current != "" && recorded != "42" {
		t.Fatalf("SystemIdentifier after RecordSystemIdentifier(42): recorded %q", recorded)
	}
}
