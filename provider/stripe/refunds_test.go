package stripe_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
)

// refundCreated is when the refunds of the tables were created.
const refundCreated = 1700000100

// stripeRefund returns a Refund object as Stripe sends it: 500 usd of
// pi_1, for refund ref_1 of purchase pur_1, with fields overridden by
// extra.
func stripeRefund(id, status string, extra map[string]any) map[string]any {
	r := map[string]any{
		"id":                       id,
		"object":                   "refund",
		"amount":                   500,
		"balance_transaction":      nil,
		"charge":                   "ch_1",
		"created":                  refundCreated,
		"currency":                 "usd",
		"metadata":                 map[string]any{"refund_id": "ref_1", "purchase_id": "pur_1"},
		"payment_intent":           "pi_1",
		"reason":                   "requested_by_customer",
		"receipt_number":           nil,
		"source_transfer_reversal": nil,
		"status":                   status,
		"transfer_reversal":        nil,
	}
	if status == "succeeded" {
		r["balance_transaction"] = "txn_1"
	}
	for k, v := range extra {
		r[k] = v
	}
	return r
}

// testRefundRequest is the refund request of the HTTP table tests.
func testRefundRequest() provider.RefundRequest {
	return provider.RefundRequest{
		IdempotencyKey: "payrecon-ref_1",
		RefundID:       "ref_1",
		PurchaseID:     "pur_1",
		PaymentID:      "pi_1",
		Amount:         500,
		Currency:       "usd",
		Reason:         "requested_by_customer",
	}
}

// refundIn returns the RefundResult of re_1 (as stripeRefund renders it)
// with outcome o in status.
func refundIn(o provider.Outcome, status string) provider.RefundResult {
	return provider.RefundResult{
		Outcome: o, ID: "re_1", PaymentID: "pi_1", RefundID: "ref_1", PurchaseID: "pur_1",
		Amount: 500, Currency: "usd", Status: status, Created: time.Unix(refundCreated, 0).UTC(),
	}
}

// refundWant is the expected answer of one refund call, as want is of a
// charge call.
type refundWant struct {
	res     provider.RefundResult
	err     error // nil, errUnknown, or a sentinel
	outcome provider.Outcome
}

func (w refundWant) check(t *testing.T, prefix string, res provider.RefundResult, err error) {
	t.Helper()
	if got := provider.RefundOutcomeOf(res, err); got != w.outcome {
		t.Errorf("RefundOutcomeOf = %q, want %q (result %+v, error %v)", got, w.outcome, res, err)
	}
	if res != w.res {
		t.Errorf("result\n got %+v\nwant %+v", res, w.res)
	}
	checkErr(t, prefix, err, w.err)
}

// refundRow is one line of a refund call's translation table: a row's
// server side and the refund answer expected.
type refundRow struct {
	row
	refund refundWant
}

// run plays r with call, as row.run does.
func (r refundRow) run(t *testing.T, prefix string, call func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error)) []recorded {
	t.Helper()
	var (
		res provider.RefundResult
		err error
	)
	reqs := r.send(t, func(ctx context.Context, p *stripe.Provider) { res, err = call(ctx, p) })
	r.refund.check(t, prefix, res, err)
	if r.wantErrIs != nil && !errors.Is(err, r.wantErrIs) {
		t.Errorf("error %v, want one wrapping %v", err, r.wantErrIs)
	}
	return reqs
}

// refundTransportRows are transportRows for a refund call: the same
// classification, the same Reason.
func refundTransportRows(t *testing.T) []refundRow {
	var rows []refundRow
	for _, r := range transportRows(t) {
		rows = append(rows, refundRow{row: r, refund: refundWant{
			res: provider.RefundResult{Reason: r.want.res.Reason}, err: r.want.err, outcome: r.want.outcome,
		}})
	}
	return rows
}

// refundStatusRows are the refund status table, row by row, as a Refund
// answer: every status Stripe documents, and one it may add.
func refundStatusRows(t *testing.T) []refundRow {
	ok := func(r map[string]any) row { return row{reply: respond(200, jsonOf(t, r))} }
	failed := refundIn(provider.Failed, "failed")
	failed.Reason = "expired_or_canceled_card"
	canceled := refundIn(provider.Failed, "canceled")
	canceled.Reason = "merchant_request"
	unknown := refundIn(provider.Unknown, "teleported")
	return []refundRow{
		{row: named("succeeded", ok(stripeRefund("re_1", "succeeded", nil))),
			refund: refundWant{res: refundIn(provider.Succeeded, "succeeded"), outcome: provider.Succeeded}},
		{row: named("pending", ok(stripeRefund("re_1", "pending", map[string]any{"pending_reason": "processing"}))),
			refund: refundWant{res: refundIn(provider.Pending, "pending"), outcome: provider.Pending}},
		{row: named("requires_action: the customer must give details", ok(stripeRefund("re_1", "requires_action", map[string]any{"next_action": map[string]any{"type": "display_details"}}))),
			refund: refundWant{res: refundIn(provider.Pending, "requires_action"), outcome: provider.Pending}},
		{row: named("failed, with its failure_reason", ok(stripeRefund("re_1", "failed", map[string]any{"failure_reason": "expired_or_canceled_card"}))),
			refund: refundWant{res: failed, outcome: provider.Failed}},
		{row: named("canceled, with its failure_reason", ok(stripeRefund("re_1", "canceled", map[string]any{"failure_reason": "merchant_request"}))),
			refund: refundWant{res: canceled, outcome: provider.Failed}},
		{row: named("a status Stripe may add: unknown, never failed", ok(stripeRefund("re_1", "teleported", nil))),
			refund: refundWant{res: unknown, err: errUnknown, outcome: provider.Unknown}},
		{row: named("metadata naming nothing (a Dashboard refund)", ok(stripeRefund("re_1", "succeeded", map[string]any{"metadata": map[string]any{}}))),
			refund: refundWant{res: func() provider.RefundResult {
				r := refundIn(provider.Succeeded, "succeeded")
				r.RefundID, r.PurchaseID = "", ""
				return r
			}(), outcome: provider.Succeeded}},
		{row: named("payment_intent expanded", ok(stripeRefund("re_1", "succeeded", map[string]any{"payment_intent": paymentIntent("pi_1", "succeeded", nil)}))),
			refund: refundWant{res: refundIn(provider.Succeeded, "succeeded"), outcome: provider.Succeeded}},
	}
}

// named returns r named name.
func named(name string, r row) row {
	r.name = name
	return r
}

// TestRefundStatusTable plays the refund status table row by row through
// GetRefund: succeeded → Succeeded, pending and requires_action →
// Pending, failed and canceled → Failed, anything else → Unknown.
func TestRefundStatusTable(t *testing.T) {
	for _, r := range refundStatusRows(t) {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			r.run(t, "stripe: retrieve refund re_1: ", func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
				return p.GetRefund(ctx, "re_1")
			})
		})
	}
}

func TestCreateRefundTranslation(t *testing.T) {
	rows := refundStatusRows(t)
	rejected := func(name, body string, reason string) refundRow {
		return refundRow{row: named(name, row{reply: respond(400, body)}),
			refund: refundWant{res: provider.RefundResult{Reason: reason}, err: stripe.ErrRejected, outcome: provider.Rejected}}
	}
	// refused: a refusal for a reason of the payment, not of the request:
	// nothing was refunded under the key, and nothing will be. The refund
	// failed (provider.ErrRefundRefused, which wraps ErrRejected).
	refused := func(name, body string, reason string) refundRow {
		return refundRow{row: named(name, row{reply: respond(400, body)}),
			refund: refundWant{res: provider.RefundResult{Reason: reason}, err: provider.ErrRefundRefused, outcome: provider.Failed}}
	}
	rows = append(rows,
		refused("400 amount_too_large: more than remains of the payment",
			`{"error":{"type":"invalid_request_error","code":"amount_too_large","param":"amount","message":"Refund amount ($5.00) is greater than unrefunded amount on charge ($2.00)"}}`, "amount_too_large"),
		refused("400 charge_already_refunded",
			`{"error":{"type":"invalid_request_error","code":"charge_already_refunded","message":"Charge ch_1 has already been refunded."}}`, "charge_already_refunded"),
		refused("400 charge_not_refundable: the payment did not succeed",
			`{"error":{"type":"invalid_request_error","code":"charge_not_refundable","param":"payment_intent","message":"This PaymentIntent (pi_1) does not have a successful charge to refund."}}`, "charge_not_refundable"),
		refused("400 charge_disputed: the payment is disputed",
			`{"error":{"type":"invalid_request_error","code":"charge_disputed","message":"Charge ch_1 has been charged back; cannot issue a refund."}}`, "charge_disputed"),
		rejected("400 resource_missing: no such payment intent",
			`{"error":{"type":"invalid_request_error","code":"resource_missing","param":"payment_intent","message":"No such payment_intent: 'pi_1'"}}`, "resource_missing"),
		rejected("400 invalid reason",
			`{"error":{"type":"invalid_request_error","code":"parameter_invalid_string","param":"reason","message":"Invalid reason"}}`, "parameter_invalid_string"),
		refundRow{row: named("404 resource_missing on a create: rejected, not a lookup's not found",
			row{reply: respond(404, `{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such payment_intent: 'pi_1'"}}`)}),
			refund: refundWant{res: provider.RefundResult{Reason: "resource_missing"}, err: stripe.ErrRejected, outcome: provider.Rejected}},
		refundRow{row: named("400 idempotency_error: same key, other parameters",
			row{reply: respond(400, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with."}}`)}),
			refund: refundWant{res: provider.RefundResult{Reason: "idempotency_error"}, err: provider.ErrIdempotencyMismatch, outcome: provider.IdempotencyMismatch}},
		refundRow{row: named("409 idempotency_key_in_use",
			row{reply: respond(409, `{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use","message":"There is currently another in-progress request using this Idempotent Key."}}`)}),
			refund: refundWant{res: provider.RefundResult{Outcome: provider.Pending, Reason: "idempotency_key_in_use"}, outcome: provider.Pending}},
		refundRow{row: named("409 conflict other than a key in use",
			row{reply: respond(409, `{"error":{"type":"invalid_request_error","message":"Conflict"}}`)}),
			refund: refundWant{res: provider.RefundResult{Reason: "invalid_request_error"}, err: errUnknown, outcome: provider.Unknown}},
		refundRow{row: named("402 card_error, which a refund never gets: unknown",
			row{reply: respond(402, `{"error":{"type":"card_error","code":"card_declined","message":"Your card was declined."}}`)}),
			refund: refundWant{res: provider.RefundResult{Reason: "card_declined"}, err: errUnknown, outcome: provider.Unknown}},
	)
	rows = append(rows, refundTransportRows(t)...)
	req := testRefundRequest()
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			reqs := r.run(t, "stripe: create refund ref_1 of pi_1 (key payrecon-ref_1): ", func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
				return p.CreateRefund(ctx, req)
			})
			for _, got := range reqs {
				checkRefundRequest(t, got, req)
			}
		})
	}
}

// checkRefundRequest checks that got is the Stripe request for req: the
// refund's parameters, its key, and no currency.
func checkRefundRequest(t *testing.T, got recorded, req provider.RefundRequest) {
	t.Helper()
	if got.Method != http.MethodPost || got.Path != "/v1/refunds" {
		t.Errorf("request %s %s, want POST /v1/refunds", got.Method, got.Path)
	}
	if k := got.Header.Get("Idempotency-Key"); k != req.IdempotencyKey {
		t.Errorf("Idempotency-Key %q, want %q", k, req.IdempotencyKey)
	}
	if a := got.Header.Get("Authorization"); a != "Bearer "+testKey {
		t.Errorf("Authorization %q, want the configured key", a)
	}
	wantForm := map[string]string{
		"payment_intent":        req.PaymentID,
		"amount":                fmt.Sprint(req.Amount),
		"metadata[refund_id]":   req.RefundID,
		"metadata[purchase_id]": req.PurchaseID,
	}
	if req.Reason != "" {
		wantForm["reason"] = req.Reason
	}
	for k, v := range wantForm {
		if got.Form.Get(k) != v {
			t.Errorf("form %s = %q, want %q", k, got.Form.Get(k), v)
		}
	}
	for k := range got.Form {
		if _, ok := wantForm[k]; !ok {
			t.Errorf("unexpected form parameter %s = %q", k, got.Form.Get(k))
		}
	}
}

// TestCreateRefundOmitsReason checks that a refund without a reason sends
// none.
func TestCreateRefundOmitsReason(t *testing.T) {
	srv := newFakeStripe(t, respond(200, jsonOf(t, stripeRefund("re_1", "succeeded", map[string]any{"reason": nil}))))
	p := newProvider(t, srv.URL, stripe.Config{})
	req := testRefundRequest()
	req.Reason = ""
	if _, err := p.CreateRefund(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	for _, got := range srv.requests() {
		checkRefundRequest(t, got, req)
	}
}

func TestGetRefundTranslation(t *testing.T) {
	rows := []refundRow{
		{row: named("404 resource_missing: not found, never failed",
			row{reply: respond(404, `{"error":{"type":"invalid_request_error","code":"resource_missing","param":"id","message":"No such refund: 're_1'"}}`)}),
			refund: refundWant{res: provider.RefundResult{Outcome: provider.NotFound, Reason: "resource_missing"}, outcome: provider.NotFound}},
		{row: named("404 unrecognised URL: a misconfigured base, not a missing refund",
			row{reply: respond(404, `{"error":{"type":"invalid_request_error","message":"Unrecognized request URL (GET: /v1/refund/re_1)."}}`)}),
			refund: refundWant{res: provider.RefundResult{Reason: "invalid_request_error"}, err: stripe.ErrRejected, outcome: provider.Rejected}},
	}
	rows = append(rows, refundTransportRows(t)...)
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			reqs := r.run(t, "stripe: retrieve refund re_1: ", func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
				return p.GetRefund(ctx, "re_1")
			})
			for _, got := range reqs {
				if got.Method != http.MethodGet || got.Path != "/v1/refunds/re_1" {
					t.Errorf("request %s %s, want GET /v1/refunds/re_1", got.Method, got.Path)
				}
				if k := got.Header.Get("Idempotency-Key"); k != "" {
					t.Errorf("GET carries Idempotency-Key %q", k)
				}
			}
		})
	}
}

// refundsAt returns n refunds of paymentID, ids prefix000…, created from
// at on, two a second.
func refundsAt(prefix, paymentID string, at, n int) []map[string]any {
	var out []map[string]any
	for i := range n {
		out = append(out, stripeRefund(fmt.Sprintf("%s%03d", prefix, i), "succeeded", map[string]any{
			"payment_intent": paymentID, "created": at + i/2,
		}))
	}
	return out
}

// TestListRefundsReadsEveryPageOldestFirst lists the 150 refunds of one
// payment among the refunds of another: two pages of 100, each request
// well formed, every refund of the payment, oldest first.
func TestListRefundsReadsEveryPageOldestFirst(t *testing.T) {
	refunds := append(refundsAt("re_a", "pi_1", refundCreated, 150), refundsAt("re_b", "pi_2", refundCreated, 20)...)
	srv := newFakeStripe(t, stripeListOf(t, "/v1/refunds", "refund", refunds))
	p := newProvider(t, srv.URL, stripe.Config{})
	got, err := p.ListRefunds(t.Context(), "pi_1", nil)
	if err != nil {
		t.Fatalf("ListRefunds: %v", err)
	}
	if len(got) != 150 {
		t.Fatalf("ListRefunds: %d refunds, want 150", len(got))
	}
	for i, r := range got {
		if want := fmt.Sprintf("re_a%03d", i); r.ID != want || r.PaymentID != "pi_1" || r.Outcome != provider.Succeeded {
			t.Errorf("refund %d: %+v, want %s of pi_1, succeeded", i, r, want)
		}
	}
	reqs := srv.requests()
	if len(reqs) != 2 {
		t.Fatalf("server got %d requests, want 2 pages", len(reqs))
	}
	for i, r := range reqs {
		if r.Method != http.MethodGet || r.Path != "/v1/refunds" || r.Form.Get("payment_intent") != "pi_1" || r.Form.Get("limit") != "100" {
			t.Errorf("request %d: %s %s %v, want GET /v1/refunds?payment_intent=pi_1&limit=100", i, r.Method, r.Path, r.Form)
		}
		if after := r.Form.Get("starting_after"); (i == 0) != (after == "") {
			t.Errorf("request %d: starting_after %q", i, after)
		}
	}
}

// TestListRefundsCreatedWindow lists the refunds created in a window: the
// request's created filters are the seconds covering it, the answer
// oldest first, and a refund in a status the table does not know is
// listed with Outcome Unknown rather than failing the listing.
func TestListRefundsCreatedWindow(t *testing.T) {
	refunds := []map[string]any{
		stripeRefund("re_before", "succeeded", map[string]any{"created": refundCreated - 1}),
		stripeRefund("re_1", "succeeded", map[string]any{"created": refundCreated}),
		stripeRefund("re_2", "teleported", map[string]any{"created": refundCreated + 5, "payment_intent": "pi_2", "metadata": map[string]any{}}),
		stripeRefund("re_3", "failed", map[string]any{"created": refundCreated + 9, "failure_reason": "lost_or_stolen_card"}),
		stripeRefund("re_after", "succeeded", map[string]any{"created": refundCreated + 10}),
	}
	srv := newFakeStripe(t, stripeListOf(t, "/v1/refunds", "refund", refunds))
	p := newProvider(t, srv.URL, stripe.Config{})
	w := provider.Window{From: time.Unix(refundCreated, 0), Until: time.Unix(refundCreated+9, 500_000_000)}
	got, err := p.ListRefundsCreated(t.Context(), w, nil)
	if err != nil {
		t.Fatalf("ListRefundsCreated: %v", err)
	}
	var ids []string
	for _, r := range got {
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, []string{"re_1", "re_2", "re_3"}) {
		t.Fatalf("ListRefundsCreated: %v, want re_1, re_2, re_3", ids)
	}
	if got[1].Outcome != provider.Unknown || got[1].PaymentID != "pi_2" || got[1].RefundID != "" {
		t.Errorf("refund in an unknown status: %+v, want outcome unknown, of pi_2, naming no refund", got[1])
	}
	if got[2].Outcome != provider.Failed || got[2].Reason != "lost_or_stolen_card" {
		t.Errorf("failed refund: %+v, want outcome failed with its failure_reason", got[2])
	}
	reqs := srv.requests()
	if len(reqs) != 1 {
		t.Fatalf("server got %d requests, want 1", len(reqs))
	}
	q := reqs[0].Form
	if q.Get("created[gte]") != fmt.Sprint(refundCreated) || q.Get("created[lt]") != fmt.Sprint(refundCreated+10) || q.Has("payment_intent") {
		t.Errorf("request %v, want created[gte]=%d, created[lt]=%d and no payment_intent", q, refundCreated, refundCreated+10)
	}
}

// TestListRefundsErrors checks that a failed listing returns its
// translated error and no refunds, on its first page or a later one.
func TestListRefundsErrors(t *testing.T) {
	asResult := func(list func(ctx context.Context, p *stripe.Provider) ([]provider.RefundResult, error)) func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
		return func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			refunds, err := list(ctx, p)
			if err != nil && refunds != nil {
				t.Errorf("listing failed (%v) and returned %d refunds, want none", err, len(refunds))
			}
			return provider.RefundResult{}, err
		}
	}
	byPayment := asResult(func(ctx context.Context, p *stripe.Provider) ([]provider.RefundResult, error) {
		return p.ListRefunds(ctx, "pi_1", nil)
	})
	rows := []refundRow{
		{row: named("400 resource_missing: no such payment intent",
			row{reply: respond(400, `{"error":{"type":"invalid_request_error","code":"resource_missing","param":"payment_intent","message":"No such payment_intent: 'pi_1'"}}`)}),
			refund: refundWant{err: stripe.ErrRejected, outcome: provider.Rejected}},
		{row: named("409 idempotency_key_in_use cannot answer a listing",
			row{reply: respond(409, `{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use","message":"in use"}}`)}),
			refund: refundWant{err: errUnknown, outcome: provider.Unknown}},
	}
	for _, r := range refundTransportRows(t) {
		r.refund.res = provider.RefundResult{}
		rows = append(rows, r)
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			r.run(t, "stripe: list refunds of payment intent pi_1: ", byPayment)
		})
	}

	t.Run("a later page fails", func(t *testing.T) {
		t.Parallel()
		list := stripeListOf(t, "/v1/refunds", "refund", refundsAt("re_", "pi_1", refundCreated, 150))
		srv := newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Has("starting_after") {
				respond(500, `{"error":{"type":"api_error","message":"An unknown error occurred"}}`)(w, r)
				return
			}
			list(w, r)
		})
		p := newProvider(t, srv.URL, stripe.Config{})
		res, err := byPayment(t.Context(), p)
		refundWant{err: errUnknown, outcome: provider.Unknown}.check(t, "stripe: list refunds of payment intent pi_1: ", res, err)
		if n := len(srv.requests()); n != 2 {
			t.Errorf("server got %d requests, want 2 pages", n)
		}
	})
}

// TestRefundCallsRefusedBeforeSending checks the arguments the refund
// calls refuse without a request: a create without a usable key or
// without a payment or a positive amount (Stripe would refund all that
// remains), empty ids, and windows List refuses.
func TestRefundCallsRefusedBeforeSending(t *testing.T) {
	with := func(change func(*provider.RefundRequest)) provider.RefundRequest {
		req := testRefundRequest()
		change(&req)
		return req
	}
	t0 := time.Unix(1700000000, 0)
	tests := []struct {
		name string
		call func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error)
	}{
		{"create without key", func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			return p.CreateRefund(ctx, with(func(r *provider.RefundRequest) { r.IdempotencyKey = "" }))
		}},
		{"create with a padded key", func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			return p.CreateRefund(ctx, with(func(r *provider.RefundRequest) { r.IdempotencyKey += " " }))
		}},
		{"create with a key over 255 bytes", func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			return p.CreateRefund(ctx, with(func(r *provider.RefundRequest) { r.IdempotencyKey = strings.Repeat("k", 256) }))
		}},
		{"create without payment", func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			return p.CreateRefund(ctx, with(func(r *provider.RefundRequest) { r.PaymentID = "" }))
		}},
		{"create of a zero amount: Stripe would refund everything", func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			return p.CreateRefund(ctx, with(func(r *provider.RefundRequest) { r.Amount = 0 }))
		}},
		{"create of a negative amount", func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			return p.CreateRefund(ctx, with(func(r *provider.RefundRequest) { r.Amount = -5 }))
		}},
		{"get of empty id", func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			return p.GetRefund(ctx, "")
		}},
		{"list of empty payment id", func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			_, err := p.ListRefunds(ctx, "", nil)
			return provider.RefundResult{}, err
		}},
		{"list of a zero window", func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			_, err := p.ListRefundsCreated(ctx, provider.Window{}, nil)
			return provider.RefundResult{}, err
		}},
		{"list of an empty window", func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			_, err := p.ListRefundsCreated(ctx, provider.Window{From: t0, Until: t0}, nil)
			return provider.RefundResult{}, err
		}},
		{"list of a window before the Unix epoch", func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			_, err := p.ListRefundsCreated(ctx, provider.Window{From: time.Unix(-1, 0), Until: t0}, nil)
			return provider.RefundResult{}, err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
				t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
			})
			p := newProvider(t, srv.URL, stripe.Config{})
			res, err := tc.call(t.Context(), p)
			refundWant{err: stripe.ErrRejected, outcome: provider.Rejected}.check(t, "stripe: ", res, err)
		})
	}
}

// TestRefundCallsWithDoneContextSendNothing checks that a refund call
// whose context is already done sends nothing, outcome Unknown.
func TestRefundCallsWithDoneContextSendNothing(t *testing.T) {
	w := provider.Window{From: time.Unix(1700000000, 0), Until: time.Unix(1700001000, 0)}
	calls := map[string]func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error){
		"create": func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			return p.CreateRefund(ctx, testRefundRequest())
		},
		"get": func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			return p.GetRefund(ctx, "re_1")
		},
		"list": func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			_, err := p.ListRefunds(ctx, "pi_1", nil)
			return provider.RefundResult{}, err
		},
		"list created": func(ctx context.Context, p *stripe.Provider) (provider.RefundResult, error) {
			_, err := p.ListRefundsCreated(ctx, w, nil)
			return provider.RefundResult{}, err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
				t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
			})
			p := newProvider(t, srv.URL, stripe.Config{})
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			res, err := call(ctx, p)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("error %v, want one wrapping context.Canceled", err)
			}
			if got := provider.RefundOutcomeOf(res, err); got != provider.Unknown {
				t.Errorf("RefundOutcomeOf = %q, want %q", got, provider.Unknown)
			}
		})
	}
}
