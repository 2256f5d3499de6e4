package providertest

import (
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// testEventsListed: a succeeded charge and a refund of it are in the
// provider's event log, newest first, translated as their webhooks are
// (the charge's payment_intent.succeeded names its purchase; the refund's
// refund.created carries the refund), and pages of one event, chained by
// their cursors, list the same events as one page.
func testEventsListed(t *testing.T, h Harness, tg Target) {
	since := coveringWindow(tg).From
	req, charge := paid(t, h, tg)
	rf := newRefundRequest(req, charge, 100)
	refund := createRefund(t, tg, rf)

	var all []provider.Event
	found := func() (succeeded, created bool) {
		t.Helper()
		all = listEvents(t, tg, provider.EventQuery{Since: since})
		for _, ev := range all {
			switch {
			case ev.Type == "payment_intent.succeeded" && ev.PaymentID == charge.PaymentID:
				if ev.Outcome != provider.Succeeded || ev.PurchaseID != req.PurchaseID || ev.Refund != nil || ev.Digest == "" {
					t.Errorf("charge's event %+v: want succeeded, naming purchase %s, with a digest", ev, req.PurchaseID)
				}
				succeeded = true
			case ev.Type == "refund.created" && ev.Refund != nil && ev.Refund.ID == refund.ID:
				if ev.Refund.RefundID != rf.RefundID || ev.PaymentID != charge.PaymentID || ev.Amount != rf.Amount {
					t.Errorf("refund's event %+v (refund %+v): want refund %s of %d on %s", ev, *ev.Refund, rf.RefundID, rf.Amount, charge.PaymentID)
				}
				created = true
			}
		}
		return succeeded, created
	}
	deadline := time.Now().Add(h.SearchWithin)
	for {
		s, c := found()
		if s && c {
			break
		}
		if tg.Advance != nil || time.Now().After(deadline) {
			t.Fatalf("events since %v: charge's succeeded %v, refund's created %v; want both (%d listed)", since, s, c, len(all))
		}
		time.Sleep(h.PollEvery)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Created.After(all[i-1].Created) {
			t.Fatalf("event %d created %v after event %d (%v): want newest first", i, all[i].Created, i-1, all[i-1].Created)
		}
	}
	q := provider.EventQuery{Since: since, Limit: 1}
	for i := 0; ; i++ {
		page, err := tg.Provider.ListEvents(t.Context(), q)
		if err != nil {
			t.Fatalf("ListEvents(%+v): %v", q, err)
		}
		if len(page.Events)+len(page.Refused) > 1 {
			t.Fatalf("page of limit 1 holds %d events", len(page.Events)+len(page.Refused))
		}
		if len(page.Events) == 1 && i < len(all) && page.Events[0].ID != all[i].ID {
			t.Fatalf("page %d: event %s, want %s as listed in one page", i, page.Events[0].ID, all[i].ID)
		}
		if !page.HasMore || i >= len(all) {
			break
		}
		q.After = page.Next
	}
}

// listEvents reads every page of the event log q selects.
func listEvents(t *testing.T, tg Target, q provider.EventQuery) []provider.Event {
	t.Helper()
	var out []provider.Event
	for {
		page, err := tg.Provider.ListEvents(t.Context(), q)
		if err != nil {
			t.Fatalf("ListEvents(%+v): %v", q, err)
		}
		out = append(out, page.Events...)
		if !page.HasMore {
			return out
		}
		q.After = page.Next
	}
}
