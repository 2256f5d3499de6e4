// Package fakeprovider is an in-process payment provider that behaves like
// Stripe, for tests that count real charges instead of mocking calls.
//
// A Fake implements provider.Provider over its own ledger of charges
// (Stripe PaymentIntents) and honours idempotency keys as Stripe does: the
// first create with a key saves its response, and a create with the same
// key and parameters replays that response unchanged, without charging
// again, until the key is older than Config.KeyRetention. Then the key is
// forgotten and a replay charges a second time: the double charge payrecon
// must never cause. The same key with other parameters is an error wrapping
// provider.ErrIdempotencyMismatch; a create arriving while another with its
// key is in flight answers Pending with Reason "idempotency_key_in_use".
// The payment method "pm_card_chargeDeclined" is declined, as in Stripe
// test mode; "pm_card_authenticationRequired" demands authentication (3-D
// Secure), as in Stripe test mode: an off-session request (the
// request's version, provider.CreateRequest.OffSession; off_session=true
// over HTTP) is declined with code "authentication_required", an
// on-session one waits in requires_action for a customer who never comes;
// "pm_card_createDispute" and "pm_card_createDisputeInquiry" succeed, then
// their payment is disputed at once (a chargeback, an inquiry), as Stripe's
// test cards; any other succeeds unless a fault says otherwise.
//
// It keeps refunds too (CreateRefund: Stripe Refunds, ids "re_…"), each
// under its own idempotency key in the same key store, with Stripe's
// rules: only a succeeded payment is refunded, and the refunds of a
// payment that have not failed, pending ones included, never sum beyond
// its amount; a refund that would is refused (provider.ErrRejected) and
// nothing is made. GetRefund, ListRefunds and ListRefundsCreated read
// them; Refunds, RefundsOf, RefundsFor, Refunded, NetAmount and
// NetCharges count them for tests.
//
// Disputes (disputes.go: Stripe Disputes, ids "du_…") are the card
// network's, never payrecon's: a test opens one of a succeeded payment
// (OpenDispute: a chargeback, its amount withdrawn, or an inquiry) and
// moves it forward only, as Stripe's do (MoveDispute: review, escalation,
// won, lost, ...). Each change logs Stripe's charge.dispute.* events. A
// payment charged back (a chargeback open, or lost) refuses refunds
// (ErrChargeDisputed, Stripe's charge_disputed). ListDisputes and GET
// /v1/disputes list them; Disputes and DisputesOf count them.
//
// Faults (see Fault and ParseConfig) make it misbehave the way real
// providers do: refuse before acting, time out, lose the reply after
// charging, leave a charge processing, answer a stale status, lag in
// search, decline. Refund creates get the same faults, acted out on the
// refund, drawn from probabilities of their own (Config.RefundFaults) or
// scripted (Fake.ScriptRefund).
//
// List (provider.Provider's) reads the ledger itself, oldest first, but
// may lag a little behind new charges (Config.ListLag).
//
// The fake is adversarial and observable beyond Stripe's API: a test can
// make a charge payrecon did not make (ChargeOutside: from a dashboard,
// another system, a second charge for a purchase, another amount), move a
// charge to another status at any time (SetStatus: a late approval after
// a decline, a cancellation), refund outside payrecon (RefundOutside),
// move a refund (SetRefundStatus), open and move disputes, and read the
// whole ledger, refunds and disputes included, with the calls it received
// (Ledger, also served by a Server as GET /_fake/ledger).
//
// Determinism: time comes only from Config.Now, so a test with a fake clock
// decides when processing settles, when search and list catch up and when
// keys expire; nothing sleeps. A Create call's fault comes from the purchase's
// script (Fake.Script) when it has one, otherwise from the configured
// probabilities, drawn from a math/rand/v2 source seeded by Config.Seed and
// the purchase id: one source per purchase, one draw per Create call, so
// the n-th Create for a purchase gets the same fault for a given seed
// however calls for different purchases interleave. A CreateRefund call's
// fault is drawn alike, from a source of its own per refund (the request's
// RefundID), apart from the purchase's.
//
// Ids: a payment id is "pi_fake", the fake's Config.Instance, "_" and a
// sequence number counting from 1 ("pi_fake3f09a2c1_00000000000000000001",
// ...); refund ids ("re_fake..."), dispute ids ("du_fake...") and event
// ids ("evt_fake...") are built the same way, each with a sequence of its
// own. A connected account's instance is the platform's, "x" and the
// account's letters after "acct_" ("pi_fake3f09a2c1x1AbC_...").
//
// Connected accounts (accounts.go): Fake.Account and ForAccount return the
// fake of a platform's connected account (Stripe Connect), a Fake of its
// own, made on first use: its ledger, keys, event log, refunds, disputes
// and rate limits are its alone, and its ids, whose instance names the
// account, are found in no other account. Its events carry the account.
//
// The Fake keeps an event log, as Stripe does (events.go): an event for
// every change of a charge, a refund or a dispute, announced by a webhook
// or not, listed newest first by ListEvents and a Server's GET
// /v1/events. The default Instance is random, so that fakes in several
// processes sharing one database (whose payment ids and webhook inbox keys
// are unique) do not collide; a test that needs the same ids on every run
// sets it.
//
// A Server (NewServer) serves a Fake over HTTP in Stripe's wire format, for
// the real Stripe adapter (provider/stripe) to talk to, and sends signed
// Stripe webhooks for the ledger's changes, with delivery faults of their
// own (WebhookFaults).
package fakeprovider

import (
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// Stripe's PaymentIntent statuses that the fake uses.
const (
	StatusSucceeded             = "succeeded"
	StatusProcessing            = "processing"
	StatusRequiresAction        = "requires_action"
	StatusRequiresPaymentMethod = "requires_payment_method" // declined
	StatusCanceled              = "canceled"
)

// Stripe test-mode payment methods the fake understands.
const (
	// PaymentMethodVisa succeeds.
	PaymentMethodVisa = "pm_card_visa"
	// PaymentMethodDeclined is declined with code DeclineCode.
	PaymentMethodDeclined = "pm_card_chargeDeclined"
	// PaymentMethodAuthenticationRequired demands authentication on every
	// charge, as Stripe's test card 4000 0027 6000 3184: off-session it is
	// declined with code DeclineAuthenticationRequired, on-session it
	// stays in requires_action (Pending), since nobody authenticates.
	PaymentMethodAuthenticationRequired = "pm_card_authenticationRequired"
	// PaymentMethodDispute succeeds, then its payment is disputed at once,
	// as Stripe's test card 4000 0000 0000 0259: a chargeback
	// (needs_response, reason fraudulent, its amount withdrawn), opened
	// when the payment is first succeeded (see Fake.OpenDispute).
	PaymentMethodDispute = "pm_card_createDispute"
	// PaymentMethodDisputeInquiry succeeds, then an inquiry of its payment
	// opens at once (warning_needs_response), as Stripe's test card.
	PaymentMethodDisputeInquiry = "pm_card_createDisputeInquiry"
)

// Reasons the fake reports.
const (
	// DeclineCode is the Reason of every decline but those of
	// PaymentMethodAuthenticationRequired.
	DeclineCode = "card_declined"
	// DeclineAuthenticationRequired is the Reason of the decline of an
	// off-session charge on PaymentMethodAuthenticationRequired: Stripe's
	// error code and decline code, both, for a card that demands
	// authentication when nobody can give it.
	DeclineAuthenticationRequired = "authentication_required"
	// ReasonKeyInUse is the Reason of the Pending answer to a create whose
	// key is in flight (Stripe's 409 idempotency_key_in_use).
	ReasonKeyInUse = "idempotency_key_in_use"
	// ReasonNotFound is the Reason of a NotFound status lookup (Stripe's
	// 404 resource_missing).
	ReasonNotFound = "resource_missing"
)

// ErrInvalidRequest is wrapped by the error of a create Stripe would reject
// as invalid (amount not positive, no currency), and of an invalid
// OutsideCharge. The provider did not act, but the request will never
// succeed, so it is not provider.ErrRetryLater.
var ErrInvalidRequest = fmt.Errorf("fakeprovider: invalid request: %w", provider.ErrRejected)

// Errors of SetStatus (and of an OutsideCharge with an unknown status).
var (
	// ErrNoSuchPayment: no charge in the ledger has the payment id.
	ErrNoSuchPayment = errors.New("fakeprovider: no such payment")
	// ErrUnknownStatus: the status is none of the fake's Status* words.
	ErrUnknownStatus = errors.New("fakeprovider: unknown status")
)

// statuses are the PaymentIntent statuses a charge may have.
var statuses = []string{StatusSucceeded, StatusProcessing, StatusRequiresAction, StatusRequiresPaymentMethod, StatusCanceled}

// Defaults of Config.
const (
	// DefaultKeyRetention is Config.KeyRetention when left 0: Stripe's 24h.
	DefaultKeyRetention = 24 * time.Hour
	// DefaultSettleAfter is Config.SettleAfter when left 0.
	DefaultSettleAfter = time.Minute
)

// Config configures a Fake. The zero value is a well-behaved provider on
// the real clock: every zero field means its documented default.
type Config struct {
	// Now is the fake's clock. Default time.Now; tests inject a fake clock.
	Now func() time.Time
	// KeyRetention is how long an idempotency key is remembered after its
	// first create; a key older than this is forgotten, and a replay then
	// creates a second charge. Default DefaultKeyRetention (24h, as
	// Stripe).
	KeyRetention time.Duration
	// Faults are the probabilities of faults in Create calls. Default none.
	Faults Faults
	// RefundFaults are the probabilities of faults in CreateRefund calls
	// (the same kinds, acted out on a refund: see Fault). Default none;
	// Faults do not apply to refunds.
	RefundFaults Faults
	// Seed seeds the draws of Faults. Every seed, 0 included, is
	// deterministic. Default 0.
	Seed int64
	// Instance tells this fake's ids from other fakes': payment ids are
	// "pi_fake<Instance>_<n>" and event ids
	// "evt_fake<Instance>_<n>". Letters and digits only. Default 8 random
	// hex digits, drawn by each New, so that fakes in several processes
	// writing to one database never reuse each other's ids. Set it where a
	// test needs the same ids on every run. The draws of Faults do not
	// depend on it.
	Instance string
	// SettleAfter is how long a processing charge stays processing.
	// Default DefaultSettleAfter (1m).
	SettleAfter time.Duration
	// SearchLag is how long Search says NotFound for a charge after its
	// creation. Default 0.
	SearchLag time.Duration
	// ListLag is how long a new charge stays out of List (and of a
	// Server's GET /v1/payment_intents), as a provider's listing may lag a
	// little behind its writes; refunds and disputes stay out of theirs
	// alike. Default 0.
	ListLag time.Duration
	// OnAccept, if set, is called without the fake's lock after a create is
	// accepted (its key marked in flight) and before the charge is made.
	// Blocking in it holds the request in flight, so that tests can send a
	// concurrent create with the same key, or cancel the caller's context
	// mid-call, without sleeping. The connected accounts' fakes call it
	// too; a Server's requests carry the account of their Stripe-Account
	// header in req.Account. Default none.
	OnAccept func(req provider.CreateRequest)
	// OnAcceptRefund is OnAccept for CreateRefund: called without the
	// fake's lock after a refund create is accepted (its key marked in
	// flight) and before the refund is made. Default none.
	OnAcceptRefund func(req provider.RefundRequest)
	// RateLimits are the per-class rate limits the fake enforces, in
	// calls per second. Default none.
	RateLimits RateLimits
	// AccountRateLimits are the rate limits of connected accounts (see
	// Fake.Account), by account ("acct_..."), each enforced over buckets
	// of the account's own, as Stripe limits each account apart. An
	// account not named has RateLimits as given to New (a later
	// SetRateLimits changes the platform's alone). Default none: every
	// connected account has RateLimits. New panics on a key that is not a
	// connected account (provider.ParseAccount, not PlatformAccount).
	AccountRateLimits map[string]RateLimits
	// ListPageSize is how many objects one call of an in-process listing
	// (List, ListRefunds, ListRefundsCreated, ListDisputes) reads: a
	// listing of more reads several pages, each one call (counted, rate
	// limited and gated as such), as the Stripe adapter reads Stripe's.
	// Default DefaultListPageSize.
	ListPageSize int
}

// DefaultListPageSize is Config.ListPageSize's default: the page the
// Stripe adapter asks for.
const DefaultListPageSize = 100

// Charge is one charge in the ledger, as Stripe records a PaymentIntent:
// declined charges are recorded too.
type Charge struct {
	ID             string // "pi_..."
	PurchaseID     string // from the request's metadata
	Customer       string
	Amount         int64
	Currency       string
	Description    string
	PaymentMethod  string
	IdempotencyKey string
	// OffSession reports a charge created off-session (no customer
	// present): the request's version says so (provider.CreateRequest's
	// OffSession), or, over HTTP, off_session was true.
	OffSession bool
	// Status is the charge's Stripe status now: succeeded, processing,
	// requires_action, requires_payment_method (declined) or canceled.
	Status string
	// FinalStatus is the status the charge has once settled: Status itself
	// unless Status is processing (or declined before a late approval).
	// Only the simulator knows it in advance. SetStatus sets both.
	FinalStatus string
	// DeclineCode is the decline code of the charge's decline, if it was
	// ever declined, else "".
	DeclineCode string
	// Fault is the fault injected into the create that made the charge.
	Fault     Fault
	CreatedAt time.Time
	// SettlesAt is when a processing charge settles; zero for a charge
	// created final.
	SettlesAt time.Time
	// Outside reports a charge made by ChargeOutside, not by a create:
	// payrecon did not make it, and it has no idempotency key.
	Outside bool
	// MovedAt is when SetStatus last moved the charge; zero if never.
	MovedAt time.Time
}

// MoneyTaken reports whether the charge took the customer's money: it
// succeeded, or is processing and will settle to succeeded. A declined
// charge is in the ledger but took nothing.
func (c Charge) MoneyTaken() bool { return c.FinalStatus == StatusSucceeded }

// OutsideCharge is a charge made outside payrecon (see Fake.ChargeOutside).
type OutsideCharge struct {
	// PurchaseID is the purchase id in the charge's metadata; "" for none.
	PurchaseID string
	// Customer is the customer reference in the metadata; "" for none.
	Customer string
	// Amount (positive) and Currency (required) are the charge's.
	Amount   int64
	Currency string
	// Status is the charge's status, one of the Status* constants.
	// Default StatusSucceeded. It stays until SetStatus moves it: a
	// processing outside charge does not settle by itself.
	Status string
}

// validate reports why c cannot be charged, and c with its status
// defaulted.
func (c OutsideCharge) validate() (OutsideCharge, error) {
	if c.Status == "" {
		c.Status = StatusSucceeded
	}
	switch {
	case !slices.Contains(statuses, c.Status):
		return c, fmt.Errorf("fakeprovider: outside charge: status %q: %w (want one of %s)", c.Status, ErrUnknownStatus, strings.Join(statuses, ", "))
	case c.Amount <= 0:
		return c, fmt.Errorf("%w: outside charge: amount %d must be positive", ErrInvalidRequest, c.Amount)
	case c.Currency == "":
		return c, fmt.Errorf("%w: outside charge: currency is required", ErrInvalidRequest)
	}
	return c, nil
}

// Fake is an in-process provider.Provider simulating Stripe. Create it with
// New. Safe for concurrent use.
type Fake struct {
	cfg Config
	// account is the connected account this fake is (see Account); "" for
	// the platform's, and platform the platform's fake, nil for it.
	account  string
	platform *Fake
	// accountLimits is Config.RateLimits as New received it: the default
	// of a connected account's (SetRateLimits changes cfg's).
	accountLimits RateLimits
	// accounts are the platform's connected accounts' fakes, by account,
	// and servers the Servers told of each new one (accounts.go).
	accountsMu sync.Mutex
	accounts   map[string]*Fake
	servers    []*Server

	mu       sync.Mutex
	seq      int
	ledger   []*entry // creation order
	byID     map[string]*entry
	keys     map[string]saved
	inFlight map[string]bool
	// chargeFaults draw the faults of creates, by purchase;
	// refundFaults those of refund creates, by refund (refundStream).
	chargeFaults *faultSource
	refundFaults *faultSource
	calls        map[provider.Op]int
	keyCalls     map[string]int
	// unsettled are the charges with a settlement still to come (or done
	// lazily and not yet pruned), in creation order.
	unsettled []*entry
	// watchers are the change logs of the Servers with webhooks that
	// watch the fake: record appends every state change of a charge to
	// each, and each Server takes its own when it looks.
	watchers []*changeLog

	// Refunds, kept as the charges are.
	refundSeq        int
	refunds          []*refundEntry // creation order
	refundByID       map[string]*refundEntry
	refundKeyCalls   map[string]int
	unsettledRefunds []*refundEntry

	limiter *limiter

	// Disputes (disputes.go), in creation order.
	disputeSeq  int
	disputes    []*disputeEntry
	disputeByID map[string]*disputeEntry

	// The event log (events.go): every change of a charge, a refund or a
	// dispute, oldest first, and its events by id.
	eventLog  []*loggedEvent
	eventByID map[string]*loggedEvent
	eventSeq  int
}

// changeLog is the changes one Server has yet to announce.
type changeLog struct{ changes []change }

type entry struct {
	Charge
	seq        int  // place in creation order, from 1
	staleReads int  // Status calls left that answer processing
	disputed   bool // its dispute test card's dispute is opened (disputeIfCard)
}

// change is one state change of a charge, of a refund or of a dispute:
// its creation, its settlement, or a move by SetStatus, SetRefundStatus
// or MoveDispute.
type change struct {
	// c is the charge just after the change; for a refund's or a
	// dispute's, its payment.
	c Charge
	// r is the refund just after the change, nil for a charge's change;
	// refunds are then all the refunds of its payment, r among them, as
	// the payment's charge lists them.
	r       *Refund
	refunds []Refund
	// dispute is the dispute's id for a dispute's change, else "".
	dispute string
	// status is c.Status, r.Status for a refund's change, the dispute's
	// for a dispute's.
	status  string
	at      time.Time
	created bool // the creation (its event carries the key)
	// silent: the change is not announced (ChargeOutside, SetStatus,
	// RefundOutside, SetRefundStatus, OpenDispute or MoveDispute through a
	// Server without webhooks).
	silent bool
	// events are the change's events in the event log, in order: what a
	// Server's webhooks send.
	events []*loggedEvent
}

// saved is the response Stripe saves for an idempotency key. Keys are
// shared by every endpoint, as Stripe's are: a key saved by one endpoint
// is a mismatch at another.
type saved struct {
	op     provider.Op // the endpoint: OpCreate or OpRefundCreate
	hash   string
	res    provider.Result       // OpCreate's response
	refund provider.RefundResult // OpRefundCreate's response
	at     time.Time
}

var _ provider.Provider = (*Fake)(nil)

// New returns a Fake with cfg's zero fields defaulted. It panics if cfg is
// invalid (a negative duration, bad probabilities): that is a bug in the
// test, and ParseConfig never returns such a Config.
func New(cfg Config) *Fake {
	if err := cfg.Faults.Validate(); err != nil {
		panic(err)
	}
	if err := cfg.RefundFaults.validate(refundPrefix); err != nil {
		panic(err)
	}
	if !validInstance(cfg.Instance) {
		panic(fmt.Sprintf("fakeprovider: instance %q: want letters and digits only", cfg.Instance))
	}
	if cfg.KeyRetention < 0 || cfg.SettleAfter < 0 || cfg.SearchLag < 0 || cfg.ListLag < 0 {
		panic(fmt.Sprintf("fakeprovider: negative duration in config (key retention %v, settle after %v, search lag %v, list lag %v)",
			cfg.KeyRetention, cfg.SettleAfter, cfg.SearchLag, cfg.ListLag))
	}
	for account := range cfg.AccountRateLimits {
		if _, err := provider.ParseAccount(account); err != nil || account == provider.PlatformAccount {
			panic(fmt.Sprintf("fakeprovider: AccountRateLimits: %q is not a connected account (acct_ followed by letters and digits)", account))
		}
	}
	cfg.AccountRateLimits = maps.Clone(cfg.AccountRateLimits) // the caller's map may change
	if cfg.ListPageSize < 0 {
		panic(fmt.Sprintf("fakeprovider: list page size %d is negative", cfg.ListPageSize))
	}
	if cfg.ListPageSize == 0 {
		cfg.ListPageSize = DefaultListPageSize
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.KeyRetention == 0 {
		cfg.KeyRetention = DefaultKeyRetention
	}
	if cfg.SettleAfter == 0 {
		cfg.SettleAfter = DefaultSettleAfter
	}
	if cfg.Instance == "" {
		cfg.Instance = randomInstance()
	}
	return &Fake{
		cfg:          cfg,
		byID:         make(map[string]*entry),
		keys:         make(map[string]saved),
		inFlight:     make(map[string]bool),
		chargeFaults: newFaultSource(cfg.Faults, cfg.Seed, 0),
		refundFaults: newFaultSource(cfg.RefundFaults, cfg.Seed, refundSalt),
		calls:        make(map[provider.Op]int),
		keyCalls:     make(map[string]int),

		refundByID:     make(map[string]*refundEntry),
		refundKeyCalls: make(map[string]int),
		limiter:        newLimiter(),
		disputeByID:    make(map[string]*disputeEntry),
		eventByID:      make(map[string]*loggedEvent),

		accountLimits: cfg.RateLimits,
	}
}

// Instance returns the fake's Config.Instance, defaulted: the part of its
// ids that tells them from other fakes'.
func (f *Fake) Instance() string { return f.cfg.Instance }

// validInstance reports whether s is empty (defaulted) or letters and
// digits only, so that the ids built from it keep Stripe's shape.
func validInstance(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	})
}

// randomInstance returns 8 random hex digits.
func randomInstance() string {
	var b [4]byte
	crand.Read(b[:]) // never fails
	return hex.EncodeToString(b[:])
}

// newID returns the id prefix+"fake"+instance+"_"+n that the fake gives
// its n-th payment (prefix "pi_") or a Server its n-th event ("evt_").
func (f *Fake) newID(prefix string, n int) string {
	return fmt.Sprintf("%sfake%s_%020d", prefix, f.cfg.Instance, n)
}

// localID returns the id of a payment, refund or event without the
// fake's instance ("pi_fake3f09a2c1_00000000000000000001" ->
// "pi_fake00000000000000000001", the id before there were instances): the
// same in every fake, for seeding draws.
func (f *Fake) localID(id string) string {
	if kind, n, ok := strings.Cut(id, "_fake"+f.cfg.Instance+"_"); ok {
		return kind + "_fake" + n
	}
	return id
}
