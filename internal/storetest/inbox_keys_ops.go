package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The tests of the webhook inbox, the purchase API's idempotency keys, the
// operator audit, the sweep locks, the rescue claim and the operator
// list's read models.

// racers is how many goroutines race for one key in the concurrency
// tests.
const racers = 8

// race runs fn(i) for i in [0, n) in n goroutines released at the same
// instant, each fn in its own transaction, and returns what each
// reported. fn may run more than once (InTx retries), so it reports by
// returning, not by counting.
func race[T any](t *testing.T, s reconcile.Store, n int, fn func(tx reconcile.Tx, i int) (T, error)) []T {
	t.Helper()
	got := make([]T, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = s.InTx(t.Context(), func(tx reconcile.Tx) error {
				v, err := fn(tx, i)
				got[i] = v
				return err
			})
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("racing transactions: %v", err)
	}
	return got
}

// winners returns the indexes whose result is true.
func winners(results []bool) []int {
	var out []int
	for i, ok := range results {
		if ok {
			out = append(out, i)
		}
	}
	return out
}

// sameBytes treats nil and empty alike: a store may read an empty byte
// string back either way.
func sameBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// ---- webhook inbox ----

// inboxEvent returns an unmatched stripe event received at received.
func inboxEvent(id string, received time.Time) reconcile.InboxEvent {
	return reconcile.InboxEvent{
		Provider:    "stripe",
		EventID:     id,
		Type:        "payment_intent.succeeded",
		PayloadHash: "hash-" + id,
		Payload:     []byte(`{"id":"` + id + `"}`),
		ObjectID:    "pi_" + id,
		Result:      provider.Succeeded,
		Outcome:     reconcile.EventUnmatched,
		ReceivedAt:  received,
	}
}

func insertEvent(t *testing.T, s reconcile.Store, e reconcile.InboxEvent) bool {
	t.Helper()
	var inserted bool
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		inserted, err = tx.InsertInboxEvent(t.Context(), e)
		return err
	})
	return inserted
}

func getEvent(t *testing.T, s reconcile.Store, providerName, eventID string) reconcile.InboxEvent {
	t.Helper()
	var e reconcile.InboxEvent
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		e, err = tx.GetInboxEvent(t.Context(), providerName, eventID)
		return err
	})
	return e
}

func updateEvent(t *testing.T, s reconcile.Store, eventID, purchaseID string, outcome reconcile.EventOutcome, processedAt time.Time) {
	t.Helper()
	inTx(t, s, func(tx reconcile.Tx) error {
		return tx.UpdateInboxEvent(t.Context(), "stripe", eventID, purchaseID, outcome, processedAt)
	})
}

// equalEvents compares events, in UTC, with nil and empty payloads alike.
func equalEvents(t *testing.T, what string, got, want []reconcile.InboxEvent) {
	t.Helper()
	norm := func(es []reconcile.InboxEvent) []reconcile.InboxEvent {
		out := make([]reconcile.InboxEvent, len(es))
		for i, e := range es {
			e.Payload = sameBytes(e.Payload)
			e.ReceivedAt, e.ProcessedAt, e.Created = e.ReceivedAt.UTC(), e.ProcessedAt.UTC(), e.Created.UTC()
			out[i] = e
		}
		return out
	}
	equal(t, what, norm(got), norm(want))
}

func eventIDs(es []reconcile.InboxEvent) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.EventID
	}
	return out
}

func testInbox(t *testing.T, newStore func(*testing.T) *testStore) {
	parallel(t, "RoundTrip", func(t *testing.T) {
		s := newStore(t)
		zone := time.FixedZone("UTC-3", -3*3600)
		full := reconcile.InboxEvent{
			Provider:    "stripe",
			EventID:     "evt_full",
			Type:        "payment_intent.payment_failed",
			PayloadHash: "0f1e2d",
			Payload:     []byte("{\"binary\":\"\x00\xff\"}"),
			ObjectID:    "pi_full",
			Result:      provider.Declined,
			PurchaseID:  "pur_not_yet_created", // metadata may name a purchase that does not exist
			Amount:      1099,
			Currency:    "eur",
			Created:     at(500 * time.Millisecond).In(zone),
			Outcome:     reconcile.EventApplied,
			ReceivedAt:  at(time.Second + 123457*time.Microsecond).In(zone),
			ProcessedAt: at(2*time.Second + 1*time.Microsecond).In(zone),
		}
		minimal := reconcile.InboxEvent{Provider: "stripe", EventID: "evt_min", PayloadHash: "h", Outcome: reconcile.EventUnmatched, ReceivedAt: base}
		for _, e := range []reconcile.InboxEvent{full, minimal} {
			if !insertEvent(t, s, e) {
				t.Fatalf("InsertInboxEvent(%s) on an empty inbox reported not inserted", e.EventID)
			}
			got := getEvent(t, s, e.Provider, e.EventID)
			equalEvents(t, "event read back", []reconcile.InboxEvent{got}, []reconcile.InboxEvent{e})
			if got.ReceivedAt.Location() != time.UTC {
				t.Fatalf("ReceivedAt in %v, want UTC", got.ReceivedAt.Location())
			}
		}
		if got := getEvent(t, s, "stripe", "evt_min"); !got.ProcessedAt.IsZero() || got.PurchaseID != "" || !got.Created.IsZero() || got.Amount != 0 {
			t.Fatalf("unset fields came back set: %+v", got)
		}
		err := txErr(t, s, func(tx reconcile.Tx) error {
			_, err := tx.GetInboxEvent(t.Context(), "stripe", "evt_missing")
			return err
		})
		wantErr(t, "GetInboxEvent(unknown)", err, reconcile.ErrNotFound)
		err = txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetInboxEvent(t.Context(), "other", "evt_full"); return err })
		wantErr(t, "GetInboxEvent(other provider)", err, reconcile.ErrNotFound)
	})

	parallel(t, "DuplicateKeepsFirst", func(t *testing.T) {
		s := newStore(t)
		first := inboxEvent("evt_1", base)
		if !insertEvent(t, s, first) {
			t.Fatal("first InsertInboxEvent reported not inserted")
		}
		again := inboxEvent("evt_1", at(time.Minute))
		again.PayloadHash, again.Payload, again.Type = "other-hash", []byte(`{"other":true}`), "charge.refunded"
		again.Outcome, again.PurchaseID = reconcile.EventApplied, "pur_x"
		inTx(t, s, func(tx reconcile.Tx) error {
			ctx := t.Context()
			inserted, err := tx.InsertInboxEvent(ctx, again)
			if err != nil || inserted {
				return fmt.Errorf("InsertInboxEvent of a stored id = %v, %v; want false, nil", inserted, err)
			}
			// The transaction goes on: the same id from another provider
			// is another event.
			other := again
			other.Provider = "adyen"
			inserted, err = tx.InsertInboxEvent(ctx, other)
			if err != nil || !inserted {
				return fmt.Errorf("InsertInboxEvent of the id under another provider = %v, %v; want true, nil", inserted, err)
			}
			return nil
		})
		equalEvents(t, "event after the second insert", []reconcile.InboxEvent{getEvent(t, s, "stripe", "evt_1")}, []reconcile.InboxEvent{first})
		if got := getEvent(t, s, "adyen", "evt_1"); got.PayloadHash != "other-hash" {
			t.Fatalf("adyen's evt_1: %+v", got)
		}
	})

	parallel(t, "Update", func(t *testing.T) {
		s := newStore(t)
		e := inboxEvent("evt_1", base)
		e.PurchaseID = "pur_meta"
		insertEvent(t, s, e)
		insertPurchase(t, s, newPurchase("pur_1"))

		processed := at(time.Second + 5*time.Microsecond)
		updateEvent(t, s, "evt_1", "pur_1", reconcile.EventApplied, processed)
		want := e
		want.PurchaseID, want.Outcome, want.ProcessedAt = "pur_1", reconcile.EventApplied, processed
		equalEvents(t, "event after update", []reconcile.InboxEvent{getEvent(t, s, "stripe", "evt_1")}, []reconcile.InboxEvent{want})

		// Still no purchase: the event records none.
		updateEvent(t, s, "evt_1", "", reconcile.EventUnmatched, at(time.Minute))
		want.PurchaseID, want.Outcome, want.ProcessedAt = "", reconcile.EventUnmatched, at(time.Minute)
		equalEvents(t, "event after clearing its purchase", []reconcile.InboxEvent{getEvent(t, s, "stripe", "evt_1")}, []reconcile.InboxEvent{want})

		err := txErr(t, s, func(tx reconcile.Tx) error {
			return tx.UpdateInboxEvent(t.Context(), "stripe", "evt_missing", "pur_1", reconcile.EventApplied, base)
		})
		wantErr(t, "UpdateInboxEvent(unknown)", err, reconcile.ErrNotFound)
	})

	parallel(t, "ListByPurchase", func(t *testing.T) {
		s := newStore(t)
		insertPurchase(t, s, newPurchase("pur_1"))
		insertPurchase(t, s, newPurchase("pur_2"))
		// Inserted out of received order.
		for _, ev := range []struct {
			id       string
			received time.Duration
			purchase string
		}{{"evt_c", 3, "pur_1"}, {"evt_x", 2, "pur_2"}, {"evt_a", 1, "pur_1"}, {"evt_b", 2, ""}, {"evt_d", 4, ""}} {
			e := inboxEvent(ev.id, at(ev.received*time.Minute))
			e.PurchaseID = ev.purchase
			insertEvent(t, s, e)
		}
		// evt_b is matched to pur_1 later.
		updateEvent(t, s, "evt_b", "pur_1", reconcile.EventApplied, at(5*time.Minute))

		var got []reconcile.InboxEvent
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			got, err = tx.ListInboxEvents(t.Context(), "pur_1")
			return err
		})
		equal(t, "events of pur_1, oldest received first", eventIDs(got), []string{"evt_a", "evt_b", "evt_c"})
		equalEvents(t, "evt_b in the list", got[1:2], []reconcile.InboxEvent{getEvent(t, s, "stripe", "evt_b")})
		inTx(t, s, func(tx reconcile.Tx) error {
			none, err := tx.ListInboxEvents(t.Context(), "pur_missing")
			if err != nil || len(none) != 0 {
				return fmt.Errorf("ListInboxEvents(unknown) = %v, %v; want none, nil", none, err)
			}
			return nil
		})
	})

	parallel(t, "ListUnmatched", func(t *testing.T) {
		s := newStore(t)
		for _, ev := range []struct {
			id       string
			received time.Duration
			outcome  reconcile.EventOutcome
		}{
			{"evt_4", 4, reconcile.EventUnmatched},
			{"evt_2", 2, reconcile.EventUnmatched},
			{"evt_applied", 0, reconcile.EventApplied},
			{"evt_6b", 6, reconcile.EventUnmatched},
			{"evt_5", 5, reconcile.EventUnmatched},
			{"evt_1", 1, reconcile.EventUnmatched},
			{"evt_ignored", 0, reconcile.EventIgnored},
			{"evt_6a", 6, reconcile.EventUnmatched},
			{"evt_3", 3, reconcile.EventUnmatched},
		} {
			e := inboxEvent(ev.id, at(ev.received*time.Minute))
			e.Outcome = ev.outcome
			insertEvent(t, s, e)
		}
		list := func(limit int) []string {
			t.Helper()
			var got []reconcile.InboxEvent
			inTx(t, s, func(tx reconcile.Tx) error {
				var err error
				got, err = tx.ListUnmatchedEvents(t.Context(), limit)
				return err
			})
			for _, e := range got {
				if e.Outcome != reconcile.EventUnmatched {
					t.Fatalf("ListUnmatchedEvents returned %s with outcome %s", e.EventID, e.Outcome)
				}
			}
			return eventIDs(got)
		}
		retry := func(at time.Time, ids ...string) {
			t.Helper()
			for _, id := range ids {
				updateEvent(t, s, id, "", reconcile.EventUnmatched, at)
			}
		}
		// Never tried: oldest received first, then by event id.
		equal(t, "unmatched, never tried", list(10), []string{"evt_1", "evt_2", "evt_3", "evt_4", "evt_5", "evt_6a", "evt_6b"})
		equal(t, "unmatched, limit 2", list(2), []string{"evt_1", "evt_2"})
		updateEvent(t, s, "evt_1", "pur_1", reconcile.EventApplied, at(time.Hour))
		equal(t, "unmatched after evt_1 matched", list(2), []string{"evt_2", "evt_3"})
		// Tried again and still unmatched: it stays on the list, behind
		// the events never tried, however long ago it was received.
		retry(at(time.Hour), "evt_2")
		equal(t, "unmatched after evt_2 was retried", list(10), []string{"evt_3", "evt_4", "evt_5", "evt_6a", "evt_6b", "evt_2"})
		// Among the tried, least recently tried first, whatever their
		// received_at: evt_3 (received after evt_2, tried before it), then
		// evt_2, then evt_5 (tried last).
		retry(at(2*time.Hour), "evt_5")
		retry(at(30*time.Minute), "evt_3")
		equal(t, "unmatched after evt_3 and evt_5 were retried", list(10), []string{"evt_4", "evt_6a", "evt_6b", "evt_3", "evt_2", "evt_5"})
		// Tried at the same instant: oldest received first, then by id.
		retry(at(3*time.Hour), "evt_6b", "evt_6a", "evt_4")
		want := []string{"evt_3", "evt_2", "evt_5", "evt_4", "evt_6a", "evt_6b"}
		equal(t, "unmatched, all tried", list(10), want)
		// A sweep that retries its batch, one event after the other, moves
		// on to the others: events that never match cannot hold the head
		// of the list.
		now := at(4 * time.Hour)
		for i := range 3 {
			batch := list(2)
			equal(t, fmt.Sprintf("sweep batch %d", i+1), batch, want[2*i:2*i+2])
			for _, id := range batch {
				now = now.Add(time.Second)
				retry(now, id)
			}
		}
		equal(t, "unmatched after a full round of sweeps", list(10), want)
	})

	parallel(t, "DeleteBefore", func(t *testing.T) {
		s := newStore(t)
		for _, m := range []int{3, 5, 1, 4, 2} {
			insertEvent(t, s, inboxEvent(fmt.Sprintf("evt_%d", m), at(time.Duration(m)*time.Minute)))
		}
		before := at(4 * time.Minute) // evt_1..evt_3 are older; evt_4 was received at it, not before
		del := func(limit int) int {
			t.Helper()
			var n int
			inTx(t, s, func(tx reconcile.Tx) error {
				var err error
				n, err = tx.DeleteInboxEventsBefore(t.Context(), before, limit)
				return err
			})
			return n
		}
		for i, want := range []int{2, 1, 0} {
			if n := del(2); n != want {
				t.Fatalf("DeleteInboxEventsBefore(limit 2), call %d: deleted %d, want %d", i+1, n, want)
			}
		}
		for _, id := range []string{"evt_1", "evt_2", "evt_3"} {
			err := txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetInboxEvent(t.Context(), "stripe", id); return err })
			wantErr(t, "GetInboxEvent of deleted "+id, err, reconcile.ErrNotFound)
		}
		for _, id := range []string{"evt_4", "evt_5"} {
			getEvent(t, s, "stripe", id)
		}
	})

	parallel(t, "ConcurrentInsert", func(t *testing.T) {
		s := newStore(t)
		results := race(t, s, racers, func(tx reconcile.Tx, i int) (bool, error) {
			e := inboxEvent("evt_race", base)
			e.PayloadHash = fmt.Sprintf("hash-%d", i)
			return tx.InsertInboxEvent(t.Context(), e)
		})
		won := winners(results)
		if len(won) != 1 {
			t.Fatalf("%d concurrent inserts of one event: %d reported inserted (%v), want exactly 1", racers, len(won), results)
		}
		if got := getEvent(t, s, "stripe", "evt_race"); got.PayloadHash != fmt.Sprintf("hash-%d", won[0]) {
			t.Fatalf("stored event has hash %q, but insert %d reported inserting it", got.PayloadHash, won[0])
		}
	})
}

// ---- idempotency keys ----

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

// ---- operator audit ----

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

// ---- sweep locks ----

// acquire sets the store's clock to now and takes the lock.
func acquire(t *testing.T, s *testStore, name, owner string, now time.Time, ttl time.Duration) bool {
	t.Helper()
	s.clock.Set(now)
	var ok bool
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		ok, err = tx.AcquireSweepLock(t.Context(), name, owner, ttl)
		return err
	})
	return ok
}

func release(t *testing.T, s reconcile.Store, name, owner string) {
	t.Helper()
	inTx(t, s, func(tx reconcile.Tx) error { return tx.ReleaseSweepLock(t.Context(), name, owner) })
}

func testSweepLocks(t *testing.T, newStore func(*testing.T) *testStore) {
	const ttl = time.Minute

	parallel(t, "Lifecycle", func(t *testing.T) {
		s := newStore(t)
		for _, step := range []struct {
			what  string
			owner string
			now   time.Duration
			want  bool
		}{
			{"free lock", "a", 0, true},
			{"held by another, unexpired", "b", 30 * time.Second, false},
			{"same owner re-acquires, extending it to 90s", "a", 30 * time.Second, true},
			{"past the first expiry, within the extension", "b", 61 * time.Second, false},
			{"expired", "b", 91 * time.Second, true},
			{"the old owner, now that b holds it", "a", 92 * time.Second, false},
		} {
			if got := acquire(t, s, "retention", step.owner, at(step.now), ttl); got != step.want {
				t.Fatalf("%s: AcquireSweepLock(retention, %s, +%s) = %v, want %v", step.what, step.owner, step.now, got, step.want)
			}
		}
		// Locks are independent by name.
		if !acquire(t, s, "rescue", "a", at(92*time.Second), ttl) {
			t.Fatal("AcquireSweepLock(rescue, a) refused while only retention is held (by b)")
		}

		now := at(100 * time.Second) // b holds retention until 151s
		release(t, s, "retention", "a")
		if acquire(t, s, "retention", "c", now, ttl) {
			t.Fatal("a released b's lock: c acquired it")
		}
		release(t, s, "retention", "b")
		if !acquire(t, s, "retention", "c", now, ttl) {
			t.Fatal("after b released it, c could not acquire the lock")
		}
		release(t, s, "never-taken", "c") // releasing a lock nobody holds is no error
	})

	parallel(t, "Race", func(t *testing.T) {
		s := newStore(t)
		owners := []string{"replica-1", "replica-2"}
		s.clock.Set(base)
		results := race(t, s, len(owners), func(tx reconcile.Tx, i int) (bool, error) {
			return tx.AcquireSweepLock(t.Context(), "rescue", owners[i], ttl)
		})
		won := winners(results)
		if len(won) != 1 {
			t.Fatalf("two replicas racing for one lock: %v acquired it, want exactly one", results)
		}
		loser := owners[1-won[0]]
		if acquire(t, s, "rescue", loser, at(time.Second), ttl) {
			t.Fatalf("%s acquired the lock %s won", loser, owners[won[0]])
		}
		if !acquire(t, s, "rescue", owners[won[0]], at(time.Second), ttl) {
			t.Fatalf("%s, the winner, could not re-acquire its lock", owners[won[0]])
		}
	})
}

// ---- rescue claims ----

func testClaimExpiredJobs(t *testing.T, s *testStore) {
	const leaseFor = 30 * time.Second
	claimExpired := func(owner string, limit int, now time.Time) []reconcile.Lease {
		t.Helper()
		s.clock.Set(now)
		leases, err := s.ClaimExpiredJobs(t.Context(), owner, limit, leaseFor)
		if err != nil {
			t.Fatalf("ClaimExpiredJobs(%s, %d) at %s: %v", owner, limit, now, err)
		}
		checkLeaseNow(t, leases, now)
		return leases
	}

	// pur_exp1 and pur_exp2: leased at 0s until 30s, never released.
	purchaseWithJob(t, s, "pur_exp1", base)
	purchaseWithJob(t, s, "pur_exp2", base)
	dead := claim(t, s, "w-dead", 10, base, leaseFor)
	if len(dead) != 2 {
		t.Fatalf("ClaimJobs at 0s: %v, want pur_exp1 and pur_exp2", ids(dead))
	}
	// pur_live: leased at 20s until 50s.
	purchaseWithJob(t, s, "pur_live", at(20*time.Second))
	live := claimOne(t, s, "w-live", "pur_live", at(20*time.Second), leaseFor)
	// pur_due: due at 25s, never leased.
	purchaseWithJob(t, s, "pur_due", at(25*time.Second))
	// pur_released: leased, then released to be due at 10s.
	purchaseWithJob(t, s, "pur_released", at(time.Second))
	rel := claimOne(t, s, "w-live", "pur_released", at(time.Second), leaseFor)
	inTx(t, s, func(tx reconcile.Tx) error {
		if err := tx.CheckLease(t.Context(), rel); err != nil {
			return err
		}
		return tx.RescheduleJob(t.Context(), "pur_released", at(10*time.Second))
	})
	// pur_done: leased, then completed.
	purchaseWithJob(t, s, "pur_done", at(2*time.Second))
	done := claimOne(t, s, "w-live", "pur_done", at(2*time.Second), leaseFor)
	inTx(t, s, func(tx reconcile.Tx) error {
		if err := tx.CheckLease(t.Context(), done); err != nil {
			return err
		}
		return tx.CompleteJob(t.Context(), "pur_done", at(3*time.Second))
	})

	if got := claimExpired("w-rescue", 10, at(29*time.Second)); len(got) != 0 {
		t.Fatalf("ClaimExpiredJobs before any lease expired: %v", ids(got))
	}
	now := at(40 * time.Second)
	first := claimExpired("w-rescue", 1, now)
	if len(first) != 1 {
		t.Fatalf("ClaimExpiredJobs with limit 1: %v, want one job", ids(first))
	}
	rest := claimExpired("w-rescue", 10, now)
	got := append(first, rest...)
	equal(t, "expired jobs claimed", sorted(ids(got)), []string{"pur_exp1", "pur_exp2"})
	for _, l := range got {
		equal(t, "rescue lease", l, reconcile.Lease{
			PurchaseID: l.PurchaseID, Owner: "w-rescue", Token: 2, ExpiresAt: now.Add(leaseFor), TakenOver: true, Checks: 2, Now: now,
		})
	}
	for _, l := range dead {
		wantErr(t, "CheckLease of the dead worker", checkLease(t, s, l, at(29*time.Second)), reconcile.ErrLeaseLost)
	}
	if err := checkLease(t, s, live, now); err != nil {
		t.Fatalf("the live lease after a rescue claim: %v", err)
	}
	if got := claimExpired("w-rescue", 10, now); len(got) != 0 {
		t.Fatalf("ClaimExpiredJobs again: %v, want none", ids(got))
	}
	// The due, unleased jobs are still there for an ordinary claim.
	equal(t, "due jobs left for ClaimJobs", sorted(ids(claim(t, s, "w1", 10, now, leaseFor))), []string{"pur_due", "pur_released"})
}

// ---- operator list and metrics ----

func testCountEscalated(t *testing.T, s *testStore) {
	count := func() int {
		t.Helper()
		var n int
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			n, err = tx.CountEscalated(t.Context())
			return err
		})
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("CountEscalated on an empty store: %d", n)
	}
	escalated := map[string]reconcile.Purchase{}
	for _, e := range []struct {
		id    string
		state statemachine.State
	}{{"pur_a", statemachine.Uncertain}, {"pur_b", statemachine.Declined}, {"pur_c", statemachine.Created}} {
		p := createIn(t, s, e.id, e.state)
		p.EscalatedAt, p.EscalationReason = at(time.Hour), reconcile.EscalationContradiction
		escalated[e.id] = update(t, s, p, e.state)
	}
	createIn(t, s, "pur_d", statemachine.Reconciling)
	createIn(t, s, "pur_e", statemachine.Succeeded)
	if n := count(); n != 3 {
		t.Fatalf("CountEscalated: %d, want 3", n)
	}
	b := escalated["pur_b"]
	b.EscalatedAt, b.EscalationReason = time.Time{}, ""
	update(t, s, b, statemachine.Declined)
	if n := count(); n != 2 {
		t.Fatalf("CountEscalated after resolving pur_b: %d, want 2", n)
	}
}

func testOldestUncertainSince(t *testing.T, s *testStore) {
	oldest := func() time.Time {
		t.Helper()
		var got time.Time
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			got, err = tx.OldestUncertainSince(t.Context())
			return err
		})
		return got
	}
	if got := oldest(); !got.IsZero() {
		t.Fatalf("OldestUncertainSince on an empty store: %s, want the zero time", got)
	}
	// withSince moves a purchase to state, then sets its UncertainSince.
	withSince := func(id string, state statemachine.State, since time.Time) reconcile.Purchase {
		t.Helper()
		p := createIn(t, s, id, state)
		p.UncertainSince = since
		return update(t, s, p, state)
	}
	// Earlier times on purchases that do not count.
	withSince("pur_created", statemachine.Created, at(time.Second))
	withSince("pur_submitted", statemachine.Submitted, at(2*time.Second))
	withSince("pur_succeeded", statemachine.Succeeded, at(3*time.Second))
	withSince("pur_declined", statemachine.Declined, at(4*time.Second))
	if got := oldest(); !got.IsZero() {
		t.Fatalf("OldestUncertainSince with no purchase uncertain or reconciling: %s, want the zero time", got)
	}

	withSince("pur_u1", statemachine.Uncertain, at(10*time.Minute))
	rec := withSince("pur_r1", statemachine.Reconciling, at(5*time.Minute+7*time.Microsecond))
	withSince("pur_u2", statemachine.Uncertain, at(7*time.Minute))
	got := oldest()
	equal(t, "OldestUncertainSince", got, at(5*time.Minute+7*time.Microsecond))
	if got.Location() != time.UTC {
		t.Fatalf("OldestUncertainSince in %v, want UTC", got.Location())
	}

	// Once the oldest is settled, the next one counts.
	rec.State = statemachine.Succeeded
	update(t, s, rec, statemachine.Reconciling)
	equal(t, "OldestUncertainSince after pur_r1 succeeded", oldest(), at(7*time.Minute))
}

func testFindByReference(t *testing.T, s *testStore) {
	find := func(customer, reference string) (reconcile.Purchase, error) {
		t.Helper()
		var p reconcile.Purchase
		err := txErr(t, s, func(tx reconcile.Tx) error {
			var err error
			p, err = tx.FindPurchaseByReference(t.Context(), customer, reference)
			return err
		})
		return p, err
	}
	mine := newPurchase("pur_mine")
	mine.Customer, mine.Reference = "cus_1", "order-7"
	theirs := newPurchase("pur_theirs")
	theirs.Customer, theirs.Reference = "cus_2", "order-7"
	insertPurchase(t, s, mine)
	insertPurchase(t, s, theirs)
	insertPurchase(t, s, newPurchase("pur_noref")) // cus_1, no reference

	for _, want := range []reconcile.Purchase{mine, theirs} {
		got, err := find(want.Customer, want.Reference)
		if err != nil {
			t.Fatalf("FindPurchaseByReference(%s, %s): %v", want.Customer, want.Reference, err)
		}
		equal(t, "found purchase", got, want)
	}
	for _, c := range [][2]string{{"cus_1", "order-8"}, {"cus_3", "order-7"}, {"cus_1", ""}} {
		_, err := find(c[0], c[1])
		wantErr(t, fmt.Sprintf("FindPurchaseByReference(%q, %q)", c[0], c[1]), err, reconcile.ErrNotFound)
	}
}

func testListOverdueUncertain(t *testing.T, s *testStore) {
	list := func(before time.Time, limit int) []reconcile.Purchase {
		t.Helper()
		var out []reconcile.Purchase
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			out, err = tx.ListOverdueUncertain(t.Context(), before, limit)
			return err
		})
		return out
	}
	before := at(5 * time.Minute)
	if got := list(before, 10); len(got) != 0 {
		t.Fatalf("ListOverdueUncertain on an empty store: %+v", got)
	}
	// set moves a purchase to state, then sets its UncertainSince and
	// maybe an escalation.
	set := func(id string, state statemachine.State, since time.Duration, escalated bool) reconcile.Purchase {
		t.Helper()
		p := createIn(t, s, id, state)
		p.UncertainSince = at(since)
		if escalated {
			p.EscalatedAt, p.EscalationReason = at(time.Hour), reconcile.EscalationAttemptsExhausted
		}
		return update(t, s, p, state)
	}
	u3 := set("pur_u3", statemachine.Uncertain, 3*time.Minute, false)
	set("pur_escalated", statemachine.Uncertain, 2*time.Minute, true) // already on the operator list
	u1 := set("pur_u1", statemachine.Uncertain, time.Minute+time.Microsecond, false)
	set("pur_reconciling", statemachine.Reconciling, 0, false) // being reconciled
	set("pur_created", statemachine.Created, 0, false)
	set("pur_succeeded", statemachine.Succeeded, 0, false)
	set("pur_at", statemachine.Uncertain, 5*time.Minute, false) // uncertain at the cut-off, not before it
	set("pur_late", statemachine.Uncertain, 10*time.Minute, false)
	u4 := set("pur_u4", statemachine.Uncertain, 4*time.Minute, false)

	equal(t, "overdue, oldest first", list(before, 10), []reconcile.Purchase{u1, u3, u4})
	equal(t, "overdue, limit 2", list(before, 2), []reconcile.Purchase{u1, u3})
}

// testClaimJob covers the operator's recheck: one job, due or not.
func testClaimJob(t *testing.T, s *testStore) {
	const leaseFor = 30 * time.Second
	// claimJob sets the store's clock to now and claims. A lease must
	// say it was granted at now.
	claimJob := func(id, owner string, now time.Time) (reconcile.Lease, error) {
		t.Helper()
		s.clock.Set(now)
		l, err := s.ClaimJob(t.Context(), id, owner, leaseFor)
		if err == nil {
			checkLeaseNow(t, []reconcile.Lease{l}, now)
		}
		return l, err
	}
	purchaseWithJob(t, s, "pur_1", at(time.Hour)) // not due for an hour
	first, err := claimJob("pur_1", "operator-w", base)
	if err != nil {
		t.Fatalf("ClaimJob of a job not yet due: %v", err)
	}
	equal(t, "first lease", first, reconcile.Lease{PurchaseID: "pur_1", Owner: "operator-w", Token: 1, ExpiresAt: base.Add(leaseFor), Checks: 1, Now: base})
	equal(t, "job leased by ClaimJob", getJob(t, s, "pur_1"), reconcile.Job{
		PurchaseID: "pur_1", RunAt: at(time.Hour), LeaseOwner: "operator-w", LeaseToken: 1, LeaseExpiresAt: first.ExpiresAt, Checks: 1,
	})

	_, err = claimJob("pur_1", "w2", first.ExpiresAt.Add(-time.Microsecond))
	wantErr(t, "ClaimJob while another owner holds the lease", err, reconcile.ErrConflict)

	// Expired: taken over, with a new token.
	second, err := claimJob("pur_1", "w2", first.ExpiresAt)
	if err != nil {
		t.Fatalf("ClaimJob after the lease expired: %v", err)
	}
	equal(t, "takeover lease", second, reconcile.Lease{
		PurchaseID: "pur_1", Owner: "w2", Token: 2, ExpiresAt: first.ExpiresAt.Add(leaseFor), TakenOver: true, Checks: 2, Now: first.ExpiresAt,
	})
	wantErr(t, "CheckLease of the lease ClaimJob took over", checkLease(t, s, first, base), reconcile.ErrLeaseLost)

	// Released: claimed again, not a takeover.
	s.clock.Set(first.ExpiresAt)
	inTx(t, s, func(tx reconcile.Tx) error {
		if err := tx.CheckLease(t.Context(), second); err != nil {
			return err
		}
		return tx.RescheduleJob(t.Context(), "pur_1", at(time.Hour))
	})
	third, err := claimJob("pur_1", "operator-w", first.ExpiresAt)
	if err != nil || third.Token != 3 || third.TakenOver {
		t.Fatalf("ClaimJob of a released job = %+v, %v; want token 3, not taken over", third, err)
	}

	// Done: never claimed again.
	inTx(t, s, func(tx reconcile.Tx) error {
		if err := tx.CheckLease(t.Context(), third); err != nil {
			return err
		}
		return tx.CompleteJob(t.Context(), "pur_1", first.ExpiresAt)
	})
	_, err = claimJob("pur_1", "operator-w", at(24*time.Hour))
	wantErr(t, "ClaimJob of a done job", err, reconcile.ErrConflict)

	_, err = claimJob("pur_missing", "operator-w", base)
	wantErr(t, "ClaimJob of an unknown job", err, reconcile.ErrNotFound)
}
