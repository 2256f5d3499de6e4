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

	r := f.do("GET", "/ops/outbox", nil, opsBearer)
	if r.status != http.StatusOK || !strings.Contains(r.body, `id="dead-`+id+`"`) || !strings.Contains(r.body, p.ID) || !strings.Contains(r.body, "past the retry window") {
		t.Fatalf("outbox page: %d, want the dead delivery of %s listed\n%s", r.status, p.ID, r.body)
	}

	// A session replays with the form.
	cookie, _ := f.login("alice")
	page := f.do("GET", "/ops/outbox", nil, nil, cookie)
	r = f.do("POST", "/ops/outbox/replay", url.Values{"csrf": {opsFormToken(t, page.body)}, "subscription": {"shop"}}, nil, cookie)
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
