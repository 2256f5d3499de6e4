package http

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestOneTokenCheck: every token comparison of the package is
// matchToken's, on SHA-256 digests, so that none returns early on a
// length mismatch; and matchToken finds exactly the presented token,
// whatever the lengths.
func TestOneTokenCheck(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "tokens.go" {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(src), "ConstantTimeCompare") {
			t.Errorf("%s compares with subtle.ConstantTimeCompare: compare tokens with matchToken (tokens.go)", name)
		}
	}

	tokens := []tokenDigest{digestOf("shop-token-0123456789"), digestOf("billing-token-0123456789")}
	for presented, want := range map[string]int{
		"shop-token-0123456789":     0,
		"billing-token-0123456789":  1,
		"shop-token-012345678":      -1,
		"shop-token-01234567890":    -1,
		"":                          -1,
		"SHOP-TOKEN-0123456789":     -1,
		"billing-token-0123456789 ": -1,
	} {
		if got := matchToken(presented, tokens...); got != want {
			t.Errorf("matchToken(%q) = %d, want %d", presented, got, want)
		}
	}
	if got := matchToken("anything"); got != -1 {
		t.Errorf("matchToken with no digests = %d, want -1", got)
	}
}

// manualClock is a clock the throttle tests set by hand.
type manualClock struct{ now time.Time }

func (c *manualClock) Now() time.Time          { return c.now }
func (c *manualClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

func newTestThrottle() (*loginThrottle, *manualClock) {
	c := &manualClock{now: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	return newLoginThrottle(c.Now), c
}

// TestLoginThrottleBackoff: the free failures lock nothing; each further
// failure locks the key out for twice as long as the one before, from a
// minute up to 15 minutes; a success forgets the key.
func TestLoginThrottleBackoff(t *testing.T) {
	th, clock := newTestThrottle()
	for i := range loginFreeFailures {
		th.failed("client a")
		if w := th.wait("client a"); w != 0 {
			t.Fatalf("after %d failures: locked out for %s, want not", i+1, w)
		}
	}
	for _, want := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 15 * time.Minute, 15 * time.Minute} {
		th.failed("client a")
		if w := th.wait("client a"); w != want {
			t.Fatalf("locked out for %s, want %s", w, want)
		}
		if w := th.wait("client b", "client a"); w != want {
			t.Fatalf("wait of two keys = %s, want the longer, %s", w, want)
		}
		clock.Advance(want)
		if w := th.wait("client a"); w != 0 {
			t.Fatalf("at the lockout's end: still locked out for %s", w)
		}
	}
	th.succeeded("client a")
	th.failed("client a")
	if w := th.wait("client a"); w != 0 || th.size() != 1 {
		t.Fatalf("a failure after a success: locked out for %s (%d entries), want a fresh count", w, th.size())
	}
	if got := th.lockoutAfter(1 << 20); got != loginMaxLockout {
		t.Fatalf("lockoutAfter(a million) = %s, want the maximum", got)
	}
}

// TestLoginThrottleForgets: a key is forgotten a day after its last
// failure, and not while a lockout holds; the failures then count from
// zero.
func TestLoginThrottleForgets(t *testing.T) {
	th, clock := newTestThrottle()
	for range loginFreeFailures {
		th.failed("name alice")
	}
	clock.Advance(loginForget - time.Second)
	th.failed("name alice") // the eleventh: locked out
	if th.wait("name alice") == 0 {
		t.Fatal("the eleventh failure within a day did not lock the key out")
	}
	clock.Advance(loginForget)
	if w := th.wait("name alice"); w != 0 || th.size() != 0 {
		t.Fatalf("a day after the last failure: wait %s, %d entries; want the key forgotten", w, th.size())
	}
	th.failed("name alice")
	if th.wait("name alice") != 0 {
		t.Fatal("the failures of a forgotten key still count")
	}
}

// TestLoginThrottleBoundedMemory: however many keys fail, at most
// maxEntries are kept; a full table drops unlocked keys before locked
// ones, so spraying names does not unlock an attacker.
func TestLoginThrottleBoundedMemory(t *testing.T) {
	th, clock := newTestThrottle()
	th.maxEntries = 100
	for range loginFreeFailures + 1 {
		th.failed("client attacker")
	}
	for i := range 10_000 {
		clock.Advance(time.Millisecond)
		th.failed(fmt.Sprintf("name spray-%d", i))
	}
	if n := th.size(); n > 100 {
		t.Fatalf("%d entries kept, want at most 100", n)
	}
	if th.wait("client attacker") == 0 {
		t.Fatal("the locked-out key was dropped to make room for unlocked ones")
	}
}

// TestCheckStrictJSON: the token walk refuses repeated keys at any depth,
// keys of the top-level object that are not exactly a field, invalid
// UTF-8 and lone surrogates, and accepts the rest (types are the
// decoder's to check).
func TestCheckStrictJSON(t *testing.T) {
	fields := []string{"amount", "customer", "meta"}
	for _, tc := range []struct{ body, field string }{
		{`{"amount":1}`, ""},
		{`{"amount":1,"customer":"c","meta":{"amount":1,"Amount":2}}`, ""},
		{`{"meta":[{"a":1},{"a":1}],"amount":[1,{"b":[]}]}`, ""},
		{`"just a string"`, ""},
		{`[1,2,{"x":1}]`, ""},
		{`{"amount":1} trailing`, ""}, // the trailing data is the decoder's to refuse
		{`{"customer":"\\ud800 \" \\\" \ud83d\ude00"}`, ""},
		{`{"amount":1,"amount":1}`, "amount"},
		{`{"meta":{"k":1,"k":2}}`, "k"},
		{`{"meta":[{"k":1,"j":[{"z":1,"z":1}]}]}`, "z"},
		{`{"Amount":1}`, "Amount"},
		{`{"amount ":1}`, "amount "},
		{`{"other":1}`, "other"},
		{`{"amount":1,`, "body"},
		{`{"amount" 1}`, "body"},
		{``, "body"},
		{"{\"customer\":\"\xc3\"}", "body"},
		{`{"customer":"\ud800"}`, "body"},
		{`{"customer":"\udfff"}`, "body"},
		{`{"customer":"\ud800\ud800"}`, "body"},
		{`{"customer":"\ud800x"}`, "body"},
		{`{"customer":"x\ud800"}`, "body"},
	} {
		fe := checkStrictJSON([]byte(tc.body), fields)
		switch {
		case tc.field == "" && fe != nil:
			t.Errorf("%s: refused (%v), want accepted", tc.body, fe)
		case tc.field != "" && (fe == nil || fe.Field != tc.field):
			t.Errorf("%s: %v, want refused on %q", tc.body, fe, tc.field)
		}
	}
}

// TestPurchaseFieldsAreTheRequest: the keys checkStrictJSON accepts are
// exactly the JSON names of purchaseRequest's fields.
func TestPurchaseFieldsAreTheRequest(t *testing.T) {
	typ := reflect.TypeFor[purchaseRequest]()
	var names []string
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	if !slices.Equal(slices.Sorted(slices.Values(names)), slices.Sorted(slices.Values(purchaseFields))) {
		t.Fatalf("purchaseFields = %v, purchaseRequest's JSON names = %v", purchaseFields, names)
	}
}
