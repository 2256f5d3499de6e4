package http_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
)

// The security gaps found by probing `payrecon serve`, one test (or a
// few) each: the purchase's client, invalid UTF-8, ambiguous JSON, 413,
// nosniff, the metrics' credentials, the token check, and the ops login's
// throttle.

// get sends GET /v1/purchases/{id} with token.
func (f *apiFixture) get(token, id string) response {
	f.t.Helper()
	req, err := http.NewRequest("GET", f.srv.URL+"/v1/purchases/"+url.PathEscape(id), nil)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, body: string(b)}
}

// apiError is the JSON error body of the API.
type apiError struct {
	Error struct {
		Code               string
		Message            string
		ExistingPurchaseID string `json:"existing_purchase_id"`
		Fields             []struct{ Field, Message string }
	}
}

func decodeError(t *testing.T, r response) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatalf("error body is not JSON (%v): %d %s", err, r.status, r.body)
	}
	return e
}

// TestPurchaseReadableOnlyByItsClient: GET /v1/purchases/{id} answers the
// client that created the purchase; any other client gets the 404 of an
// unknown id, with the same body, so that it cannot tell the purchase
// exists. A purchase made without the API has no client and is readable
// by none. A reused reference names the existing purchase only to its own
// client.
func TestPurchaseReadableOnlyByItsClient(t *testing.T) {
	f := setupAPI(t, nil)
	withRef := strings.Replace(coffee, `"customer"`, `"reference":"order-1","customer"`, 1)
	created := f.mustPost(shopToken, "k-1", withRef)
	var p rhttp.PurchaseJSON
	if err := json.Unmarshal([]byte(created.body), &p); err != nil || created.status != http.StatusCreated {
		t.Fatalf("create: %+v %v", created, err)
	}
	if r := f.get(shopToken, p.ID); r.status != http.StatusOK || !strings.Contains(r.body, p.ID) {
		t.Fatalf("the creating client reads its purchase: %d %s", r.status, r.body)
	}

	other := f.get(billingToken, p.ID)
	unknown := f.get(billingToken, "pur_00000000000000000000000000")
	if other.status != http.StatusNotFound {
		t.Fatalf("another client reads the purchase: %d %s, want 404", other.status, other.body)
	}
	if strings.Contains(other.body, `"state"`) || strings.Contains(other.body, "cus-7") {
		t.Fatalf("the 404 leaks the purchase: %s", other.body)
	}
	// Nothing but the id the caller sent tells the two answers apart.
	if strings.ReplaceAll(other.body, p.ID, "ID") != strings.ReplaceAll(unknown.body, "pur_00000000000000000000000000", "ID") {
		t.Fatalf("another client's purchase and an unknown id answer differently:\n%s\n%s", other.body, unknown.body)
	}

	cli, err := f.svc.CreatePurchase(context.Background(), reconcile.NewPurchase{Customer: "cus-9", Amount: 100, Currency: "usd"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{shopToken, billingToken} {
		if r := f.get(tok, cli.ID); r.status != http.StatusNotFound {
			t.Errorf("a purchase without a client, read by an API client: %d %s, want 404", r.status, r.body)
		}
	}

	// The same customer and reference from another client: refused, but
	// without the id of a purchase it may not read.
	r := f.mustPost(billingToken, "k-1", withRef)
	if e := decodeError(t, r); r.status != http.StatusConflict || e.Error.ExistingPurchaseID != "" || strings.Contains(r.body, p.ID) {
		t.Fatalf("another client reusing the reference: %d %s, want 409 without the purchase's id", r.status, r.body)
	}
	r = f.mustPost(shopToken, "k-2", withRef)
	if e := decodeError(t, r); r.status != http.StatusConflict || e.Error.ExistingPurchaseID != p.ID {
		t.Fatalf("the same client reusing the reference: %d %s, want 409 naming %s", r.status, r.body, p.ID)
	}
}

// badRequest posts body and checks the answer is 400 naming field, with
// nothing stored.
func (f *apiFixture) badRequest(t *testing.T, key, body, field, inMessage string) {
	t.Helper()
	r := f.mustPost(shopToken, key, body)
	e := decodeError(t, r)
	if r.status != http.StatusBadRequest || len(e.Error.Fields) == 0 || e.Error.Fields[0].Field != field ||
		!strings.Contains(e.Error.Fields[0].Message, inMessage) {
		t.Fatalf("%q: %d %s, want 400 on %s saying %q", body, r.status, r.body, field, inMessage)
	}
	if f.keyStored("shop", key) {
		t.Fatalf("%q: the key was stored", body)
	}
}

// TestInvalidUTF8Refused: a body that is not UTF-8, or that escapes a
// lone UTF-16 surrogate, is refused with 400; encoding/json would store
// U+FFFD in its place. A surrogate pair is one character and is accepted.
func TestInvalidUTF8Refused(t *testing.T) {
	f := setupAPI(t, nil)
	f.badRequest(t, "k-1", strings.Replace(coffee, "coffee", "caf\xe9", 1), "body", "not valid UTF-8")
	f.badRequest(t, "k-2", strings.Replace(coffee, "coffee", "\xff\xfe", 1), "body", "offset")
	f.badRequest(t, "k-3", strings.Replace(coffee, "coffee", `caf\ud800`, 1), "body", "surrogate")
	f.badRequest(t, "k-4", strings.Replace(coffee, "coffee", `\udc00 first`, 1), "body", "surrogate")
	f.badRequest(t, "k-5", strings.Replace(coffee, "coffee", `\ud800\u0041`, 1), "body", "surrogate")
	if n := f.purchases(); n != 0 {
		t.Fatalf("%d purchases stored", n)
	}

	ok := f.mustPost(shopToken, "k-6", strings.Replace(coffee, "coffee", `caf\u00e9 \ud83d\ude00 \\ud800`, 1))
	var p rhttp.PurchaseJSON
	if err := json.Unmarshal([]byte(ok.body), &p); err != nil || ok.status != http.StatusCreated || p.Description != `café 😀 \ud800` {
		t.Fatalf("valid escapes: %d %s, want 201 with the description read exactly", ok.status, ok.body)
	}
}

// TestAmbiguousJSONRefused: a key given twice, or spelled in another case
// than the field's, is refused with 400 naming the key: encoding/json
// would take the last duplicate and match keys case-insensitively.
func TestAmbiguousJSONRefused(t *testing.T) {
	f := setupAPI(t, nil)
	for i, tc := range []struct{ body, field, says string }{
		{`{"customer":"c","amount":1,"amount":300,"currency":"usd"}`, "amount", "more than once"},
		{`{"customer":"c","amount":300,"amount":300,"currency":"usd"}`, "amount", "more than once"},
		{`{"customer":"c","customer":"d","amount":300,"currency":"usd"}`, "customer", "more than once"},
		{`{"customer":"c","Amount":300,"currency":"usd"}`, "Amount", `did you mean "amount"`},
		{`{"customer":"c","amount":1,"AMOUNT":300,"currency":"usd"}`, "AMOUNT", "case-sensitive"},
		{`{"Customer":"c","amount":300,"currency":"usd"}`, "Customer", `did you mean "customer"`},
		{`{"customer":"c","amount":300,"currency":"usd","tip":5}`, "tip", "not a field"},
		{`{"customer":{"id":"c","id":"d"},"amount":300,"currency":"usd"}`, "id", "more than once"},
	} {
		f.badRequest(t, fmt.Sprintf("k-%d", i), tc.body, tc.field, tc.says)
	}
	if n := f.purchases(); n != 0 {
		t.Fatalf("%d purchases stored", n)
	}
	// Key order and whitespace still do not matter.
	if r := f.mustPost(shopToken, "k-ok", "{ \"currency\":\"usd\",\n \"amount\":300, \"customer\":\"c\" }"); r.status != http.StatusCreated {
		t.Fatalf("a plain request: %d %s", r.status, r.body)
	}
}

// TestOversizedBodyIs413: a body over the limit is answered 413, whether
// its Content-Length says so or it is streamed without one, and nothing
// is stored.
func TestOversizedBodyIs413(t *testing.T) {
	f := setupAPI(t, nil)
	big := `{"customer":"` + strings.Repeat("x", 20<<10) + `","amount":300,"currency":"usd"}`
	for name, body := range map[string]io.Reader{
		"with Content-Length": strings.NewReader(big),
		"chunked":             io.MultiReader(strings.NewReader(big)), // no length known
	} {
		req, _ := http.NewRequest("POST", f.srv.URL+"/v1/purchases", body)
		req.Header.Set("Authorization", "Bearer "+shopToken)
		req.Header.Set("Idempotency-Key", "k-big")
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e apiError
		_ = json.Unmarshal(b, &e)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || e.Error.Code != "too_large" {
			t.Fatalf("%s: %d %s, want 413 too_large", name, resp.StatusCode, b)
		}
	}
	if n := f.purchases(); n != 0 || f.keyStored("shop", "k-big") {
		t.Fatalf("an oversized request stored %d purchases", n)
	}
	// Just under the limit is read (and judged on its merits).
	under := `{"customer":"c","amount":300,"currency":"usd","description":"` + strings.Repeat("x", 16<<10-80) + `"}`
	if r := f.mustPost(shopToken, "k-under", under); r.status != http.StatusBadRequest || !strings.Contains(r.body, "description") {
		t.Fatalf("a body under the limit: %d %s, want its description judged", r.status, r.body)
	}
}

// refuseAll is a webhook verifier that refuses every payload.
type refuseAll struct{}

func (refuseAll) Verify([]byte, string) (provider.Event, error) {
	return provider.Event{}, errors.New("bad signature")
}
func (refuseAll) SignatureHeader() string { return "Stub-Signature" }

// TestEveryResponseIsNosniff: every answer of the server, JSON, HTML,
// metrics, replays and the mux's own 404 and 405, carries
// X-Content-Type-Options: nosniff.
func TestEveryResponseIsNosniff(t *testing.T) {
	f := setupAPI(t, nil)
	clients, _ := rhttp.ParseAPITokens("shop:" + shopToken)
	api, err := rhttp.NewPurchaseAPI(f.svc, clients)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := rhttp.NewOps(f.svc, rhttp.OpsConfig{Token: opsToken, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	s := rhttp.New(f.svc, rhttp.Config{
		Logger:   discardLogger(),
		Metrics:  http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "up 1\n") }),
		Webhooks: map[string]rhttp.WebhookVerifier{"stub": refuseAll{}},
	})
	api.Register(s)
	ops.Register(s)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	auth := map[string]string{"Authorization": "Bearer " + shopToken, "Idempotency-Key": "k-1"}
	for _, tc := range []struct {
		method, path, body string
		header             map[string]string
		status             int
	}{
		{"GET", "/healthz", "", nil, 200},
		{"GET", "/readyz", "", nil, 200},
		{"GET", "/metrics", "", nil, 200},
		{"POST", "/v1/purchases", coffee, auth, 201},
		{"POST", "/v1/purchases", coffee, auth, 201}, // the saved answer, replayed
		{"POST", "/v1/purchases", `{"customer":`, auth, 400},
		{"POST", "/v1/purchases", coffee, nil, 401},
		{"POST", "/v1/purchases", strings.Repeat(" ", 17<<10), auth, 413},
		{"GET", "/v1/purchases/pur_x", "", auth, 404},
		{"GET", "/ops/escalations", "", map[string]string{"Authorization": "Bearer " + opsToken}, 200},
		{"GET", "/ops", "", nil, 401},
		{"GET", "/ops/login", "", nil, 200},
		{"POST", "/webhooks/stub", `{}`, nil, 400},
		{"GET", "/nowhere", "", nil, 404},
		{"DELETE", "/v1/purchases", "", nil, 405},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s: %d, X-Content-Type-Options %q; want %d and nosniff",
				tc.method, tc.path, resp.StatusCode, resp.Header.Get("X-Content-Type-Options"), tc.status)
		}
	}
}

const metricsToken = "metrics-token-0123456789"

// fakeMetrics stands for the Prometheus handler.
var fakeMetrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "payrecon_up 1\n")
})

// getWith sends GET url with an optional bearer token and returns the
// status, the body and the headers.
func getWith(t *testing.T, url, token string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestMetricsToken: with a metrics token, /metrics answers 401 without it
// or with another token (also one of another length, and the API's), and
// the metrics with it. Without one, /metrics is open, as before.
func TestMetricsToken(t *testing.T) {
	s := rhttp.New(nil, rhttp.Config{Metrics: fakeMetrics, MetricsToken: metricsToken, Logger: discardLogger()})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	for _, tok := range []string{"", "wrong", metricsToken + "x", metricsToken[:len(metricsToken)-1], shopToken} {
		status, body, h := getWith(t, srv.URL+"/metrics", tok)
		if status != http.StatusUnauthorized || strings.Contains(body, "payrecon_up") || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("token %q: %d %s, want 401 with WWW-Authenticate and no metrics", tok, status, body)
		}
	}
	if status, body, _ := getWith(t, srv.URL+"/metrics", metricsToken); status != http.StatusOK || body != "payrecon_up 1\n" {
		t.Errorf("with the token: %d %s", status, body)
	}
	if status, _, _ := getWith(t, srv.URL+"/healthz", ""); status != http.StatusOK {
		t.Errorf("/healthz needs no token: %d", status)
	}

	open := httptest.NewServer(rhttp.New(nil, rhttp.Config{Metrics: fakeMetrics, Logger: discardLogger()}))
	t.Cleanup(open.Close)
	if status, _, _ := getWith(t, open.URL+"/metrics", ""); status != http.StatusOK {
		t.Errorf("without a configured token: %d, want 200", status)
	}

	short := rhttp.New(nil, rhttp.Config{Addr: "127.0.0.1:0", Metrics: fakeMetrics, MetricsToken: "short", Logger: discardLogger()})
	if ln, err := short.Listen(); err == nil {
		ln.Close()
		t.Error("Listen accepted a metrics token of 5 characters")
	}
}

// TestMetricsOwnListener: with MetricsAddr, /metrics is served there (and
// nothing else is), not on the main address; the token, if set, holds
// there too. Serve stops both at the end.
func TestMetricsOwnListener(t *testing.T) {
	for _, token := range []string{"", metricsToken} {
		s := rhttp.New(nil, rhttp.Config{
			Addr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", Metrics: fakeMetrics, MetricsToken: token, Logger: discardLogger(),
		})
		ln, err := s.Listen()
		if err != nil {
			t.Fatal(err)
		}
		if s.MetricsAddr() == nil {
			t.Fatal("Listen opened no metrics listener")
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, ln) }()
		mainURL, metricsURL := "http://"+ln.Addr().String(), "http://"+s.MetricsAddr().String()

		if status, _, _ := getWith(t, mainURL+"/metrics", token); status != http.StatusNotFound {
			t.Errorf("token %q: /metrics on the main address: %d, want 404", token, status)
		}
		if status, _, _ := getWith(t, mainURL+"/healthz", ""); status != http.StatusOK {
			t.Errorf("token %q: /healthz on the main address: %d", token, status)
		}
		if status, body, h := getWith(t, metricsURL+"/metrics", token); status != http.StatusOK || body != "payrecon_up 1\n" || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("token %q: /metrics on its own address: %d %q", token, status, body)
		}
		if status, _, _ := getWith(t, metricsURL+"/healthz", ""); status != http.StatusNotFound {
			t.Errorf("token %q: /healthz on the metrics address: %d, want 404", token, status)
		}
		if token != "" {
			if status, _, _ := getWith(t, metricsURL+"/metrics", ""); status != http.StatusUnauthorized {
				t.Errorf("/metrics on its own address without the token: %d, want 401", status)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Serve: %v", err)
		}
		if _, err := net.Dial("tcp", s.MetricsAddr().String()); err == nil {
			t.Error("the metrics listener still accepts after Serve returned")
		}
	}

	// A metrics address in use: Listen fails and holds nothing open.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	s := rhttp.New(nil, rhttp.Config{Addr: "127.0.0.1:0", MetricsAddr: busy.Addr().String(), Metrics: fakeMetrics, Logger: discardLogger()})
	if ln, err := s.Listen(); err == nil {
		ln.Close()
		t.Fatal("Listen succeeded on a metrics address in use")
	}
	// Without MetricsAddr, there is no second listener.
	same := rhttp.New(nil, rhttp.Config{Addr: "127.0.0.1:0", Metrics: fakeMetrics, Logger: discardLogger()})
	ln, err := same.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if same.MetricsAddr() != nil || same.MetricsHandler() != nil {
		t.Fatal("a metrics listener without MetricsAddr")
	}
}

// TestAPITokenOfAnotherLength: tokens that share the real one's prefix,
// or extend it, are refused like any other. (That the check takes the
// same time whatever the length is held by TestOneTokenCheck, which
// finds every token comparison in the package going through matchToken's
// digests.)
func TestAPITokenOfAnotherLength(t *testing.T) {
	f := setupAPI(t, nil)
	for _, tok := range []string{shopToken[:1], shopToken[:len(shopToken)-1], shopToken + "0", shopToken + shopToken, " " + shopToken + "x"} {
		if r := f.mustPost(tok, "k", coffee); r.status != http.StatusUnauthorized {
			t.Errorf("token %q: %d, want 401", tok, r.status)
		}
	}
	if r := f.mustPost(billingToken, "k", coffee); r.status != http.StatusCreated {
		t.Errorf("the second client's token: %d", r.status)
	}
}

// loginObserver counts ops login attempts by outcome; it is the server's
// Observer.
type loginObserver struct {
	mu     sync.Mutex
	counts map[string]int
}

func (o *loginObserver) Webhook(string, reconcile.EventOutcome) {}

func (o *loginObserver) OpsLogin(outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.counts[outcome]++
}

func (o *loginObserver) get() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int{}
	for k, v := range o.counts {
		out[k] = v
	}
	return out
}

// remoteAddrHeader sets the request's remote address in the throttle
// tests, which all connect from loopback.
const remoteAddrHeader = "X-Test-Remote-Addr"

// setupThrottle serves the operator pages with a login observer, taking
// each request's remote address from remoteAddrHeader.
func setupThrottle(t *testing.T) (*opsFixture, *loginObserver) {
	t.Helper()
	f := &opsFixture{t: t, clock: newTestClock()}
	f.store = newStoreAt(t, f.clock.Now)
	svc, err := reconcile.New(f.store, fakeprovider.New(fakeprovider.Config{Now: f.clock.Now}),
		reconcile.Config{Now: f.clock.Now, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	obs := &loginObserver{counts: map[string]int{}}
	ops, err := rhttp.NewOps(svc, rhttp.OpsConfig{Token: opsToken, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	s := rhttp.New(svc, rhttp.Config{Logger: discardLogger(), Observer: obs})
	ops.Register(s)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get(remoteAddrHeader); a != "" {
			r.RemoteAddr = a
		}
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	f.http = &http.Client{
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return f, obs
}

// loginFrom submits the login form from addr.
func (f *opsFixture) loginFrom(addr, name, token string) opsResp {
	f.t.Helper()
	from := map[string]string{remoteAddrHeader: addr}
	form := f.do("GET", "/ops/login", nil, from)
	pre := opsCookie(f.t, form, "payrecon_ops_login")
	return f.do("POST", "/ops/login", url.Values{
		"operator": {name}, "token": {token}, "csrf": {opsFormToken(f.t, form.body)}, "next": {"/ops"},
	}, from, pre)
}

const wrongOpsToken = "not-the-ops-token-0123456789"

// signedIn reports whether a login answer signed the operator in.
func signedIn(r opsResp) bool {
	return r.status == http.StatusSeeOther && strings.Contains(strings.Join(r.header.Values("Set-Cookie"), "\n"), "payrecon_ops_session=")
}

// TestOpsLoginThrottlePerClient: ten wrong tokens from one address are
// answered 401; the eleventh locks the address out for a minute, during
// which even the right token is answered 429 with Retry-After, unchecked,
// whatever the name; other addresses are not affected (an IPv6 address
// counts by its /64). When the lockout ends the right token signs in, and
// the success forgets the failures. Every attempt is counted by outcome.
func TestOpsLoginThrottlePerClient(t *testing.T) {
	f, obs := setupThrottle(t)
	const attacker = "192.0.2.1:4000"
	for i := range 11 {
		if r := f.loginFrom(attacker, fmt.Sprintf("name-%d", i), wrongOpsToken); r.status != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, r.status)
		}
	}
	r := f.loginFrom(attacker, "someone-new", opsToken)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "60" || signedIn(r) {
		t.Fatalf("the right token from the locked-out address: %d Retry-After %q, want 429 after 60s and no session",
			r.status, r.header.Get("Retry-After"))
	}
	if !strings.Contains(r.body, "Too many failed sign-ins") {
		t.Fatalf("the 429 page does not say why:\n%s", r.body)
	}
	if r := f.loginFrom("192.0.2.1:5000", "x", opsToken); r.status != http.StatusTooManyRequests {
		t.Fatalf("the same address from another port: %d, want 429", r.status)
	}
	if r := f.loginFrom("192.0.2.2:4000", "someone-new", opsToken); !signedIn(r) {
		t.Fatalf("another address: %d, want signed in", r.status)
	}

	f.clock.Advance(59 * time.Second)
	if r := f.loginFrom(attacker, "x", opsToken); r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" {
		t.Fatalf("a second before the end: %d Retry-After %q, want 429 after 1s", r.status, r.header.Get("Retry-After"))
	}
	f.clock.Advance(time.Second)
	if r := f.loginFrom(attacker, "x", opsToken); !signedIn(r) {
		t.Fatalf("after the lockout: %d, want signed in", r.status)
	}
	// The success forgot the failures: one more wrong token is a plain 401.
	if r := f.loginFrom(attacker, "x", wrongOpsToken); r.status != http.StatusUnauthorized {
		t.Fatalf("a wrong token after the success: %d, want 401", r.status)
	}
	if r := f.loginFrom(attacker, "x", opsToken); !signedIn(r) {
		t.Fatalf("the right token after one failure: %d, want signed in", r.status)
	}

	want := map[string]int{rhttp.LoginFailure: 12, rhttp.LoginThrottled: 3, rhttp.LoginSuccess: 3}
	if got := obs.get(); len(got) != len(want) || got[rhttp.LoginFailure] != 12 || got[rhttp.LoginThrottled] != 3 || got[rhttp.LoginSuccess] != 3 {
		t.Fatalf("attempts counted %v, want %v", got, want)
	}

	// IPv6: one /64 is one client.
	for i := range 11 {
		if r := f.loginFrom(fmt.Sprintf("[2001:db8:0:1::%x]:1", i+1), fmt.Sprintf("v6-%d", i), wrongOpsToken); r.status != http.StatusUnauthorized {
			t.Fatalf("wrong token %d over IPv6: %d, want 401", i+1, r.status)
		}
	}
	if r := f.loginFrom("[2001:db8:0:1:ffff::1]:1", "v6-z", opsToken); r.status != http.StatusTooManyRequests {
		t.Fatalf("another address of the locked-out /64: %d, want 429", r.status)
	}
	if r := f.loginFrom("[2001:db8:0:2::1]:1", "v6-z", opsToken); !signedIn(r) {
		t.Fatalf("an address of another /64: %d, want signed in", r.status)
	}
}

// TestOpsLoginThrottlePerName: wrong tokens for one operator name from
// many addresses lock that name out (case-folded) everywhere, and no
// other name.
func TestOpsLoginThrottlePerName(t *testing.T) {
	f, _ := setupThrottle(t)
	for i := range 11 {
		addr := fmt.Sprintf("198.51.100.%d:1", i+1)
		if r := f.loginFrom(addr, "alice", wrongOpsToken); r.status != http.StatusUnauthorized {
			t.Fatalf("wrong token %d for alice: %d, want 401", i+1, r.status)
		}
	}
	for _, name := range []string{"alice", "ALICE", " Alice "} {
		r := f.loginFrom("203.0.113.7:1", name, opsToken)
		if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
			t.Fatalf("%q from a fresh address: %d, want 429 with Retry-After", name, r.status)
		}
	}
	if r := f.loginFrom("203.0.113.7:1", "bob", opsToken); !signedIn(r) {
		t.Fatalf("bob from the same address: %d, want signed in", r.status)
	}
}

// TestOpsBearerThrottle: a bearer token on /ops is an attempt too:
// eleven wrong ones lock the address out, and while it is locked out the
// right token gets 429 JSON with Retry-After; the login form from that
// address too.
func TestOpsBearerThrottle(t *testing.T) {
	f, obs := setupThrottle(t)
	from := func(addr, token string) map[string]string {
		return map[string]string{remoteAddrHeader: addr, "Authorization": "Bearer " + token, "Accept": "application/json"}
	}
	for i := range 11 {
		if r := f.do("GET", "/ops/escalations", nil, from("192.0.2.9:1", wrongOpsToken)); r.status != http.StatusUnauthorized {
			t.Fatalf("wrong bearer %d: %d, want 401", i+1, r.status)
		}
	}
	r := f.do("GET", "/ops/escalations", nil, from("192.0.2.9:1", opsToken))
	if code, _ := r.errCode(t); r.status != http.StatusTooManyRequests || code != "too_many_attempts" || r.header.Get("Retry-After") != "60" {
		t.Fatalf("the right bearer while locked out: %d %s Retry-After %q", r.status, r.body, r.header.Get("Retry-After"))
	}
	if r := f.loginFrom("192.0.2.9:1", "carol", opsToken); r.status != http.StatusTooManyRequests {
		t.Fatalf("the login form from the locked-out address: %d, want 429", r.status)
	}
	if r := f.do("GET", "/ops/escalations", nil, from("192.0.2.10:1", opsToken)); r.status != http.StatusOK {
		t.Fatalf("the right bearer from another address: %d", r.status)
	}
	f.clock.Advance(time.Minute)
	if r := f.do("GET", "/ops/escalations", nil, from("192.0.2.9:1", opsToken)); r.status != http.StatusOK {
		t.Fatalf("the right bearer after the lockout: %d", r.status)
	}
	if got := obs.get(); got[rhttp.LoginFailure] != 11 || got[rhttp.LoginThrottled] != 2 || got[rhttp.LoginSuccess] != 2 {
		t.Fatalf("attempts counted %v", got)
	}
}

// TestReadyzHidesTheDriversText: /readyz, unauthenticated, says only
// that the database is unreachable; the driver's text goes to the log.
func TestReadyzHidesTheDriversText(t *testing.T) {
	f := setupAPI(t, nil)
	f.store.Close()
	resp, err := http.Get(f.srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"database unreachable"`) {
		t.Fatalf("/readyz with the store closed: %d %s, want 503 database unreachable", resp.StatusCode, body)
	}
	if strings.Contains(string(body), "closed") || strings.Contains(string(body), "sql") {
		t.Errorf("/readyz leaks the driver's text: %s", body)
	}
}

// TestAPIThrottlesWrongTokens: wrong bearer tokens from one address are
// throttled as the operator token is: after the free failures the client
// is answered 429 with Retry-After and its token, right or wrong, is not
// compared; a client at another address is unaffected.
func TestAPIThrottlesWrongTokens(t *testing.T) {
	f := setupAPI(t, nil)
	h := f.srv.Config.Handler
	get := func(addr, token string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest("GET", "/v1/purchases/pur_missing", nil)
		req.RemoteAddr = addr
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	const guesser, shop = "192.0.2.7:40000", "198.51.100.9:40000"
	counts := map[int]int{}
	for i := range 30 {
		counts[get(guesser, fmt.Sprintf("wrong-token-%02d-xxxxxxxxxxxx", i)).Code]++
	}
	if counts[http.StatusUnauthorized] > 11 || counts[http.StatusTooManyRequests] < 19 {
		t.Fatalf("30 wrong tokens: %v, want at most 11 answers of 401 and the rest 429", counts)
	}
	rec := get(guesser, shopToken)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" ||
		!strings.Contains(rec.Body.String(), "too_many_failed_tokens") {
		t.Errorf("the right token from the locked-out address: %d %q %s, want 429 with Retry-After, unchecked",
			rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if rec := get(shop, shopToken); rec.Code != http.StatusNotFound {
		t.Errorf("the right token from another address: %d %s, want 404 (authenticated)", rec.Code, rec.Body)
	}
}
