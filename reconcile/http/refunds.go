package http

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/payrecon/payrecon/internal/crashpoint"
	"github.com/payrecon/payrecon/reconcile"
)

// The purchase API's refunds: POST /v1/purchases/{id}/refunds creates a
// refund at most once per Idempotency-Key, on the same key path as a
// purchase (reconcile.Service.CreateRefundOnce); GET /v1/refunds/{id}
// reads one. A refund is its own process, with its own id, provider key
// and states: never a charge with a minus sign.
//
// Answers beyond the purchase API's own (400, 401, 404, 409 key in
// flight, 413, 422 key mismatch): 409 refund_exceeds_payment when the
// purchase's refunds, pending ones included, would exceed the amount
// paid, and 409 not_refundable when the purchase is not succeeded. Both
// store nothing, so a corrected request may reuse the key.

// refundRequest is the body of POST /v1/purchases/{id}/refunds.
type refundRequest struct {
	Amount *int64 `json:"amount"`
	Reason string `json:"reason"`
}

// refundFields are the keys of a refund request, exactly.
var refundFields = []string{"amount", "reason"}

// RefundJSON is the API's view of a refund.
type RefundJSON struct {
	ID         string `json:"id"`
	PurchaseID string `json:"purchase_id"`
	State      string `json:"state"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	Reason     string `json:"reason"`
	// PaymentID is the provider's payment the refund returns money from.
	PaymentID        string    `json:"payment_id,omitempty"`
	ProviderRefundID string    `json:"provider_refund_id,omitempty"`
	FailureReason    string    `json:"failure_reason,omitempty"`
	Escalated        bool      `json:"escalated,omitempty"`
	EscalationReason string    `json:"escalation_reason,omitempty"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
	SettledAt        time.Time `json:"settled_at,omitzero"`
}

func refundJSON(r reconcile.Refund) RefundJSON {
	return RefundJSON{
		ID: r.ID, PurchaseID: r.PurchaseID, State: string(r.State), Amount: r.Amount, Currency: r.Currency,
		Reason: r.Reason, PaymentID: r.PaymentID, ProviderRefundID: r.ProviderRefundID,
		FailureReason: r.FailureReason, Escalated: r.Escalated(), EscalationReason: string(r.EscalationReason),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, SettledAt: r.SettledAt,
	}
}

// refundSummaryJSON is a refund as a purchase's record lists it.
type refundSummaryJSON struct {
	ID        string    `json:"id"`
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	State     string    `json:"state"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at"`
	SettledAt time.Time `json:"settled_at,omitzero"`
}

// toRefundSummariesJSON renders a purchase's refunds; never nil, so that
// JSON shows [] for none.
func toRefundSummariesJSON(rs []reconcile.Refund) []refundSummaryJSON {
	out := []refundSummaryJSON{}
	for _, r := range rs {
		out = append(out, refundSummaryJSON{
			ID: r.ID, Amount: r.Amount, Currency: r.Currency, State: string(r.State), Reason: r.Reason,
			CreatedAt: r.CreatedAt, SettledAt: r.SettledAt,
		})
	}
	return out
}

// refundDetailJSON is the API's view of a refund with its history.
type refundDetailJSON struct {
	RefundJSON
	Transitions []transitionJSON `json:"transitions"`
	Attempts    []attemptJSON    `json:"provider_attempts"`
}

func toRefundDetailJSON(d reconcile.RefundDetail) refundDetailJSON {
	return refundDetailJSON{
		RefundJSON:  refundJSON(d.Refund),
		Transitions: toTransitionsJSON(d.Transitions),
		Attempts:    toAttemptsJSON(d.Attempts),
	}
}

// refundRoute names the request a refund's key is bound to, for its
// hash: the refunds of purchaseID. The same key and body sent to refund
// another purchase, or to POST /v1/purchases, is another request.
func refundRoute(purchaseID string) string { return "refunds of purchase " + purchaseID }

// createRefund answers POST /v1/purchases/{id}/refunds.
func (a *PurchaseAPI) createRefund(w http.ResponseWriter, r *http.Request, c APIClient) {
	purchaseID := r.PathValue("id")
	key := r.Header.Get("Idempotency-Key")
	if !validKey(key) {
		writeFieldError(w, "Idempotency-Key", "header is required: 1 to 255 printable ASCII characters, chosen by the client and repeated on every retry")
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	req, hash, err := parseRefund(body, purchaseID, a.svc.Config().MaxAmount)
	if err != nil {
		writeValidation(w, err)
		return
	}
	nr := reconcile.NewRefund{PurchaseID: purchaseID, Amount: *req.Amount, Reason: req.Reason, RequestedBy: c.Name}
	saved, err := a.svc.CreateRefundOnce(r.Context(), c.Name, key, hash, nr, func(rf reconcile.Refund) (int, []byte, error) {
		body, err := json.Marshal(refundJSON(rf))
		return http.StatusCreated, body, err
	})
	if err == nil && !saved.Replayed {
		crashpoint.Hit(crashpoint.RefundInserted)
	}
	switch k := reconcile.KindOf(err); {
	case k == reconcile.KindInvalid:
		writeValidation(w, err)
	case k == reconcile.KindNotFound:
		writeKindError(w, k, "no purchase with id "+quote(purchaseID))
	case k == reconcile.KindRefundExceeds:
		msg := "the refund was not created: the purchase's refunds, pending ones included, would exceed the amount paid"
		if d := reconcile.DetailOf(err); d != "" {
			msg += " (" + d + ")"
		}
		writeKindError(w, k, msg+"; nothing was stored")
	case k == reconcile.KindDisputed:
		msg := "the refund was not created: the payment is disputed"
		if d := reconcile.DetailOf(err); d != "" {
			msg += " (" + d + ")"
		}
		writeKindError(w, k, msg+"; nothing was stored")
	case k == reconcile.KindNotRefundable:
		msg := "the refund was not created: only a succeeded purchase can be refunded"
		if d := reconcile.DetailOf(err); d != "" {
			msg += " (" + d + ")"
		}
		writeKindError(w, k, msg+"; nothing was stored")
	case k == reconcile.KindKeyMismatch:
		writeKindError(w, k,
			"Idempotency-Key "+quote(key)+" was used with a different request: "+refundMismatch(req, purchaseID, saved.Body)+
				"; use a new key for a new refund")
	case k == reconcile.KindKeyInFlight:
		w.Header().Set("Retry-After", "1")
		writeKindError(w, k, "a request with this Idempotency-Key is still in flight; retry later")
	case err != nil:
		writeKindError(w, reconcile.KindInternal, "the refund was not created; retry with the same Idempotency-Key")
	default:
		if saved.Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		var created RefundJSON
		if json.Unmarshal(saved.Body, &created) == nil && created.ID != "" {
			w.Header().Set("Location", "/v1/refunds/"+created.ID)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(saved.StatusCode)
		_, _ = w.Write(saved.Body)
	}
}

// parseRefund decodes a refund request body as parsePurchase decodes a
// purchase's: one JSON object in UTF-8, each of refundFields at most once
// and spelled exactly, of the right types, with an amount of at most
// maxAmount (no purchase is larger) and a reason with no control
// characters once its surrounding white space is removed. The error is a *reconcile.FieldError naming the field, or
// "body". hash identifies the request's meaning: the route (its purchase
// id) and the decoded fields.
func parseRefund(body []byte, purchaseID string, maxAmount int64) (req refundRequest, hash string, err error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return req, "", &reconcile.FieldError{Field: "body", Message: "is empty: want a JSON object {amount, reason}"}
	}
	if fe := checkStrictJSON(body, refundFields); fe != nil {
		return req, "", fe
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, "", &reconcile.FieldError{Field: jsonField(err), Message: "malformed JSON: " + err.Error()}
	}
	if dec.More() {
		return req, "", &reconcile.FieldError{Field: "body", Message: "has data after the JSON object"}
	}
	switch {
	case req.Amount == nil:
		return req, "", &reconcile.FieldError{Field: "amount", Message: "is required: a whole number of minor units, at most the amount paid"}
	case maxAmount > 0 && *req.Amount > maxAmount:
		return req, "", &reconcile.FieldError{Field: "amount", Message: fmt.Sprintf("must be at most %d minor units", maxAmount)}
	case strings.ContainsFunc(strings.TrimSpace(req.Reason), func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return req, "", &reconcile.FieldError{Field: "reason", Message: "must not contain control characters"}
	}
	canon, _ := json.Marshal(req) // a plain struct: cannot fail
	sum := sha256.Sum256(append([]byte(refundRoute(purchaseID)+"\n"), canon...))
	return req, hex.EncodeToString(sum[:]), nil
}

// refundMismatch names how req, sent to refund purchaseID, differs from
// the request whose response was saved under the same key.
func refundMismatch(req refundRequest, purchaseID string, saved []byte) string {
	var prev RefundJSON
	if err := json.Unmarshal(saved, &prev); err != nil || prev.ID == "" {
		return "the request body differs"
	}
	if !strings.HasPrefix(prev.ID, "ref_") {
		return "the key was used for another request (it created " + prev.ID + ")"
	}
	if prev.PurchaseID != purchaseID {
		return "the key was used to refund purchase " + prev.PurchaseID + ", not " + purchaseID
	}
	var diffs []string
	if prev.Amount != *req.Amount {
		diffs = append(diffs, fmt.Sprintf("amount was %d, now %d", prev.Amount, *req.Amount))
	}
	if reason := strings.TrimSpace(req.Reason); prev.Reason != reason {
		diffs = append(diffs, fmt.Sprintf("reason was %q, now %q", prev.Reason, reason))
	}
	if len(diffs) == 0 {
		return "the request body differs"
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}

// showRefund answers a refund of one of the client's purchases; any
// other is not found.
func (a *PurchaseAPI) showRefund(w http.ResponseWriter, r *http.Request, c APIClient) {
	d, err := a.svc.ClientRefund(r.Context(), c.Name, r.PathValue("id"))
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		writeKindError(w, reconcile.KindNotFound, "no refund with id "+quote(r.PathValue("id")))
	case err != nil:
		writeKindError(w, reconcile.KindInternal, "could not read the refund")
	default:
		writeJSON(w, http.StatusOK, toRefundDetailJSON(d))
	}
}
