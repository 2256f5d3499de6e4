package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// The tests of the inbox's pending events: received, then claimed by the
// applier, retried after a failure, or failed for an operator.

// pendingEvent returns a pending stripe event received at received.
func pendingEvent(id string, received time.Time) reconcile.InboxEvent {
	e := inboxEvent(id, received)
	e.Outcome = reconcile.EventPending
	return e
}

func claimPending(t *testing.T, s reconcile.Store, now time.Time, limit int) []string {
	t.Helper()
	var got []reconcile.InboxEvent
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		got, err = tx.ClaimPendingEvents(t.Context(), now, limit)
		return err
	})
	return eventIDs(got)
}

func recordFailure(t *testing.T, s reconcile.Store, f reconcile.InboxFailure) {
	t.Helper()
	inTx(t, s, func(tx reconcile.Tx) error { return tx.RecordInboxFailure(t.Context(), f) })
}

func backlog(t *testing.T, s reconcile.Store) reconcile.InboxBacklog {
	t.Helper()
	var b reconcile.InboxBacklog
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		b, err = tx.InboxBacklog(t.Context())
		return err
	})
	return b
}

func testPendingInbox(t *testing.T, newStore func(*testing.T) *testStore) {
	// ClaimPendingEvents returns the pending events that are due, oldest
	// received first, up to its limit: not those of another outcome, not
	// one whose retry time is after now.
	parallel(t, "ClaimOrder", func(t *testing.T) {
		s := newStore(t)
		for i, id := range []string{"evt_c", "evt_a", "evt_b", "evt_later"} {
			insertEvent(t, s, pendingEvent(id, at(time.Duration(i)*time.Second)))
		}
		insertEvent(t, s, inboxEvent("evt_unmatched", base))
		recordFailure(t, s, reconcile.InboxFailure{Provider: "stripe", EventID: "evt_later", Attempts: 1,
			Error: "boom", At: at(time.Minute), RetryAt: at(2 * time.Minute), Outcome: reconcile.EventPending})
		equal(t, "claimed before the retry", claimPending(t, s, at(time.Minute), 10), []string{"evt_c", "evt_a", "evt_b"})
		equal(t, "claimed, limit 2", claimPending(t, s, at(time.Minute), 2), []string{"evt_c", "evt_a"})
		equal(t, "claimed at the retry", claimPending(t, s, at(2*time.Minute), 10), []string{"evt_c", "evt_a", "evt_b", "evt_later"})
		err := txErr(t, s, func(tx reconcile.Tx) error {
			_, err := tx.ClaimPendingEvents(t.Context(), base, 0)
			return err
		})
		if !errors.Is(err, reconcile.ErrInvalid) {
			t.Fatalf("ClaimPendingEvents with limit 0: %v, want ErrInvalid", err)
		}
	})

	// RecordInboxFailure keeps the attempts, the error and the retry time
	// of an event still pending; EventFailed takes it out of the claims,
	// with no retry time, onto the failed list, most recent first.
	// Retention never deletes a pending or failed event.
	parallel(t, "Failures", func(t *testing.T) {
		s := newStore(t)
		for i, id := range []string{"evt_1", "evt_2", "evt_3"} {
			insertEvent(t, s, pendingEvent(id, at(time.Duration(i)*time.Second)))
		}
		insertEvent(t, s, inboxEvent("evt_done", base))
		recordFailure(t, s, reconcile.InboxFailure{Provider: "stripe", EventID: "evt_1", Attempts: 3,
			Error: "deadlock", At: at(time.Minute), RetryAt: at(time.Hour), Outcome: reconcile.EventPending})
		e := getEvent(t, s, "stripe", "evt_1")
		if e.Outcome != reconcile.EventPending || e.Attempts != 3 || e.LastError != "deadlock" ||
			!e.RetryAt.Equal(at(time.Hour)) || !e.ProcessedAt.Equal(at(time.Minute)) {
			t.Fatalf("after a failed try: %+v", e)
		}
		recordFailure(t, s, reconcile.InboxFailure{Provider: "stripe", EventID: "evt_1", Attempts: 8,
			Error: "still", At: at(2 * time.Minute), RetryAt: at(time.Hour), Outcome: reconcile.EventFailed})
		recordFailure(t, s, reconcile.InboxFailure{Provider: "stripe", EventID: "evt_2", Attempts: 8,
			Error: "again", At: at(3 * time.Minute), Outcome: reconcile.EventFailed})
		e = getEvent(t, s, "stripe", "evt_1")
		if e.Outcome != reconcile.EventFailed || e.Attempts != 8 || e.LastError != "still" || !e.RetryAt.IsZero() {
			t.Fatalf("after the last try: %+v", e)
		}
		equal(t, "claimed", claimPending(t, s, at(2*time.Hour), 10), []string{"evt_3"})
		var failed []reconcile.InboxEvent
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			failed, err = tx.ListFailedEvents(t.Context(), 10)
			return err
		})
		equal(t, "failed", eventIDs(failed), []string{"evt_2", "evt_1"})
		b := backlog(t, s)
		if b.Pending != 1 || b.Retrying != 0 || b.Failed != 2 || !b.Oldest.Equal(at(2*time.Second)) {
			t.Fatalf("backlog = %+v, want 1 pending since %s, 2 failed", b, at(2*time.Second))
		}
		recordFailure(t, s, reconcile.InboxFailure{Provider: "stripe", EventID: "evt_3", Attempts: 1,
			Error: "busy", At: at(4 * time.Minute), RetryAt: at(5 * time.Minute), Outcome: reconcile.EventPending})
		if b := backlog(t, s); b.Pending != 1 || b.Retrying != 1 || b.Failed != 2 {
			t.Fatalf("backlog = %+v, want 1 pending, retrying, 2 failed", b)
		}
		err := txErr(t, s, func(tx reconcile.Tx) error {
			return tx.RecordInboxFailure(t.Context(), reconcile.InboxFailure{Provider: "stripe", EventID: "evt_none", Outcome: reconcile.EventPending, At: base})
		})
		if !errors.Is(err, reconcile.ErrNotFound) {
			t.Fatalf("RecordInboxFailure of no event: %v, want ErrNotFound", err)
		}
		var deleted int
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			deleted, err = tx.DeleteInboxEventsBefore(t.Context(), at(time.Hour), 100)
			return err
		})
		if deleted != 1 || getEventErr(t, s, "stripe", "evt_done") == nil {
			t.Fatalf("retention deleted %d events, want only evt_done", deleted)
		}
		for _, id := range []string{"evt_1", "evt_2", "evt_3"} {
			if err := getEventErr(t, s, "stripe", id); err != nil {
				t.Fatalf("retention deleted %s, which is not applied: %v", id, err)
			}
		}
	})

	// An empty inbox has no backlog; ClaimInboxEvent takes a pending
	// event only.
	parallel(t, "ClaimOne", func(t *testing.T) {
		s := newStore(t)
		if b := backlog(t, s); b != (reconcile.InboxBacklog{}) {
			t.Fatalf("backlog of an empty inbox = %+v", b)
		}
		insertEvent(t, s, pendingEvent("evt_p", base))
		insertEvent(t, s, inboxEvent("evt_u", base))
		for id, want := range map[string]error{"evt_p": nil, "evt_u": reconcile.ErrNotFound, "evt_none": reconcile.ErrNotFound} {
			err := txErr(t, s, func(tx reconcile.Tx) error {
				e, err := tx.ClaimInboxEvent(t.Context(), "stripe", id)
				if err == nil && e.EventID != id {
					return fmt.Errorf("claimed %s", e.EventID)
				}
				return err
			})
			if !errors.Is(err, want) && err != want {
				t.Fatalf("ClaimInboxEvent(%s) = %v, want %v", id, err, want)
			}
		}
	})

	// Racing appliers, each claiming a batch and recording its outcome
	// before it commits, never claim one event twice, and between them
	// take every event.
	parallel(t, "ConcurrentClaims", func(t *testing.T) {
		s := newStore(t)
		const events = 40
		var all []string
		for i := range events {
			id := fmt.Sprintf("evt_%02d", i)
			all = append(all, id)
			insertEvent(t, s, pendingEvent(id, at(time.Duration(i)*time.Millisecond)))
		}
		got := race(t, s, racers, func(tx reconcile.Tx, _ int) ([]string, error) {
			claimed, err := tx.ClaimPendingEvents(t.Context(), at(time.Hour), events/racers+1)
			if err != nil {
				return nil, err
			}
			var updates []reconcile.InboxUpdate
			for _, e := range claimed {
				updates = append(updates, reconcile.InboxUpdate{Provider: e.Provider, EventID: e.EventID, Outcome: reconcile.EventApplied, ProcessedAt: at(time.Hour)})
			}
			return eventIDs(claimed), tx.UpdateInboxEvents(t.Context(), updates)
		})
		seen := map[string]int{}
		for i, ids := range got {
			for _, id := range ids {
				if j, ok := seen[id]; ok {
					t.Fatalf("event %s claimed by applier %d and %d", id, j, i)
				}
				seen[id] = i
			}
		}
		left := claimPending(t, s, at(time.Hour), events)
		var claimed []string
		for id := range seen {
			claimed = append(claimed, id)
		}
		claimed = append(claimed, left...)
		slices.Sort(claimed)
		equal(t, "claimed or left", claimed, all)
	})
}
