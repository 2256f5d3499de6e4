package fakeprovider_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
)

// listAll reads every page of p's event listing of q, and returns the
// events newest first and the number of pages.
func listAll(t *testing.T, p provider.Provider, q provider.EventQuery) ([]provider.Event, int) {
	t.Helper()
	var out []provider.Event
	for pages := 1; ; pages++ {
		page, err := p.ListEvents(t.Context(), q)
		if err != nil {
			t.Fatalf("ListEvents(%+v): %v", q, err)
		}
		out = append(out, page.Events...)
		if !page.HasMore {
			return out, pages
		}
		q.After = page.Next
	}
}

func eventIDs(evs []provider.Event) []string {
	var ids []string
	for _, e := range evs {
		ids = append(ids, e.ID)
	}
	return ids
}

// TestEventLogKeepsWhatWebhooksLose checks that a dropped webhook, a move
// no webhook announces and a change made before any Server watched are
// all in the event log, and that a delivered webhook is a copy of its
// logged event: same id, same payload, and the same event to the
// adapter, listed or delivered (digest included).
func TestEventLogKeepsWhatWebhooksLose(t *testing.T) {
	s, rc := serveWebhooks(t, fakeprovider.Config{Instance: "Log1"}, fakeprovider.ServerConfig{}, nil)
	declined := request("pur_log_declined")
	declined.PaymentMethod = fakeprovider.PaymentMethodDeclined
	ok := request("pur_log_ok")
	s.srv.ScriptWebhooks(declined.PurchaseID, fakeprovider.WebhookDrop)
	d := adapterCreate(t, s.adapter, declined)
	o := adapterCreate(t, s.adapter, ok)
	s.clk.Advance(3 * time.Hour)
	if _, err := s.srv.SetStatus(d.PaymentID, fakeprovider.StatusSucceeded, false); err != nil { // late approval, never announced
		t.Fatal(err)
	}
	s.clk.Advance(time.Minute)
	if _, err := s.srv.SetStatus(o.PaymentID, fakeprovider.StatusCanceled, true); err != nil { // late cancel, announced
		t.Fatal(err)
	}
	s.srv.Tick()

	log := s.fake.EventLog()
	var types []string
	for _, e := range log {
		types = append(types, e.PaymentID+" "+e.Type)
	}
	want := []string{
		d.PaymentID + " payment_intent.payment_failed",
		o.PaymentID + " payment_intent.succeeded",
		d.PaymentID + " payment_intent.succeeded",
		o.PaymentID + " payment_intent.canceled",
	}
	if !slices.Equal(types, want) {
		t.Fatalf("event log %q, want %q", types, want)
	}
	got := rc.received()
	if len(got) != 2 {
		t.Fatalf("received %d webhooks, want 2 (the decline dropped, the approval silent)", len(got))
	}
	byID := map[string]fakeprovider.WebhookEvent{}
	for _, e := range log {
		byID[e.ID] = e
	}
	listed, _ := listAll(t, s.adapter, provider.EventQuery{Since: s.clk.Now().Add(-24 * time.Hour)})
	inProcess, _ := listAll(t, s.fake, provider.EventQuery{Since: s.clk.Now().Add(-24 * time.Hour)})
	if len(listed) != 4 || len(inProcess) != 4 {
		t.Fatalf("listed %d over HTTP, %d in-process, want 4", len(listed), len(inProcess))
	}
	for _, r := range got {
		l, ok := byID[r.event.ID]
		if !ok || string(l.Payload) != string(r.body) {
			t.Errorf("webhook %s is not a copy of a logged event", r.event.ID)
		}
		for _, ev := range append(slices.Clone(listed), inProcess...) {
			if ev.ID != r.event.ID {
				continue
			}
			if ev.Payload == "" {
				t.Errorf("listed %s without payload", ev.ID)
			}
			ev.Payload = ""
			if ev != r.event {
				t.Errorf("listed\n%+v\nwant the webhook's\n%+v", ev, r.event)
			}
		}
	}
	// Newest first, in-process as over HTTP.
	if ids := eventIDs(listed); !slices.Equal(ids, eventIDs(inProcess)) || ids[0] != log[3].ID || ids[3] != log[0].ID {
		t.Errorf("listed %q, in-process %q, want the log newest first", ids, eventIDs(inProcess))
	}
	for i := range listed {
		a, b := listed[i], inProcess[i]
		a.Payload, b.Payload = "", ""
		if a.Refund == nil && a != b {
			t.Errorf("event %d: over HTTP %+v, in-process %+v", i, a, b)
		}
	}
}

// TestEventListingFiltersAndPages checks the listing's since and types
// filters and its pages, in-process and over HTTP alike, refunds
// included, and that a settlement due is logged before a listing.
func TestEventListingFiltersAndPages(t *testing.T) {
	s := serve(t, fakeprovider.Config{Instance: "Log2", SettleAfter: time.Minute}, fakeprovider.ServerConfig{}, nil)
	start := s.clk.Now()
	var paid []provider.Result
	for _, id := range []string{"pur_a", "pur_b", "pur_c"} {
		paid = append(paid, mustCreate(t, s.fake, request(id)))
		s.clk.Advance(time.Hour)
	}
	slow := request("pur_slow")
	s.fake.Script(slow.PurchaseID, fakeprovider.Processing)
	mustCreate(t, s.fake, slow) // processing, settles a minute later
	if _, err := s.fake.CreateRefund(t.Context(), refundRequest("ref_a", "pur_a", paid[0].PaymentID, 100)); err != nil {
		t.Fatal(err)
	}
	s.clk.Advance(2 * time.Minute) // the settlement is due, not yet logged

	since := start.Add(time.Hour) // pur_a's charge before it
	for name, p := range map[string]provider.Provider{"in-process": s.fake, "http": s.adapter} {
		t.Run(name, func(t *testing.T) {
			all, _ := listAll(t, p, provider.EventQuery{Since: start})
			var types []string
			for _, e := range slices.Backward(all) {
				types = append(types, e.Type)
			}
			want := []string{"payment_intent.succeeded", "payment_intent.succeeded", "payment_intent.succeeded",
				"payment_intent.processing", "refund.created", "charge.refunded", "payment_intent.succeeded"}
			if !slices.Equal(types, want) {
				t.Fatalf("types oldest first %q, want %q", types, want)
			}
			for _, e := range all {
				if e.Refund != nil && (e.Refund.RefundID != "ref_a" || e.Refund.Amount != 100 || e.PaymentID != paid[0].PaymentID) {
					t.Errorf("refund event %+v, want ref_a's 100 of %s", e, paid[0].PaymentID)
				}
			}
			after, _ := listAll(t, p, provider.EventQuery{Since: since})
			if len(after) != len(all)-1 || after[len(after)-1].PaymentID != paid[1].PaymentID {
				t.Errorf("since %v: %d events, want all but pur_a's charge", since, len(after))
			}
			refunds, _ := listAll(t, p, provider.EventQuery{Since: start, Types: []string{"refund.created", "charge.refunded"}})
			if len(refunds) != 2 || refunds[0].Type != "charge.refunded" || refunds[1].Type != "refund.created" {
				t.Errorf("refund types: %+v", refunds)
			}
			paged, pages := listAll(t, p, provider.EventQuery{Since: start, Limit: 2})
			if pages != 4 || !slices.Equal(eventIDs(paged), eventIDs(all)) {
				t.Errorf("by 2: %d pages %q, want 4 pages of %q", pages, eventIDs(paged), eventIDs(all))
			}
			exact, pages := listAll(t, p, provider.EventQuery{Since: start, Limit: 7})
			if pages != 1 || len(exact) != 7 {
				t.Errorf("by 7: %d pages, %d events, want 1 page of 7: no empty page after a full last one", pages, len(exact))
			}
		})
	}
	if _, err := s.fake.ListEvents(t.Context(), provider.EventQuery{}); !errors.Is(err, provider.ErrRejected) {
		t.Errorf("ListEvents without since: %v, want ErrRejected", err)
	}
	if _, err := s.fake.ListEvents(t.Context(), provider.EventQuery{Since: start, After: "evt_nope"}); !errors.Is(err, provider.ErrRejected) {
		t.Errorf("ListEvents after an unknown event: %v, want ErrRejected", err)
	}
	if n := s.fake.Calls(provider.OpEventList); n == 0 {
		t.Error("event listings counted no calls")
	}
}
