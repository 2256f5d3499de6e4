package reconcile_test

import (
	"context"
	"sync"
	"testing"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
)

// BenchmarkReconcileThroughput measures purchases per second from created
// to terminal: 4 workers over one store, an instant fake provider with no
// faults. Creating the purchases is not timed.
func BenchmarkReconcileThroughput(b *testing.B) {
	for name, newStore := range storeFactories {
		b.Run(name, func(b *testing.B) {
			benchThroughput(b, newStore)
		})
	}
}

func benchThroughput(b *testing.B, newStore storeFactory) {
	ctx := context.Background()
	st := newStore(b, nil)
	fake := fakeprovider.New(fakeprovider.Config{})
	var workers []*reconcile.Service
	for _, id := range []string{"b1", "b2", "b3", "b4"} {
		svc, err := reconcile.New(st, fake, reconcile.Config{WorkerID: id, BatchSize: 32, Logger: discardLogger()})
		if err != nil {
			b.Fatal(err)
		}
		workers = append(workers, svc)
	}
	for range b.N {
		if _, err := workers[0].CreatePurchase(ctx, reconcile.NewPurchase{Customer: "bench", Amount: 300, Currency: "usd"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n, err := w.RunOnce(ctx)
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
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "purchases/s")
	if got := len(fake.Charges()); got != b.N {
		b.Fatalf("%d charges for %d purchases", got, b.N)
	}
}
