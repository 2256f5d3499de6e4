package fakeprovider

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/payrecon/payrecon/provider"
)

// POST /v1/payment_intents: the create, in Stripe's wire format.

// maxKeyLength is Stripe's limit on an idempotency key.
const maxKeyLength = 255

// create serves POST /v1/payment_intents.
func (s *Server) create(w http.ResponseWriter, r *http.Request, reqID string) {
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Message: "Invalid request body: " + err.Error()})
		return
	}
	req, hash, bad := createRequest(r.PostForm)
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
	// As the in-process caller's, for Config.OnAccept; hash, of the
	// form, stays as it was.
	req.Account = s.fake.account

	a := s.fake.createHashed(req, hash)
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

	status, body := s.createReply(req, a)
	if a.created {
		s.emit() // the new charge's events, before its reply (or its loss)
	}
	if a.fault == LostReply {
		dropConnection(w)
		return
	}
	if a.err == nil && a.res.PaymentID != "" && !a.created {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, status, body)
}

// createReply renders the answer to a create that reached the provider.
func (s *Server) createReply(req provider.CreateRequest, a attempt) (int, any) {
	switch {
	case errors.Is(a.err, provider.ErrIdempotencyMismatch):
		return http.StatusBadRequest, errorBody{apiError{Type: "idempotency_error",
			Message: fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '%s' if you meant to execute a different request.", req.IdempotencyKey)}}
	case errors.Is(a.err, ErrInvalidRequest):
		e := apiError{Type: "invalid_request_error", Message: a.err.Error()}
		switch {
		case req.Amount <= 0:
			e.Code, e.Param = "amount_too_small", "amount"
			e.Message = "Amount must be at least 1 (in the currency's smallest unit)."
		case errors.Is(a.err, errAmountTooSmall):
			least, _ := provider.MinimumCharge(req.Currency)
			e.Code, e.Param = "amount_too_small", "amount"
			e.Message = fmt.Sprintf("Amount must be at least %s.", provider.FormatAmount(least, req.Currency))
		case req.Currency == "":
			e.Code, e.Param = "parameter_missing", "currency"
			e.Message = "Missing required param: currency."
		}
		return http.StatusBadRequest, errorBody{e}
	case a.err != nil:
		return http.StatusInternalServerError, errorBody{apiError{Type: "api_error", Message: a.err.Error()}}
	case a.res.PaymentID == "" && a.res.Reason == ReasonKeyInUse:
		return http.StatusConflict, errorBody{apiError{Type: "invalid_request_error", Code: ReasonKeyInUse,
			DocURL:  "https://stripe.com/docs/error-codes/idempotency-key-in-use",
			Message: fmt.Sprintf("There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): %s. Please try again later.", req.IdempotencyKey)}}
	}
	c, ok := s.fake.charge(a.res.PaymentID)
	if !ok { // cannot happen: the ledger only grows
		return http.StatusInternalServerError, errorBody{apiError{Type: "api_error", Message: "payment intent " + a.res.PaymentID + " vanished"}}
	}
	// The answer is rendered with the status the key's response saved, so
	// that a replay answers as the first create did.
	pi := renderPI(c, a.res.Status)
	if a.res.Status == StatusRequiresPaymentMethod {
		e := cardError(c)
		e.PaymentIntent = &pi
		return http.StatusPaymentRequired, errorBody{e}
	}
	return http.StatusOK, pi
}

// createRequest reads a create's form into a CreateRequest and the hash
// of all its parameters, or returns the error Stripe would answer.
func createRequest(form url.Values) (provider.CreateRequest, string, *apiError) {
	var req provider.CreateRequest
	// extras are the parameters CreateRequest does not hold, as name=value.
	var extras []string
	for name, values := range form {
		v := values[len(values)-1]
		switch {
		case name == "amount":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return req, "", &apiError{Type: "invalid_request_error", Code: "parameter_invalid_integer", Param: name,
					Message: fmt.Sprintf("Invalid integer: %s", v)}
			}
			req.Amount = n
		case name == "currency":
			req.Currency = strings.ToLower(v)
		case name == "payment_method":
			req.PaymentMethod = v
		case name == "description":
			req.Description = v
		case name == "confirm":
			if v != "true" {
				return req, "", &apiError{Type: "invalid_request_error", Code: "parameter_invalid_string", Param: name,
					Message: "The fake provider only creates PaymentIntents with confirm=true."}
			}
		case name == "metadata[purchase_id]":
			req.PurchaseID = v
		case name == "metadata[customer_ref]":
			req.Customer = v
		case name == "off_session":
			switch v {
			case "true":
				req.Version = provider.RequestOffSession
			case "false": // on-session, as when absent, but another request
				extras = append(extras, name+"="+v)
			default: // Stripe also takes one_off and recurring; the fake does not
				return req, "", &apiError{Type: "invalid_request_error", Param: name,
					Message: fmt.Sprintf("Invalid boolean: %s (the fake provider takes off_session true or false)", v)}
			}
		case paymentMethodTypesParam.MatchString(name):
			extras = append(extras, name+"="+v)
		default:
			return req, "", &apiError{Type: "invalid_request_error", Code: "parameter_unknown", Param: name,
				Message: fmt.Sprintf("Received unknown parameter: %s (the fake provider knows amount, currency, payment_method, confirm, off_session, description, payment_method_types and metadata purchase_id and customer_ref)", name)}
		}
	}
	if _, ok := form["amount"]; !ok {
		return req, "", &apiError{Type: "invalid_request_error", Code: "parameter_missing", Param: "amount",
			Message: "Missing required param: amount."}
	}
	if _, ok := form["confirm"]; !ok {
		return req, "", &apiError{Type: "invalid_request_error", Code: "parameter_missing", Param: "confirm",
			Message: "The fake provider only creates PaymentIntents with confirm=true."}
	}
	// The key store compares every parameter, as Stripe does: those
	// CreateRequest holds by its own hash (off_session=true by the
	// request's version), the others (confirm is always true) folded in
	// unless they are what the Stripe adapter sends.
	slices.Sort(extras)
	hash := req.Hash()
	if extra := strings.Join(extras, "&"); extra != "payment_method_types[0]=card" {
		sum := sha256.Sum256([]byte(hash + "\n" + extra))
		hash = hex.EncodeToString(sum[:])
	}
	return req, hash, nil
}

var paymentMethodTypesParam = regexp.MustCompile(`^payment_method_types\[\d*\]$`)
