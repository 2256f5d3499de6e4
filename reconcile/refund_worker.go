package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/internal/crashpoint"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// The worker's side of a refund, the same protocol as a purchase's: the
// move to submitted commits before the first call; after an unknown
// outcome the refund is reconciled by a lookup of its provider id, a
// replay of the stored request under the same key while the provider
// retains it, or a listing of the payment's refunds, never by a new key;
// every answer goes through JudgeRefund; every write is fenced by the
// job's lease.

// processRefund is Process for a refund job.
func (s *Service) processRefund(ctx context.Context, l Lease) error {
	limited, err := refundKind.runSteps(s, ctx, l, l.RefundID, s.refundStep)
	if limited && err != nil {
		s.cfg.Logger.Warn("reschedule refund after step limit", "refund", l.RefundID, "err", err)
	}
	return err
}

// refundStep makes one move of the refund leased by l. It returns done
// when the job needs nothing more until its next scheduled run.
func (s *Service) refundStep(ctx context.Context, l *Lease) (bool, error) {
	var r Refund
	if l.Refund != nil {
		r, l.Refund = *l.Refund, nil
	} else {
		var err error
		if r, err = s.readRefund(ctx, l.RefundID); err != nil {
			return false, err
		}
	}
	if r.State != statemachine.Submitted && r.State != statemachine.Reconciling {
		l.TakenOver = false
	}
	now := s.leaseNow(*l)
	if r.State == statemachine.Created {
		// A dispute opened since the refund was asked for: the card
		// network holds the money, and the provider would refuse the
		// refund. Nothing is sent until the dispute is decided, and the
		// wait, which may last weeks, spends none of the refund's checks.
		if d, err := s.refundBlockedBy(ctx, r); err != nil || d != nil {
			if err != nil {
				return false, err
			}
			s.cfg.Logger.Warn("refund held: its payment is disputed", "refund", r.ID, "dispute", d.ProviderDisputeID)
			return true, s.hold(ctx, *l, r.ID)
		}
	}
	final := statemachine.Refund.Terminal(r.State)
	if !final && !r.Escalated() && l.Checks > s.cfg.MaxAttempts {
		return false, refundKind.escalateOnly(s, ctx, *l, r, EscalationAttemptsExhausted, "attempts exhausted before an answer was applied")
	}
	switch r.State {
	case statemachine.Succeeded, statemachine.Failed:
		return refundKind.finishJob(s, ctx, *l, r.ID, r)
	case statemachine.Created:
		if r.EscalationReason.ChargeMayExist() {
			return true, s.hold(ctx, *l, r.ID)
		}
		if s.heldByRecovery(r.CreatedAt) {
			return true, s.holdForRecovery(ctx, *l, r.ID, "refund create")
		}
		next := r
		next.State, next.FirstAttemptAt, next.UpdatedAt = statemachine.Submitted, now, now
		ok, err := refundKind.write(s, ctx, *l, r, next, CauseSubmit, "sending stored request "+r.ParamsHash[:12]+" under key "+r.ProviderKey)
		if err != nil || !ok {
			return false, err
		}
		crashpoint.Hit(crashpoint.RefundIntentCommitted)
		next.Version++
		return s.callAndApplyRefund(ctx, *l, next, provider.OpRefundCreate, SourceCreate, CauseSubmitResponse)
	case statemachine.Submitted:
		switch {
		case l.TakenOver:
			l.TakenOver = false
			return false, refundKind.moveOnly(s, ctx, *l, r, statemachine.Uncertain, CauseLeaseLost,
				"previous lease expired while submitted: the refund call's outcome is unknown")
		case r.EscalationReason.ChargeMayExist():
			return false, refundKind.moveOnly(s, ctx, *l, r, statemachine.Uncertain, CauseFinding,
				"a refund may exist ("+string(r.EscalationReason)+"): nothing is resent; reconciling by lookup")
		case s.heldByRecovery(r.CreatedAt):
			return true, s.holdForRecovery(ctx, *l, r.ID, "replay of the refund create")
		case !s.refundKeyReplayable(r, now):
			return false, refundKind.moveOnly(s, ctx, *l, r, statemachine.Uncertain, CauseSubmitResponse,
				"provider key retention ended before the refund was accepted")
		}
		// The provider refused an earlier attempt before acting: send the
		// same stored request again, if the refund is still as read.
		if ok, err := refundKind.fenceUnchanged(s, ctx, *l, r); err != nil || !ok {
			return false, err
		}
		return s.callAndApplyRefund(ctx, *l, r, provider.OpRefundCreate, SourceCreate, CauseSubmitResponse)
	case statemachine.Reconciling:
		l.TakenOver = false
		return false, refundKind.moveOnly(s, ctx, *l, r, statemachine.Uncertain, CauseLeaseLost, "previous lease expired while reconciling")
	case statemachine.Uncertain:
		op, src, cause := provider.OpRefundList, SourceSearch, CauseSearch
		switch {
		case r.ProviderRefundID != "":
			op, src, cause = provider.OpRefundGet, SourceStatus, CauseStatusQuery
		case s.refundKeyReplayable(r, now) && !r.EscalationReason.ChargeMayExist() && !s.heldByRecovery(r.CreatedAt):
			op, src, cause = provider.OpRefundCreate, SourceReplay, CauseKeyReplay
		}
		next := r
		next.State, next.UpdatedAt = statemachine.Reconciling, now
		ok, err := refundKind.write(s, ctx, *l, r, next, cause, "checking by "+string(op))
		if err != nil || !ok {
			return false, err
		}
		crashpoint.Hit(crashpoint.RefundIntentCommitted)
		next.Version++
		return s.callAndApplyRefund(ctx, *l, next, op, src, cause)
	default:
		return false, fmt.Errorf("reconcile: refund %s in unknown state %q", r.ID, r.State)
	}
}

func (s *Service) readRefund(ctx context.Context, id string) (Refund, error) {
	var r Refund
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		r, err = tx.GetRefund(ctx, id)
		return err
	})
	switch {
	case errors.Is(err, ErrNotFound):
		return Refund{}, fmt.Errorf("%w %s", errRefundGone, id)
	case err != nil:
		return Refund{}, fmt.Errorf("reconcile: read refund %s: %w", id, err)
	}
	return r, nil
}

// refundKeyReplayable reports whether the provider still certainly
// retains r's idempotency key at now, so that sending the stored request
// again cannot make a second refund.
func (s *Service) refundKeyReplayable(r Refund, now time.Time) bool {
	if r.ProviderRequest == nil || r.FirstAttemptAt.IsZero() {
		return false
	}
	return now.Before(r.FirstAttemptAt.Add(s.cfg.KeyRetention - s.cfg.KeyReplayMargin))
}

// observeRefundMove counts a committed move of a refund.
func (s *Service) observeRefundMove(r, next Refund, cause Cause) {
	if r.State == next.State {
		return
	}
	s.cfg.Observer.RefundTransition(r.State, next.State, cause)
}

// callAndApplyRefund makes one provider call for r and applies its
// answer.
func (s *Service) callAndApplyRefund(ctx context.Context, l Lease, r Refund, op provider.Op, src Source, cause Cause) (bool, error) {
	a, ans, err := s.callRefund(ctx, l, r, op, src)
	if err != nil {
		return false, err
	}
	return s.applyRefund(context.WithoutCancel(ctx), l, r, cause, a, ans)
}

// callRefund makes one provider call about r under l and returns the
// attempt that records it and the answer for the judge, or ErrLeaseLost,
// without calling, when the lease has no time left for the call.
func (s *Service) callRefund(ctx context.Context, l Lease, r Refund, op provider.Op, src Source) (Attempt, Answer, error) {
	type listed struct {
		res     provider.RefundResult
		charges int
	}
	await := func() error {
		return s.awaitBudget(ctx, r.Account(), op, PriorityReconcile, s.leaseBudgetWait(l), true)
	}
	c, err := callUnderLease(s, ctx, l, r.Account(), "refund "+r.ID, op, await, crashpoint.RefundAnswerRead,
		func(ctx context.Context) (listed, error) {
			res, charges, err := s.callRefundProvider(ctx, op, r)
			return listed{res, charges}, err
		},
		func(x listed, err error) provider.Outcome { return provider.RefundOutcomeOf(x.res, err) })
	if err != nil {
		return Attempt{}, Answer{}, err
	}
	res := c.res.res
	a := c.attempt(s, l, op)
	a.PurchaseID, a.RefundID, a.PaymentID, a.Status, a.Note = r.PurchaseID, r.ID, res.ID, res.Status, res.Reason
	if op == provider.OpRefundCreate {
		a.Key = r.ProviderRequest.IdempotencyKey
	}
	ans := refundAnswerOf(src, c.outcome, res)
	ans.Account = r.Account()
	ans.Charges = c.res.charges
	ans.At = c.start
	return a, ans, nil
}

// callRefundProvider sends op for r: the stored request (never a new
// one), a lookup by the stored provider refund id, or a listing of the
// payment's refunds, from which it picks r's by its metadata and counts
// how many of them moved or may move money.
func (s *Service) callRefundProvider(ctx context.Context, op provider.Op, r Refund) (provider.RefundResult, int, error) {
	if r.ProviderRequest == nil {
		return provider.RefundResult{}, 0, fmt.Errorf("reconcile: refund %s has no stored request: %w", r.ID, provider.ErrRejected)
	}
	prov := s.providerFor(r.ProviderRequest.Account)
	switch op {
	case provider.OpRefundCreate:
		res, err := prov.CreateRefund(ctx, *r.ProviderRequest)
		return res, 0, err
	case provider.OpRefundGet:
		res, err := prov.GetRefund(ctx, r.ProviderRefundID)
		return res, 0, err
	case provider.OpRefundList:
		// callRefund took the first page's token; each later page takes
		// its own.
		all, err := prov.ListRefunds(ctx, r.PaymentID, s.pageGate(r.Account(), op, PriorityReconcile, true))
		if err != nil {
			return provider.RefundResult{}, 0, err
		}
		var found provider.RefundResult
		n := 0
		for _, x := range all {
			if x.RefundID != r.ID {
				continue
			}
			if x.Outcome != provider.Failed {
				n++
			}
			// Prefer one that moved or may move money: that is the one
			// the books must account for.
			if found.ID == "" || (found.Outcome == provider.Failed && x.Outcome != provider.Failed) {
				found = x
			}
		}
		if found.ID == "" {
			return provider.RefundResult{Outcome: provider.NotFound}, 0, nil
		}
		return found, n, nil
	}
	return provider.RefundResult{}, 0, fmt.Errorf("reconcile: refund %s: no such provider call %q: %w", r.ID, op, provider.ErrRejected)
}

// applyRefund judges a provider answer against the refund as it is now
// and records it, in one transaction fenced by the lease; before is the
// refund as the worker left it when it made the call. An answer that
// cannot be applied (the refund moved meanwhile, the lease was lost) is
// still recorded, and an escalation it calls for still written.
func (s *Service) applyRefund(ctx context.Context, l Lease, before Refund, cause Cause, a Attempt, ans Answer) (bool, error) {
	return refundKind.apply(s, ctx, a.RefundID, a, ans, func() (bool, error) {
		return refundKind.applyOnce(s, ctx, l, before, cause, a, ans)
	})
}

// refundAnswer judges an answer about r, the refund as it is now (in
// before's state), and returns what applying it at now writes.
func (s *Service) refundAnswer(l Lease, _, r Refund, _ Cause, a Attempt, ans Answer, now time.Time) answered[Refund] {
	v := JudgeRefund(r, ans)
	a.At = now
	next, done, runAt := refundKind.decide(s, l, r, a, ans, v, now)
	a.Applied = v.Kind == VerdictApply
	if !a.Applied {
		a.Note = joinNote(a.Note, "verdict "+v.String())
	}
	evidence := fmt.Sprintf("%s: outcome=%s status=%s provider_refund=%s", a.Op, a.Outcome, a.Status, a.PaymentID)
	if a.Error != "" {
		evidence += " error=" + a.Error
	}
	if v.Kind != VerdictApply {
		evidence += "; " + v.String()
	}
	return answered[Refund]{next: next, attempt: a, evidence: evidence, done: done, runAt: runAt, verdict: v}
}

// applyRefundEscalation writes the escalation a verdict asks of r, as it
// now is, without moving it.
func (s *Service) applyRefundEscalation(ctx context.Context, tx Tx, r Refund, v Verdict, now time.Time) error {
	if v.Kind != VerdictEscalate {
		return nil
	}
	next := r
	if !escalate(&next.EscalatedAt, &next.EscalationReason, v.Reason, now) {
		return nil
	}
	next.UpdatedAt = now
	return tx.UpdateRefund(ctx, next, r.State)
}

// refundOwnerOf returns the refund the books give the provider refund id
// to, "" if none.
func refundOwnerOf(ctx context.Context, tx Tx, providerRefundID string) (string, error) {
	if providerRefundID == "" {
		return "", nil
	}
	rs, err := tx.FindRefunds(ctx, nil, []string{providerRefundID})
	if err != nil || len(rs) == 0 {
		return "", err
	}
	return rs[0].ID, nil
}

// EscalateOverdueRefunds is EscalateOverdue for refunds.
func (s *Service) EscalateOverdueRefunds(ctx context.Context) (int, error) {
	return refundKind.escalateOverdue(s, ctx)
}
