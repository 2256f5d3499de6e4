package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/statemachine"
)

// applyRefundEventTx applies ev, an event about a refund already in the
// inbox, to its refund as JudgeRefund decides, and records the outcome on
// the inbox row: a success or a failure settles a refund not yet final
// (an uncertain one through reconciling, both moves recorded); "pending"
// never moves anything, and never overwrites a final state; an event that
// disagrees with the books escalates. A refund event that matches no
// refund (one made in the provider's dashboard) stays unmatched, for the
// audit to report.
func (s *Service) applyRefundEventTx(ctx context.Context, tx Tx, ev Event, now time.Time) (EventOutcome, []move, error) {
	r, err := s.matchRefundEvent(ctx, tx, ev)
	if errors.Is(err, ErrNotFound) {
		return EventUnmatched, nil, tx.UpdateInboxEvent(ctx, ev.Provider, ev.ID, ev.PurchaseID, EventUnmatched, now)
	}
	if err != nil {
		return "", nil, err
	}
	outcome, err := s.applyToRefund(ctx, tx, r, ev, now)
	if err != nil {
		return "", nil, err
	}
	return outcome, nil, tx.UpdateInboxEvent(ctx, ev.Provider, ev.ID, r.PurchaseID, outcome, now)
}

// matchRefundEvent finds the refund an event is about: by the refund id
// its metadata names, else by the provider's refund id.
func (s *Service) matchRefundEvent(ctx context.Context, tx Tx, ev Event) (Refund, error) {
	var ids, providerIDs []string
	if ev.RefundID != "" {
		ids = []string{ev.RefundID}
	}
	if ev.PaymentID != "" {
		providerIDs = []string{ev.PaymentID}
	}
	if ids == nil && providerIDs == nil {
		return Refund{}, ErrNotFound
	}
	rs, err := tx.FindRefunds(ctx, ids, providerIDs)
	if err != nil {
		return Refund{}, err
	}
	for _, r := range rs {
		if r.ID == ev.RefundID {
			return r, nil
		}
	}
	if len(rs) == 0 {
		return Refund{}, ErrNotFound
	}
	return rs[0], nil
}

// applyToRefund applies ev to r as the judge decides.
func (s *Service) applyToRefund(ctx context.Context, tx Tx, r Refund, ev Event, now time.Time) (EventOutcome, error) {
	ans := Answer{
		Source: SourceWebhook, Outcome: ev.Outcome, PaymentID: ev.PaymentID, PurchaseID: ev.PurchaseID,
		RefundID: ev.RefundID, Refunded: ev.Refunded, Account: ev.Account, Amount: ev.Amount, Currency: ev.Currency, At: ev.Created,
	}
	var err error
	if ans.Owner, err = refundOwnerOf(ctx, tx, ev.PaymentID); err != nil {
		return "", err
	}
	v := JudgeRefund(r, ans)
	evidence := fmt.Sprintf("%s event %s (%s) provider_refund=%s", ev.Provider, ev.ID, ev.Type, ev.PaymentID)
	next := r
	next.UpdatedAt = now
	switch v.Kind {
	case VerdictEscalate:
		s.cfg.Logger.Warn("refund webhook escalates", "refund", r.ID, "event", ev.ID, "verdict", v.String())
		if !escalate(&next.EscalatedAt, &next.EscalationReason, v.Reason, now) {
			return EventContradiction, nil
		}
		return EventContradiction, tx.UpdateRefund(ctx, next, r.State)
	case VerdictApply:
	default:
		return EventStale, nil
	}
	if next.ProviderRefundID == "" && ev.PaymentID != "" {
		next.ProviderRefundID = ev.PaymentID
	}
	if v.Settles == "" {
		if next.ProviderRefundID == r.ProviderRefundID {
			return EventApplied, nil
		}
		return EventApplied, tx.UpdateRefund(ctx, next, r.State)
	}
	settledAt := ev.Created
	if settledAt.IsZero() {
		settledAt = now
	}
	step := func(to statemachine.State) error {
		cur := next
		cur.State = to
		if statemachine.Refund.Terminal(to) {
			cur.SettledAt = settledAt
			if !cur.EscalationReason.Sticky() {
				cur.EscalatedAt, cur.EscalationReason = time.Time{}, ""
			}
		}
		if err := refundKind.update(ctx, tx, "webhook", 0, next, cur, CauseWebhook, evidence); err != nil {
			return err
		}
		cur.Version++
		next = cur
		return nil
	}
	if r.State == statemachine.Uncertain {
		if err := step(statemachine.Reconciling); err != nil {
			return "", err
		}
	}
	if err := step(v.Settles); err != nil {
		return "", err
	}
	return EventApplied, nil
}
