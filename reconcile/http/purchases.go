package http

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/payrecon/payrecon/internal/crashpoint"
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

// PurchaseAPI serves POST /v1/purchases and GET /v1/purchases/{id}, and
// a purchase's refunds: POST /v1/purchases/{id}/refunds and GET
// /v1/refunds/{id} (refunds.go).
//
// A purchase belongs to the client that created it (its name, from the
// token list): GET answers 404, as for an unknown id, to any other
// client, and so do a request to refund it and a read of its refunds, so
// that a client can neither read another's purchases nor tell that they
// exist. A purchase made without the API (the CLI, the demo)
// or stored before payrecon recorded clients (migration 00005) has no
// client and is readable by no API client; the operator pages and
// `payrecon purchase show` still show it. Clients are identified by
// name: when a token is rotated, give the new one the same name
// (name:token), or the old purchases become unreadable through the API.
type PurchaseAPI struct {
	svc      *reconcile.Service
	clients  []APIClient
	digests  []tokenDigest // digests[i] is clients[i].Token's
	throttle *loginThrottle
}

// NewPurchaseAPI returns the purchase API. It refuses to exist without a
// client token: the API is never served unauthenticated.
func NewPurchaseAPI(svc *reconcile.Service, clients []APIClient) (*PurchaseAPI, error) {
	if len(clients) == 0 {
		return nil, errors.New("purchase API: no API token configured (--api-token / PAYRECON_API_TOKEN); refusing to serve it unauthenticated")
	}
	a := &PurchaseAPI{svc: svc, clients: clients, throttle: newLoginThrottle(time.Now)}
	for _, c := range clients {
		a.digests = append(a.digests, digestOf(c.Token))
	}
	return a, nil
}

// Register adds the API's routes to s.
func (a *PurchaseAPI) Register(s *Server) {
	s.Handle("POST /v1/purchases", a.authenticated(a.create))
	s.Handle("GET /v1/purchases/{id}", a.authenticated(a.show))
	s.Handle("POST /v1/purchases/{id}/refunds", a.authenticated(a.createRefund))
	s.Handle("GET /v1/refunds/{id}", a.authenticated(a.showRefund))
	s.Handle(openAPIRoute, http.HandlerFunc(serveOpenAPI))
}

// authenticated checks the bearer token against every client's, by
// digest (matchToken), so that neither the token's length nor which
// client's it is shows in the time taken. Wrong tokens are throttled per
// client address as the operator token is (ops_throttle.go): after
// loginFreeFailures of them, the client is locked out and answered 429
// with Retry-After, its token not even compared, until the lockout ends.
func (a *PurchaseAPI) authenticated(next func(http.ResponseWriter, *http.Request, APIClient)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := throttleClientKey(r)
		if wait := a.throttle.wait(client); wait > 0 {
			w.Header().Set("Retry-After", retryAfter(wait))
			writeError(w, http.StatusTooManyRequests, "too_many_failed_tokens",
				"too many requests with a wrong token from this address; retry after "+retryAfter(wait)+" seconds")
			return
		}
		if tok, ok := bearer(r); ok {
			if i := matchToken(tok, a.digests...); i >= 0 {
				a.throttle.succeeded(client)
				next(w, r, a.clients[i])
				return
			}
			a.throttle.failed(client)
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
	// Account is the provider account charged on behalf of; omitted for
	// the platform's own, so that such a request hashes as before.
	Account string `json:"account,omitempty"`
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
	Account           string    `json:"account,omitempty"`
	ProviderPaymentID string    `json:"provider_payment_id,omitempty"`
	Escalated         bool      `json:"escalated,omitempty"`
	EscalationReason  string    `json:"escalation_reason,omitempty"`
	CreatedAt         time.Time `json:"created_at"`
	UpdatedAt         time.Time `json:"updated_at"`
}

func purchaseJSON(p reconcile.Purchase) PurchaseJSON {
	return PurchaseJSON{
		ID: p.ID, State: string(p.State), Customer: p.Customer, Reference: p.Reference,
		Amount: p.Amount, Currency: p.Currency, Description: p.Description, Account: p.Account,
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
		Account: req.Account,
	}
	saved, err := a.svc.CreatePurchaseOnce(r.Context(), c.Name, key, hash, np, func(p reconcile.Purchase) (int, []byte, error) {
		body, err := json.Marshal(purchaseJSON(p))
		return http.StatusCreated, body, err
	})
	if err == nil && !saved.Replayed {
		crashpoint.Hit(crashpoint.PurchaseInserted)
	}
	var refErr *reconcile.ReferenceConflictError
	switch k := reconcile.KindOf(err); {
	case k == reconcile.KindInvalid:
		writeValidation(w, err)
	case k == reconcile.KindDuplicate && errors.As(err, &refErr):
		body := map[string]string{"code": codeOf(k), "message": refErr.Error()}
		if refErr.ExistingPurchaseID != "" { // only a purchase of this client's
			body["existing_purchase_id"] = refErr.ExistingPurchaseID
		}
		writeJSON(w, statusOf(k), map[string]any{"error": body})
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

// purchaseFields are the keys of a purchase request, exactly.
var purchaseFields = []string{"customer", "amount", "currency", "description", "payment_method", "reference", "account"}

// decodePurchase reads and checks the body. On failure it has written the
// answer, 413 for a body over maxPurchaseBody, else 400, and returns ok
// false.
func decodePurchase(w http.ResponseWriter, r *http.Request) (req purchaseRequest, hash string, ok bool) {
	body, ok := readBody(w, r)
	if !ok {
		return req, "", false
	}
	req, hash, err := parsePurchase(body)
	if err != nil {
		writeValidation(w, err)
		return req, "", false
	}
	return req, hash, true
}

// readBody reads a request body of at most maxPurchaseBody bytes. On
// failure it has written the answer, 413 for a body over the limit, else
// 400, and returns ok false.
func readBody(w http.ResponseWriter, r *http.Request) (body []byte, ok bool) {
	if r.ContentLength > maxPurchaseBody {
		writeTooLarge(w)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPurchaseBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeTooLarge(w)
		return nil, false
	case err != nil:
		writeFieldError(w, "body", "could not be read: "+err.Error())
		return nil, false
	}
	return body, true
}

// writeTooLarge answers a body over maxPurchaseBody: 413, code too_large
// (as a webhook's).
func writeTooLarge(w http.ResponseWriter) {
	writeError(w, http.StatusRequestEntityTooLarge, "too_large",
		fmt.Sprintf("the body is larger than %d bytes", maxPurchaseBody))
}

// parsePurchase decodes a purchase request body: one JSON object, in
// UTF-8, with each of purchaseFields at most once and spelled exactly
// (checkStrictJSON), of the right types, and with an amount. The error is
// a *reconcile.FieldError naming the field, or "body". hash identifies
// the request's meaning: the decoded fields, so that whitespace or key
// order do not count.
func parsePurchase(body []byte) (req purchaseRequest, hash string, err error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return req, "", &reconcile.FieldError{Field: "body", Message: "is empty: want a JSON object {customer, amount, currency, description, payment_method, reference, account}"}
	}
	if fe := checkStrictJSON(body, purchaseFields); fe != nil {
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
	if req.Amount == nil {
		return req, "", &reconcile.FieldError{Field: "amount", Message: "is required: a whole number of minor units"}
	}
	canon, _ := json.Marshal(req) // a plain struct: cannot fail
	sum := sha256.Sum256(canon)
	return req, hex.EncodeToString(sum[:]), nil
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
	diff("account", prev.Account, strings.TrimSpace(req.Account))
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
	// Refunds are the purchase's refunds, oldest first; GET
	// /v1/refunds/{id} has each one's history.
	Refunds []refundSummaryJSON `json:"refunds"`
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

func toDetailJSON(d reconcile.Detail, refunds []reconcile.Refund) detailJSON {
	return detailJSON{
		PurchaseJSON: purchaseJSON(d.Purchase),
		Transitions:  toTransitionsJSON(d.Transitions),
		Attempts:     toAttemptsJSON(d.Attempts),
		Refunds:      toRefundSummariesJSON(refunds),
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

// show answers a purchase of the client's, with its refunds; any other
// is not found.
func (a *PurchaseAPI) show(w http.ResponseWriter, r *http.Request, c APIClient) {
	d, err := a.svc.ClientPurchase(r.Context(), c.Name, r.PathValue("id"))
	var refunds []reconcile.Refund
	if err == nil { // the client's own: its refunds are the client's too
		refunds, err = a.svc.PurchaseRefunds(r.Context(), d.Purchase.ID)
	}
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		writeKindError(w, reconcile.KindNotFound, "no purchase with id "+quote(r.PathValue("id")))
	case err != nil:
		writeKindError(w, reconcile.KindInternal, "could not read the purchase")
	default:
		writeJSON(w, http.StatusOK, toDetailJSON(d, refunds))
	}
}
