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
	"time"

	"github.com/payrecon/payrecon/provider"
)

// /v1/disputes: the list and retrieve of disputes, in Stripe's wire
// format; and the simulator's endpoints that open and move them.

// OpDisputeGet is the fake's operation of GET /v1/disputes/{id}, which
// provider.Provider has no method for: counted in Calls (and the
// Ledger's), rate limited as a retrieve.
const OpDisputeGet provider.Op = "dispute_get"

// OpenDispute is Fake.OpenDispute on the server's Fake, announced at once
// when webhooks is true (its events delivered before it returns with
// SyncDelivery; nothing to send without a webhook URL), and never when it
// is false. POST /_fake/disputes serves it.
func (s *Server) OpenDispute(paymentID string, o DisputeOptions, webhooks bool) (provider.Dispute, error) {
	d, err := s.fake.openDispute(paymentID, o, !webhooks)
	if err != nil {
		return provider.Dispute{}, err
	}
	if webhooks {
		s.emit()
	}
	return d, nil
}

// MoveDispute is Fake.MoveDispute on the server's Fake, announced at once
// when webhooks is true, and never when it is false. POST
// /_fake/disputes/{id} serves it.
func (s *Server) MoveDispute(disputeID, status string, webhooks bool) (provider.Dispute, error) {
	d, err := s.fake.moveDispute(disputeID, status, !webhooks)
	if err != nil {
		return provider.Dispute{}, err
	}
	if webhooks {
		s.emit()
	}
	return d, nil
}

// listDisputes serves GET /v1/disputes: the list of Server, over
// disputes (url "/v1/disputes", each request one OpDisputeList call),
// with the filters payment_intent and charge (the disputes of one; an
// unknown one is a 400 resource_missing) and expand[]=data.payment_intent,
// which renders each dispute's PaymentIntent, metadata included, instead
// of its id.
func (s *Server) listDisputes(w http.ResponseWriter, r *http.Request) {
	q, expand, bad := expandParams(r.URL.Query(), "data.payment_intent")
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	lq, bad := parseListQuery(q, "dispute", s.fake.disputeSeqOf, "payment_intent", "charge")
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	flt := disputeFilter{paymentID: q.Get("payment_intent"), byPayment: q.Has("payment_intent"), chargeID: q.Get("charge"), byCharge: q.Has("charge")}
	found, err := s.fake.listDisputeObjects(r.Context(), flt, lq.keep, len(expand) > 0)
	var missing *missingError
	switch {
	case errors.As(err, &missing):
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: ReasonNotFound, Param: missing.param,
			DocURL: "https://stripe.com/docs/error-codes/resource-missing", Message: fmt.Sprintf("No such %s: '%s'", missing.param, missing.id)})
		return
	case err != nil: // the client is gone
		dropConnection(w)
		return
	}
	page, hasMore := pageOf(found, func(l listedDispute) int { return l.seq }, lq)
	res := disputeList{Object: "list", URL: "/v1/disputes", HasMore: hasMore, Data: []disputeObject{}}
	for _, l := range page {
		res.Data = append(res.Data, l.obj)
	}
	writeJSON(w, http.StatusOK, res)
}

// retrieveDispute serves GET /v1/disputes/{id}, with
// expand[]=payment_intent; an unknown id is a 404 resource_missing. Each
// request is one OpDisputeGet call.
func (s *Server) retrieveDispute(w http.ResponseWriter, r *http.Request, id string) {
	q, expand, bad := expandParams(r.URL.Query(), "payment_intent")
	if bad == nil {
		bad = onlyParams(q)
	}
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	obj, ok, err := s.fake.getDispute(r.Context(), id, len(expand) > 0)
	switch {
	case err != nil: // the client is gone
		dropConnection(w)
	case !ok:
		writeError(w, http.StatusNotFound, apiError{Type: "invalid_request_error", Code: ReasonNotFound, Param: "dispute",
			DocURL: "https://stripe.com/docs/error-codes/resource-missing", Message: fmt.Sprintf("No such dispute: '%s'", id)})
	default:
		writeJSON(w, http.StatusOK, obj)
	}
}

// expandParams takes the expand parameters (expand[], expand[N]) out of
// q and returns the rest and the fields named, or Stripe's error for a
// field not in allowed.
func expandParams(q url.Values, allowed ...string) (url.Values, []string, *apiError) {
	rest := url.Values{}
	var fields []string
	for name, vs := range q {
		index, isExpand := strings.CutPrefix(name, "expand[")
		index, closed := strings.CutSuffix(index, "]")
		if !isExpand || !closed || index != "" && !isDigits(index) {
			rest[name] = vs
			continue
		}
		for _, v := range vs {
			if !slices.Contains(allowed, v) {
				return nil, nil, &apiError{Type: "invalid_request_error", Param: "expand",
					Message: fmt.Sprintf("This property cannot be expanded (%s). (The fake provider expands %s only.)", v, strings.Join(allowed, ", "))}
			}
			fields = append(fields, v)
		}
	}
	return rest, fields, nil
}

// disputeFilter selects the disputes of a listing: of one payment, of one
// charge, or all.
type disputeFilter struct {
	paymentID, chargeID string
	byPayment, byCharge bool
}

// missingError is a filter naming an object the ledger does not hold.
type missingError struct{ param, id string }

func (e *missingError) Error() string {
	return fmt.Sprintf("fakeprovider: no such %s %q", e.param, e.id)
}

// listedDispute is a dispute as the HTTP list finds it, rendered, with its
// place in creation order, the cursor of stable pages.
type listedDispute struct {
	obj disputeObject
	seq int
}

// listDisputeObjects is ListDisputes for the HTTP front end: every
// dispute flt selects that a listing can see (Config.ListLag) whose
// created unix second keep accepts, newest first, rendered with its
// PaymentIntent when expand. It counts as an OpDisputeList call.
func (f *Fake) listDisputeObjects(ctx context.Context, flt disputeFilter, keep func(created int64) bool, expand bool) ([]listedDispute, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[provider.OpDisputeList]++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch {
	case flt.byPayment && f.byID[flt.paymentID] == nil:
		return nil, &missingError{"payment_intent", flt.paymentID}
	case flt.byCharge && f.byID["pi_"+strings.TrimPrefix(flt.chargeID, "ch_")] == nil:
		return nil, &missingError{"charge", flt.chargeID}
	}
	now := f.cfg.Now()
	f.settleDue(now) // a test card's payment that settles opens its dispute
	var out []listedDispute
	for _, e := range slices.Backward(f.disputes) {
		if flt.byPayment && e.paymentID != flt.paymentID || flt.byCharge && latestCharge(e.paymentID) != flt.chargeID ||
			!f.listable(e.created, now) || !keep(e.created.Unix()) {
			continue
		}
		out = append(out, listedDispute{obj: f.renderDisputeNow(e, expand, now), seq: e.seq})
	}
	return out, nil
}

// getDispute is GET /v1/disputes/{id}: the dispute id rendered as it is
// now (with its PaymentIntent when expand), and whether it exists. It
// counts as an OpDisputeGet call.
func (f *Fake) getDispute(ctx context.Context, id string, expand bool) (disputeObject, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[OpDisputeGet]++
	if err := ctx.Err(); err != nil {
		return disputeObject{}, false, err
	}
	e := f.disputeByID[id]
	if e == nil {
		return disputeObject{}, false, nil
	}
	return f.renderDisputeNow(e, expand, f.cfg.Now()), true, nil
}

// disputeObject renders the dispute id as it is now, its PaymentIntent by
// id; false if there is none.
func (f *Fake) disputeObject(id string) (disputeObject, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.disputeByID[id]
	if e == nil {
		return disputeObject{}, false
	}
	return renderDispute(e, nil), true
}

// renderDisputeNow renders e, with its PaymentIntent settled as of now
// when expand. Call with f.mu held.
func (f *Fake) renderDisputeNow(e *disputeEntry, expand bool, now time.Time) disputeObject {
	if !expand {
		return renderDispute(e, nil)
	}
	p := f.byID[e.paymentID]
	f.settle(p, now)
	pi := renderPI(p.Charge, p.Status)
	return renderDispute(e, &pi)
}

// disputeSeqOf returns the place in creation order of the dispute id.
func (f *Fake) disputeSeqOf(id string) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.disputeByID[id]; e != nil {
		return e.seq, true
	}
	return 0, false
}

// disputePath reports whether path is /_fake/disputes/{id}, and its id.
func disputePath(path string) (string, bool) {
	id, ok := strings.CutPrefix(path, controlPrefix+"disputes/")
	return id, ok && id != "" && !strings.Contains(id, "/")
}

// controlDispute serves POST /_fake/disputes: payment (or payment_intent),
// amount, reason, inquiry, webhooks.
func (s *Server) controlDispute(w http.ResponseWriter, r *http.Request) {
	p, bad := controlParams(r, "payment", "payment_intent", "amount", "reason", "inquiry", "webhooks")
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	invalid := func(code, param, msg string) {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: code, Param: param, Message: msg})
	}
	paymentID := p["payment"]
	switch other := p["payment_intent"]; {
	case paymentID == "" && other == "":
		invalid("parameter_missing", "payment", "Missing required param: payment.")
		return
	case paymentID == "":
		paymentID = other
	case other != "" && other != paymentID:
		invalid("parameter_invalid_string", "payment_intent", "payment and payment_intent name different payments.")
		return
	}
	o := DisputeOptions{Reason: p["reason"]}
	if v, ok := p["amount"]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			invalid("parameter_invalid_integer", "amount", fmt.Sprintf("Invalid integer: %s", v))
			return
		}
		o.Amount = n
	}
	if v, ok := p["inquiry"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			invalid("parameter_invalid_boolean", "inquiry", fmt.Sprintf("Invalid boolean: %s", v))
			return
		}
		o.Inquiry = b
	}
	webhooks, bad := s.webhooksParam(p)
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	d, err := s.OpenDispute(paymentID, o, webhooks)
	switch {
	case errors.Is(err, ErrNoSuchPayment):
		invalid(ReasonNotFound, "payment", fmt.Sprintf("No such payment_intent: '%s'", paymentID))
		return
	case errors.Is(err, ErrNotDisputable):
		invalid("payment_intent_unexpected_state", "payment", err.Error())
		return
	case errors.Is(err, errDisputeReason):
		invalid("parameter_invalid_string", "reason", err.Error())
		return
	case err != nil:
		invalid("parameter_invalid_integer", "amount", err.Error())
		return
	}
	obj, _ := s.fake.disputeObject(d.ID)
	writeJSON(w, http.StatusOK, obj)
}

// controlMoveDispute serves POST /_fake/disputes/{id}: status, webhooks.
// A move MoveDispute refuses is a 400 naming status.
func (s *Server) controlMoveDispute(w http.ResponseWriter, r *http.Request, id string) {
	s.controlSetStatus(w, r, ErrNoSuchDispute, "dispute", "No such dispute: '"+id+"'", func(status string, webhooks bool) (any, error) {
		d, err := s.MoveDispute(id, status, webhooks)
		if err != nil {
			return nil, err
		}
		obj, _ := s.fake.disputeObject(d.ID)
		return obj, nil
	})
}
