package reconcile_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/stores"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// Two connected accounts of the platform, declared to the deployment.
const (
	acctA = "acct_1TestAccountA"
	acctB = "acct_1TestAccountB"
)

// accountsConfig is a Config serving both accounts.
func accountsConfig() reconcile.Config {
	return reconcile.Config{Accounts: []string{acctA, acctB}}
}

// createIn stores a purchase of account.
func (f *fixture) createIn(account, customer string) reconcile.Purchase {
	f.t.Helper()
	p, err := f.svc.CreatePurchase(context.Background(), reconcile.NewPurchase{
		Customer: customer, Amount: 300, Currency: "usd", Description: "coffee", Account: account,
	})
	if err != nil {
		f.t.Fatalf("create purchase in %q: %v", account, err)
	}
	return p
}

// accountEvents returns the events of account's log created at or after
// since, oldest first, as the inbox stores them.
func (f *fixture) accountEvents(account string, since time.Time) []reconcile.Event {
	f.t.Helper()
	var out []reconcile.Event
	q := provider.EventQuery{Since: since}
	for {
		page, err := f.fake.ForAccount(account).ListEvents(context.Background(), q)
		if err != nil {
			f.t.Fatalf("list %s's events: %v", account, err)
		}
		for _, ev := range page.Events {
			out = append(out, reconcile.EventFromProvider("stripe", ev, "", []byte(ev.Payload)))
		}
		if !page.HasMore {
			break
		}
		q.After = page.Next
	}
	slices.Reverse(out)
	return out
}

// TestAccountsChargeInTheirOwnBooks: purchases of two connected accounts
// and of the platform are each charged once, in their own account only,
// with the account stored in the request before the first call; a refund
// of one is made in its account.
func TestAccountsChargeInTheirOwnBooks(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, accountsConfig())
		pa, pb, pp := f.createIn(acctA, "a"), f.createIn(acctB, "b"), f.createIn("", "platform")
		f.runUntilIdle(f.svc)
		books := map[string]*fakeprovider.Fake{acctA: f.fake.Account(acctA), acctB: f.fake.Account(acctB), "": f.fake}
		for _, p := range []reconcile.Purchase{pa, pb, pp} {
			d := f.wantState(p.ID, statemachine.Succeeded)
			if d.Purchase.Account != p.Account || d.Purchase.ProviderRequest == nil || d.Purchase.ProviderRequest.Account != p.Account {
				t.Fatalf("purchase %s: account %q, request %+v; want %q in both", p.ID, d.Purchase.Account, d.Purchase.ProviderRequest, p.Account)
			}
			for account, fake := range books {
				want := 0
				if account == p.Account {
					want = 1
				}
				if got := fake.MoneyTaken(p.ID); got != want {
					t.Errorf("purchase %s of %q: %d charges in account %q, want %d", p.ID, p.Account, got, account, want)
				}
			}
		}

		r, err := f.svc.CreateRefund(context.Background(), reconcile.NewRefund{PurchaseID: pa.ID, Amount: 100, Reason: "customer asked", RequestedBy: "test"})
		if err != nil {
			t.Fatal(err)
		}
		f.runUntilIdle(f.svc)
		paid := f.detail(pa.ID).Purchase.ProviderPaymentID
		if got := len(f.fake.Account(acctA).RefundsOf(paid)); got != 1 {
			t.Fatalf("refund %s: %d refunds in %s, want 1", r.ID, got, acctA)
		}
		if got := len(f.fake.RefundsFor(r.ID)) + len(f.fake.Account(acctB).RefundsFor(r.ID)); got != 0 {
			t.Fatalf("refund %s: %d refunds outside %s, want none", r.ID, got, acctA)
		}
	})
}

// TestAnotherAccountNeverSettles: account A holds a succeeded payment
// whose metadata names a purchase of account B (ids are the platform's
// to choose, and two accounts' payments can name one). Its webhook, the
// search and the audit's listing never settle the purchase: the webhook
// is a foreign payment and escalates it, the search in B finds nothing,
// and the audit of A reports a charge no purchase of A owns. B's audit
// reports nothing.
func TestAnotherAccountNeverSettles(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, accountsConfig())
		ctx := context.Background()
		pb := f.createIn(acctB, "b")
		f.fake.Account(acctB).Script(pb.ID, fakeprovider.Timeout)
		f.runUntilIdle(f.svc)
		f.wantState(pb.ID, statemachine.Uncertain)
		since := f.clock.Now()
		other := f.fake.Account(acctA).ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: pb.ID, Amount: 300, Currency: "usd"})

		// The webhook, from A.
		evs := f.accountEvents(acctA, since)
		if len(evs) == 0 || evs[0].Account != acctA {
			t.Fatalf("events of %s: %+v, want the outside charge's, of %s", acctA, evs, acctA)
		}
		if got := f.deliver(evs...); got[0] != reconcile.EventContradiction {
			t.Fatalf("webhook of %s's payment naming %s: %v, want contradiction", acctA, pb.ID, got)
		}
		d := f.detail(pb.ID)
		if d.Purchase.EscalationReason != reconcile.EscalationForeignPayment || d.Purchase.State.Terminal() || d.Purchase.ProviderPaymentID == other.ID {
			t.Fatalf("after the webhook: %s %s escalated %q payment %q; want open, escalated foreign_payment, not linked to %s",
				pb.ID, d.Purchase.State, d.Purchase.EscalationReason, d.Purchase.ProviderPaymentID, other.ID)
		}

		// The search, in B, and the audits of both accounts.
		for range 3 {
			f.clock.Advance(time.Hour)
			f.runUntilIdle(f.svc)
		}
		if _, err := f.svc.AuditDue(ctx); err != nil {
			t.Fatalf("audit: %v", err)
		}
		d = f.detail(pb.ID)
		if d.Purchase.State == statemachine.Succeeded || d.Purchase.ProviderPaymentID == other.ID {
			t.Fatalf("%s settled by %s's payment: %s payment %q\n%s", pb.ID, acctA, d.Purchase.State, d.Purchase.ProviderPaymentID, history(d))
		}
		if n := f.fake.Account(acctB).MoneyTaken(pb.ID); n != 0 {
			t.Fatalf("%d charges of %s in %s: the create timed out before acting and was never sent again", n, pb.ID, acctB)
		}
		fs, err := f.svc.Findings(ctx, reconcile.AnyAccount, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != 1 || fs[0].Kind != reconcile.FindingOrphanCharge || fs[0].PaymentID != other.ID || !strings.Contains(fs[0].Evidence, acctA) {
			t.Fatalf("findings %+v, want one orphan_charge for %s in %s", fs, other.ID, acctA)
		}
	})
}

// TestAuditFindsDuplicateInItsAccount: a second charge in account A for
// A's purchase is a duplicate charge found by A's audit; nothing is found
// about B, whose purchase was charged once.
func TestAuditFindsDuplicateInItsAccount(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, accountsConfig())
		ctx := context.Background()
		pa, pb := f.createIn(acctA, "a"), f.createIn(acctB, "b")
		f.runUntilIdle(f.svc)
		second := f.fake.Account(acctA).ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: pa.ID, Amount: 300, Currency: "usd"})
		f.clock.Advance(time.Hour)
		rep, err := f.svc.AuditDue(ctx)
		if err != nil {
			t.Fatalf("audit: %v", err)
		}
		if rep.Payments != 3 {
			t.Errorf("the audit listed %d payments, want 3 (two in %s, one in %s)", rep.Payments, acctA, acctB)
		}
		fs, err := f.svc.Findings(ctx, reconcile.AnyAccount, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != 1 || fs[0].Kind != reconcile.FindingDuplicateCharge || fs[0].PaymentID != second.ID || fs[0].PurchaseID != pa.ID {
			t.Fatalf("findings %+v, want one duplicate_charge %s of %s", fs, second.ID, pa.ID)
		}
		f.wantState(pb.ID, statemachine.Succeeded)
	})
}

// TestAccountRefused: a malformed account, and an undeclared one when
// undeclared accounts are refused, are refused with an error naming the
// field, and nothing is stored; accepted, an undeclared account is served
// and its side audited. A provider that cannot act for accounts cannot
// serve them.
func TestAccountRefused(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, accountsConfig())
		ctx := context.Background()
		for _, account := range []string{"acct-1", "acct_", "ACCT_1", "acct_1 2", "acct_1TestAccountC"} {
			_, err := f.svc.CreatePurchase(ctx, reconcile.NewPurchase{Customer: "c", Amount: 300, Currency: "usd", Account: account})
			var fe *reconcile.FieldError
			if !errors.Is(err, reconcile.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "account" || !strings.Contains(err.Error(), account) {
				t.Errorf("account %q: %v, want an invalid account naming it", account, err)
			}
		}
		var n int
		if err := f.store.InTx(ctx, func(tx reconcile.Tx) error {
			got, err := tx.ListAccounts(ctx)
			n = len(got)
			return err
		}); err != nil || n != 0 {
			t.Fatalf("accounts in the books after refusals: %d, %v", n, err)
		}

		accept := f.service(f.fake, "worker-accept", reconcile.Config{UndeclaredAccounts: reconcile.AccountsAccept})
		p, err := accept.CreatePurchase(ctx, reconcile.NewPurchase{Customer: "c", Amount: 300, Currency: "usd", Account: "acct_1TestAccountC"})
		if err != nil {
			t.Fatalf("undeclared account, accepted: %v", err)
		}
		f.runUntilIdle(accept)
		f.wantState(p.ID, statemachine.Succeeded)
		if got := f.fake.Account("acct_1TestAccountC").MoneyTaken(p.ID); got != 1 {
			t.Fatalf("%d charges in the undeclared account, want 1", got)
		}
		f.clock.Advance(time.Hour)
		rep, err := accept.AuditDue(ctx)
		if err != nil || rep.Payments != 1 {
			t.Fatalf("the audit of the books' accounts: %d payments, %v; want the undeclared account's one", rep.Payments, err)
		}

		if _, err := reconcile.New(f.store, platformOnly{f.fake}, accountsConfig()); err == nil {
			t.Fatal("a provider that cannot act for accounts was given accounts to serve")
		}
	})
}

// platformOnly hides the fake's accounts: a provider of one account.
type platformOnly struct{ provider.Provider }
