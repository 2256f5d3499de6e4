package budget

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// maxPriority is the last priority: reconcile.PriorityAudit.
const maxPriority = reconcile.PriorityAudit

// Bucket is the stored state of one token bucket of a shared budget.
type Bucket struct {
	// Name is the bucket: a reconcile.BudgetClass.
	Name string
	// Stored is false for a bucket that was never stored: the rest is zero.
	Stored bool
	// Tokens is how many calls may start now.
	Tokens float64
	// Rate is the bucket's current rate, in calls per second: its
	// configured limit, or less after a 429.
	Rate float64
	// UpdatedAt is when Tokens and Rate were last brought up to date.
	UpdatedAt time.Time
	// BlockedUntil is when the provider's last Retry-After ends.
	BlockedUntil time.Time
	// Demand is, by priority (index 0 for priority 1), until when a call
	// of that priority, refused a token, said it would be waiting.
	Demand [maxPriority]time.Time
	// Credit counts tokens owed to lower priorities: their reserved share
	// of what priority 1 took while they waited.
	Credit float64
	// Throttled counts the 429s reported for the bucket.
	Throttled int64
}

// Store keeps the buckets of shared budgets where every worker sees
// them: in the database. Both stores implement it.
type Store interface {
	// UpdateBuckets calls fn with the buckets of account named names, in
	// that order, and the store's clock, with the buckets' rows locked
	// against every other UpdateBuckets (in any process) until it returns.
	// If fn returns nil, what fn left in the buckets is stored, in the
	// same transaction; otherwise nothing is, and fn's error is returned.
	UpdateBuckets(ctx context.Context, account string, names []string, fn func(now time.Time, b []*Bucket) error) error
	// Buckets returns every stored bucket of account, by name.
	Buckets(ctx context.Context, account string) ([]Bucket, error)
}

// Limits are the limits of one provider account, in calls per
// second. A zero field means its default (DefaultLimits for the
// account's mode).
type Limits struct {
	Global, Create, Retrieve, Search, List, Refund float64
}

// Of returns the limit of class c (0 for an unknown class).
func (l Limits) Of(c reconcile.BudgetClass) float64 { return l.of(c) }

func (l Limits) of(c reconcile.BudgetClass) float64 {
	switch c {
	case reconcile.ClassGlobal:
		return l.Global
	case reconcile.ClassCreate:
		return l.Create
	case reconcile.ClassRetrieve:
		return l.Retrieve
	case reconcile.ClassSearch:
		return l.Search
	case reconcile.ClassList:
		return l.List
	case reconcile.ClassRefund:
		return l.Refund
	}
	return 0
}

// Set sets the limit of class c; it does nothing for an unknown class.
func (l *Limits) Set(c reconcile.BudgetClass, v float64) {
	if p := l.ptr(c); p != nil {
		*p = v
	}
}

func (l *Limits) ptr(c reconcile.BudgetClass) *float64 {
	switch c {
	case reconcile.ClassGlobal:
		return &l.Global
	case reconcile.ClassCreate:
		return &l.Create
	case reconcile.ClassRetrieve:
		return &l.Retrieve
	case reconcile.ClassSearch:
		return &l.Search
	case reconcile.ClassList:
		return &l.List
	case reconcile.ClassRefund:
		return &l.Refund
	}
	return nil
}

// DefaultLimits returns Stripe's documented limits: in live mode
// 100 calls/s in all, 25/s per endpoint and 20/s for the Search API; in
// test mode (a sandbox) 25/s in all, and per class as in live mode.
func DefaultLimits(live bool) Limits {
	l := Limits{Global: 100, Create: 25, Retrieve: 25, Search: 20, List: 25, Refund: 25}
	if !live {
		l.Global = 25
	}
	return l
}

// LiveKey reports whether a Stripe secret key is a live-mode key
// ("sk_live_" or the restricted "rk_live_"). Any other key is test mode.
func LiveKey(key string) bool {
	return strings.HasPrefix(key, "sk_live_") || strings.HasPrefix(key, "rk_live_")
}

// Observer is told what a shared budget does, for metrics.
type Observer interface {
	// BudgetRate is called with a class's current rate after each change.
	BudgetRate(class reconcile.BudgetClass, rate float64)
	// BudgetThrottled is called once per 429 reported.
	BudgetThrottled(class reconcile.BudgetClass)
	// BudgetWait is called once per call let through, with how long it
	// waited for the budget.
	BudgetWait(class reconcile.BudgetClass, waited time.Duration)
}

// AccountObserver is an Observer told which provider account's budget
// acted, for metrics by account. When the Config.Observer of Accounts
// implements it, each connected account's budget tells it the
// Account* methods, with the account, instead of the Observer's; a
// Shared made by New tells it the Observer's, as the platform's budget.
type AccountObserver interface {
	Observer
	// AccountBudgetRate is BudgetRate for the budget of account.
	AccountBudgetRate(account string, class reconcile.BudgetClass, rate float64)
	// AccountBudgetThrottled is BudgetThrottled for the budget of
	// account.
	AccountBudgetThrottled(account string, class reconcile.BudgetClass)
	// AccountBudgetWait is BudgetWait for the budget of account.
	AccountBudgetWait(account string, class reconcile.BudgetClass, waited time.Duration)
}

// accountObserver is the Observer of one connected account's budget: it
// tells an AccountObserver the account.
type accountObserver struct {
	obs     AccountObserver
	account string
}

func (o accountObserver) BudgetRate(class reconcile.BudgetClass, rate float64) {
	o.obs.AccountBudgetRate(o.account, class, rate)
}
func (o accountObserver) BudgetThrottled(class reconcile.BudgetClass) {
	o.obs.AccountBudgetThrottled(o.account, class)
}
func (o accountObserver) BudgetWait(class reconcile.BudgetClass, waited time.Duration) {
	o.obs.AccountBudgetWait(o.account, class, waited)
}

// observerFor returns the Observer of account's budget: obs itself,
// unless it is an AccountObserver, which is then told the account.
func observerFor(obs Observer, account string) Observer {
	if ao, ok := obs.(AccountObserver); ok {
		return accountObserver{obs: ao, account: account}
	}
	return obs
}

type nopObserver struct{}

func (nopObserver) BudgetRate(reconcile.BudgetClass, float64)       {}
func (nopObserver) BudgetThrottled(reconcile.BudgetClass)           {}
func (nopObserver) BudgetWait(reconcile.BudgetClass, time.Duration) {}

// Config configures a Shared. Zero fields take their
// documented defaults.
type Config struct {
	// Account names the provider account the budget is of: every worker
	// with the same Account shares one budget. Default "default".
	Account string
	// Live selects the default limits: Stripe's live mode (true) or test
	// mode. Default false (test mode, the smaller).
	Live bool
	// Limits are the configured rates, per second; a zero field is
	// DefaultLimits(Live)'s.
	Limits Limits
	// Burst is how many calls a bucket lets start at once after a quiet
	// spell. Default 1: calls are paced, so that no 1-second window sees
	// more than the rate and one call (a grant may come one token early,
	// and its call then sleeps until the token is due).
	Burst float64
	// Headroom is the share of each limit the budget leaves unused: the
	// provider counts calls when they arrive, and the time between a
	// grant and its call's arrival varies (a slow commit, a busy CPU, the
	// network), which bunches calls. In [0,1). Default 0.05: the budget
	// paces at 95% of each limit, so that even bunched calls keep within
	// the limit and one call over any second. A negative value means
	// none: the budget paces at the limits themselves.
	Headroom float64
	// ReserveShare is the share of a class's calls kept for lower
	// priorities while they wait and priority 1 would take everything, so
	// that a flood of new purchases never starves reconciliation. In
	// [0,1). Default 0.2.
	ReserveShare float64
	// Decrease multiplies a class's rate at each 429 (multiplicative
	// decrease). In (0,1). Default 0.5.
	Decrease float64
	// Increase is how fast a lowered rate grows back, in calls per second
	// per second (additive increase). Default 1/20 of the class's limit
	// (from half the limit back to all of it in 10 s).
	Increase float64
	// MinRate is the floor of a lowered rate, in calls per second.
	// Default 0.5.
	MinRate float64
	// MaxWait caps one sleep between two tries for a token. Default
	// 250ms.
	MaxWait time.Duration
	// Sleep waits d or until ctx ends. Default a timer; tests inject one.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now measures waits (not the buckets, which use the store's clock).
	// Default time.Now.
	Now func() time.Time
	// Observer is told the rates, the 429s and the waits. Default none.
	Observer Observer
}

// DefaultConfig returns the default of every field of Config
// for an account in test mode (Live false). Limits are test mode's.
func DefaultConfig() Config {
	return Config{
		Account:      "default",
		Limits:       DefaultLimits(false),
		Burst:        1,
		Headroom:     0.05,
		ReserveShare: 0.2,
		Decrease:     0.5,
		MinRate:      0.5,
		MaxWait:      250 * time.Millisecond,
		Sleep:        sleepCtx,
		Now:          time.Now,
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

func (c Config) withDefaults() (Config, error) {
	def := DefaultConfig()
	if c.Account == "" {
		c.Account = def.Account
	}
	defLimits := DefaultLimits(c.Live)
	for _, cl := range append([]reconcile.BudgetClass{reconcile.ClassGlobal}, reconcile.BudgetClasses...) {
		p := c.Limits.ptr(cl)
		if *p == 0 {
			*p = defLimits.of(cl)
		}
		if !(*p > 0) || math.IsInf(*p, 0) {
			return c, fmt.Errorf("reconcile: budget: limit of %s = %v: must be positive", cl, *p)
		}
	}
	if c.Burst == 0 {
		c.Burst = def.Burst
	}
	if c.ReserveShare == 0 {
		c.ReserveShare = def.ReserveShare
	}
	switch {
	case c.Headroom == 0:
		c.Headroom = def.Headroom
	case c.Headroom < 0:
		c.Headroom = 0
	}
	if c.Decrease == 0 {
		c.Decrease = def.Decrease
	}
	if c.MinRate == 0 {
		c.MinRate = def.MinRate
	}
	if c.MaxWait == 0 {
		c.MaxWait = def.MaxWait
	}
	if c.Sleep == nil {
		c.Sleep = def.Sleep
	}
	if c.Now == nil {
		c.Now = def.Now
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	var errs []error
	if !(c.Burst >= 1) {
		errs = append(errs, fmt.Errorf("burst %v: must be at least 1", c.Burst))
	}
	if !(c.Headroom < 1) {
		errs = append(errs, fmt.Errorf("headroom %v: must be in [0,1)", c.Headroom))
	}
	if !(c.ReserveShare >= 0 && c.ReserveShare < 1) {
		errs = append(errs, fmt.Errorf("reserve share %v: must be in [0,1)", c.ReserveShare))
	}
	if !(c.Decrease > 0 && c.Decrease < 1) {
		errs = append(errs, fmt.Errorf("decrease %v: must be in (0,1)", c.Decrease))
	}
	if c.Increase < 0 || !(c.MinRate > 0) || c.MaxWait < 0 {
		errs = append(errs, fmt.Errorf("increase %v, min rate %v, max wait %s: must be positive", c.Increase, c.MinRate, c.MaxWait))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("reconcile: budget: %w", err)
	}
	return c, nil
}
