// Package stripe implements provider.Provider on Stripe PaymentIntents and
// Refunds.
//
// It is the only package of payrecon that imports stripe-go. Every answer
// and error of Stripe is translated here, by one table (func translate in
// translate.go), into provider's neutral terms; no stripe-go type leaves
// the package.
//
// A charge is one PaymentIntent, created and confirmed in one call with
// the purchase's stored idempotency key, and tagged with metadata
// purchase_id so that Search can find it when its id was never learnt.
// payrecon charges with no customer present, so a request of version
// provider.RequestOffSession (every request stored now) is sent with
// off_session=true, and a card that demands authentication is declined
// (authentication_required) rather than left waiting in requires_action; a
// request stored before versions existed is replayed as it was first sent,
// without off_session.
// Every answer reports the purchase_id its PaymentIntent names, as stored,
// for payrecon's judge to compare; List reads the PaymentIntents created
// in a window, for the audit from Stripe's side.
//
// A refund is one Refund of a PaymentIntent (refunds.go), created with
// the refund's own stored idempotency key and tagged with metadata
// refund_id and purchase_id; its status is translated by a table of its
// own (refundStatusOutcomes), its errors as a charge's. ListRefunds reads
// a payment's refunds, ListRefundsCreated those created in a window.
//
// A dispute is read, never acted on (disputes.go): ListDisputes reads the
// Disputes opened in a window, and the charge.dispute.* events carry one;
// both are translated by one function (disputeOf).
package stripe

import (
	"context"
	"errors"
	"fmt"
	"github.com/payrecon/payrecon/internal/crashpoint"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/payrecon/payrecon/provider"
)

// Defaults of Config.
const (
	// DefaultAPIBase is Stripe's API base URL.
	DefaultAPIBase = stripego.APIURL
	// DefaultHTTPTimeout bounds one HTTP exchange of the default client. It
	// is a backstop for callers without a deadline: payrecon's worker bounds
	// each provider call with its own, shorter, context deadline.
	DefaultHTTPTimeout = 30 * time.Second
)

// Metadata keys set on every PaymentIntent this adapter creates.
const (
	// MetadataPurchaseID holds payrecon's purchase id; Search queries it.
	MetadataPurchaseID = "purchase_id"
	// MetadataCustomerRef holds the purchase's customer reference. It is
	// not sent as Stripe's customer parameter, which must be a cus_ id.
	MetadataCustomerRef = "customer_ref"
)

// ErrRejected means Stripe refused the request without acting on it (a 4xx
// other than a decline, a key in use, an idempotency mismatch, a rate
// limit or a missing PaymentIntent: invalid parameters, a bad or
// under-privileged key), or that the adapter refused to send it. Sending
// the same request again will not help. It is provider.ErrRejected, so
// the worker escalates at once instead of reconciling a call the provider
// never acted on.
var ErrRejected = provider.ErrRejected

// Config configures a Provider. The zero value of every field but
// SecretKey is a documented default.
type Config struct {
	// SecretKey is the Stripe secret (sk_…) or restricted (rk_…) key.
	// Required. It is parsed elsewhere (STRIPE_SECRET_KEY) and never
	// logged here.
	SecretKey string

	// APIBase overrides Stripe's API base URL, so that tests and the demo
	// can point the client at a local server (stripe-mock, httptest). An
	// absolute http or https URL; a trailing "/" or "/v1" is ignored.
	// Default DefaultAPIBase.
	APIBase string

	// HTTPClient makes the requests. Default: a client with Timeout
	// DefaultHTTPTimeout on http.DefaultTransport.
	HTTPClient *http.Client

	// MaxNetworkRetries is how many times stripe-go itself may resend a
	// request. Default 0, deliberately, and payrecon should keep it so.
	//
	// What stripe-go v82.5.1 retries (BackendImplementation.shouldRetry):
	// a Stripe JSON error is retried only when it is a 429 lock_timeout, so
	// JSON 409s and 5xx are returned at once whatever this says (and the
	// Stripe-Should-Retry header is never consulted for them); every other
	// failure is retried — connection refused or reset, EOF, the
	// http.Client timeout, and also any response whose body is not a Stripe
	// JSON error (an HTML 502 from a proxy, even a non-JSON 4xx) — but not a
	// cancelled or expired context. A retry reuses the request's
	// Idempotency-Key, so it cannot charge twice; but it sleeps 0.5–5 s with
	// time.Sleep, deaf to the caller's context, and hides the attempt from
	// payrecon's audit trail and metrics. payrecon already reconciles every
	// unknown outcome itself, with the same key, backoff and an attempt
	// budget; a second retry layer below it adds latency and invisibility
	// but no safety. So stripe-go reports every failure on its first
	// occurrence. (net/http itself still resends a request, once, when a
	// reused keep-alive connection closes before any answer: it does so
	// for requests carrying an Idempotency-Key, so the resend has the same
	// key and is safe.) Negative values are refused.
	MaxNetworkRetries int64

	// ListPageSize is how many objects each request of a listing (List,
	// ListRefunds, ListRefundsCreated, ListDisputes) asks for: from 1 to
	// 100. Default 100, Stripe's maximum, so that a listing costs as few
	// requests, and so as few of the caller's rate budget's tokens, as it
	// can.
	ListPageSize int64

	// Logger receives stripe-go's own log lines, with attribute
	// component=stripe-go: its Info and Error lines at Debug, its Warn
	// lines (retries, telemetry) at Warn. Its Error lines are demoted
	// because every error also comes back to the caller, who logs it with
	// context, and an expected answer (a 404 for an unknown id) would
	// otherwise be logged as an error. Its Debug lines are dropped: they
	// hold whole response bodies, client_secret included. Default
	// slog.Default().
	Logger *slog.Logger
}

// Provider is a provider.Provider backed by Stripe PaymentIntents. It is
// safe for concurrent use.
type Provider struct {
	client *stripego.Client
	// api and key make the calls stripe-go's services have no page-level
	// form of (ListEvents).
	api stripego.Backend
	key string
	// pageSize is Config.ListPageSize, defaulted.
	pageSize int64
	// account is the connected account every request is made on behalf
	// of (ForAccount), "" for the platform's own.
	account string
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Accounts = (*Provider)(nil)
)

// ForAccount implements provider.Accounts: a Provider sharing p's client
// whose every request carries the Stripe-Account header of account, so
// that Stripe acts in, and answers from, that account alone.
// PlatformAccount returns p's platform view.
func (p *Provider) ForAccount(account string) provider.Provider {
	v := *p
	v.account = account
	return &v
}

// on makes params a request on behalf of p's account, if it has one.
func (p *Provider) on(params interface{ SetStripeAccount(string) }) {
	if p.account != provider.PlatformAccount {
		params.SetStripeAccount(p.account)
	}
}

// New returns a Provider configured by cfg, or an error if cfg is invalid.
// It makes no request. It uses its own stripe-go client and never the
// package-global stripe.Key or backends.
func New(cfg Config) (*Provider, error) {
	key := cfg.SecretKey
	if key == "" {
		return nil, errors.New("stripe: Config.SecretKey is required")
	}
	if strings.TrimSpace(key) != key || strings.ContainsAny(key, " \t\r\n") {
		return nil, errors.New("stripe: Config.SecretKey contains white space")
	}
	base := cfg.APIBase
	if base == "" {
		base = DefaultAPIBase
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("stripe: Config.APIBase %q: want an absolute http or https URL", base)
	}
	if cfg.MaxNetworkRetries < 0 {
		return nil, fmt.Errorf("stripe: Config.MaxNetworkRetries %d is negative", cfg.MaxNetworkRetries)
	}
	pageSize := cfg.ListPageSize
	switch {
	case pageSize == 0:
		pageSize = maxListPageSize
	case pageSize < 0 || pageSize > maxListPageSize:
		return nil, fmt.Errorf("stripe: Config.ListPageSize %d: want 1 to %d", pageSize, maxListPageSize)
	}
	httpClient := cfg.HTTPClient
	if httpClient == nil {
		httpClient = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	if crashpoint.Enabled {
		// The request reached the provider and its reply arrived: a crash
		// here leaves an outcome nobody read.
		c := *httpClient
		c.Transport = crashAfterSend{next: c.Transport}
		httpClient = &c
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	backend := func(typ stripego.SupportedBackend, u *string) stripego.Backend {
		return stripego.GetBackendWithConfig(typ, &stripego.BackendConfig{
			HTTPClient:        httpClient,
			LeveledLogger:     leveledLogger{logger.With("component", "stripe-go")},
			MaxNetworkRetries: stripego.Int64(cfg.MaxNetworkRetries),
			URL:               u,
			// Request metrics sent to Stripe in later requests' headers:
			// of no use to payrecon.
			EnableTelemetry: stripego.Bool(false),
		})
	}
	backends := &stripego.Backends{
		API:         backend(stripego.APIBackend, stripego.String(base)),
		Connect:     backend(stripego.ConnectBackend, nil),
		Uploads:     backend(stripego.UploadsBackend, nil),
		MeterEvents: backend(stripego.MeterEventsBackend, nil),
	}
	return &Provider{client: stripego.NewClient(key, stripego.WithBackends(backends)), api: backends.API, key: key, pageSize: pageSize}, nil
}

// maxKeyLength is Stripe's limit on an idempotency key.
const maxKeyLength = 255

// Create creates and confirms a PaymentIntent for req with
// req.IdempotencyKey, and translates the answer (see translate). The
// parameters are a pure function of req, its version included, so a
// replay of the stored request is the same Stripe request and Stripe
// answers it from its idempotency cache while it keeps the key. A request
// without a key is refused before sending (ErrRejected): stripe-go would
// invent a random key, and a replay could then charge twice. So is a
// request of a version this build does not know (stored by a newer
// payrecon): what it sent cannot be sent again.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Result, error) {
	where := fmt.Sprintf("create payment intent (key %s)", req.IdempotencyKey)
	switch key := req.IdempotencyKey; {
	case key == "" || strings.TrimSpace(key) != key:
		return provider.Result{}, fmt.Errorf("stripe: %s: empty or padded idempotency key: %w", where, ErrRejected)
	case len(key) > maxKeyLength:
		return provider.Result{}, fmt.Errorf("stripe: %s: idempotency key longer than %d bytes: %w", where, maxKeyLength, ErrRejected)
	case !req.Version.Known():
		return provider.Result{}, fmt.Errorf("stripe: %s: request version %d unknown to this build (newest %d): %w",
			where, req.Version, provider.CurrentRequestVersion, ErrRejected)
	}
	if err := ctx.Err(); err != nil {
		return provider.Result{}, notSentYet(where, err)
	}
	params := createParams(req)
	p.on(params)
	pi, err := p.client.V1PaymentIntents.Create(ctx, params)
	return translate(provider.OpCreate, where, pi, err)
}

// createParams returns the Stripe parameters for req, from req alone.
// Changing what it sends for an existing version changes the parameters of
// requests whose keys Stripe still holds: their replays would then fail as
// idempotency mismatches. A change is a new provider.RequestVersion, and
// what every older version sends stays as it was.
//
//	provider.RequestOnSession    the parameters below
//	provider.RequestOffSession   the same and off_session=true
func createParams(req provider.CreateRequest) *stripego.PaymentIntentCreateParams {
	params := &stripego.PaymentIntentCreateParams{
		Amount:        stripego.Int64(req.Amount),
		Currency:      stripego.String(req.Currency),
		PaymentMethod: stripego.String(req.PaymentMethod),
		Confirm:       stripego.Bool(true),
		// payrecon charges a card PaymentMethod it already holds, from the
		// server, with nobody to redirect. Naming the type keeps Stripe
		// from applying the Dashboard's automatic payment methods, which
		// would demand a return_url on confirm (the alternative,
		// automatic_payment_methods[allow_redirects]=never, still makes the
		// accepted types depend on Dashboard settings). A card that needs
		// 3-D Secure is declined off-session; on-session (a request of
		// RequestOnSession) it comes back requires_action (Pending). Neither
		// needs a return_url.
		PaymentMethodTypes: stripego.StringSlice([]string{"card"}),
	}
	if req.OffSession() {
		// Merchant-initiated: nobody is there to authenticate, so Stripe
		// declines a card that demands it (a 402 card_error
		// authentication_required, the intent in requires_payment_method)
		// instead of leaving it in requires_action, and may apply the
		// exemptions of off-session payments. Stripe allows it with
		// confirm=true only, which payrecon always sends.
		params.OffSession = stripego.Bool(true)
	}
	if req.Description != "" {
		params.Description = stripego.String(req.Description)
	}
	params.AddMetadata(MetadataPurchaseID, req.PurchaseID)
	if req.Customer != "" {
		params.AddMetadata(MetadataCustomerRef, req.Customer)
	}
	params.SetIdempotencyKey(req.IdempotencyKey)
	return params
}

// Status retrieves the PaymentIntent paymentID and translates it (see
// translate). An id Stripe does not know (404 resource_missing) gives
// Outcome NotFound with Reason "resource_missing" and no error.
func (p *Provider) Status(ctx context.Context, paymentID string) (provider.Result, error) {
	where := fmt.Sprintf("retrieve payment intent %s", paymentID)
	if paymentID == "" {
		return provider.Result{}, fmt.Errorf("stripe: %s: empty payment id: %w", where, ErrRejected)
	}
	if err := ctx.Err(); err != nil {
		return provider.Result{}, notSentYet(where, err)
	}
	params := &stripego.PaymentIntentRetrieveParams{}
	p.on(params)
	pi, err := p.client.V1PaymentIntents.Retrieve(ctx, paymentID, params)
	return translate(provider.OpStatus, where, pi, err)
}

// maxSearchResults caps how many PaymentIntents Search reads for one
// purchase: one page. More than one is already a double charge to report.
const maxSearchResults = 100

// Search finds the PaymentIntents whose metadata purchase_id is purchaseID
// with Stripe's search API, which lags writes (normally by under a minute,
// more during incidents): no result gives Outcome NotFound, never a
// decline.
//
// Every result is reported as Stripe holds it: the Result's PurchaseID is
// the chosen PaymentIntent's metadata purchase_id, exactly as stored ("" if
// none), never the purchaseID searched for. A result whose purchase_id is
// not exactly purchaseID (a search index that matched loosely, a mock
// answering any query) is never chosen over one that names the purchase.
// Of the results that name it, Search reports a succeeded one if any, else
// a pending one, else a declined one, the oldest of its kind. When none
// names it, Search still reports the best of the others by the same order,
// with the PurchaseID it names: the caller's judge sees that the payment is
// not the purchase's, and escalates.
//
// Charges is how many results that name the purchase took or may take
// money (Outcome Succeeded or Pending); more than one is a double charge.
// Results naming another purchase or none never count. Reason gets "N
// charges for purchase ID" when more than one result names the purchase,
// declines included, and "K results not naming purchase ID" when some do
// not. Search reads at most maxSearchResults results: past that, both
// counts and Charges are lower bounds, and the counts in Reason end in
// "+".
//
// A result in a status the status table does not know fails the whole
// search (outcome Unknown), as it fails Status.
func (p *Provider) Search(ctx context.Context, purchaseID string) (provider.Result, error) {
	where := fmt.Sprintf("search payment intents (purchase %s)", purchaseID)
	if purchaseID == "" {
		return provider.Result{}, fmt.Errorf("stripe: %s: empty purchase id: %w", where, ErrRejected)
	}
	if err := ctx.Err(); err != nil {
		return provider.Result{}, notSentYet(where, err)
	}
	params := &stripego.PaymentIntentSearchParams{}
	params.Query = searchQuery(purchaseID)
	params.Limit = stripego.Int64(maxSearchResults)
	p.on(params)

	var (
		best    provider.Result
		bestKey searchKey
		read    int // results read
		named   int // of which name the purchase
		charges int // of which took or may take money
	)
	for pi, err := range p.client.V1PaymentIntents.Search(ctx, params) {
		if err != nil {
			return translate(provider.OpSearch, where, nil, err)
		}
		res, err := translate(provider.OpSearch, where, pi, nil)
		if err != nil {
			return res, err
		}
		read++
		names := res.PurchaseID == purchaseID
		if names {
			named++
			if res.Outcome == provider.Succeeded || res.Outcome == provider.Pending {
				charges++
			}
		}
		key := searchKey{foreign: !names, rank: searchRank(res.Outcome), created: pi.Created}
		if read == 1 || key.before(bestKey) {
			best, bestKey = res, key
		}
		if read == maxSearchResults {
			break
		}
	}
	if read == 0 {
		return provider.Result{Outcome: provider.NotFound}, nil
	}
	best.Charges = charges
	count := func(n int) string {
		if read == maxSearchResults {
			return fmt.Sprintf("%d+", n)
		}
		return fmt.Sprint(n)
	}
	reasons := []string{}
	if best.Reason != "" {
		reasons = append(reasons, best.Reason)
	}
	if named > 1 {
		reasons = append(reasons, fmt.Sprintf("%s charges for purchase %s", count(named), purchaseID))
	}
	if other := read - named; other > 0 {
		results := "results"
		if other == 1 && read < maxSearchResults {
			results = "result"
		}
		reasons = append(reasons, fmt.Sprintf("%s %s not naming purchase %s", count(other), results, purchaseID))
	}
	best.Reason = strings.Join(reasons, "; ")
	return best, nil
}

// searchKey orders the results of a search: see before.
type searchKey struct {
	// foreign: the result's metadata does not name the purchase.
	foreign bool
	// rank is searchRank of its outcome.
	rank int
	// created is its creation time, in Unix seconds.
	created int64
}

// before reports whether k is a better answer than o: one naming the
// purchase before one that does not, then by rank, then the older.
func (k searchKey) before(o searchKey) bool {
	switch {
	case k.foreign != o.foreign:
		return !k.foreign
	case k.rank != o.rank:
		return k.rank < o.rank
	}
	return k.created < o.created
}

// maxListPageSize is the most objects Stripe returns in one page of a
// listing, and Config.ListPageSize's default.
const maxListPageSize = 100

// List returns every PaymentIntent Stripe created within w, oldest first,
// with Stripe's list API (GET /v1/payment_intents), reading every page
// (see listPages: one request per page of Config.ListPageSize, gate passed
// before each). Unlike Search it reads Stripe's records, not a lagging
// index.
//
// Stripe filters creation times in whole Unix seconds, so the request is
// created[gte]=floor(w.From) and created[lt]=ceil(w.Until): a window whose
// bounds are not whole seconds is widened to the seconds that cover it,
// and List returns what Stripe returned for that range, without trimming
// it to w. The extra payments are harmless to the audit, which matches
// payments to purchases idempotently and may list overlapping windows.
// Payments are sorted by creation time, oldest first (Stripe lists newest
// first); those created in the same second keep Stripe's order, reversed.
//
// Each PaymentIntent becomes a provider.Payment: its id, its metadata
// purchase_id exactly as stored ("" if none), amount, currency, status,
// Outcome by the status table of the other calls (statusOutcomes; a status
// it does not know gives Outcome Unknown for that payment rather than
// failing the listing), and creation time in UTC.
//
// A failure on any page returns no payments and the error, translated as
// for the other calls (see translate; a 404 means a misconfigured API
// base and wraps ErrRejected); so does an error of gate, wrapped. A window
// with a zero bound, starting before the Unix epoch, or whose Until is not
// after its From is refused before sending (ErrRejected): an audit of
// nothing is a caller's bug.
func (p *Provider) List(ctx context.Context, w provider.Window, gate provider.PageGate) ([]provider.Payment, error) {
	where := fmt.Sprintf("list payment intents created in [%s, %s)", formatBound(w.From), formatBound(w.Until))
	if err := checkWindow(where, w); err != nil {
		return nil, err
	}
	var payments []provider.Payment
	err := listPages(ctx, gate, where, provider.OpList, p.pageSize,
		func(ctx context.Context, after *string) stripego.Seq2[*stripego.PaymentIntent, error] {
			params := &stripego.PaymentIntentListParams{
				CreatedRange: &stripego.RangeQueryParams{
					GreaterThanOrEqual: w.From.Unix(), // floor: Go keeps nanoseconds non-negative
					LesserThan:         ceilUnix(w.Until),
				},
			}
			params.Limit, params.StartingAfter, params.Single = stripego.Int64(p.pageSize), after, true
			p.on(params)
			return p.client.V1PaymentIntents.List(ctx, params)
		},
		func(pi *stripego.PaymentIntent) (string, error) {
			payments = append(payments, paymentOf(pi))
			return pi.ID, nil
		})
	if err != nil {
		return nil, err
	}
	slices.Reverse(payments)
	slices.SortStableFunc(payments, func(a, b provider.Payment) int { return a.Created.Compare(b.Created) })
	return payments, nil
}

// listPages reads a listing one request at a time: it passes gate, then
// reads one page of at most size objects with stripe-go's iterator, made
// single-page (ListParams.Single) so that it sends exactly one request,
// handing each object to add, which returns its id, or an error that
// stops the listing (an object the caller cannot read, whose id may not
// even serve as the next page's cursor). A full page may have more after
// it, and the next request starts after its last object's id;
// a page less than full was the last. (Stripe's has_more is not visible
// through the iterator, so a listing whose last page is exactly full costs
// one request more, for an empty page.) page returns the iterator of the
// page starting after *after (nil: the first). An error of gate, of a
// page or of add stops the listing; the caller returns no objects.
func listPages[T any](ctx context.Context, gate provider.PageGate, where string, op provider.Op, size int64,
	page func(ctx context.Context, after *string) stripego.Seq2[T, error], add func(T) (string, error)) error {
	var after *string
	for n := 1; ; n++ {
		if err := gate.Pass(ctx); err != nil {
			return fmt.Errorf("stripe: %s: page %d not sent: %w", where, n, err)
		}
		if err := ctx.Err(); err != nil {
			return notSentYet(where, err)
		}
		var read int64
		var last string
		for obj, err := range page(ctx, after) {
			if err != nil {
				return listErrorOf(op, where, err)
			}
			id, err := add(obj)
			if err != nil {
				return err
			}
			last = id
			read++
		}
		if read < size {
			return nil
		}
		after = stripego.String(last)
	}
}

// checkWindow refuses, before sending, a window with a zero bound, one
// starting before the Unix epoch, and one whose Until is not after its
// From: an error wrapping ErrRejected.
func checkWindow(where string, w provider.Window) error {
	switch {
	case w.From.IsZero() || w.Until.IsZero():
		return fmt.Errorf("stripe: %s: window without a bound: %w", where, ErrRejected)
	case w.From.Before(time.Unix(0, 0)):
		return fmt.Errorf("stripe: %s: window starts before the Unix epoch: %w", where, ErrRejected)
	case !w.Until.After(w.From):
		return fmt.Errorf("stripe: %s: empty window: %w", where, ErrRejected)
	}
	return nil
}

// ceilUnix returns t in Unix seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() != 0 {
		s++
	}
	return s
}

// formatBound formats a window bound for an error message.
func formatBound(t time.Time) string {
	if t.IsZero() {
		return "zero"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// listErrorOf translates the error of a listing op. The answers
// translateError turns into results without error (a decline, a key in
// use) cannot answer a listing; should one come, the listing's outcome is
// unknown.
func listErrorOf(op provider.Op, where string, err error) error {
	res, terr := translateError(op, where, err)
	if terr == nil {
		return fmt.Errorf("stripe: %s: unexpected %s answer (%s): outcome unknown", where, res.Outcome, res.Reason)
	}
	return terr
}

// notSentYet reports a call not sent because its context was already done.
// The caller gave up, so no sentinel applies: the outcome is Unknown,
// as for any other call cut short.
func notSentYet(where string, err error) error {
	return fmt.Errorf("stripe: %s: not sent: %w", where, err)
}

// searchQuery returns the search query for PaymentIntents with metadata
// purchase_id equal to purchaseID. Stripe's query language quotes strings
// with ' and escapes quotes inside them with a backslash; the backslash
// itself is escaped too, so that no id can end the string early.
func searchQuery(purchaseID string) string {
	quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(purchaseID)
	return fmt.Sprintf("metadata['%s']:'%s'", MetadataPurchaseID, quoted)
}

// searchRank orders the outcomes of several matches: lower is preferred.
func searchRank(o provider.Outcome) int {
	switch o {
	case provider.Succeeded:
		return 0
	case provider.Pending:
		return 1
	}
	return 2
}

// crashAfterSend hits crashpoint.CallSent once a reply has arrived, before
// anyone reads it. Only a build with the failpoints tag installs it.
type crashAfterSend struct{ next http.RoundTripper }

func (c crashAfterSend) RoundTrip(r *http.Request) (*http.Response, error) {
	next := c.next
	if next == nil {
		next = http.DefaultTransport
	}
	res, err := next.RoundTrip(r)
	if err == nil && r.Method == http.MethodPost {
		crashpoint.Hit(crashpoint.CallSent)
	}
	return res, err
}
