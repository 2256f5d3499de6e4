package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// The tests of the purchase API's idempotency keys.

func newKey(client, key string, created time.Time) reconcile.IdempotencyKey {
	return reconcile.IdempotencyKey{Client: client, Key: key, RequestHash: "req-" + client + "-" + key, CreatedAt: created}
}

func insertKey(t *testing.T, s reconcile.Store, k reconcile.IdempotencyKey) bool {
	t.Helper()
	var inserted bool
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		inserted, err = tx.InsertIdempotencyKey(t.Context(), k)
		return err
	})
	return inserted
}

func getKey(t *testing.T, s reconcile.Store, client, key string) reconcile.IdempotencyKey {
	t.Helper()
	var k reconcile.IdempotencyKey
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		k, err = tx.GetIdempotencyKey(t.Context(), client, key)
		return err
	})
	return k
}

// equalKey compares keys, in UTC, with nil and empty responses alike.
func equalKey(t *testing.T, what string, got, want reconcile.IdempotencyKey) {
	t.Helper()
	got.Response, want.Response = sameBytes(got.Response), sameBytes(want.Response)
	want.CreatedAt = want.CreatedAt.UTC()
	equal(t, what, got, want)
}

func testIdempotencyKeys(t *testing.T, newStore func(*testing.T) *testStore) {
	parallel(t, "RoundTrip", func(t *testing.T) {
		s := newStore(t)
		zone := time.FixedZone("UTC+9", 9*3600)
		fresh := newKey("client_a", "key-1", at(time.Second+999999*time.Microsecond).In(zone))
		saved := reconcile.IdempotencyKey{
			Client: "client_a", Key: "key-2", RequestHash: "abc123", StatusCode: 201,
			Response: []byte(`{"id":"pur_1"}`), PurchaseID: "pur_1", CreatedAt: at(3 * time.Microsecond),
		}
		for _, k := range []reconcile.IdempotencyKey{fresh, saved} {
			if !insertKey(t, s, k) {
				t.Fatalf("InsertIdempotencyKey(%s) on an empty store reported not inserted", k.Key)
			}
			got := getKey(t, s, k.Client, k.Key)
			equalKey(t, "key read back", got, k)
			if got.CreatedAt.Location() != time.UTC {
				t.Fatalf("CreatedAt in %v, want UTC", got.CreatedAt.Location())
			}
		}
		if got := getKey(t, s, "client_a", "key-1"); got.StatusCode != 0 || len(got.Response) != 0 || got.PurchaseID != "" {
			t.Fatalf("a key with no response came back with one: %+v", got)
		}
		err := txErr(t, s, func(tx reconcile.Tx) error {
			_, err := tx.GetIdempotencyKey(t.Context(), "client_a", "key-missing")
			return err
		})
		wantErr(t, "GetIdempotencyKey(unknown)", err, reconcile.ErrNotFound)
	})

	parallel(t, "DuplicateKeepsFirst", func(t *testing.T) {
		s := newStore(t)
		first := newKey("client_a", "key-1", base)
		insertKey(t, s, first)
		again := first
		again.RequestHash, again.CreatedAt, again.StatusCode, again.Response = "another-body", at(time.Minute), 500, []byte("x")
		inTx(t, s, func(tx reconcile.Tx) error {
			inserted, err := tx.InsertIdempotencyKey(t.Context(), again)
			if err != nil || inserted {
				return fmt.Errorf("InsertIdempotencyKey of a stored key = %v, %v; want false, nil", inserted, err)
			}
			// The transaction goes on.
			inserted, err = tx.InsertIdempotencyKey(t.Context(), newKey("client_a", "key-2", base))
			if err != nil || !inserted {
				return fmt.Errorf("InsertIdempotencyKey of a new key after a duplicate = %v, %v; want true, nil", inserted, err)
			}
			return nil
		})
		equalKey(t, "key after the second insert", getKey(t, s, "client_a", "key-1"), first)
	})

	parallel(t, "ScopedPerClient", func(t *testing.T) {
		s := newStore(t)
		a, b := newKey("client_a", "same-key", base), newKey("client_b", "same-key", base)
		if !insertKey(t, s, a) || !insertKey(t, s, b) {
			t.Fatal("one key string for two clients: want both inserted")
		}
		inTx(t, s, func(tx reconcile.Tx) error {
			return tx.SaveIdempotencyResponse(t.Context(), "client_b", "same-key", 409, []byte("b's answer"), "")
		})
		equalKey(t, "client_a's key", getKey(t, s, "client_a", "same-key"), a)
		b.StatusCode, b.Response = 409, []byte("b's answer")
		equalKey(t, "client_b's key", getKey(t, s, "client_b", "same-key"), b)
	})

	parallel(t, "SaveResponse", func(t *testing.T) {
		s := newStore(t)
		k := newKey("client_a", "key-1", base)
		insertKey(t, s, k)
		inTx(t, s, func(tx reconcile.Tx) error {
			return tx.SaveIdempotencyResponse(t.Context(), "client_a", "key-1", 201, []byte(`{"id":"pur_1","state":"created"}`), "pur_1")
		})
		want := k
		want.StatusCode, want.Response, want.PurchaseID = 201, []byte(`{"id":"pur_1","state":"created"}`), "pur_1"
		equalKey(t, "key after saving its response", getKey(t, s, "client_a", "key-1"), want)

		err := txErr(t, s, func(tx reconcile.Tx) error {
			return tx.SaveIdempotencyResponse(t.Context(), "client_a", "key-missing", 201, []byte("x"), "")
		})
		wantErr(t, "SaveIdempotencyResponse(unknown key)", err, reconcile.ErrNotFound)
		err = txErr(t, s, func(tx reconcile.Tx) error {
			return tx.SaveIdempotencyResponse(t.Context(), "client_b", "key-1", 201, []byte("x"), "")
		})
		wantErr(t, "SaveIdempotencyResponse(another client's key)", err, reconcile.ErrNotFound)
	})

	parallel(t, "DeleteBefore", func(t *testing.T) {
		s := newStore(t)
		insertPurchase(t, s, newPurchase("pur_1"))
		for _, m := range []int{3, 5, 1, 4, 2} {
			k := newKey("client_a", fmt.Sprintf("key-%d", m), at(time.Duration(m)*time.Minute))
			k.StatusCode, k.Response, k.PurchaseID = 201, []byte("{}"), "pur_1"
			insertKey(t, s, k)
		}
		before := at(4 * time.Minute) // key-1..key-3 are older; key-4 was created at it, not before
		for i, want := range []int{2, 1, 0} {
			var n int
			inTx(t, s, func(tx reconcile.Tx) error {
				var err error
				n, err = tx.DeleteIdempotencyKeysBefore(t.Context(), before, 2)
				return err
			})
			if n != want {
				t.Fatalf("DeleteIdempotencyKeysBefore(limit 2), call %d: deleted %d, want %d", i+1, n, want)
			}
		}
		for _, key := range []string{"key-1", "key-2", "key-3"} {
			err := txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetIdempotencyKey(t.Context(), "client_a", key); return err })
			wantErr(t, "GetIdempotencyKey of deleted "+key, err, reconcile.ErrNotFound)
		}
		for _, key := range []string{"key-4", "key-5"} {
			getKey(t, s, "client_a", key)
		}
		equal(t, "purchase the deleted keys named", getPurchase(t, s, "pur_1"), newPurchase("pur_1"))
	})

	parallel(t, "ConcurrentInsert", func(t *testing.T) {
		s := newStore(t)
		results := race(t, s, racers, func(tx reconcile.Tx, i int) (bool, error) {
			k := newKey("client_a", "key-race", base)
			k.RequestHash = fmt.Sprintf("req-%d", i)
			return tx.InsertIdempotencyKey(t.Context(), k)
		})
		won := winners(results)
		if len(won) != 1 {
			t.Fatalf("%d concurrent inserts of one key: %d reported inserted (%v), want exactly 1", racers, len(won), results)
		}
		if got := getKey(t, s, "client_a", "key-race"); got.RequestHash != fmt.Sprintf("req-%d", won[0]) {
			t.Fatalf("stored key has hash %q, but insert %d reported inserting it", got.RequestHash, won[0])
		}
	})
}
