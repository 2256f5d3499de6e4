package reconcile_test

import (
	"context"
	"sync"
	"testing"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
)

// BenchmarkReconcileThroughput measures purchases per second from created
// to terminal: 4 workers over one store, an instant fake provider with no
// faults. Creating the purchases is not timed.
func BenchmarkReconcileThroughput(b *testing.B) {
	for name, newStore := range stores.All {
		b.Run(name, func(b *testing.B) {
			benchThroughput(b, newStore)
		})
	}
}

func benchThroughput(b *testing.B, newStore stores.Factory) {
	ctx := context.Background()
	st := newStore(b, nil)
	fake := fakeprovider.New(fakeprovider.Config{})
	workers := benchWorkers(b, st, fake)
	for range b.N {
		if _, err := workers[0].CreatePurchase(ctx, reconcile.NewPurchase{Customer: "bench", Amount: 300, Currency: "usd"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	burnDown(b, workers)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "purchases/s")
	if got := len(fake.Charges()); got != b.N {
		b.Fatalf("%d charges for %d purchases", got, b.N)
	}
}

// BenchmarkRefundThroughput measures refunds per second from created to
// terminal, as BenchmarkReconcileThroughput measures purchases: 4
// workers, the instant fake. Settling the purchases and creating the
// refunds is not timed.
func BenchmarkRefundThroughput(b *testing.B) {
	for name, newStore := range stores.All {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			st := newStore(b, nil)
			fake := fakeprovider.New(fakeprovider.Config{})
			workers := benchWorkers(b, st, fake)
			ids := make([]string, b.N)
			for i := range b.N {
				p, err := workers[0].CreatePurchase(ctx, reconcile.NewPurchase{Customer: "bench", Amount: 300, Currency: "usd"})
				if err != nil {
					b.Fatal(err)
				}
				ids[i] = p.ID
			}
			burnDown(b, workers)
			for _, id := range ids {
				if _, err := workers[0].CreateRefund(ctx, reconcile.NewRefund{PurchaseID: id, Amount: 100, Reason: "bench"}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			burnDown(b, workers)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "refunds/s")
			if got := len(fake.Refunds()); got != b.N {
				b.Fatalf("%d refunds at the provider for %d refunds", got, b.N)
			}
		})
	}
}

// benchWorkers returns 4 workers over st and fake.
func benchWorkers(b *testing.B, st reconcile.Store, fake *fakeprovider.Fake) []*reconcile.Service {
	b.Helper()
	var workers []*reconcile.Service
	for _, id := range []string{"b1", "b2", "b3", "b4"} {
		svc, err := reconcile.New(st, fake, reconcile.Config{WorkerID: id, BatchSize: 32, Logger: discardLogger()})
		if err != nil {
			b.Fatal(err)
		}
		workers = append(workers, svc)
	}
	return workers
}

// burnDown runs the workers concurrently until none finds a due job.
func burnDown(b *testing.B, workers []*reconcile.Service) {
	b.Helper()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n, err := w.RunOnce(context.Background())
				if err != nil {
					b.Error(err)
					return
				}
				if n == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
}
