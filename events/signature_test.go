package events

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	signedAt = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	testBody = []byte(`{"id":"evt_1","type":"purchase.succeeded"}`)
)

// hmacHex is the v1 value computed independently of the code under test.
func hmacHex(t *testing.T, secret, ts string, body []byte) string {
	t.Helper()
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts + "." + string(body)))
	return hex.EncodeToString(h.Sum(nil))
}

func TestSignIsStripesScheme(t *testing.T) {
	ts := strconv.FormatInt(signedAt.Unix(), 10)
	want := "t=" + ts + ",v1=" + hmacHex(t, "whsec_new", ts, testBody)
	if got := Sign("whsec_new", testBody, signedAt); got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
	want += ",v1=" + hmacHex(t, "whsec_old", ts, testBody)
	if got := SignAll([]string{"whsec_new", "whsec_old"}, testBody, signedAt); got != want {
		t.Errorf("SignAll = %s, want %s", got, want)
	}
}

func TestVerify(t *testing.T) {
	ts := strconv.FormatInt(signedAt.Unix(), 10)
	good := Sign("whsec_new", testBody, signedAt)
	v1 := hmacHex(t, "whsec_new", ts, testBody)
	for _, tc := range []struct {
		name      string
		header    string
		secrets   []string
		body      []byte
		now       time.Time
		tolerance time.Duration
		want      error
	}{
		{name: "valid", header: good},
		{name: "valid, spaces around items", header: " t=" + ts + " , v1=" + v1 + " "},
		{name: "valid, unknown scheme ignored", header: "t=" + ts + ",v0=abc,v1=" + v1},
		{name: "valid, the match is not the first v1", header: "t=" + ts + ",v1=" + strings.Repeat("ab", 32) + ",v1=" + v1},
		{name: "tampered body", header: good, body: []byte(`{"id":"evt_1","type":"purchase.declined"}`), want: ErrSignatureMismatch},
		{name: "body with a byte added", header: good, body: append([]byte(string(testBody)), ' '), want: ErrSignatureMismatch},
		{name: "wrong secret", header: good, secrets: []string{"whsec_other"}, want: ErrSignatureMismatch},
		{name: "no secret", header: good, secrets: []string{}, want: ErrSignatureMismatch},
		{name: "empty secret does not verify an empty-key MAC", header: Sign("", testBody, signedAt), secrets: []string{""}, want: ErrSignatureMismatch},
		{name: "tampered timestamp", header: "t=" + strconv.FormatInt(signedAt.Unix()+1, 10) + ",v1=" + v1, now: signedAt.Add(time.Second), want: ErrSignatureMismatch},
		{name: "timestamp with a leading zero is another signed string", header: "t=0" + ts + ",v1=" + v1, want: ErrSignatureMismatch},
		{name: "old timestamp", header: good, now: signedAt.Add(DefaultTolerance + time.Second), want: ErrTimestampOutsideTolerance},
		{name: "at the tolerance", header: good, now: signedAt.Add(DefaultTolerance)},
		{name: "future timestamp", header: good, now: signedAt.Add(-DefaultTolerance - time.Second), want: ErrTimestampOutsideTolerance},
		{name: "custom tolerance", header: good, now: signedAt.Add(time.Minute + time.Second), tolerance: time.Minute, want: ErrTimestampOutsideTolerance},
		{name: "old and forged: the signature is checked first", header: "t=1,v1=" + v1, want: ErrSignatureMismatch},
		{name: "rotation: receiver knows new and old, sender still signs with old", header: Sign("whsec_old", testBody, signedAt), secrets: []string{"whsec_new", "whsec_old"}},
		{name: "rotation: sender signs with both, receiver knows only new", header: SignAll([]string{"whsec_new", "whsec_old"}, testBody, signedAt), secrets: []string{"whsec_new"}},
		{name: "rotation: sender signs with both, receiver knows only old", header: SignAll([]string{"whsec_new", "whsec_old"}, testBody, signedAt), secrets: []string{"whsec_old"}},
		{name: "rotation over: old secret retired", header: Sign("whsec_old", testBody, signedAt), secrets: []string{"whsec_new"}, want: ErrSignatureMismatch},
		{name: "missing header", header: "", want: ErrNoSignature},
		{name: "blank header", header: "  ", want: ErrNoSignature},
		{name: "no timestamp", header: "v1=" + v1, want: ErrBadSignatureHeader},
		{name: "two timestamps", header: "t=" + ts + ",t=" + ts + ",v1=" + v1, want: ErrBadSignatureHeader},
		{name: "timestamp not a number", header: "t=yesterday,v1=" + v1, want: ErrBadSignatureHeader},
		{name: "negative timestamp", header: "t=-5,v1=" + v1, want: ErrBadSignatureHeader},
		{name: "empty timestamp", header: "t=,v1=" + v1, want: ErrBadSignatureHeader},
		{name: "huge timestamp", header: "t=99999999999999999999,v1=" + v1, want: ErrBadSignatureHeader},
		{name: "no v1", header: "t=" + ts, want: ErrBadSignatureHeader},
		{name: "only another scheme", header: "t=" + ts + ",v0=" + v1, want: ErrBadSignatureHeader},
		{name: "v1 not hex", header: "t=" + ts + ",v1=" + strings.Repeat("zz", 32), want: ErrBadSignatureHeader},
		{name: "v1 short", header: "t=" + ts + ",v1=" + v1[:62], want: ErrBadSignatureHeader},
		{name: "v1 empty", header: "t=" + ts + ",v1=", want: ErrBadSignatureHeader},
		{name: "item without =", header: "t=" + ts + ",v1=" + v1 + ",garbage", want: ErrBadSignatureHeader},
		{name: "trailing comma", header: "t=" + ts + ",v1=" + v1 + ",", want: ErrBadSignatureHeader},
		{name: "semicolons", header: "t=" + ts + ";v1=" + v1, want: ErrBadSignatureHeader},
		{name: "empty key", header: "t=" + ts + ",=x,v1=" + v1, want: ErrBadSignatureHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secrets := tc.secrets
			if secrets == nil {
				secrets = []string{"whsec_new"}
			}
			body := tc.body
			if body == nil {
				body = testBody
			}
			now := tc.now
			if now.IsZero() {
				now = signedAt
			}
			err := Verify(tc.header, secrets, body, now, tc.tolerance)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Verify: %v, want %v", err, tc.want)
			}
			for _, s := range secrets {
				if s != "" && err != nil && strings.Contains(err.Error(), s) {
					t.Errorf("the error names a secret: %v", err)
				}
			}
		})
	}
}

// FuzzParseSignature checks that the header parser never panics, that what
// it accepts has the shape it promises and renders back to an equivalent
// header, and that only a header carrying the right MAC verifies.
func FuzzParseSignature(f *testing.F) {
	ts := strconv.FormatInt(signedAt.Unix(), 10)
	for _, seed := range []string{
		Sign("whsec_new", testBody, signedAt),
		SignAll([]string{"a", "b"}, testBody, signedAt),
		"t=" + ts + ",v0=x,v1=" + strings.Repeat("0", 64),
		"t=1", "v1=", "t=,v1=", ",", "=", "t==1", "t=1,t=2", " t = 1 ",
		"t=1,v1=" + strings.Repeat("g", 64), "\x00", strings.Repeat("t=1,", 50),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		sig, err := parseSignature(header)
		if err != nil {
			if !errors.Is(err, ErrBadSignatureHeader) {
				t.Fatalf("parseSignature(%q): %v, not ErrBadSignatureHeader", header, err)
			}
			if verr := Verify(header, []string{"whsec_new"}, testBody, signedAt, 0); verr == nil {
				t.Fatalf("Verify accepted %q, which does not parse", header)
			}
			return
		}
		if sig.ts == "" || strings.Trim(sig.ts, "0123456789") != "" || len(sig.v1) == 0 {
			t.Fatalf("parseSignature(%q) = %+v: not the promised shape", header, sig)
		}
		if n, perr := strconv.ParseInt(sig.ts, 10, 64); perr != nil || n != sig.unix {
			t.Fatalf("parseSignature(%q): ts %q, unix %d", header, sig.ts, sig.unix)
		}
		var b strings.Builder
		b.WriteString("t=" + sig.ts)
		for _, m := range sig.v1 {
			if len(m) != sha256.Size {
				t.Fatalf("parseSignature(%q): a v1 of %d bytes", header, len(m))
			}
			b.WriteString(",v1=" + hex.EncodeToString(m))
		}
		again, err := parseSignature(b.String())
		if err != nil || again.ts != sig.ts || len(again.v1) != len(sig.v1) {
			t.Fatalf("the rendering %q of %q parses as %+v, %v", b.String(), header, again, err)
		}
		// It verifies only if one of its v1 values is the right MAC.
		want := hmacHex(t, "whsec_new", sig.ts, testBody)
		right := false
		for _, m := range sig.v1 {
			right = right || hex.EncodeToString(m) == want
		}
		err = Verify(header, []string{"whsec_new"}, testBody, time.Unix(sig.unix, 0), 0)
		if right != (err == nil) {
			t.Fatalf("Verify(%q): %v, but a right MAC is there: %v", header, err, right)
		}
	})
}

// FuzzSignVerify checks that what Sign produces always verifies, and never
// for another body or secret.
func FuzzSignVerify(f *testing.F) {
	f.Add([]byte(`{}`), "whsec_new", int64(1772366400))
	f.Add([]byte(""), "x", int64(0))
	f.Fuzz(func(t *testing.T, body []byte, secret string, unix int64) {
		if secret == "" || unix < 0 || unix > 1<<40 {
			return
		}
		at := time.Unix(unix, 0)
		header := Sign(secret, body, at)
		if err := Verify(header, []string{secret}, body, at, 0); err != nil {
			t.Fatalf("Verify(Sign(%q, %q, %d)): %v", secret, body, unix, err)
		}
		if err := Verify(header, []string{secret + "x"}, body, at, 0); !errors.Is(err, ErrSignatureMismatch) {
			t.Fatalf("another secret: %v", err)
		}
		if err := Verify(header, []string{secret}, append(body[:len(body):len(body)], 'x'), at, 0); !errors.Is(err, ErrSignatureMismatch) {
			t.Fatalf("another body: %v", err)
		}
	})
}

func TestNewRequest(t *testing.T) {
	e := validEvent(t)
	req, err := NewRequest(t.Context(), "https://shop.example/payrecon", "whsec_new", e, 3, signedAt)
	if err != nil {
		t.Fatal(err)
	}
	body, err := Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if req.Method != "POST" || req.URL.String() != "https://shop.example/payrecon" {
		t.Errorf("request %s %s", req.Method, req.URL)
	}
	for h, want := range map[string]string{
		"Content-Type":  "application/json",
		SignatureHeader: Sign("whsec_new", body, signedAt),
		EventIDHeader:   "evt_1",
		AttemptHeader:   "3",
	} {
		if got := req.Header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	got := make([]byte, len(body)+1)
	n, _ := req.Body.Read(got)
	if string(got[:n]) != string(body) {
		t.Errorf("body %s, want %s", got[:n], body)
	}
	for _, tc := range []struct {
		name string
		make func() error
	}{
		{"invalid event", func() error {
			bad := e
			bad.Sequence = 0
			_, err := NewRequest(t.Context(), "https://shop.example/", "s", bad, 1, signedAt)
			return err
		}},
		{"attempt 0", func() error {
			_, err := NewRequest(t.Context(), "https://shop.example/", "s", e, 0, signedAt)
			return err
		}},
		{"no secret", func() error {
			_, err := NewRequest(t.Context(), "https://shop.example/", "", e, 1, signedAt)
			return err
		}},
		{"bad url", func() error { _, err := NewRequest(t.Context(), "://", "s", e, 1, signedAt); return err }},
		{"no id", func() error {
			_, err := NewRequestBody(t.Context(), "https://shop.example/", []string{"s"}, "", body, 1, signedAt)
			return err
		}},
	} {
		if err := tc.make(); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	// The stored-body form signs with every secret.
	req, err = NewRequestBody(t.Context(), "https://shop.example/", []string{"whsec_new", "", "whsec_old"}, "evt_1", body, 1, signedAt)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := req.Header.Get(SignatureHeader), SignAll([]string{"whsec_new", "whsec_old"}, body, signedAt); got != want {
		t.Errorf("signature %s, want %s", got, want)
	}
}
