// Package provider declares what payrecon needs from a payment provider,
// in provider-neutral terms.
//
// Adapters (provider/stripe, fakeprovider) translate their provider's
// answers and errors into these terms. The rule they follow: an error is
// retryable (ErrRetryLater) only when the provider cannot have acted on the
// request. Every other failure means the outcome is unknown, which is its
// own result and never a decline.
package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Outcome is a provider-neutral result of one call.
type Outcome string

const (
	// Succeeded: the provider confirms the charge succeeded.
	Succeeded Outcome = "succeeded"
	// Declined: the provider confirms a definite, final negative result.
	Declined Outcome = "declined"
	// Pending: the provider has the payment but it is not final yet
	// (processing, requires_action), or another request with the same key
	// is in flight.
	Pending Outcome = "pending"
	// Failed: the provider confirms a refund failed or was canceled: no
	// money went back. Refunds only; a charge's negative is Declined.
	Failed Outcome = "failed"
	// Unknown: the call failed in a way that leaves the outcome open
	// (timeout, lost reply, 5xx, connection reset).
	Unknown Outcome = "unknown"
	// NotFound: a search or lookup found nothing. Search indexes lag, so
	// this is never proof of a decline.
	NotFound Outcome = "not_found"
	// RetryLater: the provider refused the request before acting on it
	// (rate limited, connection refused). Safe to send again, same key.
	RetryLater Outcome = "retry_later"
	// IdempotencyMismatch: the provider holds the key with other
	// parameters. It is a bug: escalate, never retry with another key.
	IdempotencyMismatch Outcome = "idempotency_mismatch"
	// Rejected: the provider refused the request without acting on it,
	// and sending it unchanged will be refused again (invalid parameters,
	// a bad or under-privileged key). A human must fix the cause.
	Rejected Outcome = "rejected"
)

// Final reports whether o settles the purchase (or the refund).
func (o Outcome) Final() bool { return o == Succeeded || o == Declined || o == Failed }

// Errors an adapter wraps (with %w) so that callers can classify a failure.
// Any other error from a Provider method means the outcome is unknown.
var (
	// ErrRetryLater means the provider did not act on the request and it
	// may be sent again later with the same key.
	ErrRetryLater = errors.New("provider: request not acted on, retry later")
	// ErrIdempotencyMismatch means the key was reused with different
	// parameters. Never retry it with another key.
	ErrIdempotencyMismatch = errors.New("provider: idempotency key reused with different parameters")
	// ErrRejected means the provider refused the request without acting
	// on it, and will refuse it again unchanged.
	ErrRejected = errors.New("provider: request rejected, not acted on")
	// ErrRefundRefused means the provider refused a refund for a reason of
	// the payment (it took no money, or its refunds would exceed it): no
	// refund was made under the key, and none will be. It wraps
	// ErrRejected; RefundOutcomeOf reads it as Failed.
	ErrRefundRefused = fmt.Errorf("provider: refund refused for the payment, nothing refunded: %w", ErrRejected)
	// ErrRateLimited means the provider refused the request because its
	// caller went over a rate limit (Stripe's 429 rate_limit). It wraps
	// ErrRetryLater: the provider did not act, and the same request with
	// the same key may be sent again later, unchanged.
	ErrRateLimited = fmt.Errorf("provider: rate limited: %w", ErrRetryLater)
)

// Throttle is what a provider said when it refused a call for its rate
// limit: an error carrying it wraps ErrRateLimited.
type Throttle struct {
	// RetryAfter is the provider's Retry-After, 0 when it gave none.
	RetryAfter time.Duration
	// ShouldRetry is the provider's Stripe-Should-Retry header: "true",
	// "false", or "" when absent.
	ShouldRetry string
}

// ThrottleOf returns what the provider said when err is a refusal for its
// rate limit, and whether it is one.
func ThrottleOf(err error) (Throttle, bool) {
	if !errors.Is(err, ErrRateLimited) {
		return Throttle{}, false
	}
	var t interface{ Throttle() Throttle }
	if errors.As(err, &t) {
		return t.Throttle(), true
	}
	return Throttle{}, true
}

// OutcomeOf classifies the result of a Provider call: the result's own
// outcome when err is nil, otherwise the outcome the error implies.
func OutcomeOf(res Result, err error) Outcome {
	switch {
	case err == nil:
		return res.Outcome
	case errors.Is(err, ErrRetryLater):
		return RetryLater
	case errors.Is(err, ErrIdempotencyMismatch):
		return IdempotencyMismatch
	case errors.Is(err, ErrRejected):
		return Rejected
	default:
		return Unknown
	}
}

// RequestVersion says what an adapter sends for a CreateRequest beyond its
// fields: the request's shape at the provider. A stored request keeps its
// version for ever, so that every replay of it under its idempotency key is
// the request its first call sent, and the provider, which compares a
// replay's parameters with the first call's, answers it from its
// idempotency cache instead of refusing it as a mismatch.
//
// A change to what an adapter sends for new purchases is a new version:
// requests stored before it keep the version they were stored with, and
// adapters go on sending exactly what that version sent. An adapter
// refuses a version it does not know (one written by a newer payrecon),
// before sending anything, with an error wrapping ErrRejected: it cannot
// replay it faithfully.
type RequestVersion int

// The versions of a CreateRequest.
const (
	// RequestOnSession is the original request, stored before requests
	// had versions: a charge as if the customer were present to
	// authenticate it (Stripe: no off_session). Its JSON has no "version"
	// field, and its Hash is the one computed when it was stored.
	RequestOnSession RequestVersion = 0
	// RequestOffSession is a merchant-initiated charge: payrecon charges
	// with no customer present, so the provider is told that nobody can
	// authenticate (Stripe: off_session=true), and a card that demands
	// authentication is declined at once (Reason "authentication_required")
	// instead of waiting for the customer.
	RequestOffSession RequestVersion = 1

	// CurrentRequestVersion is the version of every request built now.
	CurrentRequestVersion = RequestOffSession
)

// Known reports whether v is a version this build can send.
func (v RequestVersion) Known() bool { return v >= RequestOnSession && v <= CurrentRequestVersion }

// CreateRequest is everything sent to create a charge. payrecon stores it,
// with its hash and key, before the first call, and replays exactly the
// stored request afterwards.
type CreateRequest struct {
	// IdempotencyKey is stable for the purchase: every attempt, replay and
	// retry sends the same key.
	IdempotencyKey string `json:"idempotency_key"`
	// PurchaseID is payrecon's id, sent as metadata so that search can find
	// the charge when its provider id is unknown.
	PurchaseID    string `json:"purchase_id"`
	Customer      string `json:"customer"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	Description   string `json:"description"`
	PaymentMethod string `json:"payment_method"`
	// Account is the account charged on behalf of (Accounts.ForAccount):
	// PlatformAccount for the platform's own. Stored with the request, so
	// that every replay is made on behalf of the same account; omitted
	// from the JSON when empty, so that a platform request encodes, and
	// hashes, as it did before accounts existed.
	Account string `json:"account,omitempty"`
	// Version is the request's version (see RequestVersion): what the
	// adapter sends for it beyond the fields above. The zero value is
	// RequestOnSession, the version of every request stored before this
	// field existed; it is left out of the JSON, so that such a request
	// encodes, and hashes, exactly as it did then. Fields added later must
	// be omitted when zero too, for the same reason.
	Version RequestVersion `json:"version,omitempty"`
}

// OffSession reports whether the charge is made with no customer present
// to authenticate it: RequestOffSession and every later version, since
// payrecon's worker never has a customer at hand.
func (r CreateRequest) OffSession() bool { return r.Version >= RequestOffSession }

// Hash returns a stable hex SHA-256 of the request's parameters, key
// included, for detecting a replay with different parameters. It is the
// SHA-256 of the request's JSON, so a request stored before versions
// existed (Version RequestOnSession, encoded without the field) keeps the
// hash it was stored with, and two requests that differ only in version
// hash differently.
func (r CreateRequest) Hash() string {
	b, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("provider: marshal CreateRequest: %v", err)) // plain struct: cannot fail
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Result is a provider-neutral answer.
type Result struct {
	Outcome Outcome `json:"outcome"`
	// PaymentID is the provider's id for the charge, when known.
	PaymentID string `json:"payment_id,omitempty"`
	// Status is the provider's own status word, kept for the audit trail.
	Status string `json:"status,omitempty"`
	// Reason explains a decline or a failure (a decline code, an error
	// message), for the audit trail.
	Reason string `json:"reason,omitempty"`
	// Amount and Currency are what the provider reports, when it does.
	Amount   int64  `json:"amount,omitempty"`
	Currency string `json:"currency,omitempty"`
	// PurchaseID is the purchase id the provider's record names in its
	// metadata, exactly as stored there; "" when it names none. payrecon's
	// judge compares it with the purchase the answer is applied to.
	PurchaseID string `json:"purchase_id,omitempty"`
	// Charges is, for a Search, how many of the payments found for the
	// purchase took or may still take money (succeeded or pending). More
	// than one is a double charge. 0 for other calls.
	Charges int `json:"charges,omitempty"`
}

// Payment is one payment as the provider lists it (Provider.List), for the
// audit from the provider's side.
type Payment struct {
	// ID is the provider's payment id.
	ID string `json:"id"`
	// PurchaseID is the purchase id in the payment's metadata, "" if none:
	// a payment made outside payrecon may carry none, or a wrong one.
	PurchaseID string `json:"purchase_id,omitempty"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	// Status is the provider's own status word; Outcome its neutral
	// meaning (Succeeded, Declined or Pending; Unknown for a status the
	// adapter does not know).
	Status  string    `json:"status"`
	Outcome Outcome   `json:"outcome"`
	Created time.Time `json:"created"`
}

// MoneyTaken reports whether the payment took the customer's money or may
// still take it: what the audit must match to a purchase. Only a definite
// decline took nothing; a status the adapter does not know (Unknown)
// counts as money that may be taken.
func (p Payment) MoneyTaken() bool { return p.Outcome != Declined }

// Window is a span of the provider's creation times: From inclusive,
// Until exclusive.
type Window struct {
	From, Until time.Time
}

// Provider is the small interface payrecon consumes. Implementations must
// be safe for concurrent use.
type Provider interface {
	// Create charges with req.IdempotencyKey. Sending the same key and
	// parameters again must not create a second charge while the provider
	// retains the key.
	Create(ctx context.Context, req CreateRequest) (Result, error)
	// Status looks up a charge by the provider's payment id. An unknown id
	// gives Outcome NotFound.
	Status(ctx context.Context, paymentID string) (Result, error)
	// Search finds the charge made for a purchase by its metadata. It may
	// lag behind writes: NotFound is not proof that no charge exists.
	Search(ctx context.Context, purchaseID string) (Result, error)
	// List returns every payment the provider created within w, oldest
	// first, reading every page, and passes gate before each request it
	// sends (see PageGate). Unlike Search it reads the provider's records
	// directly rather than a lagging index. A failure returns an error
	// and no payments: the caller lists the window again.
	List(ctx context.Context, w Window, gate PageGate) ([]Payment, error)

	// CreateRefund refunds req.Amount of payment req.PaymentID under
	// req.IdempotencyKey. Sending the same key and parameters again must
	// not create a second refund while the provider retains the key. The
	// result's Outcome is Succeeded, Failed or Pending; errors classify as
	// for Create (OutcomeOf).
	CreateRefund(ctx context.Context, req RefundRequest) (RefundResult, error)
	// GetRefund looks up a refund by the provider's refund id. An unknown
	// id gives Outcome NotFound, never Failed.
	GetRefund(ctx context.Context, refundID string) (RefundResult, error)
	// ListRefunds returns every refund of payment paymentID, oldest first,
	// reading every page and passing gate before each request; none for a
	// payment with no refunds. A failure returns an error and no refunds.
	ListRefunds(ctx context.Context, paymentID string, gate PageGate) ([]RefundResult, error)
	// ListRefundsCreated returns every refund the provider created within
	// w, oldest first, reading every page and passing gate before each
	// request, for the audit from the provider's side. A failure returns
	// an error and no refunds.
	ListRefundsCreated(ctx context.Context, w Window, gate PageGate) ([]RefundResult, error)

	// ListDisputes returns every dispute the provider opened within w,
	// oldest first, reading every page and passing gate before each
	// request, for the audit from the provider's side: each as it is now,
	// with the purchase id its payment's metadata names where the adapter
	// can read it (Dispute.PurchaseID). A failure returns an error and no
	// disputes.
	ListDisputes(ctx context.Context, w Window, gate PageGate) ([]Dispute, error)

	// ListEvents returns one page of the provider's event log: the events
	// q selects, newest first, each translated exactly as the adapter's
	// webhook verifier translates the same event delivered as a webhook
	// (same ID, Type, Outcome, Refund, Created and Digest), so that a
	// listed event and its webhook are one event to the inbox. It makes
	// one request to the provider, so that a caller can take one token
	// of its rate budget per page. A failure returns an error and no
	// page: the caller lists the page again.
	ListEvents(ctx context.Context, q EventQuery) (EventPage, error)
}

// EventQuery selects one page of a provider's event log
// (Provider.ListEvents).
type EventQuery struct {
	// Since selects the events created at or after it. Required: an
	// adapter refuses a zero Since (ErrRejected).
	Since time.Time
	// Types selects the events of these types (the provider's names,
	// Event.Type). Empty: every type of EventTypes, the payment, refund
	// and dispute events the inbox acts on.
	Types []string
	// After is the cursor: the ID of the last event of the previous page
	// (EventPage.Next), "" for the first page.
	After string
	// Limit is the most events of the page, 1 to MaxEventPage; 0 means
	// MaxEventPage.
	Limit int
}

// MaxEventPage is the most events one page of an event listing holds:
// Stripe's limit.
const MaxEventPage = 100

// EventTypes are the event types an event listing selects by default:
// the payment, refund and dispute events whose webhooks the inbox acts on
// (Stripe's names, which the fake provider speaks too). Stripe accepts at
// most 20 types in one listing.
var EventTypes = []string{
	"payment_intent.succeeded",
	"payment_intent.payment_failed",
	"payment_intent.canceled",
	"payment_intent.processing",
	"payment_intent.requires_action",
	"refund.created",
	"refund.updated",
	"refund.failed",
	"charge.refunded",
	EventDisputeCreated,
	EventDisputeUpdated,
	EventDisputeClosed,
	EventDisputeFundsWithdrawn,
	EventDisputeFundsReinstated,
}

// EventPage is one page of an event listing, newest first.
type EventPage struct {
	// Events are the page's events that the adapter translated, newest
	// first.
	Events []Event
	// Refused are the page's events the adapter could not translate, as
	// its webhook verifier would have refused them (a malformed object,
	// another API version): the inbox never sees them, by either path.
	Refused []RefusedEvent
	// HasMore reports whether older events remain beyond this page.
	HasMore bool
	// Next is the cursor of the next page (EventQuery.After): the ID of
	// the page's oldest event, refused ones included; "" for an empty
	// page.
	Next string
}

// RefusedEvent is an event of a listing that its adapter refused.
type RefusedEvent struct {
	ID   string
	Type string
	Err  error
}

// PageGate is what a listing passes before each request it sends for a
// page, the first included: the caller's rate budget takes one call's
// token there, so that a listing of N pages costs N tokens, as the
// provider counts N requests. Every listing of a Provider takes one, and
// calls it once per request, with the listing's context, just before
// sending it. An error stops the listing before that request: the listing
// returns an error wrapping it, and no items. A nil PageGate lets every
// page go at once.
type PageGate func(ctx context.Context) error

// Pass calls g, if any, before a page's request: nil from a nil PageGate.
func (g PageGate) Pass(ctx context.Context) error {
	if g == nil {
		return nil
	}
	return g(ctx)
}

// RefundRequest is everything sent to create a refund. payrecon stores
// it, with its hash and key, before the first call, and replays exactly
// the stored request afterwards.
type RefundRequest struct {
	// IdempotencyKey is stable for the refund: every attempt and replay
	// sends the same key.
	IdempotencyKey string `json:"idempotency_key"`
	// RefundID is payrecon's refund id, sent as metadata (refund_id) so
	// that a listing finds the refund when its provider id is unknown.
	RefundID string `json:"refund_id"`
	// PurchaseID is the purchase the refund belongs to, sent as metadata
	// (purchase_id).
	PurchaseID string `json:"purchase_id"`
	// PaymentID is the provider's payment refunded: the purchase's own, or
	// a duplicate charge's an operator named from an audit finding.
	PaymentID string `json:"payment_id"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	// Reason is the provider's reason word, when one applies
	// ("duplicate", "requested_by_customer", "fraudulent"); "" sends none.
	Reason string `json:"reason,omitempty"`
	// Account is the account the refunded payment belongs to, its
	// purchase's (CreateRequest.Account); omitted when empty, as there.
	Account string `json:"account,omitempty"`
}

// Hash returns a stable hex SHA-256 of the request's parameters, key
// included, for detecting a replay with different parameters.
func (r RefundRequest) Hash() string {
	b, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("provider: marshal RefundRequest: %v", err)) // plain struct: cannot fail
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// RefundResult is a provider-neutral answer about one refund.
type RefundResult struct {
	// Outcome is Succeeded, Failed or Pending for a refund the provider
	// has; NotFound for a lookup of an unknown id.
	Outcome Outcome `json:"outcome"`
	// ID is the provider's refund id, when known.
	ID string `json:"id,omitempty"`
	// PaymentID is the payment the provider's refund returns money from.
	PaymentID string `json:"payment_id,omitempty"`
	// RefundID and PurchaseID are payrecon's ids from the refund's
	// metadata, exactly as stored there; "" when it names none (a refund
	// made in the provider's dashboard).
	RefundID   string `json:"refund_id,omitempty"`
	PurchaseID string `json:"purchase_id,omitempty"`
	Amount     int64  `json:"amount,omitempty"`
	Currency   string `json:"currency,omitempty"`
	// Status is the provider's own status word, for the audit trail.
	Status string `json:"status,omitempty"`
	// Reason explains a failure (the provider's failure reason), for the
	// audit trail.
	Reason  string    `json:"reason,omitempty"`
	Created time.Time `json:"created,omitzero"`
}

// RefundOutcomeOf classifies the result of a refund call as OutcomeOf
// does for a charge, except that a refund the provider refused for a
// reason of the payment (ErrRefundRefused) failed: nothing was refunded
// under its key, and sending it again will not change that.
func RefundOutcomeOf(res RefundResult, err error) Outcome {
	switch {
	case err == nil:
		return res.Outcome
	case errors.Is(err, ErrRefundRefused):
		return Failed
	}
	return OutcomeOf(Result{}, err)
}

// Op names a provider operation, for the audit trail and metrics.
type Op string

// The operations of a Provider.
const (
	OpCreate Op = "create"
	OpStatus Op = "status"
	OpSearch Op = "search"
	OpList   Op = "list"

	OpRefundCreate Op = "refund_create"
	OpRefundGet    Op = "refund_get"
	OpRefundList   Op = "refund_list"

	// OpEventList lists a page of the provider's event log.
	OpEventList Op = "event_list"
	// OpDisputeList lists the disputes opened in a window.
	OpDisputeList Op = "dispute_list"
)

// Event is a provider's notification about a payment, verified and
// translated by its adapter. Providers deliver events at least once, late
// and out of order; the receiver applies them idempotently.
type Event struct {
	// ID is the provider's event id, stable across redeliveries.
	ID string
	// Account is the connected account the event happened in (Stripe's
	// top-level account, on events sent to a Connect endpoint), or
	// PlatformAccount for the platform's own. The receiver judges the
	// event against that account's books only.
	Account string
	// Type is the provider's event type, e.g. payment_intent.succeeded.
	Type string
	// Outcome is what the event reports about the payment: Succeeded,
	// Declined or Pending. It is empty for event types payrecon does not
	// act on.
	Outcome Outcome
	// PaymentID is the provider's id of the payment the event is about.
	PaymentID string
	// PurchaseID is payrecon's purchase id from the payment's metadata;
	// "" when it names none (a payment of another integration on the same
	// account, or made in the provider's dashboard).
	PurchaseID string
	// Refund is set for an event about a refund (refund.created,
	// refund.updated, refund.failed, and charge.refunded when it carries
	// the refund): the refund as the event's object shows it. Outcome is
	// then the refund's (Succeeded, Failed or Pending), PaymentID the
	// refunded payment's, Amount and Currency the refund's.
	Refund *RefundResult
	// Dispute is set for an event about a dispute (DisputeEventTypes):
	// the dispute as the event's object shows it. PaymentID is then the
	// disputed payment's, Amount and Currency the dispute's, and Outcome
	// Pending (a dispute settles no payment).
	Dispute *Dispute
	// Amount and Currency are the payment's, as the event's object
	// carries them; 0 and "" when it carries none.
	Amount   int64
	Currency string
	// Created is when the provider created the event.
	Created time.Time
	// Digest is a hex SHA-256 of what the event says (id, type, time,
	// object), unchanged by envelope fields a redelivery may alter. Two
	// messages under one id with different digests are a conflict. Empty
	// when the adapter has none; the raw payload's hash stands in.
	Digest string
	// Payload is the event as the provider's listing returned it (its
	// JSON), for the inbox's record; "" from a webhook verifier, whose
	// caller holds the body. A string, so that an Event stays comparable.
	Payload string
}
