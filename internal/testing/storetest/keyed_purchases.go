package storetest

import (
	"fmt"
	"testing"

	"github.com/payrecon/payrecon/reconcile"
)

// The tests of InsertKeyedPurchases, the purchase API's set-based create
// (reconcile.KeyedPurchaseInserter), which every store's Tx implements.

// keyedPurchase returns an item creating purchase id under client's key,
// with its saved response.
func keyedPurchase(client, key, id string) reconcile.KeyedPurchase {
	k := newKey(client, key, base)
	k.StatusCode, k.Response, k.PurchaseID = 201, []byte(`{"id":"`+id+`"}`), id
	p := newPurchase(id)
	p.Client = client
	return reconcile.KeyedPurchase{Key: k, Purchase: p}
}

// insertKeyed runs InsertKeyedPurchases in tx, failing the test if tx
// does not implement it.
func insertKeyed(t *testing.T, tx reconcile.Tx, items ...reconcile.KeyedPurchase) ([]bool, error) {
	t.Helper()
	ins, ok := tx.(reconcile.KeyedPurchaseInserter)
	if !ok {
		t.Fatalf("the store's Tx (%T) does not implement reconcile.KeyedPurchaseInserter", tx)
	}
	return ins.InsertKeyedPurchases(t.Context(), items)
}

// wantCreated fails the test unless item's key, purchase and job are
// stored as given.
func wantCreated(t *testing.T, s reconcile.Store, item reconcile.KeyedPurchase) {
	t.Helper()
	equalKey(t, "key of "+item.Purchase.ID, getKey(t, s, item.Key.Client, item.Key.Key), item.Key)
	equal(t, "purchase "+item.Purchase.ID, getPurchase(t, s, item.Purchase.ID), item.Purchase)
	if j := getJob(t, s, item.Purchase.ID); !j.RunAt.Equal(item.Purchase.CreatedAt) || !j.DoneAt.IsZero() || j.LeaseOwner != "" {
		t.Fatalf("job of %s: %+v, want due at its creation, not leased, not done", item.Purchase.ID, j)
	}
}

// wantNothing fails the test if purchase id or its job exists.
func wantNothing(t *testing.T, s reconcile.Store, id string) {
	t.Helper()
	err := txErr(t, s, func(tx reconcile.Tx) error {
		_, err := tx.GetPurchase(t.Context(), id)
		return err
	})
	wantErr(t, "purchase "+id, err, reconcile.ErrNotFound)
	err = txErr(t, s, func(tx reconcile.Tx) error {
		_, err := tx.GetJob(t.Context(), id)
		return err
	})
	wantErr(t, "job of "+id, err, reconcile.ErrNotFound)
}

func testKeyedPurchases(t *testing.T, newStore func(*testing.T) *testStore) {
	parallel(t, "CreatesKeysPurchasesAndJobs", func(t *testing.T) {
		s := newStore(t)
		items := []reconcile.KeyedPurchase{
			keyedPurchase("client_a", "key-1", "pur_1"),
			keyedPurchase("client_a", "key-2", "pur_2"),
			keyedPurchase("client_b", "key-1", "pur_3"), // keys are per client
			keyedPurchase("", "key-3", "pur_4"),         // a purchase of no client
		}
		items[1].Purchase.Reference, items[1].Purchase.Description = "order-1", "two of them"
		items[1].Key.Response = nil // saved as no body
		var inserted []bool
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			inserted, err = insertKeyed(t, tx, items...)
			return err
		})
		equal(t, "inserted", inserted, []bool{true, true, true, true})
		for _, it := range items {
			wantCreated(t, s, it)
		}
	})

	parallel(t, "ExistingKeyCreatesNothing", func(t *testing.T) {
		s := newStore(t)
		held := newKey("client_a", "key-2", base)
		held.RequestHash = "another request"
		insertKey(t, s, held)
		items := []reconcile.KeyedPurchase{
			keyedPurchase("client_a", "key-1", "pur_1"),
			keyedPurchase("client_a", "key-2", "pur_2"),
			keyedPurchase("client_a", "key-3", "pur_3"),
		}
		var inserted []bool
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			inserted, err = insertKeyed(t, tx, items...)
			return err
		})
		equal(t, "inserted", inserted, []bool{true, false, true})
		wantCreated(t, s, items[0])
		wantCreated(t, s, items[2])
		equalKey(t, "the key held before", getKey(t, s, "client_a", "key-2"), held)
		wantNothing(t, s, "pur_2")
	})

	parallel(t, "RefusalWritesNothing", func(t *testing.T) {
		s := newStore(t)
		used := newPurchase("pur_used")
		used.Reference = "order-1"
		insertPurchase(t, s, used)
		twice := []reconcile.KeyedPurchase{keyedPurchase("client_a", "key-5", "pur_5"), keyedPurchase("client_a", "key-6", "pur_6")}
		twice[0].Purchase.Reference, twice[1].Purchase.Reference = "order-2", "order-2"
		for _, tc := range []struct {
			name  string
			items []reconcile.KeyedPurchase
		}{
			{"a reference used before", []reconcile.KeyedPurchase{
				keyedPurchase("client_a", "key-1", "pur_1"),
				func() reconcile.KeyedPurchase {
					it := keyedPurchase("client_a", "key-2", "pur_2")
					it.Purchase.Reference = "order-1"
					return it
				}(),
			}},
			{"a reference twice in the set", twice},
			{"an id used before", []reconcile.KeyedPurchase{keyedPurchase("client_a", "key-3", "pur_3"), keyedPurchase("client_a", "key-4", "pur_used")}},
		} {
			// The refusal leaves the transaction usable: it goes on and
			// commits, without a trace of the set.
			inTx(t, s, func(tx reconcile.Tx) error {
				_, err := insertKeyed(t, tx, tc.items...)
				wantErr(t, tc.name, err, reconcile.ErrDuplicate)
				return tx.InsertPurchase(t.Context(), newPurchase("pur_after_"+tc.items[0].Purchase.ID))
			})
			for _, it := range tc.items {
				err := txErr(t, s, func(tx reconcile.Tx) error {
					_, err := tx.GetIdempotencyKey(t.Context(), it.Key.Client, it.Key.Key)
					return err
				})
				wantErr(t, tc.name+": key "+it.Key.Key, err, reconcile.ErrNotFound)
				if it.Purchase.ID != "pur_used" {
					wantNothing(t, s, it.Purchase.ID)
				}
			}
			getPurchase(t, s, "pur_after_"+tc.items[0].Purchase.ID)
		}
	})

	parallel(t, "Invalid", func(t *testing.T) {
		s := newStore(t)
		notNew := keyedPurchase("client_a", "key-2", "pur_2")
		notNew.Purchase.ProviderKey = "pk_1"
		otherID := keyedPurchase("client_a", "key-3", "pur_3")
		otherID.Key.PurchaseID = "pur_9"
		for name, items := range map[string][]reconcile.KeyedPurchase{
			"one key twice": {keyedPurchase("client_a", "key-1", "pur_1"), keyedPurchase("client_a", "key-1", "pur_1b")},
			"not new":       {notNew},
			"another id":    {otherID},
			"an empty key":  {keyedPurchase("client_a", "", "pur_4")},
		} {
			err := txErr(t, s, func(tx reconcile.Tx) error {
				_, err := insertKeyed(t, tx, items...)
				return err
			})
			wantErr(t, name, err, reconcile.ErrInvalid)
		}
		for _, id := range []string{"pur_1", "pur_1b", "pur_2", "pur_3", "pur_4"} {
			wantNothing(t, s, id)
		}
	})

	parallel(t, "ConcurrentSameKey", func(t *testing.T) {
		s := newStore(t)
		// Each transaction creates its own purchase under one shared key
		// and a key of its own: one of them gets the shared key.
		results := race(t, s, racers, func(tx reconcile.Tx, i int) ([]bool, error) {
			return insertKeyed(t, tx,
				keyedPurchase("client_a", "key-shared", fmt.Sprintf("pur_shared_%d", i)),
				keyedPurchase("client_a", fmt.Sprintf("key-own-%d", i), fmt.Sprintf("pur_own_%d", i)))
		})
		var won []int
		for i, r := range results {
			if !r[1] {
				t.Fatalf("transaction %d: its own key not inserted", i)
			}
			if r[0] {
				won = append(won, i)
			}
		}
		if len(won) != 1 {
			t.Fatalf("%d racers on one key: %v inserted it, want exactly 1", racers, won)
		}
		if got := getKey(t, s, "client_a", "key-shared"); got.PurchaseID != fmt.Sprintf("pur_shared_%d", won[0]) {
			t.Fatalf("the shared key names %s, but %d reported inserting it", got.PurchaseID, won[0])
		}
		for i := range racers {
			if i != won[0] {
				wantNothing(t, s, fmt.Sprintf("pur_shared_%d", i))
			}
		}
	})
}
