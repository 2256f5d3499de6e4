package storetest

import (
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// The inbox's disputes: an event about a dispute is stored with it.

// disputeEvent returns a stripe event about dispute d (none when nil)
// of purchase pur_1, received at received, with outcome.
func disputeEvent(id string, d *provider.Dispute, outcome reconcile.EventOutcome, received time.Time) reconcile.InboxEvent {
	e := inboxEvent(id, received)
	e.PurchaseID, e.Outcome, e.Dispute = "pur_1", outcome, d
	if d != nil {
		e.Type, e.ObjectID, e.Amount, e.Currency = provider.EventDisputeCreated, d.PaymentID, d.Amount, d.Currency
	}
	return e
}

// storedEvent is e as a store reads it back: its dispute's times in UTC.
func storedEvent(e reconcile.InboxEvent) reconcile.InboxEvent {
	if e.Dispute != nil {
		d := *e.Dispute
		d.EvidenceDueBy, d.Created = d.EvidenceDueBy.UTC(), d.Created.UTC()
		e.Dispute = &d
	}
	return e
}

// testInboxDisputes: InboxEvent.Dispute, every field of it, and its
// absence, come back from every write and every read of the inbox.
func testInboxDisputes(t *testing.T, s *testStore) {
	zone := time.FixedZone("UTC+9", 9*3600)
	full := &provider.Dispute{
		ID:               "du_full",
		PaymentID:        "pi_1",
		ChargeID:         "ch_1",
		PurchaseID:       "pur_1",
		Amount:           1250,
		Currency:         "eur",
		Reason:           "product_not_received — \"never\" ✓",
		Status:           provider.DisputeNeedsResponse,
		EvidenceDueBy:    at(7*24*time.Hour + 123457*time.Microsecond).In(zone),
		ChargeRefundable: true,
		Withdrawn:        1250,
		Reinstated:       250,
		Created:          at(time.Second + time.Microsecond).In(zone),
	}
	minimal := &provider.Dispute{ID: "du_min", PaymentID: "pi_1", Amount: 1, Currency: "eur", Status: provider.DisputeWarningNeedsResponse}

	// Alone, unmatched.
	unmatched := []reconcile.InboxEvent{
		disputeEvent("evt_full", full, reconcile.EventUnmatched, at(time.Minute)),
		disputeEvent("evt_min", minimal, reconcile.EventUnmatched, at(2*time.Minute)),
		disputeEvent("evt_none", nil, reconcile.EventUnmatched, at(3*time.Minute)),
	}
	for _, e := range unmatched {
		if !insertEvent(t, s, e) {
			t.Fatalf("InsertInboxEvent(%s) reported not inserted", e.EventID)
		}
	}
	// In a batch, and received at the store's clock, pending.
	batch := []reconcile.InboxEvent{
		disputeEvent("evt_batch_full", full, reconcile.EventPending, at(4*time.Minute)),
		disputeEvent("evt_batch_none", nil, reconcile.EventPending, at(5*time.Minute)),
	}
	received := disputeEvent("evt_received", full, reconcile.EventPending, time.Time{})
	s.clock.Set(at(6 * time.Minute))
	inTx(t, s, func(tx reconcile.Tx) error {
		if _, err := tx.InsertInboxEvents(t.Context(), batch); err != nil {
			return err
		}
		_, _, err := tx.ReceiveInboxEvents(t.Context(), []reconcile.InboxEvent{received})
		return err
	})
	received.ReceivedAt = at(6 * time.Minute)
	pending := append(batch, received)

	var all []reconcile.InboxEvent
	for _, e := range append(append([]reconcile.InboxEvent{}, unmatched...), pending...) {
		all = append(all, storedEvent(e))
	}
	for _, want := range all {
		got := getEvent(t, s, want.Provider, want.EventID)
		equalEvents(t, "GetInboxEvent("+want.EventID+")", []reconcile.InboxEvent{got}, []reconcile.InboxEvent{want})
		if want.Dispute == nil && got.Dispute != nil {
			t.Fatalf("%s: a dispute came back where none was stored: %+v", want.EventID, got.Dispute)
		}
	}
	if got := getEvent(t, s, "stripe", "evt_full").Dispute; got.EvidenceDueBy.Location() != time.UTC || got.Created.Location() != time.UTC {
		t.Fatalf("the dispute's times in %v and %v, want UTC", got.EvidenceDueBy.Location(), got.Created.Location())
	}

	read := func(what string, fn func(tx reconcile.Tx) ([]reconcile.InboxEvent, error), want []reconcile.InboxEvent) {
		t.Helper()
		var got []reconcile.InboxEvent
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			got, err = fn(tx)
			return err
		})
		equalEvents(t, what, got, want)
	}
	read("ListInboxEvents", func(tx reconcile.Tx) ([]reconcile.InboxEvent, error) {
		return tx.ListInboxEvents(t.Context(), "pur_1")
	}, all)
	read("ListUnmatchedEvents", func(tx reconcile.Tx) ([]reconcile.InboxEvent, error) {
		return tx.ListUnmatchedEvents(t.Context(), 10)
	}, all[:3])
	read("ClaimPendingEvents", func(tx reconcile.Tx) ([]reconcile.InboxEvent, error) {
		return tx.ClaimPendingEvents(t.Context(), at(time.Hour), 10)
	}, all[3:])
	read("ClaimInboxEvent", func(tx reconcile.Tx) ([]reconcile.InboxEvent, error) {
		e, err := tx.ClaimInboxEvent(t.Context(), "stripe", "evt_batch_full")
		return []reconcile.InboxEvent{e}, err
	}, all[3:4])

	// Failed for good, with its dispute.
	failure := reconcile.InboxFailure{Provider: "stripe", EventID: "evt_received", Attempts: 8,
		Error: "boom", At: at(time.Hour), Outcome: reconcile.EventFailed}
	recordFailure(t, s, failure)
	failed := all[5]
	failed.Attempts, failed.LastError, failed.ProcessedAt, failed.Outcome = failure.Attempts, failure.Error, failure.At, failure.Outcome
	read("ListFailedEvents", func(tx reconcile.Tx) ([]reconcile.InboxEvent, error) {
		return tx.ListFailedEvents(t.Context(), 10)
	}, []reconcile.InboxEvent{failed})
}
