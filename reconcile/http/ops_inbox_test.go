package http_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// TestOpsWebhookInbox: the list page shows how many webhook events wait
// to be applied and how long the oldest has, and the events the applier
// gave up on, with their errors; Retry puts one back in the inbox,
// pending, from a session's form and for a bearer client.
func TestOpsWebhookInbox(t *testing.T) {
	f := setupOps(t)
	ctx := t.Context()
	now := f.clock.Now()
	if err := f.store.InTx(ctx, func(tx reconcile.Tx) error {
		for i, id := range []string{"evt_waiting", "evt_broken"} {
			_, err := tx.InsertInboxEvent(ctx, reconcile.InboxEvent{
				Provider: "stripe", EventID: id, Type: "payment_intent.succeeded", PayloadHash: "h" + id,
				ObjectID: "pi_" + id, Result: provider.Succeeded, Outcome: reconcile.EventPending,
				ReceivedAt: now.Add(time.Duration(i-2) * time.Minute),
			})
			if err != nil {
				return err
			}
		}
		if err := tx.RecordInboxFailure(ctx, reconcile.InboxFailure{Provider: "stripe", EventID: "evt_waiting", Attempts: 1,
			Error: "busy", At: now, RetryAt: now.Add(time.Second), Outcome: reconcile.EventPending}); err != nil {
			return err
		}
		return tx.RecordInboxFailure(ctx, reconcile.InboxFailure{Provider: "stripe", EventID: "evt_broken", Attempts: 8,
			Error: "the database refused <it>", At: now, Outcome: reconcile.EventFailed})
	}); err != nil {
		t.Fatal(err)
	}

	cookie, _ := f.login("alice")
	page := f.do("GET", "/ops", nil, nil, cookie)
	for _, want := range []string{"<strong>1</strong> event(s) received and not yet applied; the oldest has waited 2m",
		"1 of them failed to apply and will be tried again.", `id="event-evt_broken"`,
		"the database refused &lt;it&gt;", `action="/ops/events/evt_broken/retry"`} {
		if !strings.Contains(page.body, want) {
			t.Fatalf("list page lacks %q:\n%s", want, page.body)
		}
	}

	r := f.do("POST", "/ops/events/evt_broken/retry", url.Values{"csrf": {opsFormToken(t, page.body)}, "provider": {"stripe"}}, nil, cookie)
	if r.status != http.StatusSeeOther {
		t.Fatalf("retry: %d %s", r.status, r.body)
	}
	page = f.do("GET", r.header.Get("Location"), nil, nil, cookie)
	if !strings.Contains(page.body, "Event evt_broken is pending again") || !strings.Contains(page.body, `id="failed-events-empty"`) ||
		!strings.Contains(page.body, "<strong>2</strong> event(s)") {
		t.Fatalf("after the retry:\n%s", page.body)
	}
	var row reconcile.InboxEvent
	if err := f.store.InTx(ctx, func(tx reconcile.Tx) error {
		var err error
		row, err = tx.GetInboxEvent(ctx, "stripe", "evt_broken")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if row.Outcome != reconcile.EventPending || row.Attempts != 0 || !strings.Contains(row.LastError, "retried by alice") {
		t.Fatalf("retried event: %+v", row)
	}

	// A bearer client; an event that is not failed is refused.
	r = f.do("POST", "/ops/events/evt_waiting/retry", url.Values{"operator": {"bob"}}, opsBearer)
	if r.status != http.StatusNotFound {
		t.Fatalf("retry of a pending event: %d %s", r.status, r.body)
	}
}
