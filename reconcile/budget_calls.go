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

// awaitBudget waits for the budget of one call of op at priority, for at
// most maxWait (none when 0). A wait cut short by maxWait returns an error
// wrapping ErrLeaseLost when underLease (the lease has no time left for the
// call), else context.DeadlineExceeded; nothing was sent either way.
func (s *Service) awaitBudget(ctx context.Context, op provider.Op, priority Priority, maxWait time.Duration, underLease bool) error {
	wctx := ctx
	if maxWait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, maxWait)
		defer cancel()
	}
	err := s.cfg.Budget.Wait(wctx, ClassOf(op), priority)
	if err == nil {
		return nil
	}
	if ctx.Err() == nil && underLease && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("reconcile: %s call: waited %s for the provider's budget: no time left on the lease: %w", op, maxWait, ErrLeaseLost)
	}
	return fmt.Errorf("reconcile: %s call: wait for the provider's budget: %w", op, err)
}

// pageGate returns the gate a listing of op at priority passes before
// each page's request: every page waits for a token of its own, the
// provider counting each page as a request. When firstTaken, the caller
// already waited for the first page's token (as for any call under a
// lease), and only the later pages wait. The later pages' waits are
// bounded by the listing's context.
func (s *Service) pageGate(op provider.Op, priority Priority, firstTaken bool) provider.PageGate {
	pages := 0 // a listing passes its gate one page at a time
	return func(ctx context.Context) error {
		pages++
		if pages == 1 && firstTaken {
			return nil
		}
		return s.awaitBudget(ctx, op, priority, 0, false)
	}
}

// leaseBudgetWait is how long a call under l may wait for budget: half
// the lease's time left before its commit margin, so that the call itself
// keeps the other half.
func (s *Service) leaseBudgetWait(l Lease) time.Duration {
	left := l.ExpiresAt.Sub(s.leaseNow(l)) - s.leaseCommitMargin()
	return max(left/2, time.Millisecond)
}

// noteThrottle tells the budget about a call of op that the provider
// refused for its rate limit. The call itself is not changed: it will be
// sent again later, with the same key and the same request.
func (s *Service) noteThrottle(ctx context.Context, op provider.Op, err error) {
	t, ok := provider.ThrottleOf(err)
	if !ok {
		return
	}
	if berr := s.cfg.Budget.Throttled(context.WithoutCancel(ctx), ClassOf(op), t.RetryAfter); berr != nil {
		s.cfg.Logger.Warn("record a 429 in the provider's budget", "op", op, "err", berr)
	}
}
