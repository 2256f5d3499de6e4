package providertest

import (
	"slices"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// The cases of the provider-side listing the audit reads.

func testListFinds(t *testing.T, h Harness, tg Target) {
	req := newRequest(t, h, PaymentMethodSucceeds)
	created := create(t, tg, req)
	checkCharge(t, "create", created, provider.Succeeded, "", req)
	pay := listFind(t, tg, coveringWindow(tg), created.PaymentID, "a window covering the create")
	checkPayment(t, pay, req, provider.Succeeded)

	// Windows placed by the payment's creation second: From is
	// inclusive, Until exclusive.
	at := pay.Created.Truncate(time.Second)
	windows := []struct {
		what     string
		w        provider.Window
		contains bool
	}{
		{"the hour before its creation second", provider.Window{From: at.Add(-time.Hour), Until: at}, false},
		{"its creation second", provider.Window{From: at, Until: at.Add(time.Second)}, true},
		{"the hour after its creation second", provider.Window{From: at.Add(time.Second), Until: at.Add(time.Hour)}, false},
	}
	for _, w := range windows {
		found := slices.ContainsFunc(list(t, tg, w.w), func(p provider.Payment) bool { return p.ID == created.PaymentID })
		if found != w.contains {
			t.Errorf("list of %s [%s, %s): holds %s: %v, want %v (created %s)", w.what,
				w.w.From.UTC().Format(time.RFC3339), w.w.Until.UTC().Format(time.RFC3339), created.PaymentID, found, w.contains,
				pay.Created.UTC().Format(time.RFC3339Nano))
		}
	}
}

func testListOldestFirst(t *testing.T, h Harness, tg Target) {
	first, second := newRequest(t, h, PaymentMethodSucceeds), newRequest(t, h, PaymentMethodSucceeds)
	a := create(t, tg, first)
	if tg.Advance != nil {
		// Creation times in two seconds, so that the order is visible.
		tg.Advance(2 * time.Second)
	}
	b := create(t, tg, second)
	w := coveringWindow(tg)
	payments := list(t, tg, w) // checks the order of the whole listing
	ia := slices.IndexFunc(payments, func(p provider.Payment) bool { return p.ID == a.PaymentID })
	ib := slices.IndexFunc(payments, func(p provider.Payment) bool { return p.ID == b.PaymentID })
	switch {
	case ia < 0 || ib < 0:
		t.Fatalf("list of a window covering both creates: holds %s: %v, %s: %v; want both", a.PaymentID, ia >= 0, b.PaymentID, ib >= 0)
	case payments[ia].Created.After(payments[ib].Created):
		t.Errorf("%s created %v, after %s created later at %v", a.PaymentID, payments[ia].Created, b.PaymentID, payments[ib].Created)
	case payments[ia].Created.Before(payments[ib].Created) && ia > ib:
		t.Errorf("older %s listed at %d, after newer %s at %d: want oldest first", a.PaymentID, ia, b.PaymentID, ib)
	}
	if tg.Advance != nil && !payments[ia].Created.Before(payments[ib].Created) {
		t.Errorf("creates 2s apart on the simulated clock both created at %v", payments[ia].Created)
	}
	checkPayment(t, payments[ia], first, provider.Succeeded)
	checkPayment(t, payments[ib], second, provider.Succeeded)
}

func testListDecline(t *testing.T, h Harness, tg Target) {
	req := newRequest(t, h, PaymentMethodDeclines)
	res := create(t, tg, req)
	checkCharge(t, "create with "+PaymentMethodDeclines, res, provider.Declined, "", req)
	pay := listFind(t, tg, coveringWindow(tg), res.PaymentID, "a window covering the declined create")
	checkPayment(t, pay, req, provider.Declined)
}

// listMargin is how far around the local clock coveringWindow reaches on
// real time: Stripe stamps creation times by its own clock.
const listMargin = 10 * time.Minute

// coveringWindow returns a window that covers the provider's present, and
// so a charge just created: listMargin either side of Target.Now, or of
// time.Now on real time; all time when the clock is simulated and the
// suite cannot read it.
func coveringWindow(tg Target) provider.Window {
	now := tg.Now
	switch {
	case now == nil && tg.Advance != nil:
		return provider.Window{From: time.Unix(1, 0), Until: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)}
	case now == nil:
		now = time.Now
	}
	at := now()
	return provider.Window{From: at.Add(-listMargin), Until: at.Add(listMargin)}
}

// list lists w and checks the listing: oldest first, every payment
// created within w at the granularity of seconds (a provider may widen
// w to the seconds covering it, as Stripe's filter does), ids unique.
func list(t *testing.T, tg Target, w provider.Window) []provider.Payment {
	t.Helper()
	payments, err := tg.Provider.List(t.Context(), w, nil)
	if err != nil {
		t.Fatalf("list [%v, %v): %v", w.From, w.Until, err)
	}
	from, until := w.From.Truncate(time.Second), w.Until.Truncate(time.Second)
	if !until.Equal(w.Until) {
		until = until.Add(time.Second)
	}
	seen := make(map[string]bool, len(payments))
	for i, p := range payments {
		if p.Created.Before(from) || !p.Created.Before(until) {
			t.Errorf("list [%v, %v): payment %s created %v, outside the window", w.From, w.Until, p.ID, p.Created)
		}
		if i > 0 && p.Created.Before(payments[i-1].Created) {
			t.Errorf("list: payment %d (%s) created %v, before payment %d (%v): want oldest first",
				i, p.ID, p.Created, i-1, payments[i-1].Created)
		}
		if seen[p.ID] {
			t.Errorf("list: payment %s listed twice", p.ID)
		}
		seen[p.ID] = true
	}
	return payments
}

// listFind lists w and returns the payment id, failing the test if the
// listing does not hold it.
func listFind(t *testing.T, tg Target, w provider.Window, id, what string) provider.Payment {
	t.Helper()
	payments := list(t, tg, w)
	i := slices.IndexFunc(payments, func(p provider.Payment) bool { return p.ID == id })
	if i < 0 {
		t.Fatalf("list of %s [%v, %v): %d payments, none is %s", what, w.From, w.Until, len(payments), id)
	}
	return payments[i]
}

// checkPayment checks that a listed payment is req's charge with outcome
// want.
func checkPayment(t *testing.T, p provider.Payment, req provider.CreateRequest, want provider.Outcome) {
	t.Helper()
	if p.PurchaseID != req.PurchaseID {
		t.Errorf("listed %s: PurchaseID %q, want %q", p.ID, p.PurchaseID, req.PurchaseID)
	}
	if p.Amount != req.Amount || p.Currency != req.Currency {
		t.Errorf("listed %s: amount %d %q, want %d %q", p.ID, p.Amount, p.Currency, req.Amount, req.Currency)
	}
	if p.Outcome != want || p.Status == "" {
		t.Errorf("listed %s: outcome %q status %q, want outcome %q and a status", p.ID, p.Outcome, p.Status, want)
	}
	if got, wantTaken := p.MoneyTaken(), want == provider.Succeeded; got != wantTaken {
		t.Errorf("listed %s: MoneyTaken %v, want %v", p.ID, got, wantTaken)
	}
	if p.Created.IsZero() {
		t.Errorf("listed %s: no creation time", p.ID)
	}
}

// checkLedger checks the provider's ledger for purchaseID, when readable.
func checkLedger(t *testing.T, tg Target, purchaseID string, charges, moneyTaken int) {
	t.Helper()
	if tg.Charges != nil {
		if got := tg.Charges(purchaseID); got != charges {
			t.Errorf("ledger holds %d charges for %s, want %d", got, purchaseID, charges)
		}
	}
	if tg.MoneyTaken != nil {
		if got := tg.MoneyTaken(purchaseID); got != moneyTaken {
			t.Errorf("ledger holds %d charges that took money for %s, want %d", got, purchaseID, moneyTaken)
		}
	}
}
