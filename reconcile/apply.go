package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/internal/crashpoint"

	"github.com/payrecon/payrecon/provider"
)

// callAndApply makes one provider call for p and applies its answer.
func (s *Service) callAndApply(ctx context.Context, l Lease, p Purchase, op provider.Op, src Source, cause Cause) (bool, error) {
	a, ans, err := s.call(ctx, l, p, op, src)
	if err != nil {
		return false, err
	}
	// The answer is applied even if the worker is stopping: it is the
	// only record of what the provider did.
	return s.apply(context.WithoutCancel(ctx), l, p, cause, a, ans)
}

// call makes one provider call for p under l and returns the attempt that
// records it and the answer for the judge. It returns ErrLeaseLost,
// without calling, when the lease has no time left for the call.
func (s *Service) call(ctx context.Context, l Lease, p Purchase, op provider.Op, src Source) (Attempt, Answer, error) {
	return s.callDue(ctx, l, p, op, src, time.Time{}, false)
}

// callDue is call whose token, when reserved, the claim reserved (see
// grants): it is sent when due, without waiting for the budget again.
func (s *Service) callDue(ctx context.Context, l Lease, p Purchase, op provider.Op, src Source, due time.Time, reserved bool) (Attempt, Answer, error) {
	// A reserved token is due within reserveHorizon, a quarter of the
	// lease; any other waits for the budget, leaving the call half the
	// lease's time.
	await := func() error {
		if reserved {
			return s.awaitDue(ctx, p.Account, op, due)
		}
		return s.awaitBudget(ctx, p.Account, op, priorityOf(p, op), s.leaseBudgetWait(l), true)
	}
	c, err := callUnderLease(s, ctx, l, p.Account, "purchase "+p.ID, op, await, crashpoint.AnswerRead,
		func(ctx context.Context) (provider.Result, error) { return s.callProvider(ctx, op, p) }, provider.OutcomeOf)
	if err != nil {
		return Attempt{}, Answer{}, err
	}
	a := c.attempt(s, l, op)
	a.PurchaseID, a.PaymentID, a.Status, a.Note = p.ID, c.res.PaymentID, c.res.Status, c.res.Reason
	if op == provider.OpCreate {
		a.Key = p.ProviderRequest.IdempotencyKey
	}
	ans := answerOf(src, c.outcome, c.res)
	ans.Account = p.Account
	ans.At = c.start
	return a, ans, nil
}

// leasedCall is one provider call made under a lease: its answer, its
// outcome, when it started by the lease's clock and how long it took.
type leasedCall[R any] struct {
	res     R
	err     error
	outcome provider.Outcome
	start   time.Time
	took    time.Duration
}

// callUnderLease makes one provider call about what (a purchase or a
// refund) under l, on behalf of account: it waits with await (for the budget or a reserved
// token), then calls send, which must end while the lease still holds,
// with time left to commit its answer: a call that outlived its lease
// could race the worker that took the job over. It returns ErrLeaseLost,
// without calling, when the lease has no time left. It hits the crash
// point answered once the answer is read, and counts the call.
func callUnderLease[R any](s *Service, ctx context.Context, l Lease, account, what string, op provider.Op, await func() error,
	answered crashpoint.Point, send func(context.Context) (R, error), outcomeOf func(R, error) provider.Outcome) (leasedCall[R], error) {
	if err := await(); err != nil {
		return leasedCall[R]{}, fmt.Errorf("reconcile: %s: %w", what, err)
	}
	start := s.leaseNow(l)
	timeout := min(s.cfg.ProviderTimeout, l.ExpiresAt.Sub(start)-s.leaseCommitMargin())
	if timeout <= 0 {
		return leasedCall[R]{}, fmt.Errorf("reconcile: %s: no time left on the lease for a provider call: %w", what, ErrLeaseLost)
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	res, err := send(callCtx)
	cancel()
	crashpoint.Hit(answered)
	c := leasedCall[R]{res: res, err: err, outcome: outcomeOf(res, err), start: start, took: s.leaseNow(l).Sub(start)}
	s.observeCall(account, op, c.outcome, c.took)
	s.noteThrottle(ctx, account, op, err)
	return c, nil
}

// attempt is the record of c shared by both kinds; the caller adds the
// ids, the provider's status and note, and the key of a create.
func (c leasedCall[R]) attempt(s *Service, l Lease, op provider.Op) Attempt {
	a := Attempt{Op: op, Outcome: c.outcome, Latency: c.took, Actor: s.cfg.WorkerID, LeaseToken: l.Token}
	if c.err != nil {
		a.Error = c.err.Error()
	}
	return a
}

// callProvider sends op for p: the stored create (never a new one), a
// status query by the stored payment id, or a search by purchase id.
func (s *Service) callProvider(ctx context.Context, op provider.Op, p Purchase) (provider.Result, error) {
	prov := s.providerFor(p.Account)
	switch op {
	case provider.OpCreate:
		return prov.Create(ctx, *p.ProviderRequest)
	case provider.OpStatus:
		return prov.Status(ctx, p.ProviderPaymentID)
	case provider.OpSearch:
		return prov.Search(ctx, p.ID)
	}
	return provider.Result{}, fmt.Errorf("reconcile: purchase %s: no such provider call %q: %w", p.ID, op, provider.ErrRejected)
}

// apply judges a provider answer against the purchase as it is now and
// records it, in one transaction fenced by the lease. p is the purchase as
// the worker left it before the call.
//
// If another writer settled the purchase during the call (a webhook), the
// answer lost the race: it is recorded unapplied and judged against what
// won, so that a second charge is escalated whatever the arrival order. If
// the lease is lost, the answer is recorded unapplied and judged the same
// way, outside the lease.
func (s *Service) apply(ctx context.Context, l Lease, p Purchase, cause Cause, a Attempt, ans Answer) (bool, error) {
	// A conflict: a concurrent writer committed between our read and
	// write. A duplicate: another purchase took the payment id in the
	// meantime. Either way, read again and judge again.
	return purchaseKind.apply(s, ctx, a.PurchaseID, a, ans, func() (bool, error) {
		return purchaseKind.applyOnce(s, ctx, l, p, cause, a, ans)
	})
}

// answerMove judges an answer about p, the purchase as it is now (in
// before's state: the one the worker left it in when it made the call),
// and returns the move that applies the verdict at now: the purchase's
// next version, the transition if its state changes, the attempt (a)
// marked applied or not, and the job complete or rescheduled.
func (s *Service) answerMove(l Lease, before, p Purchase, cause Cause, a Attempt, ans Answer, now time.Time) (Move, Verdict) {
	v := Judge(p, ans)
	a.At = now
	next, done, runAt := s.decide(l, before, p, a, ans, v, now)
	a.Applied = v.Kind == VerdictApply
	if v.Kind != VerdictApply {
		a.Note = joinNote(a.Note, "verdict "+v.String())
	}
	mv := Move{Lease: l, From: p, To: next, Attempt: &a, Job: JobReschedule, RunAt: runAt}
	if done {
		mv.Job, mv.RunAt = JobComplete, now
	}
	if next.State != p.State {
		evidence := fmt.Sprintf("%s: outcome=%s status=%s payment=%s", a.Op, a.Outcome, a.Status, a.PaymentID)
		if a.Error != "" {
			evidence += " error=" + a.Error
		}
		if v.Kind != VerdictApply {
			evidence += "; " + v.String()
		}
		mv.Transition = s.transition(l, p, next, cause, evidence)
	}
	return mv, v
}

// transition is the audit record of s's move of p to next under l.
func (s *Service) transition(l Lease, p, next Purchase, cause Cause, evidence string) *TransitionRecord {
	return &TransitionRecord{
		PurchaseID: p.ID,
		From:       p.State,
		To:         next.State,
		Cause:      cause,
		Evidence:   evidence,
		Actor:      s.cfg.WorkerID,
		LeaseToken: l.Token,
		At:         next.UpdatedAt,
	}
}

// decide turns the judge's verdict on an answer about p (in the state the
// worker left it, before, when it made the call: submitted or
// reconciling, or final with a doubt) into the purchase's next version
// and the job's next run.
func (s *Service) decide(l Lease, before, p Purchase, a Attempt, ans Answer, v Verdict, now time.Time) (next Purchase, done bool, runAt time.Time) {
	if p.State.Terminal() {
		return s.decideDoubt(l, before, p, a, ans, v, now)
	}
	return purchaseKind.decide(s, l, p, a, ans, v, now)
}

// decideDoubt weighs the answer to a status query (or search) that
// confirms or refutes a doubt about p's final state. The state never
// changes; a confirmed disagreement escalates, and a definite answer that
// agrees clears the doubt. An answer that settles nothing keeps the doubt
// and asks again later, until the attempts run out: then a human looks.
// A doubt that grew while the call was out (before is the purchase as the
// call found it) is kept and asked about again at once: the provider's
// view may predate the newer answer.
func (s *Service) decideDoubt(l Lease, before, p Purchase, a Attempt, ans Answer, v Verdict, now time.Time) (next Purchase, done bool, runAt time.Time) {
	next = p
	next.UpdatedAt = now
	if next.ProviderPaymentID == "" && v.Kind == VerdictConfirm {
		// A search found the payment: the next check asks by its id.
		next.ProviderPaymentID = ans.PaymentID
	}
	answered := true
	switch {
	case v.Kind == VerdictEscalate:
		markEscalated(&next, v.Reason, now)
	case v.Kind == VerdictRecord && a.Outcome.Final():
		// It agrees with the books: the doubt is answered.
	case l.Checks >= s.cfg.MaxAttempts:
		markEscalated(&next, EscalationStateDisagreement, now)
	default:
		answered = false
	}
	switch {
	case p.Doubt != before.Doubt:
		return next, false, now
	case !answered:
		return next, false, now.Add(s.cfg.backoff(l.Checks - 1))
	}
	next.Doubt = ""
	return next, true, time.Time{}
}

// applyLateVerdict writes what a verdict on an answer that lost a race
// asks of p, the purchase as it now is, without moving it: an escalation,
// or a doubt to confirm (the job is reopened for the status query).
func (s *Service) applyLateVerdict(ctx context.Context, tx Tx, p Purchase, ans Answer, v Verdict, now time.Time) error {
	next := p
	switch v.Kind {
	case VerdictEscalate:
		if !markEscalated(&next, v.Reason, now) {
			return nil
		}
	case VerdictConfirm:
		if !doubt(&next, ans, v.Why) {
			return nil
		}
		if err := tx.ReopenJob(ctx, p.ID, now); err != nil {
			return err
		}
	default:
		return nil
	}
	next.UpdatedAt = now
	return tx.UpdatePurchase(ctx, next, p.State)
}

// maxDoubt bounds the text of a purchase's doubt: the contradicting
// answers it names, newest last.
const maxDoubt = 2000

// doubt records on a final purchase that an answer contradicts it, so
// that the worker confirms with a status query. A doubt already open gets
// the new answer added: the status query in flight may predate it, and
// the worker clears only the doubt it confirmed (see decideDoubt). The
// judge found the answer to be about the purchase's own charge, so its
// payment id is the one to query when the books have none yet. It reports
// whether p changed.
func doubt(p *Purchase, ans Answer, why string) bool {
	if !p.State.Terminal() {
		return false
	}
	p.Doubt = joinNote(p.Doubt, why)
	if len(p.Doubt) > maxDoubt {
		p.Doubt = "…" + p.Doubt[len(p.Doubt)-maxDoubt:]
	}
	if p.ProviderPaymentID == "" {
		p.ProviderPaymentID = ans.PaymentID
	}
	return true
}

// ownerOf returns the purchase the books give paymentID to, "" if none.
func ownerOf(ctx context.Context, tx Tx, paymentID string) (string, error) {
	if paymentID == "" {
		return "", nil
	}
	p, err := tx.FindPurchaseByPaymentID(ctx, paymentID)
	switch {
	case errors.Is(err, ErrNotFound):
		return "", nil
	case err != nil:
		return "", err
	}
	return p.ID, nil
}
