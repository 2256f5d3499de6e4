package providertest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// The cases of disputes, which only a provider that can be made to open
// one runs (Target.OpenDispute).

// disputed charges a new purchase with the card that succeeds and has the
// provider open a chargeback of it, after skipping the test when it
// cannot.
func disputed(t *testing.T, h Harness, tg Target) (provider.CreateRequest, provider.Result) {
	t.Helper()
	if tg.OpenDispute == nil {
		t.Skip("providertest: Target.OpenDispute is nil: the provider cannot be made to open a dispute")
	}
	req, charge := paid(t, h, tg)
	if err := tg.OpenDispute(t.Context(), charge.PaymentID); err != nil {
		t.Fatalf("open a dispute of %s: %v", charge.PaymentID, err)
	}
	return req, charge
}

// checkDispute checks that d is the chargeback of all of req's payment
// (charge) that OpenDispute opened, as it is on opening.
func checkDispute(t *testing.T, what string, d provider.Dispute, req provider.CreateRequest, charge provider.Result) {
	t.Helper()
	if d.ID == "" || d.PaymentID != charge.PaymentID {
		t.Errorf("%s: id %q of payment %q, want a dispute of %s", what, d.ID, d.PaymentID, charge.PaymentID)
	}
	if d.Amount != req.Amount || d.Currency != req.Currency {
		t.Errorf("%s: amount %d %q, want %d %q", what, d.Amount, d.Currency, req.Amount, req.Currency)
	}
	if d.Status != provider.DisputeNeedsResponse || d.ChargeRefundable || d.Withdrawn != req.Amount || d.Reinstated != 0 {
		t.Errorf("%s: status %q, refundable %v, withdrawn %d, reinstated %d; want a chargeback: %q, not refundable, %d withdrawn",
			what, d.Status, d.ChargeRefundable, d.Withdrawn, d.Reinstated, provider.DisputeNeedsResponse, req.Amount)
	}
	if d.Created.IsZero() || d.EvidenceDueBy.IsZero() || !d.EvidenceDueBy.After(d.Created) {
		t.Errorf("%s: created %v, evidence due %v: want both, due after the opening", what, d.Created, d.EvidenceDueBy)
	}
}

// testListDisputes: a dispute opened is in a listing of a window covering
// its creation, with its payment's purchase id, and only in the windows
// that hold its creation second.
func testListDisputes(t *testing.T, h Harness, tg Target) {
	req, charge := disputed(t, h, tg)
	d := disputeFind(t, tg, coveringWindow(tg), charge.PaymentID, "a window covering the dispute")
	checkDispute(t, "listed dispute", d, req, charge)
	if d.PurchaseID != req.PurchaseID {
		t.Errorf("listed dispute %s: PurchaseID %q, want the payment's %q", d.ID, d.PurchaseID, req.PurchaseID)
	}
	at := d.Created.Truncate(time.Second)
	for _, w := range []struct {
		what     string
		w        provider.Window
		contains bool
	}{
		{"the hour before its creation second", provider.Window{From: at.Add(-time.Hour), Until: at}, false},
		{"its creation second", provider.Window{From: at, Until: at.Add(time.Second)}, true},
		{"the hour after its creation second", provider.Window{From: at.Add(time.Second), Until: at.Add(time.Hour)}, false},
	} {
		found := slices.ContainsFunc(listDisputes(t, tg, w.w), func(x provider.Dispute) bool { return x.ID == d.ID })
		if found != w.contains {
			t.Errorf("disputes created in %s: holds %s: %v, want %v", w.what, d.ID, found, w.contains)
		}
	}
}

// testDisputeEvents: the opening of a dispute is in the event log, a
// charge.dispute.created carrying the dispute, translated as its webhook
// is.
func testDisputeEvents(t *testing.T, h Harness, tg Target) {
	since := coveringWindow(tg).From
	req, charge := disputed(t, h, tg)
	q := provider.EventQuery{Since: since, Types: []string{provider.EventDisputeCreated}}
	deadline := time.Now().Add(h.SearchWithin)
	for {
		events := listEvents(t, tg, q)
		i := slices.IndexFunc(events, func(ev provider.Event) bool { return ev.PaymentID == charge.PaymentID })
		if i >= 0 {
			ev := events[i]
			if ev.Type != provider.EventDisputeCreated || ev.Dispute == nil {
				t.Fatalf("event %+v: want %s carrying the dispute", ev, provider.EventDisputeCreated)
			}
			if ev.Outcome != provider.Pending || ev.Amount != req.Amount || ev.Currency != req.Currency || ev.Digest == "" || ev.Refund != nil {
				t.Errorf("event %+v: want outcome %q, the dispute's amount %d %q, a digest", ev, provider.Pending, req.Amount, req.Currency)
			}
			checkDispute(t, "dispute of "+ev.ID, *ev.Dispute, req, charge)
			return
		}
		if tg.Advance != nil || time.Now().After(deadline) {
			t.Fatalf("events since %v of type %s: none about %s (%d listed)", since, provider.EventDisputeCreated, charge.PaymentID, len(events))
		}
		time.Sleep(h.PollEvery)
	}
}

// testRefundOfDisputedPaymentIsRefused: a refund of a payment charged
// back is refused for the payment (it failed), and makes nothing.
func testRefundOfDisputedPaymentIsRefused(t *testing.T, h Harness, tg Target) {
	req, charge := disputed(t, h, tg)
	rreq := newRefundRequest(req, charge, 100)
	res, err := tg.Provider.CreateRefund(t.Context(), rreq)
	if !errors.Is(err, provider.ErrRefundRefused) {
		t.Fatalf("refund of a payment charged back: (%+v, %v), want an error wrapping provider.ErrRefundRefused", res, err)
	}
	if got := provider.RefundOutcomeOf(res, err); got != provider.Failed {
		t.Errorf("RefundOutcomeOf = %q, want %q", got, provider.Failed)
	}
	checkRefundLedger(t, tg, rreq.RefundID, 0)
	if refunds := listRefunds(t, tg, charge.PaymentID); len(refunds) != 0 {
		t.Errorf("refunds of %s after a refused refund: %+v, want none", charge.PaymentID, refunds)
	}
}

// listDisputes lists the disputes created in w and checks the listing:
// oldest first, every dispute created within w at the granularity of
// seconds, ids unique.
func listDisputes(t *testing.T, tg Target, w provider.Window) []provider.Dispute {
	t.Helper()
	disputes, err := tg.Provider.ListDisputes(t.Context(), w, nil)
	if err != nil {
		t.Fatalf("list disputes created in [%v, %v): %v", w.From, w.Until, err)
	}
	from, until := w.From.Truncate(time.Second), w.Until.Truncate(time.Second)
	if !until.Equal(w.Until) {
		until = until.Add(time.Second)
	}
	seen := make(map[string]bool, len(disputes))
	for i, d := range disputes {
		if d.Created.Before(from) || !d.Created.Before(until) {
			t.Errorf("disputes created in [%v, %v): %s created %v, outside the window", w.From, w.Until, d.ID, d.Created)
		}
		if i > 0 && d.Created.Before(disputes[i-1].Created) {
			t.Errorf("disputes: %d (%s) created %v, before %d (%v): want oldest first", i, d.ID, d.Created, i-1, disputes[i-1].Created)
		}
		if seen[d.ID] {
			t.Errorf("disputes: %s listed twice", d.ID)
		}
		seen[d.ID] = true
	}
	return disputes
}

// disputeFind lists w and returns the dispute of paymentID, failing the
// test if the listing holds none.
func disputeFind(t *testing.T, tg Target, w provider.Window, paymentID, what string) provider.Dispute {
	t.Helper()
	disputes := listDisputes(t, tg, w)
	i := slices.IndexFunc(disputes, func(d provider.Dispute) bool { return d.PaymentID == paymentID })
	if i < 0 {
		t.Fatalf("disputes of %s [%v, %v): %d, none of %s", what, w.From, w.Until, len(disputes), paymentID)
	}
	return disputes[i]
}
