package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// The tests of the webhook inbox.

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

// getEventErr returns GetInboxEvent's error for the event, nil if found.
func getEventErr(t *testing.T, s reconcile.Store, providerName, eventID string) error {
	t.Helper()
	return txErr(t, s, func(tx reconcile.Tx) error {
		_, err := tx.GetInboxEvent(t.Context(), providerName, eventID)
		return err
	})
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
	// ReceiveInboxEvents inserts as InsertInboxEvents does, but stamps
	// every event it stores with the store's clock, to the microsecond,
	// whatever time the event carried, and returns that time; an empty
	// batch returns it too. A refused batch stores nothing.
	parallel(t, "Receive", func(t *testing.T) {
		s := newStore(t)
		insertEvent(t, s, inboxEvent("evt_old", base))
		clock := at(time.Minute).Add(1500 * time.Nanosecond)
		s.clock.Set(clock)
		want := clock.Truncate(time.Microsecond).UTC()
		again := inboxEvent("evt_new", time.Time{})
		again.PayloadHash = "another"
		batch := []reconcile.InboxEvent{inboxEvent("evt_new", time.Time{}), inboxEvent("evt_old", time.Time{}), again, inboxEvent("evt_other", base)}
		var (
			inserted []bool
			now      time.Time
		)
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			inserted, now, err = tx.ReceiveInboxEvents(t.Context(), batch)
			return err
		})
		equal(t, "inserted", inserted, []bool{true, false, false, true})
		if !now.Equal(want) || now.Location() != time.UTC {
			t.Fatalf("ReceiveInboxEvents' now = %s, want %s in UTC", now, want)
		}
		for _, id := range []string{"evt_new", "evt_other"} {
			equalEvents(t, id, []reconcile.InboxEvent{getEvent(t, s, "stripe", id)}, []reconcile.InboxEvent{inboxEvent(id, want)})
		}
		if e := getEvent(t, s, "stripe", "evt_old"); !e.ReceivedAt.Equal(base) {
			t.Fatalf("an event stored before was received again: %s, want %s", e.ReceivedAt, base)
		}

		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			inserted, now, err = tx.ReceiveInboxEvents(t.Context(), nil)
			return err
		})
		if len(inserted) != 0 || !now.Equal(want) {
			t.Fatalf("ReceiveInboxEvents of no event = %v, %s; want none, %s", inserted, now, want)
		}

		// Redelivered events only: nothing stored, the clock still read.
		s.clock.Advance(time.Second)
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			inserted, now, err = tx.ReceiveInboxEvents(t.Context(), batch[:2])
			return err
		})
		if later := want.Add(time.Second); !slices.Equal(inserted, []bool{false, false}) || !now.Equal(later) {
			t.Fatalf("ReceiveInboxEvents of stored events = %v, %s; want none stored, %s", inserted, now, later)
		}
		if e := getEvent(t, s, "stripe", "evt_new"); !e.ReceivedAt.Equal(want) {
			t.Fatalf("a redelivered event was received again: %s, want %s", e.ReceivedAt, want)
		}

		bad := inboxEvent("", time.Time{})
		err := txErr(t, s, func(tx reconcile.Tx) error {
			_, _, err := tx.ReceiveInboxEvents(t.Context(), []reconcile.InboxEvent{inboxEvent("evt_third", time.Time{}), bad})
			return err
		})
		wantErr(t, "ReceiveInboxEvents with an event without its id", err, reconcile.ErrInvalid)
		if err := getEventErr(t, s, "stripe", "evt_third"); !errors.Is(err, reconcile.ErrNotFound) {
			t.Fatalf("a refused batch stored its other member: %v", err)
		}
	})

	// A batch insert stores each new key once: a key stored before, and
	// a later repeat of a key within the batch, are not stored. A batch
	// update records every member's outcome, or nothing when one is
	// missing.
	parallel(t, "Batches", func(t *testing.T) {
		s := newStore(t)
		insertEvent(t, s, inboxEvent("evt_old", base))
		again := inboxEvent("evt_new", base)
		again.PayloadHash = "another"
		batch := []reconcile.InboxEvent{inboxEvent("evt_new", base), inboxEvent("evt_old", base), again, inboxEvent("evt_other", base)}
		var inserted []bool
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			inserted, err = tx.InsertInboxEvents(t.Context(), batch)
			return err
		})
		equal(t, "inserted", inserted, []bool{true, false, false, true})
		equalEvents(t, "evt_new", []reconcile.InboxEvent{getEvent(t, s, "stripe", "evt_new")}, batch[:1])

		bad := inboxEvent("evt_bad", base)
		bad.ReceivedAt = time.Time{}
		err := txErr(t, s, func(tx reconcile.Tx) error {
			_, err := tx.InsertInboxEvents(t.Context(), []reconcile.InboxEvent{inboxEvent("evt_third", base), bad})
			return err
		})
		wantErr(t, "InsertInboxEvents with an event without its time", err, reconcile.ErrInvalid)
		if err := getEventErr(t, s, "stripe", "evt_third"); !errors.Is(err, reconcile.ErrNotFound) {
			t.Fatalf("a refused batch stored its other member: %v", err)
		}

		done := at(time.Second)
		updates := []reconcile.InboxUpdate{
			{Provider: "stripe", EventID: "evt_new", PurchaseID: "pur_1", Outcome: reconcile.EventApplied, ProcessedAt: done},
			{Provider: "stripe", EventID: "evt_other", Outcome: reconcile.EventIgnored, ProcessedAt: done},
		}
		inTx(t, s, func(tx reconcile.Tx) error { return tx.UpdateInboxEvents(t.Context(), updates) })
		for _, u := range updates {
			e := getEvent(t, s, "stripe", u.EventID)
			if e.PurchaseID != u.PurchaseID || e.Outcome != u.Outcome || !e.ProcessedAt.Equal(done) {
				t.Fatalf("%s after its update: %+v", u.EventID, e)
			}
		}
		missing := []reconcile.InboxUpdate{
			{Provider: "stripe", EventID: "evt_old", Outcome: reconcile.EventStale, ProcessedAt: done},
			{Provider: "stripe", EventID: "evt_missing", Outcome: reconcile.EventStale, ProcessedAt: done},
		}
		// The refusal leaves the transaction usable, the refused batch
		// unwritten, as every refused write does: the caller reads on and
		// commits.
		inTx(t, s, func(tx reconcile.Tx) error {
			err := tx.UpdateInboxEvents(t.Context(), missing)
			wantErr(t, "UpdateInboxEvents naming a missing event", err, reconcile.ErrNotFound)
			e, err := tx.GetInboxEvent(t.Context(), "stripe", "evt_old")
			if err != nil {
				return fmt.Errorf("read after a refused batch, in its transaction: %w", err)
			}
			if e.Outcome != reconcile.EventUnmatched {
				t.Fatalf("a refused batch updated its other member, seen in its transaction: %+v", e)
			}
			return nil
		})
		if e := getEvent(t, s, "stripe", "evt_old"); e.Outcome != reconcile.EventUnmatched {
			t.Fatalf("a refused batch updated its other member: %+v", e)
		}
	})

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
		refund := reconcile.InboxEvent{
			Provider: "stripe", EventID: "evt_refund", Type: "refund.updated", PayloadHash: "r",
			ObjectID: "re_1", Result: provider.Succeeded, PurchaseID: "pur_1", Amount: 300, Currency: "eur",
			Outcome: reconcile.EventUnmatched, ReceivedAt: base,
			Refund: true, RefundID: "ref_1", Refunded: "pi_1",
		}
		for _, e := range []reconcile.InboxEvent{full, minimal, refund} {
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
		wantErr(t, "GetInboxEvent(unknown)", getEventErr(t, s, "stripe", "evt_missing"), reconcile.ErrNotFound)
		wantErr(t, "GetInboxEvent(other provider)", getEventErr(t, s, "other", "evt_full"), reconcile.ErrNotFound)
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
			wantErr(t, "GetInboxEvent of deleted "+id, getEventErr(t, s, "stripe", id), reconcile.ErrNotFound)
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
