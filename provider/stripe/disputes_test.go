package stripe_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
)

// disputeCreated is when the disputes of the listing tables were opened,
// within listWindow; disputeDueBy when their evidence is due.
const (
	disputeCreated = 1700000200
	disputeDueBy   = 1701561599
)

// disputePrefix starts every error of ListDisputes(listWindow).
const disputePrefix = "stripe: list disputes created in [2023-11-14T22:13:20Z, 2023-11-14T22:30:00Z): "

// stripeDispute returns a Dispute object as Stripe lists it with
// expand[]=data.payment_intent: a chargeback of 1999 usd of pi_1
// (purchase pur_1, charge ch_1) awaiting a response, no money moved yet,
// with fields overridden by extra.
func stripeDispute(id, status string, extra map[string]any) map[string]any {
	d := map[string]any{
		"id":                   id,
		"object":               "dispute",
		"amount":               1999,
		"balance_transactions": []any{},
		"charge":               "ch_1",
		"created":              disputeCreated,
		"currency":             "usd",
		"evidence_details": map[string]any{
			"due_by": disputeDueBy, "has_evidence": false, "past_due": false, "submission_count": 0,
		},
		"is_charge_refundable": false,
		"livemode":             false,
		"metadata":             map[string]any{},
		"payment_intent":       paymentIntent("pi_1", "succeeded", nil),
		"reason":               "fraudulent",
		"status":               status,
	}
	for k, v := range extra {
		d[k] = v
	}
	return d
}

// balanceTransaction returns a dispute's balance transaction as Stripe
// renders it: amount moved (below 0 withdrawn, above reinstated) and the
// dispute fee charged (or returned) with it, which is not the disputed
// money.
func balanceTransaction(id string, amount, fee int64) map[string]any {
	return map[string]any{
		"id": id, "object": "balance_transaction", "amount": amount, "fee": fee, "net": amount - fee,
		"currency": "usd", "type": "adjustment", "reporting_category": "dispute", "status": "pending",
		"created": disputeCreated,
	}
}

// disputeIn returns the provider.Dispute of du_1 as stripeDispute renders
// it, in status.
func disputeIn(status string) provider.Dispute {
	return provider.Dispute{
		ID: "du_1", PaymentID: "pi_1", ChargeID: "ch_1", PurchaseID: "pur_1", Amount: 1999, Currency: "usd",
		Reason: "fraudulent", Status: status, EvidenceDueBy: time.Unix(disputeDueBy, 0).UTC(),
		Created: time.Unix(disputeCreated, 0).UTC(),
	}
}

// listDisputesAsResult returns a call listing the disputes of w, for the
// row tables: it reports the error with a zero Result, and fails the test
// if a failed listing returns disputes.
func listDisputesAsResult(t *testing.T, w provider.Window) func(ctx context.Context, p *stripe.Provider) (provider.Result, error) {
	return func(ctx context.Context, p *stripe.Provider) (provider.Result, error) {
		disputes, err := p.ListDisputes(ctx, w, nil)
		if err != nil && disputes != nil {
			t.Errorf("ListDisputes failed (%v) and returned %d disputes, want none", err, len(disputes))
		}
		return provider.Result{}, err
	}
}

// TestListDisputesReadsEveryPageOldestFirst lists 250 disputes, two a
// second, between others outside the window: three pages of 100, each
// request well formed (the window's seconds, the page size, the
// PaymentIntent expanded, the cursor), every dispute, oldest first.
func TestListDisputesReadsEveryPageOldestFirst(t *testing.T) {
	const base = 1700000000
	var disputes []map[string]any
	for i := range 3 {
		disputes = append(disputes, stripeDispute(fmt.Sprintf("du_before%d", i), "needs_response", map[string]any{"created": base - 10 + i}))
	}
	var want []string
	for i := range 250 {
		id := fmt.Sprintf("du_%03d", i)
		want = append(want, id)
		disputes = append(disputes, stripeDispute(id, "needs_response", map[string]any{"created": base + i/2}))
	}
	for i := range 3 {
		disputes = append(disputes, stripeDispute(fmt.Sprintf("du_after%d", i), "needs_response", map[string]any{"created": base + 125 + i}))
	}
	srv := newFakeStripe(t, stripeListOf(t, "/v1/disputes", "dispute", disputes))
	p := newProvider(t, srv.URL, stripe.Config{})

	w := provider.Window{From: time.Unix(base, 400_000_000), Until: time.Unix(base+124, 1)}
	got, err := p.ListDisputes(t.Context(), w, nil)
	if err != nil {
		t.Fatalf("ListDisputes: %v", err)
	}
	var ids []string
	for _, d := range got {
		ids = append(ids, d.ID)
	}
	if !slices.Equal(ids, want) {
		t.Errorf("listed %d disputes\n got %v\nwant %v", len(ids), ids, want)
	}

	reqs := srv.requests()
	wantAfter := []string{"", "du_150", "du_050"} // the last (oldest) of the page before
	if len(reqs) != len(wantAfter) {
		t.Fatalf("server got %d requests, want %d pages", len(reqs), len(wantAfter))
	}
	for i, r := range reqs {
		if r.Method != http.MethodGet || r.Path != "/v1/disputes" {
			t.Errorf("request %d: %s %s, want GET /v1/disputes", i, r.Method, r.Path)
		}
		wantForm := map[string]string{
			"created[gte]": strconv.Itoa(base),
			"created[lt]":  strconv.Itoa(base + 125),
			"limit":        "100",
			"expand[0]":    "data.payment_intent",
		}
		if wantAfter[i] != "" {
			wantForm["starting_after"] = wantAfter[i]
		}
		for k, v := range wantForm {
			if got := r.Form[k]; len(got) != 1 || got[0] != v {
				t.Errorf("request %d: %s = %q, want %q once", i, k, got, v)
			}
		}
		for k := range r.Form {
			if _, ok := wantForm[k]; !ok {
				t.Errorf("request %d: unexpected parameter %s = %q", i, k, r.Form.Get(k))
			}
		}
		if k := r.Header.Get("Idempotency-Key"); k != "" {
			t.Errorf("request %d: GET carries Idempotency-Key %q", i, k)
		}
	}
}

// TestListDisputesTranslates checks each listed dispute's translation:
// the purchase from the expanded payment's metadata, the balance
// transactions summed by sign (fees apart), the evidence's due date, and
// what a dispute lacks reported as missing.
func TestListDisputesTranslates(t *testing.T) {
	withdrawal := balanceTransaction("txn_w", -1999, 1500)
	reinstatement := balanceTransaction("txn_r", 1999, -1500)
	rows := []struct {
		name   string
		status string
		extra  map[string]any
		want   func(d *provider.Dispute)
	}{
		{name: "a chargeback awaiting a response", status: "needs_response"},
		{name: "funds withdrawn: the amount, not the fee", status: "needs_response",
			extra: map[string]any{"balance_transactions": []any{withdrawal}},
			want:  func(d *provider.Dispute) { d.Withdrawn = 1999 }},
		{name: "won: withdrawn and reinstated", status: "won",
			extra: map[string]any{"balance_transactions": []any{withdrawal, reinstatement}},
			want:  func(d *provider.Dispute) { d.Withdrawn, d.Reinstated = 1999, 1999 }},
		{name: "partial chargeback, partly reinstated", status: "lost",
			extra: map[string]any{"amount": 800, "balance_transactions": []any{balanceTransaction("txn_w", -800, 1500), balanceTransaction("txn_r", 300, 0)}},
			want:  func(d *provider.Dispute) { d.Amount, d.Withdrawn, d.Reinstated = 800, 800, 300 }},
		{name: "an inquiry: the payment still refundable", status: "warning_needs_response",
			extra: map[string]any{"is_charge_refundable": true, "reason": "general"},
			want:  func(d *provider.Dispute) { d.ChargeRefundable, d.Reason = true, "general" }},
		{name: "no response possible: due_by 0", status: "lost",
			extra: map[string]any{"evidence_details": map[string]any{"due_by": 0, "has_evidence": false}},
			want:  func(d *provider.Dispute) { d.EvidenceDueBy = time.Time{} }},
		{name: "no evidence_details", status: "won", extra: map[string]any{"evidence_details": nil},
			want: func(d *provider.Dispute) { d.EvidenceDueBy = time.Time{} }},
		{name: "payment_intent not expanded: no purchase", status: "under_review", extra: map[string]any{"payment_intent": "pi_1"},
			want: func(d *provider.Dispute) { d.PurchaseID = "" }},
		{name: "no payment_intent (a charge of another integration): foreign", status: "needs_response",
			extra: map[string]any{"payment_intent": nil},
			want:  func(d *provider.Dispute) { d.PaymentID, d.PurchaseID = "", "" }},
		{name: "a payment naming no purchase", status: "needs_response",
			extra: map[string]any{"payment_intent": paymentIntent("pi_1", "succeeded", map[string]any{"metadata": map[string]any{}})},
			want:  func(d *provider.Dispute) { d.PurchaseID = "" }},
		{name: "the purchase exactly as stored", status: "needs_response",
			extra: map[string]any{"payment_intent": paymentIntent("pi_1", "succeeded", map[string]any{"metadata": map[string]any{"purchase_id": " pur_1"}})},
			want:  func(d *provider.Dispute) { d.PurchaseID = " pur_1" }},
		{name: "no charge", status: "needs_response", extra: map[string]any{"charge": nil},
			want: func(d *provider.Dispute) { d.ChargeID = "" }},
		{name: "charge expanded", status: "needs_response", extra: map[string]any{"charge": map[string]any{"id": "ch_1", "object": "charge"}}},
		{name: "a status Stripe may add, kept as it is", status: "teleported",
			want: func(d *provider.Dispute) { d.Status = "teleported" }},
		{name: "currency as Stripe gives it", status: "needs_response", extra: map[string]any{"currency": "eur"},
			want: func(d *provider.Dispute) { d.Currency = "eur" }},
	}
	var objects []map[string]any
	var want []provider.Dispute
	for i, r := range rows {
		extra := map[string]any{"created": disputeCreated + i}
		for k, v := range r.extra {
			extra[k] = v
		}
		id := fmt.Sprintf("du_%02d", i)
		objects = append(objects, stripeDispute(id, r.status, extra))
		d := disputeIn(r.status)
		d.ID, d.Created = id, time.Unix(int64(disputeCreated+i), 0).UTC()
		if r.want != nil {
			r.want(&d)
		}
		want = append(want, d)
	}
	srv := newFakeStripe(t, stripeListOf(t, "/v1/disputes", "dispute", objects))
	p := newProvider(t, srv.URL, stripe.Config{})
	got, err := p.ListDisputes(t.Context(), listWindow, nil)
	if err != nil {
		t.Fatalf("ListDisputes: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("listed %d disputes, want %d: %+v", len(got), len(want), got)
	}
	for i, r := range rows {
		if got[i] != want[i] {
			t.Errorf("%s:\n got %+v\nwant %+v", r.name, got[i], want[i])
		}
		if got[i].Created.Location() != time.UTC || got[i].EvidenceDueBy.Location() != time.UTC {
			t.Errorf("%s: times %v, %v not in UTC", r.name, got[i].Created, got[i].EvidenceDueBy)
		}
	}
}

// TestListDisputesRefusesMalformed: a dispute without id (which could not
// even serve as the next page's cursor), with an amount not positive or
// without currency fails the listing, outcome unknown: a listing that
// left it out would pass for complete.
func TestListDisputesRefusesMalformed(t *testing.T) {
	rows := []struct {
		name    string
		extra   map[string]any
		mention string
	}{
		{"no id", map[string]any{"id": ""}, "without id"},
		{"amount 0", map[string]any{"amount": 0}, "amount 0"},
		{"negative amount", map[string]any{"amount": -1999}, "amount -1999"},
		{"no amount", map[string]any{"amount": nil}, "amount 0"},
		{"no currency", map[string]any{"currency": ""}, "no currency"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			srv := newFakeStripe(t, stripeListOf(t, "/v1/disputes", "dispute", []map[string]any{
				stripeDispute("du_good", "needs_response", nil),
				stripeDispute("du_bad", "needs_response", r.extra),
			}))
			p := newProvider(t, srv.URL, stripe.Config{})
			res, err := listDisputesAsResult(t, listWindow)(t.Context(), p)
			want{err: errUnknown, outcome: provider.Unknown}.check(t, disputePrefix, res, err)
			if err != nil && !strings.Contains(err.Error(), r.mention) {
				t.Errorf("error %q does not say %q", err, r.mention)
			}
		})
	}
}

// TestListDisputesErrors checks that a failed listing returns its
// translated error, as List's, and no disputes, wherever it fails.
func TestListDisputesErrors(t *testing.T) {
	rows := []row{
		{name: "404: a misconfigured base, not an empty listing",
			reply: respond(404, `{"error":{"type":"invalid_request_error","message":"Unrecognized request URL (GET: /v1/dispute)."}}`),
			want:  want{err: stripe.ErrRejected, outcome: provider.Rejected}},
		{name: "400 invalid parameter", reply: respond(400, `{"error":{"type":"invalid_request_error","code":"parameter_invalid_integer","param":"created[gte]","message":"Invalid integer"}}`),
			want: want{err: stripe.ErrRejected, outcome: provider.Rejected}},
		{name: "403 a restricted key without disputes' read permission",
			reply: respond(403, `{"error":{"type":"invalid_request_error","message":"The provided key 'rk_test_***' does not have the required permissions for this endpoint."}}`),
			want:  want{err: stripe.ErrRejected, outcome: provider.Rejected}},
		{name: "409 idempotency_key_in_use cannot answer a listing",
			reply: respond(409, `{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use","message":"in use"}}`),
			want:  want{err: errUnknown, outcome: provider.Unknown}},
	}
	for _, r := range transportRows(t) {
		r.want.res = provider.Result{}
		rows = append(rows, r)
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			r.run(t, disputePrefix, listDisputesAsResult(t, listWindow))
		})
	}

	t.Run("a later page fails", func(t *testing.T) {
		t.Parallel()
		var disputes []map[string]any
		for i := range 150 {
			disputes = append(disputes, stripeDispute(fmt.Sprintf("du_%03d", i), "needs_response", map[string]any{"created": disputeCreated + i%100}))
		}
		list := stripeListOf(t, "/v1/disputes", "dispute", disputes)
		srv := newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Has("starting_after") {
				respond(429, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`)(w, r)
				return
			}
			list(w, r)
		})
		p := newProvider(t, srv.URL, stripe.Config{})
		res, err := listDisputesAsResult(t, listWindow)(t.Context(), p)
		want{err: provider.ErrRateLimited, outcome: provider.RetryLater}.check(t, disputePrefix, res, err)
		if n := len(srv.requests()); n != 2 {
			t.Errorf("server got %d requests, want 2 pages", n)
		}
	})
}

// TestListDisputesGatedPerPage: the gate is passed once before each
// request, the first included; a gate's error stops the listing before
// the request it guards, with no disputes.
func TestListDisputesGatedPerPage(t *testing.T) {
	var disputes []map[string]any
	for i := range 5 {
		disputes = append(disputes, stripeDispute(fmt.Sprintf("du_%d", i), "needs_response", map[string]any{"created": disputeCreated + i}))
	}
	errShut := errors.New("gate shut")
	for _, failOn := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("fail on pass %d", failOn), func(t *testing.T) {
			t.Parallel()
			srv := newFakeStripe(t, stripeListOf(t, "/v1/disputes", "dispute", disputes))
			p := newProvider(t, srv.URL, stripe.Config{ListPageSize: 2})
			passes := 0
			gate := func(ctx context.Context) error {
				passes++
				if n := len(srv.requests()); n != passes-1 {
					t.Errorf("pass %d after %d requests, want %d: one pass before each request", passes, n, passes-1)
				}
				if passes == failOn {
					return errShut
				}
				return nil
			}
			got, err := p.ListDisputes(t.Context(), listWindow, gate)
			reqs := len(srv.requests())
			if failOn == 0 {
				if err != nil || len(got) != 5 {
					t.Fatalf("ListDisputes = %d disputes, %v; want 5", len(got), err)
				}
				if passes != 3 || reqs != 3 {
					t.Errorf("%d passes, %d requests; want 3 of each (pages of 2, 2 and 1)", passes, reqs)
				}
				return
			}
			if !errors.Is(err, errShut) || got != nil {
				t.Fatalf("ListDisputes = %v, %v; want no disputes and an error wrapping the gate's", got, err)
			}
			if !strings.HasPrefix(err.Error(), disputePrefix) {
				t.Errorf("error %q does not start with %q", err, disputePrefix)
			}
			if passes != failOn || reqs != failOn-1 {
				t.Errorf("%d passes, %d requests; want %d and %d", passes, reqs, failOn, failOn-1)
			}
		})
	}
}

// TestListDisputesSendsNothing: a window List refuses is refused
// (ErrRejected), and a done context reported (outcome unknown), without
// a request.
func TestListDisputesSendsNothing(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		w    provider.Window
		want want
	}{
		{"zero window", t.Context(), provider.Window{}, want{err: stripe.ErrRejected, outcome: provider.Rejected}},
		{"empty window", t.Context(), provider.Window{From: t0, Until: t0}, want{err: stripe.ErrRejected, outcome: provider.Rejected}},
		{"window before the Unix epoch", t.Context(), provider.Window{From: time.Unix(-1, 0), Until: t0}, want{err: stripe.ErrRejected, outcome: provider.Rejected}},
		{"done context", canceled, listWindow, want{err: context.Canceled, outcome: provider.Unknown}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
				t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
			})
			p := newProvider(t, srv.URL, stripe.Config{})
			res, err := listDisputesAsResult(t, tc.w)(tc.ctx, p)
			tc.want.check(t, "stripe: list disputes created in [", res, err)
		})
	}
}

// whDispute returns a Dispute object as Stripe renders it in an event: a
// chargeback of 300 usd of pi_3SAbCdEfGhIjKlMn (its id only, as events
// carry it), with fields overridden by extra.
func whDispute(id, status string, extra map[string]any) map[string]any {
	d := map[string]any{
		"id":                   id,
		"object":               "dispute",
		"amount":               300,
		"balance_transactions": []any{},
		"charge":               "ch_3SAbCdEfGhIjKlMn0",
		"created":              whCreated.Unix() - 100,
		"currency":             "usd",
		"evidence":             map[string]any{"customer_email_address": nil, "uncategorized_text": nil},
		"evidence_details": map[string]any{
			"due_by": whCreated.Unix() + 86400*14, "has_evidence": false, "past_due": false, "submission_count": 0,
		},
		"is_charge_refundable": false,
		"livemode":             false,
		"metadata":             map[string]any{},
		"payment_intent":       "pi_3SAbCdEfGhIjKlMn",
		"reason":               "product_not_received",
		"status":               status,
	}
	for k, v := range extra {
		d[k] = v
	}
	return d
}

// whDisputeIn returns the provider.Dispute of whDispute(id, status, nil).
func whDisputeIn(id, status string) provider.Dispute {
	return provider.Dispute{
		ID: id, PaymentID: "pi_3SAbCdEfGhIjKlMn", ChargeID: "ch_3SAbCdEfGhIjKlMn0", Amount: 300, Currency: "usd",
		Reason: "product_not_received", Status: status, EvidenceDueBy: whCreated.Add(14 * 24 * time.Hour),
		Created: whCreated.Add(-100 * time.Second),
	}
}

// TestWebhookTranslatesDisputeEvents checks the five dispute event types
// and what a dispute may carry: each is Pending (a dispute settles no
// payment), about the disputed payment, with the dispute's money and the
// dispute itself.
func TestWebhookTranslatesDisputeEvents(t *testing.T) {
	const pi = "pi_3SAbCdEfGhIjKlMn"
	withdrawal := balanceTransaction("txn_w", -300, 1500)
	reinstatement := balanceTransaction("txn_r", 300, -1500)
	rows := []struct {
		name   string
		typ    string
		status string
		extra  map[string]any
		want   func(d *provider.Dispute)
	}{
		{name: "created", typ: provider.EventDisputeCreated, status: "needs_response"},
		{name: "created, an inquiry", typ: provider.EventDisputeCreated, status: "warning_needs_response",
			extra: map[string]any{"is_charge_refundable": true, "reason": "general"},
			want:  func(d *provider.Dispute) { d.ChargeRefundable, d.Reason = true, "general" }},
		{name: "updated: evidence submitted", typ: provider.EventDisputeUpdated, status: "under_review"},
		{name: "funds withdrawn", typ: provider.EventDisputeFundsWithdrawn, status: "needs_response",
			extra: map[string]any{"balance_transactions": []any{withdrawal}},
			want:  func(d *provider.Dispute) { d.Withdrawn = 300 }},
		{name: "funds reinstated", typ: provider.EventDisputeFundsReinstated, status: "won",
			extra: map[string]any{"balance_transactions": []any{withdrawal, reinstatement}},
			want:  func(d *provider.Dispute) { d.Withdrawn, d.Reinstated = 300, 300 }},
		{name: "closed, lost", typ: provider.EventDisputeClosed, status: "lost",
			extra: map[string]any{"balance_transactions": []any{withdrawal}},
			want:  func(d *provider.Dispute) { d.Withdrawn = 300 }},
		{name: "closed, an inquiry closed", typ: provider.EventDisputeClosed, status: "warning_closed",
			extra: map[string]any{"evidence_details": map[string]any{"due_by": 0}},
			want:  func(d *provider.Dispute) { d.EvidenceDueBy = time.Time{} }},
		{name: "no evidence_details", typ: provider.EventDisputeUpdated, status: "under_review",
			extra: map[string]any{"evidence_details": nil},
			want:  func(d *provider.Dispute) { d.EvidenceDueBy = time.Time{} }},
		{name: "no payment_intent: foreign", typ: provider.EventDisputeCreated, status: "needs_response",
			extra: map[string]any{"payment_intent": nil},
			want:  func(d *provider.Dispute) { d.PaymentID = "" }},
		{name: "payment_intent expanded: its purchase", typ: provider.EventDisputeCreated, status: "needs_response",
			extra: map[string]any{"payment_intent": whPI(pi, "succeeded", whPurchase, nil)},
			want:  func(d *provider.Dispute) { d.PurchaseID = "pur_01JABCDEF" }},
		{name: "another amount and currency", typ: provider.EventDisputeCreated, status: "needs_response",
			extra: map[string]any{"amount": 12345, "currency": "eur"},
			want:  func(d *provider.Dispute) { d.Amount, d.Currency = 12345, "eur" }},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			payload := whEvent(t, r.typ, "", whDispute("du_1", r.status, r.extra))
			ev, err := whVerifier(t, stripe.WebhookConfig{}).Verify(payload, whSign(whSecret, whNow, payload))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			d := whDisputeIn("du_1", r.status)
			if r.want != nil {
				r.want(&d)
			}
			want := provider.Event{ID: "evt_3SAbCdEfGhIjKlMn1", Type: r.typ, Outcome: provider.Pending, PaymentID: d.PaymentID,
				PurchaseID: d.PurchaseID, Amount: d.Amount, Currency: d.Currency, Created: whCreated, Dispute: &d}
			if len(ev.Digest) != 64 {
				t.Errorf("digest %q, want a hex SHA-256", ev.Digest)
			}
			ev.Digest = ""
			if !sameEvent(ev, want) {
				t.Errorf("event\n got %s\nwant %s", showEvent(ev), showEvent(want))
			}
		})
	}
}

// TestWebhookDisputeOnlyForDisputeTypes: another charge.* event about a
// dispute object carries no dispute, as before disputes were read.
func TestWebhookDisputeOnlyForDisputeTypes(t *testing.T) {
	payload := whEvent(t, "charge.dispute.teleported", "", whDispute("du_1", "needs_response", nil))
	ev, err := whVerifier(t, stripe.WebhookConfig{}).Verify(payload, whSign(whSecret, whNow, payload))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if ev.Dispute != nil || ev.Outcome != "" || ev.PaymentID != "" || ev.Amount != 0 {
		t.Errorf("event %s, want one payrecon ignores", showEvent(ev))
	}
}

// TestWebhookRefusesDisputeEvents: a dispute event whose object is no
// dispute, or a dispute without id, positive amount or currency, is
// malformed.
func TestWebhookRefusesDisputeEvents(t *testing.T) {
	rows := []struct {
		name    string
		typ     string
		object  map[string]any
		mention string
	}{
		{"about a charge", provider.EventDisputeCreated, whCharge(nil), `"charge"`},
		{"about a payment intent", provider.EventDisputeFundsWithdrawn, whPI("pi_1", "succeeded", whPurchase, nil), `"payment_intent"`},
		{"no id", provider.EventDisputeCreated, whDispute("", "needs_response", nil), "without id"},
		{"amount 0", provider.EventDisputeUpdated, whDispute("du_1", "needs_response", map[string]any{"amount": 0}), "amount 0"},
		{"negative amount", provider.EventDisputeClosed, whDispute("du_1", "lost", map[string]any{"amount": -300}), "amount -300"},
		{"no amount", provider.EventDisputeCreated, whDispute("du_1", "needs_response", map[string]any{"amount": nil}), "amount 0"},
		{"no currency", provider.EventDisputeCreated, whDispute("du_1", "needs_response", map[string]any{"currency": nil}), "no currency"},
		{"amount not a number", provider.EventDisputeCreated, whDispute("du_1", "needs_response", map[string]any{"amount": "lots"}), "not a dispute"},
		{"balance transactions not a list", provider.EventDisputeFundsWithdrawn,
			whDispute("du_1", "needs_response", map[string]any{"balance_transactions": 5}), "not a dispute"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			payload := whEvent(t, r.typ, "", r.object)
			ev, err := whVerifier(t, stripe.WebhookConfig{}).Verify(payload, whSign(whSecret, whNow, payload))
			whCheckErr(t, ev, err, stripe.ErrMalformedEvent)
			if err != nil && !strings.Contains(err.Error(), r.mention) {
				t.Errorf("error %q does not mention %s", err, r.mention)
			}
		})
	}
}

// readTestdata returns the file name of testdata.
func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWebhookDisputeTestdata translates two events of one dispute as
// Stripe documents its objects and sends them (testdata/disputes): its
// funds withdrawn, then the dispute won and the funds reinstated. Every
// field is checked: the balance transactions' amounts, fees apart, and
// evidence_details.due_by included.
func TestWebhookDisputeTestdata(t *testing.T) {
	base := provider.Dispute{
		ID: "du_1QdIsPuTeDfUnDs0000001", PaymentID: "pi_3QdIsPuTeDpAyMeNt000001", ChargeID: "ch_3QdIsPuTeDcHaRgE0000001",
		Amount: 1999, Currency: "usd", Reason: "fraudulent", EvidenceDueBy: time.Unix(1761609599, 0).UTC(),
		Created: time.Unix(1759998990, 0).UTC(),
	}
	withdrawn := base
	withdrawn.Status, withdrawn.Withdrawn = "needs_response", 1999
	won := base
	won.Status, won.Withdrawn, won.Reinstated = "won", 1999, 1999
	rows := []struct {
		file string
		want provider.Event
	}{
		{"disputes/funds_withdrawn.json", provider.Event{ID: "evt_1QdIsPuTeDfUnDs0000001", Type: provider.EventDisputeFundsWithdrawn,
			Created: time.Unix(1759999000, 0).UTC(), Dispute: &withdrawn}},
		{"disputes/closed_won.json", provider.Event{ID: "evt_1QdIsPuTeDfUnDs0000002", Type: provider.EventDisputeClosed,
			Created: time.Unix(1761900000, 0).UTC(), Dispute: &won}},
	}
	v := whVerifier(t, stripe.WebhookConfig{})
	digests := map[string]bool{}
	for _, r := range rows {
		t.Run(r.file, func(t *testing.T) {
			payload := readTestdata(t, r.file)
			ev, err := v.Verify(payload, whSign(whSecret, whNow, payload))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			want := r.want
			want.Outcome, want.PaymentID, want.Amount, want.Currency = provider.Pending, "pi_3QdIsPuTeDpAyMeNt000001", 1999, "usd"
			if len(ev.Digest) != 64 || digests[ev.Digest] {
				t.Errorf("digest %q, want a hex SHA-256 of its own", ev.Digest)
			}
			digests[ev.Digest] = true
			ev.Digest = ""
			if !sameEvent(ev, want) {
				t.Errorf("event\n got %s\nwant %s", showEvent(ev), showEvent(want))
			}
		})
	}
}

// TestWebhookDisputeDigest: a redelivered dispute event digests the same;
// the dispute in another status under the same event id does not.
func TestWebhookDisputeDigest(t *testing.T) {
	v := whVerifier(t, stripe.WebhookConfig{})
	digest := func(payload []byte) string {
		t.Helper()
		ev, err := v.Verify(payload, whSign(whSecret, whNow, payload))
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		return ev.Digest
	}
	first := whEvent(t, provider.EventDisputeUpdated, "", whDispute("du_1", "under_review", nil))
	redelivered := []byte(strings.Replace(string(first), `"pending_webhooks":1`, `"pending_webhooks":0`, 1))
	if digest(first) != digest(redelivered) {
		t.Fatal("a redelivery with another pending_webhooks digests differently")
	}
	if digest(first) == digest(whEvent(t, provider.EventDisputeUpdated, "", whDispute("du_1", "needs_response", nil))) {
		t.Fatal("a dispute in another status under the same event id digests the same")
	}
}
