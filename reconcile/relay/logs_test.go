package relay_test

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/relay"
)

// relayLogging returns a relay over st whose log lines go to the
// returned buffer. Its rounds run one at a time, so the buffer needs no
// lock.
func relayLogging(t *testing.T, st reconcile.Store, cfg relay.Config) (*relay.Relay, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	r, err := relay.New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, &buf
}

func subscribeURL(t *testing.T, st reconcile.Store, name, url string) {
	t.Helper()
	if err := st.InTx(t.Context(), func(tx reconcile.Tx) error {
		return tx.InsertSubscription(t.Context(), reconcile.Subscription{Name: name, URL: url, Secret: "whsec_test"})
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRelayLogsFailingOnceAndRecoveryOnce: a subscription retried many
// times while its endpoint fails logs one warning, not one per retry;
// its recovery logs one line.
func TestRelayLogsFailingOnceAndRecoveryOnce(t *testing.T) {
	clock := newClock()
	st := stores.SQLite(t, clock.Now)
	var down atomic.Bool
	down.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	subscribeURL(t, st, "shop", srv.URL+"/events?token=s3cret")
	writeEvents(t, st, clock.Now(), 2, 1)
	cfg := relay.Config{MinBackoff: time.Second, MaxBackoff: time.Minute}
	r, logs := relayLogging(t, st, cfg)
	attempts := 0
	for range 12 {
		n, err := r.RunOnce(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		attempts += n
		clock.Advance(cfg.MaxBackoff)
	}
	if attempts < 12 {
		t.Fatalf("%d attempts, want at least 12 retries", attempts)
	}
	if got := strings.Count(logs.String(), "outbox subscription failing"); got != 1 {
		t.Fatalf("%d failing warnings after %d failed attempts, want 1:\n%s", got, attempts, logs)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "token=****") || strings.Contains(logs.String(), "s3cret") {
		t.Fatalf("the warning must name the masked URL, never its token:\n%s", logs)
	}
	down.Store(false)
	for outboxStats(t, st).Pending > 0 {
		if _, err := r.RunOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		clock.Advance(cfg.MaxBackoff)
	}
	writeEvents(t, st, clock.Now(), 1, 1)
	if _, err := r.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(logs.String(), "outbox subscription recovered"); got != 1 {
		t.Fatalf("%d recovery lines, want 1:\n%s", got, logs)
	}
	if got := strings.Count(logs.String(), "\n"); got != 2 {
		t.Fatalf("%d log lines, want the warning and the recovery:\n%s", got, logs)
	}
}

// TestRelayMasksTheURLInLastError: a POST that could not connect stores
// net/http's error, which names the URL, with its password and query
// values masked.
func TestRelayMasksTheURLInLastError(t *testing.T) {
	clock := newClock()
	st := stores.SQLite(t, clock.Now)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: connection refused
	subscribeURL(t, st, "shop", "http://user:pa55@"+addr+"/events?token=s3cret")
	writeEvents(t, st, clock.Now(), 1, 1)
	r, _ := relayLogging(t, st, relay.Config{})
	if _, err := r.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	var ds []reconcile.Delivery
	if err := st.InTx(t.Context(), func(tx reconcile.Tx) error {
		var err error
		ds, err = tx.ListDeliveries(t.Context(), reconcile.DeliveryPending, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 {
		t.Fatalf("%d pending deliveries, want 1", len(ds))
	}
	got := ds[0].LastError
	if strings.Contains(got, "s3cret") || strings.Contains(got, "pa55") || !strings.Contains(got, "token=****") || !strings.Contains(got, "refused") {
		t.Fatalf("last error %q, want its URL masked", got)
	}
}
