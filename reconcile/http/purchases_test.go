package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
	"github.com/payrecon/payrecon/statemachine"
)

const (
	shopToken    = "shop-token-0123456789"
	billingToken = "billing-token-0123456789"
)

// apiFixture is a purchase API over a real store.
type apiFixture struct {
	t     testing.TB
	store reconcile.Store
	svc   *reconcile.Service
	clock *testClock
	srv   *httptest.Server
}

// setupAPI serves the purchase API; wrap, if set, wraps its handler.
func setupAPI(t testing.TB, wrap func(http.Handler) http.Handler) *apiFixture {
	t.Helper()
	f := &apiFixture{t: t, clock: newTestClock()}
	f.store = newStoreAt(t, f.clock.Now)
	svc, err := reconcile.New(f.store, fakeprovider.New(fakeprovider.Config{Now: f.clock.Now}),
		reconcile.Config{Now: f.clock.Now, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	clients, err := rhttp.ParseAPITokens("shop:" + shopToken + "," + "billing:" + billingToken)
	if err != nil {
		t.Fatal(err)
	}
	api, err := rhttp.NewPurchaseAPI(svc, clients)
	if err != nil {
		t.Fatal(err)
	}
	s := rhttp.New(svc, rhttp.Config{Logger: discardLogger()})
	api.Register(s)
	var h http.Handler = s
	if wrap != nil {
		h = wrap(h)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	checkContract(t, f.srv) // every request and response against api/openapi.yaml
	return f
}

type response struct {
	status   int
	body     string
	replayed bool
}

func (f *apiFixture) post(token, key, body string) (response, error) {
	req, err := http.NewRequest("POST", f.srv.URL+"/v1/purchases", strings.NewReader(body))
	if err != nil {
		return response{}, err
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
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed") == "true"}, err
}

func (f *apiFixture) mustPost(token, key, body string) response {
	f.t.Helper()
	r, err := f.post(token, key, body)
	if err != nil {
		f.t.Fatalf("POST: %v", err)
	}
	return r
}

// purchases counts purchases in the store.
func (f *apiFixture) purchases() int {
	f.t.Helper()
	total := 0
	err := f.store.InTx(context.Background(), func(tx reconcile.Tx) error {
		counts, err := tx.CountByState(context.Background())
		for _, n := range counts {
			total += n
		}
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return total
}

// keyStored reports whether a client's key is stored.
func (f *apiFixture) keyStored(client, key string) bool {
	f.t.Helper()
	var found bool
	err := f.store.InTx(context.Background(), func(tx reconcile.Tx) error {
		_, err := tx.GetIdempotencyKey(context.Background(), client, key)
		if errors.Is(err, reconcile.ErrNotFound) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return found
}

const coffee = `{"customer":"cus-7","amount":300,"currency":"usd","description":"coffee","payment_method":"pm_card_visa"}`

func TestThreeIdenticalRequestsOnePurchase(t *testing.T) {
	f := setupAPI(t, nil)
	var got []response
	for range 3 {
		got = append(got, f.mustPost(shopToken, "req-7f3a", coffee))
	}
	if got[0].status != http.StatusCreated || got[0].replayed {
		t.Fatalf("first: %+v", got[0])
	}
	for i, r := range got[1:] {
		if r.status != got[0].status || r.body != got[0].body || !r.replayed {
			t.Fatalf("retry %d: %+v, want the saved %+v replayed", i+1, r, got[0])
		}
	}
	if n := f.purchases(); n != 1 {
		t.Fatalf("%d purchases, want 1", n)
	}
	var p rhttp.PurchaseJSON
	if err := json.Unmarshal([]byte(got[0].body), &p); err != nil || p.ID == "" || p.State != "created" || p.Amount != 300 || p.Currency != "usd" {
		t.Fatalf("body %s: %+v %v", got[0].body, p, err)
	}
}

func TestConcurrentDuplicatesOnePurchasePerRound(t *testing.T) {
	f := setupAPI(t, nil)
	const rounds = 50
	for round := range rounds {
		key := fmt.Sprintf("round-%d", round)
		var wg sync.WaitGroup
		res := make([]response, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i], errs[i] = f.post(shopToken, key, coffee)
			}()
		}
		wg.Wait()
		for i := range 2 {
			if errs[i] != nil || res[i].status != http.StatusCreated {
				t.Fatalf("round %d request %d: %+v %v", round, i, res[i], errs[i])
			}
		}
		if res[0].body != res[1].body {
			t.Fatalf("round %d: different answers:\n%s\n%s", round, res[0].body, res[1].body)
		}
		if res[0].replayed == res[1].replayed {
			t.Fatalf("round %d: want exactly one replayed answer, got %v and %v", round, res[0].replayed, res[1].replayed)
		}
	}
	if n := f.purchases(); n != rounds {
		t.Fatalf("%d purchases after %d rounds, want %d", n, rounds, rounds)
	}
}

func TestSameKeyDifferentBody(t *testing.T) {
	f := setupAPI(t, nil)
	first := f.mustPost(shopToken, "req-1", coffee)
	r := f.mustPost(shopToken, "req-1", strings.Replace(coffee, `"amount":300`, `"amount":5000`, 1))
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "amount was 300, now 5000") {
		t.Fatalf("got %+v, want 422 naming the amount", r)
	}
	if strings.Contains(r.body, `"id"`) {
		t.Fatalf("422 leaks the other request's answer: %s", r.body)
	}
	if n := f.purchases(); n != 1 {
		t.Fatalf("%d purchases, want 1", n)
	}
	again := f.mustPost(shopToken, "req-1", coffee)
	if again.body != first.body || !again.replayed {
		t.Fatalf("original request after the mismatch: %+v", again)
	}
}

// TestCrashAfterCommitBeforeResponse: the server commits, then dies before
// the client hears back. The client's retry gets the saved answer.
func TestCrashAfterCommitBeforeResponse(t *testing.T) {
	var crashed atomic.Bool
	f := setupAPI(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != "POST" || crashed.Swap(true) {
				next.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r) // everything commits
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			conn.Close() // the process dies before answering
		})
	})
	if _, err := f.post(shopToken, "req-crash", coffee); err == nil {
		t.Fatal("the first request got an answer; want a dropped connection")
	}
	r := f.mustPost(shopToken, "req-crash", coffee)
	if r.status != http.StatusCreated || !r.replayed {
		t.Fatalf("retry: %+v, want the saved 201 replayed", r)
	}
	if n := f.purchases(); n != 1 {
		t.Fatalf("%d purchases, want 1", n)
	}
}

func TestKeysSweptAfterRetention(t *testing.T) {
	f := setupAPI(t, nil)
	first := f.mustPost(shopToken, "old-key", coffee)
	f.clock.Advance(71 * time.Hour)
	f.mustPost(shopToken, "young-key", coffee)
	f.clock.Advance(2 * time.Hour)
	n, err := f.svc.SweepIdempotencyKeys(context.Background(), 72*time.Hour, 1)
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v; want 1 key deleted", n, err)
	}
	if f.keyStored("shop", "old-key") || !f.keyStored("shop", "young-key") {
		t.Fatal("sweep deleted the wrong keys")
	}
	if got := f.purchases(); got != 2 {
		t.Fatalf("%d purchases after the sweep, want 2: purchases are never swept", got)
	}
	var p rhttp.PurchaseJSON
	_ = json.Unmarshal([]byte(first.body), &p)
	if _, err := f.svc.Purchase(context.Background(), p.ID); err != nil {
		t.Fatalf("purchase of the swept key: %v", err)
	}
}

func TestBadInputStoresNothing(t *testing.T) {
	f := setupAPI(t, nil)
	tests := []struct {
		name, key, body, field string
	}{
		{"missing key", "", coffee, "Idempotency-Key"},
		{"oversized key", strings.Repeat("k", 256), coffee, "Idempotency-Key"},
		{"non-ASCII key", "clé-7", coffee, "Idempotency-Key"},
		{"empty body", "k1", "", "body"},
		{"malformed JSON", "k3", `{"customer":`, "body"},
		{"trailing data", "k4", coffee + `{}`, "body"},
		{"unknown field", "k5", `{"customer":"c","amount":1,"currency":"usd","tip":5}`, "tip"},
		{"missing amount", "k6", `{"customer":"c","currency":"usd"}`, "amount"},
		{"fractional amount", "k7", `{"customer":"c","amount":3.5,"currency":"usd"}`, "amount"},
		{"zero amount", "k8", `{"customer":"c","amount":0,"currency":"usd"}`, "amount"},
		{"negative amount", "k9", `{"customer":"c","amount":-300,"currency":"usd"}`, "amount"},
		{"amount over max", "k10", `{"customer":"c","amount":100000000,"currency":"usd"}`, "amount"},
		{"unknown currency", "k11", `{"customer":"c","amount":300,"currency":"xyz"}`, "currency"},
		{"missing customer", "k12", `{"amount":300,"currency":"usd"}`, "customer"},
		{"under the minimum charge", "k13", `{"customer":"c","amount":1,"currency":"usd","payment_method":"pm_card_visa"}`, "amount"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := f.post(shopToken, tt.key, tt.body)
			if err != nil {
				t.Fatalf("POST: %v", err)
			}
			if r.status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", r.status, r.body)
			}
			var body struct {
				Error struct {
					Message string
					Fields  []struct{ Field string }
				}
			}
			if err := json.Unmarshal([]byte(r.body), &body); err != nil || len(body.Error.Fields) == 0 || body.Error.Fields[0].Field != tt.field {
				t.Fatalf("body %s: want a field error on %s", r.body, tt.field)
			}
			if strings.Contains(tt.name, "minimum") && !strings.Contains(r.body, "minimum charge of 0.50 USD") {
				t.Fatalf("body %s: want the minimum charge named", r.body)
			}
			if tt.key != "" && validKeyForTest(tt.key) && f.keyStored("shop", tt.key) {
				t.Fatalf("key %q stored for a bad request", tt.key)
			}
		})
	}
	if n := f.purchases(); n != 0 {
		t.Fatalf("%d purchases stored by bad requests", n)
	}
}

func validKeyForTest(k string) bool { return len(k) <= 255 }

func TestAuthentication(t *testing.T) {
	f := setupAPI(t, nil)
	for _, tok := range []string{"", "wrong-token-0123456789"} {
		if r := f.mustPost(tok, "k", coffee); r.status != http.StatusUnauthorized {
			t.Fatalf("token %q: status %d, want 401", tok, r.status)
		}
	}
	if n := f.purchases(); n != 0 {
		t.Fatalf("unauthenticated requests stored %d purchases", n)
	}
	if _, err := rhttp.NewPurchaseAPI(f.svc, nil); err == nil {
		t.Fatal("the API started without a token")
	}
}

func TestKeysAreScopedPerClient(t *testing.T) {
	f := setupAPI(t, nil)
	a := f.mustPost(shopToken, "same-key", coffee)
	b := f.mustPost(billingToken, "same-key", coffee)
	if a.status != http.StatusCreated || b.status != http.StatusCreated || b.replayed || a.body == b.body {
		t.Fatalf("two clients, one key string: %+v %+v", a, b)
	}
	if n := f.purchases(); n != 2 {
		t.Fatalf("%d purchases, want 2", n)
	}
}

func TestReferenceReusedUnderNewKey(t *testing.T) {
	f := setupAPI(t, nil)
	withRef := strings.Replace(coffee, `"customer"`, `"reference":"order-8831","customer"`, 1)
	first := f.mustPost(shopToken, "k-a", withRef)
	var p rhttp.PurchaseJSON
	_ = json.Unmarshal([]byte(first.body), &p)
	r := f.mustPost(shopToken, "k-b", withRef)
	if r.status != http.StatusConflict || !strings.Contains(r.body, p.ID) {
		t.Fatalf("reused reference: %+v, want 409 naming %s", r, p.ID)
	}
	if n := f.purchases(); n != 1 {
		t.Fatalf("%d purchases, want 1", n)
	}
	if f.keyStored("shop", "k-b") {
		t.Fatal("the refused request's key was stored; a corrected retry would be refused")
	}
}

func TestShowPurchase(t *testing.T) {
	f := setupAPI(t, nil)
	var p rhttp.PurchaseJSON
	_ = json.Unmarshal([]byte(f.mustPost(shopToken, "k", coffee).body), &p)
	if _, err := f.svc.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	get := func(id, token string) (int, string) {
		req, _ := http.NewRequest("GET", f.srv.URL+"/v1/purchases/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body := get(p.ID, shopToken)
	var d struct {
		State       string
		Transitions []struct{ From, To, Cause string }
		Attempts    []struct{ Op, Outcome string } `json:"provider_attempts"`
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil || status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	if d.State != string(statemachine.Succeeded) || len(d.Transitions) != 2 || len(d.Attempts) != 1 {
		t.Fatalf("detail: %s", body)
	}
	if status, _ := get("pur_nope", shopToken); status != http.StatusNotFound {
		t.Fatalf("unknown id: %d", status)
	}
	if status, _ := get(p.ID, "bad-token-0123456789"); status != http.StatusUnauthorized {
		t.Fatalf("bad token: %d", status)
	}
}

// BenchmarkCreatePurchaseHTTP measures POST /v1/purchases throughput over
// loopback on the local Postgres, 8 clients at once, each request with a
// fresh key.
func BenchmarkCreatePurchaseHTTP(b *testing.B) {
	f := setupAPI(b, nil)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	client := &http.Client{Transport: tr}
	var seq atomic.Int64
	b.SetParallelism(4) // 4 × GOMAXPROCS clients
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", f.srv.URL+"/v1/purchases", bytes.NewReader([]byte(coffee)))
			req.Header.Set("Authorization", "Bearer "+shopToken)
			req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-%d", seq.Add(1)))
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
}
