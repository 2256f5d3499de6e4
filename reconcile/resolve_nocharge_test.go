package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// TestResolveSucceededWithoutCharge: an operator who calls succeeded a
// purchase the provider holds no charge for is refused unless overriding
// with a reason; the override is recorded, and the audit afterwards
// reports the purchase as missing at the provider, with the money at
// risk. An honest success with its charge is not reported.
func TestResolveSucceededWithoutCharge(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{MaxAttempts: 1})
		ctx := context.Background()
		start := f.clock.Now()
		honest := f.create("ann")
		f.runUntilIdle(f.svc)
		f.wantState(honest.ID, statemachine.Succeeded)

		p := f.create("uma")
		f.fake.Script(p.ID, fakeprovider.Timeout) // the create never reached the provider
		f.runUntilIdle(f.svc)
		f.wantEscalated(p.ID, reconcile.EscalationAttemptsExhausted)
		f.wantMoneyTaken(p.ID, 0)

		_, err := f.svc.Resolve(ctx, reconcile.Resolution{PurchaseID: p.ID, Operator: "olga", To: statemachine.Succeeded, Evidence: "customer says paid"})
		if !errors.Is(err, reconcile.ErrProviderDisagrees) || !strings.Contains(err.Error(), "no payment") ||
			!strings.Contains(err.Error(), "override") {
			t.Fatalf("resolve succeeded with no charge: %v, want ErrProviderDisagrees saying no payment and how to override", err)
		}
		f.wantState(p.ID, statemachine.Uncertain)

		const reason = "paid by bank transfer outside Stripe, ticket 77"
		out, err := f.svc.Resolve(ctx, reconcile.Resolution{PurchaseID: p.ID, Operator: "olga", To: statemachine.Succeeded,
			Evidence: "bank statement", OverrideProvider: reason})
		if err != nil || out.State != statemachine.Succeeded || out.ProviderPaymentID != "" {
			t.Fatalf("override: %v, %+v", err, out)
		}
		c, err := f.svc.Case(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		act := c.Actions[len(c.Actions)-1]
		if !strings.Contains(act.Saw, "outcome=not_found") || !strings.Contains(act.Did, "override: "+reason) {
			t.Fatalf("action %+v: want the provider's view and the override recorded", act)
		}
		last := c.Transitions[len(c.Transitions)-1]
		if last.To != statemachine.Succeeded || !strings.Contains(last.Evidence, "overriding the provider") || !strings.Contains(last.Evidence, reason) {
			t.Fatalf("last transition %+v: want the override in its evidence", last)
		}
		f.wantMoneyTaken(p.ID, 0)

		f.clock.Advance(10 * time.Minute)
		w := provider.Window{From: start.Add(-time.Minute), Until: f.clock.Now()}
		rep, err := f.svc.Audit(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.New) != 1 {
			t.Fatalf("findings %+v, want one missing_at_provider for %s", rep.New, p.ID)
		}
		got := rep.New[0]
		if got.Kind != reconcile.FindingMissingAtProvider || got.PurchaseID != p.ID || got.PaymentID != reconcile.NoPaymentID(p.ID) ||
			got.Amount != p.Amount || got.Currency != p.Currency {
			t.Fatalf("finding %+v, want missing_at_provider for %s, %d %s at risk", got, p.ID, p.Amount, p.Currency)
		}
		f.wantEscalated(p.ID, reconcile.EscalationStateDisagreement)
		f.wantState(p.ID, statemachine.Succeeded) // the audit never moves a purchase

		// A second run over the same window finds nothing new.
		rep, err = f.svc.Audit(ctx, provider.Window{From: w.From, Until: w.Until.Add(time.Minute)})
		if err != nil || len(rep.New) != 0 {
			t.Fatalf("second audit: %v, new findings %+v", err, rep.New)
		}
	})
}

// TestAuditSucceededWithoutPaymentIDButCharged: a purchase resolved as
// succeeded by override while the provider's search lagged behind its
// charge holds no payment id; the audit of the window of its settlement,
// which does not list the charge (created earlier), finds the charge by
// the purchase and reports nothing.
func TestAuditSucceededWithoutPaymentIDButCharged(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{SearchLag: time.Hour}, reconcile.Config{MaxAttempts: 1})
		ctx := context.Background()
		p := f.create("vic")
		f.fake.Script(p.ID, fakeprovider.LostReply) // charged; the reply lost
		f.runUntilIdle(f.svc)
		f.wantMoneyTaken(p.ID, 1)
		f.clock.Advance(30 * time.Minute)

		_, err := f.svc.Resolve(ctx, reconcile.Resolution{PurchaseID: p.ID, Operator: "olga", To: statemachine.Succeeded, Evidence: "dashboard"})
		if !errors.Is(err, reconcile.ErrProviderDisagrees) {
			t.Fatalf("resolve while the search lags: %v, want ErrProviderDisagrees", err)
		}
		out, err := f.svc.Resolve(ctx, reconcile.Resolution{PurchaseID: p.ID, Operator: "olga", To: statemachine.Succeeded,
			Evidence: "dashboard", OverrideProvider: "the dashboard shows the charge; the search lags"})
		if err != nil || out.ProviderPaymentID != "" {
			t.Fatalf("override: %v, %+v", err, out)
		}
		settled := f.clock.Now()
		f.clock.Advance(2 * time.Hour) // the search caught up
		rep, err := f.svc.Audit(ctx, provider.Window{From: settled.Add(-time.Minute), Until: settled.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Payments != 0 || len(rep.New) != 0 {
			t.Fatalf("audit of the settlement's window: %d payments listed, findings %+v; want none", rep.Payments, rep.New)
		}
	})
}
