package fakeprovider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
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

	// ConnectWebhookURL and ConnectWebhookSecret are the Connect
	// endpoint's, where the connected accounts' events go (each naming
	// its account, see Server.Account), signed with this secret, with the
	// delivery settings and faults below; WebhookURL's rules apply. Both
	// or neither; they need no WebhookURL. Default empty: the connected
	// accounts' events are in their event logs, never sent.
	ConnectWebhookURL    string
	ConnectWebhookSecret string
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
//	POST /v1/refunds                   refund a PaymentIntent: payment_intent and
//	                                   amount (both required), reason,
//	                                   metadata[refund_id], metadata[purchase_id]
//	GET  /v1/refunds/{id}              retrieve; 404 resource_missing if unknown
//	GET  /v1/refunds                   list: payment_intent, and the filters and
//	                                   cursors of the PaymentIntents' list
//
//	GET  /v1/disputes/{id}             retrieve, expand[]=payment_intent; 404
//	                                   resource_missing if unknown
//	GET  /v1/disputes                  list: payment_intent, charge,
//	                                   expand[]=data.payment_intent, and the
//	                                   filters and cursors of the
//	                                   PaymentIntents' list
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
// The refunds' list is the same over refunds (url "/v1/refunds"), each
// request one RefundList call, and payment_intent keeps the refunds of
// one PaymentIntent (an unknown one is a 400 resource_missing). The
// disputes' list is the same over disputes (url "/v1/disputes"), each
// request one provider.OpDisputeList call, with the filters payment_intent
// and charge; expand[]=data.payment_intent renders each dispute's
// PaymentIntent, metadata included, instead of its id.
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
// A refund create goes through the same key store (a key is shared by
// both endpoints, as Stripe's are: a create's key sent to /v1/refunds is
// a 400 idempotency_error), with the same transport faults
// (Config.RefundFaults, Fake.ScriptRefund). A refund Stripe refuses is a
// 400 invalid_request_error that saves no key: resource_missing for an
// unknown PaymentIntent, charge_not_refundable for one that did not
// succeed, amount_too_large for an amount over what remains of it after
// its refunds (pending ones included), charge_already_refunded when
// nothing remains, charge_disputed when a dispute charged it back (see
// ErrChargeDisputed).
//
// Webhooks: see Tick, Events, Deliveries and WebhookStats.
//
// Connected accounts (Stripe Connect): a request with a Stripe-Account
// header (acct_ followed by letters and digits), to /v1 and /_fake alike,
// is served by that account's Server (Account), from the account's books
// alone (Fake.Account) and under its own rate limits; without the header,
// by the platform's. A header that names no account is a 400
// invalid_request_error account_invalid, and nothing is done. Each event
// of an account carries its top-level "account" and is sent to
// ConnectWebhookURL. The platform's outage (POST /_fake/outage without the
// header) refuses every account's calls too; an account's, its alone.
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
//	POST /_fake/refunds                       Server.RefundOutside: payment_intent,
//	                                          amount (absent or 0: all that
//	                                          remains), refund_id, purchase_id,
//	                                          reason, status, webhooks; answers
//	                                          the Refund, or a 400 as a refund
//	                                          create's
//	POST /_fake/refunds/{id}/status           Server.SetRefundStatus: status,
//	                                          webhooks; answers the Refund, or a
//	                                          404 resource_missing for an unknown id
//	POST /_fake/disputes                      Server.OpenDispute: payment (or
//	                                          payment_intent), amount (absent or 0:
//	                                          all that remains), reason, inquiry,
//	                                          webhooks; answers the Dispute
//	POST /_fake/disputes/{id}                 Server.MoveDispute: status, webhooks;
//	                                          answers the Dispute, a 400 for a move
//	                                          Stripe's disputes never make, or a 404
//	                                          resource_missing for an unknown id
//	POST /_fake/outage                        Server.Outage: duration (a Go
//	                                          duration, 0 ends it); every /v1
//	                                          call is a 503 until it ends
//	GET  /_fake/webhooks                      the events emitted, their
//	                                          deliveries and the counts, as JSON
//	                                          (see WebhookView)
//
// Each acts on the account its Stripe-Account header names, the platform
// without one: GET /_fake/ledger with the header is that account's ledger.
// Their parameters come form-encoded (body or query) or as a JSON object
// (Content-Type: application/json; amount a number, webhooks and inquiry
// booleans).
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

	outageMu    sync.Mutex
	outageUntil time.Time // every /v1 call is refused before it (Outage)

	// accounts are the connected accounts' Servers (accounts.go), and
	// parent, for one of them, the platform's Server.
	accountsMu sync.Mutex
	accounts   map[string]*Server
	parent     *Server
}

var _ http.Handler = (*Server)(nil)

// NewServer returns a Server for f with cfg's zero fields defaulted, and
// starts its background goroutines (see ServerConfig.SyncDelivery). It
// serves f's connected accounts too, those made later included (Account). It
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
		}
	}
	// The ticker ticks the connected accounts' Servers too.
	if (cfg.WebhookURL != "" || cfg.ConnectWebhookURL != "") && !cfg.SyncDelivery && cfg.TickEvery > 0 {
		s.wg.Add(1)
		go s.tickLoop()
	}
	f.serveAccounts(s)
	return s
}

func (c ServerConfig) validate() error {
	switch {
	case (c.WebhookURL == "") != (c.WebhookSecret == ""):
		return errors.New("fakeprovider: ServerConfig: WebhookURL and WebhookSecret go together")
	case (c.ConnectWebhookURL == "") != (c.ConnectWebhookSecret == ""):
		return errors.New("fakeprovider: ServerConfig: ConnectWebhookURL and ConnectWebhookSecret go together")
	case c.WebhookMaxAttempts < 0:
		return fmt.Errorf("fakeprovider: ServerConfig: WebhookMaxAttempts %d is negative", c.WebhookMaxAttempts)
	case c.WebhookBackoff < 0 || c.WebhookMaxBackoff < 0:
		return fmt.Errorf("fakeprovider: ServerConfig: negative webhook backoff (%v, max %v)", c.WebhookBackoff, c.WebhookMaxBackoff)
	}
	for _, u := range []struct{ name, v string }{{"WebhookURL", c.WebhookURL}, {"ConnectWebhookURL", c.ConnectWebhookURL}} {
		if u.v == "" {
			continue
		}
		p, err := url.Parse(u.v)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("fakeprovider: ServerConfig: %s %q: want an absolute http or https URL", u.name, u.v)
		}
	}
	return c.WebhookFaults.Validate()
}

// Close stops the background goroutines and waits for them, abandons the
// deliveries not made yet (they stay counted in WebhookStats.Pending),
// and releases the requests held by Timeout faults (their connections are
// closed), its connected accounts' Servers' included. Later Ticks do
// nothing. Close may be called more than once.
func (s *Server) Close() {
	s.closeOne.Do(func() {
		close(s.closing)
		s.cancel()
	})
	s.fake.unserveAccounts(s)
	for _, sub := range s.accountServers() {
		sub.Close() // one made from now on closes itself
	}
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
	s.serve(w, r, s.requestID())
}

// serve serves r, whose request id is reqID: a request with a
// Stripe-Account header is served by that account's Server.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, reqID string) {
	h := w.Header()
	h.Set("Request-Id", reqID)
	h.Set("Stripe-Version", APIVersion)
	account := r.Header.Get("Stripe-Account")
	if _, err := provider.ParseAccount(account); err != nil {
		refuseAccount(w, account)
		return
	}
	if strings.HasPrefix(r.URL.Path, controlPrefix) {
		if account != provider.PlatformAccount {
			s.accountServer(account).serve(w, withoutAccount(r), reqID)
			return
		}
		s.control(w, r)
		return
	}
	if s.inOutage() {
		refuseInOutage(w)
		return
	}
	if msg := checkAuth(r.Header.Get("Authorization")); msg != "" {
		h.Set("Www-Authenticate", `Bearer realm="Stripe"`)
		writeError(w, http.StatusUnauthorized, apiError{Type: "invalid_request_error", Message: msg})
		return
	}
	if account != provider.PlatformAccount {
		s.accountServer(account).serve(w, withoutAccount(r), reqID)
		return
	}
	r, ok := s.throttleHTTP(w, r)
	if !ok {
		return
	}
	if rest, ok := strings.CutPrefix(r.URL.Path, "/v1/refunds"); ok {
		switch {
		case rest == "" && r.Method == http.MethodPost:
			s.createRefund(w, r)
			return
		case rest == "" && r.Method == http.MethodGet:
			s.listRefunds(w, r)
			return
		case strings.HasPrefix(rest, "/") && rest != "/" && !strings.Contains(rest[1:], "/") && r.Method == http.MethodGet:
			s.retrieveRefund(w, r, rest[1:])
			return
		}
	}
	if r.URL.Path == "/v1/events" && r.Method == http.MethodGet {
		s.listEvents(w, r)
		return
	}
	if rest, ok := strings.CutPrefix(r.URL.Path, "/v1/disputes"); ok && r.Method == http.MethodGet {
		switch {
		case rest == "":
			s.listDisputes(w, r)
			return
		case strings.HasPrefix(rest, "/") && rest != "/" && !strings.Contains(rest[1:], "/"):
			s.retrieveDispute(w, r, rest[1:])
			return
		}
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

// requestID returns a new request id, unique among the platform's and
// its accounts' Servers.
func (s *Server) requestID() string {
	if s.parent != nil {
		return s.parent.requestID()
	}
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
