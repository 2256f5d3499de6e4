package reconcile_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/stores"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

func TestMoneyAtRisk(t *testing.T) {
	closed := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	f := func(payment string, kind reconcile.FindingKind, amount int64, currency string) reconcile.Finding {
		return reconcile.Finding{Provider: "stripe", PaymentID: payment, Kind: kind, Amount: amount, Currency: currency}
	}
	closedOne := f("pi_closed", reconcile.FindingOrphanCharge, 700, "usd")
	closedOne.ClosedAt = closed
	d := func(state statemachine.State, amount int64, currency string) reconcile.Dispute {
		return reconcile.Dispute{ProviderDisputeID: "du_" + string(state), State: state, Amount: amount, Currency: currency}
	}
	for _, tt := range []struct {
		name     string
		in       []reconcile.Finding
		disputes []reconcile.Dispute
		want     []reconcile.Money
	}{
		{"none", nil, nil, []reconcile.Money{}},
		{"one payment with two findings counts once", []reconcile.Finding{
			f("pi_1", reconcile.FindingAmountMismatch, 10050, "usd"),
			f("pi_1", reconcile.FindingCurrencyMismatch, 10050, "usd"),
		}, nil, []reconcile.Money{{Amount: 10050, Currency: "usd"}}},
		{"per currency, in order, upper case folded", []reconcile.Finding{
			f("pi_2", reconcile.FindingOrphanCharge, 500, "USD"),
			f("pi_3", reconcile.FindingDuplicateCharge, 1200, "jpy"),
			f("pi_4", reconcile.FindingOrphanCharge, 250, "eur"),
			f("pi_5", reconcile.FindingOrphanCharge, 100, "usd"),
		}, nil, []reconcile.Money{{Amount: 250, Currency: "eur"}, {Amount: 1200, Currency: "jpy"}, {Amount: 600, Currency: "usd"}}},
		{"closed findings count nothing", []reconcile.Finding{closedOne}, nil, []reconcile.Money{}},
		{"open disputes count beside the findings, decided ones nothing", []reconcile.Finding{f("pi_6", reconcile.FindingOrphanCharge, 100, "usd")},
			[]reconcile.Dispute{
				d(statemachine.Open, 300, "usd"), d(statemachine.EvidenceSubmitted, 50, "EUR"),
				d(statemachine.Won, 7000, "usd"), d(statemachine.Lost, 7000, "usd"), d(statemachine.Closed, 7000, "usd"),
			}, []reconcile.Money{{Amount: 50, Currency: "eur"}, {Amount: 400, Currency: "usd"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := reconcile.MoneyAtRisk(tt.in, tt.disputes); !slices.Equal(got, tt.want) {
				t.Errorf("MoneyAtRisk = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMoneyString(t *testing.T) {
	if got := (reconcile.Money{Amount: 10050, Currency: "kwd"}).String(); got != "10.050 KWD" {
		t.Errorf("Money.String = %q, want 10.050 KWD", got)
	}
}

// TestMinimumChargeAtTheDoor: a purchase under the provider's minimum
// charge is refused before it is stored, with the minimum written in the
// currency's units; one at the minimum is taken, and a currency without
// a fixed minimum is left to the provider.
func TestMinimumChargeAtTheDoor(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		np := func(amount int64, currency string) reconcile.NewPurchase {
			return reconcile.NewPurchase{Customer: "c", PaymentMethod: "pm_card_visa", Amount: amount, Currency: currency}
		}
		_, err := f.svc.CreatePurchase(t.Context(), np(49, "usd"))
		var fe *reconcile.FieldError
		if !errors.As(err, &fe) || fe.Field != "amount" || !strings.Contains(err.Error(), "0.49 USD is under the provider's minimum charge of 0.50 USD") {
			t.Fatalf("49 cents: %v, want a field error naming the minimum of 0.50 USD", err)
		}
		for _, ok := range []reconcile.NewPurchase{np(50, "usd"), np(50, "jpy"), np(1, "zar")} {
			if _, err := f.svc.CreatePurchase(t.Context(), ok); err != nil {
				t.Errorf("%d %s: %v, want it taken", ok.Amount, ok.Currency, err)
			}
		}
	})
}
