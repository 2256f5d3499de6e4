package reconcile_test

import (
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
)

// idMillis returns the Unix milliseconds an id of prefix says it was made
// in, and fails t unless the id is prefix and 24 lower-case hex digits, as
// api/openapi.yaml promises.
func idMillis(t *testing.T, prefix, id string) int64 {
	t.Helper()
	digits, ok := strings.CutPrefix(id, prefix)
	if !ok || len(digits) != 24 || strings.ToLower(digits) != digits {
		t.Fatalf("id %q: want %q and 24 lower-case hex digits", id, prefix)
	}
	if _, err := hex.DecodeString(digits); err != nil {
		t.Fatalf("id %q: %v", id, err)
	}
	ms, err := strconv.ParseInt(digits[:12], 16, 64)
	if err != nil {
		t.Fatalf("id %q: %v", id, err)
	}
	return ms
}

func TestNewIDSortsByTime(t *testing.T) {
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		at     []time.Duration // after base, in the order the ids are made
		sorted []int           // the ids' indexes in sorted order
	}{
		{"one millisecond apart", []time.Duration{0, time.Millisecond, 2 * time.Millisecond}, []int{0, 1, 2}},
		{"made out of order", []time.Duration{time.Hour, 0, time.Second}, []int{1, 2, 0}},
		{"years apart", []time.Duration{24 * 365 * 40 * time.Hour, 0}, []int{1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ids []string
			for _, d := range tt.at {
				id := reconcile.NewID("pur_", base.Add(d))
				if got, want := idMillis(t, "pur_", id), base.Add(d).UnixMilli(); got != want {
					t.Fatalf("id %q says %d ms, want %d", id, got, want)
				}
				ids = append(ids, id)
			}
			var want []string
			for _, i := range tt.sorted {
				want = append(want, ids[i])
			}
			slices.Sort(ids)
			if !slices.Equal(ids, want) {
				t.Fatalf("sorted %q, want %q", ids, want)
			}
		})
	}
}

// TestNewIDWithinOneMillisecond: ids made in one millisecond share their
// first 12 digits and differ in the random rest.
func TestNewIDWithinOneMillisecond(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	for range 10000 {
		id := reconcile.NewID("ref_", at)
		if idMillis(t, "ref_", id) != at.UnixMilli() {
			t.Fatalf("id %q: want the millisecond %d", id, at.UnixMilli())
		}
		if seen[id] {
			t.Fatalf("id %q made twice", id)
		}
		seen[id] = true
	}
}

// wantIDsByClock makes n records with make, the store's clock a
// millisecond later each time, and fails t unless each id (of prefix)
// says its record's creation time and the ids sort in the order made.
func wantIDsByClock(t *testing.T, f *fixture, what, prefix string, n int, make func() (id string, created time.Time)) {
	t.Helper()
	var ids []string
	for range n {
		id, created := make()
		if got, want := idMillis(t, prefix, id), created.UnixMilli(); got != want {
			t.Fatalf("%s %s created at %s: its id says %d ms, want %d", what, id, created, got, want)
		}
		ids = append(ids, id)
		f.clock.Advance(time.Millisecond)
	}
	if !slices.IsSorted(ids) {
		t.Fatalf("%ss created one millisecond apart: ids %q, want them sorted", what, ids)
	}
}

// TestPurchaseIDsFollowTheStoresClock: the purchase API names a purchase
// by the time it creates it at, so purchases created later sort later.
func TestPurchaseIDsFollowTheStoresClock(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{Instance: "ids"}, reconcile.Config{})
		wantIDsByClock(t, f, "purchase", "pur_", 5, func() (string, time.Time) {
			p := f.create("ids")
			return p.ID, p.CreatedAt
		})
	})
}

// TestRefundIDsFollowTheStoresClock: a refund is named by the time the
// store gives its creation, as a purchase is.
func TestRefundIDsFollowTheStoresClock(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{Instance: "refundids"}, reconcile.Config{})
		p := f.settle("refund-ids")
		wantIDsByClock(t, f, "refund", "ref_", 3, func() (string, time.Time) {
			r := f.refund(p, 10)
			return r.ID, r.CreatedAt
		})
	})
}
