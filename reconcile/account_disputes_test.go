package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/stores"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// TestAnotherAccountsDisputeIsForeign: a dispute event from account B
// about the payment of a purchase of account A, and a dispute the audit
// lists in A whose payment's metadata names a purchase of B, are foreign
// disputes: a finding that names no purchase, and nothing applied. A's
// own dispute of its payment is applied to A's purchase.
func TestAnotherAccountsDisputeIsForeign(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, accountsConfig())
		ctx := context.Background()
		start := f.clock.Now()
		pa := f.createIn(acctA, "a")
		f.runUntilIdle(f.svc)
		pa = f.wantState(pa.ID, statemachine.Succeeded).Purchase

		// B's event about A's payment.
		d := provider.Dispute{ID: "du_fromB", PaymentID: pa.ProviderPaymentID, Amount: 300, Currency: "usd",
			Status: provider.DisputeNeedsResponse, Reason: "fraudulent"}
		ev := reconcile.EventFromProvider("stripe", provider.Event{
			ID: "evt_fromB", Type: provider.EventDisputeCreated, Outcome: provider.Pending, PaymentID: d.PaymentID, Account: acctB,
			Dispute: &d, Amount: d.Amount, Currency: d.Currency, Created: f.clock.Now(), Digest: "digest-fromB",
		}, "", nil)
		if got := f.deliver(ev); got[0] != reconcile.EventFinding {
			t.Fatalf("%s's dispute event about %s's payment: %v, want finding", acctB, acctA, got)
		}
		if ds := f.disputesOf(pa.ID); len(ds) != 0 {
			t.Fatalf("purchase %s has %d disputes after another account's event, want none", pa.ID, len(ds))
		}

		// A purchase of B whose payment is unknown yet, and a payment in A
		// naming it, disputed: the audit of A lists the dispute.
		pb := f.createIn(acctB, "b")
		f.fake.Account(acctB).Script(pb.ID, fakeprovider.Timeout)
		f.runUntilIdle(f.svc)
		f.wantState(pb.ID, statemachine.Uncertain)
		other := f.fake.Account(acctA).ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: pb.ID, Amount: 300, Currency: "usd"})
		duOther, err := f.fake.Account(acctA).OpenDispute(other.ID, fakeprovider.DisputeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A's own dispute of its own payment.
		duOwn, err := f.fake.Account(acctA).OpenDispute(pa.ProviderPaymentID, fakeprovider.DisputeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Minute)
		if _, err := f.svc.Audit(ctx, provider.Window{From: start.Add(-time.Minute), Until: f.clock.Now()}); err != nil {
			t.Fatalf("audit: %v", err)
		}

		fs, err := f.svc.Findings(ctx, reconcile.AnyAccount, false)
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]reconcile.Finding{}
		for _, fd := range fs {
			if fd.Kind == reconcile.FindingForeignDispute {
				found[fd.PaymentID] = fd
			}
		}
		for _, du := range []string{d.ID, duOther.ID} {
			fd, ok := found[du]
			if !ok || fd.PurchaseID != "" {
				t.Errorf("finding of dispute %s: %+v (found %v), want a foreign_dispute naming no purchase", du, fd, ok)
			}
		}
		if _, ok := found[duOwn.ID]; ok {
			t.Errorf("%s's own dispute %s was found foreign", acctA, duOwn.ID)
		}
		if r := f.theDispute(pa.ID); r.Dispute.ProviderDisputeID != duOwn.ID {
			t.Fatalf("purchase %s's dispute is %s, want its own account's %s", pa.ID, r.Dispute.ProviderDisputeID, duOwn.ID)
		}
		if ds := f.disputesOf(pb.ID); len(ds) != 0 {
			t.Fatalf("purchase %s of %s has %d disputes of %s's payment, want none", pb.ID, acctB, len(ds), acctA)
		}
	})
}
