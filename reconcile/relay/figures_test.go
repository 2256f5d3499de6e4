package relay_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/events"
	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/relay"
)

// TestOutboxDeliveryFigures logs the relay's throughput and its latency
// from a settlement's commit to the shop's 2xx (p50, p99) under 1,000
// settlements: four workers settle purchases while two relays deliver
// their events to a shop running the events.Receiver, all on real
// clocks. It asserts delivery, not time. Skipped with -short.
func TestOutboxDeliveryFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("a figure, not a check: skipped with -short")
	}
	const settlements = 1000
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		ctx := t.Context()
		st := newStore(t, nil)
		s := newShop(t, time.Now)
		s.subscribe(t, st, "shop")
		var (
			mu        sync.Mutex
			latencies []time.Duration
		)
		s.after = func(r *http.Request, status int) bool {
			if status != http.StatusOK {
				return true
			}
			ev, ok := s.bodyOf(r.Header.Get("Event-Id"))
			if ok {
				mu.Lock()
				latencies = append(latencies, time.Since(ev.CreatedAt))
				mu.Unlock()
			}
			return true
		}
		fake := fakeprovider.New(fakeprovider.Config{})
		var workers []*reconcile.Service
		for _, id := range []string{"w1", "w2", "w3", "w4"} {
			svc, err := reconcile.New(st, fake, reconcile.Config{WorkerID: id, BatchSize: 32, Logger: discardLogger()})
			if err != nil {
				t.Fatal(err)
			}
			workers = append(workers, svc)
		}
		for range settlements {
			if _, err := workers[0].CreatePurchase(ctx, reconcile.NewPurchase{Customer: "fig", Amount: 300, Currency: "usd"}); err != nil {
				t.Fatal(err)
			}
		}
		relayCtx, stopRelays := context.WithCancel(ctx)
		var relays sync.WaitGroup
		for _, owner := range []string{"relay-a", "relay-b"} {
			r := newRelay(t, st, owner, relay.Config{Batch: 64, Idle: 2 * time.Millisecond})
			relays.Go(func() { _ = r.Run(relayCtx) })
		}
		start := time.Now()
		var wg sync.WaitGroup
		for _, w := range workers {
			wg.Go(func() {
				for {
					n, err := w.RunOnce(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if n == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		settled := time.Since(start)
		for {
			mu.Lock()
			n := len(latencies)
			mu.Unlock()
			if n >= settlements || ctx.Err() != nil {
				break
			}
			time.Sleep(5 * time.Millisecond) // polling for the figure's end, not synchronising
		}
		took := time.Since(start)
		mu.Lock()
		if len(latencies) < settlements {
			mu.Unlock()
			t.Fatalf("%d of %d events delivered", len(latencies), settlements)
		}
		mu.Unlock()
		stopRelays()
		relays.Wait()

		// The backlog: 1,000 more settlements while no relay runs, then
		// two relays drain them.
		for range settlements {
			if _, err := workers[0].CreatePurchase(ctx, reconcile.NewPurchase{Customer: "fig", Amount: 300, Currency: "usd"}); err != nil {
				t.Fatal(err)
			}
		}
		for _, w := range workers {
			wg.Go(func() {
				for {
					if n, err := w.RunOnce(ctx); err != nil || n == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		drainStart := time.Now()
		drainCtx, stopDrain := context.WithCancel(ctx)
		for _, owner := range []string{"relay-a", "relay-b"} {
			r := newRelay(t, st, owner, relay.Config{Batch: 64, Idle: 2 * time.Millisecond})
			relays.Go(func() { _ = r.Run(drainCtx) })
		}
		for outboxStats(t, st).Pending > 0 && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond) // polling for the figure's end, not synchronising
		}
		drained := time.Since(drainStart)
		stopDrain()
		relays.Wait()
		t.Logf("%s: a backlog of %d events drained by two relays in %s (%.0f events/s)",
			name(t), settlements, drained.Round(time.Millisecond), float64(settlements)/drained.Seconds())

		mu.Lock()
		defer mu.Unlock()
		latencies = latencies[:settlements] // the first phase's
		slices.Sort(latencies)
		pct := func(p float64) time.Duration { return latencies[int(p*float64(len(latencies)-1))] }
		t.Logf("%s: %d settlements: settled in %s, all events delivered in %s (%.0f events/s); commit→2xx p50 %s, p99 %s, max %s",
			name(t), settlements, settled.Round(time.Millisecond), took.Round(time.Millisecond), float64(len(latencies))/took.Seconds(),
			pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond))
	})
}

// name is the last element of t's name: the store's.
func name(t *testing.T) string {
	n := t.Name()
	for i := len(n) - 1; i >= 0; i-- {
		if n[i] == '/' {
			return n[i+1:]
		}
	}
	return n
}

// bodyOf returns the event last delivered under id.
func (s *shop) bodyOf(id string) (events.Event, bool) {
	s.mu.Lock()
	b := s.bodies[id]
	s.mu.Unlock()
	ev, err := events.Unmarshal(b)
	return ev, err == nil
}
