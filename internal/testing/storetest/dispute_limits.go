package storetest

import (
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// A dispute's rows of the audit, and the refunds its payment's disputes
// forbid.

func disputeTransitionsOf(t *testing.T, s reconcile.Store, disputeID string) []reconcile.TransitionRecord {
	t.Helper()
	var got []reconcile.TransitionRecord
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		got, err = tx.ListDisputeTransitions(t.Context(), disputeID)
		return err
	})
	return got
}

// testDisputeAuditTrail: a dispute's transitions are rows of the audit
// with its dispute id, listed apart from its purchase's and its refunds',
// held to the dispute machine and to the dispute's purchase.
func testDisputeAuditTrail(t *testing.T, s *testStore) {
	paidPurchase(t, s, "pur_1", "pi_1", 1250)
	paidPurchase(t, s, "pur_2", "pi_2", 1250)
	insertRefund(t, s, newRefund("ref_1", "pur_1", "pi_1", 100))
	insertDispute(t, s, newDispute("dsp_1", "pur_1", "pi_1", 500))
	insertDispute(t, s, newDispute("dsp_2", "pur_1", "pi_1", 500))
	insertDispute(t, s, newDispute("dsp_other", "pur_2", "pi_2", 500))

	purchaseRows := []reconcile.TransitionRecord{
		{PurchaseID: "pur_1", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, Actor: "w1", LeaseToken: 1, At: at(time.Second)},
		{PurchaseID: "pur_1", From: statemachine.Submitted, To: statemachine.Succeeded, Cause: reconcile.CauseSubmitResponse, Actor: "w1", LeaseToken: 1, At: at(2 * time.Second)},
	}
	refundRows := []reconcile.TransitionRecord{
		{PurchaseID: "pur_1", RefundID: "ref_1", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, Actor: "w2", LeaseToken: 3, At: at(time.Minute)},
	}
	disputeRows := []reconcile.TransitionRecord{
		{PurchaseID: "pur_1", DisputeID: "dsp_1", From: statemachine.Open, To: statemachine.EvidenceSubmitted, Cause: reconcile.CauseWebhook, Evidence: "evt_1: charge.dispute.updated", Actor: "webhook", At: at(time.Hour)},
		{PurchaseID: "pur_1", DisputeID: "dsp_2", From: statemachine.Open, To: statemachine.Closed, Cause: reconcile.CauseWebhook, Actor: "webhook", At: at(time.Hour)},
		{PurchaseID: "pur_1", DisputeID: "dsp_1", From: statemachine.EvidenceSubmitted, To: statemachine.Open, Cause: reconcile.CauseWebhook, Actor: "webhook", At: at(2 * time.Hour)},
		{PurchaseID: "pur_1", DisputeID: "dsp_1", From: statemachine.Open, To: statemachine.Lost, Cause: reconcile.CauseOperator, Evidence: "dashboard", Actor: "alice", At: at(3*time.Hour + 7*time.Microsecond).In(time.FixedZone("x", 3600))},
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		rows := append([]reconcile.TransitionRecord{purchaseRows[0]}, disputeRows[:2]...)
		rows = append(append(append(rows, refundRows...), disputeRows[2:]...), purchaseRows[1])
		for _, r := range rows {
			if err := tx.InsertTransition(t.Context(), r); err != nil {
				return err
			}
		}
		return nil
	})
	transitionID := func(r *reconcile.TransitionRecord) *int64 { return &r.ID }
	got := transitionsOf(t, s, "pur_1")
	equal(t, "the purchase's own transitions", got, withIDs(t, "ListTransitions(pur_1)", got, purchaseRows, transitionID))
	got = refundTransitionsOf(t, s, "ref_1")
	equal(t, "ref_1's transitions", got, withIDs(t, "ListRefundTransitions(ref_1)", got, refundRows, transitionID))
	var want []reconcile.TransitionRecord
	for _, r := range disputeRows {
		if r.DisputeID == "dsp_1" {
			r.At = r.At.UTC()
			want = append(want, r)
		}
	}
	got = disputeTransitionsOf(t, s, "dsp_1")
	equal(t, "dsp_1's transitions", got, withIDs(t, "ListDisputeTransitions(dsp_1)", got, want, transitionID))
	equal(t, "dsp_2's transitions", len(disputeTransitionsOf(t, s, "dsp_2")), 1)
	equal(t, "an unknown dispute's transitions", len(disputeTransitionsOf(t, s, "dsp_missing")), 0)

	// A dispute's row holds a dispute's move, and names its dispute's
	// purchase; a row is about a refund or a dispute, not both.
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, tc := range []struct {
			name    string
			r       reconcile.TransitionRecord
			wantErr error
		}{
			{"a purchase's move in a dispute's row", reconcile.TransitionRecord{PurchaseID: "pur_1", DisputeID: "dsp_2", From: statemachine.Created, To: statemachine.Submitted}, reconcile.ErrForbiddenTransition},
			{"a refund's move in a dispute's row", reconcile.TransitionRecord{PurchaseID: "pur_1", DisputeID: "dsp_2", From: statemachine.Submitted, To: statemachine.Failed}, reconcile.ErrForbiddenTransition},
			{"a dispute's move in a purchase's row", reconcile.TransitionRecord{PurchaseID: "pur_1", From: statemachine.Open, To: statemachine.Lost}, reconcile.ErrForbiddenTransition},
			{"a dispute's move in a refund's row", reconcile.TransitionRecord{PurchaseID: "pur_1", RefundID: "ref_1", From: statemachine.Open, To: statemachine.Won}, reconcile.ErrForbiddenTransition},
			{"a move out of a decided dispute", reconcile.TransitionRecord{PurchaseID: "pur_1", DisputeID: "dsp_2", From: statemachine.Won, To: statemachine.Open}, reconcile.ErrForbiddenTransition},
			{"an unknown dispute", reconcile.TransitionRecord{PurchaseID: "pur_1", DisputeID: "dsp_missing", From: statemachine.Open, To: statemachine.Won}, reconcile.ErrNotFound},
			{"another purchase's dispute", reconcile.TransitionRecord{PurchaseID: "pur_1", DisputeID: "dsp_other", From: statemachine.Open, To: statemachine.Won}, reconcile.ErrNotFound},
			{"an unknown purchase", reconcile.TransitionRecord{PurchaseID: "pur_missing", DisputeID: "dsp_1", From: statemachine.Open, To: statemachine.Won}, reconcile.ErrNotFound},
			{"a refund and a dispute", reconcile.TransitionRecord{PurchaseID: "pur_1", RefundID: "ref_1", DisputeID: "dsp_2", From: statemachine.Open, To: statemachine.Won}, reconcile.ErrInvalid},
		} {
			tc.r.Cause, tc.r.At = reconcile.CauseOperator, base
			wantErr(t, "InsertTransition of "+tc.name, tx.InsertTransition(t.Context(), tc.r), tc.wantErr)
		}
		return nil
	})
	equal(t, "dsp_2's transitions after the refused ones", len(disputeTransitionsOf(t, s, "dsp_2")), 1)
	equal(t, "ref_1's transitions after the refused ones", len(refundTransitionsOf(t, s, "ref_1")), 1)
	equal(t, "pur_1's transitions after the refused ones", len(transitionsOf(t, s, "pur_1")), 2)
}

// testDisputedRefunds covers what a payment's disputes do to its
// refunds: a dispute that forbids one (open or evidence submitted and not
// refundable, or lost) refuses it with ErrDisputed, one that does not
// (refundable, won, closed) lets it be; a lost dispute's amount counts
// with the refunds against the payment's amount (ErrRefundExceeds, judged
// first); and a finding about a dispute names no charge to refund.
func testDisputedRefunds(t *testing.T, newStore func(*testing.T) *testStore) {
	parallel(t, "ByState", func(t *testing.T) {
		s := newStore(t)
		for _, tc := range []struct {
			state      statemachine.State
			refundable bool
			wantErr    error // nil: the refund is accepted
		}{
			{statemachine.Open, false, reconcile.ErrDisputed},
			{statemachine.Open, true, nil},
			{statemachine.EvidenceSubmitted, false, reconcile.ErrDisputed},
			{statemachine.EvidenceSubmitted, true, nil},
			{statemachine.Won, false, nil},
			{statemachine.Closed, false, nil},
			{statemachine.Lost, true, reconcile.ErrDisputed},
		} {
			name := string(tc.state)
			if tc.refundable {
				name += "_refundable"
			}
			t.Run(name, func(t *testing.T) {
				purchaseID, paymentID := "pur_"+name, "pi_"+name
				paidPurchase(t, s, purchaseID, paymentID, 1000)
				d := newDispute("dsp_"+name, purchaseID, paymentID, 100)
				d.ChargeRefundable = tc.refundable
				disputeIn(t, s, d, tc.state)
				r := newRefund("ref_"+name, purchaseID, paymentID, 100)
				err := refundErr(t, s, r)
				if tc.wantErr == nil {
					if err != nil {
						t.Fatalf("a refund beside a %s dispute: %v, want it accepted", name, err)
					}
					equal(t, "the refund", getRefund(t, s, r.ID), r)
					return
				}
				wantErr(t, "a refund beside a "+name+" dispute", err, tc.wantErr)
				wantNoRefund(t, s, r.ID)
			})
		}
	})

	// A chargeback forbids the refund until it is decided; won, the
	// payment is refundable again. Another payment's dispute does not
	// matter.
	parallel(t, "UntilDecided", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1000)
		paidPurchase(t, s, "pur_2", "pi_2", 1000)
		insertDispute(t, s, newDispute("dsp_1", "pur_1", "pi_1", 1000))
		wantErr(t, "a refund while a chargeback is open", refundErr(t, s, newRefund("ref_1", "pur_1", "pi_1", 10)), reconcile.ErrDisputed)
		wantNoRefund(t, s, "ref_1")
		insertRefund(t, s, newRefund("ref_2", "pur_2", "pi_2", 10))

		d := getDispute(t, s, "dsp_1")
		d.ChargeRefundable = true
		updateDispute(t, s, d, statemachine.Open)
		insertRefund(t, s, newRefund("ref_3", "pur_1", "pi_1", 10))

		d = getDispute(t, s, "dsp_1")
		d.ChargeRefundable, d.State = false, statemachine.EvidenceSubmitted
		updateDispute(t, s, d, statemachine.Open)
		wantErr(t, "a refund while the evidence is reviewed", refundErr(t, s, newRefund("ref_4", "pur_1", "pi_1", 10)), reconcile.ErrDisputed)
		walkDisputeTo(t, s, "dsp_1", statemachine.Won)
		insertRefund(t, s, newRefund("ref_5", "pur_1", "pi_1", 10))
		equal(t, "refunds of pur_1", sorted(refundIDs(listRefunds(t, s, "pur_1"))), []string{"ref_3", "ref_5"})
	})

	// Payment 1000, a refund of 300 before a dispute of 600 that was
	// lost: 300 + 600 taken. A refund of 200 would take 1100; one of
	// 100 fits the amount but the lost dispute still forbids it.
	parallel(t, "LostCountsTowardTheAmount", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1000)
		insertRefund(t, s, newRefund("ref_1", "pur_1", "pi_1", 300))
		d := newDispute("dsp_1", "pur_1", "pi_1", 600)
		d.ChargeRefundable = true
		disputeIn(t, s, d, statemachine.EvidenceSubmitted)
		insertRefund(t, s, newRefund("ref_2", "pur_1", "pi_1", 100)) // an open dispute's amount does not count
		walkRefundTo(t, s, "ref_2", statemachine.Failed)
		walkDisputeTo(t, s, "dsp_1", statemachine.Lost)
		for _, tc := range []struct {
			id      string
			amount  int64
			wantErr error
		}{
			{"ref_500", 500, reconcile.ErrRefundExceeds},
			{"ref_200", 200, reconcile.ErrRefundExceeds},
			{"ref_101", 101, reconcile.ErrRefundExceeds},
			{"ref_100", 100, reconcile.ErrDisputed},
			{"ref_of_1", 1, reconcile.ErrDisputed},
		} {
			wantErr(t, "a refund of "+tc.id, refundErr(t, s, newRefund(tc.id, "pur_1", "pi_1", tc.amount)), tc.wantErr)
			wantNoRefund(t, s, tc.id)
		}
	})

	parallel(t, "DisputeFindingNotRefundable", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		for _, kind := range []reconcile.FindingKind{reconcile.FindingForeignDispute, reconcile.FindingDisputeMismatch, reconcile.FindingDisputeExceeds} {
			t.Run(string(kind), func(t *testing.T) {
				f := mustInsertFinding(t, s, newFinding("du_"+string(kind), kind, "pur_1", at(time.Hour)))
				r := newRefund("ref_"+string(kind), "pur_1", f.PaymentID, 1)
				r.FindingID = f.ID
				wantErr(t, "a refund under a "+string(kind)+" finding", refundErr(t, s, r), reconcile.ErrNotRefundable)
				wantNoRefund(t, s, r.ID)
			})
		}
	})
}
