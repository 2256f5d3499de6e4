package main

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/statemachine"
)

// TestOpsDisputes: a chargeback whose webhooks never came, found by the
// audit, is on `ops list` with its purchase, amount, reason and time
// left, in the money at risk and in the JSON; `ops show` gives its
// history; and `refund create` refuses to refund the disputed payment.
func TestOpsDisputes(t *testing.T) {
	now := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	f := newOpsFixtureWith(t, fakeprovider.Config{Now: func() time.Time { return now }})
	f.now = now
	p := f.purchase(t, true)
	if p.State != statemachine.Succeeded {
		t.Fatalf("set-up: %s is %s", p.ID, p.State)
	}
	postForm(t, f.api+"/_fake/disputes", url.Values{"payment": {p.ProviderPaymentID}, "reason": {"product_not_received"}, "webhooks": {"false"}})
	disputes := f.fake.Disputes()
	if len(disputes) != 1 {
		t.Fatalf("set-up: the fake holds %d disputes", len(disputes))
	}
	du := disputes[0].ID
	db := []string{"--database-url", f.db}
	code, out, stderr := run(t, stripeEnv, append(append([]string{"audit", "--since", "2h"}, db...), f.stripeArgs()...)...)
	if code != 0 || !strings.Contains(out, "disputes listed: 1") {
		t.Fatalf("audit: exit %d: %s%s", code, out, stderr)
	}

	code, out, stderr = run(t, nil, append([]string{"ops", "list"}, db...)...)
	if code != 0 {
		t.Fatalf("ops list: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"open disputes (1", du, p.ID, "3.00 USD", "product_not_received", "needs_response", "6d 22h left",
		"money at risk (open findings and open disputes): 3.00 USD"} {
		if !strings.Contains(out, want) {
			t.Errorf("ops list lacks %q:\n%s", want, out)
		}
	}
	code, out, stderr = run(t, nil, append([]string{"ops", "list", "--json"}, db...)...)
	if code != 0 {
		t.Fatalf("ops list --json: exit %d: %s", code, stderr)
	}
	var list struct {
		Disputes []struct {
			ProviderDisputeID string   `json:"provider_dispute_id"`
			PurchaseID        string   `json:"purchase_id"`
			Amount            int64    `json:"amount"`
			State             string   `json:"state"`
			SecondsLeft       *float64 `json:"evidence_seconds_left"`
		} `json:"disputes"`
		MoneyAtRisk []struct {
			Amount   int64  `json:"amount"`
			Currency string `json:"currency"`
		} `json:"money_at_risk"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("ops list --json: %v\n%s", err, out)
	}
	if len(list.Disputes) != 1 || list.Disputes[0].ProviderDisputeID != du || list.Disputes[0].PurchaseID != p.ID ||
		list.Disputes[0].Amount != 300 || list.Disputes[0].State != "open" || list.Disputes[0].SecondsLeft == nil || *list.Disputes[0].SecondsLeft <= 0 {
		t.Fatalf("ops list --json disputes: %+v", list.Disputes)
	}
	if len(list.MoneyAtRisk) != 1 || list.MoneyAtRisk[0].Amount != 300 || list.MoneyAtRisk[0].Currency != "usd" {
		t.Fatalf("ops list --json money at risk: %+v", list.MoneyAtRisk)
	}

	code, out, stderr = run(t, nil, append([]string{"ops", "show", p.ID}, db...)...)
	if code != 0 || !strings.Contains(out, "disputes:") || !strings.Contains(out, du) || !strings.Contains(out, "open (needs_response)") {
		t.Fatalf("ops show: exit %d: %s%s", code, out, stderr)
	}

	code, _, stderr = run(t, nil, append([]string{"refund", "create", p.ID, "--amount", "100", "--reason", "customer asked"}, db...)...)
	if code != 1 || !strings.Contains(stderr, "disputed") || !strings.Contains(stderr, du) {
		t.Fatalf("refund of a disputed payment: exit %d: %s", code, stderr)
	}
}
