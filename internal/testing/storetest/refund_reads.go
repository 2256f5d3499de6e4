package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// A refund's rows of the audit, and the reads of the operator list and
// the metrics.

func refundTransitionsOf(t *testing.T, s reconcile.Store, refundID string) []reconcile.TransitionRecord {
	t.Helper()
	var got []reconcile.TransitionRecord
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		got, err = tx.ListRefundTransitions(t.Context(), refundID)
		return err
	})
	return got
}

func refundAttemptsOf(t *testing.T, s reconcile.Store, refundID string) []reconcile.Attempt {
	t.Helper()
	var got []reconcile.Attempt
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		got, err = tx.ListRefundAttempts(t.Context(), refundID)
		return err
	})
	return got
}

// withIDs fails unless got has rows with positive, increasing ids, and
// returns want with got's ids, for comparing a list with what was written.
func withIDs[T any](t *testing.T, what string, got, want []T, id func(*T) *int64) []T {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d: %+v", what, len(got), len(want), got)
	}
	out := make([]T, len(want))
	for i := range got {
		g := *id(&got[i])
		if g <= 0 || (i > 0 && g <= *id(&got[i-1])) {
			t.Fatalf("%s: row %d has id %d, want positive and increasing", what, i, g)
		}
		out[i] = want[i]
		*id(&out[i]) = g
	}
	return out
}

// testRefundAuditTrail: a refund's transitions and provider calls are
// rows of the audit with its refund id, listed apart from its purchase's,
// held to the refund machine and to the refund's purchase.
func testRefundAuditTrail(t *testing.T, s *testStore) {
	paidPurchase(t, s, "pur_1", "pi_1", 1250)
	paidPurchase(t, s, "pur_2", "pi_2", 1250)
	insertRefund(t, s, newRefund("ref_1", "pur_1", "pi_1", 100))
	insertRefund(t, s, newRefund("ref_2", "pur_1", "pi_1", 100))
	insertRefund(t, s, newRefund("ref_other", "pur_2", "pi_2", 100))

	purchaseRows := []reconcile.TransitionRecord{
		{PurchaseID: "pur_1", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, Actor: "w1", LeaseToken: 1, At: at(time.Second)},
		{PurchaseID: "pur_1", From: statemachine.Submitted, To: statemachine.Succeeded, Cause: reconcile.CauseSubmitResponse, Actor: "w1", LeaseToken: 1, At: at(2 * time.Second)},
	}
	refundRows := []reconcile.TransitionRecord{
		{PurchaseID: "pur_1", RefundID: "ref_1", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, Actor: "w2", LeaseToken: 3, At: at(time.Minute)},
		{PurchaseID: "pur_1", RefundID: "ref_2", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, Actor: "w2", LeaseToken: 1, At: at(time.Minute)},
		{PurchaseID: "pur_1", RefundID: "ref_1", From: statemachine.Submitted, To: statemachine.Uncertain, Cause: reconcile.CauseSubmitResponse, Evidence: "timeout after 10s", Actor: "w2", LeaseToken: 3, At: at(time.Minute + 10*time.Second)},
		{PurchaseID: "pur_1", RefundID: "ref_1", From: statemachine.Uncertain, To: statemachine.Reconciling, Cause: reconcile.CauseLeaseLost, Actor: "w3", LeaseToken: 4, At: at(2 * time.Minute)},
		{PurchaseID: "pur_1", RefundID: "ref_1", From: statemachine.Reconciling, To: statemachine.Failed, Cause: reconcile.CauseStatusQuery, Evidence: "re_1: failed (expired_or_canceled_card)", Actor: "w3", LeaseToken: 4, At: at(2*time.Minute + 7*time.Microsecond).In(time.FixedZone("x", 3600))},
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, r := range append(append([]reconcile.TransitionRecord{purchaseRows[0]}, refundRows...), purchaseRows[1]) {
			if err := tx.InsertTransition(t.Context(), r); err != nil {
				return err
			}
		}
		return nil
	})
	transitionID := func(r *reconcile.TransitionRecord) *int64 { return &r.ID }
	got := transitionsOf(t, s, "pur_1")
	equal(t, "the purchase's own transitions", got, withIDs(t, "ListTransitions(pur_1)", got, purchaseRows, transitionID))
	var want []reconcile.TransitionRecord
	for _, r := range refundRows {
		if r.RefundID == "ref_1" {
			r.At = r.At.UTC()
			want = append(want, r)
		}
	}
	got = refundTransitionsOf(t, s, "ref_1")
	equal(t, "ref_1's transitions", got, withIDs(t, "ListRefundTransitions(ref_1)", got, want, transitionID))
	equal(t, "ref_2's transitions", len(refundTransitionsOf(t, s, "ref_2")), 1)
	equal(t, "an unknown refund's transitions", len(refundTransitionsOf(t, s, "ref_missing")), 0)

	// A refund's row holds a refund's move, a purchase's row a
	// purchase's; a refund's row names its refund's purchase.
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, tc := range []struct {
			name    string
			r       reconcile.TransitionRecord
			wantErr error
		}{
			{"a purchase's move in a refund's row", reconcile.TransitionRecord{PurchaseID: "pur_1", RefundID: "ref_2", From: statemachine.Submitted, To: statemachine.Declined}, reconcile.ErrForbiddenTransition},
			{"a refund's move in a purchase's row", reconcile.TransitionRecord{PurchaseID: "pur_1", From: statemachine.Submitted, To: statemachine.Failed}, reconcile.ErrForbiddenTransition},
			{"a move out of a final refund state", reconcile.TransitionRecord{PurchaseID: "pur_1", RefundID: "ref_2", From: statemachine.Failed, To: statemachine.Submitted}, reconcile.ErrForbiddenTransition},
			{"a move past submitted", reconcile.TransitionRecord{PurchaseID: "pur_1", RefundID: "ref_2", From: statemachine.Created, To: statemachine.Succeeded}, reconcile.ErrForbiddenTransition},
			{"an unknown refund", reconcile.TransitionRecord{PurchaseID: "pur_1", RefundID: "ref_missing", From: statemachine.Created, To: statemachine.Submitted}, reconcile.ErrNotFound},
			{"another purchase's refund", reconcile.TransitionRecord{PurchaseID: "pur_1", RefundID: "ref_other", From: statemachine.Created, To: statemachine.Submitted}, reconcile.ErrNotFound},
		} {
			tc.r.Cause, tc.r.At = reconcile.CauseOperator, base
			wantErr(t, "InsertTransition of "+tc.name, tx.InsertTransition(t.Context(), tc.r), tc.wantErr)
		}
		return nil
	})
	equal(t, "ref_2's transitions after the refused ones", len(refundTransitionsOf(t, s, "ref_2")), 1)
	equal(t, "pur_1's transitions after the refused ones", len(transitionsOf(t, s, "pur_1")), 2)

	purchaseCalls := []reconcile.Attempt{
		{PurchaseID: "pur_1", Op: provider.OpCreate, Key: reconcile.ProviderKeyFor("pur_1"), Outcome: provider.Succeeded, PaymentID: "pi_1", Status: "succeeded", Latency: time.Second, Actor: "w1", LeaseToken: 1, Applied: true, At: at(time.Second)},
	}
	refundCalls := []reconcile.Attempt{
		{PurchaseID: "pur_1", RefundID: "ref_1", Op: provider.OpRefundCreate, Key: reconcile.RefundKeyFor("ref_1"), Outcome: provider.Unknown, PaymentID: "pi_1", Latency: 10*time.Second + time.Microsecond, Error: "context deadline exceeded", Actor: "w2", LeaseToken: 3, Applied: true, At: at(time.Minute)},
		{PurchaseID: "pur_1", RefundID: "ref_1", Op: provider.OpRefundList, Outcome: provider.NotFound, PaymentID: "pi_1", Latency: 1234567 * time.Microsecond, Actor: "w3", LeaseToken: 4, Applied: false, Note: "listing lags", At: at(2 * time.Minute)},
		{PurchaseID: "pur_1", RefundID: "ref_1", Op: provider.OpRefundGet, Outcome: provider.Failed, PaymentID: "re_1", Status: "failed", Actor: "w3", LeaseToken: 4, Applied: true, At: at(2 * time.Minute)},
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, a := range append([]reconcile.Attempt{refundCalls[0], purchaseCalls[0]}, refundCalls[1:]...) {
			if err := tx.InsertAttempt(t.Context(), a); err != nil {
				return err
			}
		}
		return nil
	})
	attemptID := func(a *reconcile.Attempt) *int64 { return &a.ID }
	gotCalls := attemptsOf(t, s, "pur_1")
	equal(t, "the purchase's own calls", gotCalls, withIDs(t, "ListAttempts(pur_1)", gotCalls, purchaseCalls, attemptID))
	gotCalls = refundAttemptsOf(t, s, "ref_1")
	equal(t, "ref_1's calls", gotCalls, withIDs(t, "ListRefundAttempts(ref_1)", gotCalls, refundCalls, attemptID))
	equal(t, "ref_2's calls", len(refundAttemptsOf(t, s, "ref_2")), 0)
	err := txErr(t, s, func(tx reconcile.Tx) error {
		return tx.InsertAttempt(t.Context(), reconcile.Attempt{PurchaseID: "pur_1", RefundID: "ref_other", Op: provider.OpRefundGet, Outcome: provider.NotFound, At: base})
	})
	wantErr(t, "InsertAttempt of another purchase's refund", err, reconcile.ErrNotFound)
	err = txErr(t, s, func(tx reconcile.Tx) error {
		return tx.InsertAttempt(t.Context(), reconcile.Attempt{PurchaseID: "pur_missing", RefundID: "ref_1", Op: provider.OpRefundGet, Outcome: provider.NotFound, At: base})
	})
	wantErr(t, "InsertAttempt of an unknown purchase", err, reconcile.ErrNotFound)

	// Operator actions about a refund carry it, and are listed with the
	// purchase's; "refund" (an operator's "refund this charge") is one.
	actions := []reconcile.OperatorAction{
		{PurchaseID: "pur_1", Operator: "alice", Action: "note", Evidence: "customer called", At: at(time.Hour)},
		{PurchaseID: "pur_1", RefundID: "ref_2", Operator: "alice", Action: "refund", Saw: "provider: pi_dup succeeded", Did: "refund ref_2 of 100 created", Evidence: "finding 7", At: at(time.Hour + time.Microsecond)},
		{PurchaseID: "pur_1", RefundID: "ref_1", Operator: "bob", Action: "resolve", Saw: "provider: re_1 failed", Did: "reconciling→failed", Evidence: "dashboard", At: at(2 * time.Hour)},
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, a := range actions {
			if err := tx.InsertOperatorAction(t.Context(), a); err != nil {
				return err
			}
		}
		return nil
	})
	var gotActions []reconcile.OperatorAction
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		gotActions, err = tx.ListOperatorActions(t.Context(), "pur_1")
		return err
	})
	equal(t, "pur_1's operator actions", gotActions, withIDs(t, "ListOperatorActions(pur_1)", gotActions, actions, func(a *reconcile.OperatorAction) *int64 { return &a.ID }))
	err = txErr(t, s, func(tx reconcile.Tx) error {
		return tx.InsertOperatorAction(t.Context(), reconcile.OperatorAction{PurchaseID: "pur_1", RefundID: "ref_other", Operator: "alice", Action: "note", At: base})
	})
	wantErr(t, "InsertOperatorAction of another purchase's refund", err, reconcile.ErrNotFound)
}

// testRefundReads covers the reads of the operator list, the escalation
// sweep and the metrics.
func testRefundReads(t *testing.T, newStore func(*testing.T) *testStore) {
	// withRefund inserts refund id of pur_1, walks it to state, then sets
	// its UncertainSince to base+since (none when since < 0) and, when
	// escalatedAt > 0, escalates it at base+escalatedAt.
	withRefund := func(t *testing.T, s reconcile.Store, id string, state statemachine.State, since time.Duration, escalatedAt time.Duration) reconcile.Refund {
		t.Helper()
		r := refundIn(t, s, newRefund(id, "pur_1", "pi_1", 1), state)
		if since >= 0 {
			r.UncertainSince = at(since)
		}
		if escalatedAt > 0 {
			r.EscalatedAt, r.EscalationReason = at(escalatedAt), reconcile.EscalationUncertainTooLong
		}
		return updateRefund(t, s, r, state)
	}

	parallel(t, "ListEscalatedRefunds", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		list := func() []reconcile.Refund {
			t.Helper()
			var out []reconcile.Refund
			inTx(t, s, func(tx reconcile.Tx) error {
				var err error
				out, err = tx.ListEscalatedRefunds(t.Context(), reconcile.AnyAccount)
				return err
			})
			return out
		}
		if got := list(); len(got) != 0 {
			t.Fatalf("ListEscalatedRefunds with none: %+v", got)
		}
		a := withRefund(t, s, "ref_a", statemachine.Uncertain, 0, 2*time.Hour)
		b := withRefund(t, s, "ref_b", statemachine.Failed, -1, time.Hour) // final, still listed
		c := withRefund(t, s, "ref_c", statemachine.Submitted, -1, 3*time.Hour)
		withRefund(t, s, "ref_d", statemachine.Succeeded, -1, 0)
		equal(t, "escalated refunds, oldest first", list(), []reconcile.Refund{b, a, c})
		b.EscalatedAt, b.EscalationReason = time.Time{}, ""
		updateRefund(t, s, b, statemachine.Failed)
		equal(t, "escalated after resolving ref_b", list(), []reconcile.Refund{a, c})
	})

	parallel(t, "ListOverdueUncertainRefunds", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		list := func(before time.Time, limit int) []reconcile.Refund {
			t.Helper()
			var out []reconcile.Refund
			inTx(t, s, func(tx reconcile.Tx) error {
				var err error
				out, err = tx.ListOverdueUncertainRefunds(t.Context(), before, limit)
				return err
			})
			return out
		}
		before := at(5 * time.Minute)
		if got := list(before, 10); len(got) != 0 {
			t.Fatalf("ListOverdueUncertainRefunds with none: %+v", got)
		}
		u3 := withRefund(t, s, "ref_u3", statemachine.Uncertain, 3*time.Minute, 0)
		withRefund(t, s, "ref_escalated", statemachine.Uncertain, 2*time.Minute, time.Hour)
		u1 := withRefund(t, s, "ref_u1", statemachine.Uncertain, time.Minute+time.Microsecond, 0)
		withRefund(t, s, "ref_reconciling", statemachine.Reconciling, 0, 0)
		withRefund(t, s, "ref_created", statemachine.Created, 0, 0)
		withRefund(t, s, "ref_failed", statemachine.Failed, 0, 0)
		withRefund(t, s, "ref_at", statemachine.Uncertain, 5*time.Minute, 0) // at the cut-off, not before it
		u4 := withRefund(t, s, "ref_u4", statemachine.Uncertain, 4*time.Minute, 0)
		equal(t, "overdue, oldest first", list(before, 10), []reconcile.Refund{u1, u3, u4})
		equal(t, "overdue, limit 2", list(before, 2), []reconcile.Refund{u1, u3})
		err := txErr(t, s, func(tx reconcile.Tx) error {
			_, err := tx.ListOverdueUncertainRefunds(t.Context(), before, 0)
			return err
		})
		wantErr(t, "ListOverdueUncertainRefunds with limit 0", err, reconcile.ErrInvalid)
	})

	parallel(t, "CountRefundsByState", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		count := func() map[statemachine.State]int {
			t.Helper()
			var got map[statemachine.State]int
			inTx(t, s, func(tx reconcile.Tx) error {
				var err error
				got, err = tx.CountRefundsByState(t.Context())
				return err
			})
			return got
		}
		want := map[statemachine.State]int{}
		for _, st := range statemachine.Refund.States() {
			want[st] = 0
		}
		equal(t, "counts with no refund", count(), want)
		for i, st := range []statemachine.State{statemachine.Created, statemachine.Submitted, statemachine.Uncertain,
			statemachine.Uncertain, statemachine.Succeeded, statemachine.Failed, statemachine.Failed, statemachine.Failed} {
			refundIn(t, s, newRefund(fmt.Sprintf("ref_%d", i), "pur_1", "pi_1", 1), st)
			want[st]++
		}
		equal(t, "counts", count(), want)
		walkRefundTo(t, s, "ref_0", statemachine.Succeeded)
		want[statemachine.Created]--
		want[statemachine.Succeeded]++
		equal(t, "counts after a move", count(), want)
		// A purchase's state counts are not the refunds'.
		if counts := count(); counts[statemachine.Declined] != 0 {
			t.Fatalf("refund counts have declined: %v", counts)
		}
	})

	parallel(t, "OldestUncertainRefundSince", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		oldest := func() time.Time {
			t.Helper()
			var got time.Time
			inTx(t, s, func(tx reconcile.Tx) error {
				var err error
				got, err = tx.OldestUncertainRefundSince(t.Context())
				return err
			})
			return got
		}
		if got := oldest(); !got.IsZero() {
			t.Fatalf("OldestUncertainRefundSince with none: %s", got)
		}
		// Earlier times on refunds that do not count, and on a purchase.
		withRefund(t, s, "ref_created", statemachine.Created, time.Second, 0)
		withRefund(t, s, "ref_failed", statemachine.Failed, 2*time.Second, 0)
		withRefund(t, s, "ref_succeeded", statemachine.Succeeded, 3*time.Second, 0)
		insertPurchase(t, s, newPurchase("pur_u"))
		pu := walkTo(t, s, "pur_u", statemachine.Uncertain)
		pu.UncertainSince = at(time.Second)
		update(t, s, pu, statemachine.Uncertain)
		if got := oldest(); !got.IsZero() {
			t.Fatalf("OldestUncertainRefundSince with no refund uncertain or reconciling: %s", got)
		}
		withRefund(t, s, "ref_u", statemachine.Uncertain, 10*time.Minute, 0)
		rec := withRefund(t, s, "ref_r", statemachine.Reconciling, 5*time.Minute+7*time.Microsecond, 0)
		got := oldest()
		equal(t, "OldestUncertainRefundSince", got, at(5*time.Minute+7*time.Microsecond))
		if got.Location() != time.UTC {
			t.Fatalf("OldestUncertainRefundSince in %v, want UTC", got.Location())
		}
		rec.State = statemachine.Succeeded
		updateRefund(t, s, rec, statemachine.Reconciling)
		equal(t, "OldestUncertainRefundSince after ref_r succeeded", oldest(), at(10*time.Minute))
	})
}
