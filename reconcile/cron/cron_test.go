package cron_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/cron"
	"github.com/payrecon/payrecon/reconcile/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func newStore(t *testing.T) reconcile.Store { return pgtest.NewStore(t) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// recorder counts sweep runs by result. Safe for concurrent use.
type recorder struct {
	mu   sync.Mutex
	runs map[string]int
}

func (r *recorder) Sweep(name, result string, took time.Duration, items int, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = map[string]int{}
	}
	r.runs[name+"/"+result]++
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[key]
}

// TestTwoSchedulersNeverOverlap: while replica A runs a sweep, replica B's
// run of the same sweep is skipped; another sweep is not blocked; once A
// finishes, B runs it.
func TestTwoSchedulersNeverOverlap(t *testing.T) {
	st := newStore(t)
	var inFlight, maxInFlight atomic.Int32
	entered := make(chan struct{})
	release := make(chan struct{})
	var first atomic.Bool
	sweep := func(ctx context.Context) (int, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		if !first.Swap(true) {
			close(entered)
			<-release
		}
		return 1, nil
	}
	other := func(ctx context.Context) (int, error) { return 0, nil }
	newScheduler := func(owner string, rec *recorder) *cron.Scheduler {
		s, err := cron.New(st, []cron.Sweep{
			{Name: "cleanup", Schedule: "@every 1h", Run: sweep},
			{Name: "gauges", Schedule: "@every 1h", Run: other},
		}, cron.Config{Owner: owner, Logger: quiet(), Observer: rec})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	recA, recB := &recorder{}, &recorder{}
	a, b := newScheduler("replica-a", recA), newScheduler("replica-b", recB)
	ctx := context.Background()

	done := make(chan error, 1)
	go func() { _, _, err := a.RunSweep(ctx, "cleanup"); done <- err }()
	<-entered
	for range 20 {
		ran, _, err := b.RunSweep(ctx, "cleanup")
		if err != nil || ran {
			t.Fatalf("replica B ran cleanup while A held it: ran=%v err=%v", ran, err)
		}
	}
	if ran, _, err := b.RunSweep(ctx, "gauges"); err != nil || !ran {
		t.Fatalf("another sweep was blocked: ran=%v err=%v", ran, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ran, n, err := b.RunSweep(ctx, "cleanup"); err != nil || !ran || n != 1 {
		t.Fatalf("replica B after A finished: ran=%v n=%d err=%v", ran, n, err)
	}
	if got := maxInFlight.Load(); got != 1 {
		t.Fatalf("cleanup ran %d at once", got)
	}
	if recB.count("cleanup/skipped") != 20 || recB.count("cleanup/ok") != 1 || recA.count("cleanup/ok") != 1 {
		t.Fatalf("runs: A %v, B %v", recA.runs, recB.runs)
	}
}

// TestConcurrentRunsAcrossReplicas: 4 replicas fire the same sweep at once,
// 25 times; the sweep never runs twice at the same time.
func TestConcurrentRunsAcrossReplicas(t *testing.T) {
	st := newStore(t)
	var inFlight, overlaps, runs atomic.Int32
	sweep := func(ctx context.Context) (int, error) {
		if inFlight.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer inFlight.Add(-1)
		runs.Add(1)
		// Hold the lock across a database round trip so that the others'
		// attempts overlap it.
		err := st.InTx(ctx, func(tx reconcile.Tx) error { _, err := tx.CountEscalated(ctx); return err })
		return 1, err
	}
	var schedulers []*cron.Scheduler
	for _, owner := range []string{"r1", "r2", "r3", "r4"} {
		s, err := cron.New(st, []cron.Sweep{{Name: "retention", Schedule: "@hourly", Run: sweep}}, cron.Config{Owner: owner, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		schedulers = append(schedulers, s)
	}
	for range 25 {
		var wg sync.WaitGroup
		for _, s := range schedulers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, _, err := s.RunSweep(context.Background(), "retention"); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping runs", overlaps.Load())
	}
	if runs.Load() < 25 {
		t.Fatalf("only %d runs in 25 rounds: every round must run the sweep at least once", runs.Load())
	}
	t.Logf("25 rounds × 4 replicas: %d runs, 0 overlaps", runs.Load())
}

func TestBadSchedulesAreNamed(t *testing.T) {
	st := newStore(t)
	_, err := cron.New(st, []cron.Sweep{
		{Name: "good", Schedule: "@every 1m", Run: func(context.Context) (int, error) { return 0, nil }},
		{Name: "broken", Schedule: "every minute", Run: func(context.Context) (int, error) { return 0, nil }},
	}, cron.Config{Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), `sweep "broken"`) {
		t.Fatalf("got %v, want an error naming the broken sweep", err)
	}
}

func TestInboxRetentionFloor(t *testing.T) {
	st := newStore(t)
	svc, err := reconcile.New(st, fakeprovider.New(fakeprovider.Config{}), reconcile.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cron.Sweeps(svc, nil, cron.SweepConfig{InboxRetention: 48 * time.Hour})
	if err == nil || !strings.Contains(err.Error(), "redelivery window") {
		t.Fatalf("48h inbox retention accepted: %v", err)
	}
	sweeps, err := cron.Sweeps(svc, nil, cron.SweepConfig{})
	if err != nil || len(sweeps) != 4 {
		t.Fatalf("defaults: %d sweeps, %v", len(sweeps), err)
	}
}

// TestOneReplicaNeverOverlapsItself: while a replica runs a sweep, its own
// next run of that sweep is skipped, and the first run's release cannot
// free a lock it no longer holds.
func TestOneReplicaNeverOverlapsItself(t *testing.T) {
	st := newStore(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	sweep := func(ctx context.Context) (int, error) {
		if runs.Add(1) == 1 {
			close(entered)
			<-release
		}
		return 0, nil
	}
	rec := &recorder{}
	s, err := cron.New(st, []cron.Sweep{{Name: "rescue", Schedule: "@every 30s", Run: sweep}}, cron.Config{Owner: "replica", Logger: quiet(), Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	other, err := cron.New(st, []cron.Sweep{{Name: "rescue", Schedule: "@every 30s", Run: sweep}}, cron.Config{Owner: "other", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := s.RunSweep(context.Background(), "rescue"); done <- err }()
	<-entered
	if ran, _, err := s.RunSweep(context.Background(), "rescue"); err != nil || ran {
		t.Fatalf("the same replica ran the sweep twice at once: ran=%v err=%v", ran, err)
	}
	if ran, _, err := other.RunSweep(context.Background(), "rescue"); err != nil || ran {
		t.Fatalf("another replica ran the sweep while it was held: ran=%v err=%v", ran, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ran, _, err := other.RunSweep(context.Background(), "rescue"); err != nil || !ran {
		t.Fatalf("after the first run: ran=%v err=%v", ran, err)
	}
	if rec.count("rescue/skipped") != 1 || rec.count("rescue/ok") != 1 {
		t.Fatalf("runs: %v", rec.runs)
	}
}
