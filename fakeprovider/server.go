package fakeprovider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// APIVersion is the Stripe API version the server renders objects and
// events in: stripe-go v82.5.1's stripe.APIVersion, which provider/stripe
// reads (and whose verifier checks events' api_version against). This
// package must not import stripe-go; a test keeps the two equal.
const APIVersion = "2025-08-27.basil"

// WireDeclineCode is the decline_code of the card errors the server sends
// for a declined charge, as Stripe test mode sends for
// pm_card_chargeDeclined; the error's code is DeclineCode. The Stripe
// adapter reports the decline code, so a decline made through the server
// has Reason "generic_decline" where the in-process Fake says
// "card_declined". The decline of an off-session charge on
// PaymentMethodAuthenticationRequired is the exception: its code and
// decline_code are both DeclineAuthenticationRequired, as Stripe's, so
// both say "authentication_required".
const WireDeclineCode = "generic_decline"

// Defaults of ServerConfig.
const (
	DefaultWebhookMaxAttempts = 8
	DefaultWebhookBackoff     = time.Second
	DefaultWebhookMaxBackoff  = time.Minute
	DefaultWebhookTimeout     = 10 * time.Second
	DefaultTickEvery          = time.Second
)

// ServerConfig configures a Server. The zero value serves the API without
// webhooks: every zero field means its documented default.
type ServerConfig struct {
	// WebhookURL is where events are POSTed. Default empty: no webhooks.
	// Webhooks need WebhookSecret too.
	WebhookURL string
	// WebhookSecret is the endpoint's signing secret ("whsec_..."), the
	// key of the HMAC-SHA256 in each delivery's Stripe-Signature header.
	// Default empty; required with WebhookURL, refused without it.
	WebhookSecret string
	// WebhookFaults are the probabilities of delivery faults. Default
	// none. The draws are seeded by the Fake's Config.Seed.
	WebhookFaults WebhookFaults
	// WebhookMaxAttempts is how many times one copy of an event is POSTed
	// before the server gives up on it (counted in WebhookStats.Failed and
	// logged). Default DefaultWebhookMaxAttempts (8).
	WebhookMaxAttempts int
	// WebhookBackoff is the wait, in real time, before a copy's second
	// attempt; each later wait doubles, up to WebhookMaxBackoff. Defaults
	// DefaultWebhookBackoff (1s) and DefaultWebhookMaxBackoff (1m), or
	// WebhookBackoff if that is longer. Tests use tiny values
	// (time.Millisecond).
	WebhookBackoff    time.Duration
	WebhookMaxBackoff time.Duration
	// WebhookClient sends the deliveries. Default a client with Timeout
	// DefaultWebhookTimeout that follows no redirect (Stripe treats a 3xx
	// as a failed delivery).
	WebhookClient *http.Client
	// SyncDelivery makes delivery synchronous and the server free of
	// goroutines: the call that emits events (the create request's
	// handler, before it replies; Tick) also delivers them, retries and
	// their backoff included, before it returns — unless another call is
	// delivering at that moment, which then delivers them too (so that a
	// receiver that calls the API cannot deadlock it; Drain waits for
	// them). For deterministic tests. Default false: one background
	// goroutine delivers, and another calls Tick every TickEvery.
	SyncDelivery bool
	// TickEvery is how often the background ticker calls Tick when
	// webhooks are on and SyncDelivery is off. Default DefaultTickEvery
	// (1s); negative: no ticker, the caller calls Tick.
	TickEvery time.Duration
	// Now is the clock of the signatures' timestamps (t=). Default the
	// Fake's Config.Now, so that a verifier on the same clock accepts
	// them. Events' created times always come from the Fake's clock.
	Now func() time.Time
	// Logger receives delivery failures and give-ups. Default
	// slog.Default().
	Logger *slog.Logger
}

// Server serves a Fake over HTTP in Stripe's wire format: the subset of
// Stripe's API that provider/stripe uses, and signed webhooks. Create it
// with NewServer, serve it (it is an http.Handler, for httptest.NewServer
// or http.Server), and Close it when done.
//
// API (form-encoded requests, JSON answers, Authorization: Bearer
// sk_test_...; any other key gets a 401):
//
//	POST /v1/payment_intents           create and confirm (confirm=true only;
//	                                   off_session true or false)
//	GET  /v1/payment_intents/{id}      retrieve; 404 resource_missing if unknown
//	GET  /v1/payment_intents/search    query=metadata['KEY']:'VALUE', limit, page
//	GET  /v1/payment_intents           list: created, created[gt], created[gte],
//	                                   created[lt], created[lte], limit,
//	                                   starting_after, ending_before
//
// A list answers {"object":"list","url":"/v1/payment_intents","has_more":
// ...,"data":[...]}, newest first as Stripe lists, ties in created seconds
// in creation order (newest first), so that pages are stable. created
// filters take unix seconds and compare the PaymentIntent's created
// (seconds); limit is 1 to 100, default 10; starting_after=ID gives the
// page after the PaymentIntent ID (older ones; stripe-go's
// auto-pagination sends the last id of the previous page),
// ending_before=ID the page just before it (newer ones, still newest
// first), has_more telling whether more lie beyond the page in that
// direction. A cursor need not match the filters, but must exist (else a
// 400 resource_missing), and only one may be given. It lists what
// Fake.List sees (Config.ListLag), settled as of now; each request counts
// as one List call. An unknown parameter is a 400 parameter_unknown, as
// everywhere.
//
// A create goes through the Fake's own key store (Idempotency-Key header),
// so a replay answers the saved response (header Idempotent-Replayed:
// true), the key with other parameters is a 400 idempotency_error, a key
// in flight a 409 idempotency_key_in_use; Stripe compares all of a
// request's parameters, and so does the server: off_session=true, false
// and absent are three different requests. off_session=true makes the
// request's version provider.RequestOffSession, so that the charge is made
// off-session (see PaymentMethodAuthenticationRequired); false or absent,
// provider.RequestOnSession. The Fake's faults become
// transport behaviour: FailBefore a 429 rate_limit; Timeout holds the
// request, doing nothing, until the client gives up (or the Server is
// closed); LostReply charges, then closes the connection without an
// answer; a decline is a 402 card_error embedding the PaymentIntent.
//
// Webhooks: see Tick, Events, Deliveries and WebhookStats.
//
// The simulator's own endpoints, outside Stripe's API, for tests in
// other processes (plain net/http, no API key: they need none, so that a
// test needs no Stripe client; the fake serves test keys only). Errors
// are Stripe error objects ({"error":{...}}), unknown parameters a 400
// parameter_unknown:
//
//	GET  /_fake/ledger                        the Fake's Ledger as JSON (see Ledger)
//	POST /_fake/charges                       Server.ChargeOutside: purchase_id, customer,
//	                                          amount, currency, status, webhooks;
//	                                          answers the PaymentIntent
//	POST /_fake/payment_intents/{id}/status   Server.SetStatus: status, webhooks;
//	                                          answers the PaymentIntent, or a 404
//	                                          resource_missing for an unknown id
//
// Their parameters come form-encoded (body or query) or as a JSON object
// (Content-Type: application/json; amount a number, webhooks a boolean).
// webhooks=true (the default) announces the change at once, before the
// answer, to a server with a webhook URL; webhooks=false never announces
// it: the change a dashboard or another system made without the endpoint
// hearing of it.
type Server struct {
	fake *Fake
	cfg  ServerConfig
	now  func() time.Time // signatures' clock
	log  *slog.Logger

	reqSeq   sync.Mutex // guards nextReq
	nextReq  int
	closing  chan struct{}
	closeOne sync.Once
	ctx      context.Context // ends at Close: bounds deliveries
	cancel   context.CancelFunc
	wg       sync.WaitGroup // background goroutines

	wh *webhooks // nil when webhooks are off
}

var _ http.Handler = (*Server)(nil)

// NewServer returns a Server for f with cfg's zero fields defaulted, and
// starts its background goroutines (see ServerConfig.SyncDelivery). It
// panics if cfg is invalid (a webhook URL without secret or the reverse, a
// bad probability, a negative duration or attempt count): that is a bug in
// the caller, and ParseServerConfig never returns such a config.
func NewServer(f *Fake, cfg ServerConfig) *Server {
	if err := cfg.validate(); err != nil {
		panic(err)
	}
	if cfg.WebhookMaxAttempts == 0 {
		cfg.WebhookMaxAttempts = DefaultWebhookMaxAttempts
	}
	if cfg.WebhookBackoff == 0 {
		cfg.WebhookBackoff = DefaultWebhookBackoff
	}
	if cfg.WebhookMaxBackoff == 0 {
		cfg.WebhookMaxBackoff = max(DefaultWebhookMaxBackoff, cfg.WebhookBackoff)
	}
	if cfg.WebhookClient == nil {
		cfg.WebhookClient = &http.Client{
			Timeout:       DefaultWebhookTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if cfg.TickEvery == 0 {
		cfg.TickEvery = DefaultTickEvery
	}
	s := &Server{
		fake:    f,
		cfg:     cfg,
		now:     cfg.Now,
		log:     cfg.Logger,
		closing: make(chan struct{}),
	}
	if s.now == nil {
		s.now = f.cfg.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.WebhookURL != "" {
		s.wh = newWebhooks(s)
		if !cfg.SyncDelivery {
			s.wg.Add(1)
			go s.deliverLoop()
			if cfg.TickEvery > 0 {
				s.wg.Add(1)
				go s.tickLoop()
			}
		}
	}
	return s
}

func (c ServerConfig) validate() error {
	switch {
	case (c.WebhookURL == "") != (c.WebhookSecret == ""):
		return errors.New("fakeprovider: ServerConfig: WebhookURL and WebhookSecret go together")
	case c.WebhookMaxAttempts < 0:
		return fmt.Errorf("fakeprovider: ServerConfig: WebhookMaxAttempts %d is negative", c.WebhookMaxAttempts)
	case c.WebhookBackoff < 0 || c.WebhookMaxBackoff < 0:
		return fmt.Errorf("fakeprovider: ServerConfig: negative webhook backoff (%v, max %v)", c.WebhookBackoff, c.WebhookMaxBackoff)
	}
	if c.WebhookURL != "" {
		u, err := url.Parse(c.WebhookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("fakeprovider: ServerConfig: WebhookURL %q: want an absolute http or https URL", c.WebhookURL)
		}
	}
	return c.WebhookFaults.Validate()
}

// Close stops the background goroutines and waits for them, abandons the
// deliveries not made yet (they stay counted in WebhookStats.Pending),
// and releases the requests held by Timeout faults (their connections are
// closed). Later Ticks do nothing. Close may be called more than once.
func (s *Server) Close() {
	s.closeOne.Do(func() {
		close(s.closing)
		s.cancel()
	})
	s.wg.Wait()
	if s.wh != nil {
		s.fake.unwatch(s.wh.log) // it announces nothing more
		if n := s.WebhookStats().Pending; n > 0 {
			s.log.Warn("fakeprovider: server closed with webhook deliveries not made", "pending", n)
		}
	}
}

func (s *Server) closed() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reqID := s.requestID()
	h := w.Header()
	h.Set("Request-Id", reqID)
	h.Set("Stripe-Version", APIVersion)
	if strings.HasPrefix(r.URL.Path, controlPrefix) {
		s.control(w, r)
		return
	}
	if msg := checkAuth(r.Header.Get("Authorization")); msg != "" {
		h.Set("Www-Authenticate", `Bearer realm="Stripe"`)
		writeError(w, http.StatusUnauthorized, apiError{Type: "invalid_request_error", Message: msg})
		return
	}
	const base = "/v1/payment_intents"
	switch rest, ok := strings.CutPrefix(r.URL.Path, base); {
	case ok && rest == "" && r.Method == http.MethodPost:
		s.create(w, r, reqID)
	case ok && rest == "" && r.Method == http.MethodGet:
		s.list(w, r)
	case ok && rest == "/search" && r.Method == http.MethodGet:
		s.search(w, r)
	case ok && strings.HasPrefix(rest, "/") && !strings.Contains(rest[1:], "/") && rest != "/" && r.Method == http.MethodGet:
		s.retrieve(w, r, rest[1:])
	default:
		writeError(w, http.StatusNotFound, apiError{Type: "invalid_request_error",
			Message: fmt.Sprintf("Unrecognized request URL (%s: %s). Please see https://stripe.com/docs or we can help at https://support.stripe.com/.", r.Method, r.URL.Path)})
	}
}

func (s *Server) requestID() string {
	s.reqSeq.Lock()
	defer s.reqSeq.Unlock()
	s.nextReq++
	return fmt.Sprintf("req_fake%014d", s.nextReq)
}

// checkAuth returns why the Authorization header is refused, or "".
func checkAuth(header string) string {
	var key string
	switch scheme, cred, _ := strings.Cut(header, " "); {
	case header == "":
		return "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for details, or we can help at https://support.stripe.com/."
	case strings.EqualFold(scheme, "Bearer"):
		key = strings.TrimSpace(cred)
	case strings.EqualFold(scheme, "Basic"):
		r := &http.Request{Header: http.Header{"Authorization": {header}}}
		key, _, _ = r.BasicAuth()
	default:
		return "Invalid Authorization header: use Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."
	}
	if !strings.HasPrefix(key, "sk_test_") || len(key) == len("sk_test_") {
		return fmt.Sprintf("Invalid API Key provided: %s (the fake provider accepts only test-mode secret keys, sk_test_...)", maskKey(key))
	}
	return ""
}

// maskKey hides all of a key but its prefix and last four characters, as
// Stripe's error messages do.
func maskKey(key string) string {
	prefix, _, found := strings.Cut(key, "_")
	if i := strings.Index(key, "_test_"); i >= 0 {
		prefix = key[:i+len("_test")]
	} else if i := strings.Index(key, "_live_"); i >= 0 {
		prefix = key[:i+len("_live")]
	} else if !found {
		prefix = ""
	}
	tail := ""
	if len(key) > 4 {
		tail = key[len(key)-4:]
	}
	if prefix == "" {
		return "****" + tail
	}
	return prefix + "_****" + tail
}

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

// retrieve serves GET /v1/payment_intents/{id} through Fake.Status, so
// that it settles, counts and reads stale as Status does.
func (s *Server) retrieve(w http.ResponseWriter, r *http.Request, id string) {
	if bad := onlyParams(r.URL.Query()); bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	res, err := s.fake.Status(r.Context(), id)
	if err != nil { // the client is gone
		dropConnection(w)
		return
	}
	c, ok := s.fake.charge(id)
	if res.Outcome == provider.NotFound || !ok {
		writeError(w, http.StatusNotFound, apiError{Type: "invalid_request_error", Code: ReasonNotFound, Param: "intent",
			DocURL: "https://stripe.com/docs/error-codes/resource-missing", Message: fmt.Sprintf("No such payment_intent: '%s'", id)})
		return
	}
	writeJSON(w, http.StatusOK, renderPI(c, res.Status))
}

// Limits of search, as Stripe's.
const (
	defaultSearchLimit = 10
	maxSearchLimit     = 100
)

// search serves GET /v1/payment_intents/search: the charges whose metadata
// matches, once Config.SearchLag has passed since their creation, newest
// first, limit a page, the next page's token in next_page.
func (s *Server) search(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if bad := onlyParams(q, "query", "limit", "page"); bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	key, value, ok := parseQuery(q.Get("query"))
	if !ok {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_invalid_string", Param: "query",
			Message: fmt.Sprintf("Invalid query %q: the fake provider understands only metadata['KEY']:'VALUE'", q.Get("query"))})
		return
	}
	limit, bad := parseLimit(q.Get("limit"), defaultSearchLimit, maxSearchLimit)
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	offset := 0
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(v, "page_"))
		if err != nil || n < 0 || !strings.HasPrefix(v, "page_") {
			writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_invalid_string", Param: "page",
				Message: fmt.Sprintf("Invalid page %q", v)})
			return
		}
		offset = n
	}
	found, err := s.fake.searchCharges(r.Context(), key, value)
	if err != nil {
		dropConnection(w)
		return
	}
	page := []paymentIntent{}
	if offset < len(found) {
		for _, c := range found[offset:min(offset+limit, len(found))] {
			page = append(page, renderPI(c, c.Status))
		}
	}
	res := searchResult{Object: "search_result", URL: "/v1/payment_intents/search", Data: page}
	if next := offset + limit; next < len(found) {
		res.HasMore = true
		token := fmt.Sprintf("page_%d", next)
		res.NextPage = &token
	}
	writeJSON(w, http.StatusOK, res)
}

// parseLimit parses a limit parameter: def when empty, else an integer in
// [1, most].
func parseLimit(v string, def, most int) (int, *apiError) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, &apiError{Type: "invalid_request_error", Code: "parameter_invalid_integer", Param: "limit",
			Message: fmt.Sprintf("Invalid limit %q: must be between 1 and %d", v, most)}
	}
	return n, nil
}

// Limits of list, as Stripe's.
const (
	defaultListLimit = 10
	maxListLimit     = 100
)

// createdBounds are the created filters of a list, with what each asks
// of a PaymentIntent's created (unix seconds) c given the value v.
var createdBounds = []struct {
	param string
	ok    func(c, v int64) bool
}{
	{"created", func(c, v int64) bool { return c == v }},
	{"created[gt]", func(c, v int64) bool { return c > v }},
	{"created[gte]", func(c, v int64) bool { return c >= v }},
	{"created[lt]", func(c, v int64) bool { return c < v }},
	{"created[lte]", func(c, v int64) bool { return c <= v }},
}

// list serves GET /v1/payment_intents (see Server).
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	allowed := []string{"limit", "starting_after", "ending_before"}
	for _, b := range createdBounds {
		allowed = append(allowed, b.param)
	}
	if bad := onlyParams(q, allowed...); bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	var checks []func(int64) bool
	for _, b := range createdBounds {
		if !q.Has(b.param) {
			continue
		}
		v, err := strconv.ParseInt(q.Get(b.param), 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_invalid_integer", Param: b.param,
				Message: fmt.Sprintf("Invalid integer: %s", q.Get(b.param))})
			return
		}
		checks = append(checks, func(c int64) bool { return b.ok(c, v) })
	}
	limit, bad := parseLimit(q.Get("limit"), defaultListLimit, maxListLimit)
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	after, before := q.Get("starting_after"), q.Get("ending_before")
	if after != "" && before != "" {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_invalid_string", Param: "ending_before",
			Message: "You may only specify one of these parameters: starting_after, ending_before."})
		return
	}
	cursor, cursorID, cursorParam := 0, after, "starting_after"
	if before != "" {
		cursorID, cursorParam = before, "ending_before"
	}
	if cursorID != "" {
		n, ok := s.fake.seqOf(cursorID)
		if !ok {
			writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: ReasonNotFound, Param: cursorParam,
				DocURL: "https://stripe.com/docs/error-codes/resource-missing", Message: fmt.Sprintf("No such payment_intent: '%s'", cursorID)})
			return
		}
		cursor = n
	}
	found, err := s.fake.listCharges(r.Context(), func(created int64) bool {
		for _, ok := range checks {
			if !ok(created) {
				return false
			}
		}
		return true
	})
	if err != nil { // the client is gone
		dropConnection(w)
		return
	}
	// found is newest first: seq decreasing.
	var page []listed
	hasMore := false
	switch {
	case after != "":
		rest := found[sort.Search(len(found), func(i int) bool { return found[i].seq < cursor }):]
		page, hasMore = rest[:min(limit, len(rest))], len(rest) > limit
	case before != "":
		newer := found[:sort.Search(len(found), func(i int) bool { return found[i].seq <= cursor })]
		start := max(0, len(newer)-limit)
		page, hasMore = newer[start:], start > 0
	default:
		page, hasMore = found[:min(limit, len(found))], len(found) > limit
	}
	res := listResult{Object: "list", URL: "/v1/payment_intents", HasMore: hasMore, Data: []paymentIntent{}}
	for _, l := range page {
		res.Data = append(res.Data, renderPI(l.c, l.c.Status))
	}
	writeJSON(w, http.StatusOK, res)
}

// parseQuery parses metadata['KEY']:'VALUE', with \' and \\ escapes in
// VALUE, as provider/stripe writes it.
func parseQuery(q string) (key, value string, ok bool) {
	rest, ok := strings.CutPrefix(q, "metadata['")
	if !ok {
		return "", "", false
	}
	key, rest, ok = strings.Cut(rest, "']:'")
	if !ok || key == "" || strings.ContainsAny(key, `'\`) {
		return "", "", false
	}
	var b strings.Builder
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; c {
		case '\\':
			if i+1 == len(rest) {
				return "", "", false
			}
			i++
			b.WriteByte(rest[i])
		case '\'':
			if i != len(rest)-1 {
				return "", "", false
			}
			return key, b.String(), true
		default:
			b.WriteByte(c)
		}
	}
	return "", "", false // no closing quote
}

// onlyParams returns a parameter_unknown error for a query parameter not
// in allowed.
func onlyParams(q url.Values, allowed ...string) *apiError {
	for name := range q {
		if !slices.Contains(allowed, name) {
			return &apiError{Type: "invalid_request_error", Code: "parameter_unknown", Param: name,
				Message: fmt.Sprintf("Received unknown parameter: %s", name)}
		}
	}
	return nil
}

// charge returns the charge id, as it is now (not settled).
func (f *Fake) charge(id string) (Charge, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.byID[id]
	if e == nil {
		return Charge{}, false
	}
	return e.Charge, true
}

// searchCharges is Search for the HTTP front end: every charge whose
// metadata key has value and that search can see (Config.SearchLag),
// settled as of now, newest first. It counts as a Search call.
func (f *Fake) searchCharges(ctx context.Context, key, value string) ([]Charge, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[provider.OpSearch]++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := f.cfg.Now()
	var out []Charge
	for i := len(f.ledger) - 1; i >= 0; i-- {
		e := f.ledger[i]
		if now.Sub(e.CreatedAt) < f.cfg.SearchLag {
			continue
		}
		if v, ok := metadataOf(e.Charge)[key]; !ok || v != value {
			continue
		}
		f.settle(e, now)
		out = append(out, e.Charge)
	}
	return out, nil
}

// listed is a charge as the HTTP list finds it, with its place in
// creation order (entry.seq), the cursor of stable pages.
type listed struct {
	c   Charge
	seq int
}

// listCharges is List for the HTTP front end: every charge List can see
// (Config.ListLag) whose created unix second keep accepts, settled as of
// now, newest first. It counts as a List call.
func (f *Fake) listCharges(ctx context.Context, keep func(created int64) bool) ([]listed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[provider.OpList]++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := f.cfg.Now()
	var out []listed
	for i := len(f.ledger) - 1; i >= 0; i-- {
		e := f.ledger[i]
		if !f.listable(e, now) || !keep(e.CreatedAt.Unix()) {
			continue
		}
		f.settle(e, now)
		out = append(out, listed{c: e.Charge, seq: e.seq})
	}
	return out, nil
}

// seqOf returns the place in creation order of the charge id.
func (f *Fake) seqOf(id string) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.byID[id]; e != nil {
		return e.seq, true
	}
	return 0, false
}

// dropConnection closes the request's connection without an answer: a
// lost reply. Where the connection cannot be hijacked (HTTP/2), the
// handler aborts, which resets the stream.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

// Wire format.

// paymentIntent is a PaymentIntent as Stripe renders it, with the fields
// a fake can fill.
type paymentIntent struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCapturable   int64             `json:"amount_capturable"`
	AmountReceived     int64             `json:"amount_received"`
	CanceledAt         *int64            `json:"canceled_at"`
	CancellationReason *string           `json:"cancellation_reason"`
	CaptureMethod      string            `json:"capture_method"`
	ClientSecret       string            `json:"client_secret"`
	ConfirmationMethod string            `json:"confirmation_method"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Customer           *string           `json:"customer"`
	Description        *string           `json:"description"`
	LastPaymentError   *apiError         `json:"last_payment_error"`
	LatestCharge       *string           `json:"latest_charge"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	NextAction         *nextAction       `json:"next_action"`
	PaymentMethod      *string           `json:"payment_method"`
	PaymentMethodTypes []string          `json:"payment_method_types"`
	Status             string            `json:"status"`
}

// nextAction is a PaymentIntent's next_action: what the customer must do.
type nextAction struct {
	Type string `json:"type"`
}

// apiError is a Stripe error object, as in {"error": ...} and in a
// PaymentIntent's last_payment_error.
type apiError struct {
	Type          string         `json:"type"`
	Code          string         `json:"code,omitempty"`
	DeclineCode   string         `json:"decline_code,omitempty"`
	DocURL        string         `json:"doc_url,omitempty"`
	Message       string         `json:"message"`
	Param         string         `json:"param,omitempty"`
	Charge        string         `json:"charge,omitempty"`
	PaymentIntent *paymentIntent `json:"payment_intent,omitempty"`
}

type errorBody struct {
	Error apiError `json:"error"`
}

// listResult is a list object as Stripe renders it.
type listResult struct {
	Object  string          `json:"object"`
	URL     string          `json:"url"`
	HasMore bool            `json:"has_more"`
	Data    []paymentIntent `json:"data"`
}

type searchResult struct {
	Object   string          `json:"object"`
	URL      string          `json:"url"`
	HasMore  bool            `json:"has_more"`
	NextPage *string         `json:"next_page"`
	Data     []paymentIntent `json:"data"`
}

// renderPI renders c as a PaymentIntent in status.
func renderPI(c Charge, status string) paymentIntent {
	charge := latestCharge(c.ID)
	pi := paymentIntent{
		ID:                 c.ID,
		Object:             "payment_intent",
		Amount:             c.Amount,
		CaptureMethod:      "automatic",
		ClientSecret:       c.ID + "_secret_" + clientSecretOf(c.ID),
		ConfirmationMethod: "automatic",
		Created:            c.CreatedAt.Unix(),
		Currency:           c.Currency,
		LatestCharge:       &charge,
		Metadata:           metadataOf(c),
		PaymentMethod:      &c.PaymentMethod,
		PaymentMethodTypes: []string{"card"},
		Status:             status,
	}
	if c.Description != "" {
		pi.Description = &c.Description
	}
	if c.PaymentMethod == "" {
		pi.PaymentMethod = nil
	}
	switch status {
	case StatusSucceeded:
		pi.AmountReceived = c.Amount
	case StatusRequiresAction:
		// 3-D Secure, for the customer's browser or app to handle.
		pi.NextAction = &nextAction{Type: "use_stripe_sdk"}
	case StatusRequiresPaymentMethod:
		e := cardError(c)
		pi.LastPaymentError = &e
	case StatusCanceled:
		at := c.CreatedAt
		if !c.MovedAt.IsZero() {
			at = c.MovedAt
		}
		sec := at.Unix()
		pi.CanceledAt = &sec
	}
	return pi
}

// cardError is the card error of c's decline.
func cardError(c Charge) apiError {
	if c.DeclineCode == DeclineAuthenticationRequired {
		return apiError{
			Type:        "card_error",
			Code:        DeclineAuthenticationRequired,
			DeclineCode: DeclineAuthenticationRequired,
			DocURL:      "https://stripe.com/docs/error-codes/authentication-required",
			Message:     "Your card was declined. This transaction requires authentication.",
			Charge:      latestCharge(c.ID),
		}
	}
	code := c.DeclineCode
	if code == "" {
		code = DeclineCode
	}
	return apiError{
		Type:        "card_error",
		Code:        code,
		DeclineCode: WireDeclineCode,
		DocURL:      "https://stripe.com/docs/error-codes/card-declined",
		Message:     "Your card was declined.",
		Charge:      latestCharge(c.ID),
	}
}

// clientSecretOf returns the secret part of the client secret of the
// PaymentIntent piID: letters and digits, as Stripe's (which
// provider/stripe's redaction relies on).
func clientSecretOf(piID string) string {
	return strings.ReplaceAll(strings.TrimPrefix(piID, "pi_"), "_", "")
}

func latestCharge(piID string) string { return "ch_" + strings.TrimPrefix(piID, "pi_") }

// metadataOf returns the metadata provider/stripe sets on c.
func metadataOf(c Charge) map[string]string {
	md := map[string]string{}
	if c.PurchaseID != "" {
		md["purchase_id"] = c.PurchaseID
	}
	if c.Customer != "" {
		md["customer_ref"] = c.Customer
	}
	return md
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	writeJSON(w, status, errorBody{e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // plain structs: cannot fail
		panic(fmt.Sprintf("fakeprovider: marshal %T: %v", v, err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
