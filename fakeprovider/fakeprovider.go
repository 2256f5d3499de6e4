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
// any other succeeds unless a fault says otherwise.
//
// Faults (see Fault and ParseConfig) make it misbehave the way real
// providers do: refuse before acting, time out, lose the reply after
// charging, leave a charge processing, answer a stale status, lag in
// search, decline.
//
// List (provider.Provider's) reads the ledger itself, oldest first, but
// may lag a little behind new charges (Config.ListLag).
//
// The fake is adversarial and observable beyond Stripe's API: a test can
// make a charge payrecon did not make (ChargeOutside: from a dashboard,
// another system, a second charge for a purchase, another amount), move a
// charge to another status at any time (SetStatus: a late approval after
// a decline, a cancellation), and read the whole ledger with the calls it
// received (Ledger, also served by a Server as GET /_fake/ledger).
//
// Determinism: time comes only from Config.Now, so a test with a fake clock
// decides when processing settles, when search and list catch up and when
// keys expire; nothing sleeps. A Create call's fault comes from the purchase's
// script (Fake.Script) when it has one, otherwise from the configured
// probabilities, drawn from a math/rand/v2 source seeded by Config.Seed and
// the purchase id: one source per purchase, one draw per Create call, so
// the n-th Create for a purchase gets the same fault for a given seed
// however calls for different purchases interleave.
//
// Ids: a payment id is "pi_fake", the fake's Config.Instance, "_" and a
// sequence number counting from 1 ("pi_fake3f09a2c1_00000000000000000001",
// ...); a Server's event ids are built the same way ("evt_fake..."). The
// default Instance is random, so that fakes in several processes sharing
// one database (whose payment ids and webhook inbox keys are unique) do not
// collide; a test that needs the same ids on every run sets it.
//
// A Server (NewServer) serves a Fake over HTTP in Stripe's wire format, for
// the real Stripe adapter (provider/stripe) to talk to, and sends signed
// Stripe webhooks for the ledger's changes, with delivery faults of their
// own (WebhookFaults).
package fakeprovider

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
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
	// Seed seeds the draws of Faults. Every seed, 0 included, is
	// deterministic. Default 0.
	Seed int64
	// Instance tells this fake's ids from other fakes': payment ids are
	// "pi_fake<Instance>_<n>" and a Server's event ids
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
	// little behind its writes. Default 0.
	ListLag time.Duration
	// OnAccept, if set, is called without the fake's lock after a create is
	// accepted (its key marked in flight) and before the charge is made.
	// Blocking in it holds the request in flight, so that tests can send a
	// concurrent create with the same key, or cancel the caller's context
	// mid-call, without sleeping. Default none.
	OnAccept func(req provider.CreateRequest)
}

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

	mu       sync.Mutex
	seq      int
	ledger   []*entry // creation order
	byID     map[string]*entry
	keys     map[string]saved
	inFlight map[string]bool
	scripts  map[string][]Fault
	rngs     map[string]*rand.Rand
	calls    map[provider.Op]int
	keyCalls map[string]int
	// unsettled are the charges with a settlement still to come (or done
	// lazily and not yet pruned), in creation order.
	unsettled []*entry
	// watchers are the change logs of the Servers with webhooks that
	// watch the fake: record appends every state change of a charge to
	// each, and each Server takes its own when it looks.
	watchers []*changeLog
}

// changeLog is the changes one Server has yet to announce.
type changeLog struct{ changes []change }

type entry struct {
	Charge
	seq        int // place in creation order, from 1
	staleReads int // Status calls left that answer processing
}

// change is one state change of a charge: its creation, its settlement,
// or a move by SetStatus.
type change struct {
	c       Charge // the charge just after the change
	status  string // c.Status
	at      time.Time
	created bool // the charge's creation (its event carries the key)
	// silent: the change is not announced (ChargeOutside or SetStatus
	// through a Server without webhooks).
	silent bool
}

// saved is the response Stripe saves for an idempotency key.
type saved struct {
	hash string
	res  provider.Result
	at   time.Time
}

var _ provider.Provider = (*Fake)(nil)

// New returns a Fake with cfg's zero fields defaulted. It panics if cfg is
// invalid (a negative duration, bad probabilities): that is a bug in the
// test, and ParseConfig never returns such a Config.
func New(cfg Config) *Fake {
	if err := cfg.Faults.Validate(); err != nil {
		panic(err)
	}
	if !validInstance(cfg.Instance) {
		panic(fmt.Sprintf("fakeprovider: instance %q: want letters and digits only", cfg.Instance))
	}
	if cfg.KeyRetention < 0 || cfg.SettleAfter < 0 || cfg.SearchLag < 0 || cfg.ListLag < 0 {
		panic(fmt.Sprintf("fakeprovider: negative duration in config (key retention %v, settle after %v, search lag %v, list lag %v)",
			cfg.KeyRetention, cfg.SettleAfter, cfg.SearchLag, cfg.ListLag))
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
		cfg:      cfg,
		byID:     make(map[string]*entry),
		keys:     make(map[string]saved),
		inFlight: make(map[string]bool),
		scripts:  make(map[string][]Fault),
		rngs:     make(map[string]*rand.Rand),
		calls:    make(map[provider.Op]int),
		keyCalls: make(map[string]int),
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

// localPaymentID returns the payment id without the fake's instance
// ("pi_fake3f09a2c1_00000000000000000001" -> "pi_fake00000000000000000001",
// the id before there were instances): the same in every fake, for
// seeding draws.
func (f *Fake) localPaymentID(id string) string {
	if n, ok := strings.CutPrefix(id, "pi_fake"+f.cfg.Instance+"_"); ok {
		return "pi_fake" + n
	}
	return id
}

// Script queues faults for the next Create calls for purchaseID, one per
// call in order, after any already queued; NoFault runs a call clean. A
// scripted call ignores the probabilistic draw (which is still consumed).
// Once the queue is empty, calls get probabilistic faults again.
func (f *Fake) Script(purchaseID string, faults ...Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scripts[purchaseID] = append(f.scripts[purchaseID], faults...)
}

// Create implements provider.Provider. It charges unless the key's saved
// response is replayed; the replay is the response as first sent (a
// processing charge replays as Pending even once settled), as in Stripe.
// After a LostReply fault, or when ctx ends while the request is in
// flight, the charge is made but Create returns an unknown-outcome error.
func (f *Fake) Create(ctx context.Context, req provider.CreateRequest) (provider.Result, error) {
	if err := ctx.Err(); err != nil {
		f.mu.Lock()
		f.calls[provider.OpCreate]++
		f.keyCalls[req.IdempotencyKey]++
		f.mu.Unlock()
		return provider.Result{}, fmt.Errorf("fakeprovider: create for %s: not sent: %w", req.PurchaseID, err)
	}
	a := f.create(req)
	switch {
	case a.fault == FailBefore || a.fault == Timeout || a.fault == LostReply:
		return provider.Result{}, &FaultError{Fault: a.fault, PurchaseID: req.PurchaseID}
	case a.err != nil:
		return provider.Result{}, a.err
	case ctx.Err() != nil: // the caller gave up while the provider acted
		return provider.Result{}, fmt.Errorf("fakeprovider: create for %s: outcome unknown: %w", req.PurchaseID, ctx.Err())
	}
	return a.res, nil
}

// attempt is what one create did, before its reply reaches the caller.
type attempt struct {
	fault Fault // injected into this call
	// res and err are the reply: a result, or a definite error (invalid
	// request, key mismatch). Both are zero when FailBefore or Timeout
	// stopped the call before the provider acted.
	res provider.Result
	err error
	// created reports that this call made a new charge: a result with a
	// payment id and created false is a replay of the key's saved
	// response.
	created bool
}

// create runs one create call up to its reply, leaving the fault for the
// caller to act out: Create turns it into an error, an HTTP front end can
// turn it into transport behaviour (a 429, a dropped connection).
func (f *Fake) create(req provider.CreateRequest) attempt {
	return f.createHashed(req, req.Hash())
}

// createHashed is create with hash standing for the request's parameters
// in the key store, for a front end whose requests carry parameters that
// CreateRequest does not hold (Stripe compares them all).
func (f *Fake) createHashed(req provider.CreateRequest, hash string) attempt {
	key := req.IdempotencyKey
	f.mu.Lock()
	f.calls[provider.OpCreate]++
	f.keyCalls[key]++
	a := attempt{fault: f.nextFault(req.PurchaseID)}
	if a.fault == FailBefore || a.fault == Timeout {
		f.mu.Unlock()
		return a
	}
	if a.fault == Reject {
		f.mu.Unlock()
		a.err = fmt.Errorf("%w: create for %s: injected reject", ErrInvalidRequest, req.PurchaseID)
		return a
	}
	if err := validate(req); err != nil {
		f.mu.Unlock()
		a.err = err
		return a
	}
	if key != "" { // as in Stripe, a create without a key is never replayed
		if f.inFlight[key] {
			f.mu.Unlock()
			a.res = provider.Result{Outcome: provider.Pending, Reason: ReasonKeyInUse}
			return a
		}
		if s, ok := f.keys[key]; ok {
			switch {
			case f.cfg.Now().Sub(s.at) > f.cfg.KeyRetention:
				delete(f.keys, key) // forgotten: this create charges again
			case s.hash != hash:
				f.mu.Unlock()
				a.err = fmt.Errorf("fakeprovider: create for %s: key %q: %w", req.PurchaseID, key, provider.ErrIdempotencyMismatch)
				return a
			default:
				f.mu.Unlock()
				a.res = s.res
				return a
			}
		}
		f.inFlight[key] = true
	}
	f.mu.Unlock()

	// The lock is not held while the request is in flight, so that a
	// concurrent create with the same key can see it there.
	if f.cfg.OnAccept != nil {
		f.cfg.OnAccept(req)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.cfg.Now()
	e := f.newCharge(req, a.fault, now)
	a.res = e.result()
	a.created = true
	if key != "" {
		delete(f.inFlight, key)
		f.keys[key] = saved{hash: hash, res: a.res, at: now}
	}
	return a
}

func validate(req provider.CreateRequest) error {
	switch {
	case !req.Version.Known():
		return fmt.Errorf("%w: create for %s: request version %d unknown (newest %d)", ErrInvalidRequest, req.PurchaseID, req.Version, provider.CurrentRequestVersion)
	case req.Amount <= 0:
		return fmt.Errorf("%w: create for %s: amount %d must be positive", ErrInvalidRequest, req.PurchaseID, req.Amount)
	case req.Currency == "":
		return fmt.Errorf("%w: create for %s: currency is required", ErrInvalidRequest, req.PurchaseID)
	}
	return nil
}

// nextFault returns the fault of the next Create call for purchaseID. The
// draw is taken even when a script decides, so that the n-th call always
// uses the n-th draw. Call with f.mu held.
func (f *Fake) nextFault(purchaseID string) Fault {
	drawn := NoFault
	if f.cfg.Faults.any() {
		r := f.rngs[purchaseID]
		if r == nil {
			h := fnv.New64a()
			h.Write([]byte(purchaseID))
			r = rand.New(rand.NewPCG(uint64(f.cfg.Seed), h.Sum64()))
			f.rngs[purchaseID] = r
		}
		drawn = f.cfg.Faults.pick(r.Float64())
	}
	if q := f.scripts[purchaseID]; len(q) > 0 {
		if len(q) == 1 {
			delete(f.scripts, purchaseID)
		} else {
			f.scripts[purchaseID] = q[1:]
		}
		return q[0]
	}
	return drawn
}

// newCharge records a charge made by req under fault. Call with f.mu held.
func (f *Fake) newCharge(req provider.CreateRequest, fault Fault, now time.Time) *entry {
	f.seq++
	e := &entry{seq: f.seq, Charge: Charge{
		ID:             f.newID("pi_", f.seq),
		PurchaseID:     req.PurchaseID,
		Customer:       req.Customer,
		Amount:         req.Amount,
		Currency:       req.Currency,
		Description:    req.Description,
		PaymentMethod:  req.PaymentMethod,
		IdempotencyKey: req.IdempotencyKey,
		OffSession:     req.OffSession(),
		FinalStatus:    StatusSucceeded,
		Fault:          fault,
		CreatedAt:      now,
	}}
	switch {
	case req.PaymentMethod == PaymentMethodDeclined || fault == Decline || fault == ProcessingDecline:
		e.FinalStatus = StatusRequiresPaymentMethod
		e.DeclineCode = DeclineCode
	case req.PaymentMethod == PaymentMethodAuthenticationRequired && e.OffSession:
		// Nobody can authenticate: a definite decline, as Stripe's.
		e.FinalStatus = StatusRequiresPaymentMethod
		e.DeclineCode = DeclineAuthenticationRequired
	case req.PaymentMethod == PaymentMethodAuthenticationRequired:
		// Waiting for a customer who is not there: it stays so.
		e.FinalStatus = StatusRequiresAction
	}
	e.Status = e.FinalStatus
	if fault == DeclineThenSucceed {
		e.Status, e.FinalStatus, e.DeclineCode = StatusRequiresPaymentMethod, StatusSucceeded, DeclineCode
		e.SettlesAt = now.Add(f.cfg.SettleAfter)
	}
	if fault == Processing || fault == ProcessingDecline {
		e.Status = StatusProcessing
		e.SettlesAt = now.Add(f.cfg.SettleAfter)
	}
	if fault == StaleProcessing {
		e.staleReads = 1
	}
	f.add(e, false)
	return e
}

// add appends e, just made, to the ledger and logs its creation. Call with
// f.mu held.
func (f *Fake) add(e *entry, silent bool) {
	f.ledger = append(f.ledger, e)
	f.byID[e.ID] = e
	if !e.SettlesAt.IsZero() {
		f.unsettled = append(f.unsettled, e)
	}
	f.record(e, e.CreatedAt, true, silent)
}

// record logs e's change to its current status for every Server that
// watches. Call with f.mu held.
func (f *Fake) record(e *entry, at time.Time, created, silent bool) {
	for _, l := range f.watchers {
		l.changes = append(l.changes, change{c: e.Charge, status: e.Status, at: at, created: created, silent: silent})
	}
}

// watch returns a new change log that records every change from now on.
func (f *Fake) watch() *changeLog {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := &changeLog{}
	f.watchers = append(f.watchers, l)
	return l
}

// unwatch stops recording changes to l.
func (f *Fake) unwatch(l *changeLog) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watchers = slices.DeleteFunc(f.watchers, func(w *changeLog) bool { return w == l })
}

// settle moves a charge that is not final yet (processing, or declined
// before a late approval) to its final status once its time has come, and
// logs the change as made at SettlesAt. Call with f.mu held.
func (f *Fake) settle(e *entry, now time.Time) {
	if !e.SettlesAt.IsZero() && e.Status != e.FinalStatus && !now.Before(e.SettlesAt) {
		e.Status = e.FinalStatus
		f.record(e, e.SettlesAt, false, false)
	}
}

// settleDue settles every charge whose time has come, in creation order,
// and forgets those settled. Call with f.mu held.
func (f *Fake) settleDue(now time.Time) {
	still := f.unsettled[:0]
	for _, e := range f.unsettled {
		f.settle(e, now)
		if e.Status != e.FinalStatus {
			still = append(still, e)
		}
	}
	clear(f.unsettled[len(still):])
	f.unsettled = still
}

func (e *entry) result() provider.Result {
	r := provider.Result{
		Outcome:    outcomeOf(e.Status),
		PaymentID:  e.ID,
		Status:     e.Status,
		Amount:     e.Amount,
		Currency:   e.Currency,
		PurchaseID: e.PurchaseID,
	}
	if e.Status == StatusRequiresPaymentMethod {
		r.Reason = e.DeclineCode
	}
	return r
}

// outcomeOf maps a PaymentIntent status to a neutral outcome.
func outcomeOf(status string) provider.Outcome {
	switch status {
	case StatusSucceeded:
		return provider.Succeeded
	case StatusProcessing, StatusRequiresAction:
		return provider.Pending
	case StatusRequiresPaymentMethod, StatusCanceled:
		return provider.Declined
	}
	return provider.Unknown
}

// Status implements provider.Provider: the charge's current status, or
// Outcome NotFound for an unknown id. After a StaleProcessing fault, the
// first Status call for the charge answers processing.
func (f *Fake) Status(ctx context.Context, paymentID string) (provider.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[provider.OpStatus]++
	if err := ctx.Err(); err != nil {
		return provider.Result{}, fmt.Errorf("fakeprovider: status of %s: not sent: %w", paymentID, err)
	}
	e := f.byID[paymentID]
	if e == nil {
		return provider.Result{Outcome: provider.NotFound, Reason: ReasonNotFound}, nil
	}
	f.settle(e, f.cfg.Now())
	r := e.result()
	if e.staleReads > 0 {
		e.staleReads--
		r.Outcome, r.Status, r.Reason = provider.Pending, StatusProcessing, ""
	}
	return r, nil
}

// Search implements provider.Provider: the charge made for purchaseID
// (outside charges included), once Config.SearchLag has passed since its
// creation, else NotFound. If several charges are visible (a double
// charge!), it returns a succeeded one if any, else a pending one, else a
// declined one, the oldest of its kind, and appends to Reason how many
// there are. Charges counts the visible charges whose status now took or
// may take money (outcome Succeeded or Pending). A charge with no purchase
// id is never found, not even for "".
func (f *Fake) Search(ctx context.Context, purchaseID string) (provider.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[provider.OpSearch]++
	if err := ctx.Err(); err != nil {
		return provider.Result{}, fmt.Errorf("fakeprovider: search for %s: not sent: %w", purchaseID, err)
	}
	now := f.cfg.Now()
	var best *entry
	n, taking := 0, 0
	for _, e := range f.ledger {
		if e.PurchaseID == "" || e.PurchaseID != purchaseID || now.Sub(e.CreatedAt) < f.cfg.SearchLag {
			continue
		}
		f.settle(e, now)
		n++
		if o := outcomeOf(e.Status); o == provider.Succeeded || o == provider.Pending {
			taking++
		}
		if best == nil || searchRank(e.Status) < searchRank(best.Status) {
			best = e
		}
	}
	if best == nil {
		return provider.Result{Outcome: provider.NotFound}, nil
	}
	r := best.result()
	r.Charges = taking
	if n > 1 {
		many := fmt.Sprintf("%d charges for purchase %s", n, purchaseID)
		if r.Reason != "" {
			many = r.Reason + "; " + many
		}
		r.Reason = many
	}
	return r, nil
}

func searchRank(status string) int {
	switch outcomeOf(status) {
	case provider.Succeeded:
		return 0
	case provider.Pending:
		return 1
	}
	return 2
}

// Charges returns a copy of the ledger, oldest first, with processing
// charges settled as of now.
func (f *Fake) Charges() []Charge {
	return f.charges(func(Charge) bool { return true })
}

// ChargesFor returns the charges made for purchaseID, oldest first.
func (f *Fake) ChargesFor(purchaseID string) []Charge {
	return f.charges(func(c Charge) bool { return c.PurchaseID == purchaseID })
}

func (f *Fake) charges(keep func(Charge) bool) []Charge {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.cfg.Now()
	var out []Charge
	for _, e := range f.ledger {
		f.settle(e, now)
		if keep(e.Charge) {
			out = append(out, e.Charge)
		}
	}
	return out
}

// MoneyTaken counts the charges for purchaseID that took money (see
// Charge.MoneyTaken): the number tests compare with 1. Declines are not
// counted.
func (f *Fake) MoneyTaken(purchaseID string) int {
	n := 0
	for _, c := range f.ChargesFor(purchaseID) {
		if c.MoneyTaken() {
			n++
		}
	}
	return n
}

// CountSucceeded counts the charges for purchaseID whose status is
// succeeded now; unlike MoneyTaken, it omits processing charges.
func (f *Fake) CountSucceeded(purchaseID string) int {
	n := 0
	for _, c := range f.ChargesFor(purchaseID) {
		if c.Status == StatusSucceeded {
			n++
		}
	}
	return n
}

// DoubleCharged returns, sorted, the purchases with more than one charge
// that took money, outside charges included (charges with no purchase id
// are not counted).
func (f *Fake) DoubleCharged() []string {
	taken := make(map[string]int)
	for _, c := range f.Charges() {
		if c.MoneyTaken() && c.PurchaseID != "" {
			taken[c.PurchaseID]++
		}
	}
	var out []string
	for p, n := range taken {
		if n > 1 {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// Calls returns how many calls of op the fake has received, including
// those that failed.
func (f *Fake) Calls(op provider.Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// CreateCalls returns how many Create calls the fake has received with
// idempotency key key, including replays and failed calls.
func (f *Fake) CreateCalls(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keyCalls[key]
}

// List implements provider.Provider: every charge created within w (From
// inclusive, Until exclusive), outside charges included, oldest first
// (creation order), settled as of now, except those created less than
// Config.ListLag ago. It reads the ledger, not a lagging index: no
// SearchLag, no stale reads. It counts as one OpList call. An empty or
// reversed window lists nothing.
func (f *Fake) List(ctx context.Context, w provider.Window) ([]provider.Payment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[provider.OpList]++
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fakeprovider: list [%s, %s): not sent: %w",
			w.From.Format(time.RFC3339Nano), w.Until.Format(time.RFC3339Nano), err)
	}
	now := f.cfg.Now()
	var out []provider.Payment
	for _, e := range f.ledger {
		if !f.listable(e, now) || e.CreatedAt.Before(w.From) || !e.CreatedAt.Before(w.Until) {
			continue
		}
		f.settle(e, now)
		out = append(out, e.payment())
	}
	return out, nil
}

// listable reports whether List can see e at now (Config.ListLag).
func (f *Fake) listable(e *entry, now time.Time) bool {
	return now.Sub(e.CreatedAt) >= f.cfg.ListLag
}

func (e *entry) payment() provider.Payment {
	return provider.Payment{
		ID:         e.ID,
		PurchaseID: e.PurchaseID,
		Amount:     e.Amount,
		Currency:   e.Currency,
		Status:     e.Status,
		Outcome:    outcomeOf(e.Status),
		Created:    e.CreatedAt,
	}
}
