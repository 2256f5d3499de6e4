package bench

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestDrive: every request is sent once, closed loop or open, its
// outcome counted, and failures are reported, not timed.
func TestDrive(t *testing.T) {
	for _, rate := range []float64{0, 1e6} {
		var mu sync.Mutex
		seen := map[int]int{}
		var done atomic.Int64
		d := drive(context.Background(), 50, 4, rate, &done, func(ctx context.Context, i int) (string, error) {
			mu.Lock()
			seen[i]++
			mu.Unlock()
			if i%10 == 0 {
				return "", os.ErrDeadlineExceeded
			}
			return "ok", nil
		})
		if len(seen) != 50 || done.Load() != 50 {
			t.Errorf("rate %g: %d requests sent, %d done, want 50", rate, len(seen), done.Load())
		}
		for i, n := range seen {
			if n != 1 {
				t.Errorf("rate %g: request %d sent %d times", rate, i, n)
			}
		}
		if d.outcomes["ok"] != 45 || d.outcomes["failed"] != 5 || d.failed != 5 || len(d.latencies) != 45 || len(d.failures) != maxFailuresShown {
			t.Errorf("rate %g: outcomes %v, %d failed, %d latencies, %d failures shown", rate, d.outcomes, d.failed, len(d.latencies), len(d.failures))
		}
	}
}

// TestDriveCountsSendsLateForBusyClients: in an open loop, a request that
// no client was free to take at its time counts as late because every
// client was busy, not as a late wake-up.
func TestDriveCountsSendsLateForBusyClients(t *testing.T) {
	const n = 5
	// One client; every request is due at once (a million a second), and
	// the first holds the client 2 ms: each other one is taken at least
	// 2 ms after its time.
	var done atomic.Int64
	d := drive(context.Background(), n, 1, 1e6, &done, func(ctx context.Context, i int) (string, error) {
		if i == 0 {
			time.Sleep(2 * time.Millisecond) // the work of a slow request, not a wait for another goroutine
		}
		return "ok", nil
	})
	if d.outcomes["ok"] != n {
		t.Fatalf("outcomes %v, want %d ok", d.outcomes, n)
	}
	// The first may also be late, if the machine held the client back
	// more than 1 ms before it took it.
	if d.late < n-1 || d.late+d.lateWake > n {
		t.Errorf("%d sends late for busy clients and %d woken late, want %d or %d late for busy clients", d.late, d.lateWake, n-1, n)
	}
}

// TestDriveCountsLateWakeups: in an open loop with clients to spare, a
// request whose client woke 2 ms after its time counts as a late
// wake-up, not as late for busy clients.
func TestDriveCountsLateWakeups(t *testing.T) {
	const n = 4
	// Four idle clients, a request every 100 ms: each client takes its
	// request at once and waits for its time (a client that started
	// 100 ms late would not), and the wait wakes 2 ms late.
	wakeLate := func(ctx context.Context, at time.Time) bool {
		time.Sleep(time.Until(at) + 2*time.Millisecond)
		return true
	}
	var done atomic.Int64
	d := driveWith(context.Background(), n, n, 10, &done, func(ctx context.Context, i int) (string, error) {
		return "ok", nil
	}, wakeLate)
	if d.outcomes["ok"] != n {
		t.Fatalf("outcomes %v, want %d ok", d.outcomes, n)
	}
	// The first is due at the start: its client may take it up to a
	// millisecond late without waiting (neither), or more (busy).
	if d.lateWake < n-1 || d.late+d.lateWake > n {
		t.Errorf("%d woken late and %d late for busy clients, want %d or %d woken late", d.lateWake, d.late, n-1, n)
	}
}
