package http_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// TestOpsOutboxDeadLettersAndReplay: a delivery dead after its retry
// window shows on /ops/outbox; the replay action makes it pending again,
// from a signed-in session's form and for a bearer client.
func TestOpsOutboxDeadLettersAndReplay(t *testing.T) {
	f := setupOps(t)
	ctx := t.Context()
	if _, err := f.svc.AddSubscription(ctx, reconcile.Subscription{Name: "shop", URL: "https://shop.example/events", Secret: "whsec_shop"}); err != nil {
		t.Fatal(err)
	}
	p := f.run("cus-outbox") // succeeds: one purchase.succeeded event
	kill := func() string {
		t.Helper()
		var id string
		if err := f.store.InTx(ctx, func(tx reconcile.Tx) error {
			ds, err := tx.ClaimDeliveries(ctx, "relay", 10, time.Minute)
			if err != nil || len(ds) != 1 {
				t.Fatalf("claimed %d deliveries (%v), want the purchase's one", len(ds), err)
			}
			id = ds[0].EventID
			return tx.FinishDelivery(ctx, ds[0], reconcile.DeliveryDead, time.Time{}, "attempt 9: HTTP 503 (failing for 72h0m0s, past the retry window)")
		}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	id := kill()

	cookie, _ := f.login("alice")
	page := f.do("GET", "/ops/outbox", nil, nil, cookie)
	if page.status != http.StatusOK || !strings.Contains(page.body, `id="dead-`+id+`"`) || !strings.Contains(page.body, p.ID) || !strings.Contains(page.body, "past the retry window") ||
		!strings.Contains(page.body, `id="replay-shop"`) || !strings.Contains(page.body, `<td class="state state-dead" id="sub-shop-state">dead</td>`) {
		t.Fatalf("outbox page: %d, want the dead delivery of %s listed, and shop dead with its replay button\n%s", page.status, p.ID, page.body)
	}

	// A session replays with the form.
	r := f.do("POST", "/ops/outbox/replay", url.Values{"csrf": {opsFormToken(t, page.body)}, "subscription": {"shop"}}, nil, cookie)
	if r.status != http.StatusSeeOther {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	page = f.do("GET", r.header.Get("Location"), nil, nil, cookie)
	if !strings.Contains(page.body, "1 dead deliveries to subscription shop are pending again") || !strings.Contains(page.body, `id="no-dead"`) {
		t.Fatalf("after the replay:\n%s", page.body)
	}

	// A bearer client, after it died again.
	kill()
	r = f.do("POST", "/ops/outbox/replay", url.Values{"operator": {"bob"}}, opsBearer)
	if r.status != http.StatusOK || r.json(t)["replayed"] != float64(1) {
		t.Fatalf("bearer replay: %d %s", r.status, r.body)
	}
	r = f.do("POST", "/ops/outbox/replay", url.Values{"operator": {"bob"}, "subscription": {"nobody"}}, opsBearer)
	if r.status != http.StatusNotFound {
		t.Fatalf("replay to an unknown subscription: %d %s", r.status, r.body)
	}
}

// TestOpsOutboxPerSubscription: /ops/outbox shows each subscription's
// state, counts, oldest pending age, last error (its URL masked) and next
// attempt, as HTML and as JSON.
func TestOpsOutboxPerSubscription(t *testing.T) {
	f := setupOps(t)
	ctx := t.Context()
	for _, s := range []reconcile.Subscription{
		{Name: "shop", URL: "https://shop.example/events?token=s3cret", Secret: "whsec_shop"},
		{Name: "audit", URL: "https://audit.example/events", Secret: "whsec_audit"},
	} {
		if _, err := f.svc.AddSubscription(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	f.run("cus-outbox-subs")
	if err := f.store.InTx(ctx, func(tx reconcile.Tx) error {
		ds, err := tx.ClaimDeliveries(ctx, "relay", 10, time.Minute)
		if err != nil {
			return err
		}
		for _, d := range ds {
			state, why := reconcile.DeliveryDone, ""
			if d.Subscription.Name == "shop" {
				state, why = reconcile.DeliveryPending, "attempt 1: Post \"https://shop.example/events?token=****\": dial tcp: connection refused"
			}
			if err := tx.FinishDelivery(ctx, d, state, f.clock.Now().Add(2*time.Minute), why); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	cookie, _ := f.login("alice")
	page := f.do("GET", "/ops/outbox", nil, nil, cookie)
	for _, want := range []string{
		`<td class="state state-failing" id="sub-shop-state">failing</td>`,
		`<td class="state state-healthy" id="sub-audit-state">healthy</td>`,
		"connection refused", "in 2m 0s", "https://shop.example/events?token=****",
	} {
		if !strings.Contains(page.body, want) {
			t.Fatalf("outbox page lacks %q:\n%s", want, page.body)
		}
	}
	if strings.Contains(page.body, "s3cret") {
		t.Fatalf("the outbox page shows a URL's token:\n%s", page.body)
	}

	r := f.do("GET", "/ops/outbox", nil, opsBearer)
	subs, _ := r.json(t)["subscriptions"].([]any)
	if r.status != http.StatusOK || len(subs) != 2 {
		t.Fatalf("outbox JSON: %d %s", r.status, r.body)
	}
	shop := subs[1].(map[string]any)
	if shop["name"] != "shop" || shop["health"] != "failing" || shop["pending"] != float64(1) || shop["next_attempt_at"] == nil ||
		!strings.Contains(shop["last_error"].(string), "connection refused") || shop["url"] != "https://shop.example/events?token=****" {
		t.Fatalf("outbox JSON subscription: %v", shop)
	}
}
