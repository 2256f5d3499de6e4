package http

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// maxPurchaseBody caps a purchase request body.
const maxPurchaseBody = 16 << 10

// APIClient is one client of the purchase API, named for its idempotency
// key scope and logs.
type APIClient struct {
	Name  string
	Token string
}

// ParseAPITokens parses a comma-separated token list: each item is
// "name:token" or a bare token, whose client is then named by a hash of
// the token. Returns an error for an empty list, an empty item, or a
// repeated token.
func ParseAPITokens(list string) ([]APIClient, error) {
	var out []APIClient
	seen := map[string]bool{}
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, errors.New("api tokens: empty token in the list")
		}
		c := APIClient{Token: item}
		if name, tok, ok := strings.Cut(item, ":"); ok {
			c = APIClient{Name: name, Token: tok}
		}
		if c.Token == "" || len(c.Token) < 16 {
			return nil, fmt.Errorf("api tokens: token for %q is shorter than 16 characters", c.Name)
		}
		if c.Name == "" {
			sum := sha256.Sum256([]byte(c.Token))
			c.Name = "client-" + hex.EncodeToString(sum[:4])
		}
		if seen[c.Token] {
			return nil, fmt.Errorf("api tokens: token of %q appears twice", c.Name)
		}
		seen[c.Token] = true
		out = append(out, c)
	}
	return out, nil
}

// PurchaseAPI serves POST /v1/purchases and GET /v1/purchases/{id}.
type PurchaseAPI struct {
	svc     *reconcile.Service
	clients []APIClient
}

// NewPurchaseAPI returns the purchase API. It refuses to exist without a
// client token: the API is never served unauthenticated.
func NewPurchaseAPI(svc *reconcile.Service, clients []APIClient) (*PurchaseAPI, error) {
	if len(clients) == 0 {
		return nil, errors.New("purchase API: no API token configured (--api-token / PAYRECON_API_TOKEN); refusing to serve it unauthenticated")
	}
	return &PurchaseAPI{svc: svc, clients: clients}, nil
}

// Register adds the API's routes to s.
func (a *PurchaseAPI) Register(s *Server) {
	s.Handle("POST /v1/purchases", a.authenticated(a.create))
	s.Handle("GET /v1/purchases/{id}", a.authenticated(a.show))
}

// authenticated checks the bearer token in constant time per client.
func (a *PurchaseAPI) authenticated(next func(http.ResponseWriter, *http.Request, APIClient)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := bearer(r)
		if ok {
			for _, c := range a.clients {
				if subtle.ConstantTimeCompare([]byte(tok), []byte(c.Token)) == 1 {
					next(w, r, c)
					return
				}
			}
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="payrecon"`)
		writeError(w, http.StatusUnauthorized, "unauthorized", "a valid Authorization: Bearer token is required")
	})
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// purchaseRequest is the body of POST /v1/purchases.
type purchaseRequest struct {
	Customer      string `json:"customer"`
	Amount        *int64 `json:"amount"`
	Currency      string `json:"currency"`
	Description   string `json:"description"`
	PaymentMethod string `json:"payment_method,omitempty"`
	Reference     string `json:"reference,omitempty"`
}

// PurchaseJSON is the API's view of a purchase.
type PurchaseJSON struct {
	ID                string    `json:"id"`
	State             string    `json:"state"`
	Customer          string    `json:"customer"`
	Reference         string    `json:"reference,omitempty"`
	Amount            int64     `json:"amount"`
	Currency          string    `json:"currency"`
	Description       string    `json:"description"`
	ProviderPaymentID string    `json:"provider_payment_id,omitempty"`
	Escalated         bool      `json:"escalated,omitempty"`
	EscalationReason  string    `json:"escalation_reason,omitempty"`
	CreatedAt         time.Time `json:"created_at"`
	UpdatedAt         time.Time `json:"updated_at"`
}

func purchaseJSON(p reconcile.Purchase) PurchaseJSON {
	return PurchaseJSON{
		ID: p.ID, State: string(p.State), Customer: p.Customer, Reference: p.Reference,
		Amount: p.Amount, Currency: p.Currency, Description: p.Description,
		ProviderPaymentID: p.ProviderPaymentID, Escalated: p.Escalated(),
		EscalationReason: string(p.EscalationReason), CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}
}

// validKey reports whether an Idempotency-Key is 1–255 printable ASCII
// characters.
func validKey(k string) bool {
	if len(k) == 0 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

func (a *PurchaseAPI) create(w http.ResponseWriter, r *http.Request, c APIClient) {
	key := r.Header.Get("Idempotency-Key")
	if !validKey(key) {
		writeFieldError(w, "Idempotency-Key", "header is required: 1 to 255 printable ASCII characters, chosen by the client and repeated on every retry")
		return
	}
	req, hash, ok := decodePurchase(w, r)
	if !ok {
		return
	}
	np := reconcile.NewPurchase{
		Customer: req.Customer, Amount: *req.Amount, Currency: req.Currency,
		Description: req.Description, PaymentMethod: req.PaymentMethod, Reference: req.Reference,
	}
	saved, err := a.svc.CreatePurchaseOnce(r.Context(), c.Name, key, hash, np, func(p reconcile.Purchase) (int, []byte, error) {
		body, err := json.Marshal(purchaseJSON(p))
		return http.StatusCreated, body, err
	})
	var refErr *reconcile.ReferenceConflictError
	switch k := reconcile.KindOf(err); {
	case k == reconcile.KindInvalid:
		writeValidation(w, err)
	case k == reconcile.KindDuplicate && errors.As(err, &refErr):
		writeJSON(w, statusOf(k), map[string]any{"error": map[string]string{
			"code": codeOf(k), "message": refErr.Error(), "existing_purchase_id": refErr.ExistingPurchaseID,
		}})
	case k == reconcile.KindKeyMismatch:
		writeKindError(w, k,
			"Idempotency-Key "+quote(key)+" was used with a different request: "+mismatch(req, saved.Body)+
				"; use a new key for a new purchase")
	case k == reconcile.KindKeyInFlight:
		w.Header().Set("Retry-After", "1")
		writeKindError(w, k, "a request with this Idempotency-Key is still in flight; retry later")
	case err != nil:
		writeKindError(w, reconcile.KindInternal, "the purchase was not created; retry with the same Idempotency-Key")
	default:
		if saved.Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/purchases/"+saved.PurchaseID)
		w.WriteHeader(saved.StatusCode)
		_, _ = w.Write(saved.Body)
	}
}

// decodePurchase reads and checks the body. On failure it has written a
// 400 and returns ok false. hash identifies the request's meaning: the
// decoded fields, so that whitespace or key order do not count.
func decodePurchase(w http.ResponseWriter, r *http.Request) (req purchaseRequest, hash string, ok bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPurchaseBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeFieldError(w, "body", fmt.Sprintf("is larger than %d bytes", maxPurchaseBody))
		return req, "", false
	case err != nil:
		writeFieldError(w, "body", "could not be read: "+err.Error())
		return req, "", false
	case len(bytes.TrimSpace(body)) == 0:
		writeFieldError(w, "body", "is empty: want a JSON object {customer, amount, currency, description, payment_method}")
		return req, "", false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeFieldError(w, jsonField(err), "malformed JSON: "+err.Error())
		return req, "", false
	}
	if dec.More() {
		writeFieldError(w, "body", "has data after the JSON object")
		return req, "", false
	}
	if req.Amount == nil {
		writeFieldError(w, "amount", "is required: a whole number of minor units")
		return req, "", false
	}
	canon, _ := json.Marshal(req) // a plain struct: cannot fail
	sum := sha256.Sum256(canon)
	return req, hex.EncodeToString(sum[:]), true
}

// jsonField names the field a decode error is about, or "body".
func jsonField(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return typeErr.Field
	}
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		return strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`)
	}
	return "body"
}

// mismatch names the fields in which req differs from the purchase in the
// saved response.
func mismatch(req purchaseRequest, saved []byte) string {
	var prev PurchaseJSON
	if err := json.Unmarshal(saved, &prev); err != nil || prev.ID == "" {
		return "the request body differs"
	}
	var diffs []string
	diff := func(field string, was, now any) {
		if fmt.Sprint(was) != fmt.Sprint(now) {
			diffs = append(diffs, fmt.Sprintf("%s was %v, now %v", field, was, now))
		}
	}
	diff("amount", prev.Amount, *req.Amount)
	diff("currency", prev.Currency, strings.ToLower(strings.TrimSpace(req.Currency)))
	diff("customer", prev.Customer, strings.TrimSpace(req.Customer))
	diff("description", prev.Description, req.Description)
	diff("reference", prev.Reference, strings.TrimSpace(req.Reference))
	if len(diffs) == 0 {
		return "the request body differs (payment_method or formatting of a field)"
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

// writeFieldError writes a 400 naming one invalid field.
func writeFieldError(w http.ResponseWriter, field, message string) {
	writeValidation(w, &reconcile.FieldError{Field: field, Message: message})
}

// writeValidation writes a 400 listing every invalid field.
func writeValidation(w http.ResponseWriter, err error) {
	var fields []map[string]string
	var msgs []string
	for _, fe := range fieldErrors(err) {
		fields = append(fields, map[string]string{"field": fe.Field, "message": fe.Message})
		msgs = append(msgs, fe.Error())
	}
	if len(fields) == 0 {
		msgs = []string{err.Error()}
	}
	writeJSON(w, statusOf(reconcile.KindInvalid), map[string]any{"error": map[string]any{
		"code": codeOf(reconcile.KindInvalid), "message": strings.Join(msgs, "; "), "fields": fields,
	}})
}

// detailJSON is the API's view of a purchase with its history.
type detailJSON struct {
	PurchaseJSON
	Transitions []transitionJSON `json:"transitions"`
	Attempts    []attemptJSON    `json:"provider_attempts"`
}

type transitionJSON struct {
	From     string    `json:"from"`
	To       string    `json:"to"`
	Cause    string    `json:"cause"`
	Evidence string    `json:"evidence,omitempty"`
	Actor    string    `json:"actor"`
	At       time.Time `json:"at"`
}

type attemptJSON struct {
	Op        string  `json:"op"`
	Key       string  `json:"idempotency_key,omitempty"`
	Outcome   string  `json:"outcome"`
	PaymentID string  `json:"payment_id,omitempty"`
	Status    string  `json:"status,omitempty"`
	LatencyMS float64 `json:"latency_ms"`
	Error     string  `json:"error,omitempty"`
	Applied   bool    `json:"applied"`
	// Unanswered marks a call the history shows was started and for which
	// no answer was ever recorded (see reconcile.Attempt.Derived).
	Unanswered bool      `json:"unanswered,omitempty"`
	Note       string    `json:"note,omitempty"`
	Actor      string    `json:"actor,omitempty"`
	At         time.Time `json:"at"`
}

func toDetailJSON(d reconcile.Detail) detailJSON {
	return detailJSON{
		PurchaseJSON: purchaseJSON(d.Purchase),
		Transitions:  toTransitionsJSON(d.Transitions),
		Attempts:     toAttemptsJSON(d.Attempts),
	}
}

// toTransitionsJSON renders the transition audit; never nil, so that JSON
// shows [] for none.
func toTransitionsJSON(ts []reconcile.TransitionRecord) []transitionJSON {
	out := []transitionJSON{}
	for _, t := range ts {
		out = append(out, transitionJSON{
			From: string(t.From), To: string(t.To), Cause: string(t.Cause), Evidence: t.Evidence, Actor: t.Actor, At: t.At,
		})
	}
	return out
}

// toAttemptsJSON renders the provider call audit; never nil.
func toAttemptsJSON(as []reconcile.Attempt) []attemptJSON {
	out := []attemptJSON{}
	for _, a := range as {
		out = append(out, attemptJSON{
			Op: string(a.Op), Key: a.Key, Outcome: string(a.Outcome), PaymentID: a.PaymentID, Status: a.Status,
			LatencyMS: float64(a.Latency.Microseconds()) / 1000, Error: a.Error, Applied: a.Applied,
			Unanswered: a.Derived, Note: a.Note, Actor: a.Actor, At: a.At,
		})
	}
	return out
}

func (a *PurchaseAPI) show(w http.ResponseWriter, r *http.Request, _ APIClient) {
	d, err := a.svc.Purchase(r.Context(), r.PathValue("id"))
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		writeKindError(w, reconcile.KindNotFound, "no purchase with id "+quote(r.PathValue("id")))
	case err != nil:
		writeKindError(w, reconcile.KindInternal, "could not read the purchase")
	default:
		writeJSON(w, http.StatusOK, toDetailJSON(d))
	}
}
