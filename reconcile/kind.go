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

// A purchase and a refund each move through their own state machine, with
// their own ids, rows and provider keys; what the worker does with either
// under a lease (fence, write a move, escalate, finish the job, give up
// after too many steps) is the same. kind holds what differs, so that
// those moves are written once.
type kind[T any] struct {
	// noun names the kind in logs: "purchase" or "refund".
	noun string
	// named is how an error names the row with id.
	named func(id string) string
	// row gives the fields the shared moves read and write.
	row func(*T) rowRef
	// get reads the row with id in tx.
	get func(ctx context.Context, tx Tx, id string) (T, error)
	// put writes next over the row in state from, without a transition.
	put func(ctx context.Context, tx Tx, next T, from statemachine.State) error
	// overdue lists up to limit rows uncertain since before before.
	overdue func(ctx context.Context, tx Tx, before time.Time, limit int) ([]T, error)
	// machine is the kind's state machine, which every move must pass.
	machine statemachine.Machine
	// ids gives a move's transition record the ids it is filed under.
	ids func(cur T) (purchaseID, refundID string)
	// observe counts a committed move (observeMove, observeRefundMove).
	observe func(s *Service, cur, next T, cause Cause)
	// judge is the kind's judge (Judge, JudgeRefund), and owner looks up
	// the row the books give an answer's provider id to.
	judge func(cur T, ans Answer) Verdict
	owner func(ctx context.Context, tx Tx, providerID string) (string, error)
	// late writes what a verdict on an answer that lost a race asks of
	// cur, the row as it now is, without moving it.
	late func(s *Service, ctx context.Context, tx Tx, cur T, ans Answer, v Verdict, now time.Time) error
	// search is the call that looks for the row by its metadata
	// (OpSearch, OpRefundList), and keyReplayable reports whether the
	// provider still certainly retains cur's idempotency key at now.
	search        provider.Op
	keyReplayable func(s *Service, cur T, now time.Time) bool
	// settled, if set, adds what an answer that settles next in v.Settles
	// records beyond the state (a refund's failure reason).
	settled func(next *T, v Verdict, a Attempt)
	// moved reports whether another writer moved cur since the worker
	// left it as before: its answer then only stands recorded, with what
	// its verdict asks of cur (movedMeanwhile) written without a move.
	moved          func(before, cur T) bool
	movedMeanwhile func(s *Service, ctx context.Context, tx Tx, cur T, ans Answer, v Verdict, now time.Time) error
	// answer judges an answer about cur, in before's state, and returns
	// what applying it writes.
	answer func(s *Service, l Lease, before, cur T, cause Cause, a Attempt, ans Answer, now time.Time) answered[T]
	// applied is the crash point right after an answer's transaction.
	applied crashpoint.Point
	// lostRace is the log message of an answer that lost a race and
	// escalated.
	lostRace string
}

// rowRef points at the fields of a purchase or a refund that the shared
// moves read and write.
type rowRef struct {
	id             *string
	version        *int64
	state          *statemachine.State
	updatedAt      *time.Time
	uncertainSince *time.Time
	escalatedAt    *time.Time
	reason         *EscalationReason
	settledAt      *time.Time
	// providerID is the provider's id of the payment or refund.
	providerID *string
}

// purchaseKind is the kind of a purchase.
var purchaseKind = kind[Purchase]{
	noun:  "purchase",
	named: func(id string) string { return id },
	row: func(p *Purchase) rowRef {
		return rowRef{&p.ID, &p.Version, &p.State, &p.UpdatedAt, &p.UncertainSince, &p.EscalatedAt, &p.EscalationReason, &p.SettledAt, &p.ProviderPaymentID}
	},
	get: func(ctx context.Context, tx Tx, id string) (Purchase, error) { return tx.GetPurchase(ctx, id) },
	put: func(ctx context.Context, tx Tx, next Purchase, from statemachine.State) error {
		return tx.UpdatePurchase(ctx, next, from)
	},
	overdue: func(ctx context.Context, tx Tx, before time.Time, limit int) ([]Purchase, error) {
		return tx.ListOverdueUncertain(ctx, before, limit)
	},
	machine: statemachine.Purchase,
	ids:     func(p Purchase) (string, string) { return p.ID, "" },
	observe: (*Service).observeMove,
	judge:   Judge,
	owner:   ownerOf,
	late: func(s *Service, ctx context.Context, tx Tx, p Purchase, ans Answer, v Verdict, now time.Time) error {
		if p.State.Terminal() || v.Kind == VerdictEscalate {
			return s.applyLateVerdict(ctx, tx, p, ans, v, now)
		}
		return nil
	},
	search:        provider.OpSearch,
	keyReplayable: (*Service).keyReplayable,
	moved:         func(before, cur Purchase) bool { return cur.State != before.State },
	movedMeanwhile: func(s *Service, ctx context.Context, tx Tx, p Purchase, ans Answer, v Verdict, now time.Time) error {
		return s.applyLateVerdict(ctx, tx, p, ans, v, now)
	},
	applied:  crashpoint.ApplyCommitted,
	lostRace: "a provider answer that lost a race disagrees with the books; the purchase is escalated",
}

// refundKind is the kind of a refund.
var refundKind = kind[Refund]{
	noun:  "refund",
	named: func(id string) string { return "refund " + id },
	row: func(r *Refund) rowRef {
		return rowRef{&r.ID, &r.Version, &r.State, &r.UpdatedAt, &r.UncertainSince, &r.EscalatedAt, &r.EscalationReason, &r.SettledAt, &r.ProviderRefundID}
	},
	get: func(ctx context.Context, tx Tx, id string) (Refund, error) { return tx.GetRefund(ctx, id) },
	put: func(ctx context.Context, tx Tx, next Refund, from statemachine.State) error {
		return tx.UpdateRefund(ctx, next, from)
	},
	overdue: func(ctx context.Context, tx Tx, before time.Time, limit int) ([]Refund, error) {
		return tx.ListOverdueUncertainRefunds(ctx, before, limit)
	},
	machine: statemachine.Refund,
	ids:     func(r Refund) (string, string) { return r.PurchaseID, r.ID },
	observe: (*Service).observeRefundMove,
	judge:   JudgeRefund,
	owner:   refundOwnerOf,
	late: func(s *Service, ctx context.Context, tx Tx, r Refund, _ Answer, v Verdict, now time.Time) error {
		return s.applyRefundEscalation(ctx, tx, r, v, now)
	},
	search:        provider.OpRefundList,
	keyReplayable: (*Service).refundKeyReplayable,
	settled: func(next *Refund, v Verdict, a Attempt) {
		if v.Settles == statemachine.Failed {
			next.FailureReason = joinNote(a.Note, a.Error)
		}
	},
	moved: func(before, cur Refund) bool { return cur.Version != before.Version },
	movedMeanwhile: func(s *Service, ctx context.Context, tx Tx, r Refund, _ Answer, v Verdict, now time.Time) error {
		return s.applyRefundEscalation(ctx, tx, r, v, now)
	},
	applied:  crashpoint.RefundApplyCommitted,
	lostRace: "a refund answer that lost a race disagrees with the books; the refund is escalated",
}

// update is the one write path of a row's state, shared by the worker,
// the webhook inbox, the operators and the recovery: it writes next over
// cur, conditional on cur's state and version, and appends the
// transition if the state changes. The machine's check runs first so
// that a bug fails with a clear error before the database refuses it
// too.
func (k kind[T]) update(ctx context.Context, tx Tx, actor string, token int64, cur, next T, cause Cause, evidence string) error {
	c, n := k.row(&cur), k.row(&next)
	from, to := *c.state, *n.state
	if to != from {
		if err := k.machine.Transition(from, to); err != nil {
			return fmt.Errorf("reconcile: %s %s: %w", k.noun, *c.id, err)
		}
	}
	if err := k.put(ctx, tx, next, from); err != nil {
		return err
	}
	if to == from {
		return nil
	}
	rec := TransitionRecord{From: from, To: to, Cause: cause, Evidence: evidence, Actor: actor, LeaseToken: token, At: *n.updatedAt}
	rec.PurchaseID, rec.RefundID = k.ids(cur)
	return tx.InsertTransition(ctx, rec)
}

// escalateOverdue puts on the operator list every row uncertain longer
// than Config.MaxUncertainAge, up to 500 a run, without waiting for its
// next check; the row stays uncertain and keeps being checked. A row
// that moved meanwhile is left to its worker. Returns how many it
// escalated.
func (k kind[T]) escalateOverdue(s *Service, ctx context.Context) (int, error) {
	var (
		now     time.Time
		overdue []T
	)
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		if now, err = tx.Now(ctx); err != nil {
			return err
		}
		overdue, err = k.overdue(ctx, tx, now.Add(-s.cfg.MaxUncertainAge), 500)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reconcile: escalate overdue %ss: %w", k.noun, err)
	}
	n := 0
	for _, cur := range overdue {
		next := cur
		c, x := k.row(&cur), k.row(&next)
		*x.escalatedAt, *x.reason, *x.updatedAt = now, EscalationUncertainTooLong, now
		err := s.store.InTx(ctx, func(tx Tx) error { return k.put(ctx, tx, next, *c.state) })
		switch {
		case errors.Is(err, ErrConflict):
			continue // a worker moved it meanwhile; its next check decides
		case err != nil:
			return n, fmt.Errorf("reconcile: escalate %s: %w", k.named(*c.id), err)
		}
		n++
		crashpoint.Hit(crashpoint.SweepMidBatch)
		s.cfg.Logger.Warn(k.noun+" escalated to operators", k.noun, *c.id, "reason", EscalationUncertainTooLong)
	}
	return n, nil
}

// The kinds' answer steps are set here, not in their literals, because
// they reach back to the kinds through their decide steps.
func init() {
	purchaseKind.answer = func(s *Service, l Lease, before, p Purchase, cause Cause, a Attempt, ans Answer, now time.Time) answered[Purchase] {
		mv, v := s.answerMove(l, before, p, cause, a, ans, now)
		out := answered[Purchase]{next: mv.To, attempt: *mv.Attempt, done: mv.Job == JobComplete, runAt: mv.RunAt, verdict: v}
		if mv.Transition != nil {
			out.evidence = mv.Transition.Evidence
		}
		return out
	}
	refundKind.answer = (*Service).refundAnswer
}

// runSteps moves the job leased by l (its row id) with step until it is
// done, fails (runFailed) or has made maxStepsPerRun moves. After that many
// it checks again later rather than spin: something keeps changing the row
// under it. A row left reconciling goes back to uncertain first, so that
// none waits there without a lease. limited reports that the step limit was
// reached; err is then the reschedule's, for the caller to log.
func (k kind[T]) runSteps(s *Service, ctx context.Context, l Lease, id string, step func(context.Context, *Lease) (bool, error)) (limited bool, err error) {
	for range maxStepsPerRun {
		done, err := step(ctx, &l)
		switch {
		case err != nil:
			return false, s.runFailed(l, err)
		case done:
			return false, nil
		}
	}
	return true, s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.CheckLease(ctx, l); err != nil {
			return err
		}
		now := s.leaseNow(l)
		cur, err := k.get(ctx, tx, id)
		if err != nil {
			return err
		}
		if *k.row(&cur).state == statemachine.Reconciling {
			next := cur
			n := k.row(&next)
			*n.state, *n.updatedAt = statemachine.Uncertain, now
			if err := k.update(ctx, tx, s.cfg.WorkerID, l.Token, cur, next, CauseLeaseLost, "step limit reached while reconciling"); err != nil {
				return err
			}
		}
		return tx.RescheduleJob(ctx, id, now.Add(s.cfg.backoff(0)))
	})
}

// fenceUnchanged is fence for a call that cur's state alone justifies: it
// also reports false, with no error, when the row changed since cur was
// read (a webhook's escalation, say), so that the caller reads it again
// before sending anything.
func (k kind[T]) fenceUnchanged(s *Service, ctx context.Context, l Lease, cur T) (bool, error) {
	c := k.row(&cur)
	var same bool
	err := s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.CheckLease(ctx, l); err != nil {
			return err
		}
		now, err := k.get(ctx, tx, *c.id)
		same = err == nil && *k.row(&now).version == *c.version
		return err
	})
	return same, err
}

// finishJob completes job, the job of cur, read final, unless the row
// changed since: a doubt raised meanwhile (a newer contradicting event
// reopens the job without touching the lease) must not be completed over.
// It reports whether it completed the job.
func (k kind[T]) finishJob(s *Service, ctx context.Context, l Lease, job string, cur T) (bool, error) {
	c := k.row(&cur)
	var done bool
	err := s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.CheckLease(ctx, l); err != nil {
			return err
		}
		now, err := k.get(ctx, tx, *c.id)
		if err != nil {
			return err
		}
		if done = *k.row(&now).version == *c.version; !done {
			return nil // step again: it changed
		}
		return tx.CompleteJob(ctx, job, s.leaseNow(l))
	})
	return done, err
}

// moveOnly makes a transition that involves no provider call.
func (k kind[T]) moveOnly(s *Service, ctx context.Context, l Lease, cur T, to statemachine.State, cause Cause, evidence string) error {
	next := cur
	n := k.row(&next)
	*n.state, *n.updatedAt = to, s.leaseNow(l)
	if to == statemachine.Uncertain && n.uncertainSince.IsZero() {
		*n.uncertainSince = *n.updatedAt
	}
	_, err := k.write(s, ctx, l, cur, next, cause, evidence)
	return err
}

// write commits one fenced, conditional move. It returns false, nil when
// the row moved on under the caller (re-read and decide again).
func (k kind[T]) write(s *Service, ctx context.Context, l Lease, cur, next T, cause Cause, evidence string) (bool, error) {
	err := s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.CheckLease(ctx, l); err != nil {
			return err
		}
		return k.update(ctx, tx, s.cfg.WorkerID, l.Token, cur, next, cause, evidence)
	})
	switch {
	case err == nil:
		k.observe(s, cur, next, cause)
		return true, nil
	case errors.Is(err, ErrConflict):
		return false, nil
	default:
		return false, err
	}
}

// escalateOnly puts cur on the operator list without moving it, fenced by
// the lease.
func (k kind[T]) escalateOnly(s *Service, ctx context.Context, l Lease, cur T, reason EscalationReason, why string) error {
	c := k.row(&cur)
	q := cur
	n := k.row(&q)
	now := s.leaseNow(l)
	if !escalate(n.escalatedAt, n.reason, reason, now) {
		return nil
	}
	*n.updatedAt = now
	err := s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.CheckLease(ctx, l); err != nil {
			return err
		}
		return k.put(ctx, tx, q, *c.state)
	})
	if err != nil {
		return fmt.Errorf("reconcile: escalate %s: %w", k.named(*c.id), err)
	}
	s.cfg.Logger.Warn(k.noun+" escalated to operators", k.noun, *c.id, "reason", *n.reason, "why", why)
	return nil
}

// apply applies an answer about the row with id, a the attempt that
// records it, with once: one try, in one transaction fenced by the lease.
// A try that lost a conditional write to a concurrent writer, or whose
// payment id another row took meanwhile, runs again from a fresh read. An
// answer that could not be applied is still recorded (applyLate), as a
// fact about the provider, and judged against the row as it is.
func (k kind[T]) apply(s *Service, ctx context.Context, id string, a Attempt, ans Answer, once func() (bool, error)) (bool, error) {
	var err error
	for range maxWriteRaces {
		var done bool
		done, err = once()
		if !errors.Is(err, ErrConflict) && !errors.Is(err, ErrDuplicate) {
			if err == nil {
				return done, nil
			}
			break
		}
	}
	a.Applied = false
	a.Note = joinNote(a.Note, "not applied: "+reasonOf(err))
	if lerr := k.applyLate(s, ctx, id, a, ans); lerr != nil {
		return false, errors.Join(err, lerr)
	}
	return false, err
}

// answered is what applying an answer writes: the row's next version,
// the attempt marked applied or not, the evidence of its transition, and
// the job complete (done) or due again at runAt.
type answered[T any] struct {
	next     T
	attempt  Attempt
	evidence string
	done     bool
	runAt    time.Time
	verdict  Verdict
}

// applyOnce is one try of apply: it judges the answer against the row as
// it is now and records it, in one transaction fenced by the lease;
// before is the row as the worker left it when it made the call. An
// answer that cannot be applied because the row moved meanwhile is still
// recorded, and what its verdict asks of the row still written. It
// returns true when the job is complete or scheduled (this run is over),
// false when the row moved under the call and the worker must step
// again.
func (k kind[T]) applyOnce(s *Service, ctx context.Context, l Lease, before T, cause Cause, a Attempt, ans Answer) (bool, error) {
	var (
		cur   T
		out   answered[T]
		moved bool
	)
	b := k.row(&before)
	err := s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.CheckLease(ctx, l); err != nil {
			return err
		}
		now := s.leaseNow(l)
		var err error
		if cur, err = k.get(ctx, tx, *b.id); err != nil {
			return err
		}
		if ans.Owner, err = k.owner(ctx, tx, ans.PaymentID); err != nil {
			return err
		}
		if moved = k.moved(before, cur); moved {
			v := k.judge(cur, ans)
			a.At, a.Applied = now, false
			a.Note = joinNote(a.Note, fmt.Sprintf("not applied: the %s moved %s→%s meanwhile; verdict %s", k.noun, *b.state, *k.row(&cur).state, v))
			if err := k.movedMeanwhile(s, ctx, tx, cur, ans, v, now); err != nil {
				return err
			}
			return tx.InsertAttempt(ctx, a)
		}
		out = k.answer(s, l, before, cur, cause, a, ans, now)
		if err := k.update(ctx, tx, s.cfg.WorkerID, l.Token, cur, out.next, cause, out.evidence); err != nil {
			return err
		}
		if err := tx.InsertAttempt(ctx, out.attempt); err != nil {
			return err
		}
		if out.done {
			return tx.CompleteJob(ctx, *b.id, now)
		}
		return tx.RescheduleJob(ctx, *b.id, out.runAt)
	})
	if err != nil {
		return false, err
	}
	crashpoint.Hit(k.applied)
	if moved {
		return false, nil // the job was left as it was: step again
	}
	k.observe(s, cur, out.next, cause)
	c, n := k.row(&cur), k.row(&out.next)
	if *n.reason != *c.reason && !n.escalatedAt.IsZero() {
		s.cfg.Logger.Warn(k.noun+" escalated to operators", k.noun, *c.id, "reason", *n.reason, "verdict", out.verdict.String())
	}
	return true, nil // the job is complete or scheduled: this run is over
}

// applyLate records an answer about the row with id that could not be
// applied under its lease, and writes what its verdict asks of the row as
// it now is (late), outside any lease: the answer is a fact about the
// provider, and an escalation or a doubt must not be lost with the lease.
func (k kind[T]) applyLate(s *Service, ctx context.Context, id string, a Attempt, ans Answer) error {
	var v Verdict
	err := s.retryRaces(ctx, func(tx Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		cur, err := k.get(ctx, tx, id)
		if err != nil {
			return err
		}
		if ans.Owner, err = k.owner(ctx, tx, ans.PaymentID); err != nil {
			return err
		}
		v = k.judge(cur, ans)
		a.At = now
		if err := k.late(s, ctx, tx, cur, ans, v, now); err != nil {
			return err
		}
		return tx.InsertAttempt(ctx, a)
	})
	if err != nil {
		return fmt.Errorf("reconcile: record unapplied %s answer for %s: %w", a.Op, k.named(id), err)
	}
	if v.Kind == VerdictEscalate {
		s.cfg.Logger.Error(k.lostRace, k.noun, id, "verdict", v.String())
	}
	return nil
}

// decide turns the judge's verdict v on an answer about cur (not final:
// submitted or reconciling, as the worker left it for the call) into the
// row's next version and the job's next run.
func (k kind[T]) decide(s *Service, l Lease, cur T, a Attempt, ans Answer, v Verdict, now time.Time) (next T, done bool, runAt time.Time) {
	c := k.row(&cur)
	next = cur
	n := k.row(&next)
	*n.updatedAt = now
	var reason EscalationReason
	switch v.Kind {
	case VerdictApply:
		if ans.PaymentID != "" && *n.providerID == "" {
			*n.providerID = ans.PaymentID
		}
		if v.Settles != "" {
			*n.state, *n.settledAt, done = v.Settles, ans.At, true
			if k.settled != nil {
				k.settled(&next, v, a)
			}
			break
		}
		*n.state = statemachine.Uncertain
		switch {
		case a.Outcome == provider.RetryLater && *c.state == statemachine.Submitted && l.Checks < s.cfg.MaxAttempts:
			// The provider did not act. From submitted nothing is
			// uncertain: stay and resend the same request later.
			*n.state = statemachine.Submitted
		case a.Op == k.search && a.Outcome == provider.NotFound && !k.keyReplayable(s, cur, now):
			reason = EscalationKeyRetentionExpired
		}
	case VerdictEscalate:
		reason = v.Reason
		*n.state = statemachine.Uncertain
		if *c.state == statemachine.Submitted && a.Outcome == provider.Rejected {
			// Refused without acting: nothing is uncertain from submitted,
			// but resending unchanged will not help. A human fixes the
			// cause; the slow checks then resend the same request.
			*n.state = statemachine.Submitted
		}
	default: // record, confirm: the row's own outcome is still open
		*n.state = statemachine.Uncertain
	}

	if done {
		// A settled row leaves the operator list, unless what put it
		// there needs a human whatever the outcome.
		if !c.reason.Sticky() {
			*n.escalatedAt, *n.reason = time.Time{}, ""
		}
		return next, true, time.Time{}
	}
	if *n.state == statemachine.Uncertain && n.uncertainSince.IsZero() {
		*n.uncertainSince = now
	}
	if reason == "" && *n.state == statemachine.Uncertain {
		switch {
		case l.Checks >= s.cfg.MaxAttempts:
			reason = EscalationAttemptsExhausted
		case now.Sub(*n.uncertainSince) >= s.cfg.MaxUncertainAge:
			reason = EscalationUncertainTooLong
		}
	}
	if reason != "" {
		escalate(n.escalatedAt, n.reason, reason, now)
	}
	runAt = now.Add(s.cfg.backoff(l.Checks - 1))
	if !n.escalatedAt.IsZero() {
		runAt = now.Add(s.cfg.EscalatedInterval)
	}
	return next, false, runAt
}

// hold reschedules job, kept from the provider, at the slow cadence of
// escalated cases.
func (s *Service) hold(ctx context.Context, l Lease, job string) error {
	return s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.CheckLease(ctx, l); err != nil {
			return err
		}
		return tx.RescheduleJob(ctx, job, s.leaseNow(l).Add(s.cfg.EscalatedInterval))
	})
}
