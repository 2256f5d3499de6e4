// Package budget is the provider's rate budget shared by every worker
// process and replica of one account: Shared, a reconcile.Reserver kept
// in the database (a Store: both stores implement it), configured by
// Config. reconcile declares the budget it consumes (reconcile.Budget,
// reconcile.Reserver) and its classes and priorities; cmd/payrecon builds
// the shared budget and hands it to the service (reconcile.Config.Budget).
package budget

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// Shared is a reconcile.Budget kept in the database, shared by every worker
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
type Shared struct {
	store Store
	cfg   Config
}

var _ reconcile.Reserver = (*Shared)(nil)

// New returns the budget of cfg.Account kept in store, or an
// error naming the first invalid field of cfg.
func New(store Store, cfg Config) (*Shared, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Shared{store: store, cfg: cfg}, nil
}

// Config returns the budget's configuration, defaulted.
func (b *Shared) Config() Config { return b.cfg }

func (b *Shared) increase(c reconcile.BudgetClass) float64 {
	if b.cfg.Increase > 0 {
		return b.cfg.Increase
	}
	return b.cfg.Limits.of(c) / 20
}

// pace is the rate the budget paces class c at when not lowered: its
// limit less the headroom.
func (b *Shared) pace(c reconcile.BudgetClass) float64 {
	return b.cfg.Limits.of(c) * (1 - b.cfg.Headroom)
}

// refill brings bk (of class c) up to now: its rate grows back by the
// additive increase, and its tokens by the rate, up to Burst.
func (b *Shared) refill(bk *Bucket, c reconcile.BudgetClass, now time.Time) {
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

func (b *Shared) sleepFor(rate, missing float64) time.Duration {
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
func active(bk *Bucket, q reconcile.Priority, now time.Time) bool { return !bk.Demand[q-1].Before(now) }

// decide says whether bk may give a token to priority p now; if not, how
// long to wait before trying again. It does not take the token.
func (b *Shared) decide(bk *Bucket, p reconcile.Priority, now time.Time) (ok, viaCredit bool, wait time.Duration) {
	return b.decideDeep(bk, p, now, 0)
}

// decideDeep is decide for a reservation that may look deep tokens ahead
// (Reserve), while no other priority waits: a waiter of another priority
// keeps every taker to decide's shallow lookahead, so that the bucket
// drains within the reservations' horizon and the priorities and the
// reserved share work as for Wait.
func (b *Shared) decideDeep(bk *Bucket, p reconcile.Priority, now time.Time, deep float64) (ok, viaCredit bool, wait time.Duration) {
	if now.Before(bk.BlockedUntil) {
		return false, false, bk.BlockedUntil.Sub(now)
	}
	higher, lower := false, false
	for q := reconcile.PriorityNew; q <= maxPriority; q++ {
		switch {
		case q < p && active(bk, q, now):
			higher = true
		case q > p && active(bk, q, now):
			lower = true
		}
	}
	owed := p > reconcile.PriorityNew && bk.Credit >= 1 && !higherBelow(bk, p, now)
	depth := lookahead
	if p == reconcile.PriorityNew || owed {
		depth = firstLookahead
	}
	if !higher && !lower {
		depth = max(depth, deep)
	}
	if bk.Tokens < 1-depth {
		return false, false, b.sleepFor(bk.Rate, 1-depth-bk.Tokens)
	}
	switch {
	case p == reconcile.PriorityNew && lower && bk.Credit >= 1:
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
func higherBelow(bk *Bucket, p reconcile.Priority, now time.Time) bool {
	for q := reconcile.PriorityNew + 1; q < p; q++ {
		if active(bk, q, now) {
			return true
		}
	}
	return false
}

// take spends one token of bk for priority p, moving the reserve's credit,
// and returns how long the call must sleep until its token is there.
func (b *Shared) take(bk *Bucket, p reconcile.Priority, viaCredit bool, now time.Time) time.Duration {
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
	case p == reconcile.PriorityNew:
		lower := false
		for q := reconcile.PriorityNew + 1; q <= maxPriority; q++ {
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
func (b *Shared) TryTake(ctx context.Context, class reconcile.BudgetClass, priority reconcile.Priority) (granted bool, delay, wait time.Duration, err error) {
	if class == reconcile.ClassGlobal || b.cfg.Limits.of(class) == 0 {
		return false, 0, 0, fmt.Errorf("reconcile: budget: no such class %q", class)
	}
	priority = min(max(priority, reconcile.PriorityNew), maxPriority)
	names := []string{string(class), string(reconcile.ClassGlobal)}
	classes := []reconcile.BudgetClass{class, reconcile.ClassGlobal}
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
	b.cfg.Observer.BudgetRate(reconcile.ClassGlobal, rates[1])
	return granted, delay, wait, nil
}

// Reserve implements reconcile.Reserver: in one transaction, as TryTake
// takes one token, it takes up to n tokens of class and of the global
// budget, each due within horizon. Every token it hands out is a committed
// decrement of the buckets' rows, as TryTake's, so the workers of every
// process together reserve at most what the buckets refill within horizon: a
// worker that claims only what it reserved never waits for the budget beyond
// horizon, however many workers share it. The lookahead goes as deep as
// horizon only while no other priority waits (decideDeep). The tokens of a
// bucket due sooner than lead, which only an idle bucket holds, are left
// unused when the first is taken: a slot goes by, rather than carry a late
// call into the next one.
func (b *Shared) Reserve(ctx context.Context, class reconcile.BudgetClass, priority reconcile.Priority, n int, lead, horizon time.Duration) (reconcile.Reservation, error) {
	r := reconcile.Reservation{Class: class}
	if class == reconcile.ClassGlobal || b.cfg.Limits.of(class) == 0 {
		return r, fmt.Errorf("reconcile: budget: no such class %q", class)
	}
	if n <= 0 {
		return r, nil
	}
	priority = min(max(priority, reconcile.PriorityNew), maxPriority)
	names := []string{string(class), string(reconcile.ClassGlobal)}
	classes := []reconcile.BudgetClass{class, reconcile.ClassGlobal}
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
			r.Tails[i] = tailOf(bk, now)
			rates[i] = bk.Rate
		}
		return nil
	})
	if err != nil {
		return reconcile.Reservation{Class: class}, fmt.Errorf("reconcile: budget %s: reserve: %w", class, err)
	}
	b.cfg.Observer.BudgetRate(class, rates[0])
	b.cfg.Observer.BudgetRate(reconcile.ClassGlobal, rates[1])
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
// this process went out (see Send). Every Shared of the process
// shares them: its workers stall together.
var sendPacers sync.Map // account + "/" + class → *sendPacer

type sendPacer struct {
	mu   sync.Mutex
	last time.Time
}

// Send implements reconcile.Reserver: it waits until due, and until one
// interval of class's pace (and the global one's: the limits less the
// headroom) after the previous reserved call of class this process sent.
// Reserved tokens are spoken for ahead of time, so a stall of the process (a
// pause, a busy CPU) would otherwise let every call that fell due during it
// go at once; paced, they go on at the budget's pace, late. On time, the
// reserved calls are an interval apart already.
func (b *Shared) Send(ctx context.Context, class reconcile.BudgetClass, due time.Time) error {
	v, _ := sendPacers.LoadOrStore(b.cfg.Account+"/"+string(class), &sendPacer{})
	p := v.(*sendPacer)
	gap := time.Duration(float64(time.Second) / min(b.pace(class), b.pace(reconcile.ClassGlobal)))
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

// Unreserve implements reconcile.Reserver: the last k tokens of r go back to
// its class's bucket and the global one, in one transaction, if both
// buckets' tails are still r's; else they are lost.
func (b *Shared) Unreserve(ctx context.Context, r reconcile.Reservation, k int) error {
	class := r.Class
	if class == reconcile.ClassGlobal || b.cfg.Limits.of(class) == 0 {
		return fmt.Errorf("reconcile: budget: no such class %q", class)
	}
	if k <= 0 {
		return nil
	}
	k = min(k, len(r.Delays))
	classes := []reconcile.BudgetClass{class, reconcile.ClassGlobal}
	err := b.store.UpdateBuckets(ctx, b.cfg.Account, []string{string(class), string(reconcile.ClassGlobal)}, func(now time.Time, bks []*Bucket) error {
		now = settledNow(now, bks)
		for i, bk := range bks {
			b.refill(bk, classes[i], now)
			// tailSlack absorbs the rounding of the stored times and tokens.
			if d := tailOf(bk, now).Sub(r.Tails[i]); d > tailSlack || d < -tailSlack {
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

// Wait implements reconcile.Budget: it tries TryTake until granted, sleeping
// between tries, then sleeps the grant's delay.
func (b *Shared) Wait(ctx context.Context, class reconcile.BudgetClass, priority reconcile.Priority) error {
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

// Throttled implements reconcile.Budget: class's rate is multiplied by
// Decrease (not below MinRate), and the class takes no token before
// retryAfter ends.
func (b *Shared) Throttled(ctx context.Context, class reconcile.BudgetClass, retryAfter time.Duration) error {
	if class == reconcile.ClassGlobal || b.cfg.Limits.of(class) == 0 {
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
func (b *Shared) Rates(ctx context.Context) (map[reconcile.BudgetClass]float64, error) {
	bks, err := b.store.Buckets(ctx, b.cfg.Account)
	if err != nil {
		return nil, fmt.Errorf("reconcile: budget rates: %w", err)
	}
	out := make(map[reconcile.BudgetClass]float64, len(bks))
	for _, bk := range bks {
		out[reconcile.BudgetClass(bk.Name)] = bk.Rate
	}
	return out, nil
}
