package reconcile

import (
	"errors"
	"strings"
)

// Kind classifies an error by what its caller can do about it: retry,
// re-read, fix the input, ask a human. Adapters (the stores, the HTTP
// server) translate their own errors into kinds and kinds into their own
// answers (reconcile/http has the one table from kind to HTTP status).
type Kind string

// The kinds of error. The zero Kind is an internal error: something
// failed that no caller can fix.
const (
	KindInternal Kind = ""
	// KindNotFound: no row matched the id.
	KindNotFound Kind = "not_found"
	// KindConflict: a conditional write lost, because the row is no
	// longer in the state or at the version the writer read. Re-read and
	// decide again.
	KindConflict Kind = "conflict"
	// KindLeaseLost: the writer's lease expired or was taken over (its
	// fencing token is stale). It must not write anything.
	KindLeaseLost Kind = "lease_lost"
	// KindDuplicate: a row with the same unique key exists.
	KindDuplicate Kind = "duplicate"
	// KindForbiddenTransition: a move that is not in the transition table.
	KindForbiddenTransition Kind = "forbidden_transition"
	// KindInvalid: the input is invalid; a FieldError names the field.
	KindInvalid Kind = "invalid"
	// KindNotMigrated: the schema is missing or older than this binary.
	KindNotMigrated Kind = "not_migrated"
	// KindUnavailable: the store could not serve the call in time (SQLite
	// held by another writer past its busy timeout); retry later.
	KindUnavailable Kind = "unavailable"
	// KindAlreadyFinal: the purchase is final; an operator action does not
	// apply.
	KindAlreadyFinal Kind = "already_final"
	// KindStale: the purchase changed since the operator was shown it.
	KindStale Kind = "stale"
	// KindBusy: a worker holds the purchase's job right now.
	KindBusy Kind = "busy"
	// KindProviderDisagrees: the provider's live view contradicts an
	// operator's resolution.
	KindProviderDisagrees Kind = "provider_disagrees"
	// KindKeyMismatch: a client reused an idempotency key with another
	// request.
	KindKeyMismatch Kind = "key_mismatch"
	// KindKeyInFlight: the first request with an idempotency key has not
	// finished.
	KindKeyInFlight Kind = "key_in_flight"
	// KindEventConflict: a provider event id arrived again with another
	// payload.
	KindEventConflict Kind = "event_conflict"
	// KindRefundExceeds: the refunds of one payment, pending ones
	// included, would exceed the payment's amount.
	KindRefundExceeds Kind = "refund_exceeds"
	// KindNotRefundable: the purchase is not succeeded and the refund
	// names no audit finding's payment.
	KindNotRefundable Kind = "not_refundable"
	// KindDisputed: the payment has a dispute that forbids a refund: an
	// open chargeback (the card network holds the money), or a lost one
	// (it returned the money already).
	KindDisputed Kind = "disputed"
)

// kindText is what each kind says when nothing more is known; the
// sentinels' messages.
var kindText = map[Kind]string{
	KindInternal:            "internal error",
	KindNotFound:            "not found",
	KindConflict:            "conflict: state or version changed",
	KindLeaseLost:           "lease lost",
	KindDuplicate:           "duplicate",
	KindForbiddenTransition: "forbidden transition",
	KindInvalid:             "invalid input",
	KindNotMigrated:         "database schema is not migrated (run `payrecon migrate`)",
	KindUnavailable:         "the store is unavailable: retry later",
	KindAlreadyFinal:        "purchase is already final",
	KindStale:               "purchase changed since it was shown",
	KindBusy:                "a worker is checking this purchase right now",
	KindProviderDisagrees:   "the provider's live view contradicts the resolution",
	KindKeyMismatch:         "idempotency key reused with a different request",
	KindKeyInFlight:         "a request with this idempotency key is still in flight",
	KindEventConflict:       "event id reused with a different payload",
	KindRefundExceeds:       "the payment's refunds would exceed its amount",
	KindNotRefundable:       "nothing to refund: the purchase is not succeeded",
	KindDisputed:            "the payment is disputed: a refund waits until the dispute is decided",
}

// Error is an error of payrecon's protocol, in the spirit of upspin's
// errors.E: a Kind a caller acts on, the operation that failed, a detail
// for the person who reads it, and the cause. Callers read its parts with
// KindOf and DetailOf, never by parsing its message.
type Error struct {
	Kind Kind
	// Op is what was being done, e.g. "resolve pur_…". Optional.
	Op string
	// Detail says, in words for an operator, what exactly happened, e.g.
	// "shown version 3, now 4 in state uncertain". Optional.
	Detail string
	// Err is the underlying error, if any.
	Err error
}

// E returns an *Error of kind k with detail, wrapping err (which may be
// nil).
func E(k Kind, detail string, err error) *Error { return &Error{Kind: k, Detail: detail, Err: err} }

// Error renders op, the kind's text, the detail and the cause, joined by
// ": ".
func (e *Error) Error() string {
	var parts []string
	if e.Op != "" {
		parts = append(parts, e.Op)
	}
	parts = append(parts, kindText[e.Kind])
	if e.Detail != "" {
		parts = append(parts, e.Detail)
	}
	if e.Err != nil {
		parts = append(parts, e.Err.Error())
	}
	return strings.Join(parts, ": ")
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrNotFound) true for every *Error of kind
// not_found, wherever it was made: a sentinel matches any error of its
// kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Op == "" && t.Detail == "" && t.Err == nil && t.Kind == e.Kind
}

// KindOf returns the kind of the first *Error in err's chain, or
// KindInternal when there is none.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}

// DetailOf returns the detail of the first *Error in err's chain that has
// one, or "".
func DetailOf(err error) string {
	for err != nil {
		if e, ok := err.(*Error); ok && e.Detail != "" {
			return e.Detail
		}
		switch x := err.(type) {
		case interface{ Unwrap() error }:
			err = x.Unwrap()
		case interface{ Unwrap() []error }:
			for _, in := range x.Unwrap() {
				if d := DetailOf(in); d != "" {
					return d
				}
			}
			return ""
		default:
			return ""
		}
	}
	return ""
}

// The sentinels, one per kind: errors.Is(err, ErrX) reports whether err is
// of that kind. Adapters translate their driver's errors into these,
// wrapped with context.
var (
	ErrNotFound            = &Error{Kind: KindNotFound}
	ErrConflict            = &Error{Kind: KindConflict}
	ErrLeaseLost           = &Error{Kind: KindLeaseLost}
	ErrDuplicate           = &Error{Kind: KindDuplicate}
	ErrForbiddenTransition = &Error{Kind: KindForbiddenTransition}
	ErrInvalid             = &Error{Kind: KindInvalid}
	ErrNotMigrated         = &Error{Kind: KindNotMigrated}
	ErrUnavailable         = &Error{Kind: KindUnavailable}
	ErrAlreadyFinal        = &Error{Kind: KindAlreadyFinal}
	ErrStale               = &Error{Kind: KindStale}
	ErrBusy                = &Error{Kind: KindBusy}
	ErrProviderDisagrees   = &Error{Kind: KindProviderDisagrees}
	ErrKeyMismatch         = &Error{Kind: KindKeyMismatch}
	ErrKeyInFlight         = &Error{Kind: KindKeyInFlight}
	ErrEventConflict       = &Error{Kind: KindEventConflict}
	ErrRefundExceeds       = &Error{Kind: KindRefundExceeds}
	ErrNotRefundable       = &Error{Kind: KindNotRefundable}
	ErrDisputed            = &Error{Kind: KindDisputed}
	// ErrAuditWindow: an audit's window is empty or inverted.
	ErrAuditWindow = &Error{Kind: KindInvalid, Detail: "audit window is empty"}
)
