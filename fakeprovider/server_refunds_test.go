package fakeprovider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
)

func adapterRefund(t *testing.T, p provider.Provider, req provider.RefundRequest) provider.RefundResult {
	t.Helper()
	res, err := p.CreateRefund(t.Context(), req)
	if err != nil {
		t.Fatalf("refund %s through the adapter: %v", req.RefundID, err)
	}
	return res
}

// servedPayment charges purchaseID through the adapter and returns its
// payment id.
func servedPayment(t *testing.T, s *served, purchaseID string) string {
	t.Helper()
	return adapterCreate(t, s.adapter, request(purchaseID)).PaymentID
}

// TestServerRefunds runs the refund calls through the real Stripe adapter:
// the answers agree with the ledger, at the granularity of seconds.
func TestServerRefunds(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	start := s.clk.Now()
	pi := servedPayment(t, s, "pur_1")
	s.clk.Advance(1500 * time.Millisecond)
	req := refundRequest("ref_1", "pur_1", pi, 500)
	res := adapterRefund(t, s.adapter, req)
	want := provider.RefundResult{Outcome: provider.Succeeded, ID: res.ID, PaymentID: pi, RefundID: "ref_1", PurchaseID: "pur_1",
		Amount: 500, Currency: "eur", Status: "succeeded", Created: s.clk.Now().Truncate(time.Second)}
	if res != want || !strings.HasPrefix(res.ID, "re_") {
		t.Errorf("refund = %+v, want %+v", res, want)
	}
	if again := adapterRefund(t, s.adapter, req); again != want {
		t.Errorf("replay = %+v, want %+v", again, want)
	}
	got, err := s.adapter.GetRefund(t.Context(), res.ID)
	if err != nil || got != want {
		t.Errorf("GetRefund = (%+v, %v), want %+v", got, err, want)
	}
	second := adapterRefund(t, s.adapter, refundRequest("ref_2", "pur_1", pi, 700))
	listed, err := s.adapter.ListRefunds(t.Context(), pi, nil)
	if err != nil || len(listed) != 2 || listed[0] != want || listed[1] != second {
		t.Errorf("ListRefunds = (%+v, %v), want the two refunds, oldest first", listed, err)
	}
	created, err := s.adapter.ListRefundsCreated(t.Context(), provider.Window{From: start, Until: s.clk.Now().Add(time.Second)}, nil)
	if err != nil || len(created) != 2 || created[0].ID != res.ID || created[1].ID != second.ID {
		t.Errorf("ListRefundsCreated = (%+v, %v), want the two refunds", created, err)
	}
	wantRefunds(t, s.fake, pi, 2, 1200)

	// Refusals: each an ErrRejected that refunds nothing. A refusal for a
	// reason of the payment is a failed refund; one for an unknown
	// payment (a wrong request) stays rejected, for a human.
	declinedReq := request("pur_declined")
	declinedReq.PaymentMethod = fakeprovider.PaymentMethodDeclined
	declined := adapterCreate(t, s.adapter, declinedReq).PaymentID
	for name, tc := range map[string]struct {
		r    provider.RefundRequest
		want provider.Outcome
	}{
		"more than remains":  {refundRequest("ref_3", "pur_1", pi, 51), provider.Failed},
		"a declined payment": {refundRequest("ref_4", "pur_declined", declined, 1), provider.Failed},
		"an unknown payment": {refundRequest("ref_5", "pur_1", "pi_nope", 1), provider.Rejected},
	} {
		res, err := s.adapter.CreateRefund(t.Context(), tc.r)
		if !errors.Is(err, provider.ErrRejected) || provider.RefundOutcomeOf(res, err) != tc.want {
			t.Errorf("refund of %s = (%+v, %v), want rejected, outcome %s", name, res, err, tc.want)
		}
	}
	adapterRefund(t, s.adapter, refundRequest("ref_6", "pur_1", pi, 50))
	if res, err := s.adapter.CreateRefund(t.Context(), refundRequest("ref_7", "pur_1", pi, 1)); !errors.Is(err, provider.ErrRejected) || res.Reason != "charge_already_refunded" {
		t.Errorf("refund of a refunded payment = (%+v, %v), want rejected, charge_already_refunded", res, err)
	}
	other := req
	other.Amount = 499
	if _, err := s.adapter.CreateRefund(t.Context(), other); !errors.Is(err, provider.ErrIdempotencyMismatch) {
		t.Errorf("same key, other amount: %v, want an idempotency mismatch", err)
	}
	if got, err := s.adapter.GetRefund(t.Context(), "re_nope"); err != nil || got.Outcome != provider.NotFound {
		t.Errorf("GetRefund(unknown) = (%+v, %v), want NotFound", got, err)
	}
	if _, err := s.adapter.ListRefunds(t.Context(), "pi_nope", nil); !errors.Is(err, provider.ErrRejected) {
		t.Errorf("ListRefunds(unknown) = %v, want rejected", err)
	}
	wantRefunds(t, s.fake, pi, 3, 1250)
	wantRefunds(t, s.fake, declined, 0, 0)
}

// TestServerRefundFaults acts out the refund faults over HTTP, through
// the adapter, as for charges: a 429, a lost reply after the refund is
// made, a pending refund that settles, a stale pending read, a failure.
func TestServerRefundFaults(t *testing.T) {
	const settle = time.Minute
	tests := []struct {
		fault            fakeprovider.Fault
		outcome          provider.Outcome
		refunds          int
		now, later       string
		wantErrRetryable bool
	}{
		{fault: fakeprovider.FailBefore, outcome: provider.RetryLater, wantErrRetryable: true},
		{fault: fakeprovider.Reject, outcome: provider.Rejected},
		{fault: fakeprovider.LostReply, outcome: provider.Unknown, refunds: 1, now: "succeeded", later: "succeeded"},
		{fault: fakeprovider.Processing, outcome: provider.Pending, refunds: 1, now: "pending", later: "succeeded"},
		{fault: fakeprovider.ProcessingDecline, outcome: provider.Pending, refunds: 1, now: "pending", later: "failed"},
		{fault: fakeprovider.StaleProcessing, outcome: provider.Succeeded, refunds: 1, now: "pending", later: "succeeded"},
		{fault: fakeprovider.Decline, outcome: provider.Failed, refunds: 1, now: "failed", later: "failed"},
	}
	for _, tc := range tests {
		t.Run(string(tc.fault), func(t *testing.T) {
			s := serve(t, fakeprovider.Config{SettleAfter: settle}, fakeprovider.ServerConfig{}, nil)
			pi := servedPayment(t, s, "pur_1")
			req := refundRequest("ref_1", "pur_1", pi, 500)
			s.fake.ScriptRefund(req.RefundID, tc.fault)
			res, err := s.adapter.CreateRefund(t.Context(), req)
			if got := provider.RefundOutcomeOf(res, err); got != tc.outcome {
				t.Fatalf("refund with %s = (%+v, %v): outcome %q, want %q", tc.fault, res, err, got, tc.outcome)
			}
			if tc.wantErrRetryable && (!strings.Contains(err.Error(), "429") || res.Reason != "rate_limit") {
				t.Errorf("error %v (reason %q), want a 429 rate_limit", err, res.Reason)
			}
			refunds := s.fake.RefundsFor(req.RefundID)
			if len(refunds) != tc.refunds {
				t.Fatalf("%d refunds in the ledger, want %d", len(refunds), tc.refunds)
			}
			if tc.refunds == 0 {
				wantRefundOutcome(t, "retry", adapterRefund(t, s.adapter, req), provider.Succeeded, "succeeded")
				wantRefunds(t, s.fake, pi, 1, 500)
				return
			}
			id := refunds[0].ID
			if got, err := s.adapter.GetRefund(t.Context(), id); err != nil || got.Status != tc.now {
				t.Errorf("GetRefund now = (%+v, %v), want status %q", got, err, tc.now)
			}
			s.clk.Advance(settle)
			if got, err := s.adapter.GetRefund(t.Context(), id); err != nil || got.Status != tc.later || got.Outcome != refundOutcome(tc.later) {
				t.Errorf("GetRefund later = (%+v, %v), want status %q", got, err, tc.later)
			}
			// The replay answers from the key, without a second refund.
			replay := adapterRefund(t, s.adapter, req)
			if replay.ID != id {
				t.Errorf("replay = %+v, want the saved answer about %s", replay, id)
			}
			if len(s.fake.RefundsFor(req.RefundID)) != 1 {
				t.Errorf("refunds after the replay: %+v, want one", s.fake.RefundsFor(req.RefundID))
			}
		})
	}
}

// TestServerRefundTimeoutHoldsUntilClientGivesUp: a refund create with
// Timeout is held, doing nothing, until its client gives up; the replay
// then refunds, once.
func TestServerRefundTimeoutHoldsUntilClientGivesUp(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	handled := make(chan struct{})
	var held atomic.Bool
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/refunds" || !held.CompareAndSwap(false, true) {
				h.ServeHTTP(w, r)
				return
			}
			defer close(handled)
			// The whole body first, so that the fake sees the request (see
			// TestServerTimeoutHoldsUntilClientGivesUp).
			body, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("read the refund request: %v", err)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			cancel()
			h.ServeHTTP(w, r)
		})
	})
	pi := servedPayment(t, s, "pur_1")
	req := refundRequest("ref_1", "pur_1", pi, 500)
	s.fake.ScriptRefund(req.RefundID, fakeprovider.Timeout)
	res, err := s.adapter.CreateRefund(ctx, req)
	if provider.RefundOutcomeOf(res, err) != provider.Unknown {
		t.Fatalf("refund with timeout = (%+v, %v), want an unknown outcome", res, err)
	}
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still holds the request after its client gave up")
	}
	if got := s.fake.RefundCreateCalls(req.IdempotencyKey); got != 1 {
		t.Errorf("RefundCreateCalls = %d, want 1: the request reached the fake", got)
	}
	wantRefunds(t, s.fake, pi, 0, 0)
	wantRefundOutcome(t, "replay", adapterRefund(t, s.adapter, req), provider.Succeeded, "succeeded")
	wantRefunds(t, s.fake, pi, 1, 500)
}

// wireRefund is the part of a Refund the tests read.
type wireRefund struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	Charge             string            `json:"charge"`
	Currency           string            `json:"currency"`
	Created            int64             `json:"created"`
	Metadata           map[string]string `json:"metadata"`
	PaymentIntent      string            `json:"payment_intent"`
	Reason             *string           `json:"reason"`
	Status             string            `json:"status"`
	FailureReason      *string           `json:"failure_reason"`
	BalanceTransaction *string           `json:"balance_transaction"`
}

type wireRefundList struct {
	Object  string       `json:"object"`
	URL     string       `json:"url"`
	HasMore bool         `json:"has_more"`
	Data    []wireRefund `json:"data"`
}

// postRefund POSTs form to /v1/refunds with key as Idempotency-Key.
func postRefund(t *testing.T, s *served, key string, form url.Values) (int, http.Header, []byte) {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.http.URL+"/v1/refunds", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+testSecretKey)
	r.Header.Set("Content-Type", formType)
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// TestServerRefundWire checks the refunds' wire format and errors with
// plain HTTP, as a client other than the adapter sees them.
func TestServerRefundWire(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	pi := servedPayment(t, s, "pur_1")
	form := url.Values{"payment_intent": {pi}, "amount": {"300"}, "reason": {"duplicate"},
		"metadata[refund_id]": {"ref_1"}, "metadata[purchase_id]": {"pur_1"}}
	code, h, b := postRefund(t, s, "k1", form)
	if code != http.StatusOK || h.Get("Idempotent-Replayed") != "" {
		t.Fatalf("POST /v1/refunds: %d %s (replayed %q)", code, b, h.Get("Idempotent-Replayed"))
	}
	r := decode[wireRefund](t, b)
	if r.Object != "refund" || !strings.HasPrefix(r.ID, "re_") || r.Amount != 300 || r.Currency != "eur" || r.PaymentIntent != pi ||
		!strings.HasPrefix(r.Charge, "ch_") || r.Status != "succeeded" || r.Reason == nil || *r.Reason != "duplicate" ||
		r.Metadata["refund_id"] != "ref_1" || r.Metadata["purchase_id"] != "pur_1" || r.FailureReason != nil || r.BalanceTransaction == nil ||
		r.Created != s.clk.Now().Unix() {
		t.Errorf("refund %s", b)
	}
	code, h, b2 := postRefund(t, s, "k1", form)
	if code != http.StatusOK || h.Get("Idempotent-Replayed") != "true" || !bytes.Equal(b2, b) {
		t.Errorf("replay: %d %s (replayed %q), want the saved answer", code, b2, h.Get("Idempotent-Replayed"))
	}

	// Errors, as Stripe's.
	errs := []struct {
		name        string
		key         string
		form        url.Values
		status      int
		typ, code   string
		param       string
		wantRefunds int
	}{
		{"missing amount", "k2", url.Values{"payment_intent": {pi}}, 400, "invalid_request_error", "parameter_missing", "amount", 1},
		{"missing payment_intent", "k2", url.Values{"amount": {"1"}}, 400, "invalid_request_error", "parameter_missing", "payment_intent", 1},
		{"refund by charge", "k2", url.Values{"charge": {"ch_1"}, "amount": {"1"}}, 400, "invalid_request_error", "parameter_unknown", "charge", 1},
		{"amount not an integer", "k2", url.Values{"payment_intent": {pi}, "amount": {"1.5"}}, 400, "invalid_request_error", "parameter_invalid_integer", "amount", 1},
		{"amount zero", "k2", url.Values{"payment_intent": {pi}, "amount": {"0"}}, 400, "invalid_request_error", "parameter_invalid_integer", "amount", 1},
		{"unknown reason", "k2", url.Values{"payment_intent": {pi}, "amount": {"1"}, "reason": {"because"}}, 400, "invalid_request_error", "parameter_invalid_string", "reason", 1},
		{"unknown payment", "k2", url.Values{"payment_intent": {"pi_nope"}, "amount": {"1"}}, 400, "invalid_request_error", "resource_missing", "payment_intent", 1},
		{"amount too large", "k2", url.Values{"payment_intent": {pi}, "amount": {"951"}}, 400, "invalid_request_error", "amount_too_large", "amount", 1},
		{"same key, other parameters", "k1", url.Values{"payment_intent": {pi}, "amount": {"301"}}, 400, "idempotency_error", "", "", 1},
		{"same key, the create endpoint's", "payrecon-pur_1", form, 400, "idempotency_error", "", "", 1},
		{"key too long", strings.Repeat("k", 256), form, 400, "invalid_request_error", "", "", 1},
	}
	for _, e := range errs {
		code, _, b := postRefund(t, s, e.key, e.form)
		we := decode[wireError](t, b)
		if code != e.status || we.Error.Type != e.typ || we.Error.Code != e.code || we.Error.Param != e.param {
			t.Errorf("%s: %d %s, want %d %s %s %s", e.name, code, b, e.status, e.typ, e.code, e.param)
		}
		if got := len(s.fake.RefundsOf(pi)); got != e.wantRefunds {
			t.Errorf("%s: %d refunds, want %d", e.name, got, e.wantRefunds)
		}
	}

	// The refunds' list: by payment, in pages, newest first.
	var ids []string
	ids = append(ids, r.ID)
	for i := range 4 {
		s.clk.Advance(time.Second)
		code, _, b := postRefund(t, s, fmt.Sprintf("k_list%d", i), url.Values{"payment_intent": {pi}, "amount": {"100"}})
		if code != http.StatusOK {
			t.Fatalf("refund %d: %d %s", i, code, b)
		}
		ids = append(ids, decode[wireRefund](t, b).ID)
	}
	slices.Reverse(ids) // newest first
	get := func(query string) (int, []byte) {
		t.Helper()
		return call(t, "GET", s.http.URL+"/v1/refunds"+query, testSecretKey, "", "")
	}
	code, b = get("?payment_intent=" + pi + "&limit=2")
	page := decode[wireRefundList](t, b)
	if code != http.StatusOK || page.Object != "list" || page.URL != "/v1/refunds" || !page.HasMore || len(page.Data) != 2 ||
		page.Data[0].ID != ids[0] || page.Data[1].ID != ids[1] {
		t.Errorf("first page: %d %s, want %v…", code, b, ids[:2])
	}
	code, b = get("?payment_intent=" + pi + "&limit=2&starting_after=" + ids[1])
	if page := decode[wireRefundList](t, b); code != http.StatusOK || !page.HasMore || len(page.Data) != 2 || page.Data[0].ID != ids[2] {
		t.Errorf("second page: %d %s", code, b)
	}
	code, b = get("?limit=2&ending_before=" + ids[2])
	if page := decode[wireRefundList](t, b); code != http.StatusOK || page.HasMore || len(page.Data) != 2 || page.Data[1].ID != ids[1] {
		t.Errorf("page before %s: %d %s", ids[2], code, b)
	}
	code, b = get(fmt.Sprintf("?created[gte]=%d", s.clk.Now().Unix()))
	if page := decode[wireRefundList](t, b); code != http.StatusOK || len(page.Data) != 1 || page.Data[0].ID != ids[0] {
		t.Errorf("created[gte]=now: %d %s, want the newest only", code, b)
	}
	for query, param := range map[string]string{
		"?payment_intent=pi_nope": "payment_intent",
		"?starting_after=re_nope": "starting_after",
		"?limit=101":              "limit",
		"?refund=re_1":            "refund",
		"?created[gt]=tomorrow":   "created[gt]",
		"?starting_after=" + ids[0] + "&ending_before=" + ids[1]: "ending_before",
	} {
		if code, b := get(query); code != http.StatusBadRequest || decode[wireError](t, b).Error.Param != param {
			t.Errorf("GET /v1/refunds%s: %d %s, want a 400 about %s", query, code, b, param)
		}
	}
	if code, b := call(t, "GET", s.http.URL+"/v1/refunds/"+ids[0], testSecretKey, "", ""); code != http.StatusOK || decode[wireRefund](t, b).ID != ids[0] {
		t.Errorf("GET /v1/refunds/%s: %d %s", ids[0], code, b)
	}
	if code, b := call(t, "GET", s.http.URL+"/v1/refunds/re_nope", testSecretKey, "", ""); code != http.StatusNotFound || decode[wireError](t, b).Error.Code != "resource_missing" {
		t.Errorf("GET /v1/refunds/re_nope: %d %s, want 404 resource_missing", code, b)
	}
	if code, _ := call(t, "GET", s.http.URL+"/v1/refunds", "", "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/refunds without a key: %d, want 401", code)
	}
}

// TestServerRefundKeyInUseIs409: a refund create whose key is in flight is
// a 409 idempotency_key_in_use, which the adapter reads as Pending.
func TestServerRefundKeyInUseIs409(t *testing.T) {
	accepted := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	s := serve(t, fakeprovider.Config{OnAcceptRefund: func(provider.RefundRequest) {
		once.Do(func() {
			close(accepted)
			<-release
		})
	}}, fakeprovider.ServerConfig{}, nil)
	pi := servedPayment(t, s, "pur_1")
	req := refundRequest("ref_1", "pur_1", pi, 500)
	done := make(chan error, 1)
	go func() {
		_, err := s.adapter.CreateRefund(context.Background(), req)
		done <- err
	}()
	<-accepted
	busy, err := s.adapter.CreateRefund(t.Context(), req)
	if err != nil || busy.Outcome != provider.Pending || busy.Reason != fakeprovider.ReasonKeyInUse {
		t.Errorf("refund while in flight = (%+v, %v), want Pending %s", busy, err, fakeprovider.ReasonKeyInUse)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantRefunds(t, s.fake, pi, 1, 500)
}

func TestServerLedgerShowsRefunds(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	pi := servedPayment(t, s, "pur_1")
	req := refundRequest("ref_1", "pur_1", pi, 500)
	res := adapterRefund(t, s.adapter, req)
	adapterRefund(t, s.adapter, req) // a replay: a call, no refund
	if _, err := s.adapter.GetRefund(t.Context(), res.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.adapter.ListRefunds(t.Context(), pi, nil); err != nil {
		t.Fatal(err)
	}
	code, b := call(t, "GET", s.http.URL+"/_fake/ledger", "", "", "")
	if code != http.StatusOK {
		t.Fatalf("GET /_fake/ledger: %d %s", code, b)
	}
	raw := decode[map[string]any](t, b)
	refunds, _ := raw["refunds"].([]any)
	if len(refunds) != 1 {
		t.Fatalf("ledger %s, want 1 refund", b)
	}
	first, _ := refunds[0].(map[string]any)
	for _, k := range []string{"id", "payment_id", "refund_id", "purchase_id", "amount", "currency", "status", "final_status",
		"reason", "failure_reason", "created", "idempotency_key", "outside"} {
		if _, ok := first[k]; !ok {
			t.Errorf("refund %v has no %q", first, k)
		}
	}
	l := decode[fakeprovider.Ledger](t, b)
	if l.Refunds[0].ID != res.ID || l.Refunds[0].RefundID != "ref_1" || !l.Refunds[0].MoneyReturned() ||
		l.RefundCreateCalls[req.IdempotencyKey] != 2 || l.Calls.RefundCreate != 2 || l.Calls.RefundGet != 1 || l.Calls.RefundList != 1 {
		t.Errorf("ledger %+v", l)
	}
}

func TestServerControlRefunds(t *testing.T) {
	s, rc := serveWebhooks(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	pi := servedPayment(t, s, "pur_1")
	before := len(rc.received())

	code, b := call(t, "POST", s.http.URL+"/_fake/refunds", "", formType, "payment_intent="+pi+"&amount=200&reason=duplicate&webhooks=false")
	if code != http.StatusOK {
		t.Fatalf("POST /_fake/refunds: %d %s", code, b)
	}
	quiet := decode[wireRefund](t, b)
	if quiet.Amount != 200 || quiet.Status != "succeeded" || len(quiet.Metadata) != 0 {
		t.Errorf("outside refund %s", b)
	}
	if n := len(rc.received()); n != before {
		t.Errorf("received %d events for a refund made with webhooks=false", n-before)
	}
	code, b = call(t, "POST", s.http.URL+"/_fake/refunds", "", jsonType,
		`{"payment_intent":"`+pi+`","refund_id":"ref_dash","purchase_id":"pur_1","status":"pending"}`)
	if code != http.StatusOK {
		t.Fatalf("POST /_fake/refunds (JSON): %d %s", code, b)
	}
	loud := decode[wireRefund](t, b)
	if loud.Amount != 1050 || loud.Status != "pending" || loud.Metadata["refund_id"] != "ref_dash" {
		t.Errorf("outside refund of the rest %s", b)
	}
	if types := rc.types()[before:]; !slices.Equal(types, []string{"refund.created"}) {
		t.Errorf("received %q, want refund.created", types)
	}
	code, b = call(t, "POST", s.http.URL+"/_fake/refunds/"+loud.ID+"/status", "", formType, "status=succeeded")
	if code != http.StatusOK || decode[wireRefund](t, b).Status != "succeeded" {
		t.Errorf("POST /_fake/refunds/%s/status: %d %s", loud.ID, code, b)
	}
	if types := rc.types()[before+1:]; !slices.Equal(types, []string{"refund.updated", "charge.refunded"}) {
		t.Errorf("received %q, want refund.updated, charge.refunded", types)
	}
	wantRefunds(t, s.fake, pi, 2, 1250)

	for _, e := range []struct {
		path, body  string
		status      int
		code, param string
	}{
		{"/_fake/refunds", "amount=1", 400, "parameter_missing", "payment_intent"},
		{"/_fake/refunds", "payment_intent=" + pi + "&amount=1", 400, "charge_already_refunded", ""},
		{"/_fake/refunds", "payment_intent=pi_nope", 400, "resource_missing", "payment_intent"},
		{"/_fake/refunds", "payment_intent=" + pi + "&status=lost", 400, "parameter_invalid_string", "status"},
		{"/_fake/refunds", "payment_intent=" + pi + "&amount=x", 400, "parameter_invalid_integer", "amount"},
		{"/_fake/refunds", "payment_intent=" + pi + "&bogus=1", 400, "parameter_unknown", "bogus"},
		{"/_fake/refunds/re_nope/status", "status=failed", 404, "resource_missing", "id"},
		{"/_fake/refunds/" + loud.ID + "/status", "status=lost", 400, "parameter_invalid_string", "status"},
		{"/_fake/refunds/" + loud.ID + "/status", "", 400, "parameter_missing", "status"},
	} {
		code, b := call(t, "POST", s.http.URL+e.path, "", formType, e.body)
		we := decode[wireError](t, b)
		if code != e.status || we.Error.Code != e.code || we.Error.Param != e.param {
			t.Errorf("POST %s %q: %d %s, want %d %s %s", e.path, e.body, code, b, e.status, e.code, e.param)
		}
	}
}

// refundEvents returns the events received about refunds, in order.
func refundEvents(rc *receiver) []received {
	var out []received
	for _, r := range rc.received() {
		if strings.HasPrefix(r.event.Type, "refund.") || r.event.Type == "charge.refunded" {
			out = append(out, r)
		}
	}
	return out
}

// TestWebhooksOfRefunds: a refund's changes become Stripe events that the
// adapter's verifier reads as the refund's: refund.created, then
// charge.refunded once it succeeded, refund.updated when it settles,
// refund.failed when it fails.
func TestWebhooksOfRefunds(t *testing.T) {
	s, rc := serveWebhooks(t, fakeprovider.Config{SettleAfter: time.Minute}, fakeprovider.ServerConfig{}, nil)
	pi := servedPayment(t, s, "pur_1")
	ok, slow, failing := refundRequest("ref_ok", "pur_1", pi, 100), refundRequest("ref_slow", "pur_1", pi, 200), refundRequest("ref_failing", "pur_1", pi, 300)
	s.fake.ScriptRefund(slow.RefundID, fakeprovider.Processing)
	s.fake.ScriptRefund(failing.RefundID, fakeprovider.ProcessingDecline)
	for _, req := range []provider.RefundRequest{ok, slow, failing} {
		adapterRefund(t, s.adapter, req)
	}
	adapterRefund(t, s.adapter, ok) // a replay: no event
	s.clk.Advance(time.Minute)
	s.srv.Tick()

	want := []struct {
		typ     string
		refund  string
		outcome provider.Outcome
		status  string
	}{
		{"refund.created", ok.RefundID, provider.Succeeded, "succeeded"},
		{"charge.refunded", ok.RefundID, provider.Succeeded, "succeeded"},
		{"refund.created", slow.RefundID, provider.Pending, "pending"},
		{"refund.created", failing.RefundID, provider.Pending, "pending"},
		{"refund.updated", slow.RefundID, provider.Succeeded, "succeeded"},
		// The charge of ref_slow's success carries every refund: the event
		// is about the most recent, ref_failing, pending as of then.
		{"charge.refunded", failing.RefundID, provider.Pending, "pending"},
		{"refund.failed", failing.RefundID, provider.Failed, "failed"},
	}
	got := refundEvents(rc)
	if len(got) != len(want) {
		t.Fatalf("received %q, want %d refund events", rc.types(), len(want))
	}
	for i, w := range want {
		r := got[i]
		ev := r.event
		if r.err != nil || ev.Refund == nil {
			t.Errorf("event %d: %+v (%v), want a refund event", i, ev, r.err)
			continue
		}
		re := s.fake.RefundsFor(w.refund)[0]
		if ev.Type != w.typ || ev.Outcome != w.outcome || ev.Refund.Status != w.status || ev.Refund.ID != re.ID ||
			ev.Refund.RefundID != w.refund || ev.PaymentID != pi || ev.PurchaseID != "pur_1" || ev.Amount != re.Amount || ev.Currency != "eur" {
			t.Errorf("event %d = %s, want %s %s of %s (%s)", i, showRefundEvent(ev), w.typ, w.status, w.refund, re.ID)
		}
		if w.status == "failed" && ev.Refund.Reason != fakeprovider.RefundFailureReason {
			t.Errorf("event %d: reason %q, want %q", i, ev.Refund.Reason, fakeprovider.RefundFailureReason)
		}
		// Creation events carry the request's key; settlements none.
		var body struct {
			Request struct {
				IdempotencyKey *string `json:"idempotency_key"`
			} `json:"request"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		if hasKey := body.Request.IdempotencyKey != nil; hasKey != (i < 4) {
			t.Errorf("event %d: idempotency key %v", i, body.Request.IdempotencyKey)
		}
	}
	// The charge carries every refund of the payment, the newest first.
	var charge struct {
		Data struct {
			Object struct {
				AmountRefunded int64 `json:"amount_refunded"`
				Refunded       bool  `json:"refunded"`
				Refunds        struct {
					Data []wireRefund `json:"data"`
				} `json:"refunds"`
			} `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(got[5].body, &charge); err != nil {
		t.Fatal(err)
	}
	c := charge.Data.Object
	if c.AmountRefunded != 600 || c.Refunded || len(c.Refunds.Data) != 3 || c.Refunds.Data[0].Metadata["refund_id"] != failing.RefundID {
		t.Errorf("charge of charge.refunded: %+v, want 600 refunded of 1250, three refunds, newest first", c)
	}
}

// showRefundEvent formats ev with its refund.
func showRefundEvent(ev provider.Event) string {
	if ev.Refund == nil {
		return fmt.Sprintf("%+v", ev)
	}
	return fmt.Sprintf("%+v refund %+v", ev, *ev.Refund)
}

// TestWebhookFaultsOfRefunds: the delivery faults apply to refund events,
// scripted by refund (Server.ScriptRefundWebhooks): a stale pending after
// the success, a duplicate, a pending event reordered after the next.
func TestWebhookFaultsOfRefunds(t *testing.T) {
	s, rc := serveWebhooks(t, fakeprovider.Config{SettleAfter: time.Minute}, fakeprovider.ServerConfig{}, nil)
	pi := servedPayment(t, s, "pur_1")

	stale := refundRequest("ref_stale", "pur_1", pi, 100)
	s.srv.ScriptRefundWebhooks(stale.RefundID, fakeprovider.WebhookStaleProcessing)
	adapterRefund(t, s.adapter, stale)
	var types []string
	var outcomes []provider.Outcome
	for _, r := range refundEvents(rc) {
		types, outcomes = append(types, r.event.Type), append(outcomes, r.event.Outcome)
	}
	if want := []string{"refund.created", "refund.updated", "charge.refunded"}; !slices.Equal(types, want) ||
		!slices.Equal(outcomes, []provider.Outcome{provider.Succeeded, provider.Pending, provider.Succeeded}) {
		t.Errorf("received %q %q, want the success, a stale pending right after it, then charge.refunded", types, outcomes)
	}

	dup := refundRequest("ref_dup", "pur_1", pi, 100)
	s.srv.ScriptRefundWebhooks(dup.RefundID, fakeprovider.WebhookDuplicate)
	n := len(refundEvents(rc))
	adapterRefund(t, s.adapter, dup)
	got := refundEvents(rc)[n:]
	if len(got) != 3 || got[0].event.ID != got[1].event.ID || !bytes.Equal(got[0].body, got[1].body) || got[2].event.Type != "charge.refunded" {
		t.Errorf("received %d events after a duplicated refund.created, want it twice then charge.refunded", len(got))
	}

	reordered := refundRequest("ref_reordered", "pur_1", pi, 100)
	s.fake.ScriptRefund(reordered.RefundID, fakeprovider.Processing)
	s.srv.ScriptRefundWebhooks(reordered.RefundID, fakeprovider.WebhookReorder)
	n = len(refundEvents(rc))
	adapterRefund(t, s.adapter, reordered)
	if got := refundEvents(rc)[n:]; len(got) != 0 {
		t.Fatalf("received %d events of a pending refund whose event is reordered, want it held", len(got))
	}
	s.clk.Advance(time.Minute)
	s.srv.Tick()
	types = nil
	for _, r := range refundEvents(rc)[n:] {
		types = append(types, r.event.Type+" "+r.event.Refund.Status)
	}
	if want := []string{"refund.updated succeeded", "refund.created pending", "charge.refunded succeeded"}; !slices.Equal(types, want) {
		t.Errorf("received %q, want %q", types, want)
	}
	var marked []fakeprovider.WebhookFault
	for _, ev := range s.srv.Events() {
		if ev.RefundID != "" {
			marked = append(marked, ev.Faults...)
		}
	}
	if want := []fakeprovider.WebhookFault{fakeprovider.WebhookStaleProcessing, fakeprovider.WebhookDuplicate, fakeprovider.WebhookReorder}; !slices.Equal(marked, want) {
		t.Errorf("faults of the refund events %v, want %v", marked, want)
	}
	if st := s.srv.WebhookStats(); st.Stale != 1 || st.Duplicated != 1 || st.Reordered != 1 || st.Pending != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestRefundWebhookDrawsAreSeeded: with probabilities, a refund's events
// get the same faults for a seed, and the purchase's events are not moved
// by its refunds'.
func TestRefundWebhookDrawsAreSeeded(t *testing.T) {
	scfg := fakeprovider.ServerConfig{WebhookFaults: fakeprovider.WebhookFaults{Duplicate: 0.5, Delay: 0.3}}
	run := func(refunds bool) (purchase, refund []string) {
		s, _ := serveWebhooks(t, fakeprovider.Config{Seed: 3, Instance: "seeded"}, scfg, nil)
		for i := range 6 {
			pur := fmt.Sprintf("pur_%d", i)
			pi := servedPayment(t, s, pur)
			if refunds {
				adapterRefund(t, s.adapter, refundRequest("ref_"+pur, pur, pi, 100))
			}
		}
		for _, ev := range s.srv.Events() {
			faults := fmt.Sprint(ev.Faults)
			if ev.RefundID != "" {
				refund = append(refund, ev.Type+faults)
			} else {
				purchase = append(purchase, ev.PurchaseID+faults)
			}
		}
		return purchase, refund
	}
	p1, r1 := run(true)
	p2, r2 := run(true)
	p3, _ := run(false)
	if !slices.Equal(r1, r2) || !slices.Equal(p1, p2) {
		t.Errorf("the same seed gave other faults: %v / %v, %v / %v", p1, p2, r1, r2)
	}
	if !slices.Equal(p1, p3) {
		t.Errorf("the purchases' events got %v with refunds, %v without: refunds moved their draws", p1, p3)
	}
	if !slices.ContainsFunc(r1, func(s string) bool { return strings.Contains(s, string(fakeprovider.WebhookDuplicate)) }) {
		t.Errorf("no refund event duplicated in %v: the probabilities are not applied", r1)
	}
}
