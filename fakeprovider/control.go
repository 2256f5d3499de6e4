package fakeprovider

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// ChargeOutside is Fake.ChargeOutside on the server's Fake, announced at
// once when webhooks is true (its events delivered before it returns
// with SyncDelivery; nothing to send without a webhook URL), and never
// when it is false: a charge the endpoint does not hear of. It panics if
// c is invalid, as Fake.ChargeOutside does. POST /_fake/charges serves it.
func (s *Server) ChargeOutside(c OutsideCharge, webhooks bool) Charge {
	ch, err := s.chargeOutside(c, webhooks)
	if err != nil {
		panic(err)
	}
	return ch
}

func (s *Server) chargeOutside(c OutsideCharge, webhooks bool) (Charge, error) {
	ch, err := s.fake.chargeOutside(c, !webhooks)
	if err != nil {
		return Charge{}, err
	}
	if webhooks {
		s.emit()
	}
	return ch, nil
}

// SetStatus is Fake.SetStatus on the server's Fake, announced at once when
// webhooks is true (its events delivered before it returns with
// SyncDelivery; nothing to send without a webhook URL), and never when it
// is false. POST /_fake/payment_intents/{id}/status serves it.
func (s *Server) SetStatus(paymentID, status string, webhooks bool) (Charge, error) {
	ch, err := s.fake.setStatus(paymentID, status, !webhooks)
	if err != nil {
		return Charge{}, err
	}
	if webhooks {
		s.emit()
	}
	return ch, nil
}

// RefundOutside is Fake.RefundOutside on the server's Fake, announced at
// once when webhooks is true (its events delivered before it returns with
// SyncDelivery; nothing to send without a webhook URL), and never when it
// is false. POST /_fake/refunds serves it.
func (s *Server) RefundOutside(o OutsideRefund, webhooks bool) (Refund, error) {
	rf, err := s.fake.refundOutside(o, !webhooks)
	if err != nil {
		return Refund{}, err
	}
	if webhooks {
		s.emit()
	}
	return rf, nil
}

// SetRefundStatus is Fake.SetRefundStatus on the server's Fake, announced
// at once when webhooks is true, and never when it is false. POST
// /_fake/refunds/{id}/status serves it.
func (s *Server) SetRefundStatus(refundID, status string, webhooks bool) (Refund, error) {
	rf, err := s.fake.setRefundStatus(refundID, status, !webhooks)
	if err != nil {
		return Refund{}, err
	}
	if webhooks {
		s.emit()
	}
	return rf, nil
}

// controlPrefix starts the paths of the simulator's own endpoints.
const controlPrefix = "/_fake/"

// maxControlBody bounds the body of a control request.
const maxControlBody = 1 << 20

// control serves the simulator's endpoints (see Server).
func (s *Server) control(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	id, isStatus := statusPath(path, "payment_intents")
	refundID, isRefundStatus := statusPath(path, "refunds")
	disputeID, isDispute := disputePath(path)
	switch {
	case path == controlPrefix+"ledger" && r.Method == http.MethodGet:
		if bad := onlyParams(r.URL.Query()); bad != nil {
			writeError(w, http.StatusBadRequest, *bad)
			return
		}
		writeJSON(w, http.StatusOK, s.fake.Ledger())
	case path == controlPrefix+"webhooks" && r.Method == http.MethodGet:
		if bad := onlyParams(r.URL.Query()); bad != nil {
			writeError(w, http.StatusBadRequest, *bad)
			return
		}
		writeJSON(w, http.StatusOK, s.webhookView())
	case path == controlPrefix+"outage" && r.Method == http.MethodPost:
		s.controlOutage(w, r)
	case path == controlPrefix+"charges" && r.Method == http.MethodPost:
		s.controlCharge(w, r)
	case isStatus && r.Method == http.MethodPost:
		s.controlStatus(w, r, id)
	case path == controlPrefix+"refunds" && r.Method == http.MethodPost:
		s.controlRefund(w, r)
	case isRefundStatus && r.Method == http.MethodPost:
		s.controlRefundStatus(w, r, refundID)
	case path == controlPrefix+"disputes" && r.Method == http.MethodPost:
		s.controlDispute(w, r)
	case isDispute && r.Method == http.MethodPost:
		s.controlMoveDispute(w, r, disputeID)
	default:
		writeError(w, http.StatusNotFound, apiError{Type: "invalid_request_error",
			Message: fmt.Sprintf("Unrecognized request URL (%s: %s). The fake provider's own endpoints are GET /_fake/ledger, POST /_fake/charges, POST /_fake/payment_intents/{id}/status, POST /_fake/refunds, POST /_fake/refunds/{id}/status, POST /_fake/disputes, POST /_fake/disputes/{id}, POST /_fake/outage and GET /_fake/webhooks.", r.Method, path)})
	}
}

// statusPath reports whether path is /_fake/<objects>/{id}/status, and
// its id.
func statusPath(path, objects string) (string, bool) {
	id, ok := strings.CutPrefix(path, controlPrefix+objects+"/")
	if !ok {
		return "", false
	}
	id, ok = strings.CutSuffix(id, "/status")
	return id, ok && id != "" && !strings.Contains(id, "/")
}

// controlRefund serves POST /_fake/refunds.
func (s *Server) controlRefund(w http.ResponseWriter, r *http.Request) {
	p, bad := controlParams(r, "payment_intent", "amount", "refund_id", "purchase_id", "reason", "status", "webhooks")
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	o := OutsideRefund{PaymentID: p["payment_intent"], RefundID: p["refund_id"], PurchaseID: p["purchase_id"], Reason: p["reason"], Status: p["status"]}
	if o.PaymentID == "" {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_missing", Param: "payment_intent",
			Message: "Missing required param: payment_intent."})
		return
	}
	if v, ok := p["amount"]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_invalid_integer", Param: "amount",
				Message: fmt.Sprintf("Invalid integer: %s", v)})
			return
		}
		o.Amount = n
	}
	webhooks, bad := s.webhooksParam(p)
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	rf, err := s.RefundOutside(o, webhooks)
	if err != nil {
		e := apiError{Type: "invalid_request_error", Message: err.Error()}
		switch {
		case errors.Is(err, ErrUnknownStatus):
			e.Code, e.Param = "parameter_invalid_string", "status"
		case errors.Is(err, ErrNoSuchPayment):
			e.Code, e.Param = ReasonNotFound, "payment_intent"
		case errors.Is(err, ErrAlreadyRefunded):
			e.Code = "charge_already_refunded"
		case errors.Is(err, ErrRefundTooLarge):
			e.Code, e.Param = "amount_too_large", "amount"
		case errors.Is(err, ErrNotRefundable):
			e.Code, e.Param = "charge_not_refundable", "payment_intent"
		case errors.Is(err, ErrChargeDisputed):
			e.Code = "charge_disputed"
		default:
			e.Code, e.Param = "parameter_invalid_integer", "amount"
		}
		writeError(w, http.StatusBadRequest, e)
		return
	}
	writeJSON(w, http.StatusOK, renderRefund(rf, rf.Status))
}

// controlRefundStatus serves POST /_fake/refunds/{id}/status.
func (s *Server) controlRefundStatus(w http.ResponseWriter, r *http.Request, id string) {
	s.controlSetStatus(w, r, ErrNoSuchRefund, "id", "No such refund: '"+id+"'", func(status string, webhooks bool) (any, error) {
		rf, err := s.SetRefundStatus(id, status, webhooks)
		return renderRefund(rf, rf.Status), err
	})
}

// controlCharge serves POST /_fake/charges.
func (s *Server) controlCharge(w http.ResponseWriter, r *http.Request) {
	p, bad := controlParams(r, "purchase_id", "customer", "amount", "currency", "status", "webhooks")
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	c := OutsideCharge{PurchaseID: p["purchase_id"], Customer: p["customer"], Currency: strings.ToLower(p["currency"]), Status: p["status"]}
	v, ok := p["amount"]
	if !ok {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_missing", Param: "amount",
			Message: "Missing required param: amount."})
		return
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_invalid_integer", Param: "amount",
			Message: fmt.Sprintf("Invalid integer: %s", v)})
		return
	}
	c.Amount = n
	webhooks, bad := s.webhooksParam(p)
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	if _, err := c.validate(); err != nil {
		e := apiError{Type: "invalid_request_error", Message: err.Error()}
		switch {
		case errors.Is(err, ErrUnknownStatus):
			e.Code, e.Param = "parameter_invalid_string", "status"
		case c.Amount <= 0:
			e.Code, e.Param = "amount_too_small", "amount"
		default:
			e.Code, e.Param = "parameter_missing", "currency"
		}
		writeError(w, http.StatusBadRequest, e)
		return
	}
	ch, err := s.chargeOutside(c, webhooks)
	if err != nil { // validated above: cannot happen
		writeError(w, http.StatusInternalServerError, apiError{Type: "api_error", Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, renderPI(ch, ch.Status))
}

// controlStatus serves POST /_fake/payment_intents/{id}/status.
func (s *Server) controlStatus(w http.ResponseWriter, r *http.Request, id string) {
	s.controlSetStatus(w, r, ErrNoSuchPayment, "intent", "No such payment_intent: '"+id+"'", func(status string, webhooks bool) (any, error) {
		ch, err := s.SetStatus(id, status, webhooks)
		return renderPI(ch, ch.Status), err
	})
}

// controlSetStatus serves a control call that sets an object's status
// with set, which returns the object rendered; an error that is noSuch
// answers 404 naming param with missing as its message, one that is
// ErrUnknownStatus or another ErrInvalidRequest (a move refused) a 400
// naming status.
func (s *Server) controlSetStatus(w http.ResponseWriter, r *http.Request, noSuch error, param, missing string, set func(status string, webhooks bool) (any, error)) {
	p, bad := controlParams(r, "status", "webhooks")
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	status, ok := p["status"]
	if !ok {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_missing", Param: "status",
			Message: "Missing required param: status."})
		return
	}
	webhooks, bad := s.webhooksParam(p)
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	rendered, err := set(status, webhooks)
	switch {
	case errors.Is(err, noSuch):
		writeError(w, http.StatusNotFound, apiError{Type: "invalid_request_error", Code: ReasonNotFound, Param: param,
			DocURL: "https://stripe.com/docs/error-codes/resource-missing", Message: missing})
	case errors.Is(err, ErrUnknownStatus):
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_invalid_string", Param: "status",
			Message: err.Error()})
	case errors.Is(err, ErrInvalidRequest):
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Param: "status", Message: err.Error()})
	case err != nil:
		writeError(w, http.StatusInternalServerError, apiError{Type: "api_error", Message: err.Error()})
	default:
		writeJSON(w, http.StatusOK, rendered)
	}
}

// webhooksParam reads the webhooks parameter: a boolean, default true.
func (s *Server) webhooksParam(p map[string]string) (bool, *apiError) {
	v, ok := p["webhooks"]
	if !ok {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, &apiError{Type: "invalid_request_error", Code: "parameter_invalid_boolean", Param: "webhooks",
			Message: fmt.Sprintf("Invalid boolean: %s", v)}
	}
	return b, nil
}

// controlParams reads a control request's parameters, from a JSON object
// body (Content-Type application/json: strings, numbers and booleans) or
// a form (body and query), refusing any not in allowed.
func controlParams(r *http.Request, allowed ...string) (map[string]string, *apiError) {
	r.Body = http.MaxBytesReader(nil, r.Body, maxControlBody)
	p := make(map[string]string)
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/json" {
		if bad := onlyParams(r.URL.Query()); bad != nil {
			return nil, bad
		}
		dec := json.NewDecoder(r.Body)
		dec.UseNumber()
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil || dec.More() {
			if err == nil {
				err = errors.New("more than one JSON value")
			}
			return nil, &apiError{Type: "invalid_request_error", Message: "Invalid JSON body: want one object: " + err.Error()}
		}
		for name, v := range obj {
			if !slices.Contains(allowed, name) {
				return nil, unknownParam(name)
			}
			switch v := v.(type) {
			case string:
				p[name] = v
			case json.Number:
				p[name] = v.String()
			case bool:
				p[name] = strconv.FormatBool(v)
			default:
				return nil, &apiError{Type: "invalid_request_error", Code: "parameter_invalid_string", Param: name,
					Message: fmt.Sprintf("Invalid %s: want a string, a number or a boolean", name)}
			}
		}
		return p, nil
	}
	if err := r.ParseForm(); err != nil {
		return nil, &apiError{Type: "invalid_request_error", Message: "Invalid request body: " + err.Error()}
	}
	for name, values := range r.Form {
		if !slices.Contains(allowed, name) {
			return nil, unknownParam(name)
		}
		p[name] = values[len(values)-1]
	}
	return p, nil
}

func unknownParam(name string) *apiError {
	return &apiError{Type: "invalid_request_error", Code: "parameter_unknown", Param: name,
		Message: fmt.Sprintf("Received unknown parameter: %s", name)}
}
