package reconcile

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// BudgetClass names one rate budget of a provider account: a class of
// provider calls that the provider limits together.
type BudgetClass string

// The classes. ClassGlobal is the budget every call also takes from.
const (
	ClassCreate   BudgetClass = "create"
	ClassRetrieve BudgetClass = "retrieve"
	ClassSearch   BudgetClass = "search"
	ClassList     BudgetClass = "list"
	ClassRefund   BudgetClass = "refund"
	ClassGlobal   BudgetClass = "global"
)

// BudgetClasses lists the classes a call can be of (ClassGlobal aside), in
// a fixed order, for metrics and pages.
var BudgetClasses = []BudgetClass{ClassCreate, ClassRetrieve, ClassSearch, ClassList, ClassRefund}

// ClassOf returns the budget class of a provider call: creates, status
// queries, searches, listings, and every refund call.
func ClassOf(op provider.Op) BudgetClass {
	switch op {
	case provider.OpCreate:
		return ClassCreate
	case provider.OpStatus:
		return ClassRetrieve
	case provider.OpSearch:
		return ClassSearch
	case provider.OpList, provider.OpEventList:
		return ClassList
	case provider.OpRefundCreate, provider.OpRefundGet, provider.OpRefundList:
		return ClassRefund
	}
	return ClassGlobal
}

// Priority orders the calls that wait for one budget: 1 goes first.
type Priority int

// The priorities, from first to last. Operator calls (the live views of
// the ops pages) are few and a person waits for them: PriorityNew.
const (
	// PriorityNew: the first create of a new purchase.
	PriorityNew Priority = 1
	// PriorityReconcile: the reconciliation of an uncertain purchase (a
	// replayed create, a status query, a search) and refund calls.
	PriorityReconcile Priority = 2
	// PrioritySlow: the slow checks of escalated purchases.
	PrioritySlow Priority = 3
	// PriorityAudit: the audit's listing.
	PriorityAudit Priority = 4
)

const maxPriority = PriorityAudit

// Budget is the rate budget of one provider account, shared by every
// worker that calls the provider with its key.
type Budget interface {
	// Wait blocks until one call of class may be made at priority, or
	// ctx ends (its error wraps ctx's). A call that Wait let through
	// counts against the budget whether or not it is then made.
	Wait(ctx context.Context, class BudgetClass, priority Priority) error
	// Throttled reports that the provider answered a call of class with a
	// 429, asking for retryAfter of silence (0: not said). The budget of
	// class shrinks, and grows back slowly.
	Throttled(ctx context.Context, class BudgetClass, retryAfter time.Duration) error
}

// Reserver is a Budget that hands out several tokens at once, each with
// the time its call may be sent: a worker takes the tokens of its next
// claim's creates before it claims (see Service.claim), so that it
// never claims more purchases than the budget serves within their leases.
type Reserver interface {
	Budget
	// Reserve takes up to n tokens of class at priority, each for a call
	// that may be sent within horizon of now, and none due sooner than
	// lead: the caller cannot send a call sooner, and a token it could not
	// use on time would bunch its call with the next ones. It takes fewer
	// than n, or none, when the budget cannot serve more within horizon.
	// Tokens taken count against the budget whether or not their calls
	// are made: give back the ones no call will use (Unreserve).
	Reserve(ctx context.Context, class BudgetClass, priority Priority, n int, lead, horizon time.Duration) (Reservation, error)
	// Send waits until the call of a token of class reserved with a due
	// time of due (by the budget's clock: now plus its delay when
	// reserved) may be sent, or ctx ends.
	Send(ctx context.Context, class BudgetClass, due time.Time) error
	// Unreserve gives back the last k tokens of r, which no call will
	// use. The budget takes them back only while nobody took a token after
	// r's (their slots are still the last handed out); otherwise they are
	// lost, so that no slot is ever handed out twice.
	Unreserve(ctx context.Context, r Reservation, k int) error
}

// Reservation is what Reserve took.
type Reservation struct {
	// Class is the class the tokens are of.
	Class BudgetClass
	// Delays are, soonest first, how long after the reservation each
	// token's call must wait before it is sent: one per token.
	Delays []time.Duration
	// Retry is, when no token was taken, how long to wait before asking
	// again.
	Retry time.Duration
	// tails are where the class's and the global bucket's last handed-out
	// slot stood after the reservation (see tailOf).
	tails [2]time.Time
}

// Unlimited is the Budget that never waits: a provider without limits.
type Unlimited struct{}

// Wait implements Budget: it returns ctx's error, if any, at once.
func (Unlimited) Wait(ctx context.Context, _ BudgetClass, _ Priority) error { return ctx.Err() }

// Throttled implements Budget: it does nothing.
func (Unlimited) Throttled(context.Context, BudgetClass, time.Duration) error { return nil }

// Bucket is the stored state of one token bucket of a shared budget.
type Bucket struct {
	// Name is the bucket: a BudgetClass.
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

// BudgetStore keeps the buckets of shared budgets where every worker sees
// them: in the database. Both stores implement it.
type BudgetStore interface {
	// UpdateBuckets calls fn with the buckets of account named names, in
	// that order, and the store's clock, with the buckets' rows locked
	// against every other UpdateBuckets (in any process) until it returns.
	// If fn returns nil, what fn left in the buckets is stored, in the
	// same transaction; otherwise nothing is, and fn's error is returned.
	UpdateBuckets(ctx context.Context, account string, names []string, fn func(now time.Time, b []*Bucket) error) error
	// Buckets returns every stored bucket of account, by name.
	Buckets(ctx context.Context, account string) ([]Bucket, error)
}

// BudgetLimits are the limits of one provider account, in calls per
// second. A zero field means its default (DefaultBudgetLimits for the
// account's mode).
type BudgetLimits struct {
	Global, Create, Retrieve, Search, List, Refund float64
}

// Of returns the limit of class c (0 for an unknown class).
func (l BudgetLimits) Of(c BudgetClass) float64 { return l.of(c) }

func (l BudgetLimits) of(c BudgetClass) float64 {
	switch c {
	case ClassGlobal:
		return l.Global
	case ClassCreate:
		return l.Create
	case ClassRetrieve:
		return l.Retrieve
	case ClassSearch:
		return l.Search
	case ClassList:
		return l.List
	case ClassRefund:
		return l.Refund
	}
	return 0
}

// Set sets the limit of class c; it does nothing for an unknown class.
func (l *BudgetLimits) Set(c BudgetClass, v float64) {
	if p := l.ptr(c); p != nil {
		*p = v
	}
}

func (l *BudgetLimits) ptr(c BudgetClass) *float64 {
	switch c {
	case ClassGlobal:
		return &l.Global
	case ClassCreate:
		return &l.Create
	case ClassRetrieve:
		return &l.Retrieve
	case ClassSearch:
		return &l.Search
	case ClassList:
		return &l.List
	case ClassRefund:
		return &l.Refund
	}
	return nil
}

// DefaultBudgetLimits returns Stripe's documented limits: in live mode
// 100 calls/s in all, 25/s per endpoint and 20/s for the Search API; in
// test mode (a sandbox) 25/s in all, and per class as in live mode.
func DefaultBudgetLimits(live bool) BudgetLimits {
	l := BudgetLimits{Global: 100, Create: 25, Retrieve: 25, Search: 20, List: 25, Refund: 25}
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

// BudgetObserver is told what a shared budget does, for metrics.
type BudgetObserver interface {
	// BudgetRate is called with a class's current rate after each change.
	BudgetRate(class BudgetClass, rate float64)
	// BudgetThrottled is called once per 429 reported.
	BudgetThrottled(class BudgetClass)
	// BudgetWait is called once per call let through, with how long it
	// waited for the budget.
	BudgetWait(class BudgetClass, waited time.Duration)
}

type nopBudgetObserver struct{}

func (nopBudgetObserver) BudgetRate(BudgetClass, float64)       {}
func (nopBudgetObserver) BudgetThrottled(BudgetClass)           {}
func (nopBudgetObserver) BudgetWait(BudgetClass, time.Duration) {}

// BudgetConfig configures a SharedBudget. Zero fields take their
// documented defaults.
type BudgetConfig struct {
	// Account names the provider account the budget is of: every worker
	// with the same Account shares one budget. Default "default".
	Account string
	// Live selects the default limits: Stripe's live mode (true) or test
	// mode. Default false (test mode, the smaller).
	Live bool
	// Limits are the configured rates, per second; a zero field is
	// DefaultBudgetLimits(Live)'s.
	Limits BudgetLimits
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
	Observer BudgetObserver
}

// DefaultBudgetConfig returns the default of every field of BudgetConfig
// for an account in test mode (Live false). Limits are test mode's.
func DefaultBudgetConfig() BudgetConfig {
	return BudgetConfig{
		Account:      "default",
		Limits:       DefaultBudgetLimits(false),
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

func (c BudgetConfig) withDefaults() (BudgetConfig, error) {
	def := DefaultBudgetConfig()
	if c.Account == "" {
		c.Account = def.Account
	}
	defLimits := DefaultBudgetLimits(c.Live)
	for _, cl := range append([]BudgetClass{ClassGlobal}, BudgetClasses...) {
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
		c.Observer = nopBudgetObserver{}
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

// SharedBudget is a Budget kept in the database, shared by every worker
// process and replica that uses the same Account.
//
// Each class, and the global budget, is one token bucket: one row of
// provider_budget, holding its tokens, its current rate and when it was
// last brought up to date. A call takes one token from its class's row and
// one from the global row in one transaction that locks both rows
// (SELECT ... FOR UPDATE in PostgreSQL, in a fixed order so that takers
// never deadlock; SQLite's single writer). Why this holds under several
// replicas:
//   - every token any replica hands out is a committed decrement of the
//     same row, serialised by the row lock, so the replicas together take
//     at most what the bucket refills, whatever their number;
//   - refills are computed from the store's clock (PostgreSQL's now()
//     unless a clock is injected), not each replica's, so a replica with
//     a skewed clock cannot mint tokens;
//   - nothing is held between calls: a token taken is spent, and a
//     worker that crashes holds no lease, slice or reservation, so it
//     cannot leak budget. A crash mid-transaction rolls back.
//
// Priorities are kept in the rows too: a waiter records its priority's
// demand, and a token goes to a lower priority only while no higher one
// asked recently, except for the reserved share (Credit), which lower
// priorities earn while priority 1 takes tokens under their demand.
//
// A 429 lowers the class's rate in its row (multiplicative decrease) and
// blocks it for the provider's Retry-After; each take lets the rate grow
// back (additive increase) up to the configured limit.
type SharedBudget struct {
	store BudgetStore
	cfg   BudgetConfig
}

var _ Reserver = (*SharedBudget)(nil)

// NewSharedBudget returns the budget of cfg.Account kept in store, or an
// error naming the first invalid field of cfg.
func NewSharedBudget(store BudgetStore, cfg BudgetConfig) (*SharedBudget, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &SharedBudget{store: store, cfg: cfg}, nil
}

// Config returns the budget's configuration, defaulted.
func (b *SharedBudget) Config() BudgetConfig { return b.cfg }

func (b *SharedBudget) increase(c BudgetClass) float64 {
	if b.cfg.Increase > 0 {
		return b.cfg.Increase
	}
	return b.cfg.Limits.of(c) / 20
}

// pace is the rate the budget paces class c at when not lowered: its
// limit less the headroom.
func (b *SharedBudget) pace(c BudgetClass) float64 {
	return b.cfg.Limits.of(c) * (1 - b.cfg.Headroom)
}

// refill brings bk (of class c) up to now: its rate grows back by the
// additive increase, and its tokens by the rate, up to Burst.
func (b *SharedBudget) refill(bk *Bucket, c BudgetClass, now time.Time) {
	limit := b.pace(c)
	if !bk.Stored {
		bk.Stored, bk.Tokens, bk.Rate, bk.UpdatedAt = true, b.cfg.Burst, limit, now
	}
	dt := now.Sub(bk.UpdatedAt).Seconds()
	if dt < 0 {
		dt = 0
	}
	if bk.Rate < limit {
		// Rate r grows as r + a·t: the tokens of the interval are the
		// integral of the rate.
		a := b.increase(c)
		t := dt
		if a > 0 && bk.Rate+a*t > limit {
			t = (limit - bk.Rate) / a
		}
		bk.Tokens += bk.Rate*t + a*t*t/2 + limit*(dt-t)
		bk.Rate = min(limit, bk.Rate+a*dt)
	} else {
		bk.Rate = limit // also when the limit was lowered by configuration
		bk.Tokens += bk.Rate * dt
	}
	bk.Tokens = min(bk.Tokens, b.cfg.Burst)
	if now.After(bk.UpdatedAt) {
		bk.UpdatedAt = now
	}
}

func (b *SharedBudget) sleepFor(rate, missing float64) time.Duration {
	d := time.Duration(missing / rate * float64(time.Second))
	return min(max(d, time.Millisecond), b.cfg.MaxWait)
}

// lookahead is how far below one token a bucket may be taken: a call may
// be granted the next token before it is there, and then sleeps until it
// is, so that pacing loses nothing to the waiters' polling (GCRA's
// theoretical arrival time, one token deep). The calls themselves still
// go out one interval apart: lookahead commits future slots, it does not
// add any.
const lookahead = 1.0

// firstLookahead is priority 1's deeper lookahead (and that of a lower
// priority owed the reserve): it takes the slot after next rather than
// wait and hold the bucket for itself, so that new purchases rarely have
// to wait at all and the bucket never idles while they do.
const firstLookahead = 2.0

// active reports whether priority q has a waiter: one that was refused and
// said it would try again by Demand[q].
func active(bk *Bucket, q Priority, now time.Time) bool { return !bk.Demand[q-1].Before(now) }

// decide says whether bk may give a token to priority p now; if not, how
// long to wait before trying again. It does not take the token.
func (b *SharedBudget) decide(bk *Bucket, p Priority, now time.Time) (ok, viaCredit bool, wait time.Duration) {
	return b.decideDeep(bk, p, now, 0)
}

// decideDeep is decide for a reservation that may look deep tokens ahead
// (Reserve), while no other priority waits: a waiter of another priority
// keeps every taker to decide's shallow lookahead, so that the bucket
// drains within the reservations' horizon and the priorities and the
// reserved share work as for Wait.
func (b *SharedBudget) decideDeep(bk *Bucket, p Priority, now time.Time, deep float64) (ok, viaCredit bool, wait time.Duration) {
	if now.Before(bk.BlockedUntil) {
		return false, false, bk.BlockedUntil.Sub(now)
	}
	higher, lower := false, false
	for q := PriorityNew; q <= maxPriority; q++ {
		switch {
		case q < p && active(bk, q, now):
			higher = true
		case q > p && active(bk, q, now):
			lower = true
		}
	}
	owed := p > PriorityNew && bk.Credit >= 1 && !higherBelow(bk, p, now)
	depth := lookahead
	if p == PriorityNew || owed {
		depth = firstLookahead
	}
	if !higher && !lower {
		depth = max(depth, deep)
	}
	if bk.Tokens < 1-depth {
		return false, false, b.sleepFor(bk.Rate, 1-depth-bk.Tokens)
	}
	switch {
	case p == PriorityNew && lower && bk.Credit >= 1:
		// The reserved share is owed: leave this token to reconciliation.
	case !higher:
		return true, false, 0
	case owed:
		return true, true, 0
	}
	return false, false, b.sleepFor(bk.Rate, 1)
}

// higherBelow reports whether a priority between 1 and p (both excluded)
// is waiting: the reserved share goes to the highest of the lower
// priorities first.
func higherBelow(bk *Bucket, p Priority, now time.Time) bool {
	for q := PriorityNew + 1; q < p; q++ {
		if active(bk, q, now) {
			return true
		}
	}
	return false
}

// take spends one token of bk for priority p, moving the reserve's credit,
// and returns how long the call must sleep until its token is there.
func (b *SharedBudget) take(bk *Bucket, p Priority, viaCredit bool, now time.Time) time.Duration {
	var delay time.Duration
	if bk.Tokens < 1 {
		delay = time.Duration((1 - bk.Tokens) / bk.Rate * float64(time.Second))
	}
	bk.Tokens--
	// Served: this priority's demand is met (its other waiters say so
	// again when next refused).
	if bk.Demand[p-1].After(now) {
		bk.Demand[p-1] = now.Add(-time.Microsecond)
	}
	switch {
	case viaCredit:
		bk.Credit--
	case p == PriorityNew:
		lower := false
		for q := PriorityNew + 1; q <= maxPriority; q++ {
			lower = lower || active(bk, q, now)
		}
		if lower && b.cfg.ReserveShare > 0 {
			bk.Credit = min(bk.Credit+b.cfg.ReserveShare/(1-b.cfg.ReserveShare), 2)
		} else if !lower {
			bk.Credit = 0
		}
	}
	return delay
}

// TryTake is one try of Wait: in one transaction it either takes one token
// of class and one of the global budget for priority, returning granted
// and how long the call must sleep before it is sent (delay), or takes
// nothing, records that priority waits, and returns how long to wait
// before trying again.
func (b *SharedBudget) TryTake(ctx context.Context, class BudgetClass, priority Priority) (granted bool, delay, wait time.Duration, err error) {
	if class == ClassGlobal || b.cfg.Limits.of(class) == 0 {
		return false, 0, 0, fmt.Errorf("reconcile: budget: no such class %q", class)
	}
	priority = min(max(priority, PriorityNew), maxPriority)
	names := []string{string(class), string(ClassGlobal)}
	classes := []BudgetClass{class, ClassGlobal}
	var rates [2]float64
	err = b.store.UpdateBuckets(ctx, b.cfg.Account, names, func(now time.Time, bks []*Bucket) error {
		granted, delay, wait = true, 0, 0
		credit := [2]bool{}
		for i, bk := range bks {
			b.refill(bk, classes[i], now)
			ok, via, w := b.decide(bk, priority, now)
			credit[i] = via
			if !ok {
				granted = false
				wait = max(wait, w)
			}
		}
		if granted {
			for i, bk := range bks {
				delay = max(delay, b.take(bk, priority, credit[i], now))
			}
		} else {
			// Waiting: say so until the next try, with room for jitter.
			until := now.Add(wait*3/2 + time.Millisecond)
			for _, bk := range bks {
				if until.After(bk.Demand[priority-1]) {
					bk.Demand[priority-1] = until
				}
			}
		}
		rates = [2]float64{bks[0].Rate, bks[1].Rate}
		return nil
	})
	if err != nil {
		return false, 0, 0, fmt.Errorf("reconcile: budget %s: %w", class, err)
	}
	b.cfg.Observer.BudgetRate(class, rates[0])
	b.cfg.Observer.BudgetRate(ClassGlobal, rates[1])
	return granted, delay, wait, nil
}

// Reserve implements Reserver: in one transaction, as TryTake takes one
// token, it takes up to n tokens of class and of the global budget, each
// due within horizon. Every token it hands out is a committed decrement of
// the buckets' rows, as TryTake's, so the workers of every process
// together reserve at most what the buckets refill within horizon: a
// worker that claims only what it reserved never waits for the budget
// beyond horizon, however many workers share it. The lookahead goes as
// deep as horizon only while no other priority waits (decideDeep). The
// tokens of a bucket due sooner than lead, which only an idle bucket
// holds, are left unused when the first is taken: a slot goes by, rather
// than carry a late call into the next one.
func (b *SharedBudget) Reserve(ctx context.Context, class BudgetClass, priority Priority, n int, lead, horizon time.Duration) (Reservation, error) {
	r := Reservation{Class: class}
	if class == ClassGlobal || b.cfg.Limits.of(class) == 0 {
		return r, fmt.Errorf("reconcile: budget: no such class %q", class)
	}
	if n <= 0 {
		return r, nil
	}
	priority = min(max(priority, PriorityNew), maxPriority)
	names := []string{string(class), string(ClassGlobal)}
	classes := []BudgetClass{class, ClassGlobal}
	var rates [2]float64
	err := b.store.UpdateBuckets(ctx, b.cfg.Account, names, func(now time.Time, bks []*Bucket) error {
		r.Delays, r.Retry = r.Delays[:0], 0
		now = settledNow(now, bks)
		for i, bk := range bks {
			b.refill(bk, classes[i], now)
		}
		for len(r.Delays) < n {
			granted, wait := true, time.Duration(0)
			credit := [2]bool{}
			for i, bk := range bks {
				// A token down to 1-deep is due within horizon.
				ok, via, w := b.decideDeep(bk, priority, now, bk.Rate*horizon.Seconds())
				credit[i] = via
				if !ok {
					granted = false
					wait = max(wait, w)
				}
			}
			if !granted {
				r.Retry = wait
				break
			}
			var delay time.Duration
			for i, bk := range bks {
				if len(r.Delays) == 0 {
					bk.Tokens = min(bk.Tokens, 1-bk.Rate*lead.Seconds())
				}
				delay = max(delay, b.take(bk, priority, credit[i], now))
			}
			r.Delays = append(r.Delays, delay)
		}
		if len(r.Delays) == 0 {
			until := now.Add(r.Retry*3/2 + time.Millisecond)
			for _, bk := range bks {
				if until.After(bk.Demand[priority-1]) {
					bk.Demand[priority-1] = until
				}
			}
		} else {
			r.Retry = 0
		}
		for i, bk := range bks {
			r.tails[i] = tailOf(bk, now)
			rates[i] = bk.Rate
		}
		return nil
	})
	if err != nil {
		return Reservation{Class: class}, fmt.Errorf("reconcile: budget %s: reserve: %w", class, err)
	}
	b.cfg.Observer.BudgetRate(class, rates[0])
	b.cfg.Observer.BudgetRate(ClassGlobal, rates[1])
	return r, nil
}

// settledNow is the time a reservation's delays count from: the store's
// now, or the latest time the buckets were brought up to, if later. A
// transaction's clock is read when it starts (PostgreSQL's now()), and it
// may get the rows only after a transaction that started later wrote
// them: counted from its own earlier now, its delays would come that much
// early, and a deep reservation's every call with them.
func settledNow(now time.Time, bks []*Bucket) time.Time {
	for _, bk := range bks {
		if bk.Stored && bk.UpdatedAt.After(now) {
			now = bk.UpdatedAt
		}
	}
	return now
}

// tailOf is where bk's last handed-out slot stands at now: now less its
// tokens' worth of time. Refills at an unchanged rate leave it where it
// is, and each token taken moves it one interval later, so an unchanged
// tail means that nobody took a token since.
func tailOf(bk *Bucket, now time.Time) time.Time {
	return now.Add(-time.Duration(bk.Tokens / bk.Rate * float64(time.Second)))
}

// sendPacers hold, by account and class, when the last reserved call of
// this process went out (see Send). Every SharedBudget of the process
// shares them: its workers stall together.
var sendPacers sync.Map // account + "/" + class → *sendPacer

type sendPacer struct {
	mu   sync.Mutex
	last time.Time
}

// Send implements Reserver: it waits until due, and until one interval of
// class's pace (and the global one's: the limits less the headroom) after
// the previous reserved call of class this process sent. Reserved tokens
// are spoken for ahead of time, so a stall of the process (a pause, a busy
// CPU) would otherwise let every call that fell due during it go at once;
// paced, they go on at the budget's pace, late. On time, the reserved
// calls are an interval apart already.
func (b *SharedBudget) Send(ctx context.Context, class BudgetClass, due time.Time) error {
	v, _ := sendPacers.LoadOrStore(b.cfg.Account+"/"+string(class), &sendPacer{})
	p := v.(*sendPacer)
	gap := time.Duration(float64(time.Second) / min(b.pace(class), b.pace(ClassGlobal)))
	p.mu.Lock()
	at := due
	if next := p.last.Add(gap); next.After(at) {
		at = next
	}
	if now := b.cfg.Now(); now.After(at) {
		at = now
	}
	p.last = at
	p.mu.Unlock()
	if d := at.Sub(b.cfg.Now()); d > 0 {
		if err := b.cfg.Sleep(ctx, d); err != nil {
			return fmt.Errorf("reconcile: budget %s: send: %w", class, err)
		}
	}
	return nil
}

// tailSlack is how far a bucket's tail may move by rounding alone: the
// stores keep times to the microsecond. A token taken moves it by one
// interval, 1/rate, far more.
const tailSlack = 10 * time.Microsecond

// Unreserve implements Reserver: the last k tokens of r go back to its
// class's bucket and the global one, in one transaction, if both buckets'
// tails are still r's; else they are lost.
func (b *SharedBudget) Unreserve(ctx context.Context, r Reservation, k int) error {
	class := r.Class
	if class == ClassGlobal || b.cfg.Limits.of(class) == 0 {
		return fmt.Errorf("reconcile: budget: no such class %q", class)
	}
	if k <= 0 {
		return nil
	}
	k = min(k, len(r.Delays))
	classes := []BudgetClass{class, ClassGlobal}
	err := b.store.UpdateBuckets(ctx, b.cfg.Account, []string{string(class), string(ClassGlobal)}, func(now time.Time, bks []*Bucket) error {
		now = settledNow(now, bks)
		for i, bk := range bks {
			b.refill(bk, classes[i], now)
			// tailSlack absorbs the rounding of the stored times and tokens.
			if d := tailOf(bk, now).Sub(r.tails[i]); d > tailSlack || d < -tailSlack {
				return nil // taken after r, or refilled past it: keep the slots spent
			}
		}
		for _, bk := range bks {
			bk.Tokens = min(bk.Tokens+float64(k), b.cfg.Burst)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reconcile: budget %s: unreserve: %w", class, err)
	}
	return nil
}

// Wait implements Budget: it tries TryTake until granted, sleeping
// between tries, then sleeps the grant's delay.
func (b *SharedBudget) Wait(ctx context.Context, class BudgetClass, priority Priority) error {
	start := b.cfg.Now()
	for {
		granted, delay, wait, err := b.TryTake(ctx, class, priority)
		if err != nil {
			return err
		}
		if granted {
			if delay > 0 {
				if err := b.cfg.Sleep(ctx, delay); err != nil {
					return fmt.Errorf("reconcile: budget %s: %w", class, err)
				}
			}
			b.cfg.Observer.BudgetWait(class, b.cfg.Now().Sub(start))
			return nil
		}
		// Jitter spreads the waiters of several processes over the next
		// token's interval.
		wait = time.Duration(float64(wait) * (0.5 + rand.Float64()))
		if err := b.cfg.Sleep(ctx, wait); err != nil {
			return fmt.Errorf("reconcile: budget %s: %w", class, err)
		}
	}
}

// Throttled implements Budget: class's rate is multiplied by Decrease (not
// below MinRate), and the class takes no token before retryAfter ends.
func (b *SharedBudget) Throttled(ctx context.Context, class BudgetClass, retryAfter time.Duration) error {
	if class == ClassGlobal || b.cfg.Limits.of(class) == 0 {
		return fmt.Errorf("reconcile: budget: no such class %q", class)
	}
	var rate float64
	err := b.store.UpdateBuckets(ctx, b.cfg.Account, []string{string(class)}, func(now time.Time, bks []*Bucket) error {
		bk := bks[0]
		b.refill(bk, class, now)
		bk.Rate = max(b.cfg.MinRate, bk.Rate*b.cfg.Decrease)
		bk.Tokens = min(bk.Tokens, 0)
		bk.Throttled++
		if until := now.Add(retryAfter); retryAfter > 0 && until.After(bk.BlockedUntil) {
			bk.BlockedUntil = until
		}
		rate = bk.Rate
		return nil
	})
	if err != nil {
		return fmt.Errorf("reconcile: budget %s: throttled: %w", class, err)
	}
	b.cfg.Observer.BudgetThrottled(class)
	b.cfg.Observer.BudgetRate(class, rate)
	return nil
}

// Rates returns the current rate of each stored class as last stored: the
// limit less the headroom, or less after 429s.
func (b *SharedBudget) Rates(ctx context.Context) (map[BudgetClass]float64, error) {
	bks, err := b.store.Buckets(ctx, b.cfg.Account)
	if err != nil {
		return nil, fmt.Errorf("reconcile: budget rates: %w", err)
	}
	out := make(map[BudgetClass]float64, len(bks))
	for _, bk := range bks {
		out[BudgetClass(bk.Name)] = bk.Rate
	}
	return out, nil
}
