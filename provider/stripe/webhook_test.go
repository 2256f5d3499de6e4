package stripe_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
)

// whSecret is the signing secret of the webhook tests.
const whSecret = "whsec_test_payrecon0123456789abcdef"

// whNow is the injected clock of the webhook tests; whCreated is when
// their events were created, shortly before.
var (
	whNow     = time.Unix(1_760_000_000, 0).UTC()
	whCreated = whNow.Add(-2 * time.Second)
)

// whSign returns a Stripe-Signature header for payload signed at ts with
// secret, built by hand as payrecon's fake provider builds it: the hex
// HMAC-SHA256 of "<unix ts>.<payload>", in "t=<unix ts>,v1=<hex>".
func whSign(secret string, ts time.Time, payload []byte) string {
	return fmt.Sprintf("t=%d,v1=%s", ts.Unix(), whMAC(secret, fmt.Sprintf("%d", ts.Unix()), payload))
}

// whMAC returns the hex HMAC-SHA256 of "<stamp>.<payload>" under secret.
func whMAC(secret, stamp string, payload []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "%s.%s", stamp, payload)
	return hex.EncodeToString(mac.Sum(nil))
}

// whVerifier returns a verifier with cfg's fields, whSecret and the clock
// whNow where cfg leaves them zero.
func whVerifier(t *testing.T, cfg stripe.WebhookConfig) *stripe.WebhookVerifier {
	t.Helper()
	if cfg.Secret == "" {
		cfg.Secret = whSecret
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return whNow }
	}
	v, err := stripe.NewWebhookVerifier(cfg)
	if err != nil {
		t.Fatalf("NewWebhookVerifier: %v", err)
	}
	return v
}

// whPI returns a PaymentIntent object as Stripe renders it in an event:
// 300 usd, with metadata (none when nil) and fields overridden by extra.
func whPI(id, status string, metadata map[string]string, extra map[string]any) map[string]any {
	if metadata == nil {
		metadata = map[string]string{}
	}
	pi := map[string]any{
		"id":                   id,
		"object":               "payment_intent",
		"amount":               300,
		"amount_capturable":    0,
		"amount_received":      0,
		"capture_method":       "automatic",
		"client_secret":        id + "_secret_DoNotLeakMe",
		"confirmation_method":  "automatic",
		"created":              whCreated.Unix() - 1,
		"currency":             "usd",
		"customer":             nil,
		"description":          "2 shirts",
		"last_payment_error":   nil,
		"latest_charge":        nil,
		"livemode":             false,
		"metadata":             metadata,
		"payment_method":       "pm_1SAbCdEfGhIjKlMn",
		"payment_method_types": []string{"card"},
		"status":               status,
	}
	if status == "succeeded" {
		pi["amount_received"] = 300
		pi["latest_charge"] = "ch_3SAbCdEfGhIjKlMn0"
	}
	for k, v := range extra {
		pi[k] = v
	}
	return pi
}

// whPurchase is the metadata payrecon puts on its PaymentIntents.
var whPurchase = map[string]string{"purchase_id": "pur_01JABCDEF", "customer_ref": "cust-42"}

// whEvent returns a Stripe event of type typ about object, as Stripe
// sends it, rendered in API version apiVersion (stripe-go's when "").
func whEvent(t *testing.T, typ, apiVersion string, object map[string]any) []byte {
	t.Helper()
	if apiVersion == "" {
		apiVersion = stripego.APIVersion
	}
	b, err := json.Marshal(map[string]any{
		"id":               "evt_3SAbCdEfGhIjKlMn1",
		"object":           "event",
		"api_version":      apiVersion,
		"created":          whCreated.Unix(),
		"data":             map[string]any{"object": object},
		"livemode":         false,
		"pending_webhooks": 1,
		"request":          map[string]any{"id": "req_AbCdEfGhIjKl", "idempotency_key": "payrecon-pur_01JABCDEF"},
		"type":             typ,
	})
	if err != nil {
		t.Fatalf("marshal event: %v", err)
	}
	return b
}

// whSentinels are Verify's errors; each error must wrap exactly one.
var whSentinels = []error{
	stripe.ErrBadSignature, stripe.ErrStaleTimestamp, stripe.ErrFutureTimestamp,
	stripe.ErrMalformedEvent, stripe.ErrAPIVersion,
}

// whCheckErr checks that err wraps want and no other sentinel, and says
// what it is about without leaking secrets.
func whCheckErr(t *testing.T, ev provider.Event, err, want error) {
	t.Helper()
	if err == nil {
		t.Fatalf("Verify = %+v, nil error; want an error wrapping %v", ev, want)
	}
	for _, s := range whSentinels {
		if got := errors.Is(err, s); got != (s == want) {
			t.Errorf("errors.Is(%q, %v) = %v, want %v", err, s, got, !got)
		}
	}
	if ev != (provider.Event{}) {
		t.Errorf("Verify returned event %+v with error %v, want the zero event", ev, err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, want.Error()+": ") {
		t.Errorf("error %q does not start with %q: want the sentinel then why", msg, want.Error()+": ")
	}
	for _, secret := range []string{whSecret, "whsec_wrong", "DoNotLeakMe"} {
		if strings.Contains(msg, secret) {
			t.Errorf("error %q leaks %q", msg, secret)
		}
	}
}

func TestWebhookTranslatesEvents(t *testing.T) {
	failure := map[string]any{
		"type": "card_error", "code": "card_declined", "decline_code": "insufficient_funds",
		"message": "Your card has insufficient funds.",
	}
	charge := map[string]any{
		"id": "ch_3SAbCdEfGhIjKlMn0", "object": "charge", "amount": 300, "currency": "usd",
		"paid": true, "status": "succeeded", "payment_intent": "pi_3SAbCdEfGhIjKlMn",
		"metadata": map[string]string{},
	}
	customer := map[string]any{"id": "cus_SAbCdEfGhIjKlM", "object": "customer", "email": "a@example.com"}
	balance := map[string]any{"object": "balance", "available": []any{}, "livemode": false}

	const pi = "pi_3SAbCdEfGhIjKlMn"
	rows := []struct {
		name       string
		typ        string
		apiVersion string
		object     map[string]any
		outcome    provider.Outcome
		paymentID  string
		purchaseID string
		// amount and currency, when set, are what a payment_intent
		// event must report instead of whPI's 300 usd; noMoney: 0 and "".
		amount   int64
		currency string
		noMoney  bool
		// noPurchase: the payment names no purchase (another
		// integration's): PurchaseID "".
		noPurchase bool
	}{
		{name: "succeeded", typ: "payment_intent.succeeded",
			object: whPI(pi, "succeeded", whPurchase, nil), outcome: provider.Succeeded},
		{name: "payment failed, back to requires_payment_method", typ: "payment_intent.payment_failed",
			object:  whPI(pi, "requires_payment_method", whPurchase, map[string]any{"last_payment_error": failure}),
			outcome: provider.Declined},
		{name: "payment failed, other status: by the status table", typ: "payment_intent.payment_failed",
			object: whPI(pi, "requires_action", whPurchase, nil), outcome: provider.Pending},
		{name: "payment failed, canceled: by the status table", typ: "payment_intent.payment_failed",
			object: whPI(pi, "canceled", whPurchase, nil), outcome: provider.Declined},
		{name: "canceled", typ: "payment_intent.canceled",
			object:  whPI(pi, "canceled", whPurchase, map[string]any{"cancellation_reason": "abandoned"}),
			outcome: provider.Declined},
		{name: "processing", typ: "payment_intent.processing",
			object: whPI(pi, "processing", whPurchase, nil), outcome: provider.Pending},
		{name: "requires action", typ: "payment_intent.requires_action",
			object: whPI(pi, "requires_action", whPurchase, nil), outcome: provider.Pending},
		{name: "event type wins over status", typ: "payment_intent.canceled",
			object: whPI(pi, "requires_capture", whPurchase, nil), outcome: provider.Declined},
		{name: "created, not attempted yet: no decline", typ: "payment_intent.created",
			object: whPI(pi, "requires_payment_method", whPurchase, nil), outcome: provider.Pending},
		{name: "created, by the status table", typ: "payment_intent.created",
			object: whPI(pi, "requires_confirmation", whPurchase, nil), outcome: provider.Pending},
		{name: "created already succeeded, by the status table", typ: "payment_intent.created",
			object: whPI(pi, "succeeded", whPurchase, nil), outcome: provider.Succeeded},
		{name: "other payment_intent type, by the status table", typ: "payment_intent.amount_capturable_updated",
			object: whPI(pi, "requires_capture", whPurchase, nil), outcome: provider.Pending},
		{name: "same release train, older version", typ: "payment_intent.succeeded", apiVersion: "2025-03-31.basil",
			object: whPI(pi, "succeeded", whPurchase, nil), outcome: provider.Succeeded},
		{name: "amount and currency from the object", typ: "payment_intent.succeeded",
			object:  whPI(pi, "succeeded", whPurchase, map[string]any{"amount": 12345, "currency": "eur"}),
			outcome: provider.Succeeded, amount: 12345, currency: "eur"},
		{name: "object without amount or currency", typ: "payment_intent.processing",
			object:  whPI(pi, "processing", whPurchase, map[string]any{"amount": nil, "currency": nil}),
			outcome: provider.Pending, noMoney: true},
		{name: "another integration's payment: no metadata", typ: "payment_intent.succeeded",
			object: whPI(pi, "succeeded", nil, nil), outcome: provider.Succeeded, noPurchase: true},
		{name: "another integration's payment: other metadata only", typ: "payment_intent.payment_failed",
			object: whPI(pi, "requires_payment_method", map[string]string{"order": "42"}, nil), outcome: provider.Declined, noPurchase: true},
		{name: "another integration's payment: an empty purchase_id", typ: "payment_intent.canceled",
			object: whPI(pi, "canceled", map[string]string{"purchase_id": ""}, nil), outcome: provider.Declined, noPurchase: true},
		{name: "ignored: charge, no metadata, its amount not taken", typ: "charge.succeeded", object: charge},
		{name: "ignored: customer", typ: "customer.created", object: customer},
		{name: "ignored: object without id", typ: "balance.available", object: balance},
		{name: "ignored type about a payment intent keeps its id (hypothetical type)", typ: "payment_intent_link.updated",
			object: whPI(pi, "bogus_status", nil, nil), paymentID: pi},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			payload := whEvent(t, r.typ, r.apiVersion, r.object)
			ev, err := whVerifier(t, stripe.WebhookConfig{}).Verify(payload, whSign(whSecret, whNow, payload))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			want := provider.Event{
				ID:         "evt_3SAbCdEfGhIjKlMn1",
				Type:       r.typ,
				Outcome:    r.outcome,
				PaymentID:  r.paymentID,
				PurchaseID: r.purchaseID,
				Created:    whCreated,
			}
			if strings.HasPrefix(r.typ, "payment_intent.") {
				want.PaymentID, want.PurchaseID = pi, "pur_01JABCDEF"
				want.Amount, want.Currency = 300, "usd"
				if r.amount != 0 || r.currency != "" {
					want.Amount, want.Currency = r.amount, r.currency
				}
				if r.noMoney {
					want.Amount, want.Currency = 0, ""
				}
				if r.noPurchase {
					want.PurchaseID = ""
				}
			}
			if len(ev.Digest) != 64 {
				t.Errorf("digest %q, want a hex SHA-256", ev.Digest)
			}
			ev.Digest = ""
			if ev != want {
				t.Errorf("event\n got %+v\nwant %+v", ev, want)
			}
			if ev.Created.Location() != time.UTC {
				t.Errorf("Created %v is not in UTC", ev.Created)
			}
		})
	}
}

func TestWebhookRefuses(t *testing.T) {
	good := whEvent(t, "payment_intent.succeeded", "", whPI("pi_1", "succeeded", whPurchase, nil))
	signed := whSign(whSecret, whNow, good)
	sig := whMAC(whSecret, fmt.Sprint(whNow.Unix()), good)
	zeroTime := whMAC(whSecret, fmt.Sprint(time.Time{}.Unix()), good) // what stripe-go checks without t=
	event := func(typ, apiVersion string, object map[string]any) []byte {
		return whEvent(t, typ, apiVersion, object)
	}
	raw := func(s string) []byte { return []byte(s) }

	rows := []struct {
		name    string
		payload []byte
		header  string // "" with sign: signed by whSecret at signAt
		sign    bool
		signAt  time.Time
		want    error
		mention []string // in the error message
	}{
		// Signature.
		{name: "wrong secret", payload: good, header: whSign("whsec_wrong", whNow, good), want: stripe.ErrBadSignature},
		{name: "tampered payload", payload: []byte(strings.Replace(string(good), `"amount":300`, `"amount":3`, 1)),
			header: signed, want: stripe.ErrBadSignature},
		{name: "missing header", payload: good, header: "", want: stripe.ErrBadSignature, mention: []string{"Stripe-Signature"}},
		{name: "garbage header", payload: good, header: "garbage", want: stripe.ErrBadSignature},
		{name: "garbage signature", payload: good, header: fmt.Sprintf("t=%d,v1=zzzz", whNow.Unix()), want: stripe.ErrBadSignature},
		{name: "timestamp not a number", payload: good, header: "t=yesterday,v1=" + sig, want: stripe.ErrBadSignature},
		{name: "no v1 signature", payload: good, header: fmt.Sprintf("t=%d", whNow.Unix()), want: stripe.ErrBadSignature},
		{name: "only a v0 signature", payload: good, header: fmt.Sprintf("t=%d,v0=%s", whNow.Unix(), sig), want: stripe.ErrBadSignature},
		{name: "signature of another timestamp", payload: good, header: fmt.Sprintf("t=%d,v1=%s", whNow.Unix()+1, sig),
			want: stripe.ErrBadSignature},
		{name: "no timestamp, signed over the zero time", payload: good, header: "v1=" + zeroTime,
			want: stripe.ErrBadSignature, mention: []string{"no timestamp"}},
		{name: "two timestamps", payload: good, header: fmt.Sprintf("t=%d,t=%d,v1=%s", whNow.Unix()-1000, whNow.Unix(), sig),
			want: stripe.ErrBadSignature, mention: []string{"2 timestamps"}},
		{name: "forged and stale: the signature is checked first", payload: good,
			header: whSign("whsec_wrong", whNow.Add(-time.Hour), good), want: stripe.ErrBadSignature},
		{name: "forged and future: the signature is checked first", payload: good,
			header: whSign("whsec_wrong", whNow.Add(time.Hour), good), want: stripe.ErrBadSignature},

		// Timestamp.
		{name: "stale", payload: good, sign: true, signAt: whNow.Add(-stripe.DefaultWebhookTolerance - time.Second),
			want: stripe.ErrStaleTimestamp, mention: []string{"5m1s ago", "5m0s"}},
		{name: "ancient", payload: good, sign: true, signAt: time.Unix(0, 0), want: stripe.ErrStaleTimestamp},
		{name: "future", payload: good, sign: true, signAt: whNow.Add(stripe.DefaultWebhookMaxFutureSkew + time.Second),
			want: stripe.ErrFutureTimestamp, mention: []string{"1m1s ahead", "1m0s"}},
		{name: "far future", payload: good, sign: true, signAt: time.Unix(1<<40, 0), want: stripe.ErrFutureTimestamp},

		// Payload.
		{name: "malformed JSON", payload: raw(`{"id":"evt_1","object":"event",`), sign: true, want: stripe.ErrMalformedEvent},
		{name: "not JSON", payload: raw(`id=evt_1&type=payment_intent.succeeded`), sign: true, want: stripe.ErrMalformedEvent},
		{name: "JSON null", payload: raw(`null`), sign: true, want: stripe.ErrMalformedEvent},
		{name: "not an event", payload: raw(`{"id":"pi_1","object":"payment_intent","status":"succeeded"}`), sign: true,
			want: stripe.ErrMalformedEvent, mention: []string{`"payment_intent"`}},
		{name: "thin event", payload: raw(`{"id":"evt_1","object":"v2.core.event","type":"v1.billing.meter.error_report_triggered","created":"2025-01-01T00:00:00.000Z"}`),
			sign: true, want: stripe.ErrMalformedEvent},
		{name: "no id", payload: raw(fmt.Sprintf(`{"object":"event","api_version":%q,"created":1760000000,"type":"customer.created","data":{"object":{"id":"cus_1"}}}`, stripego.APIVersion)),
			sign: true, want: stripe.ErrMalformedEvent, mention: []string{"no id"}},
		{name: "no type", payload: raw(fmt.Sprintf(`{"id":"evt_1","object":"event","api_version":%q,"created":1760000000,"data":{"object":{"id":"cus_1"}}}`, stripego.APIVersion)),
			sign: true, want: stripe.ErrMalformedEvent, mention: []string{"no type"}},
		{name: "no created", payload: raw(fmt.Sprintf(`{"id":"evt_1","object":"event","api_version":%q,"type":"customer.created","data":{"object":{"id":"cus_1"}}}`, stripego.APIVersion)),
			sign: true, want: stripe.ErrMalformedEvent, mention: []string{"creation time"}},
		{name: "no data", payload: raw(fmt.Sprintf(`{"id":"evt_1","object":"event","api_version":%q,"created":1760000000,"type":"customer.created"}`, stripego.APIVersion)),
			sign: true, want: stripe.ErrMalformedEvent, mention: []string{"data.object"}},
		{name: "null data.object", payload: raw(fmt.Sprintf(`{"id":"evt_1","object":"event","api_version":%q,"created":1760000000,"type":"customer.created","data":{"object":null}}`, stripego.APIVersion)),
			sign: true, want: stripe.ErrMalformedEvent, mention: []string{"data.object"}},
		{name: "payment_intent event about a charge",
			payload: event("payment_intent.succeeded", "", map[string]any{"id": "ch_1", "object": "charge", "metadata": whPurchase}),
			sign:    true, want: stripe.ErrMalformedEvent, mention: []string{`"charge"`}},
		{name: "payment intent with non-string metadata",
			payload: event("payment_intent.succeeded", "", whPI("pi_1", "succeeded", nil, map[string]any{"metadata": map[string]any{"purchase_id": 7}})),
			sign:    true, want: stripe.ErrMalformedEvent},
		{name: "status the table does not know",
			payload: event("payment_intent.payment_failed", "", whPI("pi_1", "requires_reticulation", whPurchase, nil)),
			sign:    true, want: stripe.ErrMalformedEvent, mention: []string{"pi_1", `"requires_reticulation"`}},

		// API version.
		{name: "api_version of another release train",
			payload: event("payment_intent.succeeded", "2025-09-30.clover", whPI("pi_1", "succeeded", whPurchase, nil)),
			sign:    true, want: stripe.ErrAPIVersion,
			mention: []string{`"2025-09-30.clover"`, fmt.Sprintf("%q", stripego.APIVersion), "release train basil"}},
		{name: "api_version without release train",
			payload: event("payment_intent.succeeded", "2024-06-20", whPI("pi_1", "succeeded", whPurchase, nil)),
			sign:    true, want: stripe.ErrAPIVersion, mention: []string{`"2024-06-20"`, fmt.Sprintf("%q", stripego.APIVersion)}},
		{name: "api_version of a preview",
			payload: event("payment_intent.succeeded", "2025-08-27.preview", whPI("pi_1", "succeeded", whPurchase, nil)),
			sign:    true, want: stripe.ErrAPIVersion},
		{name: "no api_version",
			payload: raw(`{"id":"evt_1","object":"event","created":1760000000,"type":"customer.created","data":{"object":{"id":"cus_1"}}}`),
			sign:    true, want: stripe.ErrAPIVersion, mention: []string{`""`}},
	}
	v := whVerifier(t, stripe.WebhookConfig{})
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			header := r.header
			if r.sign {
				at := r.signAt
				if at.IsZero() {
					at = whNow
				}
				header = whSign(whSecret, at, r.payload)
			}
			ev, err := v.Verify(r.payload, header)
			whCheckErr(t, ev, err, r.want)
			for _, m := range r.mention {
				if err != nil && !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %s", err, m)
				}
			}
		})
	}
}

// TestWebhookHandBuiltHeader pins the contract payrecon's fake provider
// relies on: a header built by hand, as whSign builds it, verifies; it is
// the header stripe-go's own test helper builds; and a header carrying
// several v1 signatures (Stripe's, while a secret is rolled) verifies if
// one of them is right.
func TestWebhookHandBuiltHeader(t *testing.T) {
	payload := whEvent(t, "payment_intent.succeeded", "", whPI("pi_1", "succeeded", whPurchase, nil))
	header := whSign(whSecret, whNow, payload)

	lib := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: whSecret, Timestamp: whNow})
	if header != lib.Header {
		t.Errorf("hand-built header %q, stripe-go builds %q", header, lib.Header)
	}
	wantHeader := fmt.Sprintf("t=%d,v1=", whNow.Unix())
	if !strings.HasPrefix(header, wantHeader) || len(header) != len(wantHeader)+64 {
		t.Errorf("header %q, want %s<64 hex digits>", header, wantHeader)
	}

	v := whVerifier(t, stripe.WebhookConfig{})
	ev, err := v.Verify(payload, header)
	if err != nil {
		t.Fatalf("Verify(hand-built header): %v", err)
	}
	if ev.Outcome != provider.Succeeded || ev.PaymentID != "pi_1" || ev.PurchaseID != "pur_01JABCDEF" {
		t.Errorf("event %+v, want pi_1 of pur_01JABCDEF succeeded", ev)
	}

	rolled := fmt.Sprintf("t=%d,v1=%s,v1=%s,v0=%s", whNow.Unix(),
		whMAC("whsec_old", fmt.Sprint(whNow.Unix()), payload), whMAC(whSecret, fmt.Sprint(whNow.Unix()), payload), strings.Repeat("ab", 32))
	if _, err := v.Verify(payload, rolled); err != nil {
		t.Errorf("Verify(%q): %v", rolled, err)
	}
}

func TestWebhookTimestampWindow(t *testing.T) {
	payload := whEvent(t, "payment_intent.processing", "", whPI("pi_1", "processing", whPurchase, nil))
	rows := []struct {
		name   string
		cfg    stripe.WebhookConfig
		signAt time.Duration // relative to whNow
		want   error
	}{
		{name: "default tolerance, at the limit", signAt: -300 * time.Second},
		{name: "default tolerance, past it", signAt: -301 * time.Second, want: stripe.ErrStaleTimestamp},
		{name: "default future skew, at the limit", signAt: 60 * time.Second},
		{name: "default future skew, past it", signAt: 61 * time.Second, want: stripe.ErrFutureTimestamp},
		{name: "now", signAt: 0},
		{name: "custom tolerance, at the limit", cfg: stripe.WebhookConfig{Tolerance: 10 * time.Second}, signAt: -10 * time.Second},
		{name: "custom tolerance, past it", cfg: stripe.WebhookConfig{Tolerance: 10 * time.Second}, signAt: -11 * time.Second,
			want: stripe.ErrStaleTimestamp},
		{name: "custom future skew, at the limit", cfg: stripe.WebhookConfig{MaxFutureSkew: 5 * time.Second}, signAt: 5 * time.Second},
		{name: "custom future skew, past it", cfg: stripe.WebhookConfig{MaxFutureSkew: 5 * time.Second}, signAt: 6 * time.Second,
			want: stripe.ErrFutureTimestamp},
		{name: "long tolerance", cfg: stripe.WebhookConfig{Tolerance: time.Hour}, signAt: -59 * time.Minute},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			v := whVerifier(t, r.cfg)
			ev, err := v.Verify(payload, whSign(whSecret, whNow.Add(r.signAt), payload))
			if r.want == nil {
				if err != nil {
					t.Errorf("Verify: %v", err)
				}
				return
			}
			whCheckErr(t, ev, err, r.want)
		})
	}
}

// TestWebhookClockIsInjected checks that the timestamp is judged by
// WebhookConfig.Now, not by stripe-go's time.Now, and that the default
// clock is the real one.
func TestWebhookClockIsInjected(t *testing.T) {
	payload := whEvent(t, "payment_intent.succeeded", "", whPI("pi_1", "succeeded", whPurchase, nil))
	old := whSign(whSecret, whNow, payload) // years before the real now
	if _, err := whVerifier(t, stripe.WebhookConfig{}).Verify(payload, old); err != nil {
		t.Errorf("Verify at the injected time: %v", err)
	}

	live, err := stripe.NewWebhookVerifier(stripe.WebhookConfig{Secret: whSecret})
	if err != nil {
		t.Fatalf("NewWebhookVerifier: %v", err)
	}
	ev, err := live.Verify(payload, old)
	whCheckErr(t, ev, err, stripe.ErrStaleTimestamp)
	if _, err := live.Verify(payload, whSign(whSecret, time.Now(), payload)); err != nil {
		t.Errorf("Verify signed now, default clock: %v", err)
	}
}

func TestWebhookAPIVersionConfig(t *testing.T) {
	if stripe.DefaultWebhookAPIVersion != stripego.APIVersion {
		t.Errorf("DefaultWebhookAPIVersion = %q, want stripe-go's %q", stripe.DefaultWebhookAPIVersion, stripego.APIVersion)
	}
	rows := []struct {
		name       string
		configured string
		event      string
		want       error
	}{
		{name: "default, same", event: stripego.APIVersion},
		{name: "default, other train", event: "2024-12-18.acacia", want: stripe.ErrAPIVersion},
		{name: "pinned, exact", configured: "2024-12-18.acacia", event: "2024-12-18.acacia"},
		{name: "pinned, same train", configured: "2024-12-18.acacia", event: "2024-09-30.acacia"},
		{name: "pinned, other train", configured: "2024-12-18.acacia", event: stripego.APIVersion, want: stripe.ErrAPIVersion},
		{name: "legacy, exact", configured: "2024-06-20", event: "2024-06-20"},
		{name: "legacy, other", configured: "2024-06-20", event: "2024-04-10", want: stripe.ErrAPIVersion},
		{name: "preview, exact", configured: "2025-08-27.preview", event: "2025-08-27.preview"},
		{name: "preview, other", configured: "2025-08-27.preview", event: "2025-07-30.preview", want: stripe.ErrAPIVersion},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			payload := whEvent(t, "payment_intent.succeeded", r.event, whPI("pi_1", "succeeded", whPurchase, nil))
			v := whVerifier(t, stripe.WebhookConfig{APIVersion: r.configured})
			ev, err := v.Verify(payload, whSign(whSecret, whNow, payload))
			if r.want == nil {
				if err != nil {
					t.Errorf("Verify: %v", err)
				}
				return
			}
			whCheckErr(t, ev, err, r.want)
		})
	}
}

func TestNewWebhookVerifierValidatesConfig(t *testing.T) {
	rows := []struct {
		name string
		cfg  stripe.WebhookConfig
		want string // in the error; "" for none
	}{
		{name: "defaults", cfg: stripe.WebhookConfig{Secret: whSecret}},
		{name: "all set", cfg: stripe.WebhookConfig{Secret: whSecret, Tolerance: time.Minute, MaxFutureSkew: time.Second,
			APIVersion: "2025-03-31.basil", Now: time.Now}},
		{name: "no secret", cfg: stripe.WebhookConfig{}, want: "Secret is required"},
		{name: "API key instead of the signing secret", cfg: stripe.WebhookConfig{Secret: "sk_test_payrecon"}, want: "whsec_"},
		{name: "prefix only", cfg: stripe.WebhookConfig{Secret: "whsec_"}, want: "whsec_"},
		{name: "padded secret", cfg: stripe.WebhookConfig{Secret: whSecret + "\n"}, want: "white space"},
		{name: "negative tolerance", cfg: stripe.WebhookConfig{Secret: whSecret, Tolerance: -time.Second}, want: "Tolerance"},
		{name: "negative future skew", cfg: stripe.WebhookConfig{Secret: whSecret, MaxFutureSkew: -time.Second}, want: "MaxFutureSkew"},
		{name: "API version of the wrong shape", cfg: stripe.WebhookConfig{Secret: whSecret, APIVersion: "basil"}, want: "APIVersion"},
		{name: "API version with a space", cfg: stripe.WebhookConfig{Secret: whSecret, APIVersion: "2025-08-27.basil "}, want: "APIVersion"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			v, err := stripe.NewWebhookVerifier(r.cfg)
			switch {
			case r.want == "" && err != nil:
				t.Errorf("NewWebhookVerifier: %v", err)
			case r.want == "" && v == nil:
				t.Errorf("NewWebhookVerifier returned no verifier")
			case r.want != "" && err == nil:
				t.Errorf("NewWebhookVerifier accepted %+v, want an error mentioning %q", r.cfg, r.want)
			case r.want != "" && !strings.Contains(err.Error(), r.want):
				t.Errorf("error %q does not mention %q", err, r.want)
			case err != nil && len(strings.TrimSpace(r.cfg.Secret)) > len("whsec_") && strings.Contains(err.Error(), strings.TrimSpace(r.cfg.Secret)):
				t.Errorf("error %q leaks the secret", err)
			}
		})
	}
}

// webhookVerifier is the interface of payrecon's webhook endpoint
// (reconcile/http.WebhookVerifier), copied: provider/stripe must not
// import the HTTP layer.
type webhookVerifier interface {
	Verify(payload []byte, header string) (provider.Event, error)
	SignatureHeader() string
}

var _ webhookVerifier = (*stripe.WebhookVerifier)(nil)

func TestWebhookSignatureHeaderAndSentinels(t *testing.T) {
	if got := whVerifier(t, stripe.WebhookConfig{}).SignatureHeader(); got != "Stripe-Signature" {
		t.Errorf("SignatureHeader() = %q, want Stripe-Signature", got)
	}
	for i, a := range whSentinels {
		for j, b := range whSentinels {
			if i != j && (a == b || errors.Is(a, b) || a.Error() == b.Error()) {
				t.Errorf("sentinels %v and %v are not distinct", a, b)
			}
		}
	}
}

// TestWebhookConcurrentVerify runs one verifier from many goroutines, for
// the race detector.
func TestWebhookConcurrentVerify(t *testing.T) {
	v := whVerifier(t, stripe.WebhookConfig{})
	payload := whEvent(t, "payment_intent.succeeded", "", whPI("pi_1", "succeeded", whPurchase, nil))
	header := whSign(whSecret, whNow, payload)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if _, err := v.Verify(payload, header); err != nil {
					t.Errorf("Verify: %v", err)
					return
				}
				if _, err := v.Verify(payload, whSign("whsec_wrong", whNow, payload)); !errors.Is(err, stripe.ErrBadSignature) {
					t.Errorf("Verify with a wrong secret: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestWebhookDigest: a redelivery that differs only in envelope fields
// digests the same; a different object under the same id does not.
func TestWebhookDigest(t *testing.T) {
	v := whVerifier(t, stripe.WebhookConfig{})
	digest := func(payload []byte) string {
		t.Helper()
		ev, err := v.Verify(payload, whSign(whSecret, whNow, payload))
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		return ev.Digest
	}
	pi := whPI("pi_3SAbCdEfGhIjKlMn", "succeeded", whPurchase, nil)
	first := whEvent(t, "payment_intent.succeeded", "", pi)
	redelivered := []byte(strings.Replace(string(first), `"pending_webhooks":1`, `"pending_webhooks":0`, 1))
	if string(redelivered) == string(first) {
		t.Fatal("test payload has no pending_webhooks to change")
	}
	if digest(first) != digest(redelivered) {
		t.Fatal("a redelivery with another pending_webhooks digests differently")
	}
	other := whEvent(t, "payment_intent.succeeded", "", whPI("pi_3SAbCdEfGhIjKlMn", "succeeded", whPurchase, map[string]any{"amount": 999}))
	if digest(first) == digest(other) {
		t.Fatal("another object under the same event id digests the same")
	}
}

// whRefund returns a Refund object as Stripe renders it in an event: 120
// usd of pi_3SAbCdEfGhIjKlMn, with metadata (none when nil) and fields
// overridden by extra.
func whRefund(id, status string, metadata map[string]string, extra map[string]any) map[string]any {
	if metadata == nil {
		metadata = map[string]string{}
	}
	r := map[string]any{
		"id":                  id,
		"object":              "refund",
		"amount":              120,
		"balance_transaction": nil,
		"charge":              "ch_3SAbCdEfGhIjKlMn0",
		"created":             whCreated.Unix() - 1,
		"currency":            "usd",
		"metadata":            metadata,
		"payment_intent":      "pi_3SAbCdEfGhIjKlMn",
		"reason":              "duplicate",
		"receipt_number":      nil,
		"status":              status,
	}
	for k, v := range extra {
		r[k] = v
	}
	return r
}

// whRefundMeta is the metadata payrecon puts on its refunds.
var whRefundMeta = map[string]string{"refund_id": "ref_01JREFUND", "purchase_id": "pur_01JABCDEF"}

// whCharge returns the charge of pi_3SAbCdEfGhIjKlMn (300 usd) as a
// charge.refunded event renders it, carrying refunds (listed as given:
// Stripe lists newest first); no refunds list at all when refunds is nil.
func whCharge(refunds []map[string]any) map[string]any {
	c := map[string]any{
		"id": "ch_3SAbCdEfGhIjKlMn0", "object": "charge", "amount": 300, "amount_captured": 300,
		"amount_refunded": 120, "captured": true, "currency": "usd", "paid": true, "refunded": false,
		"status": "succeeded", "payment_intent": "pi_3SAbCdEfGhIjKlMn", "metadata": map[string]string{},
		"created": whCreated.Unix() - 100,
	}
	if refunds != nil {
		c["refunds"] = map[string]any{"object": "list", "url": "/v1/charges/ch_3SAbCdEfGhIjKlMn0/refunds", "has_more": false, "data": refunds}
	}
	return c
}

// TestWebhookTranslatesRefundEvents checks refund.* and charge.refunded
// events: the refund, its outcome by the refund status table, the
// refunded payment, the purchase and the refund's amount.
func TestWebhookTranslatesRefundEvents(t *testing.T) {
	const pi = "pi_3SAbCdEfGhIjKlMn"
	at := whCreated.Add(-time.Second)
	refund := func(o provider.Outcome, id, status, reason string) *provider.RefundResult {
		return &provider.RefundResult{Outcome: o, ID: id, PaymentID: pi, RefundID: "ref_01JREFUND", PurchaseID: "pur_01JABCDEF",
			Amount: 120, Currency: "usd", Status: status, Reason: reason, Created: at}
	}
	later := whRefund("re_2", "pending", whRefundMeta, map[string]any{"created": whCreated.Unix(), "amount": 80})
	laterRefund := refund(provider.Pending, "re_2", "pending", "")
	laterRefund.Amount, laterRefund.Created = 80, whCreated
	dashboard := refund(provider.Succeeded, "re_1", "succeeded", "")
	dashboard.RefundID, dashboard.PurchaseID = "", ""

	rows := []struct {
		name   string
		typ    string
		object map[string]any
		// refund is what the event is about; nil for none.
		refund *provider.RefundResult
	}{
		{name: "refund.created succeeded", typ: "refund.created",
			object: whRefund("re_1", "succeeded", whRefundMeta, nil), refund: refund(provider.Succeeded, "re_1", "succeeded", "")},
		{name: "refund.created pending", typ: "refund.created",
			object: whRefund("re_1", "pending", whRefundMeta, nil), refund: refund(provider.Pending, "re_1", "pending", "")},
		{name: "refund.updated succeeded", typ: "refund.updated",
			object: whRefund("re_1", "succeeded", whRefundMeta, nil), refund: refund(provider.Succeeded, "re_1", "succeeded", "")},
		{name: "refund.updated requires_action", typ: "refund.updated",
			object: whRefund("re_1", "requires_action", whRefundMeta, nil), refund: refund(provider.Pending, "re_1", "requires_action", "")},
		{name: "refund.updated canceled", typ: "refund.updated",
			object: whRefund("re_1", "canceled", whRefundMeta, map[string]any{"failure_reason": "merchant_request"}),
			refund: refund(provider.Failed, "re_1", "canceled", "merchant_request")},
		{name: "refund.failed", typ: "refund.failed",
			object: whRefund("re_1", "failed", whRefundMeta, map[string]any{"failure_reason": "expired_or_canceled_card"}),
			refund: refund(provider.Failed, "re_1", "failed", "expired_or_canceled_card")},
		{name: "refund.updated pending after succeeded (stale): by the status", typ: "refund.updated",
			object: whRefund("re_1", "pending", whRefundMeta, nil), refund: refund(provider.Pending, "re_1", "pending", "")},
		{name: "payment_intent expanded", typ: "refund.updated",
			object: whRefund("re_1", "succeeded", whRefundMeta, map[string]any{"payment_intent": whPI(pi, "succeeded", whPurchase, nil)}),
			refund: refund(provider.Succeeded, "re_1", "succeeded", "")},
		{name: "a Dashboard refund, naming nothing, is still translated", typ: "refund.created",
			object: whRefund("re_1", "succeeded", nil, nil), refund: dashboard},
		{name: "charge.refunded: about the most recent of its refunds", typ: "charge.refunded",
			object: whCharge([]map[string]any{later, whRefund("re_1", "succeeded", whRefundMeta, nil)}), refund: laterRefund},
		{name: "charge.refunded: most recent wherever it is listed", typ: "charge.refunded",
			object: whCharge([]map[string]any{whRefund("re_1", "succeeded", whRefundMeta, nil), later}), refund: laterRefund},
		{name: "charge.refunded: of refunds created in one second, the first listed", typ: "charge.refunded",
			object: whCharge([]map[string]any{
				whRefund("re_1", "succeeded", whRefundMeta, nil),
				whRefund("re_0", "failed", whRefundMeta, nil),
			}), refund: refund(provider.Succeeded, "re_1", "succeeded", "")},
		{name: "charge.refunded without its refunds: the payment only", typ: "charge.refunded", object: whCharge(nil)},
		{name: "charge.refunded with an empty list: the payment only", typ: "charge.refunded", object: whCharge([]map[string]any{})},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			payload := whEvent(t, r.typ, "", r.object)
			ev, err := whVerifier(t, stripe.WebhookConfig{}).Verify(payload, whSign(whSecret, whNow, payload))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			want := provider.Event{ID: "evt_3SAbCdEfGhIjKlMn1", Type: r.typ, PaymentID: pi, Created: whCreated, Refund: r.refund}
			if r.refund != nil {
				want.Outcome = r.refund.Outcome
				want.PurchaseID = r.refund.PurchaseID
				want.Amount, want.Currency = r.refund.Amount, r.refund.Currency
			}
			if len(ev.Digest) != 64 {
				t.Errorf("digest %q, want a hex SHA-256", ev.Digest)
			}
			ev.Digest = ""
			if !sameEvent(ev, want) {
				t.Errorf("event\n got %s\nwant %s", showEvent(ev), showEvent(want))
			}
			if ev.Outcome == provider.Declined {
				t.Errorf("a refund event reports a decline: %s", showEvent(ev))
			}
		})
	}
}

// TestWebhookRefusesRefundEvents: a refund event whose object is no
// refund, a charge.refunded whose object is no charge, and a refund in a
// status the table does not know (never read as failed) are malformed.
func TestWebhookRefusesRefundEvents(t *testing.T) {
	rows := []struct {
		name   string
		typ    string
		object map[string]any
	}{
		{"refund in an unknown status", "refund.updated", whRefund("re_1", "teleported", whRefundMeta, nil)},
		{"refund.failed in an unknown status", "refund.failed", whRefund("re_1", "teleported", whRefundMeta, nil)},
		{"refund event about a payment intent", "refund.created", whPI("pi_1", "succeeded", whPurchase, nil)},
		{"refund event about an object without id", "refund.created", map[string]any{"object": "refund", "status": "succeeded"}},
		{"charge.refunded about a payment intent", "charge.refunded", whPI("pi_1", "succeeded", whPurchase, nil)},
		{"charge.refunded carrying a refund in an unknown status", "charge.refunded",
			whCharge([]map[string]any{whRefund("re_1", "teleported", whRefundMeta, nil)})},
		{"refund whose amount is not a number", "refund.created", whRefund("re_1", "succeeded", whRefundMeta, map[string]any{"amount": "lots"})},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			payload := whEvent(t, r.typ, "", r.object)
			ev, err := whVerifier(t, stripe.WebhookConfig{}).Verify(payload, whSign(whSecret, whNow, payload))
			whCheckErr(t, ev, err, stripe.ErrMalformedEvent)
		})
	}
}

// TestWebhookRefundDigest: a redelivered refund event digests the same, a
// refund in another status under the same id does not.
func TestWebhookRefundDigest(t *testing.T) {
	v := whVerifier(t, stripe.WebhookConfig{})
	digest := func(payload []byte) string {
		t.Helper()
		ev, err := v.Verify(payload, whSign(whSecret, whNow, payload))
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		return ev.Digest
	}
	first := whEvent(t, "refund.updated", "", whRefund("re_1", "succeeded", whRefundMeta, nil))
	redelivered := []byte(strings.Replace(string(first), `"pending_webhooks":1`, `"pending_webhooks":0`, 1))
	if digest(first) != digest(redelivered) {
		t.Fatal("a redelivery with another pending_webhooks digests differently")
	}
	if digest(first) == digest(whEvent(t, "refund.updated", "", whRefund("re_1", "pending", whRefundMeta, nil))) {
		t.Fatal("a refund in another status under the same event id digests the same")
	}
}

// sameEvent reports whether a and b say the same, comparing the refunds
// and disputes they point to rather than the pointers.
func sameEvent(a, b provider.Event) bool {
	ra, rb := a.Refund, b.Refund
	da, db := a.Dispute, b.Dispute
	a.Refund, b.Refund, a.Dispute, b.Dispute = nil, nil, nil, nil
	if a != b || (ra == nil) != (rb == nil) || (da == nil) != (db == nil) {
		return false
	}
	return (ra == nil || *ra == *rb) && (da == nil || *da == *db)
}

// showEvent formats ev with the refund or dispute it points to.
func showEvent(ev provider.Event) string {
	r, d := ev.Refund, ev.Dispute
	ev.Refund, ev.Dispute = nil, nil
	s := fmt.Sprintf("%+v", ev)
	if r != nil {
		s += fmt.Sprintf(" refund %+v", *r)
	}
	if d != nil {
		s += fmt.Sprintf(" dispute %+v", *d)
	}
	return s
}

// TestWebhookAccount: an event a Connect endpoint receives names its
// connected account at the top level, and the verifier reads it into
// Event.Account; a platform event names none; a malformed account is
// refused as a malformed event, nothing translated.
func TestWebhookAccount(t *testing.T) {
	v := whVerifier(t, stripe.WebhookConfig{})
	for _, tc := range []struct {
		name, account string
		want          error
	}{
		{"connected account", "acct_1Connected", nil},
		{"platform", "", nil},
		{"malformed", "acct-1", stripe.ErrMalformedEvent},
		{"empty id", "acct_", stripe.ErrMalformedEvent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body map[string]any
			if err := json.Unmarshal(whEvent(t, "payment_intent.succeeded", "", whPI("pi_1", "succeeded", whPurchase, nil)), &body); err != nil {
				t.Fatal(err)
			}
			if tc.account != "" {
				body["account"] = tc.account
			}
			payload, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := v.Verify(payload, whSign(whSecret, whNow, payload))
			switch {
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("account %q: %+v, %v; want %v", tc.account, ev, err, tc.want)
			case tc.want == nil && (err != nil || ev.Account != tc.account):
				t.Fatalf("account %q: Event.Account %q, %v", tc.account, ev.Account, err)
			}
		})
	}
}
