package bench

import (
	"math"
	"testing"
	"time"
)

// TestFairShare: the window ends when the first account's even backlog
// was charged, and the least served account's charges in it are measured
// against the mean.
func TestFairShare(t *testing.T) {
	lift := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(ms ...int) []time.Time {
		var ts []time.Time
		for _, m := range ms {
			ts = append(ts, lift.Add(time.Duration(m)*time.Millisecond))
		}
		return ts
	}
	for _, tt := range []struct {
		name       string
		charged    map[string][]time.Time
		lastOf     map[string]int // each account's even backlog's last charge, ms
		wantWindow time.Duration
		wantLeast  float64
	}{
		{
			name:       "equal shares",
			charged:    map[string][]time.Time{"a": at(100, 200, 300), "b": at(110, 210, 290, 320)},
			lastOf:     map[string]int{"a": 300, "b": 320},
			wantWindow: 300 * time.Millisecond, wantLeast: 1, // b's 320 is after the window
		},
		{
			name:       "one account starved while the other drains",
			charged:    map[string][]time.Time{"a": at(100, 200, 300, 400), "b": at(350, 900)},
			lastOf:     map[string]int{"a": 400, "b": 900},
			wantWindow: 400 * time.Millisecond, wantLeast: 1.0 / 2.5, // 4 and 1 by 400 ms: the mean 2.5
		},
		{
			name:       "an account with no even backlog",
			charged:    map[string][]time.Time{"a": at(100), "b": nil},
			lastOf:     map[string]int{"a": 100, "b": -1},
			wantWindow: 0, wantLeast: 0,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var accounts []string
			var drains []accountDrain
			for _, a := range []string{"a", "b"} {
				accounts = append(accounts, a)
				d := accountDrain{account: a}
				if ms := tt.lastOf[a]; ms >= 0 {
					d.charges, d.last = len(tt.charged[a]), lift.Add(time.Duration(ms)*time.Millisecond)
				}
				drains = append(drains, d)
			}
			window, least := fairShare(accounts, drains, tt.charged, lift)
			if window != tt.wantWindow || math.Abs(least-tt.wantLeast) > 1e-9 {
				t.Errorf("fairShare = %s, %.3f; want %s, %.3f", window, least, tt.wantWindow, tt.wantLeast)
			}
		})
	}
}

// TestAccountDrainRate: an account's charges a second, from its first to
// its last; none for fewer than two.
func TestAccountDrainRate(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		d    accountDrain
		want float64
	}{
		{accountDrain{charges: 26, first: t0, last: t0.Add(time.Second)}, 25},
		{accountDrain{charges: 1, first: t0, last: t0}, 0},
		{accountDrain{}, 0},
	} {
		if got := tt.d.rate(); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%+v: rate %v, want %v", tt.d, got, tt.want)
		}
	}
}
