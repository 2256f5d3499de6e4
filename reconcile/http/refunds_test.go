package http_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/payrecon/payrecon/reconcile"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
	"github.com/payrecon/payrecon/statemachine"
)

// refundResponse is an answer of the refund routes.
type refundResponse struct {
	response
	location string
}

// postRefund sends POST /v1/purchases/{purchaseID}/refunds.
func (f *apiFixture) postRefund(token, purchaseID, key, body string) refundResponse {
	f.t.Helper()
	req, err := http.NewRequest("POST", f.srv.URL+"/v1/purchases/"+purchaseID+"/refunds", strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatalf("POST refund: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return refundResponse{
		response: response{resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed") == "true"},
		location: resp.Header.Get("Location"),
	}
}

// getPath sends GET path with token and returns the status and body.
func (f *apiFixture) getPath(token, path string) (int, string) {
	f.t.Helper()
	req, err := http.NewRequest("GET", f.srv.URL+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// paid creates a purchase of 300 usd as the shop, with key, and works it
// to succeeded.
func (f *apiFixture) paid(key string) rhttp.PurchaseJSON {
	f.t.Helper()
	var p rhttp.PurchaseJSON
	if err := json.Unmarshal([]byte(f.mustPost(shopToken, key, coffee).body), &p); err != nil || p.ID == "" {
		f.t.Fatalf("set-up: %v", err)
	}
	if _, err := f.svc.RunOnce(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	if d, err := f.svc.Purchase(context.Background(), p.ID); err != nil || d.Purchase.State != statemachine.Succeeded {
		f.t.Fatalf("set-up: purchase %s: %+v %v", p.ID, d.Purchase.State, err)
	}
	return p
}

// refundsOf returns a purchase's refunds in the store.
func (f *apiFixture) refundsOf(purchaseID string) []reconcile.Refund {
	f.t.Helper()
	rs, err := f.svc.PurchaseRefunds(context.Background(), purchaseID)
	if err != nil {
		f.t.Fatal(err)
	}
	return rs
}

// errorCode returns the error code of a JSON error body.
func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Error struct{ Code string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not a JSON error: %s", body)
	}
	return e.Error.Code
}

// TestRefundOnceAndReplay: three identical requests with one key make one
// refund, the retries get the saved answer; the purchase's record lists
// it, GET /v1/refunds/{id} shows it with its history, and once the
// worker has sent it, both show it succeeded.
func TestRefundOnceAndReplay(t *testing.T) {
	f := setupAPI(t, nil)
	p := f.paid("pur-1")
	const body = `{"amount":100,"reason":"  one item returned "}`
	var got []refundResponse
	for range 3 {
		got = append(got, f.postRefund(shopToken, p.ID, "ref-1", body))
	}
	if got[0].status != http.StatusCreated || got[0].replayed {
		t.Fatalf("first: %+v", got[0])
	}
	for i, r := range got[1:] {
		if r.status != got[0].status || r.body != got[0].body || !r.replayed || r.location != got[0].location {
			t.Fatalf("retry %d: %+v, want the saved %+v replayed", i+1, r, got[0])
		}
	}
	var rj rhttp.RefundJSON
	if err := json.Unmarshal([]byte(got[0].body), &rj); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rj.ID, "ref_") || rj.PurchaseID != p.ID || rj.State != "created" || rj.Amount != 100 ||
		rj.Currency != "usd" || rj.Reason != "one item returned" || got[0].location != "/v1/refunds/"+rj.ID {
		t.Fatalf("refund %+v, Location %q", rj, got[0].location)
	}
	rs := f.refundsOf(p.ID)
	if len(rs) != 1 || rs[0].ID != rj.ID || rs[0].Client != "shop" || rs[0].RequestedBy != "shop" {
		t.Fatalf("refunds in the store: %+v, want the one", rs)
	}

	type detail struct {
		State       string
		Refunds     []map[string]any
		Transitions []struct{ From, To, Cause string }
		Attempts    []struct{ Op, Outcome string } `json:"provider_attempts"`
		SettledAt   string                         `json:"settled_at"`
	}
	read := func(path string) detail {
		t.Helper()
		status, body := f.getPath(shopToken, path)
		var d detail
		if err := json.Unmarshal([]byte(body), &d); err != nil || status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		return d
	}
	pd := read("/v1/purchases/" + p.ID)
	if len(pd.Refunds) != 1 || pd.Refunds[0]["id"] != rj.ID || pd.Refunds[0]["state"] != "created" ||
		pd.Refunds[0]["amount"] != float64(100) || pd.Refunds[0]["reason"] != "one item returned" || pd.Refunds[0]["settled_at"] != nil {
		t.Fatalf("the purchase's refunds: %+v", pd.Refunds)
	}
	if rd := read("/v1/refunds/" + rj.ID); rd.State != "created" || len(rd.Transitions) != 0 || len(rd.Attempts) != 0 {
		t.Fatalf("the refund before the worker: %+v", rd)
	}

	if _, err := f.svc.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	rd := read("/v1/refunds/" + rj.ID)
	if rd.State != "succeeded" || rd.SettledAt == "" || len(rd.Transitions) != 2 ||
		rd.Transitions[1].To != "succeeded" || len(rd.Attempts) != 1 || rd.Attempts[0].Op != "refund_create" {
		t.Fatalf("the refund after the worker: %+v", rd)
	}
	if pd := read("/v1/purchases/" + p.ID); pd.State != "succeeded" || pd.Refunds[0]["state"] != "succeeded" || pd.Refunds[0]["settled_at"] == nil {
		t.Fatalf("the purchase after the refund: %+v", pd)
	}
	// A retry after all that still gets the saved answer, and sends nothing.
	if r := f.postRefund(shopToken, p.ID, "ref-1", body); r.body != got[0].body || !r.replayed {
		t.Fatalf("a late retry: %+v", r)
	}
	if n := len(f.refundsOf(p.ID)); n != 1 {
		t.Fatalf("%d refunds, want 1", n)
	}
}

// TestRefundKeyMismatch: a key is bound to its request, route included:
// another amount, another purchase, or a key used for POST /v1/purchases
// gets 422 and creates nothing; the original request still replays.
func TestRefundKeyMismatch(t *testing.T) {
	f := setupAPI(t, nil)
	p, other := f.paid("pur-1"), f.paid("pur-2")
	first := f.postRefund(shopToken, p.ID, "ref-1", `{"amount":100,"reason":"returned"}`)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %+v", first)
	}
	for _, tt := range []struct {
		name, purchase, key, body, want string
	}{
		{"another amount", p.ID, "ref-1", `{"amount":200,"reason":"returned"}`, "amount was 100, now 200"},
		{"another reason", p.ID, "ref-1", `{"amount":100,"reason":"damaged"}`, `reason was \"returned\", now \"damaged\"`},
		{"another purchase", other.ID, "ref-1", `{"amount":100,"reason":"returned"}`, "to refund purchase " + p.ID + ", not " + other.ID},
		{"a purchase's key", p.ID, "pur-1", `{"amount":100,"reason":"returned"}`, "another request (it created " + p.ID + ")"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := f.postRefund(shopToken, tt.purchase, tt.key, tt.body)
			if r.status != http.StatusUnprocessableEntity || errorCode(t, r.body) != "idempotency_key_mismatch" || !strings.Contains(r.body, tt.want) {
				t.Fatalf("got %+v, want 422 saying %q", r, tt.want)
			}
		})
	}
	// The other way: a refund's key sent to POST /v1/purchases.
	if r := f.mustPost(shopToken, "ref-1", coffee); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("a refund's key on POST /v1/purchases: %+v, want 422", r)
	}
	if n, m := len(f.refundsOf(p.ID)), len(f.refundsOf(other.ID)); n != 1 || m != 0 {
		t.Fatalf("refunds: %d and %d, want 1 and 0", n, m)
	}
	if again := f.postRefund(shopToken, p.ID, "ref-1", `{"amount":100,"reason":"returned"}`); again.body != first.body || !again.replayed {
		t.Fatalf("the original request after the mismatches: %+v", again)
	}
}

// TestRefundRefusals: what the books refuse (a purchase not succeeded, a
// refund beyond what is left of the amount paid), another client's or an
// unknown purchase, and bad input each get their answer and store
// nothing, not even the key, so that a corrected retry with the same key
// runs as a first attempt.
func TestRefundRefusals(t *testing.T) {
	f := setupAPI(t, nil)
	p := f.paid("pur-1")
	var unpaid rhttp.PurchaseJSON // created, never worked
	_ = json.Unmarshal([]byte(f.mustPost(shopToken, "pur-unpaid", strings.Replace(coffee, "cus-7", "cus-8", 1)).body), &unpaid)
	var billing rhttp.PurchaseJSON // the billing client's
	_ = json.Unmarshal([]byte(f.mustPost(billingToken, "pur-b", coffee).body), &billing)
	if unpaid.ID == "" || billing.ID == "" {
		t.Fatal("set-up")
	}
	if r := f.postRefund(shopToken, p.ID, "part-1", `{"amount":200,"reason":"most of it"}`); r.status != http.StatusCreated {
		t.Fatalf("a refund of 200 of 300: %+v", r)
	}
	tests := []struct {
		name, token, purchase, key, body string
		status                           int
		code, field                      string
	}{
		{"not succeeded", shopToken, unpaid.ID, "k-unpaid", `{"amount":100,"reason":"r"}`, 409, "not_refundable", ""},
		{"beyond the amount left", shopToken, p.ID, "k-over", `{"amount":101,"reason":"r"}`, 409, "refund_exceeds_payment", ""},
		{"another client's purchase", shopToken, billing.ID, "k-other", `{"amount":100,"reason":"r"}`, 404, "not_found", ""},
		{"an unknown purchase", shopToken, "pur_nope", "k-unknown", `{"amount":100,"reason":"r"}`, 404, "not_found", ""},
		{"no token", "", p.ID, "k-token", `{"amount":1,"reason":"r"}`, 401, "unauthorized", ""},
		{"no key", shopToken, p.ID, "", `{"amount":1,"reason":"r"}`, 400, "invalid_request", "Idempotency-Key"},
		{"empty body", shopToken, p.ID, "k-empty", ``, 400, "invalid_request", "body"},
		{"not JSON", shopToken, p.ID, "k-json", `{"amount":`, 400, "invalid_request", "body"},
		{"no amount", shopToken, p.ID, "k-noamount", `{"reason":"r"}`, 400, "invalid_request", "amount"},
		{"zero amount", shopToken, p.ID, "k-zero", `{"amount":0,"reason":"r"}`, 400, "invalid_request", "amount"},
		{"negative amount", shopToken, p.ID, "k-neg", `{"amount":-1,"reason":"r"}`, 400, "invalid_request", "amount"},
		{"fractional amount", shopToken, p.ID, "k-frac", `{"amount":1.5,"reason":"r"}`, 400, "invalid_request", "amount"},
		{"amount over the maximum", shopToken, p.ID, "k-max", `{"amount":100000000,"reason":"r"}`, 400, "invalid_request", "amount"},
		{"no reason", shopToken, p.ID, "k-noreason", `{"amount":1}`, 400, "invalid_request", "reason"},
		{"a blank reason", shopToken, p.ID, "k-blank", `{"amount":1,"reason":" \t "}`, 400, "invalid_request", "reason"},
		{"a control character", shopToken, p.ID, "k-ctl", `{"amount":1,"reason":"a\u0007b"}`, 400, "invalid_request", "reason"},
		{"a reason too long", shopToken, p.ID, "k-long", `{"amount":1,"reason":"` + strings.Repeat("é", 501) + `"}`, 400, "invalid_request", "reason"},
		{"an unknown field", shopToken, p.ID, "k-field", `{"amount":1,"reason":"r","currency":"usd"}`, 400, "invalid_request", "currency"},
		{"a field in the wrong case", shopToken, p.ID, "k-case", `{"Amount":1,"reason":"r"}`, 400, "invalid_request", "Amount"},
		{"a field twice", shopToken, p.ID, "k-twice", `{"amount":1,"amount":300,"reason":"r"}`, 400, "invalid_request", "amount"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.postRefund(tt.token, tt.purchase, tt.key, tt.body)
			if r.status != tt.status || errorCode(t, r.body) != tt.code {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, tt.status, tt.code)
			}
			if tt.field != "" {
				var body struct {
					Error struct{ Fields []struct{ Field string } }
				}
				if err := json.Unmarshal([]byte(r.body), &body); err != nil || len(body.Error.Fields) == 0 || body.Error.Fields[0].Field != tt.field {
					t.Fatalf("body %s: want a field error on %s", r.body, tt.field)
				}
			}
			if tt.key != "" && f.keyStored("shop", tt.key) {
				t.Fatalf("key %q stored for a refused request", tt.key)
			}
		})
	}
	if rs := f.refundsOf(p.ID); len(rs) != 1 {
		t.Fatalf("%d refunds of %s, want the first one only", len(rs), p.ID)
	}
	if n, m := len(f.refundsOf(unpaid.ID)), len(f.refundsOf(billing.ID)); n != 0 || m != 0 {
		t.Fatalf("refunds of refused purchases: %d, %d", n, m)
	}
	// What is left of the amount paid can still be refunded, with the key
	// a refused request used.
	if r := f.postRefund(shopToken, p.ID, "k-over", `{"amount":100,"reason":"the rest"}`); r.status != http.StatusCreated || r.replayed {
		t.Fatalf("the rest, with the refused request's key: %+v", r)
	}
}

// TestRefundOfDisputedPayment: a refund of a payment with an open
// chargeback is refused 409 payment_disputed, naming the dispute, and
// nothing is stored: not the refund, not the key.
func TestRefundOfDisputedPayment(t *testing.T) {
	f := setupAPI(t, nil)
	p := f.paid("pur-disputed")
	d, err := f.svc.Purchase(t.Context(), p.ID)
	if err != nil {
		t.Fatal(err)
	}
	now := f.clock.Now()
	if err := f.store.InTx(t.Context(), func(tx reconcile.Tx) error {
		return tx.InsertDispute(t.Context(), reconcile.Dispute{
			ID: "dsp_1", ProviderDisputeID: "du_1", PurchaseID: p.ID, PaymentID: d.Purchase.ProviderPaymentID,
			Amount: 300, Currency: "usd", Reason: "fraudulent", State: statemachine.Open, Version: 1,
			ProviderStatus: "needs_response", CreatedAt: now, UpdatedAt: now,
		})
	}); err != nil {
		t.Fatal(err)
	}
	r := f.postRefund(shopToken, p.ID, "k-disputed", `{"amount":100,"reason":"customer asked"}`)
	if r.status != http.StatusConflict || errorCode(t, r.body) != "payment_disputed" || !strings.Contains(r.body, "du_1") {
		t.Fatalf("got %d %s, want 409 payment_disputed naming du_1", r.status, r.body)
	}
	if f.keyStored("shop", "k-disputed") || len(f.refundsOf(p.ID)) != 0 {
		t.Fatal("a refused refund left its key or a refund")
	}
}

// TestRefundReadScopedPerClient: a refund is read by the client whose
// purchase it refunds, whoever asked for it; any other client, and an
// unknown id, get 404.
func TestRefundReadScopedPerClient(t *testing.T) {
	f := setupAPI(t, nil)
	p := f.paid("pur-1")
	byCLI, err := f.svc.CreateRefund(context.Background(), reconcile.NewRefund{PurchaseID: p.ID, Amount: 50, Reason: "goodwill", RequestedBy: "cli"})
	if err != nil {
		t.Fatal(err)
	}
	if status, body := f.getPath(shopToken, "/v1/refunds/"+byCLI.ID); status != http.StatusOK || !strings.Contains(body, `"goodwill"`) {
		t.Fatalf("the shop reads its purchase's refund: %d %s", status, body)
	}
	for _, tt := range []struct{ name, token, id string }{
		{"another client", billingToken, byCLI.ID},
		{"an unknown refund", shopToken, "ref_nope"},
		{"a purchase id", shopToken, p.ID},
	} {
		if status, body := f.getPath(tt.token, "/v1/refunds/"+tt.id); status != http.StatusNotFound || strings.Contains(body, "goodwill") {
			t.Errorf("%s: %d %s, want 404", tt.name, status, body)
		}
	}
	if status, _ := f.getPath("wrong-token-0123456789", "/v1/refunds/"+byCLI.ID); status != http.StatusUnauthorized {
		t.Errorf("a bad token: %d, want 401", status)
	}
}

// TestOpenAPIRefundReason: the document's pattern for a refund's reason
// says what the handler and ValidateRefund do with it (trimmed, 1 to 500
// characters, no control characters), tried one value at a time through
// the real handler, whose every answer the contract checks.
func TestOpenAPIRefundReason(t *testing.T) {
	f := setupAPI(t, nil)
	p := f.paid("pur-1")
	long := func(n int) string { return strings.Repeat("é", n) }
	values := []string{
		"", " ", "\t\n", "\u3000", "x", " x ", "\u00a0x\u2028", "a b", "a\tb", "a\u007fb", "a\u0085b", "\u0085",
		long(500), long(501), " " + long(500) + " ", long(499) + "\u3000x", "x\u0000", strings.Repeat(" ", 600) + "x",
		"\U0001F600", strings.Repeat("\U0001F600", 500),
	}
	created := 0
	for i, v := range values {
		b, _ := json.Marshal(map[string]any{"amount": 1, "reason": v})
		r := f.postRefund(shopToken, p.ID, "reason-"+strconv.Itoa(i), string(b))
		if r.status == http.StatusCreated {
			created++
		}
	}
	if n := len(f.refundsOf(p.ID)); n != created || created == 0 {
		t.Fatalf("%d refunds stored for %d created answers", n, created)
	}
}

// TestRefundContractCatchesDrift: the contract check finds a refund
// response the document does not describe.
func TestRefundContractCatchesDrift(t *testing.T) {
	v := contract(t)
	const body = `{"amount":100,"reason":"returned"}`
	post := func() *http.Request {
		r := httptest.NewRequest("POST", "/v1/purchases/pur_0123456789abcdef01234567/refunds", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+shopToken)
		r.Header.Set("Idempotency-Key", "k")
		r.Header.Set("Content-Type", "application/json")
		return r
	}
	const refund = `{"id":"ref_0123456789abcdef01234567","purchase_id":"pur_0123456789abcdef01234567","state":"created",` +
		`"amount":100,"currency":"usd","reason":"returned","created_at":"2026-03-01T09:00:00Z","updated_at":"2026-03-01T09:00:00Z"}`
	header := func(location bool) http.Header {
		h := http.Header{"Content-Type": {"application/json"}}
		if location {
			h.Set("Location", "/v1/refunds/ref_0123456789abcdef01234567")
		}
		return h
	}
	tests := []struct {
		name     string
		status   int
		header   http.Header
		respBody string
		wantOK   bool
	}{
		{"a refund created", 201, header(true), refund, true},
		{"a failed refund", 201, header(true), strings.Replace(refund, `"created"`, `"failed"`, 1), true},
		{"a purchase's state", 201, header(true), strings.Replace(refund, `"created"`, `"declined"`, 1), false},
		{"no Location", 201, header(false), refund, false},
		{"a field the document lacks", 201, header(true), strings.Replace(refund, `"state"`, `"requested_by":"shop","state"`, 1), false},
		{"refund_exceeds_payment", 409, header(false), `{"error":{"code":"refund_exceeds_payment","message":"no"}}`, true},
		{"not_refundable", 409, header(false), `{"error":{"code":"not_refundable","message":"no"}}`, true},
		{"payment_disputed", 409, header(false), `{"error":{"code":"payment_disputed","message":"no"}}`, true},
		{"another 409", 409, header(false), `{"error":{"code":"conflict","message":"no"}}`, false},
		{"not found", 404, header(false), `{"error":{"code":"not_found","message":"no"}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := judgeExchange(v, post(), []byte(body), tt.status, tt.header, []byte(tt.respBody))
			if ok := len(got) == 0; ok != tt.wantOK {
				t.Fatalf("violations %q; want ok %v", got, tt.wantOK)
			}
		})
	}
}
