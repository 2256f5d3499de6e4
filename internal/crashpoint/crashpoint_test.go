package crashpoint_test

import (
	"testing"

	"github.com/payrecon/payrecon/internal/crashpoint"
)

func TestPointsAreDistinct(t *testing.T) {
	seen := map[crashpoint.Point]bool{}
	for _, p := range crashpoint.Points {
		if p == "" || seen[p] {
			t.Errorf("point %q empty or listed twice", p)
		}
		seen[p] = true
	}
}

// TestHitIsInertWithoutTheTag: a build without the failpoints tag never
// crashes, whatever the environment says.
func TestHitIsInertWithoutTheTag(t *testing.T) {
	if crashpoint.Enabled {
		t.Skip("built with the failpoints tag")
	}
	t.Setenv(crashpoint.Env, string(crashpoint.IntentCommitted))
	crashpoint.Hit(crashpoint.IntentCommitted) // returns
}
