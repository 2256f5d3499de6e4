package http_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
)

// TestOpsDisputes: the list page shows the open disputes, soonest
// evidence due first, with the purchase, amount, reason and time left,
// and counts them in the money at risk; the purchase's page gives each
// dispute's history; and the JSON views carry them.
func TestOpsDisputes(t *testing.T) {
	f := setupOps(t)
	ctx := t.Context()
	start := f.clock.Now()
	late, soon := f.run("ada"), f.run("bo")
	if _, err := f.fake.OpenDispute(late.ProviderPaymentID, fakeprovider.DisputeOptions{Reason: "product_not_received"}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(6 * 24 * time.Hour) // the first is now due within a day
	if _, err := f.fake.OpenDispute(soon.ProviderPaymentID, fakeprovider.DisputeOptions{Inquiry: true, Amount: 100}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Minute)
	if _, err := f.svc.Audit(ctx, provider.Window{From: start, Until: f.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	cookie, _ := f.login("alice")
	page := f.do("GET", "/ops", nil, nil, cookie)
	for _, want := range []string{`id="disputes"`, late.ID, soon.ID, "product_not_received", "needs_response", "warning_needs_response",
		">inquiry<", "23h 59m left", "Money at risk:", "13.50 EUR"} {
		if !strings.Contains(page.body, want) {
			t.Fatalf("list page lacks %q:\n%s", want, page.body)
		}
	}
	if rows := page.body[strings.Index(page.body, `id="disputes"`):]; strings.Index(rows, late.ID) > strings.Index(rows, soon.ID) {
		t.Fatalf("the chargeback due first is not listed first:\n%s", rows)
	}
	casePage := f.do("GET", "/ops/purchases/"+late.ID, nil, nil, cookie)
	if !strings.Contains(casePage.body, `id="case-disputes"`) || !strings.Contains(casePage.body, "product_not_received") {
		t.Fatalf("case page lacks its dispute:\n%s", casePage.body)
	}

	r := f.do("GET", "/ops/escalations", nil, opsBearer)
	var list struct {
		Disputes []struct {
			PurchaseID  string   `json:"purchase_id"`
			Status      string   `json:"status"`
			SecondsLeft *float64 `json:"evidence_seconds_left"`
		} `json:"disputes"`
		MoneyAtRisk []string `json:"money_at_risk"`
	}
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || r.status != http.StatusOK {
		t.Fatalf("ops JSON: %d %v\n%s", r.status, err, r.body)
	}
	if len(list.Disputes) != 2 || list.Disputes[0].PurchaseID != late.ID || list.Disputes[0].SecondsLeft == nil ||
		*list.Disputes[0].SecondsLeft != (24*time.Hour-time.Minute).Seconds() || strings.Join(list.MoneyAtRisk, ",") != "13.50 EUR" {
		t.Fatalf("ops JSON disputes %+v, money at risk %v", list.Disputes, list.MoneyAtRisk)
	}
	r = f.do("GET", "/ops/purchases/"+late.ID, nil, opsBearer)
	var c struct {
		Disputes []struct {
			ProviderDisputeID string `json:"provider_dispute_id"`
			State             string `json:"state"`
		} `json:"disputes"`
	}
	if err := json.Unmarshal([]byte(r.body), &c); err != nil || len(c.Disputes) != 1 || c.Disputes[0].State != "open" {
		t.Fatalf("case JSON disputes: %v %+v\n%s", err, c.Disputes, r.body)
	}
}
