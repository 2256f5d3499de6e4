package stripe_test

import (
	"crypto/rand"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/providertest"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
)

// testModeKey returns STRIPE_SECRET_KEY when it holds a Stripe test key
// (sk_test_…), and skips the test otherwise: these tests never run with
// any other key.
func testModeKey(t *testing.T) string {
	t.Helper()
	key := os.Getenv("STRIPE_SECRET_KEY")
	switch {
	case key == "":
		t.Skip("STRIPE_SECRET_KEY not set: skipping the tests against Stripe test mode")
	case !strings.HasPrefix(key, "sk_test_"):
		t.Skip("STRIPE_SECRET_KEY is not a test key (sk_test_…): refusing to run against it")
	}
	return key
}

// TestConformanceStripeTestMode runs the provider conformance suite against
// real Stripe in test mode, when STRIPE_SECRET_KEY holds a test key
// (sk_test_…). It never runs with any other key.
func TestConformanceStripeTestMode(t *testing.T) {
	key := testModeKey(t)
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) providertest.Target {
			p, err := stripe.New(stripe.Config{SecretKey: key})
			if err != nil {
				t.Fatalf("stripe.New: %v", err)
			}
			return providertest.Target{Provider: p}
		},
	})
}

// Bounds of waiting for Stripe test mode to open the dispute of a charge
// of pm_card_createDispute, which it does shortly after the charge
// succeeds, asynchronously.
const (
	testModeDisputeWithin = 2 * time.Minute
	testModePollEvery     = 2 * time.Second
)

// TestDisputeStripeTestMode charges Stripe's test card that is always
// disputed (pm_card_createDispute) and waits, polling with a deadline,
// until ListDisputes lists the chargeback of that payment, with its
// purchase, amount and evidence date, and its charge.dispute.created
// event is listed carrying the same dispute. A refund of the payment is
// then refused for the payment (charge_disputed: Failed). It needs a
// test key (see testModeKey); the conformance suite cannot run it, as
// Stripe opens a dispute only on a charge of that card.
func TestDisputeStripeTestMode(t *testing.T) {
	key := testModeKey(t)
	p, err := stripe.New(stripe.Config{SecretKey: key})
	if err != nil {
		t.Fatalf("stripe.New: %v", err)
	}
	ctx := t.Context()
	start := time.Now()
	purchaseID := "pur_stripetest_" + rand.Text()
	req := provider.CreateRequest{
		IdempotencyKey: "payrecon-" + purchaseID,
		PurchaseID:     purchaseID,
		Amount:         1999,
		Currency:       "usd",
		Description:    "payrecon " + t.Name(),
		PaymentMethod:  "pm_card_createDispute",
		Version:        provider.CurrentRequestVersion,
	}
	charge, err := p.Create(ctx, req)
	if err != nil || charge.Outcome != provider.Succeeded {
		t.Fatalf("Create with pm_card_createDispute = %+v, %v; want a succeeded charge", charge, err)
	}

	w := provider.Window{From: start.Add(-time.Minute), Until: start.Add(testModeDisputeWithin + time.Minute)}
	q := provider.EventQuery{Since: w.From, Types: []string{provider.EventDisputeCreated}}
	var (
		dispute *provider.Dispute
		event   *provider.Event
	)
	deadline := time.Now().Add(testModeDisputeWithin)
	for {
		if dispute == nil {
			disputes, err := p.ListDisputes(ctx, w, nil)
			if err != nil {
				t.Fatalf("ListDisputes: %v", err)
			}
			if i := slices.IndexFunc(disputes, func(d provider.Dispute) bool { return d.PaymentID == charge.PaymentID }); i >= 0 {
				dispute = &disputes[i]
			}
		}
		if event == nil {
			page, err := p.ListEvents(ctx, q)
			if err != nil {
				t.Fatalf("ListEvents: %v", err)
			}
			if i := slices.IndexFunc(page.Events, func(ev provider.Event) bool { return ev.PaymentID == charge.PaymentID }); i >= 0 {
				event = &page.Events[i]
			}
		}
		if dispute != nil && event != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no dispute of %s within %v: listed %v, event %v", charge.PaymentID, testModeDisputeWithin, dispute != nil, event != nil)
		}
		time.Sleep(testModePollEvery)
	}

	d := *dispute
	switch {
	case !strings.HasPrefix(d.ID, "du_") && !strings.HasPrefix(d.ID, "dp_"):
		t.Errorf("dispute id %q, want du_… or dp_…", d.ID)
	case d.PurchaseID != req.PurchaseID:
		t.Errorf("dispute %s: PurchaseID %q, want the payment's %q", d.ID, d.PurchaseID, req.PurchaseID)
	case d.Amount != req.Amount || d.Currency != req.Currency || d.ChargeID == "":
		t.Errorf("dispute %+v: want %d %s of a charge", d, req.Amount, req.Currency)
	case !slices.Contains(provider.DisputeStatuses, d.Status) || provider.DisputeInquiry(d.Status):
		t.Errorf("dispute %s: status %q, want a chargeback's", d.ID, d.Status)
	case d.Withdrawn != req.Amount || d.Reinstated != 0:
		t.Errorf("dispute %s: withdrawn %d, reinstated %d; want %d withdrawn, fees apart", d.ID, d.Withdrawn, d.Reinstated, req.Amount)
	case d.Created.Before(w.From) || !d.EvidenceDueBy.After(d.Created):
		t.Errorf("dispute %s: created %v, evidence due %v; want it opened now, evidence due later", d.ID, d.Created, d.EvidenceDueBy)
	}
	ev := *event
	if ev.Dispute == nil || ev.Dispute.ID != d.ID || ev.Outcome != provider.Pending || ev.Amount != d.Amount || ev.Currency != d.Currency {
		t.Errorf("event %s: want %s of dispute %s, pending, its amount", showEvent(ev), provider.EventDisputeCreated, d.ID)
	}

	rreq := provider.RefundRequest{
		IdempotencyKey: "payrecon-ref_" + purchaseID, RefundID: "ref_" + purchaseID, PurchaseID: purchaseID,
		PaymentID: charge.PaymentID, Amount: 100, Currency: req.Currency,
	}
	res, err := p.CreateRefund(ctx, rreq)
	if !errors.Is(err, provider.ErrRefundRefused) || provider.RefundOutcomeOf(res, err) != provider.Failed {
		t.Errorf("refund of a payment charged back = %+v, %v; want it refused for the payment (Failed)", res, err)
	}
}
