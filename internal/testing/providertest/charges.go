package providertest

import (
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// The cases of a charge: create, replay under its key, status, search
// and declines, and the helpers they share.

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
