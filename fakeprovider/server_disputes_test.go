package fakeprovider_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
)

// wireDispute is the part of a Dispute the tests read.
type wireDispute struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	Currency           string            `json:"currency"`
	Charge             string            `json:"charge"`
	PaymentIntent      json.RawMessage   `json:"payment_intent"`
	Reason             string            `json:"reason"`
	Status             string            `json:"status"`
	Created            int64             `json:"created"`
	IsChargeRefundable bool              `json:"is_charge_refundable"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	EvidenceDetails    struct {
		DueBy int64 `json:"due_by"`
	} `json:"evidence_details"`
	BalanceTransactions []struct {
		Amount int64 `json:"amount"`
		Fee    int64 `json:"fee"`
		Net    int64 `json:"net"`
	} `json:"balance_transactions"`
}

type wireDisputeList struct {
	Object  string        `json:"object"`
	URL     string        `json:"url"`
	HasMore bool          `json:"has_more"`
	Data    []wireDispute `json:"data"`
}

// pi is the id of the dispute's PaymentIntent, expanded or not.
func (d wireDispute) pi() (id, purchaseID string) {
	if err := json.Unmarshal(d.PaymentIntent, &id); err == nil {
		return id, ""
	}
	var pi wirePI
	json.Unmarshal(d.PaymentIntent, &pi)
	return pi.ID, pi.Metadata["purchase_id"]
}

// ids returns the ids of a list's disputes, in order.
func (l wireDisputeList) ids() []string {
	var out []string
	for _, d := range l.Data {
		out = append(out, d.ID)
	}
	return out
}

// openOverHTTP opens a dispute with POST /_fake/disputes and body (a
// form), failing the test unless it is opened.
func openOverHTTP(t *testing.T, s *served, body string) wireDispute {
	t.Helper()
	code, b := call(t, "POST", s.http.URL+"/_fake/disputes", "", formType, body)
	if code != http.StatusOK {
		t.Fatalf("POST /_fake/disputes %q: %d %s", body, code, b)
	}
	return decode[wireDispute](t, b)
}

// getDisputes GETs path of the API (with the test key) and decodes T.
func getAPI[T any](t *testing.T, s *served, path string) T {
	t.Helper()
	code, b := call(t, "GET", s.http.URL+path, testSecretKey, "", "")
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	return decode[T](t, b)
}

// TestServerDisputeWire: disputes opened with /_fake/disputes, form or
// JSON, are Stripe's Dispute objects, retrieved and listed as Stripe
// does, the PaymentIntent expanded on request.
func TestServerDisputeWire(t *testing.T) {
	s := serve(t, fakeprovider.Config{Instance: "W1"}, fakeprovider.ServerConfig{}, nil)
	pi := servedPayment(t, s, "pur_1")
	d := openOverHTTP(t, s, "payment="+pi+"&amount=1000&reason=product_not_received")
	now := s.clk.Now().Unix()
	if d.ID != "du_fakeW1_00000000000000000001" || d.Object != "dispute" || d.Amount != 1000 || d.Currency != "eur" ||
		d.Charge != "ch_"+strings.TrimPrefix(pi, "pi_") || d.Reason != "product_not_received" || d.Status != provider.DisputeNeedsResponse ||
		d.Created != now || d.EvidenceDetails.DueBy != now+7*24*3600 || d.IsChargeRefundable || d.Livemode || d.Metadata == nil ||
		len(d.BalanceTransactions) != 1 || d.BalanceTransactions[0].Amount != -1000 || d.BalanceTransactions[0].Fee != fakeprovider.DisputeFee ||
		d.BalanceTransactions[0].Net != -1000-fakeprovider.DisputeFee {
		t.Errorf("dispute %+v", d)
	}
	if id, _ := d.pi(); id != pi {
		t.Errorf("payment_intent %s, want %s", d.PaymentIntent, pi)
	}
	s.clk.Advance(time.Second)
	other := servedPayment(t, s, "pur_2")
	code, b := call(t, "POST", s.http.URL+"/_fake/disputes", "", jsonType, `{"payment_intent":"`+other+`","inquiry":true,"amount":300}`)
	if code != http.StatusOK {
		t.Fatalf("POST /_fake/disputes (JSON): %d %s", code, b)
	}
	inq := decode[wireDispute](t, b)
	if inq.Status != provider.DisputeWarningNeedsResponse || !inq.IsChargeRefundable || inq.Amount != 300 || inq.Reason != "fraudulent" ||
		len(inq.BalanceTransactions) != 0 {
		t.Errorf("inquiry %s", b)
	}

	// Retrieve, with and without the PaymentIntent.
	got := getAPI[wireDispute](t, s, "/v1/disputes/"+d.ID)
	if got.ID != d.ID || got.Status != d.Status {
		t.Errorf("GET /v1/disputes/%s = %+v", d.ID, got)
	}
	got = getAPI[wireDispute](t, s, "/v1/disputes/"+d.ID+"?expand[]=payment_intent")
	if id, purchase := got.pi(); id != pi || purchase != "pur_1" {
		t.Errorf("expanded payment_intent %s, want %s of pur_1", got.PaymentIntent, pi)
	}
	raw := getAPI[map[string]any](t, s, "/v1/disputes/"+d.ID)
	for _, k := range []string{"id", "object", "amount", "currency", "charge", "payment_intent", "reason", "status", "evidence_details",
		"is_charge_refundable", "balance_transactions", "created", "livemode", "metadata"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("dispute %v has no %q", raw, k)
		}
	}

	// Lists: newest first, filtered, expanded.
	listed := func(query string) []string {
		t.Helper()
		return getAPI[wireDisputeList](t, s, "/v1/disputes"+query).ids()
	}
	l := getAPI[wireDisputeList](t, s, "/v1/disputes?expand[0]=data.payment_intent")
	if l.Object != "list" || l.URL != "/v1/disputes" || l.HasMore || !slices.Equal(l.ids(), []string{inq.ID, d.ID}) {
		t.Errorf("list %+v, want %s then %s", l, inq.ID, d.ID)
	}
	if id, purchase := l.Data[0].pi(); id != other || purchase != "pur_2" {
		t.Errorf("listed payment_intent %s, want %s expanded", l.Data[0].PaymentIntent, other)
	}
	for query, want := range map[string][]string{
		"?payment_intent=" + pi:                 {d.ID},
		"?charge=" + inq.Charge:                 {inq.ID},
		fmt.Sprintf("?created[gte]=%d", now+1):  {inq.ID},
		fmt.Sprintf("?created[lt]=%d", now+1):   {d.ID},
		fmt.Sprintf("?created[lte]=%d", now):    {d.ID},
		fmt.Sprintf("?created[gt]=%d", now+1):   nil,
		fmt.Sprintf("?created=%d", now):         {d.ID},
		"?limit=1":                              {inq.ID},
		"?starting_after=" + inq.ID:             {d.ID},
		"?ending_before=" + d.ID:                {inq.ID},
		"?payment_intent=" + other + "&limit=5": {inq.ID},
	} {
		if got := listed(query); !slices.Equal(got, want) {
			t.Errorf("GET /v1/disputes%s = %q, want %q", query, got, want)
		}
	}

	// Errors, as Stripe's.
	for _, e := range []struct {
		path        string
		status      int
		code, param string
	}{
		{"/v1/disputes/du_nope", 404, "resource_missing", "dispute"},
		{"/v1/disputes?payment_intent=pi_nope", 400, "resource_missing", "payment_intent"},
		{"/v1/disputes?charge=ch_nope", 400, "resource_missing", "charge"},
		{"/v1/disputes?starting_after=du_nope", 400, "resource_missing", "starting_after"},
		{"/v1/disputes?expand[]=data.charge", 400, "", "expand"},
		{"/v1/disputes/" + d.ID + "?expand[]=charge", 400, "", "expand"},
		{"/v1/disputes?status=won", 400, "parameter_unknown", "status"},
		{"/v1/disputes?limit=101", 400, "parameter_invalid_integer", "limit"},
		{"/v1/disputes/" + d.ID + "?limit=1", 400, "parameter_unknown", "limit"},
	} {
		code, b := call(t, "GET", s.http.URL+e.path, testSecretKey, "", "")
		we := decode[wireError](t, b)
		if code != e.status || we.Error.Code != e.code || we.Error.Param != e.param {
			t.Errorf("GET %s: %d %s, want %d %s %s", e.path, code, b, e.status, e.code, e.param)
		}
	}
	if l := s.fake.Ledger(); l.Calls.DisputeList == 0 || l.Calls.DisputeGet == 0 {
		t.Errorf("calls %+v, want the dispute lists and gets counted", l.Calls)
	}
}

// TestServerDisputePages: GET /v1/disputes reads in stable pages, newest
// first, with starting_after and ending_before, as the other lists.
func TestServerDisputePages(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	var ids []string // newest first
	for i := range 5 {
		pi := servedPayment(t, s, fmt.Sprintf("pur_%d", i))
		ids = slices.Insert(ids, 0, openOverHTTP(t, s, "payment="+pi).ID)
		if i != 2 { // two in the same second: their order is creation's
			s.clk.Advance(time.Second)
		}
	}
	var got []string
	query := "?limit=2"
	for pages := 1; ; pages++ {
		l := getAPI[wireDisputeList](t, s, "/v1/disputes"+query)
		got = append(got, l.ids()...)
		if !l.HasMore {
			if pages != 3 {
				t.Errorf("%d pages of 2 for 5 disputes, want 3", pages)
			}
			break
		}
		query = "?limit=2&starting_after=" + l.Data[len(l.Data)-1].ID
	}
	if !slices.Equal(got, ids) {
		t.Errorf("pages %q, want %q", got, ids)
	}
	// Backwards from the oldest: the page just newer, newest first.
	l := getAPI[wireDisputeList](t, s, "/v1/disputes?limit=2&ending_before="+ids[4])
	if !slices.Equal(l.ids(), ids[2:4]) || !l.HasMore {
		t.Errorf("ending_before the oldest: %q (has_more %v), want %q and more", l.ids(), l.HasMore, ids[2:4])
	}
	if l := getAPI[wireDisputeList](t, s, "/v1/disputes?limit=2&ending_before="+ids[1]); !slices.Equal(l.ids(), ids[:1]) || l.HasMore {
		t.Errorf("ending_before the second newest: %q (has_more %v), want %q only", l.ids(), l.HasMore, ids[:1])
	}
}

// TestServerControlDisputes: POST /_fake/disputes/{id} moves a dispute as
// Stripe's move, refusing every other move; /_fake/disputes refuses what
// Stripe would not open.
func TestServerControlDisputes(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	pi := servedPayment(t, s, "pur_1")
	d := openOverHTTP(t, s, "payment="+pi+"&inquiry=true")
	move := func(id, body string) (int, []byte) {
		t.Helper()
		return call(t, "POST", s.http.URL+"/_fake/disputes/"+id, "", formType, body)
	}
	for _, status := range []string{provider.DisputeWarningUnderReview, provider.DisputeNeedsResponse, provider.DisputeUnderReview, provider.DisputeWon} {
		code, b := move(d.ID, "status="+status)
		if code != http.StatusOK || decode[wireDispute](t, b).Status != status {
			t.Fatalf("move to %s: %d %s", status, code, b)
		}
	}
	won := getAPI[wireDispute](t, s, "/v1/disputes/"+d.ID)
	if won.IsChargeRefundable || len(won.BalanceTransactions) != 2 || won.BalanceTransactions[1].Amount != 1250 {
		t.Errorf("won dispute %+v, want 1250 withdrawn then reinstated", won)
	}
	declinedReq := request("pur_declined")
	declinedReq.PaymentMethod = fakeprovider.PaymentMethodDeclined
	declined := adapterCreate(t, s.adapter, declinedReq).PaymentID
	for _, e := range []struct {
		path, body  string
		status      int
		code, param string
	}{
		{"/_fake/disputes/" + d.ID, "status=" + provider.DisputeLost, 400, "", "status"},
		{"/_fake/disputes/" + d.ID, "status=" + provider.DisputeNeedsResponse, 400, "", "status"},
		{"/_fake/disputes/" + d.ID, "status=charge_refunded", 400, "parameter_invalid_string", "status"},
		{"/_fake/disputes/" + d.ID, "", 400, "parameter_missing", "status"},
		{"/_fake/disputes/du_nope", "status=won", 404, "resource_missing", "dispute"},
		{"/_fake/disputes", "amount=1", 400, "parameter_missing", "payment"},
		{"/_fake/disputes", "payment=pi_nope", 400, "resource_missing", "payment"},
		{"/_fake/disputes", "payment=" + declined, 400, "payment_intent_unexpected_state", "payment"},
		{"/_fake/disputes", "payment=" + pi + "&amount=1251", 400, "parameter_invalid_integer", "amount"},
		{"/_fake/disputes", "payment=" + pi + "&amount=x", 400, "parameter_invalid_integer", "amount"},
		{"/_fake/disputes", "payment=" + pi + "&reason=because", 400, "parameter_invalid_string", "reason"},
		{"/_fake/disputes", "payment=" + pi + "&inquiry=maybe", 400, "parameter_invalid_boolean", "inquiry"},
		{"/_fake/disputes", "payment=" + pi + "&payment_intent=" + declined, 400, "parameter_invalid_string", "payment_intent"},
		{"/_fake/disputes", "payment=" + pi + "&bogus=1", 400, "parameter_unknown", "bogus"},
	} {
		code, b := call(t, "POST", s.http.URL+e.path, "", formType, e.body)
		we := decode[wireError](t, b)
		if code != e.status || we.Error.Code != e.code || we.Error.Param != e.param {
			t.Errorf("POST %s %q: %d %s, want %d %s %s", e.path, e.body, code, b, e.status, e.code, e.param)
		}
	}
	if ds := s.fake.Disputes(); len(ds) != 1 || ds[0].Status != provider.DisputeWon {
		t.Errorf("disputes %+v, want the one won", ds)
	}
}

// TestServerRefundOfDisputedPayment: over HTTP a refund of a payment
// charged back is Stripe's 400 charge_disputed, which the adapter reads as
// a refusal for the payment (Failed); once the dispute is won it refunds.
func TestServerRefundOfDisputedPayment(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	req := request("pur_1")
	req.PaymentMethod = fakeprovider.PaymentMethodDispute
	pi := adapterCreate(t, s.adapter, req).PaymentID
	ds := s.fake.DisputesOf(pi)
	if len(ds) != 1 || ds[0].Status != provider.DisputeNeedsResponse {
		t.Fatalf("disputes of a %s payment: %+v, want a chargeback", fakeprovider.PaymentMethodDispute, ds)
	}
	code, _, b := postRefund(t, s, "k1", url.Values{"payment_intent": {pi}, "amount": {"100"}})
	we := decode[wireError](t, b)
	if code != http.StatusBadRequest || we.Error.Type != "invalid_request_error" || we.Error.Code != "charge_disputed" {
		t.Errorf("POST /v1/refunds of a payment charged back: %d %s, want 400 charge_disputed", code, b)
	}
	code, b = call(t, "POST", s.http.URL+"/_fake/refunds", "", formType, "payment_intent="+pi+"&amount=100")
	if we := decode[wireError](t, b); code != http.StatusBadRequest || we.Error.Code != "charge_disputed" {
		t.Errorf("POST /_fake/refunds of a payment charged back: %d %s, want 400 charge_disputed", code, b)
	}
	rreq := refundRequest("ref_1", "pur_1", pi, 100)
	res, err := s.adapter.CreateRefund(t.Context(), rreq)
	if !errors.Is(err, provider.ErrRefundRefused) || provider.RefundOutcomeOf(res, err) != provider.Failed {
		t.Errorf("refund through the adapter = (%+v, %v), want refused for the payment (Failed)", res, err)
	}
	wantRefunds(t, s.fake, pi, 0, 0)
	if _, err := s.srv.MoveDispute(ds[0].ID, provider.DisputeWon, true); err != nil {
		t.Fatal(err)
	}
	wantRefundOutcome(t, "refund after the win", adapterRefund(t, s.adapter, rreq), provider.Succeeded, "succeeded")
	wantRefunds(t, s.fake, pi, 1, 100)
}

// disputeWebhooks returns the events received about disputes, in order.
func disputeWebhooks(rc *receiver) []received {
	var out []received
	for _, r := range rc.received() {
		if strings.HasPrefix(r.event.Type, "charge.dispute.") {
			out = append(out, r)
		}
	}
	return out
}

// TestWebhooksOfDisputes: a dispute's changes are delivered as Stripe's
// events, in order, each carrying the dispute as the change left it, and
// read by the adapter's verifier as the fake's ListEvents lists them; a
// change made with webhooks false is logged, never delivered.
func TestWebhooksOfDisputes(t *testing.T) {
	s, rc := serveWebhooks(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	req := request("pur_1")
	req.PaymentMethod = fakeprovider.PaymentMethodDispute
	pi := adapterCreate(t, s.adapter, req).PaymentID
	id := s.fake.DisputesOf(pi)[0].ID
	if types := rc.types(); !slices.Equal(types, []string{"payment_intent.succeeded", provider.EventDisputeCreated, provider.EventDisputeFundsWithdrawn}) {
		t.Errorf("received %q after a charge of %s", types, fakeprovider.PaymentMethodDispute)
	}
	if code, b := call(t, "POST", s.http.URL+"/_fake/disputes/"+id, "", formType, "status=under_review"); code != http.StatusOK {
		t.Fatalf("move to under_review: %d %s", code, b)
	}
	if _, err := s.srv.MoveDispute(id, provider.DisputeWon, true); err != nil {
		t.Fatal(err)
	}
	quiet := servedPayment(t, s, "pur_quiet")
	if _, err := s.srv.OpenDispute(quiet, fakeprovider.DisputeOptions{Inquiry: true}, false); err != nil {
		t.Fatal(err)
	}

	want := []struct{ typ, status string }{
		{provider.EventDisputeCreated, provider.DisputeNeedsResponse},
		{provider.EventDisputeFundsWithdrawn, provider.DisputeNeedsResponse},
		{provider.EventDisputeUpdated, provider.DisputeUnderReview},
		{provider.EventDisputeClosed, provider.DisputeWon},
		{provider.EventDisputeFundsReinstated, provider.DisputeWon},
	}
	got := disputeWebhooks(rc)
	if len(got) != len(want) {
		t.Fatalf("received %q, want %d dispute events", rc.types(), len(want))
	}
	listed, _ := listAll(t, s.fake, provider.EventQuery{Since: time.Unix(1, 0), Types: provider.DisputeEventTypes})
	byID := map[string]provider.Event{}
	for _, ev := range listed {
		byID[ev.ID] = ev
	}
	for i, w := range want {
		r := got[i]
		ev := r.event
		if r.err != nil || ev.Dispute == nil || ev.Type != w.typ || ev.Dispute.Status != w.status || ev.Dispute.ID != id || ev.PaymentID != pi ||
			ev.Outcome != provider.Pending || ev.Amount != 1250 || ev.Currency != "eur" {
			t.Errorf("event %d = %+v (%v), want %s of %s %s", i, ev, r.err, w.typ, id, w.status)
			continue
		}
		if i > 0 && !ev.Created.After(got[i-1].event.Created) {
			t.Errorf("event %d created %v, not after event %d (%v)", i, ev.Created, i-1, got[i-1].event.Created)
		}
		var body struct {
			Request struct {
				IdempotencyKey *string `json:"idempotency_key"`
			} `json:"request"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil || body.Request.IdempotencyKey != nil {
			t.Errorf("event %d: idempotency key %v (%v), want none", i, body.Request.IdempotencyKey, err)
		}
		// Listed and delivered, one event to the adapter.
		l, ok := byID[ev.ID]
		if !ok {
			t.Errorf("event %d (%s) is not in the event log", i, ev.ID)
			continue
		}
		if l.Payload != string(r.body) {
			t.Errorf("event %d: delivered %s, logged %s", i, r.body, l.Payload)
		}
		l.Payload = ""
		if l.Dispute == nil || *l.Dispute != *ev.Dispute {
			t.Errorf("event %d: listed dispute %+v, delivered %+v", i, l.Dispute, ev.Dispute)
		}
		l.Dispute, ev.Dispute = nil, nil
		if l != ev {
			t.Errorf("event %d: listed %+v, delivered %+v", i, l, ev)
		}
	}
	if ev := listed[0]; ev.Type != provider.EventDisputeCreated || ev.PaymentID != quiet {
		t.Errorf("newest event listed %+v, want the quiet inquiry's creation", ev)
	}
	var views int
	for _, ev := range s.srv.Events() {
		if ev.DisputeID != "" {
			views++
			if ev.DisputeID != id || ev.PaymentID != pi || ev.PurchaseID != "pur_1" {
				t.Errorf("emitted %+v, want about %s of %s", ev, id, pi)
			}
		}
	}
	if views != len(want) {
		t.Errorf("%d dispute events emitted, want %d", views, len(want))
	}
}

// TestServerDisputesThrottled: the dispute reads take from the rate
// limits (the list's and the retrieve's) and an outage refuses them.
func TestServerDisputesThrottled(t *testing.T) {
	s := serve(t, fakeprovider.Config{RateLimits: fakeprovider.RateLimits{List: 1, Retrieve: 1}}, fakeprovider.ServerConfig{}, nil)
	pi := servedPayment(t, s, "pur_1")
	d := openOverHTTP(t, s, "payment="+pi)
	for _, path := range []string{"/v1/disputes", "/v1/disputes/" + d.ID} {
		if code, b := call(t, "GET", s.http.URL+path, testSecretKey, "", ""); code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, code, b)
		}
		code, b := call(t, "GET", s.http.URL+path, testSecretKey, "", "")
		if we := decode[wireError](t, b); code != http.StatusTooManyRequests || we.Error.Code != "rate_limit" {
			t.Errorf("GET %s over the limit: %d %s, want 429 rate_limit", path, code, b)
		}
	}
	if l, g := s.fake.Calls(provider.OpDisputeList), s.fake.Calls(fakeprovider.OpDisputeGet); l != 1 || g != 1 {
		t.Errorf("calls: %d lists, %d gets, want one each: the throttled reached nothing", l, g)
	}
	_, err := s.adapter.ListDisputes(t.Context(), provider.Window{From: s.clk.Now(), Until: s.clk.Now().Add(time.Second)}, nil)
	if !errors.Is(err, provider.ErrRateLimited) {
		t.Errorf("ListDisputes through the adapter over the limit: %v, want provider.ErrRateLimited", err)
	}
	s.clk.Advance(time.Second)
	s.srv.Outage(time.Minute)
	if code, b := call(t, "GET", s.http.URL+"/v1/disputes", testSecretKey, "", ""); code != http.StatusServiceUnavailable {
		t.Errorf("GET /v1/disputes in an outage: %d %s, want 503", code, b)
	}
}

func TestServerLedgerShowsDisputes(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	pi := servedPayment(t, s, "pur_1")
	d := openOverHTTP(t, s, "payment="+pi+"&amount=700")
	code, b := call(t, "GET", s.http.URL+"/_fake/ledger", "", "", "")
	if code != http.StatusOK {
		t.Fatalf("GET /_fake/ledger: %d %s", code, b)
	}
	raw := decode[map[string]any](t, b)
	disputes, _ := raw["disputes"].([]any)
	if len(disputes) != 1 {
		t.Fatalf("ledger %s, want 1 dispute", b)
	}
	first, _ := disputes[0].(map[string]any)
	for _, k := range []string{"id", "payment_id", "charge_id", "purchase_id", "amount", "currency", "reason", "status",
		"evidence_due_by", "charge_refundable", "withdrawn", "reinstated", "created"} {
		if _, ok := first[k]; !ok {
			t.Errorf("dispute %v has no %q", first, k)
		}
	}
	l := decode[fakeprovider.Ledger](t, b)
	if got := l.Disputes[0]; got.ID != d.ID || got.PaymentID != pi || got.PurchaseID != "pur_1" || got.Amount != 700 || got.Withdrawn != 700 ||
		got.Status != provider.DisputeNeedsResponse || !got.Created.Equal(s.clk.Now()) {
		t.Errorf("ledger dispute %+v", got)
	}
}
