package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// The tests of the operator audit.

func testOperatorActions(t *testing.T, s *testStore) {
	insertPurchase(t, s, newPurchase("pur_a"))
	insertPurchase(t, s, newPurchase("pur_b"))
	actions := []reconcile.OperatorAction{
		{PurchaseID: "pur_a", Operator: "alice", Action: "recheck", Saw: "provider: processing", Did: "rechecked", At: at(time.Minute)},
		{PurchaseID: "pur_b", Operator: "bob", Action: "note", Evidence: "customer called", At: at(time.Minute)},
		{PurchaseID: "pur_a", Operator: "alice", Action: "resolve", Saw: "provider: succeeded (pi_1)", Did: "uncertain→reconciling→succeeded", Evidence: "dashboard screenshot #4", At: at(2*time.Minute + 7*time.Microsecond)},
		// Same instant as the previous one: order is insertion order.
		{PurchaseID: "pur_a", Operator: "bob", Action: "note", Evidence: "double-checked", At: at(2*time.Minute + 7*time.Microsecond).In(time.FixedZone("x", 3600))},
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, a := range actions {
			if err := tx.InsertOperatorAction(t.Context(), a); err != nil {
				return err
			}
		}
		return nil
	})
	var got []reconcile.OperatorAction
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		got, err = tx.ListOperatorActions(t.Context(), "pur_a")
		return err
	})
	var want []reconcile.OperatorAction
	for _, a := range actions {
		if a.PurchaseID == "pur_a" {
			a.At = a.At.UTC()
			want = append(want, a)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("ListOperatorActions(pur_a): %d actions, want %d: %+v", len(got), len(want), got)
	}
	for i := range got {
		if got[i].ID <= 0 || (i > 0 && got[i].ID <= got[i-1].ID) {
			t.Fatalf("action %d: id %d, want positive and increasing", i, got[i].ID)
		}
		w := want[i]
		w.ID = got[i].ID
		equal(t, fmt.Sprintf("action %d", i), got[i], w)
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		none, err := tx.ListOperatorActions(t.Context(), "pur_missing")
		if err != nil || len(none) != 0 {
			return fmt.Errorf("ListOperatorActions(unknown) = %v, %v; want none, nil", none, err)
		}
		return nil
	})
	err := txErr(t, s, func(tx reconcile.Tx) error {
		return tx.InsertOperatorAction(t.Context(), reconcile.OperatorAction{PurchaseID: "pur_missing", Operator: "alice", Action: "note", At: base})
	})
	if err == nil {
		t.Fatal("InsertOperatorAction for an unknown purchase succeeded")
	}
}
