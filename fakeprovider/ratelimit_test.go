package fakeprovider_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
)

func TestRateLimitInProcess(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{RateLimits: fakeprovider.RateLimits{Create: 3, Global: 4, RetryAfter: time.Second}})
	ctx := t.Context()
	for i := range 3 {
		if _, err := f.Create(ctx, request(fmt.Sprintf("pur_%d", i))); err != nil {
			t.Fatalf("create %d within the limit: %v", i, err)
		}
	}
	_, err := f.Create(ctx, request("pur_over"))
	if !errors.Is(err, provider.ErrRateLimited) || !errors.Is(err, provider.ErrRetryLater) {
		t.Fatalf("create over the limit: %v, want provider.ErrRateLimited", err)
	}
	if th, ok := provider.ThrottleOf(err); !ok || th.RetryAfter != time.Second {
		t.Fatalf("ThrottleOf: %+v %v, want Retry-After 1s", th, ok)
	}
	if got := len(f.ChargesFor("pur_over")); got != 0 {
		t.Fatalf("a throttled create charged %d times", got)
	}
	// The global limit: one status left, then refused.
	if _, err := f.Status(ctx, "pi_none"); err != nil {
		t.Fatalf("status within the global limit: %v", err)
	}
	if _, err := f.Status(ctx, "pi_none"); !errors.Is(err, provider.ErrRateLimited) {
		t.Fatalf("status over the global limit: %v", err)
	}
	// A second later the window has moved on: the same request passes.
	clk.Advance(time.Second)
	if _, err := f.Create(ctx, request("pur_over")); err != nil {
		t.Fatalf("the same create a second later: %v", err)
	}
	if got := f.ThrottledCalls("create"); got != 1 {
		t.Errorf("ThrottledCalls(create) = %d, want 1", got)
	}
	if got := len(f.AdmittedTimes("create")); got != 4 {
		t.Errorf("AdmittedTimes(create) has %d calls, want 4", got)
	}
}

func TestRateLimitOverHTTP(t *testing.T) {
	s := serve(t, fakeprovider.Config{RateLimits: fakeprovider.RateLimits{Create: 2, Retrieve: 1, RetryAfter: 2 * time.Second}}, fakeprovider.ServerConfig{}, nil)
	ctx := t.Context()
	for i := range 2 {
		if _, err := s.adapter.Create(ctx, request(fmt.Sprintf("pur_%d", i))); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	_, err := s.adapter.Create(ctx, request("pur_over"))
	if !errors.Is(err, provider.ErrRateLimited) {
		t.Fatalf("create over the limit through the adapter: %v, want provider.ErrRateLimited", err)
	}
	th, ok := provider.ThrottleOf(err)
	if !ok || th.RetryAfter != 2*time.Second || th.ShouldRetry != "true" {
		t.Fatalf("the adapter read %+v from the 429, want Retry-After 2s, Stripe-Should-Retry true", th)
	}
	if got := s.fake.CreateCalls(request("pur_over").IdempotencyKey); got != 0 {
		t.Fatalf("the throttled create reached the provider %d times", got)
	}
	// One retrieve passes and is not counted twice (front end and fake).
	if _, err := s.adapter.Status(ctx, "pi_none"); err != nil {
		t.Fatalf("status: %v", err)
	}
	if _, err := s.adapter.Status(ctx, "pi_none"); !errors.Is(err, provider.ErrRateLimited) {
		t.Fatalf("second status: %v, want rate limited", err)
	}
	if got := len(s.fake.AdmittedTimes("retrieve")); got != 1 {
		t.Fatalf("AdmittedTimes(retrieve) = %d, want 1", got)
	}
}
