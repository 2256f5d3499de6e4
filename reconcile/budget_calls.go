package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// priorityOf is the budget priority of a call of op about p: the first
// create of a new purchase goes first, then the reconciliation of
// uncertain purchases, then the slow checks of escalated ones.
func priorityOf(p Purchase, op provider.Op) Priority {
	switch {
	case !p.EscalatedAt.IsZero():
		return PrioritySlow
	case op == provider.OpCreate && p.UncertainSince.IsZero():
		return PriorityNew
	}
	return PriorityReconcile
}

// budgetOf returns the rate budget of account: the platform's (Budget)
// for its own, and for a connected account its own (AccountBudgets), or
// the platform's when there are none.
func (s *Service) budgetOf(account string) Budget {
	if account == provider.PlatformAccount || s.cfg.AccountBudgets == nil {
		return s.cfg.Budget
	}
	return s.cfg.AccountBudgets.For(account)
}

// awaitBudget waits for account's budget of one call of op at priority, for at
// most maxWait (none when 0). A wait cut short by maxWait returns an error
// wrapping ErrLeaseLost when underLease (the lease has no time left for the
// call), else context.DeadlineExceeded; nothing was sent either way.
func (s *Service) awaitBudget(ctx context.Context, account string, op provider.Op, priority Priority, maxWait time.Duration, underLease bool) error {
	wctx := ctx
	if maxWait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, maxWait)
		defer cancel()
	}
	err := s.budgetOf(account).Wait(wctx, ClassOf(op), priority)
	if err == nil {
		return nil
	}
	if ctx.Err() == nil && underLease && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("reconcile: %s call: waited %s for the provider's budget: no time left on the lease: %w", op, maxWait, ErrLeaseLost)
	}
	return fmt.Errorf("reconcile: %s call: wait for the provider's budget: %w", op, err)
}

// pageGate returns the gate a listing of op at priority, on behalf of
// account, passes before
// each page's request: every page waits for a token of its own, the
// provider counting each page as a request. When firstTaken, the caller
// already waited for the first page's token (as for any call under a
// lease), and only the later pages wait. The later pages' waits are
// bounded by the listing's context.
func (s *Service) pageGate(account string, op provider.Op, priority Priority, firstTaken bool) provider.PageGate {
	pages := 0 // a listing passes its gate one page at a time
	return func(ctx context.Context) error {
		pages++
		if pages == 1 && firstTaken {
			return nil
		}
		return s.awaitBudget(ctx, account, op, priority, 0, false)
	}
}

// leaseBudgetWait is how long a call under l may wait for budget: half
// the lease's time left before its commit margin, so that the call itself
// keeps the other half.
func (s *Service) leaseBudgetWait(l Lease) time.Duration {
	left := l.ExpiresAt.Sub(s.leaseNow(l)) - s.leaseCommitMargin()
	return max(left/2, time.Millisecond)
}

// noteThrottle tells account's budget about a call of op that the provider
// refused for its rate limit. The call itself is not changed: it will be
// sent again later, with the same key and the same request.
func (s *Service) noteThrottle(ctx context.Context, account string, op provider.Op, err error) {
	t, ok := provider.ThrottleOf(err)
	if !ok {
		return
	}
	if berr := s.budgetOf(account).Throttled(context.WithoutCancel(ctx), ClassOf(op), t.RetryAfter); berr != nil {
		s.cfg.Logger.Warn("record a 429 in the provider's budget", "op", op, "err", berr)
	}
}

// A worker never waits for the budget while holding a lease longer than
// the lease allows. The waits that overran a lease were those of the
// creates: a claim of many purchases wrote their created → submitted
// intents in one transaction and then had every call wait for a token,
// so that under several workers sharing the budget the last of them
// waited past half their lease, gave up (ErrLeaseLost) and left their
// purchases submitted with a create nobody sent, to be taken over as
// uncertain. So a claim reserves first: before claiming, the worker takes
// from the shared budget, in one transaction of the bucket rows, the
// tokens of as many creates as the budget serves within reserveHorizon
// (Reserver.Reserve), and claims that many jobs at most. Each create of
// the claim (a first create, or a replay of an uncertain purchase's) gets
// one of the tokens and is sent when it is due; tokens left over (a job
// whose call is of another class, an intent not written) go back at once,
// if nobody reserved after them (else their slots stay unused: a slot is
// never handed out twice). This is exact under any number of workers:
// every token is a committed decrement of the same rows, so the workers
// together reserve at most what the budget refills within the horizon,
// and no reserved call waits beyond it, whoever reserved first. The other
// calls (status queries and searches, refunds, the audit) wait as before
// (awaitBudget), with their priorities. A budget that does not reserve
// (Unlimited: no budget) costs a type assertion.

// grants are the tokens a claim reserved for its creates from one
// account's budget: when each call may be sent, by the worker's clock,
// soonest first.
type grants struct {
	b Reserver
	r Reservation
	// at is when the tokens were reserved, by the worker's clock.
	at  time.Time
	due []time.Time
	// used counts the tokens handed to calls.
	used int
	// retry is, when none was reserved, how long until the budget may have
	// room.
	retry time.Duration
}

// next hands out the next token's due time, false when none is left.
func (g *grants) next() (time.Time, bool) {
	if g == nil || g.used == len(g.due) {
		return time.Time{}, false
	}
	g.used++
	return g.due[g.used-1], true
}

// left is how many tokens no call took.
func (g *grants) left() int {
	if g == nil {
		return 0
	}
	return len(g.due) - g.used
}

// reserveHorizon is how far ahead a claim reserves the budget's tokens: a
// quarter of the lease less its commit margin, so that a reserved call
// starts with at least three quarters of its lease left (room for the
// provider's timeout and the commits), and a call of a lower priority,
// which the reservations keep waiting at most this long before the
// priorities apply again, still finds its token within its own lease
// (leaseBudgetWait, half of it).
func (s *Service) reserveHorizon() time.Duration {
	return (s.cfg.LeaseDuration - s.leaseCommitMargin()) / 4
}

// accountReserveHorizon caps how far ahead a claim of one connected
// account's jobs reserves that account's tokens. A job claimed for a token
// due later holds a worker's slot until then: with the whole horizon, an
// account with a deep backlog would hold every slot, and another
// account's new purchase would wait for one. A second of an account's
// budget keeps its calls flowing from one claim to the next.
const accountReserveHorizon = time.Second

// reserve reserves the tokens of up to n creates from account's budget
// (see grants): nil when the budget does not reserve.
func (s *Service) reserve(ctx context.Context, account string, n int) (*grants, error) {
	r, ok := s.budgetOf(account).(Reserver)
	if !ok || n <= 0 {
		return nil, nil
	}
	horizon := s.reserveHorizon()
	if s.cfg.servesConnected() {
		horizon = min(horizon, accountReserveHorizon)
	}
	lead := min(time.Duration(s.reserveLead.Load()), horizon/2)
	if lead == 0 {
		lead = horizon / 20 // no claim measured yet
	}
	res, err := r.Reserve(ctx, ClassCreate, PriorityNew, n, lead, horizon)
	if err != nil {
		return nil, fmt.Errorf("reconcile: claim: reserve the provider's budget: %w", err)
	}
	now := s.cfg.Now()
	g := &grants{b: r, r: res, at: now, due: make([]time.Time, len(res.Delays)), retry: res.Retry}
	for i, d := range res.Delays {
		g.due[i] = now.Add(d)
	}
	return g, nil
}

// unreserve gives the last k of g's tokens back to the budget, which takes
// them if nobody took a token since (Reserver.Unreserve). A failure only
// costs the tokens (logged): the budget stays safe.
func (s *Service) unreserve(ctx context.Context, g *grants, k int) {
	if g == nil || k <= 0 {
		return
	}
	if err := g.b.Unreserve(context.WithoutCancel(ctx), g.r, k); err != nil {
		s.cfg.Logger.Warn("give back reserved tokens of the provider's budget", "tokens", k, "err", err)
	}
}

// ready notes that the calls of g's claim are ready to be sent (their
// intents written): the time since the reservation is the lead the next
// reservations ask for, twice the latest, for its variance.
func (s *Service) ready(g *grants) {
	if g == nil || len(g.due) == 0 {
		return
	}
	s.reserveLead.Store(int64(2 * s.cfg.Now().Sub(g.at)))
}

// awaitDue waits until due, the time of a token reserved for the call
// from account's budget (see grants).
func (s *Service) awaitDue(ctx context.Context, account string, op provider.Op, due time.Time) error {
	r, ok := s.budgetOf(account).(Reserver)
	if !ok {
		return nil
	}
	if err := r.Send(ctx, ClassOf(op), due); err != nil {
		return fmt.Errorf("reconcile: %s call: wait for its reserved token: %w", op, err)
	}
	return nil
}
