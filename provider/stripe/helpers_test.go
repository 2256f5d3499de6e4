package stripe_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
)

// testKey is the secret key the adapter sends to test servers.
const testKey = "sk_test_payrecon"

// recorded is one request a fake Stripe server received.
type recorded struct {
	Method string
	Path   string
	Header http.Header
	Form   url.Values // query for GET, body for POST
}

// reply answers one request to a fake Stripe server.
type reply func(w http.ResponseWriter, r *http.Request)

// fakeStripe is an httptest server that records the requests it gets and
// answers each with its reply.
type fakeStripe struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

// newFakeStripe starts a fake Stripe server answering every request with
// answer; it is closed when the test ends.
func newFakeStripe(t *testing.T, answer reply) *fakeStripe {
	t.Helper()
	f := &fakeStripe{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			t.Errorf("fake stripe: parse form of %s %s: %v", r.Method, r.URL.Path, err)
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Form: r.Form})
		f.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

// requests returns the requests received so far.
func (f *fakeStripe) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// respond answers with status and a JSON body.
func respond(status int, body string) reply {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", "req_test")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// respondHTML answers with status and an HTML body, as a proxy in front of
// Stripe might.
func respondHTML(status int) reply {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(status)
		io.WriteString(w, "<html><body><h1>502 Bad Gateway</h1></body></html>\n")
	}
}

// resetConnection answers by closing the connection with a TCP reset,
// after the request has been read: Stripe may have acted on it.
func resetConnection(t *testing.T) reply {
	return func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("fake stripe: hijack: %v", err)
			return
		}
		if tcp, ok := conn.(*net.TCPConn); ok {
			tcp.SetLinger(0) // close sends RST, not FIN
		}
		conn.Close()
	}
}

// hang answers nothing until the client gives up (its context deadline
// closes the connection) or the server closes.
func hang(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

// paymentIntent returns a PaymentIntent object as Stripe sends it, for
// purchase pur_1 (1999 usd), with fields overridden by extra.
func paymentIntent(id, status string, extra map[string]any) map[string]any {
	pi := map[string]any{
		"id":                   id,
		"object":               "payment_intent",
		"amount":               1999,
		"amount_received":      0,
		"capture_method":       "automatic",
		"client_secret":        id + "_secret_DoNotLeakMe",
		"confirmation_method":  "automatic",
		"created":              1700000000,
		"currency":             "usd",
		"description":          "2 shirts",
		"livemode":             false,
		"metadata":             map[string]any{"purchase_id": "pur_1", "customer_ref": "cust-42"},
		"payment_method":       "pm_card_visa",
		"payment_method_types": []string{"card"},
		"status":               status,
	}
	if status == "succeeded" {
		pi["amount_received"] = 1999
	}
	for k, v := range extra {
		pi[k] = v
	}
	return pi
}

// cardDeclined is a last_payment_error of a declined card.
var cardDeclined = map[string]any{
	"type":         "card_error",
	"code":         "card_declined",
	"decline_code": "insufficient_funds",
	"message":      "Your card has insufficient funds.",
}

// authenticationRequired is the last_payment_error of an off-session
// charge on a card that demands authentication (3-D Secure).
var authenticationRequired = map[string]any{
	"type":         "card_error",
	"code":         "authentication_required",
	"decline_code": "authentication_required",
	"doc_url":      "https://stripe.com/docs/error-codes/authentication-required",
	"message":      "Your card was declined. This transaction requires authentication.",
}

// jsonOf returns v as JSON.
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %v: %v", v, err)
	}
	return string(b)
}

// stripeError returns a Stripe error body: {"error": fields}.
func stripeError(t *testing.T, fields map[string]any) string {
	t.Helper()
	return jsonOf(t, map[string]any{"error": fields})
}

// newProvider returns an adapter pointed at base, with cfg's other fields.
func newProvider(t *testing.T, base string, cfg stripe.Config) *stripe.Provider {
	t.Helper()
	cfg.SecretKey = testKey
	cfg.APIBase = base
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p, err := stripe.New(cfg)
	if err != nil {
		t.Fatalf("stripe.New: %v", err)
	}
	return p
}

// testRequest is the create request of the HTTP table tests: one of the
// current version, as the worker stores for a new purchase.
func testRequest() provider.CreateRequest {
	return provider.CreateRequest{
		IdempotencyKey: "payrecon-pur_1",
		PurchaseID:     "pur_1",
		Customer:       "cust-42",
		Amount:         1999,
		Currency:       "usd",
		Description:    "2 shirts",
		PaymentMethod:  "pm_card_visa",
		Version:        provider.CurrentRequestVersion,
	}
}

// errUnknown marks a want: an error that wraps none of the sentinels.
var errUnknown = errors.New("an error wrapping no sentinel")

// want is the expected answer of one call.
type want struct {
	// res is the exact Result expected, Outcome included.
	res provider.Result
	// err is nil for no error, errUnknown for an error wrapping no
	// sentinel, else the sentinel the error must wrap.
	err error
	// outcome is provider.OutcomeOf(res, err).
	outcome provider.Outcome
}

// check compares a call's answer with w. Errors must start with prefix,
// hide stripe-go's types and never carry a client secret.
func (w want) check(t *testing.T, prefix string, res provider.Result, err error) {
	t.Helper()
	if got := provider.OutcomeOf(res, err); got != w.outcome {
		t.Errorf("OutcomeOf = %q, want %q (result %+v, error %v)", got, w.outcome, res, err)
	}
	if res != w.res {
		t.Errorf("result\n got %+v\nwant %+v", res, w.res)
	}
	checkErr(t, prefix, err, w.err)
}

// checkErr checks err against want: nil for no error, errUnknown for an
// error wrapping no sentinel, else the sentinel err must wrap. Errors
// must start with prefix, hide stripe-go's types and never carry a client
// secret.
func checkErr(t *testing.T, prefix string, err, want error) {
	t.Helper()
	sentinels := []error{provider.ErrRetryLater, provider.ErrIdempotencyMismatch, stripe.ErrRejected}
	switch {
	case want == nil:
		if err != nil {
			t.Errorf("error %v, want none", err)
		}
		return
	case err == nil:
		t.Errorf("no error, want %v", want)
		return
	case want == errUnknown:
		for _, s := range sentinels {
			if errors.Is(err, s) {
				t.Errorf("error %v wraps %v, want no sentinel", err, s)
			}
		}
	case !errors.Is(err, want):
		t.Errorf("error %v, want one wrapping %v", err, want)
	}
	if !strings.HasPrefix(err.Error(), prefix) {
		t.Errorf("error %q does not start with %q", err, prefix)
	}
	if strings.Contains(err.Error(), "DoNotLeakMe") {
		t.Errorf("error %q leaks a client secret", err)
	}
	var se *stripego.Error
	if errors.As(err, &se) {
		t.Errorf("error %v unwraps to a stripe-go *Error", err)
	}
}

// arrivalDeadline is a context whose deadline is set when start is first
// called, d later: a client deadline that runs from the moment the server
// holds the request. It reports context.DeadlineExceeded, as a context
// with a deadline does.
type arrivalDeadline struct {
	context.Context // the parent, for values
	d               time.Duration
	once            sync.Once
	done            chan struct{}
}

func newArrivalDeadline(parent context.Context, d time.Duration) *arrivalDeadline {
	return &arrivalDeadline{Context: parent, d: d, done: make(chan struct{})}
}

// start sets the deadline d from now; later calls do nothing.
func (c *arrivalDeadline) start() {
	c.once.Do(func() { time.AfterFunc(c.d, func() { close(c.done) }) })
}

func (c *arrivalDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *arrivalDeadline) Done() <-chan struct{}       { return c.done }

func (c *arrivalDeadline) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
