package reconcile_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
)

// TestWorkerClockSkewChangesNothing runs the same purchases through the
// same faults with the workers' clocks right, two hours fast and two
// hours slow. Due times, lease expiry, takeovers and the key-retention
// decision follow the store's clock, so every decision is the same: the
// transitions, the calls, the escalations and the next checks.
func TestWorkerClockSkewChangesNothing(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		var want string
		for _, skew := range []time.Duration{0, 2 * time.Hour, -2 * time.Hour} {
			got := skewRun(t, newStore, skew)
			if skew == 0 {
				want = got
				continue
			}
			if got != want {
				t.Fatalf("workers %s off decide differently:\n--- right clock\n%s\n--- skewed\n%s", skew, want, got)
			}
		}
	})
}

// skewRun works a fixed set of faulty purchases over three simulated days
// with the workers' clocks skew off the store's, and returns every
// decision, with times relative to the start.
func skewRun(t *testing.T, newStore stores.Factory, skew time.Duration) string {
	t.Helper()
	f := setup(t, newStore, fakeprovider.Config{Instance: "skew", SettleAfter: 90 * time.Second}, reconcile.Config{MaxAttempts: 6})
	f.skew = skew
	f.svc = f.service(f.fake, "worker-a", reconcile.Config{MaxAttempts: 6})
	start := f.clock.Now()
	faults := [][]fakeprovider.Fault{
		{fakeprovider.LostReply},
		{fakeprovider.Timeout, fakeprovider.Timeout},
		{fakeprovider.Processing},
		{fakeprovider.FailBefore},
		{fakeprovider.Decline},
		{fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout},
	}
	// A worker that stalls inside its create and loses the lease.
	stalled := f.create("skew-stalled")
	ids := []string{stalled.ID}
	a := f.stall(f.fake, "create")
	for i, fs := range faults {
		p := f.create(fmt.Sprintf("skew-%d", i))
		f.fake.Script(p.ID, fs...)
		ids = append(ids, p.ID)
	}
	f.clock.Advance(31 * time.Second)
	f.runUntilIdle(f.svc) // takes the stalled job over
	// The stalled call ends within its lease's time in real life (its
	// context deadline); here it ends now.
	close(a.gate.release)
	<-a.process
	for range 3 * 24 * 4 { // three days in steps of 15 minutes
		f.runUntilIdle(f.svc)
		f.clock.Advance(15 * time.Minute)
	}

	var b strings.Builder
	rel := func(at time.Time) string {
		if at.IsZero() {
			return "-"
		}
		return at.Sub(start).String()
	}
	for i, id := range ids {
		d := f.detail(id)
		fmt.Fprintf(&b, "purchase %d: %s escalated=%q at %s next=%s done=%s first=%s\n", i, d.Purchase.State,
			d.Purchase.EscalationReason, rel(d.Purchase.EscalatedAt), rel(d.Job.RunAt), rel(d.Job.DoneAt), rel(d.Purchase.FirstAttemptAt))
		for _, tr := range d.Transitions {
			fmt.Fprintf(&b, "  %s→%s %s at %s\n", tr.From, tr.To, tr.Cause, rel(tr.At))
		}
		for _, at := range d.Attempts {
			fmt.Fprintf(&b, "  call %s %s applied=%v at %s\n", at.Op, at.Outcome, at.Applied, rel(at.At))
		}
	}
	if n := len(f.fake.DoubleCharged()); n != 0 {
		t.Fatalf("skew %s: %d double charges", skew, n)
	}
	return b.String()
}
