package stripe

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/payrecon/payrecon/provider"
)

// Defaults of WebhookConfig.
const (
	// DefaultWebhookTolerance is how old a signature may be. It is Stripe's
	// own recommendation and stripe-go's webhook.DefaultTolerance.
	DefaultWebhookTolerance = webhook.DefaultTolerance // 300 s
	// DefaultWebhookMaxFutureSkew is how far in the future a signature's
	// timestamp may be. Stripe stamps each delivery when it signs it, so a
	// timestamp ahead of the local clock only comes from clock skew, which
	// NTP keeps far below a second. A minute tolerates a badly kept clock
	// without widening much the window in which a captured request can be
	// replayed: Tolerance+MaxFutureSkew of local time, 6 minutes by default
	// (and a replay is a duplicate event id, stored once, anyway). A local
	// clock more than a minute behind is refused loudly rather than
	// silently accepting timestamps from the future.
	DefaultWebhookMaxFutureSkew = 60 * time.Second
	// DefaultWebhookAPIVersion is the API version of the stripe-go the
	// adapter is built with ("2025-08-27.basil" for v82.5.1): the version
	// its types read.
	DefaultWebhookAPIVersion = stripego.APIVersion
	// WebhookSignatureHeader is the HTTP header of Stripe's signature.
	WebhookSignatureHeader = "Stripe-Signature"
)

// Errors of Verify. Each error Verify returns wraps exactly one of them,
// with a message saying what was wrong; the webhook endpoint refuses the
// request (400) and stores nothing.
var (
	// ErrBadSignature: the Stripe-Signature header is missing or
	// unparsable, has no timestamp or several, or none of its v1
	// signatures is the HMAC-SHA256 of the payload under the secret.
	ErrBadSignature = errors.New("stripe webhook: bad signature")
	// ErrStaleTimestamp: the signature is valid but its timestamp is older
	// than WebhookConfig.Tolerance (a replay, or a delivery held too long).
	ErrStaleTimestamp = errors.New("stripe webhook: signature timestamp too old")
	// ErrFutureTimestamp: the signature is valid but its timestamp is more
	// than WebhookConfig.MaxFutureSkew ahead of the local clock.
	ErrFutureTimestamp = errors.New("stripe webhook: signature timestamp in the future")
	// ErrMalformedEvent: the signed payload is not a Stripe event payrecon
	// can translate: not JSON, not an event, a required field missing, a
	// payment_intent event whose object is no PaymentIntent or whose status
	// the status table does not know, a refund event whose object is no
	// Refund, a charge.refunded event whose object is no Charge, a
	// refund whose status the refund status table does not know, or a
	// dispute event whose object is no Dispute, or one without id, with an
	// amount not positive or without currency.
	ErrMalformedEvent = errors.New("stripe webhook: malformed event")
	// ErrAPIVersion: the event was rendered in an API version incompatible
	// with WebhookConfig.APIVersion (see there).
	ErrAPIVersion = errors.New("stripe webhook: unexpected API version")
)

// WebhookConfig configures a WebhookVerifier. The zero value of every
// field but Secret is a documented default.
type WebhookConfig struct {
	// Secret is the webhook endpoint's signing secret (whsec_…), from
	// STRIPE_WEBHOOK_SECRET. Required. It is never logged nor put in an
	// error.
	Secret string

	// Tolerance is how old a signature's timestamp may be, by Now. Default
	// DefaultWebhookTolerance (300 s). Negative values are refused.
	Tolerance time.Duration

	// MaxFutureSkew is how far ahead of Now a signature's timestamp may be.
	// Default DefaultWebhookMaxFutureSkew (60 s; why: see there). Negative
	// values are refused.
	MaxFutureSkew time.Duration

	// APIVersion is the API version of the webhook endpoint, in which
	// Stripe renders its events. An event is accepted when its api_version
	// is compatible, by stripe-go's own rule: same release train (the
	// suffix of "2025-08-27.basil"), since Stripe makes breaking changes
	// only between trains; and identical when either version has no train
	// (before 2024-09-30.acacia) or is a preview. Default
	// DefaultWebhookAPIVersion.
	APIVersion string

	// Now is the clock the signature's timestamp is checked against.
	// Default time.Now.
	Now func() time.Time
}

// WebhookVerifier verifies Stripe webhooks and translates their events.
// It is safe for concurrent use.
type WebhookVerifier struct {
	secret     string
	tolerance  time.Duration
	futureSkew time.Duration
	apiVersion string
	now        func() time.Time
}

// webhookSecretPrefix begins every Stripe webhook signing secret
// (Dashboard endpoints and the Stripe CLI's alike).
const webhookSecretPrefix = "whsec_"

// apiVersionPattern is the shape of a Stripe API version: a date, then a
// release train since 2024-09-30.acacia.
var apiVersionPattern = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}(\.[a-z]+)?$`)

// NewWebhookVerifier returns a WebhookVerifier configured by cfg, or an
// error if cfg is invalid: no secret, a secret that is not a whsec_ signing
// secret (an API key pasted by mistake would fail every webhook), a
// negative duration, or an API version of the wrong shape.
func NewWebhookVerifier(cfg WebhookConfig) (*WebhookVerifier, error) {
	switch s := cfg.Secret; {
	case s == "":
		return nil, errors.New("stripe: WebhookConfig.Secret is required")
	case strings.ContainsAny(s, " \t\r\n"):
		return nil, errors.New("stripe: WebhookConfig.Secret contains white space")
	case !strings.HasPrefix(s, webhookSecretPrefix) || len(s) == len(webhookSecretPrefix):
		return nil, errors.New("stripe: WebhookConfig.Secret is not a webhook signing secret (whsec_…)")
	}
	v := &WebhookVerifier{
		secret:     cfg.Secret,
		tolerance:  cfg.Tolerance,
		futureSkew: cfg.MaxFutureSkew,
		apiVersion: cfg.APIVersion,
		now:        cfg.Now,
	}
	switch {
	case v.tolerance < 0:
		return nil, fmt.Errorf("stripe: WebhookConfig.Tolerance %v is negative", v.tolerance)
	case v.tolerance == 0:
		v.tolerance = DefaultWebhookTolerance
	}
	switch {
	case v.futureSkew < 0:
		return nil, fmt.Errorf("stripe: WebhookConfig.MaxFutureSkew %v is negative", v.futureSkew)
	case v.futureSkew == 0:
		v.futureSkew = DefaultWebhookMaxFutureSkew
	}
	if v.apiVersion == "" {
		v.apiVersion = DefaultWebhookAPIVersion
	}
	if !apiVersionPattern.MatchString(v.apiVersion) {
		return nil, fmt.Errorf("stripe: WebhookConfig.APIVersion %q: want a Stripe API version like %q", v.apiVersion, DefaultWebhookAPIVersion)
	}
	if v.now == nil {
		v.now = time.Now
	}
	return v, nil
}

// SignatureHeader returns "Stripe-Signature", the header Verify checks.
func (v *WebhookVerifier) SignatureHeader() string { return WebhookSignatureHeader }

// Verify checks that header (the Stripe-Signature header) signs payload,
// then translates the event payload carries. In order:
//
//  1. signature: one v1 signature of header must be the HMAC-SHA256 of
//     "t.payload" under the secret, t being the header's only timestamp
//     (checked by stripe-go's webhook package) — else ErrBadSignature;
//  2. timestamp, by the configured clock: not older than Tolerance
//     (ErrStaleTimestamp), not more than MaxFutureSkew ahead
//     (ErrFutureTimestamp);
//  3. payload: a Stripe event (ErrMalformedEvent) with a compatible
//     api_version (ErrAPIVersion).
//
// The event becomes a provider.Event with ID, Type and Created. For a
// payment_intent.* event, PaymentID is the PaymentIntent's id, PurchaseID
// its metadata purchase_id ("" when it has none: a payment made in the
// Dashboard or by another system on the account, which payrecon stores
// and has its audit judge, never refuses), Amount and Currency its amount and currency
// as the event's object carries them (0 and "" if absent), and Outcome, by
// the event type first and otherwise by the status table the API calls use
// (statusOutcomes):
//
//	payment_intent.succeeded                      Succeeded
//	payment_intent.canceled                       Declined
//	payment_intent.processing, .requires_action   Pending
//	payment_intent.payment_failed                 Declined in requires_payment_method,
//	                                              else by status
//	payment_intent.created                        Pending in requires_payment_method
//	                                              (not attempted yet), else by status
//	any other payment_intent.*                    by status
//	status not in the table (where needed)        ErrMalformedEvent
//
// For a refund event (refund.created, refund.updated, refund.failed, any
// refund.*), whose object must be a Refund, Refund is the refund as the
// object shows it (translated as the API calls translate it, refundOf),
// Outcome its outcome by the refund status table (refundOutcome: by the
// status, whatever the event type says; a status the table does not know
// is ErrMalformedEvent, never Failed), PaymentID its payment_intent,
// PurchaseID its metadata purchase_id, Amount and Currency its own. A
// refund naming no refund_id (made in the Dashboard) is translated all
// the same, with Refund.RefundID "": it is still money leaving a payment,
// which payrecon's judge and audit must see.
//
// A charge.refunded event, whose object must be a Charge, gets PaymentID
// the charge's payment_intent. When the charge carries its refunds
// (refunds.data, which Stripe includes only when expanded), the event is
// about the most recent of them (the latest created; of those created in
// the same second, the first listed, as Stripe lists newest first): Refund,
// Outcome, PurchaseID, Amount and Currency are then that refund's, as for
// a refund event. The event does not say which refund's change it
// announces, and the most recent is not always that one (an older refund
// settling after a newer one was made); but the charge shows each of its
// refunds as of the event, so what is reported is true of the refund it
// names, as a refund.updated about it would be. A charge carrying none
// verifies with Outcome "" and nothing else but PaymentID: payrecon learns
// of the refund from its own refund events.
//
// A dispute event (provider.DisputeEventTypes: charge.dispute.created,
// .updated, .closed, .funds_withdrawn, .funds_reinstated), whose object
// must be a Dispute, gets Dispute the dispute as the object shows it
// (translated as ListDisputes translates it, disputeOf), Outcome Pending
// (a dispute settles no payment), PaymentID its payment_intent ("" when
// it has none: not a payrecon payment), PurchaseID its metadata
// purchase_id when the payment_intent is expanded (Stripe's events carry
// its id only, so ""), Amount and Currency the dispute's. A dispute
// without id, with an amount not positive or without currency is
// ErrMalformedEvent.
//
// Any other event type (charge.*, customer.*, …) verifies with Outcome ""
// (payrecon ignores it), PurchaseID "", Amount 0, Currency "" and
// PaymentID the event object's id if it is a PaymentIntent's (pi_…), else
// "".
func (v *WebhookVerifier) Verify(payload []byte, header string) (provider.Event, error) {
	if err := v.verifySignature(payload, header); err != nil {
		return provider.Event{}, err
	}
	return translateEvent(payload, v.apiVersion)
}

// translateEvent translates the event payload carries, rendered for an
// endpoint (or a client) of API version apiVersion, as Verify describes:
// the one translation of a webhook and of a listed event alike.
func translateEvent(payload []byte, apiVersion string) (provider.Event, error) {
	var e stripego.Event
	if err := json.Unmarshal(payload, &e); err != nil {
		return provider.Event{}, fmt.Errorf("%w: payload is not a JSON event: %w", ErrMalformedEvent, err)
	}
	if e.Object != "event" {
		return provider.Event{}, fmt.Errorf("%w: object is %q, want \"event\"", ErrMalformedEvent, e.Object)
	}
	if !compatibleAPIVersion(apiVersion, e.APIVersion) {
		return provider.Event{}, fmt.Errorf("%w: event %s has api_version %q, expected %q%s: align the Stripe webhook endpoint's API version and WebhookConfig.APIVersion",
			ErrAPIVersion, e.ID, e.APIVersion, apiVersion, trainNote(apiVersion))
	}
	switch {
	case e.ID == "":
		return provider.Event{}, fmt.Errorf("%w: event has no id", ErrMalformedEvent)
	case e.Type == "":
		return provider.Event{}, fmt.Errorf("%w: event %s has no type", ErrMalformedEvent, e.ID)
	case e.Created <= 0:
		return provider.Event{}, fmt.Errorf("%w: event %s has no creation time", ErrMalformedEvent, e.ID)
	case e.Data == nil || e.Data.Object == nil:
		return provider.Event{}, fmt.Errorf("%w: event %s has no data.object", ErrMalformedEvent, e.ID)
	}
	account, err := provider.ParseAccount(e.Account)
	if err != nil {
		return provider.Event{}, fmt.Errorf("%w: event %s: %w", ErrMalformedEvent, e.ID, err)
	}
	ev := provider.Event{
		ID:      e.ID,
		Account: account,
		Type:    string(e.Type),
		Created: time.Unix(e.Created, 0).UTC(),
		Digest:  eventDigest(e),
	}
	where := fmt.Sprintf("event %s (%s)", ev.ID, ev.Type)
	switch {
	case strings.HasPrefix(ev.Type, refundEventPrefix):
		return refundEvent(ev, e, where)
	case ev.Type == chargeRefundedEvent:
		return chargeRefunded(ev, e, where)
	case slices.Contains(provider.DisputeEventTypes, ev.Type):
		return disputeEvent(ev, e, where)
	case !strings.HasPrefix(ev.Type, paymentIntentEventPrefix):
		if id, ok := e.Data.Object["id"].(string); ok && strings.HasPrefix(id, paymentIntentIDPrefix) {
			ev.PaymentID = id
		}
		return ev, nil
	}
	var pi stripego.PaymentIntent
	if err := json.Unmarshal(e.Data.Raw, &pi); err != nil {
		return provider.Event{}, fmt.Errorf("%w: %s: data.object is not a payment intent: %w", ErrMalformedEvent, where, err)
	}
	if pi.Object != "payment_intent" || pi.ID == "" {
		return provider.Event{}, fmt.Errorf("%w: %s: data.object is a %q with id %q, want a payment_intent", ErrMalformedEvent, where, pi.Object, pi.ID)
	}
	ev.PaymentID = pi.ID
	ev.PurchaseID = pi.Metadata[MetadataPurchaseID]
	ev.Amount = pi.Amount
	ev.Currency = string(pi.Currency)
	outcome, err := eventOutcome(ev.Type, pi.Status)
	if err != nil {
		return provider.Event{}, fmt.Errorf("%w: %s: payment intent %s: %w", ErrMalformedEvent, where, pi.ID, err)
	}
	ev.Outcome = outcome
	return ev, nil
}

// eventDigest hashes what an event says: its id, type, creation time and
// object. A redelivery may differ in envelope fields (pending_webhooks,
// request), never in these, so it digests the same; another message under
// the same id does not.
func eventDigest(e stripego.Event) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", e.ID, e.Type, e.Created)
	h.Write(e.Data.Raw)
	return hex.EncodeToString(h.Sum(nil))
}

// Prefixes of PaymentIntent event types and ids, of refund event types,
// and the type of the event of a refunded charge.
const (
	paymentIntentEventPrefix = "payment_intent."
	paymentIntentIDPrefix    = "pi_"
	refundEventPrefix        = "refund."
	chargeRefundedEvent      = "charge.refunded"
)

// refundEvent translates a refund.* event e into ev (see Verify).
func refundEvent(ev provider.Event, e stripego.Event, where string) (provider.Event, error) {
	var r stripego.Refund
	if err := json.Unmarshal(e.Data.Raw, &r); err != nil {
		return provider.Event{}, fmt.Errorf("%w: %s: data.object is not a refund: %w", ErrMalformedEvent, where, err)
	}
	if r.Object != "refund" || r.ID == "" {
		return provider.Event{}, fmt.Errorf("%w: %s: data.object is a %q with id %q, want a refund", ErrMalformedEvent, where, r.Object, r.ID)
	}
	return withRefund(ev, &r, "", where)
}

// chargeRefunded translates a charge.refunded event e into ev (see
// Verify).
func chargeRefunded(ev provider.Event, e stripego.Event, where string) (provider.Event, error) {
	var c stripego.Charge
	if err := json.Unmarshal(e.Data.Raw, &c); err != nil {
		return provider.Event{}, fmt.Errorf("%w: %s: data.object is not a charge: %w", ErrMalformedEvent, where, err)
	}
	if c.Object != "charge" || c.ID == "" {
		return provider.Event{}, fmt.Errorf("%w: %s: data.object is a %q with id %q, want a charge", ErrMalformedEvent, where, c.Object, c.ID)
	}
	if c.PaymentIntent != nil {
		ev.PaymentID = c.PaymentIntent.ID
	}
	if c.Refunds == nil {
		return ev, nil
	}
	var latest *stripego.Refund
	for _, r := range c.Refunds.Data {
		if r != nil && (latest == nil || r.Created > latest.Created) {
			latest = r
		}
	}
	if latest == nil {
		return ev, nil
	}
	return withRefund(ev, latest, ev.PaymentID, where)
}

// withRefund sets ev's fields from the refund r it is about: Refund,
// Outcome by the refund status table, PaymentID (r's payment_intent, else
// paymentID), PurchaseID, Amount and Currency. A status the table does
// not know is ErrMalformedEvent.
func withRefund(ev provider.Event, r *stripego.Refund, paymentID, where string) (provider.Event, error) {
	res := refundOf(r)
	if res.Outcome == provider.Unknown {
		return provider.Event{}, fmt.Errorf("%w: %s: refund %s: unrecognised status %q", ErrMalformedEvent, where, r.ID, r.Status)
	}
	if res.PaymentID == "" {
		res.PaymentID = paymentID
	}
	ev.Refund = &res
	ev.Outcome = res.Outcome
	ev.PaymentID = res.PaymentID
	ev.PurchaseID = res.PurchaseID
	ev.Amount = res.Amount
	ev.Currency = res.Currency
	return ev, nil
}

// eventOutcome returns what a payment_intent event of type typ, whose
// PaymentIntent is in status, reports: by the event type where it says
// more, else by statusOutcomes, the table of the API calls.
func eventOutcome(typ string, status stripego.PaymentIntentStatus) (provider.Outcome, error) {
	switch typ {
	case "payment_intent.succeeded":
		return provider.Succeeded, nil
	case "payment_intent.canceled":
		return provider.Declined, nil
	case "payment_intent.processing", "payment_intent.requires_action":
		return provider.Pending, nil
	case "payment_intent.payment_failed":
		// A failed confirmation sends the intent back to
		// requires_payment_method.
		if status == stripego.PaymentIntentStatusRequiresPaymentMethod {
			return provider.Declined, nil
		}
	case "payment_intent.created":
		// The snapshot may precede the confirmation: nothing was attempted
		// yet. A failed attempt has its own payment_failed event, which may
		// arrive before or after this one, and a decline from this event
		// could contradict a later success.
		if status == stripego.PaymentIntentStatusRequiresPaymentMethod {
			return provider.Pending, nil
		}
	}
	outcome, ok := statusOutcomes[status]
	if !ok {
		return "", fmt.Errorf("unrecognised status %q", status)
	}
	return outcome, nil
}

// verifySignature checks header's signature of payload with stripe-go,
// then its timestamp against v's clock. stripe-go checks the age of the
// timestamp before the signature, with time.Now and no bound on the
// future; so the signature is checked alone first, and the timestamp,
// once authentic, here.
func (v *WebhookVerifier) verifySignature(payload []byte, header string) error {
	if header == "" {
		return fmt.Errorf("%w: no %s header", ErrBadSignature, WebhookSignatureHeader)
	}
	if err := webhook.ValidatePayloadIgnoringTolerance(payload, header, v.secret); err != nil {
		return fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	signed, err := signatureTimestamp(header)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	now := v.now()
	if age := now.Sub(signed); age > v.tolerance {
		return fmt.Errorf("%w: signed at %s, %v ago, over the tolerance of %v",
			ErrStaleTimestamp, signed.UTC().Format(time.RFC3339), age.Round(time.Second), v.tolerance)
	}
	if ahead := signed.Sub(now); ahead > v.futureSkew {
		return fmt.Errorf("%w: signed at %s, %v ahead of the local clock, over the allowed skew of %v",
			ErrFutureTimestamp, signed.UTC().Format(time.RFC3339), ahead.Round(time.Second), v.futureSkew)
	}
	return nil
}

// signatureTimestamp returns the timestamp (t=) of a Stripe-Signature
// header that stripe-go has accepted, parsed as stripe-go parses it. It
// refuses a header without one, which stripe-go reads as the zero time,
// and one with several, of which stripe-go uses the last.
func signatureTimestamp(header string) (time.Time, error) {
	var (
		unix  int64
		found int
	)
	for pair := range strings.SplitSeq(header, ",") {
		key, value, ok := strings.Cut(pair, "=")
		if !ok || key != "t" {
			continue
		}
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("%s header has an invalid timestamp", WebhookSignatureHeader)
		}
		unix = n
		found++
	}
	switch found {
	case 0:
		return time.Time{}, fmt.Errorf("%s header has no timestamp (t=)", WebhookSignatureHeader)
	case 1:
		return time.Unix(unix, 0), nil
	}
	return time.Time{}, fmt.Errorf("%s header has %d timestamps, want one", WebhookSignatureHeader, found)
}

// compatibleAPIVersion reports whether an event rendered in version got
// may be read by an endpoint expecting want: the same release train
// ("basil" of "2025-08-27.basil"), or the same version when either has no
// train or is a preview. It is stripe-go's rule (isCompatibleAPIVersion),
// against the configured version rather than stripe-go's own.
func compatibleAPIVersion(want, got string) bool {
	if want == got {
		return true
	}
	_, wantTrain, wantOK := strings.Cut(want, ".")
	_, gotTrain, gotOK := strings.Cut(got, ".")
	if !wantOK || !gotOK || wantTrain == "preview" || gotTrain == "preview" {
		return false
	}
	return wantTrain == gotTrain
}

// trainNote names want's release train for an error message, if it has
// one that other versions may share.
func trainNote(want string) string {
	if _, train, ok := strings.Cut(want, "."); ok && train != "preview" {
		return fmt.Sprintf(" or another version of release train %s", train)
	}
	return ""
}
