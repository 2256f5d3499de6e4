package http

import (
	"errors"
	"net/http"

	"github.com/payrecon/payrecon/reconcile"
)

// kindAnswer is an HTTP status and the code of the JSON error body.
type kindAnswer struct {
	status int
	code   string
}

// kindStatus is the one table from an error's kind to its HTTP answer: the
// status and the code of the JSON error body ({"error": {"code",
// "message"}}). Every handler (the purchase API, the operator pages and
// their JSON, the webhooks) takes its status and code from here and writes
// its own message for people.
//
// A handler answers for itself only the kinds its callers can act on;
// any other kind is an internal error to it, 500 internal. The kinds
// missing from the table (lease_lost, not_migrated, unavailable) are
// internal to every handler.
var kindStatus = map[reconcile.Kind]kindAnswer{
	reconcile.KindInternal: {http.StatusInternalServerError, "internal"},
	reconcile.KindNotFound: {http.StatusNotFound, "not_found"},
	reconcile.KindInvalid:  {http.StatusBadRequest, "invalid_request"},
	// A conditional write lost: for an audit finding, it was closed
	// meanwhile (code already_closed, refined by the handler).
	reconcile.KindConflict: {http.StatusConflict, "conflict"},
	// The one duplicate a client can cause: a reference it already used
	// for another purchase.
	reconcile.KindDuplicate:           {http.StatusConflict, "reference_in_use"},
	reconcile.KindStale:               {http.StatusConflict, "stale"},
	reconcile.KindAlreadyFinal:        {http.StatusConflict, "already_final"},
	reconcile.KindBusy:                {http.StatusConflict, "busy"},
	reconcile.KindForbiddenTransition: {http.StatusConflict, "forbidden_transition"},
	reconcile.KindProviderDisagrees:   {http.StatusConflict, "provider_disagrees"},
	reconcile.KindKeyMismatch:         {http.StatusUnprocessableEntity, "idempotency_key_mismatch"},
	reconcile.KindKeyInFlight:         {http.StatusConflict, "idempotency_key_in_use"},
	reconcile.KindEventConflict:       {http.StatusConflict, "conflict"},
	// A refund the books refuse as they stand, not as it is written: the
	// request is well formed, and the same one may succeed later (after
	// a pending refund fails, after the purchase succeeds). 409, like the
	// other answers about the state of the resource; 400 and 422 keep
	// their meanings (a bad field, a reused key).
	reconcile.KindRefundExceeds: {http.StatusConflict, "refund_exceeds_payment"},
	reconcile.KindNotRefundable: {http.StatusConflict, "not_refundable"},
	reconcile.KindDisputed:      {http.StatusConflict, "payment_disputed"},
}

// statusOf returns the HTTP status of errors of kind k: 500 for a kind
// not in the table.
func statusOf(k reconcile.Kind) int { return answerOf(k).status }

// codeOf returns the error code of errors of kind k: internal for a kind
// not in the table.
func codeOf(k reconcile.Kind) string { return answerOf(k).code }

func answerOf(k reconcile.Kind) kindAnswer {
	if a, ok := kindStatus[k]; ok {
		return a
	}
	return kindStatus[reconcile.KindInternal]
}

// writeKindError writes a JSON error of kind k: its status and code from
// the table, with message for people.
func writeKindError(w http.ResponseWriter, k reconcile.Kind, message string) {
	writeError(w, statusOf(k), codeOf(k), message)
}

// errDetail says what exactly went wrong, for a person: the error's
// detail, else the message of the cause its *reconcile.Error wraps (a
// refused transition names both states), else its kind's own text.
func errDetail(err error) string {
	if d := reconcile.DetailOf(err); d != "" {
		return d
	}
	var e *reconcile.Error
	if errors.As(err, &e) && e.Err != nil {
		return e.Err.Error()
	}
	return (&reconcile.Error{Kind: reconcile.KindOf(err)}).Error()
}

// fieldErrors returns the *reconcile.FieldError leaves of err, through
// wrapped and joined errors, in order.
func fieldErrors(err error) []*reconcile.FieldError {
	switch x := err.(type) {
	case *reconcile.FieldError:
		return []*reconcile.FieldError{x}
	case interface{ Unwrap() []error }:
		var out []*reconcile.FieldError
		for _, in := range x.Unwrap() {
			out = append(out, fieldErrors(in)...)
		}
		return out
	case interface{ Unwrap() error }:
		return fieldErrors(x.Unwrap())
	}
	return nil
}
