package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// Service runs payrecon's protocol over a Store and a Provider. It creates
// purchases, works their leased jobs, and answers questions about them.
// Safe for concurrent use.
type Service struct {
	store    Store
	provider provider.Provider
	// accounts is provider's view per connected account, when it can act
	// on behalf of accounts; nil otherwise (see providerFor).
	accounts provider.Accounts
	cfg      Config
	group    *groupCommitter // nil with Config.GroupCommitOff
	// recovery is the open recovery epoch's guard as last read (see
	// refreshRecovery); nil before the first read.
	recovery atomic.Pointer[recoveryGuard]
	// reserveLead is how long, in nanoseconds, a claim's first call may
	// take to be ready after its tokens were reserved (see reserveLeadOf);
	// 0 before the first claim.
	reserveLead atomic.Int64
	// claimCursor is the last account the worker claimed for, when it
	// serves connected accounts: the next claim starts after it. Nil
	// before the first.
	claimCursor atomic.Pointer[string]
	// spokenFor holds, by account, until when the worker's last
	// reservation found that account's budget spoken for (a time.Time):
	// its claims skip the account until then, rather than spend a
	// transaction to reserve nothing.
	spokenFor sync.Map
	// restoreHorizon is the books' send horizon as the first
	// CheckRestore read it; nil before.
	restoreMu      sync.Mutex
	restoreHorizon *time.Time
	// restoreChecked is set once CheckRestore passed.
	restoreChecked atomic.Bool
	// inboxWake wakes this process's applier (WakeApplier).
	inboxWake chan struct{}
	// listener is the store's, when it has one (InboxListener).
	listener InboxListener
}

// New returns a Service. It returns an error naming the field if cfg is
// invalid.
func New(store Store, p provider.Provider, cfg Config) (*Service, error) {
	if store == nil {
		return nil, errors.New("reconcile: nil store")
	}
	if p == nil {
		return nil, errors.New("reconcile: nil provider")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	accounts, _ := p.(provider.Accounts)
	if cfg.servesConnected() && accounts == nil {
		return nil, errors.New("reconcile: config: connected accounts are served, but the provider cannot act on their behalf")
	}
	listener, _ := store.(InboxListener)
	// Every transaction writes the outbox events of its changes.
	store = outboxStore{Store: store}
	s := &Service{store: store, provider: p, accounts: accounts, cfg: cfg, inboxWake: make(chan struct{}, 1), listener: listener}
	if !cfg.GroupCommitOff {
		s.group = newGroupCommitter(store, cfg.GroupCommitMax, cfg.GroupCommitLeaders, cfg.Logger)
	}
	return s, nil
}

// inGroup runs fn in a transaction shared with concurrent callers (group
// commit, see groupcommit.go), or in one of its own with
// Config.GroupCommitOff, and returns once it committed, or fn's error. fn
// may run more than once, and must use the context it is given.
func (s *Service) inGroup(ctx context.Context, fn func(context.Context, Tx) error) error {
	if s.group == nil {
		return s.store.InTx(ctx, func(tx Tx) error { return fn(ctx, tx) })
	}
	return s.group.do(ctx, fn)
}

// inGroupSet is inGroup for a request the group runs with its like
// neighbours' in one set (see setRunner), arg being what set needs of it;
// fn runs it alone (with Config.GroupCommitOff, or when the set leaves
// it out).
func (s *Service) inGroupSet(ctx context.Context, set setRunner, arg any, fn func(context.Context, Tx) error) error {
	if s.group == nil {
		return s.store.InTx(ctx, func(tx Tx) error { return fn(ctx, tx) })
	}
	return s.group.doSet(ctx, fn, set, arg)
}

// Config returns the service's configuration with defaults applied.
func (s *Service) Config() Config { return s.cfg }

// Store returns the service's store.
func (s *Service) Store() Store { return s.store }

// NewPurchase is what a caller gives to create a purchase.
type NewPurchase struct {
	Customer      string
	Reference     string // optional; unique per customer
	Amount        int64  // minor units
	Currency      string // ISO 4217, any case
	Description   string
	PaymentMethod string // optional; Config.DefaultPaymentMethod if empty
	// Account is the provider account to charge on behalf of: "" for the
	// platform's own, or a connected account (acct_…) the deployment
	// serves (Config.Accounts, Config.UndeclaredAccounts).
	Account string
}

// FieldError is an invalid input field. It wraps ErrInvalid.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// Validate checks np against the limits in cfg and returns a normalised
// copy, or an error joining one *FieldError per bad field.
func (s *Service) Validate(np NewPurchase) (NewPurchase, error) {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	np.Customer = strings.TrimSpace(np.Customer)
	np.Reference = strings.TrimSpace(np.Reference)
	np.Currency = strings.ToLower(strings.TrimSpace(np.Currency))
	np.PaymentMethod = strings.TrimSpace(np.PaymentMethod)
	if np.PaymentMethod == "" {
		np.PaymentMethod = s.cfg.DefaultPaymentMethod
	}
	checkText := func(field, v string, required bool, max int) {
		switch {
		case v == "" && required:
			bad(field, "is required")
		case !utf8.ValidString(v):
			bad(field, "is not valid UTF-8")
		case utf8.RuneCountInString(v) > max:
			bad(field, "is longer than %d characters", max)
		case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			bad(field, "contains control characters")
		}
	}
	checkText("customer", np.Customer, true, 255)
	checkText("reference", np.Reference, false, 255)
	checkText("description", np.Description, false, 1000)
	checkText("payment_method", np.PaymentMethod, true, 255)
	np.Account = strings.TrimSpace(np.Account)
	if why := s.cfg.checkAccount(np.Account); why != "" {
		bad("account", "%s", why)
	}
	switch {
	case np.Amount <= 0:
		bad("amount", "must be a positive number of minor units, got %d", np.Amount)
	case np.Amount > s.cfg.MaxAmount:
		bad("amount", "%d is over the maximum of %d", np.Amount, s.cfg.MaxAmount)
	}
	switch {
	case np.Currency == "":
		bad("currency", "is required")
	case !SupportedCurrency(np.Currency):
		bad("currency", "%q is not a supported currency", np.Currency)
	default:
		// Below it the provider refuses the create (amount_too_small):
		// refused here, the purchase is never stored.
		if least, ok := provider.MinimumCharge(np.Currency); ok && np.Amount > 0 && np.Amount < least {
			bad("amount", "%s is under the provider's minimum charge of %s", provider.FormatAmount(np.Amount, np.Currency), provider.FormatAmount(least, np.Currency))
		}
	}
	return np, errors.Join(errs...)
}

// CreatePurchase validates np and stores a new purchase in state created,
// with its job due now, in one transaction. Returns an error wrapping
// ErrInvalid for bad input (nothing is stored) and ErrDuplicate if the
// customer already used the reference.
func (s *Service) CreatePurchase(ctx context.Context, np NewPurchase) (Purchase, error) {
	var p Purchase
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		p, err = s.CreatePurchaseTx(ctx, tx, np)
		return err
	})
	return p, err
}

// CreatePurchaseTx is CreatePurchase inside a caller's transaction, so that
// callers can commit more with it. The purchase has no Client: only
// CreatePurchaseOnce, the purchase API's path, records one.
func (s *Service) CreatePurchaseTx(ctx context.Context, tx Tx, np NewPurchase) (Purchase, error) {
	return s.createPurchaseTx(ctx, tx, np, "")
}

// createPurchaseTx is CreatePurchaseTx for a purchase created by client
// ("" for none).
func (s *Service) createPurchaseTx(ctx context.Context, tx Tx, np NewPurchase, client string) (Purchase, error) {
	np, err := s.Validate(np)
	if err != nil {
		return Purchase{}, fmt.Errorf("reconcile: create purchase: %w", err)
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return Purchase{}, fmt.Errorf("reconcile: create purchase: %w", err)
	}
	p := s.newPurchase(np, client, now)
	if err := tx.InsertPurchase(ctx, p); err != nil {
		return Purchase{}, fmt.Errorf("reconcile: create purchase: %w", err)
	}
	if err := tx.InsertJob(ctx, Job{PurchaseID: p.ID, RunAt: now}); err != nil {
		return Purchase{}, fmt.Errorf("reconcile: create purchase %s: job: %w", p.ID, err)
	}
	return p, nil
}

// Detail is a purchase with its full audit trail.
type Detail struct {
	Purchase    Purchase
	Transitions []TransitionRecord
	Attempts    []Attempt
	Job         Job
}

// Purchase returns the purchase with id and its audit trail. Returns an
// error wrapping ErrNotFound if there is none.
func (s *Service) Purchase(ctx context.Context, id string) (Detail, error) {
	var d Detail
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		d, err = detailTx(ctx, tx, id)
		return err
	})
	if err != nil {
		return Detail{}, fmt.Errorf("reconcile: purchase %q: %w", id, err)
	}
	return d, nil
}

// ClientPurchase is Purchase for the purchase API's client: it returns
// an error wrapping ErrNotFound, as for an unknown id, when the purchase
// was not created by client, so that a client can neither read another
// client's purchases nor tell that they exist. A purchase without a
// client (made by the CLI, or before clients were recorded) is readable
// by no API client: the safe default, since nobody can say whose it is.
// An empty client reads nothing.
//
// The purchase's client is checked before anything else is read, so that
// another client's purchase costs the same one query as an unknown id.
func (s *Service) ClientPurchase(ctx context.Context, client, id string) (Detail, error) {
	var d Detail
	err := s.store.InTx(ctx, func(tx Tx) error {
		p, err := tx.GetPurchase(ctx, id)
		if err != nil {
			return err
		}
		if client == "" || p.Client != client {
			return ErrNotFound
		}
		d, err = detailTx(ctx, tx, id)
		return err
	})
	if err != nil {
		return Detail{}, fmt.Errorf("reconcile: purchase %q: %w", id, err)
	}
	return d, nil
}

// detailTx reads a purchase and its audit trail in tx.
func detailTx(ctx context.Context, tx Tx, id string) (Detail, error) {
	var (
		d   Detail
		err error
	)
	if d.Purchase, err = tx.GetPurchase(ctx, id); err != nil {
		return Detail{}, err
	}
	if d.Transitions, err = tx.ListTransitions(ctx, id); err != nil {
		return Detail{}, err
	}
	if d.Attempts, err = tx.ListAttempts(ctx, id); err != nil {
		return Detail{}, err
	}
	if d.Job, err = tx.GetJob(ctx, id); err != nil {
		return Detail{}, err
	}
	d.Attempts = withUnanswered(d.Purchase, d.Transitions, d.Attempts)
	return d, nil
}

// callAfter returns the provider call a worker starts right after the
// transition t, or "" for a transition no call follows.
func callAfter(t TransitionRecord) provider.Op {
	switch {
	case t.LeaseToken == 0:
		return ""
	case t.To == statemachine.Submitted && t.Cause == CauseSubmit:
		return provider.OpCreate
	case t.To == statemachine.Reconciling && t.Cause == CauseKeyReplay:
		return provider.OpCreate
	case t.To == statemachine.Reconciling && t.Cause == CauseStatusQuery:
		return provider.OpStatus
	case t.To == statemachine.Reconciling && t.Cause == CauseSearch:
		return provider.OpSearch
	}
	return ""
}

// withUnanswered adds to attempts, in time order, the calls that the
// transitions show a worker started and for which no answer was ever
// recorded under the same lease: a process killed during a call leaves
// no row of its own, but its call may have reached the provider, and the
// history must say so.
func withUnanswered(p Purchase, transitions []TransitionRecord, attempts []Attempt) []Attempt {
	answered := map[int64]map[provider.Op]bool{}
	for _, a := range attempts {
		if answered[a.LeaseToken] == nil {
			answered[a.LeaseToken] = map[provider.Op]bool{}
		}
		answered[a.LeaseToken][a.Op] = true
	}
	out := attempts
	for _, t := range transitions {
		op := callAfter(t)
		if op == "" || answered[t.LeaseToken][op] {
			continue
		}
		a := Attempt{
			PurchaseID: p.ID, Op: op, Outcome: provider.Unknown, Actor: t.Actor, LeaseToken: t.LeaseToken,
			At: t.At, Derived: true,
			Note: "started after the " + string(t.From) + "→" + string(t.To) + " transition; no answer recorded: " +
				"the worker stopped during the call, or it is still in flight. It may have reached the provider.",
		}
		if op == provider.OpCreate {
			a.Key = p.ProviderKey
		}
		out = append(out, a)
	}
	if len(out) == len(attempts) {
		return attempts
	}
	slices.SortStableFunc(out, func(a, b Attempt) int { return a.At.Compare(b.At) })
	return out
}
