package reconcile

import (
	"context"
	"fmt"

	"github.com/payrecon/payrecon/statemachine"
)

// The one write path of a purchase's state, shared by the worker, the
// webhook inbox and the operators: a conditional update of the purchase
// and, when its state moves, the transition that records the move.

// update writes next over p, conditional on p's state and version, and
// appends the transition if the state changes. The statemachine check
// runs first so that a bug fails with a clear error before the database
// refuses it too.
func (s *Service) update(ctx context.Context, tx Tx, actor string, token int64, p, next Purchase, cause Cause, evidence string) error {
	if next.State != p.State {
		if err := statemachine.Transition(p.State, next.State); err != nil {
			return fmt.Errorf("reconcile: purchase %s: %w", p.ID, err)
		}
	}
	if err := tx.UpdatePurchase(ctx, next, p.State); err != nil {
		return err
	}
	if next.State == p.State {
		return nil
	}
	return tx.InsertTransition(ctx, TransitionRecord{
		PurchaseID: p.ID,
		From:       p.State,
		To:         next.State,
		Cause:      cause,
		Evidence:   evidence,
		Actor:      actor,
		LeaseToken: token,
		At:         next.UpdatedAt,
	})
}

func (s *Service) observeMove(p, next Purchase, cause Cause) {
	if p.State == next.State {
		return
	}
	s.cfg.Observer.Transition(p.State, next.State, cause)
	if next.State.Terminal() && !next.UncertainSince.IsZero() {
		s.cfg.Observer.Resolved(next.UpdatedAt.Sub(next.UncertainSince))
	}
}
