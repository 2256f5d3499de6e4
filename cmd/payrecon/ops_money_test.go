package main

import (
	"context"
	"strings"
	"testing"

	"github.com/payrecon/payrecon/internal/demo"
	"github.com/payrecon/payrecon/reconcile"
)

// TestOpsListCountsAPaymentOnce: a payment the audit finds both the wrong
// amount and the wrong currency on is at risk once in `ops list`, the
// same figure the ops page and the demo give (reconcile.MoneyAtRisk).
func TestOpsListCountsAPaymentOnce(t *testing.T) {
	f := newOpsFixture(t)
	p := f.purchase(t, false)
	var twice []reconcile.Finding
	func() {
		svc, _, done := f.service(t, false)
		defer done()
		err := svc.Store().InTx(context.Background(), func(tx reconcile.Tx) error {
			for _, kind := range []reconcile.FindingKind{reconcile.FindingAmountMismatch, reconcile.FindingCurrencyMismatch} {
				fd := reconcile.Finding{Provider: "stripe", PaymentID: "pi_twice", Kind: kind, PurchaseID: p.ID,
					Amount: 10050, Currency: "eur", Status: "succeeded", Evidence: "both wrong", FoundAt: f.now}
				if _, err := tx.InsertFinding(context.Background(), fd); err != nil {
					return err
				}
				twice = append(twice, fd)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}()
	code, out, stderr := run(t, nil, "ops", "list", "--database-url", f.db)
	if code != 0 || !strings.Contains(out, "money at risk (open findings and open disputes): 100.50 EUR") || !strings.Contains(out, "open audit findings (2;") {
		t.Fatalf("ops list: exit %d, want two findings and 100.50 EUR at risk once:\n%s\n%s", code, out, stderr)
	}
	// The demo's audit report counts the same findings the same way.
	a := demo.NewAudit(reconcile.AuditReport{}, twice, []demo.Result{{Scenario: "both wrong", PurchaseID: p.ID}}, f.now)
	if len(a.AtRisk) != 1 || a.AtRisk[0].String() != "100.50 EUR" {
		t.Errorf("the demo's money at risk %v, want 100.50 EUR once", a.AtRisk)
	}
}
