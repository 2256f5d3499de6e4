package stripe_test

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
)

// fuzzVerifier returns the verifier of the fuzz targets: whSecret, the
// clock whNow, the default tolerances and API version.
func fuzzVerifier(f *testing.F) *stripe.WebhookVerifier {
	f.Helper()
	v, err := stripe.NewWebhookVerifier(stripe.WebhookConfig{Secret: whSecret, Now: func() time.Time { return whNow }})
	if err != nil {
		f.Fatal(err)
	}
	return v
}

// fuzzEvent renders a Stripe event of type typ about object, for seeds.
func fuzzEvent(typ string, object map[string]any) []byte {
	b, err := json.Marshal(map[string]any{
		"id": "evt_3SAbCdEfGhIjKlMn1", "object": "event", "api_version": stripego.APIVersion,
		"created": whCreated.Unix(), "data": map[string]any{"object": object}, "livemode": false,
		"pending_webhooks": 1, "type": typ,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// oneSentinel returns the one sentinel error of Verify that err wraps,
// or nil if it wraps none or several.
func oneSentinel(err error) error {
	var found []error
	for _, s := range whSentinels {
		if errors.Is(err, s) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		return nil
	}
	return found[0]
}

// flipLast returns header with its last character, a hex digit of a
// signature, replaced by another.
func flipLast(header string) string {
	last := byte('0')
	if header[len(header)-1] == '0' {
		last = '1'
	}
	return header[:len(header)-1] + string(last)
}

// FuzzWebhookEvent signs each payload with the test secret at a valid
// timestamp, so that it passes the signature check and reaches the event
// decoder. Properties: Verify never panics and answers the same twice;
// an accepted event has an id, a type and a creation time, and its
// outcome is a neutral outcome (succeeded, declined or pending for a
// payment_intent.* event, which also names its payment and purchase;
// succeeded, failed or pending for a refund event, or a charge.refunded
// carrying refunds, which reports the refund it is about; pending for a
// dispute event, which reports its dispute; none for any other event); a
// refused one is refused for what it says,
// never for its signature, with exactly one of Verify's errors and the
// zero event; and the same payload with a tampered signature, or a
// tampered payload with its signature, is always refused as a bad
// signature.
func FuzzWebhookEvent(f *testing.F) {
	pi := "pi_3SAbCdEfGhIjKlMn"
	for _, seed := range [][]byte{
		fuzzEvent("payment_intent.succeeded", whPI(pi, "succeeded", whPurchase, nil)),
		fuzzEvent("payment_intent.payment_failed", whPI(pi, "requires_payment_method", whPurchase, nil)),
		fuzzEvent("payment_intent.payment_failed", whPI(pi, "requires_action", whPurchase, nil)),
		fuzzEvent("payment_intent.canceled", whPI(pi, "canceled", whPurchase, nil)),
		fuzzEvent("payment_intent.processing", whPI(pi, "processing", whPurchase, nil)),
		fuzzEvent("payment_intent.requires_action", whPI(pi, "requires_action", whPurchase, nil)),
		fuzzEvent("payment_intent.created", whPI(pi, "requires_payment_method", whPurchase, nil)),
		fuzzEvent("payment_intent.amount_capturable_updated", whPI(pi, "requires_capture", whPurchase, nil)),
		fuzzEvent("payment_intent.succeeded", whPI(pi, "succeeded", nil, nil)),
		fuzzEvent("payment_intent.succeeded", whPI(pi, "teleported", whPurchase, nil)),
		fuzzEvent("payment_intent.succeeded", map[string]any{"id": "ch_1", "object": "charge"}),
		fuzzEvent("charge.succeeded", map[string]any{"id": "ch_1", "object": "charge", "payment_intent": pi}),
		fuzzEvent("charge.refunded", map[string]any{"id": pi, "object": "payment_intent"}),
		fuzzEvent("refund.created", whRefund("re_1", "succeeded", whRefundMeta, nil)),
		fuzzEvent("refund.updated", whRefund("re_1", "pending", nil, nil)),
		fuzzEvent("refund.failed", whRefund("re_1", "failed", whRefundMeta, map[string]any{"failure_reason": "declined"})),
		fuzzEvent("refund.updated", whRefund("re_1", "teleported", whRefundMeta, nil)),
		fuzzEvent("refund.updated", whRefund("re_1", "canceled", whRefundMeta, map[string]any{"payment_intent": nil, "charge": nil})),
		fuzzEvent("charge.refunded", whCharge([]map[string]any{whRefund("re_1", "succeeded", whRefundMeta, nil)})),
		fuzzEvent("charge.refunded", whCharge(nil)),
		fuzzEvent(provider.EventDisputeCreated, whDispute("du_1", "warning_needs_response", nil)),
		fuzzEvent(provider.EventDisputeFundsWithdrawn, whDispute("du_1", "needs_response", map[string]any{
			"balance_transactions": []any{balanceTransaction("txn_1", -300, 1500)}})),
		fuzzEvent(provider.EventDisputeClosed, whDispute("du_1", "won", map[string]any{"payment_intent": nil, "evidence_details": nil})),
		fuzzEvent(provider.EventDisputeUpdated, whDispute("du_1", "under_review", map[string]any{"amount": 0})),
		fuzzEvent(provider.EventDisputeFundsReinstated, whRefund("re_1", "succeeded", whRefundMeta, nil)),
		fuzzEvent("customer.created", map[string]any{"id": "cus_1", "object": "customer"}),
		[]byte(`{"id":"evt_1","object":"event","api_version":"2025-08-27.basil","created":1,"type":"x","data":{"object":{}}}`),
		[]byte(`{"id":"evt_1","object":"event","api_version":"2024-06-20","created":1,"type":"x","data":{"object":{}}}`),
		[]byte(`{"id":"evt_1","object":"event","api_version":"2025-08-27.basil","created":0,"type":"x","data":{"object":{}}}`),
		[]byte(`{"id":"evt_1","object":"event","api_version":"2025-08-27.basil","created":1,"type":"x","data":null}`),
		[]byte(`{"id":"evt_1","object":"event","api_version":"2025-08-27.basil","created":1,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","object":"payment_intent","metadata":{"purchase_id":"pur_1"},"status":"succeeded","amount":-5}}}`),
		[]byte(`{"object":"event"}`),
		[]byte(`{"id":1}`),
		[]byte(`[]`),
		[]byte(`null`),
		[]byte(``),
		[]byte("\xff"),
	} {
		f.Add(seed)
	}
	v := fuzzVerifier(f)
	signedAt := whNow.Add(-time.Second)
	f.Fuzz(func(t *testing.T, payload []byte) {
		header := whSign(whSecret, signedAt, payload)
		ev, err := v.Verify(payload, header)
		ev2, err2 := v.Verify(payload, header)
		if !sameEvent(ev, ev2) || fmt.Sprint(err) != fmt.Sprint(err2) {
			t.Fatalf("Verify(%q) answered %s, %v, then %s, %v", payload, showEvent(ev), err, showEvent(ev2), err2)
		}
		if err != nil {
			switch s := oneSentinel(err); {
			case s == nil:
				t.Fatalf("Verify(%q): error %q wraps none or several of Verify's errors, want one", payload, err)
			case s == stripe.ErrBadSignature || s == stripe.ErrStaleTimestamp || s == stripe.ErrFutureTimestamp:
				t.Fatalf("Verify(%q) refused a valid signature: %v", payload, err)
			case !sameEvent(ev, provider.Event{}):
				t.Fatalf("Verify(%q) returned %s with error %v", payload, showEvent(ev), err)
			}
		} else {
			checkEvent(t, payload, ev)
		}

		tampered := []string{
			whSign("whsec_other0123456789", signedAt, payload),
			flipLast(header),
			fmt.Sprintf("t=%d,v1=%s", signedAt.Unix()+1, header[strings.Index(header, "v1=")+3:]),
			fmt.Sprintf("t=%d", signedAt.Unix()),
		}
		for _, h := range tampered {
			if ev, err := v.Verify(payload, h); !errors.Is(err, stripe.ErrBadSignature) {
				t.Fatalf("Verify(%q) with the tampered header %q = %+v, %v; want a bad signature", payload, h, ev, err)
			}
		}
		if ev, err := v.Verify(append(payload[:len(payload):len(payload)], ' '), header); !errors.Is(err, stripe.ErrBadSignature) {
			t.Fatalf("Verify of %q with a space added, under its signature = %+v, %v; want a bad signature", payload, ev, err)
		}
	})
}

// checkEvent fails t unless ev is what an accepted event must be.
func checkEvent(t *testing.T, payload []byte, ev provider.Event) {
	t.Helper()
	switch {
	case ev.ID == "" || ev.Type == "":
		t.Fatalf("Verify(%q) accepted an event without id or type: %+v", payload, ev)
	case ev.Created.Unix() <= 0:
		t.Fatalf("Verify(%q) accepted an event without a creation time: %+v", payload, ev)
	case ev.Digest == "":
		t.Fatalf("Verify(%q) accepted an event without a digest: %+v", payload, ev)
	}
	if strings.HasPrefix(ev.Type, "payment_intent.") {
		switch {
		case ev.Outcome != provider.Succeeded && ev.Outcome != provider.Declined && ev.Outcome != provider.Pending:
			t.Fatalf("Verify(%q): payment_intent event with outcome %q, want succeeded, declined or pending", payload, ev.Outcome)
		case ev.PaymentID == "":
			// PurchaseID may be "": another integration's payment.
			t.Fatalf("Verify(%q): payment_intent event without payment: %+v", payload, ev)
		}
		return
	}
	if ev.Dispute != nil {
		d := *ev.Dispute
		switch {
		case ev.Refund != nil || !slices.Contains(provider.DisputeEventTypes, ev.Type):
			t.Fatalf("Verify(%q): event of type %q reports a dispute: %s", payload, ev.Type, showEvent(ev))
		case ev.Outcome != provider.Pending:
			t.Fatalf("Verify(%q): dispute event with outcome %q, want pending", payload, ev.Outcome)
		case d.PaymentID != ev.PaymentID || d.PurchaseID != ev.PurchaseID || d.Amount != ev.Amount || d.Currency != ev.Currency:
			t.Fatalf("Verify(%q): event %s disagrees with its dispute", payload, showEvent(ev))
		case d.ID == "" || d.Amount <= 0 || d.Currency == "":
			t.Fatalf("Verify(%q): malformed dispute accepted: %s", payload, showEvent(ev))
		}
		return
	}
	if slices.Contains(provider.DisputeEventTypes, ev.Type) {
		t.Fatalf("Verify(%q): dispute event without its dispute: %+v", payload, ev)
	}
	if ev.Refund != nil {
		r := *ev.Refund
		switch {
		case !strings.HasPrefix(ev.Type, "refund.") && ev.Type != "charge.refunded":
			t.Fatalf("Verify(%q): event of type %q reports a refund: %s", payload, ev.Type, showEvent(ev))
		case ev.Outcome != provider.Succeeded && ev.Outcome != provider.Failed && ev.Outcome != provider.Pending:
			t.Fatalf("Verify(%q): refund event with outcome %q, want succeeded, failed or pending", payload, ev.Outcome)
		case r.Outcome != ev.Outcome || r.PaymentID != ev.PaymentID || r.PurchaseID != ev.PurchaseID || r.Amount != ev.Amount || r.Currency != ev.Currency:
			t.Fatalf("Verify(%q): event %s disagrees with its refund", payload, showEvent(ev))
		case r.ID == "":
			t.Fatalf("Verify(%q): refund without id: %s", payload, showEvent(ev))
		}
		return
	}
	if strings.HasPrefix(ev.Type, "refund.") {
		t.Fatalf("Verify(%q): refund event without its refund: %+v", payload, ev)
	}
	switch {
	case ev.Type == "charge.refunded" && ev.Outcome == "" && ev.PurchaseID == "" && ev.Amount == 0 && ev.Currency == "":
		// A refunded charge carrying no refunds: its payment only, whatever
		// its payment_intent says.
	case ev.Outcome != "" || ev.PurchaseID != "" || ev.Amount != 0 || ev.Currency != "":
		t.Fatalf("Verify(%q): event of type %q reports a payment: %+v", payload, ev.Type, ev)
	case ev.PaymentID != "" && !strings.HasPrefix(ev.PaymentID, "pi_"):
		t.Fatalf("Verify(%q): payment id %q is no PaymentIntent's", payload, ev.PaymentID)
	}
}

// FuzzWebhookSignature feeds each Stripe-Signature header to Verify with
// a valid event. Properties: Verify never panics; it accepts a header
// only if the header has exactly one timestamp, within the tolerance
// (300 s back, 60 s ahead), and among its v1 signatures the HMAC of that
// timestamp and the payload under the secret: a header without the
// right signature, whatever else it holds, is refused as a bad
// signature, and a header that is refused never yields an event.
func FuzzWebhookSignature(f *testing.F) {
	payload := fuzzEvent("payment_intent.succeeded", whPI("pi_3SAbCdEfGhIjKlMn", "succeeded", whPurchase, nil))
	at := whNow.Add(-time.Second)
	mac := whMAC(whSecret, strconv.FormatInt(at.Unix(), 10), payload)
	for _, seed := range []string{
		whSign(whSecret, at, payload),
		whSign(whSecret, whNow.Add(-299*time.Second), payload),
		whSign(whSecret, whNow.Add(-301*time.Second), payload),
		whSign(whSecret, whNow.Add(59*time.Second), payload),
		whSign(whSecret, whNow.Add(61*time.Second), payload),
		whSign("whsec_other0123456789", at, payload),
		fmt.Sprintf("t=%d,v1=%s,v1=%s", at.Unix(), strings.Repeat("0", 64), mac),
		fmt.Sprintf("t=%d,v0=%s", at.Unix(), mac),
		fmt.Sprintf("v1=%s,t=%d", mac, at.Unix()),
		fmt.Sprintf("t=%d,t=%d,v1=%s", at.Unix(), at.Unix(), mac),
		fmt.Sprintf("t=+%d,v1=%s", at.Unix(), mac),
		fmt.Sprintf("t=0%d,v1=%s", at.Unix(), mac),
		fmt.Sprintf("t= %d,v1=%s", at.Unix(), mac),
		fmt.Sprintf("t=%d, v1=%s", at.Unix(), mac),
		fmt.Sprintf("t=%d,v1=%s", at.Unix(), strings.ToUpper(mac)),
		fmt.Sprintf("t=%d,v1=%s", at.Unix(), mac[:63]),
		fmt.Sprintf("v1=%s", mac),
		"t=99999999999999999999,v1=00",
		"t=-1,v1=",
		"t=",
		",,,",
		"",
	} {
		f.Add(seed)
	}
	v := fuzzVerifier(f)
	f.Fuzz(func(t *testing.T, header string) {
		ev, err := v.Verify(payload, header)
		if err != nil {
			if oneSentinel(err) == nil {
				t.Fatalf("Verify(header %q): error %q wraps none or several of Verify's errors, want one", header, err)
			}
			if ev != (provider.Event{}) {
				t.Fatalf("Verify(header %q) returned %+v with error %v", header, ev, err)
			}
			return
		}
		var stamps []int64
		var sigs []string
		for pair := range strings.SplitSeq(header, ",") {
			k, val, _ := strings.Cut(pair, "=")
			switch k {
			case "t":
				n, err := strconv.ParseInt(val, 10, 64)
				if err != nil {
					t.Fatalf("Verify accepted header %q with timestamp %q", header, val)
				}
				stamps = append(stamps, n)
			case "v1":
				sigs = append(sigs, val)
			}
		}
		if len(stamps) != 1 {
			t.Fatalf("Verify accepted header %q with %d timestamps", header, len(stamps))
		}
		signed := time.Unix(stamps[0], 0)
		if signed.Before(whNow.Add(-stripe.DefaultWebhookTolerance)) || signed.After(whNow.Add(stripe.DefaultWebhookMaxFutureSkew)) {
			t.Fatalf("Verify accepted header %q signed at %v, out of the window around %v", header, signed, whNow)
		}
		want := whMAC(whSecret, strconv.FormatInt(stamps[0], 10), payload)
		found := false
		for _, s := range sigs {
			b, err := hex.DecodeString(s) // stripe-go reads hex in either case
			found = found || err == nil && hex.EncodeToString(b) == want
		}
		if !found {
			t.Fatalf("Verify accepted header %q, which has no signature %s of the payload", header, want)
		}
		if ev.ID == "" || ev.Outcome != provider.Succeeded {
			t.Fatalf("Verify(header %q) = %+v", header, ev)
		}
	})
}
