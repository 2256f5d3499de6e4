package providertest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// The cases of refunds: create, replay, get, listings and the limits.

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
	refunds, err := tg.Provider.ListRefunds(t.Context(), paymentID, nil)
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
	refunds, err := tg.Provider.ListRefundsCreated(t.Context(), w, nil)
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
