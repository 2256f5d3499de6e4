package cron_test

import (
	"bytes"
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
	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/cron"
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
		err := st.InTx(ctx, func(tx reconcile.Tx) error { _, err := tx.CountEscalatedByAccount(ctx); return err })
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
	if err != nil || len(sweeps) != 6 {
		t.Fatalf("defaults: %d sweeps, %v", len(sweeps), err)
	}
}

// TestStandardSchedules: each standard sweep has its default schedule,
// and a configured one replaces it.
func TestStandardSchedules(t *testing.T) {
	st := newStore(t)
	svc, err := reconcile.New(st, fakeprovider.New(fakeprovider.Config{}), reconcile.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	refresh := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name string
		cfg  cron.SweepConfig
		want map[string]string
	}{
		{"defaults", cron.SweepConfig{}, map[string]string{
			cron.SweepRescueLeases: "@every 30s", cron.SweepEscalate: "@every 1m", cron.SweepUnmatched: "@every 1m",
			cron.SweepRetention: "@hourly", cron.SweepAudit: "@hourly", cron.SweepRefreshGauges: "@every 15s",
			cron.SweepEvents: "@every 5m",
		}},
		{"audit every 10 minutes", cron.SweepConfig{AuditSchedule: "*/10 * * * *"}, map[string]string{
			cron.SweepAudit: "*/10 * * * *", cron.SweepRetention: "@hourly",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sweeps, err := cron.Sweeps(svc, refresh, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, sw := range sweeps {
				got[sw.Name] = sw.Schedule
			}
			for name, want := range tc.want {
				if got[name] != want {
					t.Errorf("sweep %s: schedule %q, want %q (all: %v)", name, got[name], want, got)
				}
			}
			if _, err := cron.New(st, sweeps, cron.Config{Logger: quiet()}); err != nil {
				t.Fatalf("the standard sweeps do not schedule: %v", err)
			}
		})
	}
}

// TestAuditSweep: the audit sweep runs the periodic audit from the
// provider's side, finds a charge payrecon did not make, stores it once
// however often its overlapping windows cover it, and runs on one replica
// at a time under its lock.
func TestAuditSweep(t *testing.T) {
	st := newStore(t)
	// The outside charge was made an hour ago: inside the first audit
	// window (25h back to 5m ago).
	hourAgo := time.Now().Add(-time.Hour)
	fake := fakeprovider.New(fakeprovider.Config{Now: func() time.Time { return hourAgo }})
	orphan := fake.ChargeOutside(fakeprovider.OutsideCharge{Amount: 4200, Currency: "eur"})
	svc, err := reconcile.New(st, fake, reconcile.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	sweeps, err := cron.Sweeps(svc, nil, cron.SweepConfig{})
	if err != nil {
		t.Fatal(err)
	}
	newScheduler := func(owner string, rec *recorder) *cron.Scheduler {
		t.Helper()
		s, err := cron.New(st, sweeps, cron.Config{Owner: owner, Logger: quiet(), Observer: rec})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	recA, recB := &recorder{}, &recorder{}
	a, b := newScheduler("replica-a", recA), newScheduler("replica-b", recB)
	ctx := context.Background()

	ran, n, err := a.RunSweep(ctx, cron.SweepAudit)
	if err != nil || !ran || n != 1 {
		t.Fatalf("audit sweep: ran=%v payments=%d err=%v, want it to run over 1 payment", ran, n, err)
	}
	findings, err := svc.Findings(ctx, reconcile.AnyAccount, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(findings) != 1 || findings[0].Kind != reconcile.FindingOrphanCharge || findings[0].PaymentID != orphan.ID ||
		findings[0].Amount != 4200 || findings[0].Currency != "eur" {
		t.Fatalf("findings after the first run: %+v, want one orphan_charge for %s (4200 eur)", findings, orphan.ID)
	}

	// The next window overlaps this one: the charge is matched again and
	// stored nothing twice.
	if ran, _, err := b.RunSweep(ctx, cron.SweepAudit); err != nil || !ran {
		t.Fatalf("second run: ran=%v err=%v", ran, err)
	}
	if findings, err := svc.Findings(ctx, reconcile.AnyAccount, false); err != nil || len(findings) != 1 {
		t.Fatalf("findings after an overlapping run: %d, %v; want the one finding", len(findings), err)
	}

	// While another replica holds the audit's lock, the sweep is skipped.
	holder := "replica-c#run"
	err = st.InTx(ctx, func(tx reconcile.Tx) error {
		got, err := tx.AcquireSweepLock(ctx, cron.SweepAudit, holder, time.Minute)
		if err == nil && !got {
			t.Error("the audit lock was not free after the runs")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if ran, _, err := a.RunSweep(ctx, cron.SweepAudit); err != nil || ran {
		t.Fatalf("the audit ran while another replica held its lock: ran=%v err=%v", ran, err)
	}
	if err := st.InTx(ctx, func(tx reconcile.Tx) error { return tx.ReleaseSweepLock(ctx, cron.SweepAudit, holder) }); err != nil {
		t.Fatal(err)
	}
	if ran, _, err := a.RunSweep(ctx, cron.SweepAudit); err != nil || !ran {
		t.Fatalf("after the lock was released: ran=%v err=%v", ran, err)
	}
	if recA.count("audit/ok") != 2 || recA.count("audit/skipped") != 1 || recB.count("audit/ok") != 1 {
		t.Fatalf("runs: A %v, B %v", recA.runs, recB.runs)
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

// TestSweepLockTTL: a sweep's own LockTTL bounds its run instead of the
// scheduler's, and the audit sweep gets the longer AuditLockTTL.
func TestSweepLockTTL(t *testing.T) {
	st := newStore(t)
	var deadlines sync.Map
	sweep := func(name string) func(ctx context.Context) (int, error) {
		return func(ctx context.Context) (int, error) {
			d, ok := ctx.Deadline()
			if !ok {
				t.Errorf("sweep %s runs without a deadline", name)
			}
			deadlines.Store(name, time.Until(d))
			return 0, nil
		}
	}
	s, err := cron.New(st, []cron.Sweep{
		{Name: "short", Schedule: "@hourly", Run: sweep("short")},
		{Name: "long", Schedule: "@hourly", Run: sweep("long"), LockTTL: time.Hour},
	}, cron.Config{Logger: quiet(), LockTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"short", "long"} {
		if ran, _, err := s.RunSweep(context.Background(), name); err != nil || !ran {
			t.Fatalf("%s: ran=%v err=%v", name, ran, err)
		}
	}
	short, _ := deadlines.Load("short")
	long, _ := deadlines.Load("long")
	if d := short.(time.Duration); d > time.Minute || d < 50*time.Second {
		t.Errorf("the short sweep had %s to run, want the scheduler's 1m", d)
	}
	if d := long.(time.Duration); d > time.Hour || d < 59*time.Minute {
		t.Errorf("the long sweep had %s to run, want its own 1h", d)
	}

	svc, err := reconcile.New(st, fakeprovider.New(fakeprovider.Config{}), reconcile.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	sweeps, err := cron.Sweeps(svc, nil, cron.SweepConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sw := range sweeps {
		want := time.Duration(0)
		if sw.Name == cron.SweepAudit || sw.Name == cron.SweepEvents {
			want = cron.AuditLockTTL
		}
		if sw.LockTTL != want {
			t.Errorf("sweep %s: lock TTL %s, want %s", sw.Name, sw.LockTTL, want)
		}
	}
}

// TestOutboxRetentionFloor: the outbox retention is refused below the
// relay's retry window plus the replay margin, whatever the window.
func TestOutboxRetentionFloor(t *testing.T) {
	st := newStore(t)
	svc, err := reconcile.New(st, fakeprovider.New(fakeprovider.Config{}), reconcile.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  cron.SweepConfig
		ok   bool
	}{
		{"defaults (7d over 3d + 1d)", cron.SweepConfig{}, true},
		{"exactly the floor", cron.SweepConfig{OutboxRetention: 96 * time.Hour}, true},
		{"below the default window plus margin", cron.SweepConfig{OutboxRetention: 95 * time.Hour}, false},
		{"a longer window raises the floor", cron.SweepConfig{OutboxRetryWindow: 10 * 24 * time.Hour}, false},
		{"a shorter window lowers it", cron.SweepConfig{OutboxRetryWindow: time.Hour, OutboxRetention: 25 * time.Hour}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cron.Sweeps(svc, nil, tc.cfg)
			if tc.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "outbox retention")) {
				t.Fatalf("Sweeps(%+v): %v; want ok=%v", tc.cfg, err, tc.ok)
			}
		})
	}
}

// TestEventSweep: the event sweep reads the provider's event log through
// the inbox, counts the events it read as its items, and runs on one
// replica at a time under its lock.
func TestEventSweep(t *testing.T) {
	st := newStore(t)
	fake := fakeprovider.New(fakeprovider.Config{})
	fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: "pur_elsewhere", Amount: 4200, Currency: "eur"})
	svc, err := reconcile.New(st, fake, reconcile.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	sweeps, err := cron.Sweeps(svc, nil, cron.SweepConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	a, err := cron.New(st, sweeps, cron.Config{Owner: "replica-a", Logger: quiet(), Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if ran, n, err := a.RunSweep(ctx, cron.SweepEvents); err != nil || !ran || n != 1 {
		t.Fatalf("event sweep: ran=%v events=%d err=%v, want it to read 1 event", ran, n, err)
	}
	if w, err := svc.EventWatermark(ctx); err != nil || w.IsZero() {
		t.Fatalf("watermark %v, %v; want one stored", w, err)
	}
	holder := "replica-b#run"
	err = st.InTx(ctx, func(tx reconcile.Tx) error {
		_, err := tx.AcquireSweepLock(ctx, cron.SweepEvents, holder, time.Minute)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if ran, _, err := a.RunSweep(ctx, cron.SweepEvents); err != nil || ran {
		t.Fatalf("the event sweep ran while another replica held its lock: ran=%v err=%v", ran, err)
	}
	if rec.count("events/ok") != 1 || rec.count("events/skipped") != 1 {
		t.Fatalf("runs: %v", rec.runs)
	}
}

// TestIdleSweepsLogAtDebug: a run that found nothing logs at debug, one
// that did something at info.
func TestIdleSweepsLogAtDebug(t *testing.T) {
	var buf bytes.Buffer
	items := 0
	s, err := cron.New(newStore(t), []cron.Sweep{{Name: "rescue", Schedule: "@every 30s", Run: func(context.Context) (int, error) { return items, nil }}},
		cron.Config{Owner: "replica", Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 0, 3} {
		items = n
		if ran, _, err := s.RunSweep(t.Context(), "rescue"); !ran || err != nil {
			t.Fatalf("RunSweep: ran=%v err=%v", ran, err)
		}
	}
	if got := strings.Count(buf.String(), `msg="sweep ran"`); got != 1 || !strings.Contains(buf.String(), "items=3") {
		t.Errorf("%d info lines for 3 runs, want 1 (the run with items):\n%s", got, buf.String())
	}
}
