package bench

import (
	"slices"
	"testing"
	"time"
)

// TestSummarise: nearest-rank percentiles, and a histogram from the first
// bucket that holds a latency to the last.
func TestSummarise(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := summarise("x", "", slices.Clone(ds))
	if l.P50ms != 50 || l.P90ms != 90 || l.P99ms != 99 || l.Maxms != 100 || l.Count != 100 {
		t.Errorf("percentiles %+v", l)
	}
	want := []Bucket{{1, 1}, {2, 1}, {5, 3}, {10, 5}, {20, 10}, {50, 30}, {100, 50}}
	if !slices.Equal(l.Histogram, want) {
		t.Errorf("histogram %v, want %v", l.Histogram, want)
	}
	if one := summarise("x", "", []time.Duration{3 * time.Second}); one.P50ms != 3000 || one.Maxms != 3000 || len(one.Histogram) != 1 {
		t.Errorf("one latency: %+v", one)
	}
	if none := summarise("x", "", nil); none.Count != 0 || len(none.Histogram) != 0 {
		t.Errorf("no latency: %+v", none)
	}
}
