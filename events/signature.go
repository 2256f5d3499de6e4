package events

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of a delivery. Only the body is signed: Event-Id repeats
// the body's id for routing and logs, and Delivery-Attempt changes
// between tries.
const (
	// SignatureHeader carries the signature: "t=<unix seconds>,v1=<hex>",
	// with one v1 per signing secret (several while a secret is rotated).
	// The v1 value is the hex HMAC-SHA256, keyed by the secret, of the
	// timestamp as written after "t=", a ".", and the body: Stripe's
	// scheme. Other keys (a future "v2") are ignored.
	SignatureHeader = "Payrecon-Signature"
	// EventIDHeader carries the event's id, the same on every attempt.
	EventIDHeader = "Event-Id"
	// AttemptHeader carries the delivery attempt, 1 for the first try.
	AttemptHeader = "Delivery-Attempt"
)

// DefaultTolerance is how far a signature's timestamp may be from the
// receiver's clock, either way, unless configured otherwise: 5 minutes,
// as Stripe's.
const DefaultTolerance = 5 * time.Minute

// Errors of Verify. Each error Verify returns wraps exactly one of them.
var (
	// ErrNoSignature: the Payrecon-Signature header is missing or empty.
	ErrNoSignature = errors.New("events: no " + SignatureHeader + " header")
	// ErrBadSignatureHeader: the header is not "t=<digits>,v1=<64 hex
	// digits>[,v1=…]": an item without "=", no timestamp or several, a
	// timestamp that is not a number, no v1, or a v1 that is not 64 hex
	// digits.
	ErrBadSignatureHeader = errors.New("events: malformed " + SignatureHeader + " header")
	// ErrSignatureMismatch: no v1 value is the HMAC of the timestamp and
	// body under any of the secrets (a wrong secret, or a tampered body or
	// timestamp).
	ErrSignatureMismatch = errors.New("events: no signature matches")
	// ErrTimestampOutsideTolerance: the signature is valid but its
	// timestamp is further than the tolerance from now (a replay, a
	// delivery held too long, or a clock far off).
	ErrTimestampOutsideTolerance = errors.New("events: signature timestamp outside tolerance")
)

// Sign returns the Payrecon-Signature header value for body signed at t
// with secret: "t=<t's unix seconds>,v1=<hex HMAC-SHA256>".
func Sign(secret string, body []byte, t time.Time) string {
	return SignAll([]string{secret}, body, t)
}

// SignAll is Sign with one v1 value per secret, in order: the sender
// signs with the new secret and the old one while a secret is rotated, so
// that receivers that know either accept the delivery.
func SignAll(secrets []string, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(ts)
	for _, s := range secrets {
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(mac(s, ts, body)))
	}
	return b.String()
}

// Verify checks that header, a Payrecon-Signature value, signs body under
// one of secrets (any v1 value under any secret: list the new secret and
// the old one while rotating), and that its timestamp is within tolerance
// of now, either way. A tolerance of zero or less means DefaultTolerance.
// It checks the signature before the timestamp, so a forged timestamp is
// ErrSignatureMismatch. Returns nil, or an error wrapping ErrNoSignature,
// ErrBadSignatureHeader, ErrSignatureMismatch or
// ErrTimestampOutsideTolerance. Secrets are never put in an error.
func Verify(header string, secrets []string, body []byte, now time.Time, tolerance time.Duration) error {
	if strings.TrimSpace(header) == "" {
		return ErrNoSignature
	}
	sig, err := parseSignature(header)
	if err != nil {
		return err
	}
	if !sig.matches(secrets, body) {
		return fmt.Errorf("%w: %d v1 value(s), none is the body's HMAC under the %d configured secret(s)", ErrSignatureMismatch, len(sig.v1), countNonEmpty(secrets))
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	signedAt := time.Unix(sig.unix, 0)
	if d := now.Sub(signedAt); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed at %s, %s from now (tolerance %s)", ErrTimestampOutsideTolerance, signedAt.UTC().Format(time.RFC3339), d.Truncate(time.Second), tolerance)
	}
	return nil
}

// NewRequest returns a signed POST of ev to url, for the sender: the body
// is Marshal(ev), signed with secret at now, with the headers
// Content-Type, Payrecon-Signature, Event-Id and Delivery-Attempt.
// attempt counts from 1. Returns an error if ev is invalid (wrapping
// ErrInvalidEvent or ErrDigestMismatch), attempt is below 1, or url is
// not a valid URL.
func NewRequest(ctx context.Context, url, secret string, ev Event, attempt int, now time.Time) (*http.Request, error) {
	body, err := Marshal(ev)
	if err != nil {
		return nil, err
	}
	return NewRequestBody(ctx, url, []string{secret}, ev.ID, body, attempt, now)
}

// NewRequestBody is NewRequest for a body the sender stored when it wrote
// the event (Marshal's bytes: the same bytes on every attempt), signed
// with every one of secrets (see SignAll). It does not parse body. Returns
// an error if eventID is empty, secrets has no non-empty secret, attempt
// is below 1, or url is not a valid URL.
func NewRequestBody(ctx context.Context, url string, secrets []string, eventID string, body []byte, attempt int, now time.Time) (*http.Request, error) {
	switch {
	case eventID == "":
		return nil, errors.New("events: new request: no event id")
	case countNonEmpty(secrets) == 0:
		return nil, errors.New("events: new request: no signing secret")
	case attempt < 1:
		return nil, fmt.Errorf("events: new request for %s: attempt %d; attempts count from 1", eventID, attempt)
	}
	var signing []string
	for _, s := range secrets {
		if s != "" {
			signing = append(signing, s)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("events: new request for %s: %w", eventID, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, SignAll(signing, body, now))
	req.Header.Set(EventIDHeader, eventID)
	req.Header.Set(AttemptHeader, strconv.Itoa(attempt))
	return req, nil
}

// signature is a parsed Payrecon-Signature header.
type signature struct {
	ts   string // the timestamp as written, which is what was signed
	unix int64
	v1   [][]byte // each 32 bytes
}

// parseSignature parses a Payrecon-Signature header value: items
// separated by ",", each "key=value", spaces around items allowed;
// exactly one t (decimal digits), at least one v1 (64 hex digits), other
// keys ignored. Returns an error wrapping ErrBadSignatureHeader otherwise.
func parseSignature(header string) (signature, error) {
	var sig signature
	haveT := false
	for item := range strings.SplitSeq(header, ",") {
		item = strings.TrimSpace(item)
		key, value, ok := strings.Cut(item, "=")
		if !ok || key == "" {
			return signature{}, fmt.Errorf("%w: item %q is not key=value", ErrBadSignatureHeader, clip(item))
		}
		switch key {
		case "t":
			if haveT {
				return signature{}, fmt.Errorf("%w: more than one timestamp", ErrBadSignatureHeader)
			}
			haveT = true
			if value == "" || len(value) > 18 || strings.Trim(value, "0123456789") != "" {
				return signature{}, fmt.Errorf("%w: timestamp %q is not unix seconds", ErrBadSignatureHeader, clip(value))
			}
			sig.ts = value
			sig.unix, _ = strconv.ParseInt(value, 10, 64) // at most 18 digits: cannot fail
		case "v1":
			mac, err := hex.DecodeString(value)
			if err != nil || len(mac) != sha256.Size {
				return signature{}, fmt.Errorf("%w: v1 %q is not 64 hex digits", ErrBadSignatureHeader, clip(value))
			}
			sig.v1 = append(sig.v1, mac)
		}
	}
	if !haveT {
		return signature{}, fmt.Errorf("%w: no timestamp (t=)", ErrBadSignatureHeader)
	}
	if len(sig.v1) == 0 {
		return signature{}, fmt.Errorf("%w: no v1 signature", ErrBadSignatureHeader)
	}
	return sig, nil
}

// matches reports whether a v1 value of sig is the MAC of body under one
// of secrets (empty secrets skipped). Comparisons are constant-time.
func (sig signature) matches(secrets []string, body []byte) bool {
	for _, s := range secrets {
		if s == "" {
			continue
		}
		want := mac(s, sig.ts, body)
		for _, got := range sig.v1 {
			if hmac.Equal(got, want) {
				return true
			}
		}
	}
	return false
}

// mac is the HMAC-SHA256 under secret of ts + "." + body.
func mac(secret, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

func countNonEmpty(ss []string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
