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

// testSendHorizon: the books' send horizon is their latest send (a
// first attempt of a purchase or refund) or recovery epoch; before any,
// their earliest purchase or refund; zero when empty. A purchase or
// refund stored and not sent does not move it.
func testSendHorizon(t *testing.T, s *testStore) {
	ctx := t.Context()
	horizon := func(want time.Time, why string) {
		t.Helper()
		var got time.Time
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			got, err = tx.SendHorizon(ctx)
			return err
		})
		if !got.Equal(want) {
			t.Fatalf("SendHorizon: %s, want %s (%s)", got, want, why)
		}
	}
	horizon(time.Time{}, "empty books")
	later := newPurchase("pur_later")
	later.CreatedAt, later.UpdatedAt = at(2*time.Hour), at(2*time.Hour)
	insertPurchase(t, s, later)
	early := newPurchase("pur_early")
	early.CreatedAt, early.UpdatedAt = at(time.Hour), at(time.Hour)
	insertPurchase(t, s, early)
	horizon(at(time.Hour), "nothing sent: the earliest purchase")

	sent := getPurchase(t, s, early.ID)
	sent.State, sent.FirstAttemptAt, sent.UpdatedAt = statemachine.Submitted, at(3*time.Hour), at(3*time.Hour)
	sent = update(t, s, sent, statemachine.Created)
	horizon(at(3*time.Hour), "the purchase's send")

	paid := getPurchase(t, s, early.ID)
	paid.State, paid.ProviderPaymentID, paid.UpdatedAt = statemachine.Succeeded, "pi_early", at(4*time.Hour)
	update(t, s, paid, statemachine.Submitted)
	horizon(at(3*time.Hour), "a later write that is not a send")

	r := newRefund("ref_1", early.ID, "pi_early", 100)
	r.CreatedAt, r.UpdatedAt = at(5*time.Hour), at(5*time.Hour)
	insertRefund(t, s, r)
	unsent := newPurchase("pur_unsent")
	unsent.CreatedAt, unsent.UpdatedAt = at(6*time.Hour), at(6*time.Hour)
	insertPurchase(t, s, unsent)
	horizon(at(3*time.Hour), "a refund and a purchase stored, not sent")

	r = getRefund(t, s, r.ID)
	r.State, r.FirstAttemptAt, r.UpdatedAt = statemachine.Submitted, at(7*time.Hour), at(7*time.Hour)
	inTx(t, s, func(tx reconcile.Tx) error { return tx.UpdateRefund(ctx, r, statemachine.Created) })
	horizon(at(7*time.Hour), "the refund's send")

	inTx(t, s, func(tx reconcile.Tx) error {
		_, err := tx.InsertRecovery(ctx, reconcile.Recovery{RestoredAt: at(time.Hour), RecordedAt: at(8 * time.Hour),
			AuditFrom: at(-23 * time.Hour), AuditUntil: at(8 * time.Hour)})
		return err
	})
	horizon(at(8*time.Hour), "a recovery epoch")
}
