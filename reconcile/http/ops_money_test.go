package http_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/payrecon/payrecon/reconcile"
)

// TestOpsMoneyAtRiskCountsAPaymentOnce: a payment the audit finds both
// the wrong amount and the wrong currency on is at risk once, on the
// page and in its JSON, as in the CLI and the demo (reconcile.MoneyAtRisk).
func TestOpsMoneyAtRiskCountsAPaymentOnce(t *testing.T) {
	f := setupOps(t)
	p := f.create("cust-money")
	now := f.clock.Now()
	err := f.store.InTx(context.Background(), func(tx reconcile.Tx) error {
		for _, kind := range []reconcile.FindingKind{reconcile.FindingAmountMismatch, reconcile.FindingCurrencyMismatch} {
			if _, err := tx.InsertFinding(context.Background(), reconcile.Finding{
				Provider: "stripe", PaymentID: "pi_twice", Kind: kind, PurchaseID: p.ID,
				Amount: 10050, Currency: "eur", Status: "succeeded", Evidence: "both wrong", FoundAt: now,
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := f.do("GET", "/ops/escalations", nil, opsBearer)
	var list struct {
		FindingsCount int      `json:"findings_count"`
		MoneyAtRisk   []string `json:"money_at_risk"`
	}
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /ops/escalations: %d %v\n%s", r.status, err, r.body)
	}
	if list.FindingsCount != 2 || len(list.MoneyAtRisk) != 1 || list.MoneyAtRisk[0] != "100.50 EUR" {
		t.Errorf("two findings on one payment: %d findings, money at risk %q; want 2 and 100.50 EUR once", list.FindingsCount, list.MoneyAtRisk)
	}
	page := f.do("GET", "/ops", nil, map[string]string{"Authorization": "Bearer " + opsToken, "Accept": "text/html"})
	if page.status != http.StatusOK || !strings.Contains(page.body, "100.50 EUR") || strings.Contains(page.body, "201.00 EUR") {
		t.Errorf("the page: %d, want money at risk 100.50 EUR, not 201.00 EUR:\n%.2000s", page.status, page.body)
	}
}
