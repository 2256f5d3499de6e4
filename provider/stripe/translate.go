package stripe

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/payrecon/payrecon/provider"
)

// Reasons a Provider reports when Stripe gives no more specific code.
const (
	// ReasonKeyInUse is the Reason of the Pending answer to a create whose
	// key another request is still using (409 idempotency_key_in_use).
	ReasonKeyInUse = "idempotency_key_in_use"
	// ReasonNotFound is the Reason of a NotFound status lookup.
	ReasonNotFound = "resource_missing"
	// ReasonAuthenticationRequired is the Reason of the decline of an
	// off-session charge on a card that demands authentication (3-D
	// Secure): Stripe's decline code, and error code, authentication_required.
	ReasonAuthenticationRequired = string(stripego.DeclineCodeAuthenticationRequired)
)

// statusOutcomes maps a PaymentIntent status to an outcome. A status not
// listed (one Stripe may add) is an error, so its outcome is Unknown; in
// a listing, that payment's Outcome is Unknown.
var statusOutcomes = map[stripego.PaymentIntentStatus]provider.Outcome{
	stripego.PaymentIntentStatusSucceeded: provider.Succeeded,
	stripego.PaymentIntentStatusCanceled:  provider.Declined,
	// payrecon always creates with a payment method and confirm=true, so
	// requires_payment_method means that the attempt failed and Stripe
	// sent the intent back for another payment method, which payrecon
	// never supplies: a decline, with last_payment_error telling why.
	stripego.PaymentIntentStatusRequiresPaymentMethod: provider.Declined,
	// Not final, no money taken yet: the bank is settling (processing),
	// the customer must authenticate (requires_action: a request sent
	// on-session, stored before payrecon charged off-session; off-session,
	// Stripe declines such a card instead), or confirmation did not
	// happen (requires_confirmation; unexpected after confirm=true, and
	// not a decline either).
	stripego.PaymentIntentStatusProcessing:           provider.Pending,
	stripego.PaymentIntentStatusRequiresAction:       provider.Pending,
	stripego.PaymentIntentStatusRequiresConfirmation: provider.Pending,
	// Authorised but not captured: funds are held, not taken, and the
	// authorisation lapses into canceled if nobody captures it. payrecon
	// creates with automatic capture, so this only passes while Stripe
	// captures; it is not a success until then.
	stripego.PaymentIntentStatusRequiresCapture: provider.Pending,
}

// translate is the one table from Stripe's answers to provider's terms,
// for a call op described by where. With err nil it translates the
// PaymentIntent pi:
//
//	succeeded                                      Succeeded
//	canceled, requires_payment_method              Declined (Reason: decline code)
//	processing, requires_action,
//	requires_confirmation, requires_capture        Pending
//	any other status                               error → Unknown
//
// With err not nil it translates the error (pi is then ignored):
//
//	card_error (402)                               Declined, nil error (PaymentID, Reason: decline code, else code)
//	  authentication_required (off-session, a      Declined, Reason ReasonAuthenticationRequired:
//	  card that demands 3-D Secure)                  nobody can authenticate; the intent is
//	                                                 requires_payment_method, not pending
//	409 idempotency_key_in_use                     Pending, Reason ReasonKeyInUse, nil error
//	idempotency_error (400)                        error wrapping provider.ErrIdempotencyMismatch
//	429 rate_limit (and any 429 but lock_timeout)   error wrapping provider.ErrRateLimited (and so
//	                                                 ErrRetryLater), with its Retry-After and
//	                                                 Stripe-Should-Retry as a provider.Throttle
//	429 lock_timeout                               error wrapping provider.ErrRetryLater
//	404 resource_missing on OpStatus,              NotFound, Reason ReasonNotFound, nil error
//	  OpRefundGet
//	other 4xx but 409, 424 (400, 401, 403, 404…)   error wrapping ErrRejected → Rejected
//	5xx, other 409, 424, a body that is no
//	Stripe error, timeout, reset, EOF              error → Unknown
//	connection never made (dial failed)            error wrapping provider.ErrRetryLater
//
// Every Result that comes from a PaymentIntent, an error's included,
// carries its PaymentID, Status, Amount, Currency and PurchaseID (the
// metadata purchase_id exactly as stored, "" if none), for the judge and
// the audit trail. List translates each PaymentIntent it reads with the
// same status table (paymentOf), and its errors as above.
func translate(op provider.Op, where string, pi *stripego.PaymentIntent, err error) (provider.Result, error) {
	if err != nil {
		return translateError(op, where, err)
	}
	if pi == nil {
		return provider.Result{}, fmt.Errorf("stripe: %s: no payment intent in the answer", where)
	}
	res := resultOf(pi)
	outcome, ok := statusOutcomes[pi.Status]
	if !ok {
		return res, fmt.Errorf("stripe: %s: payment intent %s has unrecognised status %q", where, pi.ID, pi.Status)
	}
	res.Outcome = outcome
	if outcome == provider.Declined {
		res.Reason = declineReason(pi)
	}
	return res, nil
}

func translateError(op provider.Op, where string, err error) (provider.Result, error) {
	var se *stripego.Error
	if !errors.As(err, &se) {
		if notSent(err) {
			return provider.Result{}, fmt.Errorf("stripe: %s: not sent: %w: %w", where, provider.ErrRetryLater, err)
		}
		return provider.Result{}, fmt.Errorf("stripe: %s: outcome unknown: %w", where, redactSecrets(err))
	}
	var res provider.Result
	if pi := se.PaymentIntent; pi != nil {
		res = resultOf(pi)
	}
	ae := &apiError{
		where:     where,
		status:    se.HTTPStatusCode,
		typ:       string(se.Type),
		code:      string(se.Code),
		decline:   string(se.DeclineCode),
		msg:       se.Msg,
		requestID: se.RequestID,
	}
	status := se.HTTPStatusCode
	switch {
	case se.Type == stripego.ErrorTypeCard:
		res.Outcome = provider.Declined
		res.Reason = errorReason(se)
		return res, nil
	case se.Code == stripego.ErrorCodeIdempotencyKeyInUse:
		res.Outcome = provider.Pending
		res.Reason = ReasonKeyInUse
		return res, nil
	case se.Type == stripego.ErrorTypeIdempotency:
		ae.kind = provider.ErrIdempotencyMismatch
	case status == http.StatusTooManyRequests && se.Code == stripego.ErrorCodeLockTimeout:
		// Another request holds the object: not the rate limit.
		ae.kind = provider.ErrRetryLater
	case status == http.StatusTooManyRequests:
		ae.kind = provider.ErrRateLimited
		ae.throttle = throttleOf(se)
	case (op == provider.OpStatus || op == provider.OpRefundGet) && status == http.StatusNotFound && se.Code == stripego.ErrorCodeResourceMissing:
		return provider.Result{Outcome: provider.NotFound, Reason: ReasonNotFound}, nil
	case op == provider.OpRefundCreate && refundRefusals[string(se.Code)]:
		// The payment cannot be refunded by this much: no refund exists
		// under the key (a refund made under it would have been replayed
		// back), and none will: the refund failed.
		ae.kind = provider.ErrRefundRefused
	case status >= 400 && status < 500 && status != http.StatusConflict && status != http.StatusFailedDependency:
		// Refused before acting (Stripe keeps no idempotent result for a
		// request that failed validation or authentication), and an
		// unchanged request will be refused again.
		ae.kind = ErrRejected
	}
	res.Reason = errorReason(se)
	return res, ae
}

// refundRefusals are the codes of Stripe's refusals of a refund for a
// reason of the payment, not of the request: provider.ErrRefundRefused.
var refundRefusals = map[string]bool{
	"amount_too_large":        true,
	"charge_already_refunded": true,
	"charge_not_refundable":   true,
	"charge_disputed":         true,
}

// resultOf returns pi's id, status, amount, currency and metadata
// purchase_id (exactly as stored, "" if none), without outcome.
func resultOf(pi *stripego.PaymentIntent) provider.Result {
	return provider.Result{
		PaymentID:  pi.ID,
		Status:     string(pi.Status),
		Amount:     pi.Amount,
		Currency:   string(pi.Currency),
		PurchaseID: pi.Metadata[MetadataPurchaseID],
	}
}

// paymentOf translates a listed PaymentIntent: its id, metadata
// purchase_id (exactly as stored, "" if none), amount, currency, status,
// creation time, and Outcome by statusOutcomes. A status the table does
// not know gives Outcome Unknown: one payment the adapter cannot read
// must not hide the others from the audit.
func paymentOf(pi *stripego.PaymentIntent) provider.Payment {
	outcome, ok := statusOutcomes[pi.Status]
	if !ok {
		outcome = provider.Unknown
	}
	return provider.Payment{
		ID:         pi.ID,
		PurchaseID: pi.Metadata[MetadataPurchaseID],
		Amount:     pi.Amount,
		Currency:   string(pi.Currency),
		Status:     string(pi.Status),
		Outcome:    outcome,
		Created:    time.Unix(pi.Created, 0).UTC(),
	}
}

// declineReason returns why pi failed: its last payment error's decline
// code or error code, else its cancellation reason.
func declineReason(pi *stripego.PaymentIntent) string {
	if e := pi.LastPaymentError; e != nil {
		if r := errorReason(e); r != "" {
			return r
		}
	}
	return string(pi.CancellationReason)
}

// errorReason returns e's decline code, else its error code, else its type.
func errorReason(e *stripego.Error) string {
	switch {
	case e.DeclineCode != "":
		return string(e.DeclineCode)
	case e.Code != "":
		return string(e.Code)
	}
	return string(e.Type)
}

// notSent reports whether err means that no connection was made, so that
// Stripe cannot have received the request.
func notSent(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// apiError is a Stripe API error, translated: it keeps what the audit
// trail needs and none of stripe-go's types (its error text would embed
// the PaymentIntent, client_secret included). It unwraps to kind.
type apiError struct {
	where     string
	status    int
	typ       string
	code      string
	decline   string
	msg       string
	requestID string
	// kind is the sentinel the error wraps, or nil when the outcome is
	// unknown.
	kind error
	// throttle is what a 429 rate_limit's headers said.
	throttle provider.Throttle
}

// Throttle returns what the 429's Retry-After and Stripe-Should-Retry
// headers said (zero for any other error).
func (e *apiError) Throttle() provider.Throttle { return e.throttle }

// throttleOf reads Retry-After (delay-seconds; an HTTP date is not used by
// Stripe and is ignored) and Stripe-Should-Retry from se's response.
func throttleOf(se *stripego.Error) provider.Throttle {
	var t provider.Throttle
	if se.LastResponse == nil {
		return t
	}
	h := se.LastResponse.Header
	if v := h.Get("Retry-After"); v != "" {
		if secs, err := strconv.ParseFloat(v, 64); err == nil && secs > 0 && secs < 3600 {
			t.RetryAfter = time.Duration(secs * float64(time.Second))
		}
	}
	t.ShouldRetry = h.Get("Stripe-Should-Retry")
	return t
}

func (e *apiError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stripe: %s: HTTP %d %s", e.where, e.status, e.typ)
	if e.code != "" {
		fmt.Fprintf(&b, " %s", e.code)
	}
	if e.decline != "" {
		fmt.Fprintf(&b, " (%s)", e.decline)
	}
	if e.msg != "" {
		fmt.Fprintf(&b, ": %s", e.msg)
	}
	if e.requestID != "" {
		fmt.Fprintf(&b, " [%s]", e.requestID)
	}
	if e.kind != nil {
		fmt.Fprintf(&b, ": %v", e.kind)
	} else {
		b.WriteString(": outcome unknown")
	}
	return b.String()
}

func (e *apiError) Unwrap() error { return e.kind }

// clientSecret matches a PaymentIntent's client secret, which lets a
// browser confirm the payment and belongs in no log or audit trail.
var clientSecret = regexp.MustCompile(`_secret_[A-Za-z0-9]+`)

// redactSecrets returns err, or, when its text holds a client secret (as
// stripe-go's error for an unparsable body quotes the body), an error with
// the secret masked that still unwraps to err.
func redactSecrets(err error) error {
	msg := err.Error()
	if !clientSecret.MatchString(msg) {
		return err
	}
	return &redactedError{msg: clientSecret.ReplaceAllString(msg, "_secret_REDACTED"), err: err}
}

// redactedError is err with the text msg.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
