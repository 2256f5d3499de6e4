package fakeprovider

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// RateLimits are the fake's rate limits, in calls per second, by class of
// call, as Stripe limits an account per endpoint and in all. Each is a
// token bucket, as Stripe's limiters are: N calls a second, and a burst of
// at most N after a quiet second. A call over a limit is refused before the
// provider acts: in-process with a *RateLimitError (wrapping
// provider.ErrRateLimited), over HTTP with Stripe's 429 rate_limit. A zero
// field means no limit. The classes: Create (POST /v1/payment_intents),
// Retrieve (GET of one PaymentIntent or dispute), Search, List (the
// listings of payment intents, events and disputes), Refund (every refund
// call), and Global on top of them all.
type RateLimits struct {
	Global, Create, Retrieve, Search, List, Refund int
	// RetryAfter, when positive, is sent as the 429's Retry-After (in
	// whole seconds over HTTP, rounded up). Default none, as Stripe.
	RetryAfter time.Duration
}

func (l RateLimits) of(class string) int {
	switch class {
	case "global":
		return l.Global
	case "create":
		return l.Create
	case "retrieve":
		return l.Retrieve
	case "search":
		return l.Search
	case "list":
		return l.List
	case "refund":
		return l.Refund
	}
	return 0
}

func (l *RateLimits) ptr(class string) *int {
	switch class {
	case "global":
		return &l.Global
	case "create":
		return &l.Create
	case "retrieve":
		return &l.Retrieve
	case "search":
		return &l.Search
	case "list":
		return &l.List
	case "refund":
		return &l.Refund
	}
	return nil
}

// rateClasses are the names of RateLimits' classes, as the spec's
// rate_<class>=N and the fake's counters name them.
var rateClasses = []string{"global", "create", "retrieve", "search", "list", "refund"}

// RateClassOf returns the rate-limit class of op: create, retrieve,
// search, list or refund.
func RateClassOf(op provider.Op) string {
	switch op {
	case provider.OpCreate:
		return "create"
	case provider.OpStatus, OpDisputeGet:
		return "retrieve"
	case provider.OpSearch:
		return "search"
	case provider.OpList, provider.OpEventList, provider.OpDisputeList:
		return "list"
	}
	return "refund"
}

// RateLimitError is the error a call over the fake's rate limit gets
// in-process: what the Stripe adapter makes of a 429 rate_limit. The
// provider did not act; the same request may be sent again later.
type RateLimitError struct {
	Op         provider.Op
	Class      string // the class whose limit was hit: a call class or "global"
	RetryAfter time.Duration
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("fakeprovider: %s: HTTP 429 rate_limit (%s limit): %v", e.Op, e.Class, provider.ErrRateLimited)
}

// Unwrap returns provider.ErrRateLimited.
func (e *RateLimitError) Unwrap() error { return provider.ErrRateLimited }

// Throttle returns what the 429's headers say.
func (e *RateLimitError) Throttle() provider.Throttle {
	return provider.Throttle{RetryAfter: e.RetryAfter, ShouldRetry: "true"}
}

// limiter keeps a token bucket by class, and every admitted call's time
// for tests.
type limiter struct {
	mu        sync.Mutex
	buckets   map[string]*tokenBucket
	admitted  map[string][]time.Time // every admitted call, by class
	throttled map[string]int
}

type tokenBucket struct {
	tokens float64
	at     time.Time
}

func newLimiter() *limiter {
	return &limiter{buckets: map[string]*tokenBucket{}, admitted: map[string][]time.Time{}, throttled: map[string]int{}}
}

// SetRateLimits replaces the fake's rate limits from now on, as a provider
// changes an account's limits (or a test starts and ends a storm of 429s):
// the platform's alone, or a connected account's alone on its fake.
func (f *Fake) SetRateLimits(l RateLimits) {
	f.limiter.mu.Lock()
	defer f.limiter.mu.Unlock()
	f.cfg.RateLimits = l
}

// admittedKey marks a context whose call the HTTP front end already
// admitted, so that the in-process method it calls does not count it twice.
type admittedKey struct{}

// admit counts one call of op against the limits, or refuses it.
func (f *Fake) admit(ctx context.Context, op provider.Op) error {
	if ctx.Value(admittedKey{}) != nil {
		return nil
	}
	class := RateClassOf(op)
	now := f.cfg.Now()
	l := f.limiter
	l.mu.Lock()
	defer l.mu.Unlock()
	classes := []string{class, "global"}
	for _, c := range classes {
		lim := float64(f.cfg.RateLimits.of(c))
		b := l.buckets[c]
		if b == nil {
			b = &tokenBucket{tokens: lim, at: now}
			l.buckets[c] = b
		}
		if dt := now.Sub(b.at).Seconds(); dt > 0 {
			b.tokens = min(lim, b.tokens+lim*dt)
			b.at = now
		}
		if lim > 0 && b.tokens < 1 {
			l.throttled[class]++
			return &RateLimitError{Op: op, Class: c, RetryAfter: f.cfg.RateLimits.RetryAfter}
		}
	}
	for _, c := range classes {
		l.buckets[c].tokens--
	}
	l.admitted[class] = append(l.admitted[class], now)
	return nil
}

// AdmittedTimes returns when each call of class ("create", "retrieve",
// "search", "list", "refund") that the rate limits let through arrived,
// in order, throttled calls excluded (limits or none): what a test
// measures windows on.
func (f *Fake) AdmittedTimes(class string) []time.Time {
	f.limiter.mu.Lock()
	defer f.limiter.mu.Unlock()
	return append([]time.Time(nil), f.limiter.admitted[class]...)
}

// ThrottledCalls returns how many calls of class the rate limits refused.
func (f *Fake) ThrottledCalls(class string) int {
	f.limiter.mu.Lock()
	defer f.limiter.mu.Unlock()
	return f.limiter.throttled[class]
}

// routeOp returns the provider call an API request is, "" for none.
func routeOp(r *http.Request) provider.Op {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/v1/refunds"):
		if r.Method == http.MethodPost {
			return provider.OpRefundCreate
		}
		return provider.OpRefundGet
	case p == "/v1/events":
		return provider.OpEventList
	case p == "/v1/disputes":
		return provider.OpDisputeList
	case strings.HasPrefix(p, "/v1/disputes/"):
		return OpDisputeGet
	case p == "/v1/payment_intents" && r.Method == http.MethodPost:
		return provider.OpCreate
	case p == "/v1/payment_intents":
		return provider.OpList
	case p == "/v1/payment_intents/search":
		return provider.OpSearch
	case strings.HasPrefix(p, "/v1/payment_intents/"):
		return provider.OpStatus
	}
	return ""
}

// throttleHTTP admits r against the rate limits, or answers it with
// Stripe's 429 and reports false. On true, r's context is marked admitted.
func (s *Server) throttleHTTP(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	op := routeOp(r)
	if op == "" {
		return r, true
	}
	err := s.fake.admit(r.Context(), op)
	if rl, ok := err.(*RateLimitError); ok {
		h := w.Header()
		h.Set("Stripe-Should-Retry", "true")
		if rl.RetryAfter > 0 {
			h.Set("Retry-After", strconv.Itoa(int((rl.RetryAfter+time.Second-1)/time.Second)))
		}
		writeError(w, http.StatusTooManyRequests, apiError{Type: "invalid_request_error", Code: "rate_limit",
			DocURL:  "https://stripe.com/docs/error-codes/rate-limit",
			Message: "Too many requests hit the API too quickly. We recommend an exponential backoff of your requests."})
		return r, false
	}
	return r.WithContext(context.WithValue(r.Context(), admittedKey{}, true)), true
}
