package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The limits the database holds refunds to, alone and under concurrent
// inserts.

// testRefundLimits covers what the database refuses of a refund: one of
// a purchase that is not succeeded or of a payment that is not the
// purchase's (ErrNotRefundable), one whose finding does not name its
// payment and purchase (ErrNotRefundable), and refunds of one payment
// adding up to more than it took (ErrRefundExceeds), pending ones
// counted, failed ones not.
func testRefundLimits(t *testing.T, newStore func(*testing.T) *testStore) {
	parallel(t, "PurchaseNotSucceeded", func(t *testing.T) {
		s := newStore(t)
		for _, state := range statemachine.States {
			if state == statemachine.Succeeded {
				continue
			}
			id := "pur_" + string(state)
			insertPurchase(t, s, newPurchase(id))
			p := walkTo(t, s, id, state)
			if state != statemachine.Created {
				p.ProviderPaymentID = "pi_" + string(state)
				update(t, s, p, state)
			}
			r := newRefund("ref_"+string(state), id, "pi_"+string(state), 1)
			wantErr(t, "a refund of a purchase in "+string(state), refundErr(t, s, r), reconcile.ErrNotRefundable)
			wantNoRefund(t, s, r.ID)
		}
	})

	parallel(t, "NotThePurchasesPayment", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		paidPurchase(t, s, "pur_2", "pi_2", 1250)
		wantErr(t, "a refund of another payment", refundErr(t, s, newRefund("ref_1", "pur_1", "pi_other", 1)), reconcile.ErrNotRefundable)
		wantErr(t, "a refund of another purchase's payment", refundErr(t, s, newRefund("ref_2", "pur_1", "pi_2", 1)), reconcile.ErrNotRefundable)
		// Succeeded, but the books never learnt its payment id.
		insertPurchase(t, s, newPurchase("pur_nopay"))
		walkTo(t, s, "pur_nopay", statemachine.Succeeded)
		wantErr(t, "a refund of a purchase without a payment id", refundErr(t, s, newRefund("ref_3", "pur_nopay", "pi_1", 1)), reconcile.ErrNotRefundable)
		for _, id := range []string{"ref_1", "ref_2", "ref_3"} {
			wantNoRefund(t, s, id)
		}
		insertRefund(t, s, newRefund("ref_ok", "pur_1", "pi_1", 1))
	})

	parallel(t, "FindingMismatch", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		paidPurchase(t, s, "pur_2", "pi_2", 1250)
		dup := mustInsertFinding(t, s, newFinding("pi_dup", reconcile.FindingDuplicateCharge, "pur_1", at(time.Hour)))
		orphanRefund := mustInsertFinding(t, s, newFinding("re_orphan", reconcile.FindingOrphanRefund, "pur_1", at(time.Hour)))
		for _, tc := range []struct {
			name string
			r    reconcile.Refund
		}{
			{"another payment than the finding's", func() reconcile.Refund {
				r := newRefund("ref_1", "pur_1", "pi_other", 1)
				r.FindingID = dup.ID
				return r
			}()},
			{"the purchase's own payment under the finding", func() reconcile.Refund {
				r := newRefund("ref_2", "pur_1", "pi_1", 1)
				r.FindingID = dup.ID
				return r
			}()},
			{"another purchase than the finding's", func() reconcile.Refund {
				r := newRefund("ref_3", "pur_2", "pi_dup", 1)
				r.FindingID = dup.ID
				return r
			}()},
			{"an unknown finding", func() reconcile.Refund {
				r := newRefund("ref_4", "pur_1", "pi_dup", 1)
				r.FindingID = dup.ID + orphanRefund.ID + 100
				return r
			}()},
			{"a finding about a refund, not a charge", func() reconcile.Refund {
				r := newRefund("ref_5", "pur_1", "re_orphan", 1)
				r.FindingID = orphanRefund.ID
				return r
			}()},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wantErr(t, "a refund of "+tc.name, refundErr(t, s, tc.r), reconcile.ErrNotRefundable)
				wantNoRefund(t, s, tc.r.ID)
			})
		}
	})

	parallel(t, "Exceeds", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		wantErr(t, "a refund of more than the payment", refundErr(t, s, newRefund("ref_over", "pur_1", "pi_1", 1251)), reconcile.ErrRefundExceeds)
		wantNoRefund(t, s, "ref_over")

		// Pending refunds count: 700 created, then 500 submitted.
		insertRefund(t, s, newRefund("ref_a", "pur_1", "pi_1", 700))
		wantErr(t, "700 + 600 of 1250", refundErr(t, s, newRefund("ref_b", "pur_1", "pi_1", 600)), reconcile.ErrRefundExceeds)
		refundIn(t, s, newRefund("ref_c", "pur_1", "pi_1", 500), statemachine.Uncertain)
		wantErr(t, "700 + 500 + 51 of 1250", refundErr(t, s, newRefund("ref_d", "pur_1", "pi_1", 51)), reconcile.ErrRefundExceeds)
		insertRefund(t, s, newRefund("ref_e", "pur_1", "pi_1", 50)) // exactly the amount
		wantErr(t, "a refund of 1 past the amount", refundErr(t, s, newRefund("ref_f", "pur_1", "pi_1", 1)), reconcile.ErrRefundExceeds)

		// A failed refund returned nothing: it no longer counts. A
		// succeeded one does.
		walkRefundTo(t, s, "ref_a", statemachine.Failed)
		walkRefundTo(t, s, "ref_c", statemachine.Succeeded)
		insertRefund(t, s, newRefund("ref_g", "pur_1", "pi_1", 700))
		wantErr(t, "500 + 50 + 700 + 1 of 1250", refundErr(t, s, newRefund("ref_h", "pur_1", "pi_1", 1)), reconcile.ErrRefundExceeds)
		for _, id := range []string{"ref_b", "ref_d", "ref_f", "ref_h"} {
			wantNoRefund(t, s, id)
		}
		equal(t, "refunds of pur_1", sorted(refundIDs(listRefunds(t, s, "pur_1"))), []string{"ref_a", "ref_c", "ref_e", "ref_g"})
	})

	// An operator's "refund this charge": a duplicate charge the audit
	// found is refunded under its finding, up to the finding's amount,
	// beside the purchase's own payment and its refunds, whatever the
	// purchase's state.
	parallel(t, "DuplicateChargeFinding", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		insertRefund(t, s, newRefund("ref_own", "pur_1", "pi_1", 1250))
		f := newFinding("pi_dup", reconcile.FindingDuplicateCharge, "pur_1", at(time.Hour))
		f.Amount = 1000
		dup := mustInsertFinding(t, s, f)
		over := newRefund("ref_dup_over", "pur_1", "pi_dup", 1001)
		over.FindingID = dup.ID
		wantErr(t, "a refund of more than the finding's payment", refundErr(t, s, over), reconcile.ErrRefundExceeds)
		r := newRefund("ref_dup", "pur_1", "pi_dup", 1000)
		r.FindingID, r.RequestedBy = dup.ID, "alice"
		insertRefund(t, s, r)
		again := newRefund("ref_dup_2", "pur_1", "pi_dup", 1)
		again.FindingID = dup.ID
		wantErr(t, "a second refund of the duplicate charge", refundErr(t, s, again), reconcile.ErrRefundExceeds)

		// The purchase's state does not matter for a finding's payment:
		// its outcome may still be open while the provider holds two
		// charges.
		insertPurchase(t, s, newPurchase("pur_open"))
		walkTo(t, s, "pur_open", statemachine.Uncertain)
		open := mustInsertFinding(t, s, newFinding("pi_dup_open", reconcile.FindingDuplicateCharge, "pur_open", at(time.Hour)))
		r = newRefund("ref_open", "pur_open", "pi_dup_open", 1250)
		r.FindingID = open.ID
		insertRefund(t, s, r)
		equal(t, "refund of an uncertain purchase's duplicate charge", getRefund(t, s, "ref_open").FindingID, open.ID)
	})
}

// testConcurrentRefunds races transactions that each insert a refund of
// the same payment, each alone within its amount, any two together past
// it: exactly one must commit, the others must be refused with
// ErrRefundExceeds. The store serializes them (an advisory lock on the
// payment on PostgreSQL, the single writer on SQLite); without that, two
// could each read the sum without the other's refund and both commit.
func testConcurrentRefunds(t *testing.T, s *testStore) {
	paidPurchase(t, s, "pur_1", "pi_1", 1250)
	dup := mustInsertFinding(t, s, newFinding("pi_dup", reconcile.FindingDuplicateCharge, "pur_1", at(time.Hour)))
	for round, payment := range []string{"pi_1", "pi_dup"} {
		got := race(t, s, racers, func(tx reconcile.Tx, i int) (bool, error) {
			r := newRefund(fmt.Sprintf("ref_%d_%d", round, i), "pur_1", payment, 700)
			if payment == "pi_dup" {
				r.FindingID = dup.ID
			}
			err := tx.InsertRefund(t.Context(), r)
			if errors.Is(err, reconcile.ErrRefundExceeds) {
				return false, nil
			}
			return err == nil, err
		})
		won := winners(got)
		if len(won) != 1 {
			t.Fatalf("%d concurrent refunds of 700 of payment %s (1250): %v committed, want exactly one", racers, payment, won)
		}
		var n int
		for _, r := range listRefunds(t, s, "pur_1") {
			if r.PaymentID == payment {
				n++
				if want := fmt.Sprintf("ref_%d_%d", round, won[0]); r.ID != want {
					t.Fatalf("refund %s of %s stored, want only the winner's, %s", r.ID, payment, want)
				}
			}
		}
		if n != 1 {
			t.Fatalf("%d refunds of %s stored, want 1", n, payment)
		}
	}
}

// refundJob inserts the job of refund r, due at runAt.
