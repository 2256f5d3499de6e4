package fakeprovider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/providertest"
	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
)

// testSecretKey is the key the adapter sends to the server.
const testSecretKey = "sk_test_fakeprovider"

// quiet is a logger that drops everything.
var quiet = slog.New(slog.DiscardHandler)

// served is a Fake behind its Server, on an httptest server, with the
// real Stripe adapter pointed at it.
type served struct {
	fake    *fakeprovider.Fake
	clk     *testclock.Clock
	srv     *fakeprovider.Server
	http    *httptest.Server
	adapter *stripe.Provider
}

// serve starts a Server for a Fake with fcfg on a fake clock. wrap, if
// not nil, wraps the Server's handler. The adapter's client opens a new
// connection for every request, so that net/http never resends a create
// whose reply was lost on a reused connection (it may, for a request with
// an Idempotency-Key header; see TestServerLostReply).
func serve(t *testing.T, fcfg fakeprovider.Config, scfg fakeprovider.ServerConfig, wrap func(http.Handler) http.Handler) *served {
	t.Helper()
	f, clk := newFake(t, fcfg)
	if scfg.Logger == nil {
		scfg.Logger = quiet
	}
	srv := fakeprovider.NewServer(f, scfg)
	var h http.Handler = srv
	if wrap != nil {
		h = wrap(srv)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close) // first: it releases held requests
	return &served{fake: f, clk: clk, srv: srv, http: ts, adapter: newAdapter(t, ts.URL)}
}

func newAdapter(t *testing.T, base string) *stripe.Provider {
	t.Helper()
	return newAdapterPaged(t, base, 0)
}

// newAdapterPaged is newAdapter whose listings read pages of pageSize
// (0: the adapter's default).
func newAdapterPaged(t *testing.T, base string, pageSize int64) *stripe.Provider {
	t.Helper()
	p, err := stripe.New(stripe.Config{
		SecretKey:    testSecretKey,
		APIBase:      base,
		HTTPClient:   &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}},
		Logger:       quiet,
		ListPageSize: pageSize,
	})
	if err != nil {
		t.Fatalf("stripe.New: %v", err)
	}
	return p
}

func adapterCreate(t *testing.T, p provider.Provider, req provider.CreateRequest) provider.Result {
	t.Helper()
	res, err := p.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("create for %s through the adapter: %v", req.PurchaseID, err)
	}
	return res
}

// TestServerConformance runs the provider conformance suite against the
// real Stripe adapter talking to the server: the fake speaks the
// adapter's dialect of Stripe.
func TestServerConformance(t *testing.T) {
	configs := []struct {
		name string
		cfg  fakeprovider.Config
	}{
		{name: "Defaults"},
		{name: "Lagging", cfg: fakeprovider.Config{SearchLag: 30 * time.Second, SettleAfter: 10 * time.Second, KeyRetention: time.Hour}},
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			providertest.Run(t, providertest.Harness{
				New: func(t *testing.T) providertest.Target {
					s := serve(t, c.cfg, fakeprovider.ServerConfig{}, nil)
					return providertest.Target{
						Provider:    newAdapterPaged(t, s.http.URL, 2),
						Advance:     s.clk.Advance,
						Charges:     func(p string) int { return len(s.fake.ChargesFor(p)) },
						MoneyTaken:  s.fake.MoneyTaken,
						Refunds:     func(r string) int { return len(s.fake.RefundsFor(r)) },
						PageSize:    2,
						Requests:    s.fake.Calls,
						OpenDispute: openDispute(s.fake),
					}
				},
			})
		})
	}
	t.Run("RealClock", func(t *testing.T) {
		providertest.Run(t, providertest.Harness{
			New: func(t *testing.T) providertest.Target {
				f := fakeprovider.New(fakeprovider.Config{})
				srv := fakeprovider.NewServer(f, fakeprovider.ServerConfig{Logger: quiet})
				ts := httptest.NewServer(srv)
				t.Cleanup(ts.Close)
				t.Cleanup(srv.Close)
				return providertest.Target{Provider: newAdapter(t, ts.URL), OpenDispute: openDispute(f)}
			},
		})
	})
}

// TestServerSpeaksAdapterDialect checks what the adapter sends against
// what the server understands, and that the API version the server
// renders is the adapter's.
func TestServerSpeaksAdapterDialect(t *testing.T) {
	if fakeprovider.APIVersion != stripe.DefaultWebhookAPIVersion {
		t.Errorf("fakeprovider.APIVersion = %q, want stripe-go's %q", fakeprovider.APIVersion, stripe.DefaultWebhookAPIVersion)
	}
	var mu sync.Mutex
	var versions, paths []string
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			versions = append(versions, r.Header.Get("Stripe-Version"))
			paths = append(paths, r.Method+" "+r.URL.Path)
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
	})
	req := request("pur_dialect")
	created := adapterCreate(t, s.adapter, req)
	wantOutcome(t, "create", created, provider.Succeeded, fakeprovider.StatusSucceeded)
	if _, err := s.adapter.Status(t.Context(), created.PaymentID); err != nil {
		t.Fatalf("status: %v", err)
	}
	found, err := s.adapter.Search(t.Context(), req.PurchaseID)
	if err != nil || found.PaymentID != created.PaymentID {
		t.Fatalf("search = (%+v, %v), want %s", found, err, created.PaymentID)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"POST /v1/payment_intents", "GET /v1/payment_intents/" + created.PaymentID, "GET /v1/payment_intents/search"}
	if !slices.Equal(paths, want) {
		t.Errorf("requests %q, want %q", paths, want)
	}
	for _, v := range versions {
		if v != fakeprovider.APIVersion {
			t.Errorf("adapter sent Stripe-Version %q, want %q", v, fakeprovider.APIVersion)
		}
	}
	// The charge holds what the adapter sent, metadata included.
	c := s.fake.ChargesFor(req.PurchaseID)[0]
	if c.Customer != req.Customer || c.Description != req.Description || c.PaymentMethod != req.PaymentMethod ||
		c.IdempotencyKey != req.IdempotencyKey || c.Amount != req.Amount || c.Currency != req.Currency {
		t.Errorf("charge %+v does not hold request %+v", c, req)
	}
}

func TestServerFailBeforeIs429RetryLater(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	req := request("pur_429")
	s.fake.Script(req.PurchaseID, fakeprovider.FailBefore)

	res, err := s.adapter.Create(t.Context(), req)
	if !errors.Is(err, provider.ErrRetryLater) || provider.OutcomeOf(res, err) != provider.RetryLater {
		t.Fatalf("create with fail_before = (%+v, %v), want an error wrapping provider.ErrRetryLater", res, err)
	}
	if !strings.Contains(err.Error(), "429") || res.Reason != "rate_limit" {
		t.Errorf("error %v (reason %q), want a 429 rate_limit", err, res.Reason)
	}
	wantCharges(t, s.fake, req.PurchaseID, 0, 0)
	wantOutcome(t, "retry", adapterCreate(t, s.adapter, req), provider.Succeeded, fakeprovider.StatusSucceeded)
	wantCharges(t, s.fake, req.PurchaseID, 1, 1)
}

// TestServerTimeoutHoldsUntilClientGivesUp: the client gives up as soon as
// its request arrives; the handler, holding it, must then end, having done
// nothing.
func TestServerTimeoutHoldsUntilClientGivesUp(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	handled := make(chan struct{})
	var first atomic.Bool
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !first.CompareAndSwap(false, true) {
				h.ServeHTTP(w, r)
				return
			}
			defer close(handled)
			// Read the whole body first: cancelled before the server has
			// it, the client may cut it short, and the fake never sees the
			// create (which then left the scripted Timeout for the replay).
			body, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("read the create request: %v", err)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			cancel() // the client gives up once the server has the request
			h.ServeHTTP(w, r)
		})
	})
	req := request("pur_timeout")
	s.fake.Script(req.PurchaseID, fakeprovider.Timeout)

	res, err := s.adapter.Create(ctx, req)
	if err == nil || provider.OutcomeOf(res, err) != provider.Unknown || errors.Is(err, provider.ErrRetryLater) {
		t.Fatalf("create with timeout = (%+v, %v), want an unknown outcome", res, err)
	}
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still holds the request after its client gave up")
	}
	if got := s.fake.CreateCalls(req.IdempotencyKey); got != 1 {
		t.Errorf("CreateCalls = %d, want 1: the request reached the fake", got)
	}
	wantCharges(t, s.fake, req.PurchaseID, 0, 0)
	// Nothing was saved under the key: the replay charges, once.
	wantOutcome(t, "replay", adapterCreate(t, s.adapter, req), provider.Succeeded, fakeprovider.StatusSucceeded)
	wantCharges(t, s.fake, req.PurchaseID, 1, 1)
}

// TestServerCloseReleasesHeldRequest: a client without deadline is not
// left hanging by Close.
func TestServerCloseReleasesHeldRequest(t *testing.T) {
	arrived := make(chan struct{}, 1)
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case arrived <- struct{}{}:
			default:
			}
			h.ServeHTTP(w, r)
		})
	})
	req := request("pur_hang")
	s.fake.Script(req.PurchaseID, fakeprovider.Timeout)
	done := make(chan error, 1)
	go func() {
		_, err := s.adapter.Create(context.Background(), req)
		done <- err
	}()
	<-arrived
	s.srv.Close()
	if err := <-done; err == nil {
		t.Fatal("create held then released by Close: no error")
	}
	wantCharges(t, s.fake, req.PurchaseID, 0, 0)
}

func TestServerLostReply(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	req := request("pur_lost")
	s.fake.Script(req.PurchaseID, fakeprovider.LostReply)

	res, err := s.adapter.Create(t.Context(), req)
	if err == nil || provider.OutcomeOf(res, err) != provider.Unknown || errors.Is(err, provider.ErrRetryLater) {
		t.Fatalf("create with lost reply = (%+v, %v), want an unknown outcome", res, err)
	}
	wantCharges(t, s.fake, req.PurchaseID, 1, 1)
	charge := s.fake.ChargesFor(req.PurchaseID)[0]

	replay := adapterCreate(t, s.adapter, req)
	if replay.Outcome != provider.Succeeded || replay.PaymentID != charge.ID {
		t.Errorf("replay = %+v, want the saved success of %s", replay, charge.ID)
	}
	wantCharges(t, s.fake, req.PurchaseID, 1, 1)
	if got := s.fake.CreateCalls(req.IdempotencyKey); got != 2 {
		t.Errorf("CreateCalls = %d, want 2", got)
	}
}

func TestServerDecline(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	req := request("pur_declined")
	req.PaymentMethod = fakeprovider.PaymentMethodDeclined

	res := adapterCreate(t, s.adapter, req)
	charge := s.fake.ChargesFor(req.PurchaseID)[0]
	want := provider.Result{Outcome: provider.Declined, PaymentID: charge.ID, Status: fakeprovider.StatusRequiresPaymentMethod,
		Reason: fakeprovider.WireDeclineCode, Amount: req.Amount, Currency: req.Currency, PurchaseID: req.PurchaseID}
	if res != want {
		t.Errorf("create = %+v, want %+v", res, want)
	}
	st, err := s.adapter.Status(t.Context(), charge.ID)
	if err != nil || st != want {
		t.Errorf("status = (%+v, %v), want %+v", st, err, want)
	}
	// The 402 is the key's saved response: the replay answers it again.
	if again := adapterCreate(t, s.adapter, req); again != want {
		t.Errorf("replay = %+v, want %+v", again, want)
	}
	// A scripted decline of a good card is a decline too.
	other := request("pur_decline_fault")
	s.fake.Script(other.PurchaseID, fakeprovider.Decline)
	if res := adapterCreate(t, s.adapter, other); res.Outcome != provider.Declined || res.PaymentID == "" {
		t.Errorf("create with decline fault = %+v, want a decline with payment id", res)
	}
	wantCharges(t, s.fake, req.PurchaseID, 1, 0)
}

// TestServerAmountTooSmall: a create under the currency's minimum charge
// is refused as Stripe refuses it (400 amount_too_small, no charge), and
// the adapter reads the refusal as definite, never as an unknown outcome.
func TestServerAmountTooSmall(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	req := request("pur_too_small")
	req.Amount, req.Currency = 49, "usd"
	_, err := s.adapter.Create(t.Context(), req)
	if !errors.Is(err, provider.ErrRejected) || !strings.Contains(err.Error(), "amount_too_small") ||
		!strings.Contains(err.Error(), "Amount must be at least 0.50 USD") {
		t.Errorf("create of 0.49 USD: %v, want a rejection amount_too_small naming 0.50 USD", err)
	}
	if o := provider.OutcomeOf(provider.Result{}, err); o != provider.Rejected {
		t.Errorf("outcome %s, want rejected", o)
	}
	wantCharges(t, s.fake, req.PurchaseID, 0, 0)
	req = request("pur_at_minimum")
	req.Amount, req.Currency = 50, "usd"
	if res := adapterCreate(t, s.adapter, req); res.Outcome != provider.Succeeded {
		t.Errorf("create of 0.50 USD = %+v, want it charged", res)
	}
}

func TestServerKeyInUseIs409(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	s := serve(t, fakeprovider.Config{OnAccept: func(provider.CreateRequest) {
		if held.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
	}}, fakeprovider.ServerConfig{}, nil)
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	req := request("pur_busy")
	type reply struct {
		res provider.Result
		err error
	}
	done := make(chan reply, 1)
	go func() {
		res, err := s.adapter.Create(context.Background(), req)
		done <- reply{res, err}
	}()
	<-entered
	busy := adapterCreate(t, s.adapter, req)
	if busy.Outcome != provider.Pending || busy.Reason != stripe.ReasonKeyInUse {
		t.Errorf("create while in flight = %+v, want Pending %s", busy, stripe.ReasonKeyInUse)
	}
	unblock()
	first := <-done
	if first.err != nil || first.res.Outcome != provider.Succeeded {
		t.Fatalf("held create = (%+v, %v), want success", first.res, first.err)
	}
	wantCharges(t, s.fake, req.PurchaseID, 1, 1)
}

func TestServerKeyRetention(t *testing.T) {
	s := serve(t, fakeprovider.Config{KeyRetention: time.Hour}, fakeprovider.ServerConfig{}, nil)
	req := request("pur_forgotten")
	first := adapterCreate(t, s.adapter, req)
	s.clk.Advance(time.Hour + time.Second)
	second := adapterCreate(t, s.adapter, req)
	if second.PaymentID == first.PaymentID {
		t.Fatalf("replay after retention = %+v, want a new charge", second)
	}
	wantCharges(t, s.fake, req.PurchaseID, 2, 2)
	found, err := s.adapter.Search(t.Context(), req.PurchaseID)
	if err != nil || !strings.Contains(found.Reason, "2 charges for purchase "+req.PurchaseID) {
		t.Errorf("search = (%+v, %v), want the double charge reported", found, err)
	}
}

func TestServerProcessingAndStaleStatus(t *testing.T) {
	s := serve(t, fakeprovider.Config{SettleAfter: time.Minute}, fakeprovider.ServerConfig{}, nil)
	slow, stale := request("pur_slow"), request("pur_stale")
	s.fake.Script(slow.PurchaseID, fakeprovider.Processing)
	s.fake.Script(stale.PurchaseID, fakeprovider.StaleProcessing)

	created := adapterCreate(t, s.adapter, slow)
	wantOutcome(t, "create processing", created, provider.Pending, fakeprovider.StatusProcessing)
	s.clk.Advance(time.Minute)
	st, err := s.adapter.Status(t.Context(), created.PaymentID)
	if err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, "status after settling", st, provider.Succeeded, fakeprovider.StatusSucceeded)
	// The replay answers as the first create did, as Stripe does.
	wantOutcome(t, "replay", adapterCreate(t, s.adapter, slow), provider.Pending, fakeprovider.StatusProcessing)

	c := adapterCreate(t, s.adapter, stale)
	for i, want := range []provider.Outcome{provider.Pending, provider.Succeeded} {
		st, err := s.adapter.Status(t.Context(), c.PaymentID)
		if err != nil || st.Outcome != want {
			t.Errorf("status %d after stale_processing = (%+v, %v), want %s", i+1, st, err, want)
		}
	}
}

// TestServerWire checks the server's answers byte by byte where the
// adapter hides them: errors, headers, search pages.
func TestServerWire(t *testing.T) {
	s := serve(t, fakeprovider.Config{SearchLag: 30 * time.Second}, fakeprovider.ServerConfig{}, nil)
	do := func(method, path, key string, form url.Values, header map[string]string) (int, http.Header, map[string]any) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		r, err := http.NewRequestWithContext(t.Context(), method, s.http.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		if form != nil {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for k, v := range header {
			r.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatalf("%s %s: answer is not JSON: %v", method, path, err)
		}
		return resp.StatusCode, resp.Header, v
	}
	errOf := func(v map[string]any) map[string]any {
		e, _ := v["error"].(map[string]any)
		return e
	}
	form := func(purchase string, amount string) url.Values {
		return url.Values{"amount": {amount}, "currency": {"usd"}, "payment_method": {"pm_card_visa"}, "confirm": {"true"},
			"metadata[purchase_id]": {purchase}, "payment_method_types[0]": {"card"}}
	}

	t.Run("Auth", func(t *testing.T) {
		for _, key := range []string{"", "sk_live_abcdef123456", "rk_test_abc", "sk_test_"} {
			code, h, v := do("GET", "/v1/payment_intents/pi_x", key, nil, nil)
			if code != 401 || errOf(v)["type"] != "invalid_request_error" || h.Get("Request-Id") == "" {
				t.Errorf("key %q: %d %v, want 401 invalid_request_error with a Request-Id", key, code, v)
			}
			if strings.Contains(fmt.Sprint(v), "abcdef") {
				t.Errorf("key %q: answer %v echoes the key", key, v)
			}
		}
		bad, err := stripe.New(stripe.Config{SecretKey: "sk_live_nope", APIBase: s.http.URL, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bad.Status(t.Context(), "pi_x"); !errors.Is(err, stripe.ErrRejected) {
			t.Errorf("adapter with a live key: %v, want stripe.ErrRejected", err)
		}
	})
	t.Run("UnknownURL", func(t *testing.T) {
		code, _, v := do("GET", "/v1/charges", testSecretKey, nil, nil)
		if code != 404 || !strings.Contains(fmt.Sprint(errOf(v)["message"]), "Unrecognized request URL") {
			t.Errorf("GET /v1/charges: %d %v, want 404 Unrecognized request URL", code, v)
		}
	})
	t.Run("ResourceMissing", func(t *testing.T) {
		code, _, v := do("GET", "/v1/payment_intents/pi_nope", testSecretKey, nil, nil)
		if e := errOf(v); code != 404 || e["code"] != "resource_missing" || e["type"] != "invalid_request_error" {
			t.Errorf("unknown id: %d %v, want 404 resource_missing", code, v)
		}
	})
	t.Run("UnknownParameter", func(t *testing.T) {
		f := form("pur_wire_bad", "100")
		f.Set("customer", "cus_1")
		code, _, v := do("POST", "/v1/payment_intents", testSecretKey, f, map[string]string{"Idempotency-Key": "k-bad"})
		if e := errOf(v); code != 400 || e["code"] != "parameter_unknown" || e["param"] != "customer" {
			t.Errorf("unknown parameter: %d %v, want 400 parameter_unknown", code, v)
		}
		code, _, v = do("POST", "/v1/payment_intents", testSecretKey, form("pur_wire_bad", "0"), map[string]string{"Idempotency-Key": "k-bad"})
		if e := errOf(v); code != 400 || e["param"] != "amount" {
			t.Errorf("amount 0: %d %v, want 400 on amount", code, v)
		}
		wantCharges(t, s.fake, "pur_wire_bad", 0, 0)
	})
	t.Run("IdempotencyAndDecline", func(t *testing.T) {
		key := map[string]string{"Idempotency-Key": "k-wire"}
		code, h, first := do("POST", "/v1/payment_intents", testSecretKey, form("pur_wire", "100"), key)
		if code != 200 || first["object"] != "payment_intent" || first["status"] != "succeeded" || first["livemode"] != false ||
			h.Get("Idempotent-Replayed") != "" {
			t.Fatalf("create: %d %v %v", code, h, first)
		}
		md, _ := first["metadata"].(map[string]any)
		if md["purchase_id"] != "pur_wire" {
			t.Errorf("metadata %v, want purchase_id pur_wire", md)
		}
		code, h, again := do("POST", "/v1/payment_intents", testSecretKey, form("pur_wire", "100"), key)
		if code != 200 || again["id"] != first["id"] || h.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay: %d %v %v, want the saved answer, Idempotent-Replayed", code, h, again)
		}
		// Every parameter counts, even those CreateRequest does not hold.
		other := form("pur_wire", "100")
		other.Set("payment_method_types[0]", "sepa_debit")
		code, _, v := do("POST", "/v1/payment_intents", testSecretKey, other, key)
		if e := errOf(v); code != 400 || e["type"] != "idempotency_error" {
			t.Errorf("other payment method types: %d %v, want 400 idempotency_error", code, v)
		}

		declined := form("pur_wire_declined", "100")
		declined.Set("payment_method", fakeprovider.PaymentMethodDeclined)
		code, _, v = do("POST", "/v1/payment_intents", testSecretKey, declined, map[string]string{"Idempotency-Key": "k-wire-declined"})
		e := errOf(v)
		pi, _ := e["payment_intent"].(map[string]any)
		if code != 402 || e["type"] != "card_error" || e["code"] != fakeprovider.DeclineCode || pi["status"] != "requires_payment_method" ||
			pi["last_payment_error"] == nil {
			t.Errorf("decline: %d %v, want 402 card_error embedding the PaymentIntent", code, v)
		}
	})
	t.Run("SearchLagAndPages", func(t *testing.T) {
		key := "k-page-"
		for i := range 3 {
			// Three keys for one purchase: three charges.
			do("POST", "/v1/payment_intents", testSecretKey, form("pur_pages", "100"), map[string]string{"Idempotency-Key": key + fmt.Sprint(i)})
		}
		q := url.Values{"query": {"metadata['purchase_id']:'pur_pages'"}, "limit": {"2"}}
		code, _, v := do("GET", "/v1/payment_intents/search?"+q.Encode(), testSecretKey, nil, nil)
		if data, _ := v["data"].([]any); code != 200 || v["object"] != "search_result" || len(data) != 0 || v["has_more"] != false {
			t.Errorf("search within the lag: %d %v, want an empty search_result", code, v)
		}
		s.clk.Advance(30 * time.Second)
		var ids []any
		for page := 0; ; page++ {
			code, _, v := do("GET", "/v1/payment_intents/search?"+q.Encode(), testSecretKey, nil, nil)
			data, _ := v["data"].([]any)
			if code != 200 || page > 2 {
				t.Fatalf("search page %d: %d %v", page, code, v)
			}
			for _, pi := range data {
				ids = append(ids, pi.(map[string]any)["id"])
			}
			if v["has_more"] != true {
				break
			}
			q.Set("page", v["next_page"].(string))
		}
		if len(ids) != 3 {
			t.Errorf("search pages gave %v, want 3 payment intents", ids)
		}
		found, err := s.adapter.Search(t.Context(), "pur_pages")
		if err != nil || !strings.Contains(found.Reason, "3 charges") {
			t.Errorf("adapter search = (%+v, %v), want 3 charges reported", found, err)
		}
		code, _, v = do("GET", "/v1/payment_intents/search?query="+url.QueryEscape("status:'succeeded'"), testSecretKey, nil, nil)
		if code != 400 {
			t.Errorf("unsupported query: %d %v, want 400", code, v)
		}
	})
}

func TestServerSearchQuoting(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	for _, id := range []string{`pur_it's`, `pur_back\slash`, `pur_'\'`} {
		req := request(id)
		created := adapterCreate(t, s.adapter, req)
		found, err := s.adapter.Search(t.Context(), id)
		if err != nil || found.PaymentID != created.PaymentID {
			t.Errorf("search for %q = (%+v, %v), want %s", id, found, err, created.PaymentID)
		}
	}
}

// Webhooks.

const whSecret = "whsec_fakeprovider_test"

// receiver is a webhook endpoint that verifies deliveries with the Stripe
// adapter's verifier and records them.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []received
	answer func(n int) int // status code of the n-th request, from 1
}

type received struct {
	event  provider.Event
	err    error
	body   []byte
	header http.Header
}

func newReceiver(t *testing.T, now func() time.Time, answer func(n int) int) *receiver {
	t.Helper()
	return newReceiverFor(t, whSecret, now, answer)
}

// newReceiverFor is newReceiver of an endpoint whose signing secret is
// secret.
func newReceiverFor(t *testing.T, secret string, now func() time.Time, answer func(n int) int) *receiver {
	t.Helper()
	v, err := stripe.NewWebhookVerifier(stripe.WebhookConfig{Secret: secret, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	rc := &receiver{answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("receiver: read body: %v", err)
		}
		ev, verr := v.Verify(body, r.Header.Get(v.SignatureHeader()))
		rc.mu.Lock()
		rc.got = append(rc.got, received{event: ev, err: verr, body: body, header: r.Header.Clone()})
		n := len(rc.got)
		rc.mu.Unlock()
		switch {
		case verr != nil:
			w.WriteHeader(http.StatusBadRequest)
		case rc.answer != nil:
			w.WriteHeader(rc.answer(n))
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) received() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.got)
}

// types returns the types of the events received, in order.
func (rc *receiver) types() []string {
	var out []string
	for _, r := range rc.received() {
		out = append(out, r.event.Type)
	}
	return out
}

// serveWebhooks serves a Fake whose Server delivers synchronously to a
// receiver verifying on the fake clock.
func serveWebhooks(t *testing.T, fcfg fakeprovider.Config, scfg fakeprovider.ServerConfig, answer func(n int) int) (*served, *receiver) {
	t.Helper()
	var clk *testclock.Clock
	rc := newReceiver(t, func() time.Time { return clk.Now() }, answer)
	scfg.WebhookURL, scfg.WebhookSecret = rc.URL, whSecret
	scfg.SyncDelivery = true
	if scfg.WebhookBackoff == 0 {
		scfg.WebhookBackoff = time.Microsecond
	}
	s := serve(t, fcfg, scfg, nil)
	clk = s.clk
	return s, rc
}

func TestWebhooksSignedStripeEvents(t *testing.T) {
	s, rc := serveWebhooks(t, fakeprovider.Config{SettleAfter: time.Minute}, fakeprovider.ServerConfig{}, nil)
	ok, declined, slow, slowDecline := request("pur_wh_ok"), request("pur_wh_declined"), request("pur_wh_slow"), request("pur_wh_slow_declined")
	declined.PaymentMethod = fakeprovider.PaymentMethodDeclined
	s.fake.Script(slow.PurchaseID, fakeprovider.Processing)
	s.fake.Script(slowDecline.PurchaseID, fakeprovider.ProcessingDecline)
	for _, req := range []provider.CreateRequest{ok, declined, slow, slowDecline} {
		adapterCreate(t, s.adapter, req)
	}
	// A replay changes nothing: no event.
	adapterCreate(t, s.adapter, ok)
	s.clk.Advance(time.Minute)
	s.srv.Tick()

	want := []struct {
		purchase string
		typ      string
		outcome  provider.Outcome
	}{
		{ok.PurchaseID, "payment_intent.succeeded", provider.Succeeded},
		{declined.PurchaseID, "payment_intent.payment_failed", provider.Declined},
		{slow.PurchaseID, "payment_intent.processing", provider.Pending},
		{slowDecline.PurchaseID, "payment_intent.processing", provider.Pending},
		{slow.PurchaseID, "payment_intent.succeeded", provider.Succeeded},
		{slowDecline.PurchaseID, "payment_intent.payment_failed", provider.Declined},
	}
	got := rc.received()
	if len(got) != len(want) {
		t.Fatalf("received %q, want %d events", rc.types(), len(want))
	}
	ids := make(map[string]bool)
	for i, w := range want {
		r := got[i]
		if r.err != nil {
			t.Errorf("event %d: verify: %v", i, r.err)
			continue
		}
		charge := s.fake.ChargesFor(w.purchase)[0]
		if r.event.Type != w.typ || r.event.Outcome != w.outcome || r.event.PurchaseID != w.purchase || r.event.PaymentID != charge.ID {
			t.Errorf("event %d = %+v, want %s %s for %s (%s)", i, r.event, w.typ, w.outcome, w.purchase, charge.ID)
		}
		if ids[r.event.ID] {
			t.Errorf("event %d: id %s reused", i, r.event.ID)
		}
		ids[r.event.ID] = true
		if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("event %d: Content-Type %q", i, ct)
		}
		var body struct {
			Object          string `json:"object"`
			APIVersion      string `json:"api_version"`
			Livemode        *bool  `json:"livemode"`
			PendingWebhooks int    `json:"pending_webhooks"`
			Request         struct {
				ID             *string `json:"id"`
				IdempotencyKey *string `json:"idempotency_key"`
			} `json:"request"`
			Data struct {
				Object map[string]any `json:"object"`
			} `json:"data"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if body.Object != "event" || body.APIVersion != fakeprovider.APIVersion || body.Livemode == nil || *body.Livemode || body.PendingWebhooks != 1 {
			t.Errorf("event %d: envelope %+v", i, body)
		}
		// Creation events carry the request's key; settlements none.
		settlement := i >= 4
		if hasKey := body.Request.IdempotencyKey != nil && *body.Request.IdempotencyKey == charge.IdempotencyKey; hasKey == settlement {
			t.Errorf("event %d: request %+v (settlement %v)", i, body.Request, settlement)
		}
		if pi := body.Data.Object; pi["object"] != "payment_intent" || (pi["status"] == "requires_payment_method") != (pi["last_payment_error"] != nil) {
			t.Errorf("event %d: payment intent %v", i, pi)
		}
	}
	st := s.srv.WebhookStats()
	if want := (fakeprovider.WebhookStats{Emitted: 6, Sent: 6, Acked: 6}); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	// The event log agrees with what was received.
	for i, ev := range s.srv.Events() {
		if string(ev.Payload) != string(got[i].body) || len(ev.Faults) != 0 {
			t.Errorf("Events()[%d] = %+v, does not match delivery %d", i, ev, i)
		}
	}
}

func TestWebhooksSignatureByHand(t *testing.T) {
	payload := []byte(`{"id":"evt_1"}`)
	at := time.Unix(1700000000, 0)
	// HMAC-SHA256("whsec_x", "1700000000.{\"id\":\"evt_1\"}"), computed
	// independently (openssl dgst -sha256 -hmac whsec_x).
	const want = "t=1700000000,v1=366e40c480fe3a9e6a03609dca079cea86d77ae82d5a56b5348208247317a8d1"
	if got := fakeprovider.SignatureHeader(payload, "whsec_x", at); got != want {
		t.Errorf("SignatureHeader = %q, want %q", got, want)
	}
	v, err := stripe.NewWebhookVerifier(stripe.WebhookConfig{Secret: "whsec_x", Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	event := []byte(`{"id":"evt_1","object":"event","api_version":"` + fakeprovider.APIVersion + `","created":1700000000,"type":"charge.succeeded","data":{"object":{"id":"ch_1","object":"charge"}}}`)
	if _, err := v.Verify(event, fakeprovider.SignatureHeader(event, "whsec_x", at)); err != nil {
		t.Errorf("verify hand-signed event: %v", err)
	}
	if _, err := v.Verify(event, fakeprovider.SignatureHeader(event, "whsec_y", at)); !errors.Is(err, stripe.ErrBadSignature) {
		t.Errorf("verify with another secret: %v, want ErrBadSignature", err)
	}
}

func TestWebhooksRetryUntilAcked(t *testing.T) {
	// The first two attempts get a 500, the third a 200.
	s, rc := serveWebhooks(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, func(n int) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	adapterCreate(t, s.adapter, request("pur_retry"))
	got := rc.received()
	if len(got) != 3 || string(got[0].body) != string(got[2].body) {
		t.Fatalf("received %d deliveries, want 3 of one payload", len(got))
	}
	var codes []int
	for i, d := range s.srv.Deliveries() {
		codes = append(codes, d.StatusCode)
		if d.Attempt != i+1 || d.Copy != 1 || d.EventID != got[0].event.ID {
			t.Errorf("delivery %d = %+v", i, d)
		}
	}
	if !slices.Equal(codes, []int{500, 500, 200}) {
		t.Errorf("delivery codes %v, want [500 500 200]", codes)
	}
	if st := s.srv.WebhookStats(); st != (fakeprovider.WebhookStats{Emitted: 1, Sent: 3, Retries: 2, Acked: 1}) {
		t.Errorf("stats %+v", st)
	}
}

func TestWebhooksGiveUpLoudly(t *testing.T) {
	s, rc := serveWebhooks(t, fakeprovider.Config{}, fakeprovider.ServerConfig{WebhookMaxAttempts: 3},
		func(int) int { return http.StatusServiceUnavailable })
	adapterCreate(t, s.adapter, request("pur_unlucky"))
	if n := len(rc.received()); n != 3 {
		t.Errorf("received %d attempts, want 3", n)
	}
	ds := s.srv.Deliveries()
	if len(ds) != 3 || !ds[2].GaveUp || ds[1].GaveUp {
		t.Errorf("deliveries %+v, want the third to give up", ds)
	}
	if st := s.srv.WebhookStats(); st.Failed != 1 || st.Acked != 0 || st.Pending != 0 || st.Sent != 3 {
		t.Errorf("stats %+v, want 1 failed", st)
	}

	// A receiver that is not there: connection errors are retried too.
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	f, _ := newFake(t, fakeprovider.Config{})
	srv := fakeprovider.NewServer(f, fakeprovider.ServerConfig{WebhookURL: deadURL, WebhookSecret: whSecret, SyncDelivery: true,
		WebhookMaxAttempts: 2, WebhookBackoff: time.Microsecond, Logger: quiet})
	t.Cleanup(srv.Close)
	mustCreate(t, f, request("pur_nobody"))
	srv.Tick() // direct Fake.Create calls are announced at the next look
	ds = srv.Deliveries()
	if len(ds) != 2 || ds[0].Err == "" || ds[0].StatusCode != 0 || !ds[1].GaveUp {
		t.Errorf("deliveries to nobody %+v, want 2 connection errors, then give up", ds)
	}
}

func TestWebhookFaultDrop(t *testing.T) {
	s, rc := serveWebhooks(t, fakeprovider.Config{}, fakeprovider.ServerConfig{WebhookFaults: fakeprovider.WebhookFaults{Drop: 1}}, nil)
	req := request("pur_dropped")
	created := adapterCreate(t, s.adapter, req)
	s.srv.Tick()
	if n := len(rc.received()); n != 0 {
		t.Errorf("received %d events, want none", n)
	}
	evs := s.srv.Events()
	if len(evs) != 1 || !evs[0].Has(fakeprovider.WebhookDrop) || evs[0].Type != "payment_intent.succeeded" {
		t.Errorf("events %+v, want one dropped payment_intent.succeeded", evs)
	}
	if st := s.srv.WebhookStats(); st != (fakeprovider.WebhookStats{Emitted: 1, Dropped: 1}) {
		t.Errorf("stats %+v", st)
	}
	// Without the event, a status query settles the purchase.
	st, err := s.adapter.Status(t.Context(), created.PaymentID)
	if err != nil || st.Outcome != provider.Succeeded {
		t.Errorf("status = (%+v, %v), want success", st, err)
	}
}

func TestWebhookFaultDuplicate(t *testing.T) {
	s, rc := serveWebhooks(t, fakeprovider.Config{}, fakeprovider.ServerConfig{WebhookFaults: fakeprovider.WebhookFaults{Duplicate: 1}}, nil)
	adapterCreate(t, s.adapter, request("pur_twice"))
	got := rc.received()
	if len(got) != 2 || got[0].event.ID != got[1].event.ID || string(got[0].body) != string(got[1].body) {
		t.Fatalf("received %d deliveries, want the same event twice, byte-identical", len(got))
	}
	ds := s.srv.Deliveries()
	if len(ds) != 2 || ds[0].Copy != 1 || ds[1].Copy != 2 || !ds[0].Acked || !ds[1].Acked {
		t.Errorf("deliveries %+v, want copies 1 and 2 acked", ds)
	}
	if evs := s.srv.Events(); len(evs) != 1 || !evs[0].Has(fakeprovider.WebhookDuplicate) {
		t.Errorf("events %+v, want one duplicated", evs)
	}
	if st := s.srv.WebhookStats(); st != (fakeprovider.WebhookStats{Emitted: 1, Sent: 2, Acked: 2, Duplicated: 1}) {
		t.Errorf("stats %+v", st)
	}
}

func TestWebhookFaultReorder(t *testing.T) {
	s, rc := serveWebhooks(t, fakeprovider.Config{SettleAfter: time.Minute},
		fakeprovider.ServerConfig{WebhookFaults: fakeprovider.WebhookFaults{Reorder: 1}}, nil)
	req := request("pur_reordered")
	s.fake.Script(req.PurchaseID, fakeprovider.Processing)
	adapterCreate(t, s.adapter, req)
	s.srv.Tick()
	if n := len(rc.received()); n != 0 {
		t.Fatalf("received %q before the charge settled, want the processing event held", rc.types())
	}
	s.clk.Advance(time.Minute)
	s.srv.Tick()
	if got, want := rc.types(), []string{"payment_intent.succeeded", "payment_intent.processing"}; !slices.Equal(got, want) {
		t.Errorf("received %q, want %q", got, want)
	}
	evs := s.srv.Events()
	if len(evs) != 2 || !evs[0].Has(fakeprovider.WebhookReorder) || evs[1].Has(fakeprovider.WebhookReorder) {
		t.Errorf("events %+v, want the processing one reordered", evs)
	}
	if st := s.srv.WebhookStats(); st.Reordered != 1 || st.Acked != 2 || st.Pending != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestWebhookFaultDelay(t *testing.T) {
	s, rc := serveWebhooks(t, fakeprovider.Config{}, fakeprovider.ServerConfig{WebhookFaults: fakeprovider.WebhookFaults{Delay: 1}}, nil)
	adapterCreate(t, s.adapter, request("pur_late_1"))
	adapterCreate(t, s.adapter, request("pur_late_2"))
	if n := len(rc.received()); n != 0 {
		t.Fatalf("received %q before any Tick, want both held", rc.types())
	}
	if st := s.srv.WebhookStats(); st.Delayed != 2 || st.Pending != 2 {
		t.Errorf("stats before Tick %+v, want 2 delayed and pending", st)
	}
	s.srv.Tick()
	got := rc.received()
	if len(got) != 2 || got[0].event.PurchaseID != "pur_late_1" || got[1].event.PurchaseID != "pur_late_2" {
		t.Fatalf("received %+v after Tick, want both, in order", got)
	}
	if st := s.srv.WebhookStats(); st.Acked != 2 || st.Pending != 0 {
		t.Errorf("stats after Tick %+v", st)
	}
}

// TestWebhookFaultDelayAfterLaterEvents: a delayed event goes after the
// events emitted by the Tick that releases it.
func TestWebhookFaultDelayAfterLaterEvents(t *testing.T) {
	// Find, for seed 1 and half-probable delays, a purchase whose first
	// event is delayed and one whose first is not: the draws are a pure
	// function of seed and purchase id.
	scfg := fakeprovider.ServerConfig{WebhookFaults: fakeprovider.WebhookFaults{Delay: 0.5}}
	s, _ := serveWebhooks(t, fakeprovider.Config{Seed: 1}, scfg, nil)
	var delayed, onTime string
	for i := 0; i < 64 && (delayed == "" || onTime == ""); i++ {
		req := request(fmt.Sprintf("pur_probe_%d", i))
		mustCreate(t, s.fake, req) // announced at the next Tick
		s.srv.Tick()
		evs := s.srv.Events()
		if evs[len(evs)-1].Has(fakeprovider.WebhookDelay) {
			if delayed == "" {
				delayed = req.PurchaseID
			}
		} else if onTime == "" {
			onTime = req.PurchaseID
		}
	}
	if delayed == "" || onTime == "" {
		t.Fatal("no delayed and on-time purchases among 64 probes")
	}
	// Deterministic: a Fake with the same seed delays the same purchases.
	s2, rc2 := serveWebhooks(t, fakeprovider.Config{Seed: 1}, scfg, nil)
	mustCreate(t, s2.fake, request(delayed))
	s2.srv.Tick() // emits and holds the delayed event
	mustCreate(t, s2.fake, request(onTime))
	s2.srv.Tick() // emits the on-time one, then releases the delayed one
	var order []string
	for _, r := range rc2.received() {
		order = append(order, r.event.PurchaseID)
	}
	if want := []string{onTime, delayed}; !slices.Equal(order, want) {
		t.Errorf("received for %q, want %q", order, want)
	}
}

func TestWebhookFaultStaleProcessing(t *testing.T) {
	s, rc := serveWebhooks(t, fakeprovider.Config{}, fakeprovider.ServerConfig{WebhookFaults: fakeprovider.WebhookFaults{StaleProcessing: 1}}, nil)
	adapterCreate(t, s.adapter, request("pur_stale_event"))
	got := rc.received()
	if len(got) != 2 {
		t.Fatalf("received %q, want succeeded then a stale processing", rc.types())
	}
	ok, stale := got[0].event, got[1].event
	if ok.Type != "payment_intent.succeeded" || stale.Type != "payment_intent.processing" || stale.Outcome != provider.Pending ||
		stale.ID == ok.ID || stale.PaymentID != ok.PaymentID || got[1].err != nil {
		t.Errorf("received %+v then %+v (%v), want succeeded then processing with a new id", ok, stale, got[1].err)
	}
	if stale.Created.After(ok.Created) {
		t.Errorf("stale event created %v, after the success's %v", stale.Created, ok.Created)
	}
	evs := s.srv.Events()
	if len(evs) != 2 || evs[0].Has(fakeprovider.WebhookStaleProcessing) || !evs[1].Has(fakeprovider.WebhookStaleProcessing) {
		t.Errorf("events %+v, want the second marked stale", evs)
	}
	if st := s.srv.WebhookStats(); st != (fakeprovider.WebhookStats{Emitted: 2, Sent: 2, Acked: 2, Stale: 1}) {
		t.Errorf("stats %+v", st)
	}
}

// TestWebhookFaultsSeededAndAccounted runs many purchases under every
// fault and a flaky receiver: the same seed gives the same faults (and,
// with the same Instance, the same event ids), and every copy is
// accounted for.
func TestWebhookFaultsSeededAndAccounted(t *testing.T) {
	run := func(seed int64) ([]string, fakeprovider.WebhookStats) {
		scfg, err := fakeprovider.ParseServerConfig("webhook_delay=0.2,webhook_duplicate=0.2,webhook_reorder=0.3,webhook_drop=0.1,webhook_stale_processing=0.1,webhook_attempts=2")
		if err != nil {
			t.Fatal(err)
		}
		fcfg, err := fakeprovider.ParseConfig(fmt.Sprintf("processing=0.3,processing_decline=0.1,decline=0.1,settle_after=1m,seed=%d", seed))
		if err != nil {
			t.Fatal(err)
		}
		fcfg.Instance = "seeded" // the same event ids on both runs
		// Every third request fails.
		s, rc := serveWebhooks(t, fcfg, scfg, func(n int) int {
			if n%3 == 0 {
				return http.StatusBadGateway
			}
			return http.StatusNoContent
		})
		for i := range 30 {
			adapterCreate(t, s.adapter, request(fmt.Sprintf("pur_mix_%02d", i)))
		}
		s.clk.Advance(time.Minute)
		s.srv.Tick()
		s.srv.Tick() // releases the events delayed by the last one
		var log []string
		for _, ev := range s.srv.Events() {
			log = append(log, fmt.Sprintf("%s %s %s %v", ev.ID, ev.PurchaseID, ev.Type, ev.Faults))
		}
		st := s.srv.WebhookStats()
		copies := st.Emitted - st.Dropped + st.Duplicated
		if copies != st.Acked+st.Failed+st.Pending || st.Pending != 0 {
			t.Errorf("seed %d: stats %+v do not account for %d copies", seed, st, copies)
		}
		for _, r := range rc.received() {
			if r.err != nil {
				t.Errorf("seed %d: receiver: %v", seed, r.err)
			}
		}
		if st.Dropped == 0 || st.Duplicated == 0 || st.Reordered == 0 || st.Delayed == 0 || st.Stale == 0 || st.Retries == 0 {
			t.Errorf("seed %d: stats %+v, want every fault and retries at least once", seed, st)
		}
		return log, st
	}
	a, sa := run(7)
	b, sb := run(7)
	if !slices.Equal(a, b) || sa.Emitted != sb.Emitted {
		t.Errorf("seed 7 twice gave different events:\n%s\n--\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	if c, _ := run(8); slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 gave the same events")
	}
}

// TestWebhooksAsync delivers from the background goroutine and ticker,
// on the real clock.
func TestWebhooksAsync(t *testing.T) {
	rc := newReceiver(t, time.Now, nil)
	f := fakeprovider.New(fakeprovider.Config{SettleAfter: time.Millisecond})
	srv := fakeprovider.NewServer(f, fakeprovider.ServerConfig{WebhookURL: rc.URL, WebhookSecret: whSecret,
		TickEvery: time.Millisecond, Logger: quiet})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close)
	p := newAdapter(t, ts.URL)

	req := request("pur_async")
	f.Script(req.PurchaseID, fakeprovider.Processing)
	adapterCreate(t, p, req)
	// The ticker announces the settlement within a few milliseconds.
	deadline := time.Now().Add(10 * time.Second)
	for len(srv.Events()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("events %+v: no settlement announced within 10s", srv.Events())
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := rc.types(), []string{"payment_intent.processing", "payment_intent.succeeded"}; !slices.Equal(got, want) {
		t.Errorf("received %q, want %q", got, want)
	}
	for _, r := range rc.received() {
		if r.err != nil {
			t.Errorf("verify: %v", r.err)
		}
	}
	srv.Close() // waits for the goroutines
	srv.Close()
	srv.Tick() // a no-op after Close
	if st := srv.WebhookStats(); st.Acked != 2 || st.Pending != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestWebhooksAsyncCloseAbandons: Close does not wait for a receiver that
// never answers, and counts what it abandons.
func TestWebhooksAsyncCloseAbandons(t *testing.T) {
	arrived := make(chan struct{}, 1)
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // so that the server notices the client going
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-r.Context().Done()
	}))
	t.Cleanup(stuck.Close)
	f, _ := newFake(t, fakeprovider.Config{})
	srv := fakeprovider.NewServer(f, fakeprovider.ServerConfig{WebhookURL: stuck.URL, WebhookSecret: whSecret, TickEvery: -1, Logger: quiet})
	mustCreate(t, f, request("pur_stuck_1"))
	mustCreate(t, f, request("pur_stuck_2"))
	srv.Tick()
	<-arrived
	srv.Close()
	if st := srv.WebhookStats(); st.Emitted != 2 || st.Pending != 2 || st.Acked != 0 || st.Failed != 0 {
		t.Errorf("stats after Close %+v, want 2 pending", st)
	}
	if err := srv.Drain(t.Context()); err == nil {
		t.Error("Drain after Close with deliveries outstanding: no error")
	}
}

func TestNewServerPanicsOnInvalidConfig(t *testing.T) {
	for name, cfg := range map[string]fakeprovider.ServerConfig{
		"url without secret": {WebhookURL: "http://localhost/hook"},
		"secret without url": {WebhookSecret: whSecret},
		"relative url":       {WebhookURL: "/hook", WebhookSecret: whSecret},
		"bad probability":    {WebhookFaults: fakeprovider.WebhookFaults{Drop: -0.1}},
		"negative attempts":  {WebhookMaxAttempts: -1},
		"negative backoff":   {WebhookBackoff: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("NewServer(%+v) did not panic", cfg)
				}
			}()
			fakeprovider.NewServer(fakeprovider.New(fakeprovider.Config{}), cfg).Close()
		})
	}
}

// TestEventIDs: a server's event ids carry its fake's instance, so that
// two fake servers sending to one payrecon never give the same id (its
// inbox would take the second event for a conflicting redelivery of the
// first); a set instance gives the same ids on every run. The client
// secret stays letters and digits after "_secret_", as Stripe's.
func TestEventIDs(t *testing.T) {
	shape := regexp.MustCompile(`^evt_fake[0-9a-f]{8}_[0-9]{20}$`)
	secret := regexp.MustCompile(`"client_secret":"(pi_fake[0-9a-f]{8}_[0-9]{20})_secret_fake[0-9a-f]{8}[0-9]{20}"`)
	seen := map[string]bool{}
	for range 2 {
		s, rc := serveWebhooks(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
		created := adapterCreate(t, s.adapter, request("pur_same")) // the same purchase on both
		got := rc.received()
		if len(got) != 1 || got[0].err != nil {
			t.Fatalf("received %+v, want one event", got)
		}
		id := got[0].event.ID
		if want := fmt.Sprintf("evt_fake%s_%020d", s.fake.Instance(), 1); id != want || !shape.MatchString(id) {
			t.Errorf("event of fake %s: %q, want %q", s.fake.Instance(), id, want)
		}
		if seen[id] {
			t.Errorf("event id %s given by both servers", id)
		}
		seen[id] = true
		if m := secret.FindSubmatch(got[0].body); m == nil || string(m[1]) != created.PaymentID {
			t.Errorf("event body has no client secret of %s in Stripe's shape:\n%s", created.PaymentID, got[0].body)
		}
	}

	for range 2 {
		s, rc := serveWebhooks(t, fakeprovider.Config{Instance: "Run7"}, fakeprovider.ServerConfig{}, nil)
		adapterCreate(t, s.adapter, request("pur_same"))
		if got := rc.received(); len(got) != 1 || got[0].event.ID != "evt_fakeRun7_00000000000000000001" {
			t.Errorf("received %+v, want one event evt_fakeRun7_00000000000000000001", got)
		}
	}
}

// TestWebhookFaultsOfKeylessChargesIgnoreInstance: the webhook faults of
// a charge with no purchase are drawn from its payment id without the
// instance, so that the same seed gives the same faults in every fake.
func TestWebhookFaultsOfKeylessChargesIgnoreInstance(t *testing.T) {
	run := func() []string {
		fcfg := fakeprovider.Config{Seed: 3}
		scfg := fakeprovider.ServerConfig{WebhookFaults: fakeprovider.WebhookFaults{Duplicate: 0.5}}
		s, _ := serveWebhooks(t, fcfg, scfg, nil)
		for range 20 {
			req := request("")
			req.IdempotencyKey = ""
			mustCreate(t, s.fake, req)
		}
		s.srv.Tick()
		var faults []string
		for _, ev := range s.srv.Events() {
			if ev.PurchaseID != "" {
				t.Fatalf("event %+v has a purchase", ev)
			}
			faults = append(faults, fmt.Sprint(ev.Faults))
		}
		if len(faults) != 20 {
			t.Fatalf("%d events, want 20", len(faults))
		}
		return faults
	}
	a, b := run(), run()
	if !slices.Equal(a, b) {
		t.Errorf("seed 3 gave different faults in two fakes:\n%v\n%v", a, b)
	}
	if !slices.Contains(a, "[]") || !slices.Contains(a, "[webhook_duplicate]") {
		t.Errorf("faults %v, want some duplicates and some not", a)
	}
}
