package fakeprovider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/payrecon/payrecon/provider"
)

// /v1/refunds: the create, retrieve and list of refunds, in Stripe's wire
// format.

// refundReasons are the reason words Stripe takes in a refund create.
var refundReasons = []string{"duplicate", "fraudulent", "requested_by_customer"}

// createRefund serves POST /v1/refunds.
func (s *Server) createRefund(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Message: "Invalid request body: " + err.Error()})
		return
	}
	req, bad := refundRequest(r.PostForm)
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	req.IdempotencyKey = r.Header.Get("Idempotency-Key")
	if len(req.IdempotencyKey) > maxKeyLength {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error",
			Message: fmt.Sprintf("Idempotency keys can be at most %d characters long.", maxKeyLength)})
		return
	}

	// As the in-process caller's, for Config.OnAcceptRefund.
	req.Account = s.fake.account
	// The request holds every parameter the form may carry, so its own
	// hash stands for them all.
	a := s.fake.createRefundHashed(req, req.Hash())
	switch a.fault {
	case FailBefore:
		w.Header().Set("Stripe-Should-Retry", "true")
		writeError(w, http.StatusTooManyRequests, apiError{Type: "invalid_request_error", Code: "rate_limit",
			DocURL:  "https://stripe.com/docs/error-codes/rate-limit",
			Message: "Too many requests hit the API too quickly. We recommend an exponential backoff of your requests."})
		return
	case Timeout:
		// Nothing was done: hold the request until its client gives up.
		select {
		case <-r.Context().Done():
		case <-s.closing:
		}
		dropConnection(w)
		return
	}

	status, body := s.refundReply(req, a)
	if a.created {
		s.emit() // the new refund's events, before its reply (or its loss)
	}
	if a.fault == LostReply {
		dropConnection(w)
		return
	}
	if a.err == nil && a.res.ID != "" && !a.created {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, status, body)
}

// refundReply renders the answer to a refund create that reached the
// provider.
func (s *Server) refundReply(req provider.RefundRequest, a refundAttempt) (int, any) {
	invalid := func(code, param, msg string) (int, any) {
		return http.StatusBadRequest, errorBody{apiError{Type: "invalid_request_error", Code: code, Param: param, Message: msg}}
	}
	switch {
	case errors.Is(a.err, provider.ErrIdempotencyMismatch):
		return http.StatusBadRequest, errorBody{apiError{Type: "idempotency_error",
			Message: fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '%s' if you meant to execute a different request.", req.IdempotencyKey)}}
	case errors.Is(a.err, ErrNoSuchPayment):
		return invalid(ReasonNotFound, "payment_intent", fmt.Sprintf("No such payment_intent: '%s'", req.PaymentID))
	case errors.Is(a.err, ErrAlreadyRefunded):
		return invalid("charge_already_refunded", "", fmt.Sprintf("Charge %s has already been refunded.", latestCharge(req.PaymentID)))
	case errors.Is(a.err, ErrRefundTooLarge):
		return invalid("amount_too_large", "amount", a.err.Error())
	case errors.Is(a.err, ErrNotRefundable):
		return invalid("charge_not_refundable", "payment_intent",
			fmt.Sprintf("This PaymentIntent (%s) does not have a successful charge to refund.", req.PaymentID))
	case errors.Is(a.err, ErrChargeDisputed):
		return invalid("charge_disputed", "", fmt.Sprintf("Charge %s has been charged back; cannot issue a refund.", latestCharge(req.PaymentID)))
	case errors.Is(a.err, ErrInvalidRequest):
		if req.Amount <= 0 {
			return invalid("parameter_invalid_integer", "amount", "Invalid positive integer")
		}
		return invalid("", "", a.err.Error())
	case a.err != nil:
		return http.StatusInternalServerError, errorBody{apiError{Type: "api_error", Message: a.err.Error()}}
	case a.res.ID == "" && a.res.Reason == ReasonKeyInUse:
		return http.StatusConflict, errorBody{apiError{Type: "invalid_request_error", Code: ReasonKeyInUse,
			DocURL:  "https://stripe.com/docs/error-codes/idempotency-key-in-use",
			Message: fmt.Sprintf("There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): %s. Please try again later.", req.IdempotencyKey)}}
	}
	rf, ok := s.fake.refund(a.res.ID)
	if !ok { // cannot happen: the ledger only grows
		return http.StatusInternalServerError, errorBody{apiError{Type: "api_error", Message: "refund " + a.res.ID + " vanished"}}
	}
	// Rendered with the status the key's response saved, so that a replay
	// answers as the first create did.
	return http.StatusOK, renderRefund(rf, a.res.Status)
}

// refundRequest reads a refund create's form into a RefundRequest, or
// returns the error Stripe would answer. The fake takes the parameters
// provider/stripe sends: payment_intent and amount (both required; the
// fake does not refund a charge by its ch_ id, nor all that remains
// without an amount), reason, and metadata refund_id and purchase_id.
// The request has no currency: Stripe refunds in the payment's.
func refundRequest(form url.Values) (provider.RefundRequest, *apiError) {
	var req provider.RefundRequest
	for name, values := range form {
		v := values[len(values)-1]
		switch name {
		case "payment_intent":
			req.PaymentID = v
		case "amount":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return req, &apiError{Type: "invalid_request_error", Code: "parameter_invalid_integer", Param: name,
					Message: fmt.Sprintf("Invalid integer: %s", v)}
			}
			req.Amount = n
		case "reason":
			if !slices.Contains(refundReasons, v) {
				return req, &apiError{Type: "invalid_request_error", Code: "parameter_invalid_string", Param: name,
					Message: fmt.Sprintf("Invalid reason: must be one of %s", strings.Join(refundReasons, ", "))}
			}
			req.Reason = v
		case "metadata[refund_id]":
			req.RefundID = v
		case "metadata[purchase_id]":
			req.PurchaseID = v
		default:
			return req, &apiError{Type: "invalid_request_error", Code: "parameter_unknown", Param: name,
				Message: fmt.Sprintf("Received unknown parameter: %s (the fake provider knows payment_intent, amount, reason and metadata refund_id and purchase_id)", name)}
		}
	}
	for _, name := range []string{"payment_intent", "amount"} {
		if _, ok := form[name]; !ok {
			return req, &apiError{Type: "invalid_request_error", Code: "parameter_missing", Param: name,
				Message: fmt.Sprintf("Missing required param: %s. (The fake provider refunds a PaymentIntent by a given amount.)", name)}
		}
	}
	return req, nil
}

// retrieveRefund serves GET /v1/refunds/{id} through Fake.GetRefund, so
// that it settles, counts and reads stale as GetRefund does.
func (s *Server) retrieveRefund(w http.ResponseWriter, r *http.Request, id string) {
	if bad := onlyParams(r.URL.Query()); bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	res, err := s.fake.GetRefund(r.Context(), id)
	if err != nil { // the client is gone
		dropConnection(w)
		return
	}
	rf, ok := s.fake.refund(id)
	if res.Outcome == provider.NotFound || !ok {
		writeError(w, http.StatusNotFound, apiError{Type: "invalid_request_error", Code: ReasonNotFound, Param: "id",
			DocURL: "https://stripe.com/docs/error-codes/resource-missing", Message: fmt.Sprintf("No such refund: '%s'", id)})
		return
	}
	writeJSON(w, http.StatusOK, renderRefund(rf, res.Status))
}

// listRefunds serves GET /v1/refunds: the list of Server, over refunds,
// with the filter payment_intent (the refunds of one PaymentIntent; an
// unknown one is a 400 resource_missing).
func (s *Server) listRefunds(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	lq, bad := parseListQuery(q, "refund", s.fake.refundSeqOf, "payment_intent")
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	paymentID, byPayment := q.Get("payment_intent"), q.Has("payment_intent")
	found, err := s.fake.listRefunds(r.Context(), paymentID, byPayment, lq.keep)
	switch {
	case errors.Is(err, ErrNoSuchPayment):
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: ReasonNotFound, Param: "payment_intent",
			DocURL: "https://stripe.com/docs/error-codes/resource-missing", Message: fmt.Sprintf("No such payment_intent: '%s'", paymentID)})
		return
	case err != nil: // the client is gone
		dropConnection(w)
		return
	}
	page, hasMore := pageOf(found, func(e refundEntry) int { return e.seq }, lq)
	res := refundList{Object: "list", URL: "/v1/refunds", HasMore: hasMore, Data: []refundObject{}}
	for _, e := range page {
		res.Data = append(res.Data, renderRefund(e.Refund, e.Status))
	}
	writeJSON(w, http.StatusOK, res)
}

// listRefunds is ListRefunds and ListRefundsCreated for the HTTP front
// end: every refund (of paymentID when byPayment) a listing can see
// (Config.ListLag) whose created unix second keep accepts, settled as of
// now, newest first, as copies. It counts as a RefundList call.
func (f *Fake) listRefunds(ctx context.Context, paymentID string, byPayment bool, keep func(created int64) bool) ([]refundEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[provider.OpRefundList]++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if byPayment && f.byID[paymentID] == nil {
		return nil, ErrNoSuchPayment
	}
	now := f.cfg.Now()
	var out []refundEntry
	for _, e := range slices.Backward(f.refunds) {
		if byPayment && e.PaymentID != paymentID || !f.listable(e.CreatedAt, now) || !keep(e.CreatedAt.Unix()) {
			continue
		}
		f.settleRefund(e, now)
		out = append(out, *e)
	}
	return out, nil
}

// refundSeqOf returns the place in creation order of the refund id.
func (f *Fake) refundSeqOf(id string) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.refundByID[id]; e != nil {
		return e.seq, true
	}
	return 0, false
}
