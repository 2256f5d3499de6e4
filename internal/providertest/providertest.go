// Package providertest is the conformance suite for implementations of
// provider.Provider: the in-process fake (package fakeprovider), the Stripe
// adapter pointed at the fake's HTTP server, and the Stripe adapter against
// Stripe test mode.
//
// The suite relies only on behaviour real Stripe has, so that a fake that
// passes it behaves like Stripe where payrecon depends on it: a create
// charges once per idempotency key, a replay with the same key and
// parameters returns the same charge, the same key with another amount is a
// mismatch, status by id agrees with create, search by purchase id finds
// the charge once its index catches up and counts it as one charge, every
// answer about a charge names its purchase (Result.PurchaseID), the test
// card for declines is declined, and a listing of a window of creation
// times holds the charges created in it, and only those, oldest first.
// Requests are of the current version (off-session), as the worker sends
// them, except where the suite checks the versions themselves: a request
// stored before versions (on-session) replays as itself, the same key at
// another version is a mismatch, and the test card that demands
// authentication is declined (authentication_required) off-session but
// waits in requires_action on-session.
// Refunds: a refund of part of a succeeded charge succeeds and reads back
// by its id as it was made, naming the payment, the refund and the
// purchase; a replay with the same key and parameters is the same refund
// and makes no second; the same key with another amount is a mismatch;
// a refund beyond what remains of the payment is rejected and makes
// nothing; an unknown refund id is not found (never failed); a payment's
// refunds list oldest first, and a listing of a window of creation times
// holds the refunds created in it.
// Hooks the provider cannot offer (a simulated clock, a readable ledger)
// are optional; the checks that need them are skipped without them.
package providertest

import (
	"crypto/rand"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// Payment methods understood by Stripe test mode, and honoured by the fake.
const (
	// PaymentMethodSucceeds is charged successfully.
	PaymentMethodSucceeds = "pm_card_visa"
	// PaymentMethodDeclines is declined.
	PaymentMethodDeclines = "pm_card_chargeDeclined"
	// PaymentMethodAuthenticationRequired demands authentication (3-D
	// Secure) on every charge: declined off-session, requires_action
	// on-session.
	PaymentMethodAuthenticationRequired = "pm_card_authenticationRequired"
)

// ReasonAuthenticationRequired is the Reason of the off-session decline of
// PaymentMethodAuthenticationRequired: Stripe's decline code.
const ReasonAuthenticationRequired = "authentication_required"

// Harness describes the provider under test.
type Harness struct {
	// New returns a fresh provider without faults, with its hooks. Each
	// subtest calls it once; subtests run in parallel. Required.
	New func(t *testing.T) Target
	// Customer is sent in every create. Stripe needs an existing customer
	// id or none; default "".
	Customer string
	// SearchWithin bounds how long search may lag behind a create: of the
	// simulated clock when Target.Advance is set, of real time otherwise.
	// Default 2m.
	SearchWithin time.Duration
	// PollEvery is how often search is retried on real time. Default 2s.
	PollEvery time.Duration
}

// Target is one fresh provider and the hooks into it.
type Target struct {
	// Provider is the provider under test. Required.
	Provider provider.Provider
	// Advance moves the provider's simulated clock forward by d. Nil when
	// it runs on real time, as Stripe does.
	Advance func(d time.Duration)
	// Now reads the provider's clock, the one that stamps its payments'
	// creation times, for the windows of List. Nil: time.Now when Advance
	// is nil (the provider runs on real time); when Advance is set, the
	// suite does not know the simulated time, and finds a new charge with
	// a window covering all time (fine for a fresh fake's small ledger).
	Now func() time.Time
	// Charges returns how many charges (declines included) the provider
	// holds for a purchase. Nil when its ledger cannot be read.
	Charges func(purchaseID string) int
	// MoneyTaken returns how many of those charges took money (succeeded,
	// or processing towards success). Nil when its ledger cannot be read.
	MoneyTaken func(purchaseID string) int
	// Refunds returns how many refunds (failed ones included) the
	// provider holds whose metadata names payrecon's refund refundID. Nil
	// when its ledger cannot be read.
	Refunds func(refundID string) int
}

// Run runs the conformance suite against the provider h describes.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("providertest: Harness.New is nil")
	}
	if h.SearchWithin <= 0 {
		h.SearchWithin = 2 * time.Minute
	}
	if h.PollEvery <= 0 {
		h.PollEvery = 2 * time.Second
	}
	tests := []struct {
		name string
		run  func(t *testing.T, h Harness, tg Target)
	}{
		{"CreateSucceeds", testCreateSucceeds},
		{"ReplaySameKeyAndParams", testReplay},
		{"SameKeyOtherAmountIsMismatch", testMismatch},
		{"DistinctKeysChargeSeparately", testDistinctKeys},
		{"StatusAgreesWithCreate", testStatusAgrees},
		{"StatusOfUnknownIDIsNotFound", testStatusUnknown},
		{"SearchFindsCharge", testSearchFinds},
		{"SearchOfUnknownPurchaseIsNotFound", testSearchUnknown},
		{"DeclineTestCard", testDecline},
		{"OffSessionAuthenticationRequiredDeclines", testOffSessionAuthenticationRequired},
		{"OnSessionAuthenticationRequiredWaits", testOnSessionAuthenticationRequired},
		{"RequestOfOldVersionReplaysAsItself", testOldVersionReplays},
		{"ListFindsChargeInItsWindow", testListFinds},
		{"ListOldestFirst", testListOldestFirst},
		{"ListShowsDecline", testListDecline},
		{"RefundThenGet", testRefundThenGet},
		{"RefundReplaySameKeyAndParams", testRefundReplay},
		{"RefundSameKeyOtherAmountIsMismatch", testRefundMismatch},
		{"RefundBeyondAmountIsRejected", testRefundBeyondAmount},
		{"GetRefundOfUnknownIDIsNotFound", testGetRefundUnknown},
		{"ListRefundsOfPayment", testListRefundsOfPayment},
		{"ListRefundsCreatedInItsWindow", testListRefundsCreated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tg := h.New(t)
			if tg.Provider == nil {
				t.Fatal("providertest: Harness.New returned a Target without Provider")
			}
			tc.run(t, h, tg)
		})
	}
}

func testCreateSucceeds(t *testing.T, h Harness, tg Target) {
	req := newRequest(t, h, PaymentMethodSucceeds)
	res := create(t, tg, req)
	checkCharge(t, "create", res, provider.Succeeded, "", req)
	checkLedger(t, tg, req.PurchaseID, 1, 1)
}

func testReplay(t *testing.T, h Harness, tg Target) {
	req := newRequest(t, h, PaymentMethodSucceeds)
	first := create(t, tg, req)
	checkCharge(t, "create", first, provider.Succeeded, "", req)
	again := create(t, tg, req)
	checkCharge(t, "replay", again, first.Outcome, first.PaymentID, req)
	if again.Status != first.Status {
		t.Errorf("replay: status %q, want the saved %q", again.Status, first.Status)
	}
	checkLedger(t, tg, req.PurchaseID, 1, 1)
}

func testMismatch(t *testing.T, h Harness, tg Target) {
	req := newRequest(t, h, PaymentMethodSucceeds)
	first := create(t, tg, req)
	checkCharge(t, "create", first, provider.Succeeded, "", req)

	other := req
	other.Amount++
	res, err := tg.Provider.Create(t.Context(), other)
	if !errors.Is(err, provider.ErrIdempotencyMismatch) {
		t.Fatalf("create with the same key and amount %d: (%+v, %v), want an error wrapping provider.ErrIdempotencyMismatch", other.Amount, res, err)
	}
	if got := provider.OutcomeOf(res, err); got != provider.IdempotencyMismatch {
		t.Errorf("OutcomeOf(mismatch) = %q, want %q", got, provider.IdempotencyMismatch)
	}
	// The mismatch must not disturb the key's saved response.
	again := create(t, tg, req)
	checkCharge(t, "replay after mismatch", again, provider.Succeeded, first.PaymentID, req)
	checkLedger(t, tg, req.PurchaseID, 1, 1)
}

func testDistinctKeys(t *testing.T, h Harness, tg Target) {
	a, b := newRequest(t, h, PaymentMethodSucceeds), newRequest(t, h, PaymentMethodSucceeds)
	ra, rb := create(t, tg, a), create(t, tg, b)
	checkCharge(t, "create a", ra, provider.Succeeded, "", a)
	checkCharge(t, "create b", rb, provider.Succeeded, "", b)
	if ra.PaymentID == rb.PaymentID {
		t.Errorf("two keys gave one payment id %q", ra.PaymentID)
	}
	checkLedger(t, tg, a.PurchaseID, 1, 1)
	checkLedger(t, tg, b.PurchaseID, 1, 1)
}

func testStatusAgrees(t *testing.T, h Harness, tg Target) {
	req := newRequest(t, h, PaymentMethodSucceeds)
	created := create(t, tg, req)
	checkCharge(t, "create", created, provider.Succeeded, "", req)
	res, err := tg.Provider.Status(t.Context(), created.PaymentID)
	if err != nil {
		t.Fatalf("status of %s: %v", created.PaymentID, err)
	}
	checkCharge(t, "status", res, created.Outcome, created.PaymentID, req)
}

func testStatusUnknown(t *testing.T, h Harness, tg Target) {
	id := randomID("pi_")
	res, err := tg.Provider.Status(t.Context(), id)
	if err != nil {
		t.Fatalf("status of unknown %s: %v", id, err)
	}
	if res.Outcome != provider.NotFound {
		t.Errorf("status of unknown %s: %+v, want outcome %q", id, res, provider.NotFound)
	}
}

func testSearchFinds(t *testing.T, h Harness, tg Target) {
	req := newRequest(t, h, PaymentMethodSucceeds)
	created := create(t, tg, req)
	checkCharge(t, "create", created, provider.Succeeded, "", req)
	res := searchUntilFound(t, h, tg, req.PurchaseID)
	checkCharge(t, "search", res, provider.Succeeded, created.PaymentID, req)
	if res.Charges != 1 {
		t.Errorf("search: Charges %d (%+v), want 1: one charge took money", res.Charges, res)
	}
}

func testSearchUnknown(t *testing.T, h Harness, tg Target) {
	id := randomID("pur_pt_")
	res, err := tg.Provider.Search(t.Context(), id)
	if err != nil {
		t.Fatalf("search for unknown purchase %s: %v", id, err)
	}
	if res.Outcome != provider.NotFound {
		t.Errorf("search for unknown purchase %s: %+v, want outcome %q", id, res, provider.NotFound)
	}
}

func testDecline(t *testing.T, h Harness, tg Target) {
	req := newRequest(t, h, PaymentMethodDeclines)
	res := create(t, tg, req)
	// A decline is an answer, not an error, and names the payment (Stripe
	// creates the PaymentIntent and returns it in the card error).
	checkCharge(t, "create with "+PaymentMethodDeclines, res, provider.Declined, "", req)
	if res.Reason == "" {
		t.Errorf("decline: empty Reason, want the decline code")
	}
	st, err := tg.Provider.Status(t.Context(), res.PaymentID)
	if err != nil {
		t.Fatalf("status of declined %s: %v", res.PaymentID, err)
	}
	checkCharge(t, "status of declined", st, provider.Declined, res.PaymentID, req)
	again := create(t, tg, req)
	checkCharge(t, "replay of decline", again, provider.Declined, res.PaymentID, req)
	checkLedger(t, tg, req.PurchaseID, 1, 0)
}

func testOffSessionAuthenticationRequired(t *testing.T, h Harness, tg Target) {
	req := newRequest(t, h, PaymentMethodAuthenticationRequired)
	if !req.OffSession() {
		t.Fatalf("request of version %d is not off-session", req.Version)
	}
	res := create(t, tg, req)
	// Nobody can authenticate: a definite decline, not a pending charge.
	checkCharge(t, "off-session create with "+PaymentMethodAuthenticationRequired, res, provider.Declined, "", req)
	if res.Reason != ReasonAuthenticationRequired {
		t.Errorf("decline: Reason %q, want %q", res.Reason, ReasonAuthenticationRequired)
	}
	st, err := tg.Provider.Status(t.Context(), res.PaymentID)
	if err != nil {
		t.Fatalf("status of declined %s: %v", res.PaymentID, err)
	}
	checkCharge(t, "status of the declined", st, provider.Declined, res.PaymentID, req)
	if st.Reason != ReasonAuthenticationRequired {
		t.Errorf("status of the declined: Reason %q, want %q", st.Reason, ReasonAuthenticationRequired)
	}
	again := create(t, tg, req)
	checkCharge(t, "replay of the decline", again, provider.Declined, res.PaymentID, req)
	checkLedger(t, tg, req.PurchaseID, 1, 0)
}

func testOnSessionAuthenticationRequired(t *testing.T, h Harness, tg Target) {
	req := newRequest(t, h, PaymentMethodAuthenticationRequired)
	req.Version = provider.RequestOnSession // as stored before off-session charges
	res := create(t, tg, req)
	// The customer must authenticate, and is not there: pending.
	checkCharge(t, "on-session create with "+PaymentMethodAuthenticationRequired, res, provider.Pending, "", req)
	if res.Status != "requires_action" {
		t.Errorf("on-session create: status %q, want requires_action", res.Status)
	}
	st, err := tg.Provider.Status(t.Context(), res.PaymentID)
	if err != nil {
		t.Fatalf("status of %s: %v", res.PaymentID, err)
	}
	checkCharge(t, "status of the waiting charge", st, provider.Pending, res.PaymentID, req)
	checkLedger(t, tg, req.PurchaseID, 1, 0)
}

// testOldVersionReplays: a request stored before versions (on-session)
// replays as itself under its key, while the same key at the current
// version is a mismatch: the provider compares what is sent, which is why
// a stored request keeps its version.
func testOldVersionReplays(t *testing.T, h Harness, tg Target) {
	old := newRequest(t, h, PaymentMethodSucceeds)
	old.Version = provider.RequestOnSession
	first := create(t, tg, old)
	checkCharge(t, "create of an on-session request", first, provider.Succeeded, "", old)
	again := create(t, tg, old)
	checkCharge(t, "replay of the on-session request", again, provider.Succeeded, first.PaymentID, old)

	upgraded := old
	upgraded.Version = provider.CurrentRequestVersion
	res, err := tg.Provider.Create(t.Context(), upgraded)
	if !errors.Is(err, provider.ErrIdempotencyMismatch) {
		t.Fatalf("create with the same key at version %d: (%+v, %v), want an error wrapping provider.ErrIdempotencyMismatch", upgraded.Version, res, err)
	}
	again = create(t, tg, old)
	checkCharge(t, "replay after the mismatch", again, provider.Succeeded, first.PaymentID, old)
	checkLedger(t, tg, old.PurchaseID, 1, 1)
}

// newRequest returns a create request for a new purchase, of the current
// version, as the worker builds it. Ids are random because Stripe test
// mode keeps keys and metadata across runs.
func newRequest(t *testing.T, h Harness, paymentMethod string) provider.CreateRequest {
	t.Helper()
	purchaseID := randomID("pur_pt_")
	return provider.CreateRequest{
		IdempotencyKey: "payrecon-" + purchaseID,
		PurchaseID:     purchaseID,
		Customer:       h.Customer,
		Amount:         1999,
		Currency:       "usd",
		Description:    "providertest " + t.Name(),
		PaymentMethod:  paymentMethod,
		Version:        provider.CurrentRequestVersion,
	}
}

func create(t *testing.T, tg Target, req provider.CreateRequest) provider.Result {
	t.Helper()
	res, err := tg.Provider.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("create for %s (key %s): %v", req.PurchaseID, req.IdempotencyKey, err)
	}
	return res
}

// checkCharge checks that res reports req's charge with outcome want and,
// when id is not empty, payment id id; that it names req's purchase; and,
// unless it answers a search, that it counts no charges (Result.Charges is
// a search's).
func checkCharge(t *testing.T, what string, res provider.Result, want provider.Outcome, id string, req provider.CreateRequest) {
	t.Helper()
	if res.PurchaseID != req.PurchaseID {
		t.Errorf("%s: PurchaseID %q (%+v), want %q: the purchase the payment's metadata names", what, res.PurchaseID, res, req.PurchaseID)
	}
	if !strings.HasPrefix(what, "search") && res.Charges != 0 {
		t.Errorf("%s: Charges %d (%+v), want 0 outside a search", what, res.Charges, res)
	}
	if res.Outcome != want {
		t.Errorf("%s: outcome %q (%+v), want %q", what, res.Outcome, res, want)
	}
	switch {
	case res.PaymentID == "":
		t.Errorf("%s: no payment id (%+v)", what, res)
	case id != "" && res.PaymentID != id:
		t.Errorf("%s: payment id %q, want %q", what, res.PaymentID, id)
	}
	if res.Status == "" {
		t.Errorf("%s: empty provider status (%+v)", what, res)
	}
	if res.Amount != req.Amount || res.Currency != req.Currency {
		t.Errorf("%s: amount %d %q, want %d %q", what, res.Amount, res.Currency, req.Amount, req.Currency)
	}
}

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
	payments, err := tg.Provider.List(t.Context(), w)
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

// searchUntilFound searches for purchaseID until it is found, moving the
// simulated clock in steps when it can, else polling on real time, for at
// most h.SearchWithin.
func searchUntilFound(t *testing.T, h Harness, tg Target, purchaseID string) provider.Result {
	t.Helper()
	ctx := t.Context()
	search := func() (provider.Result, bool) {
		t.Helper()
		res, err := tg.Provider.Search(ctx, purchaseID)
		switch {
		case errors.Is(err, provider.ErrRetryLater):
			return res, false
		case err != nil:
			t.Fatalf("search for %s: %v", purchaseID, err)
		}
		return res, res.Outcome != provider.NotFound
	}
	if tg.Advance != nil {
		const steps = 20
		step := h.SearchWithin / steps
		for i := 0; ; i++ {
			if res, ok := search(); ok {
				return res
			}
			if i == steps {
				t.Fatalf("search for %s: not found %v after create", purchaseID, h.SearchWithin)
			}
			tg.Advance(step)
		}
	}
	deadline := time.NewTimer(h.SearchWithin)
	defer deadline.Stop()
	tick := time.NewTicker(h.PollEvery)
	defer tick.Stop()
	for {
		if res, ok := search(); ok {
			return res
		}
		select {
		case <-ctx.Done():
			t.Fatalf("search for %s: %v", purchaseID, ctx.Err())
		case <-deadline.C:
			t.Fatalf("search for %s: not found within %v after create", purchaseID, h.SearchWithin)
		case <-tick.C:
		}
	}
}

// randomID returns prefix and 26 random lower-case letters and digits.
func randomID(prefix string) string { return prefix + strings.ToLower(rand.Text()) }

// paid charges a new purchase with the card that succeeds and returns its
// request and result.
func paid(t *testing.T, h Harness, tg Target) (provider.CreateRequest, provider.Result) {
	t.Helper()
	req := newRequest(t, h, PaymentMethodSucceeds)
	res := create(t, tg, req)
	checkCharge(t, "create", res, provider.Succeeded, "", req)
	return req, res
}

// newRefundRequest returns a request refunding amount of the payment of
// charge (made by req), under a new refund id and its key, as the worker
// stores it.
func newRefundRequest(req provider.CreateRequest, charge provider.Result, amount int64) provider.RefundRequest {
	refundID := randomID("ref_pt_")
	return provider.RefundRequest{
		IdempotencyKey: "payrecon-" + refundID,
		RefundID:       refundID,
		PurchaseID:     req.PurchaseID,
		PaymentID:      charge.PaymentID,
		Amount:         amount,
		Currency:       req.Currency,
		Reason:         "requested_by_customer",
	}
}

func createRefund(t *testing.T, tg Target, req provider.RefundRequest) provider.RefundResult {
	t.Helper()
	res, err := tg.Provider.CreateRefund(t.Context(), req)
	if err != nil {
		t.Fatalf("refund %s of %s (key %s): %v", req.RefundID, req.PaymentID, req.IdempotencyKey, err)
	}
	return res
}

// checkRefund checks that res reports req's refund with outcome want and,
// when id is not empty, refund id id: its payment, amount and currency,
// and payrecon's refund and purchase ids from its metadata.
func checkRefund(t *testing.T, what string, res provider.RefundResult, want provider.Outcome, id string, req provider.RefundRequest) {
	t.Helper()
	if res.Outcome != want {
		t.Errorf("%s: outcome %q (%+v), want %q", what, res.Outcome, res, want)
	}
	switch {
	case res.ID == "":
		t.Errorf("%s: no refund id (%+v)", what, res)
	case id != "" && res.ID != id:
		t.Errorf("%s: refund id %q, want %q", what, res.ID, id)
	}
	if res.PaymentID != req.PaymentID || res.RefundID != req.RefundID || res.PurchaseID != req.PurchaseID {
		t.Errorf("%s: payment %q, refund %q, purchase %q; want %q, %q, %q", what, res.PaymentID, res.RefundID, res.PurchaseID,
			req.PaymentID, req.RefundID, req.PurchaseID)
	}
	if res.Amount != req.Amount || res.Currency != req.Currency {
		t.Errorf("%s: amount %d %q, want %d %q", what, res.Amount, res.Currency, req.Amount, req.Currency)
	}
	if res.Status == "" || res.Created.IsZero() {
		t.Errorf("%s: no provider status or creation time (%+v)", what, res)
	}
}

// checkRefundLedger checks how many refunds the provider holds for
// refundID, when its ledger is readable.
func checkRefundLedger(t *testing.T, tg Target, refundID string, refunds int) {
	t.Helper()
	if tg.Refunds != nil {
		if got := tg.Refunds(refundID); got != refunds {
			t.Errorf("ledger holds %d refunds for %s, want %d", got, refundID, refunds)
		}
	}
}

func testRefundThenGet(t *testing.T, h Harness, tg Target) {
	req, charge := paid(t, h, tg)
	rreq := newRefundRequest(req, charge, 500)
	created := createRefund(t, tg, rreq)
	checkRefund(t, "refund", created, provider.Succeeded, "", rreq)
	got, err := tg.Provider.GetRefund(t.Context(), created.ID)
	if err != nil {
		t.Fatalf("get refund %s: %v", created.ID, err)
	}
	checkRefund(t, "get refund", got, created.Outcome, created.ID, rreq)
	if !got.Created.Equal(created.Created) {
		t.Errorf("get refund: created %v, want %v as the create answered", got.Created, created.Created)
	}
	checkRefundLedger(t, tg, rreq.RefundID, 1)
	// The charge is still the purchase's one charge.
	checkLedger(t, tg, req.PurchaseID, 1, 1)
}

func testRefundReplay(t *testing.T, h Harness, tg Target) {
	req, charge := paid(t, h, tg)
	rreq := newRefundRequest(req, charge, 500)
	first := createRefund(t, tg, rreq)
	checkRefund(t, "refund", first, provider.Succeeded, "", rreq)
	again := createRefund(t, tg, rreq)
	checkRefund(t, "replay", again, first.Outcome, first.ID, rreq)
	if again.Status != first.Status {
		t.Errorf("replay: status %q, want the saved %q", again.Status, first.Status)
	}
	checkRefundLedger(t, tg, rreq.RefundID, 1)
	refunds := listRefunds(t, tg, charge.PaymentID)
	if len(refunds) != 1 || refunds[0].ID != first.ID {
		t.Errorf("refunds of %s after a replay: %+v, want only %s", charge.PaymentID, refunds, first.ID)
	}
}

func testRefundMismatch(t *testing.T, h Harness, tg Target) {
	req, charge := paid(t, h, tg)
	rreq := newRefundRequest(req, charge, 500)
	first := createRefund(t, tg, rreq)
	checkRefund(t, "refund", first, provider.Succeeded, "", rreq)

	other := rreq
	other.Amount++
	res, err := tg.Provider.CreateRefund(t.Context(), other)
	if !errors.Is(err, provider.ErrIdempotencyMismatch) {
		t.Fatalf("refund with the same key and amount %d: (%+v, %v), want an error wrapping provider.ErrIdempotencyMismatch", other.Amount, res, err)
	}
	if got := provider.RefundOutcomeOf(res, err); got != provider.IdempotencyMismatch {
		t.Errorf("RefundOutcomeOf(mismatch) = %q, want %q", got, provider.IdempotencyMismatch)
	}
	again := createRefund(t, tg, rreq)
	checkRefund(t, "replay after mismatch", again, first.Outcome, first.ID, rreq)
	checkRefundLedger(t, tg, rreq.RefundID, 1)
}

// testRefundBeyondAmount: a refund of more than the payment, and one of
// more than a partial refund left of it, are rejected and make nothing.
func testRefundBeyondAmount(t *testing.T, h Harness, tg Target) {
	req, charge := paid(t, h, tg)
	rejected := func(what string, rreq provider.RefundRequest) {
		t.Helper()
		res, err := tg.Provider.CreateRefund(t.Context(), rreq)
		if !errors.Is(err, provider.ErrRefundRefused) || !errors.Is(err, provider.ErrRejected) {
			t.Fatalf("%s (%d of %d): (%+v, %v), want an error wrapping provider.ErrRefundRefused (and so ErrRejected)", what, rreq.Amount, req.Amount, res, err)
		}
		// Refused for a reason of the payment: nothing was refunded under
		// the key, and nothing will be. The refund failed.
		if got := provider.RefundOutcomeOf(res, err); got != provider.Failed {
			t.Errorf("%s: RefundOutcomeOf = %q, want %q", what, got, provider.Failed)
		}
		checkRefundLedger(t, tg, rreq.RefundID, 0)
	}
	rejected("refund beyond the payment", newRefundRequest(req, charge, req.Amount+1))
	if refunds := listRefunds(t, tg, charge.PaymentID); len(refunds) != 0 {
		t.Errorf("refunds of %s after a rejected refund: %+v, want none", charge.PaymentID, refunds)
	}
	part := newRefundRequest(req, charge, req.Amount-100)
	first := createRefund(t, tg, part)
	checkRefund(t, "partial refund", first, provider.Succeeded, "", part)
	rejected("refund beyond what remains", newRefundRequest(req, charge, 101))
	if refunds := listRefunds(t, tg, charge.PaymentID); len(refunds) != 1 || refunds[0].ID != first.ID {
		t.Errorf("refunds of %s: %+v, want only %s", charge.PaymentID, refunds, first.ID)
	}
}

func testGetRefundUnknown(t *testing.T, h Harness, tg Target) {
	id := randomID("re_")
	res, err := tg.Provider.GetRefund(t.Context(), id)
	if err != nil {
		t.Fatalf("get unknown refund %s: %v", id, err)
	}
	if res.Outcome != provider.NotFound {
		t.Errorf("get unknown refund %s: %+v, want outcome %q (never %q)", id, res, provider.NotFound, provider.Failed)
	}
}

func testListRefundsOfPayment(t *testing.T, h Harness, tg Target) {
	req, charge := paid(t, h, tg)
	if refunds := listRefunds(t, tg, charge.PaymentID); len(refunds) != 0 {
		t.Errorf("refunds of %s before any: %+v, want none", charge.PaymentID, refunds)
	}
	first, second := newRefundRequest(req, charge, 300), newRefundRequest(req, charge, 400)
	a := createRefund(t, tg, first)
	if tg.Advance != nil {
		tg.Advance(2 * time.Second) // creation times in two seconds
	}
	b := createRefund(t, tg, second)
	refunds := listRefunds(t, tg, charge.PaymentID)
	if len(refunds) != 2 {
		t.Fatalf("refunds of %s: %+v, want %s and %s", charge.PaymentID, refunds, a.ID, b.ID)
	}
	ia := slices.IndexFunc(refunds, func(r provider.RefundResult) bool { return r.ID == a.ID })
	ib := slices.IndexFunc(refunds, func(r provider.RefundResult) bool { return r.ID == b.ID })
	switch {
	case ia < 0 || ib < 0:
		t.Fatalf("refunds of %s: %+v, want %s and %s", charge.PaymentID, refunds, a.ID, b.ID)
	case refunds[ia].Created.Before(refunds[ib].Created) && ia > ib:
		t.Errorf("older %s listed after newer %s: want oldest first", a.ID, b.ID)
	}
	checkRefund(t, "listed first refund", refunds[ia], a.Outcome, a.ID, first)
	checkRefund(t, "listed second refund", refunds[ib], b.Outcome, b.ID, second)
}

func testListRefundsCreated(t *testing.T, h Harness, tg Target) {
	req, charge := paid(t, h, tg)
	rreq := newRefundRequest(req, charge, 500)
	created := createRefund(t, tg, rreq)
	checkRefund(t, "refund", created, provider.Succeeded, "", rreq)
	refunds := listRefundsCreated(t, tg, coveringWindow(tg))
	i := slices.IndexFunc(refunds, func(r provider.RefundResult) bool { return r.ID == created.ID })
	if i < 0 {
		t.Fatalf("refunds created in a window covering the refund: %d, none is %s", len(refunds), created.ID)
	}
	checkRefund(t, "listed refund", refunds[i], created.Outcome, created.ID, rreq)

	at := refunds[i].Created.Truncate(time.Second)
	for _, w := range []struct {
		what     string
		w        provider.Window
		contains bool
	}{
		{"the hour before its creation second", provider.Window{From: at.Add(-time.Hour), Until: at}, false},
		{"its creation second", provider.Window{From: at, Until: at.Add(time.Second)}, true},
		{"the hour after its creation second", provider.Window{From: at.Add(time.Second), Until: at.Add(time.Hour)}, false},
	} {
		found := slices.ContainsFunc(listRefundsCreated(t, tg, w.w), func(r provider.RefundResult) bool { return r.ID == created.ID })
		if found != w.contains {
			t.Errorf("refunds created in %s: holds %s: %v, want %v", w.what, created.ID, found, w.contains)
		}
	}
}

// listRefunds lists the refunds of paymentID and checks the listing:
// every refund of the payment, oldest first, ids unique.
func listRefunds(t *testing.T, tg Target, paymentID string) []provider.RefundResult {
	t.Helper()
	refunds, err := tg.Provider.ListRefunds(t.Context(), paymentID)
	if err != nil {
		t.Fatalf("list refunds of %s: %v", paymentID, err)
	}
	checkRefundListing(t, "refunds of "+paymentID, refunds)
	for _, r := range refunds {
		if r.PaymentID != paymentID {
			t.Errorf("refunds of %s: %s refunds %s", paymentID, r.ID, r.PaymentID)
		}
	}
	return refunds
}

// listRefundsCreated lists the refunds created in w and checks the
// listing, as list checks a listing of payments.
func listRefundsCreated(t *testing.T, tg Target, w provider.Window) []provider.RefundResult {
	t.Helper()
	refunds, err := tg.Provider.ListRefundsCreated(t.Context(), w)
	if err != nil {
		t.Fatalf("list refunds created in [%v, %v): %v", w.From, w.Until, err)
	}
	checkRefundListing(t, "refunds created", refunds)
	from, until := w.From.Truncate(time.Second), w.Until.Truncate(time.Second)
	if !until.Equal(w.Until) {
		until = until.Add(time.Second)
	}
	for _, r := range refunds {
		if r.Created.Before(from) || !r.Created.Before(until) {
			t.Errorf("refunds created in [%v, %v): %s created %v, outside the window", w.From, w.Until, r.ID, r.Created)
		}
	}
	return refunds
}

// checkRefundListing checks a listing of refunds: oldest first, ids
// unique.
func checkRefundListing(t *testing.T, what string, refunds []provider.RefundResult) {
	t.Helper()
	seen := make(map[string]bool, len(refunds))
	for i, r := range refunds {
		if i > 0 && r.Created.Before(refunds[i-1].Created) {
			t.Errorf("%s: refund %d (%s) created %v, before refund %d (%v): want oldest first", what, i, r.ID, r.Created, i-1, refunds[i-1].Created)
		}
		if seen[r.ID] {
			t.Errorf("%s: refund %s listed twice", what, r.ID)
		}
		seen[r.ID] = true
	}
}
