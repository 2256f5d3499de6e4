package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The tests of the audit trail: transitions and provider attempts.

func testTransitions(t *testing.T, s *testStore) {
	insertPurchase(t, s, newPurchase("pur_a"))
	insertPurchase(t, s, newPurchase("pur_b"))
	records := []reconcile.TransitionRecord{
		{PurchaseID: "pur_a", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, Actor: "worker-1", LeaseToken: 1, At: at(time.Second)},
		{PurchaseID: "pur_b", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, Actor: "worker-2", LeaseToken: 4, At: at(time.Second)},
		{PurchaseID: "pur_a", From: statemachine.Submitted, To: statemachine.Uncertain, Cause: reconcile.CauseSubmitResponse, Evidence: "timeout after 10s", Actor: "worker-1", LeaseToken: 1, At: at(11*time.Second + 7*time.Microsecond)},
		// Same instant as the previous one: order is insertion order.
		{PurchaseID: "pur_a", From: statemachine.Uncertain, To: statemachine.Reconciling, Cause: reconcile.CauseLeaseLost, Actor: "worker-3", LeaseToken: 2, At: at(11*time.Second + 7*time.Microsecond)},
		{PurchaseID: "pur_a", From: statemachine.Reconciling, To: statemachine.Succeeded, Cause: reconcile.CauseWebhook, Evidence: "evt_1: payment_intent.succeeded", Actor: "webhook", At: at(time.Minute).In(time.FixedZone("x", -3600))},
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, r := range records {
			if err := tx.InsertTransition(t.Context(), r); err != nil {
				return err
			}
		}
		return nil
	})
	var got []reconcile.TransitionRecord
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		got, err = tx.ListTransitions(t.Context(), "pur_a")
		return err
	})
	var want []reconcile.TransitionRecord
	for _, r := range records {
		if r.PurchaseID == "pur_a" {
			r.At = r.At.UTC()
			want = append(want, r)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("ListTransitions(pur_a): %d records, want %d: %+v", len(got), len(want), got)
	}
	for i := range got {
		if got[i].ID <= 0 || (i > 0 && got[i].ID <= got[i-1].ID) {
			t.Fatalf("record %d: id %d, want positive and increasing (ids %v)", i, got[i].ID, got)
		}
		w := want[i]
		w.ID = got[i].ID
		equal(t, fmt.Sprintf("record %d", i), got[i], w)
	}

	inTx(t, s, func(tx reconcile.Tx) error {
		none, err := tx.ListTransitions(t.Context(), "pur_missing")
		if err != nil || len(none) != 0 {
			return fmt.Errorf("ListTransitions(unknown) = %v, %v; want none, nil", none, err)
		}
		return nil
	})
	err := txErr(t, s, func(tx reconcile.Tx) error {
		return tx.InsertTransition(t.Context(), reconcile.TransitionRecord{PurchaseID: "pur_missing", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, At: base})
	})
	wantErr(t, "InsertTransition for an unknown purchase", err, reconcile.ErrNotFound)

	// The audit records only moves of the transition table: the database
	// refuses any other pair, and the refusal leaves the transaction
	// usable.
	allowed := map[statemachine.Pair]bool{}
	for _, p := range statemachine.Transitions() {
		allowed[p] = true
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, from := range statemachine.States {
			for _, to := range statemachine.States {
				move := statemachine.Pair{From: from, To: to}
				if allowed[move] {
					continue
				}
				err := tx.InsertTransition(t.Context(), reconcile.TransitionRecord{PurchaseID: "pur_b", From: from, To: to, Cause: reconcile.CauseOperator, At: base})
				wantErr(t, "InsertTransition of "+move.String(), err, reconcile.ErrForbiddenTransition)
			}
		}
		return tx.InsertTransition(t.Context(), reconcile.TransitionRecord{PurchaseID: "pur_b", From: statemachine.Submitted, To: statemachine.Uncertain, Cause: reconcile.CauseSubmitResponse, At: at(time.Hour)})
	})
	inTx(t, s, func(tx reconcile.Tx) error {
		rs, err := tx.ListTransitions(t.Context(), "pur_b")
		if err == nil && len(rs) != 2 {
			err = fmt.Errorf("pur_b has %d transitions after the refused ones, want 2: %+v", len(rs), rs)
		}
		return err
	})
}

func testAttempts(t *testing.T, s *testStore) {
	insertPurchase(t, s, newPurchase("pur_a"))
	insertPurchase(t, s, newPurchase("pur_b"))
	attempts := []reconcile.Attempt{
		{PurchaseID: "pur_a", Op: provider.OpCreate, Key: reconcile.ProviderKeyFor("pur_a"), Outcome: provider.Unknown, Latency: 10*time.Second + 1*time.Microsecond, Error: "context deadline exceeded", Actor: "worker-1", LeaseToken: 1, Applied: true, At: at(time.Second)},
		{PurchaseID: "pur_b", Op: provider.OpCreate, Key: reconcile.ProviderKeyFor("pur_b"), Outcome: provider.Succeeded, PaymentID: "pi_b", Status: "succeeded", Latency: 250 * time.Millisecond, Actor: "worker-2", LeaseToken: 1, Applied: true, At: at(time.Second)},
		{PurchaseID: "pur_a", Op: provider.OpSearch, Outcome: provider.NotFound, Latency: 1234567 * time.Microsecond, Actor: "worker-1", LeaseToken: 1, Applied: false, Note: "search index lags", At: at(20 * time.Second)},
		{PurchaseID: "pur_a", Op: provider.OpStatus, Outcome: provider.Succeeded, PaymentID: "pi_a", Status: "succeeded", Latency: 0, Actor: "worker-3", LeaseToken: 2, Applied: true, At: at(20 * time.Second)},
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, a := range attempts {
			if err := tx.InsertAttempt(t.Context(), a); err != nil {
				return err
			}
		}
		return nil
	})
	var got []reconcile.Attempt
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		got, err = tx.ListAttempts(t.Context(), "pur_a")
		return err
	})
	var want []reconcile.Attempt
	for _, a := range attempts {
		if a.PurchaseID == "pur_a" {
			want = append(want, a)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("ListAttempts(pur_a): %d attempts, want %d: %+v", len(got), len(want), got)
	}
	for i := range got {
		if got[i].ID <= 0 || (i > 0 && got[i].ID <= got[i-1].ID) {
			t.Fatalf("attempt %d: id %d, want positive and increasing", i, got[i].ID)
		}
		w := want[i]
		w.ID = got[i].ID
		equal(t, fmt.Sprintf("attempt %d", i), got[i], w)
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		none, err := tx.ListAttempts(t.Context(), "pur_missing")
		if err != nil || len(none) != 0 {
			return fmt.Errorf("ListAttempts(unknown) = %v, %v; want none, nil", none, err)
		}
		return nil
	})
}
