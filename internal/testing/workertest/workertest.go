// Package workertest runs reconcile workers in tests: a fleet of
// services working until stopped, a batch of purchases for them, and the
// rate their provider calls reached. It is for tests only.
package workertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// Work runs the workers until the returned stop is called, or the test
// ends. A worker whose Work fails fails the test.
func Work(t *testing.T, workers []*reconcile.Service) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			if err := w.Work(ctx); err != nil {
				t.Errorf("Work: %v", err)
			}
		})
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// CreatePurchases creates n purchases of 3.00 USD through svc and
// returns their ids.
func CreatePurchases(t *testing.T, svc *reconcile.Service, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		p, err := svc.CreatePurchase(t.Context(), reconcile.NewPurchase{Customer: "budget", Amount: 300, Currency: "usd"})
		if err != nil {
			t.Fatalf("CreatePurchase: %v", err)
		}
		ids[i] = p.ID
	}
	return ids
}

// MaxInWindow returns the most times within any window of length w
// (sorted times, half-open windows).
func MaxInWindow(ts []time.Time, w time.Duration) int {
	worst, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		worst = max(worst, i-j+1)
	}
	return worst
}
