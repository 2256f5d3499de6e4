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
// the charge once its index catches up, and the test card for declines is
// declined. Hooks the provider cannot offer (a simulated clock, a readable
// ledger) are optional; the checks that need them are skipped without them.
package providertest

import (
	"crypto/rand"
	"errors"
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
)

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
	// Charges returns how many charges (declines included) the provider
	// holds for a purchase. Nil when its ledger cannot be read.
	Charges func(purchaseID string) int
	// MoneyTaken returns how many of those charges took money (succeeded,
	// or processing towards success). Nil when its ledger cannot be read.
	MoneyTaken func(purchaseID string) int
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

// newRequest returns a create request for a new purchase. Ids are random
// because Stripe test mode keeps keys and metadata across runs.
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
// when id is not empty, payment id id.
func checkCharge(t *testing.T, what string, res provider.Result, want provider.Outcome, id string, req provider.CreateRequest) {
	t.Helper()
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
