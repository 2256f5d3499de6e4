//go:build failpoints

package crashpoint_test

import (
	"testing"

	"github.com/payrecon/payrecon/internal/crashpoint"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec string
		p    crashpoint.Point
		n    int64
		ok   bool
	}{
		{"intent-committed", crashpoint.IntentCommitted, 1, true},
		{"call-sent:3", crashpoint.CallSent, 3, true},
		{"nope", "", 0, false},
		{"call-sent:0", "", 0, false},
		{"call-sent:x", "", 0, false},
	} {
		p, n, err := crashpoint.Parse(tc.spec)
		if (err == nil) != tc.ok || p != tc.p || n != tc.n {
			t.Errorf("Parse(%q) = %q, %d, %v", tc.spec, p, n, err)
		}
	}
}
