package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
)

// TestBenchLedgerCheck: the ledger passes with exactly one charge per
// purchase and nothing else, and a failed check is loud and fails the
// run.
func TestBenchLedgerCheck(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name                       string
		extra                      func(f *fakeprovider.Fake, ids []string)
		ok                         bool
		double, uncharged, foreign int
	}{
		{name: "one each", ok: true},
		{name: "a second charge", double: 1, extra: func(f *fakeprovider.Fake, ids []string) {
			f.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: ids[1], Amount: 300, Currency: "usd"})
		}},
		{name: "a charge for no purchase", foreign: 1, extra: func(f *fakeprovider.Fake, ids []string) {
			f.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: "pur_other", Amount: 300, Currency: "usd"})
		}},
		{name: "a purchase not charged", uncharged: 1, extra: func(f *fakeprovider.Fake, ids []string) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := fakeprovider.New(fakeprovider.Config{})
			ids := []string{"pur_a", "pur_b", "pur_c"}
			charged := ids
			if tt.uncharged > 0 {
				charged = ids[:2]
			}
			for _, id := range charged {
				if _, err := f.Create(ctx, benchCreateRequest(id)); err != nil {
					t.Fatal(err)
				}
			}
			if tt.extra != nil {
				tt.extra(f, ids)
			}
			l := ledgerCheck(f, ids)
			if l.OK != tt.ok || len(l.DoubleCharged) != tt.double || l.Uncharged != tt.uncharged || l.Foreign != tt.foreign {
				t.Fatalf("ledger %+v", *l)
			}
			var out bytes.Buffer
			b := &bench{cfg: Config{Stdout: &out}, report: &Report{Bench: "burn-down", Store: "sqlite", N: 3, Unit: "purchases", Ledger: l}}
			err := b.finish()
			if tt.ok != (err == nil) {
				t.Fatalf("finish: %v", err)
			}
			if !tt.ok && (!strings.Contains(err.Error(), "THE LEDGER CHECK FAILED") || !strings.Contains(out.String(), "ledger        FAILED")) {
				t.Errorf("a failed ledger check is not loud: %v\n%s", err, out.String())
			}
		})
	}
}

// benchCreateRequest is a create for purchase id, as the worker sends it.
func benchCreateRequest(id string) provider.CreateRequest {
	return provider.CreateRequest{IdempotencyKey: "payrecon-" + id, PurchaseID: id, Customer: "c", Amount: 300, Currency: "usd",
		PaymentMethod: fakeprovider.PaymentMethodVisa, Version: provider.RequestOffSession}
}
