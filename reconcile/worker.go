package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// maxStepsPerRun bounds the moves one claim may make, so that a purchase
// bounced between writers cannot keep a worker busy forever.
const maxStepsPerRun = 8

// Work claims and works due jobs until ctx is done, then stops claiming,
// lets in-flight jobs finish for up to Config.ShutdownGrace (cancelling
// their provider calls after that, which records their outcome as
// unknown), and releases every lease it still holds. It returns nil after
// a clean stop.
func (s *Service) Work(ctx context.Context) error {
	log := s.cfg.Logger.With("worker", s.cfg.WorkerID)
	// In-flight jobs run under their own context: the signal that stops
	// claiming must not cut a provider call short while its answer can
	// still be recorded.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	var wg sync.WaitGroup
	slots := make(chan struct{}, s.cfg.Concurrency)
	wake := make(chan struct{}, 1)
	log.Info("worker started", "concurrency", s.cfg.Concurrency, "lease", s.cfg.LeaseDuration)

	timer := time.NewTimer(0)
	defer timer.Stop()
	for ctx.Err() == nil {
		free := cap(slots) - len(slots)
		if free > s.cfg.BatchSize {
			free = s.cfg.BatchSize
		}
		var leases []Lease
		if free > 0 {
			var err error
			leases, err = s.claim(ctx, free)
			if err != nil && ctx.Err() == nil {
				log.Error("claim jobs", "err", err)
			}
		}
		for _, l := range leases {
			slots <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = s.Process(workCtx, l) // logged inside
				<-slots
				select {
				case wake <- struct{}{}:
				default:
				}
			}()
		}
		if len(leases) == free && free > 0 {
			continue // more may be due: claim again at once
		}
		timer.Reset(s.cfg.PollInterval)
		select {
		case <-ctx.Done():
		case <-timer.C:
		case <-wake:
		}
	}

	log.Info("worker stopping: claiming stopped, finishing in-flight jobs", "grace", s.cfg.ShutdownGrace)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	grace := time.NewTimer(s.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-finished:
	case <-grace.C:
		log.Warn("shutdown grace over: cancelling in-flight provider calls")
		cancelWork()
		<-finished
	}
	released, err := s.store.ReleaseLeases(context.WithoutCancel(ctx), s.cfg.WorkerID, s.cfg.Now().UTC())
	if err != nil {
		return fmt.Errorf("reconcile: release leases: %w", err)
	}
	log.Info("worker stopped", "leases_released", released)
	return nil
}

// RunOnce claims up to Config.BatchSize due jobs and works each to its next
// wait, Config.Concurrency at a time. It returns how many jobs it claimed.
// Tests and benchmarks use it; Work is the loop.
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	leases, err := s.claim(ctx, s.cfg.BatchSize)
	if err != nil {
		return 0, err
	}
	s.processAll(ctx, leases)
	return len(leases), nil
}

// processAll works leases, Config.Concurrency at a time, so that none
// waits in line while its lease runs out.
func (s *Service) processAll(ctx context.Context, leases []Lease) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.cfg.Concurrency)
	for _, l := range leases {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_ = s.Process(ctx, l) // logged inside
		}()
	}
	wg.Wait()
}

func (s *Service) claim(ctx context.Context, n int) ([]Lease, error) {
	leases, err := s.store.ClaimJobs(ctx, s.cfg.WorkerID, n, s.cfg.Now().UTC(), s.cfg.LeaseDuration)
	if err != nil {
		return nil, fmt.Errorf("reconcile: claim: %w", err)
	}
	if len(leases) > 0 {
		s.cfg.Observer.JobsClaimed(len(leases))
	}
	return leases, nil
}

// Process moves one leased purchase as far as it can go now: to a terminal
// state, or to a scheduled next check. l must come from the store's
// ClaimJobs (or ClaimJob, ClaimExpiredJobs); every write and every
// provider call is fenced by it, so a stale lease writes and sends
// nothing. It returns the error that stopped it, already logged; a job
// whose run failed is retried when its lease expires.
func (s *Service) Process(ctx context.Context, l Lease) error {
	log := s.cfg.Logger.With("purchase", l.PurchaseID, "lease_token", l.Token)
	for range maxStepsPerRun {
		done, err := s.step(ctx, &l)
		switch {
		case errors.Is(err, ErrLeaseLost):
			s.cfg.Observer.LeaseLost()
			log.Warn("lease lost: leaving the purchase to its new owner")
			return err
		case err != nil:
			log.Error("job failed; it will be retried when its lease expires", "err", err)
			return err
		case done:
			return nil
		}
	}
	// Still moving after many steps: something keeps changing the purchase
	// under us. Check again later rather than spin.
	err := s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.CheckLease(ctx, l, s.cfg.Now().UTC()); err != nil {
			return err
		}
		return tx.RescheduleJob(ctx, l.PurchaseID, s.cfg.Now().UTC().Add(s.cfg.backoff(0)))
	})
	if err != nil {
		log.Warn("reschedule after step limit", "err", err)
	}
	return err
}

// step makes one move. It returns done when the job needs nothing more
// until its next scheduled run.
func (s *Service) step(ctx context.Context, l *Lease) (done bool, err error) {
	p, err := s.read(ctx, l.PurchaseID)
	if err != nil {
		return false, err
	}
	takenOver := l.TakenOver
	l.TakenOver = false // a takeover is handled once, on the first step
	if !p.State.Terminal() && !p.Escalated() && l.Checks > s.cfg.MaxAttempts {
		// Runs beyond the budget that never reached the point of escalating
		// (each failed before its answer was applied): put it in front of a
		// human now, whatever keeps failing.
		if err := s.escalateOnly(ctx, *l, p, EscalationAttemptsExhausted, time.Time{}); err != nil {
			return false, err
		}
		return false, nil
	}
	switch p.State {
	case statemachine.Succeeded, statemachine.Declined:
		return true, s.finishJob(ctx, *l)
	case statemachine.Created:
		// Nothing was sent yet, even if a previous worker died: submit.
		return s.submit(ctx, *l, p)
	case statemachine.Submitted:
		if takenOver {
			// The previous worker died or stalled during its call: the
			// provider may have acted. Never a new key; reconcile instead.
			return false, s.moveOnly(ctx, *l, p, statemachine.Uncertain, CauseLeaseLost,
				"previous lease expired while submitted: the create call's outcome is unknown")
		}
		// Submitted with a clean lease: the provider refused an earlier
		// attempt before acting. Send the same stored request again.
		if !s.keyReplayable(p) {
			return false, s.moveOnly(ctx, *l, p, statemachine.Uncertain, CauseSubmitResponse,
				"provider key retention ended before a create was accepted")
		}
		if err := s.fence(ctx, *l); err != nil {
			return false, err
		}
		return s.callAndApply(ctx, *l, p, provider.OpCreate, CauseSubmitResponse)
	case statemachine.Reconciling:
		// Only a lost lease leaves a purchase reconciling between runs.
		return false, s.moveOnly(ctx, *l, p, statemachine.Uncertain, CauseLeaseLost,
			"previous lease expired while reconciling")
	case statemachine.Uncertain:
		return s.reconcile(ctx, *l, p)
	default:
		return false, fmt.Errorf("reconcile: purchase %s in unknown state %q", p.ID, p.State)
	}
}

func (s *Service) read(ctx context.Context, id string) (Purchase, error) {
	var p Purchase
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		p, err = tx.GetPurchase(ctx, id)
		return err
	})
	if err != nil {
		return Purchase{}, fmt.Errorf("reconcile: read purchase %s: %w", id, err)
	}
	return p, nil
}

// fence returns ErrLeaseLost unless l is still the job's lease.
func (s *Service) fence(ctx context.Context, l Lease) error {
	return s.store.InTx(ctx, func(tx Tx) error { return tx.CheckLease(ctx, l, s.cfg.Now().UTC()) })
}

// leaseCommitMargin is the part of a lease kept free after a provider call
// for committing its answer.
func (s *Service) leaseCommitMargin() time.Duration { return s.cfg.LeaseDuration / 10 }

func (s *Service) finishJob(ctx context.Context, l Lease) error {
	return s.store.InTx(ctx, func(tx Tx) error {
		now := s.cfg.Now().UTC()
		if err := tx.CheckLease(ctx, l, now); err != nil {
			return err
		}
		return tx.CompleteJob(ctx, l.PurchaseID, now)
	})
}

// keyReplayable reports whether the provider still certainly retains p's
// idempotency key, so that replaying the stored create cannot make a
// second charge.
func (s *Service) keyReplayable(p Purchase) bool {
	if p.ProviderRequest == nil || p.FirstAttemptAt.IsZero() {
		return false
	}
	deadline := p.FirstAttemptAt.Add(s.cfg.KeyRetention - s.cfg.KeyReplayMargin)
	return s.cfg.Now().Before(deadline)
}

// submit stores the provider request, its hash and the stable key while
// moving created→submitted, and only after that commit calls the provider.
func (s *Service) submit(ctx context.Context, l Lease, p Purchase) (bool, error) {
	now := s.cfg.Now().UTC()
	req := provider.CreateRequest{
		IdempotencyKey: ProviderKeyFor(p.ID),
		PurchaseID:     p.ID,
		Customer:       p.Customer,
		Amount:         p.Amount,
		Currency:       p.Currency,
		Description:    p.Description,
		PaymentMethod:  p.PaymentMethod,
	}
	next := p
	next.State = statemachine.Submitted
	next.ProviderKey = req.IdempotencyKey
	next.ProviderRequest = &req
	next.ParamsHash = req.Hash()
	next.FirstAttemptAt = now
	next.UpdatedAt = now
	ok, err := s.write(ctx, l, p, next, CauseSubmit, "stored request "+next.ParamsHash[:12]+" under key "+req.IdempotencyKey)
	if err != nil || !ok {
		return false, err
	}
	next.Version++
	return s.callAndApply(ctx, l, next, provider.OpCreate, CauseSubmitResponse)
}

// reconcile resolves an uncertain purchase by the safest means available:
// a status query when the provider's id is known, else a replay of the
// stored create under the same key while the provider retains it, else a
// search by metadata. It never makes a new key.
func (s *Service) reconcile(ctx context.Context, l Lease, p Purchase) (bool, error) {
	op, cause := provider.OpSearch, CauseSearch
	switch {
	case p.ProviderPaymentID != "":
		op, cause = provider.OpStatus, CauseStatusQuery
	case s.keyReplayable(p):
		op, cause = provider.OpCreate, CauseKeyReplay
	}
	next := p
	next.State = statemachine.Reconciling
	next.UpdatedAt = s.cfg.Now().UTC()
	ok, err := s.write(ctx, l, p, next, cause, "checking by "+string(op))
	if err != nil || !ok {
		return false, err
	}
	next.Version++
	return s.callAndApply(ctx, l, next, op, cause)
}

// callAndApply makes one provider call for p and applies its answer.
func (s *Service) callAndApply(ctx context.Context, l Lease, p Purchase, op provider.Op, cause Cause) (bool, error) {
	// The call must end while the lease still holds, with time left to
	// commit its answer: a call that outlived its lease could race the
	// worker that took the job over.
	timeout := min(s.cfg.ProviderTimeout, l.ExpiresAt.Sub(s.cfg.Now())-s.leaseCommitMargin())
	if timeout <= 0 {
		return false, fmt.Errorf("reconcile: purchase %s: no time left on the lease for a provider call: %w", p.ID, ErrLeaseLost)
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	start := s.cfg.Now()
	var (
		res provider.Result
		err error
	)
	switch op {
	case provider.OpCreate:
		res, err = s.provider.Create(callCtx, *p.ProviderRequest)
	case provider.OpStatus:
		res, err = s.provider.Status(callCtx, p.ProviderPaymentID)
	case provider.OpSearch:
		res, err = s.provider.Search(callCtx, p.ID)
	}
	cancel()
	took := s.cfg.Now().Sub(start)
	outcome := provider.OutcomeOf(res, err)
	s.cfg.Observer.ProviderCall(op, outcome, took)

	attempt := Attempt{
		PurchaseID: p.ID,
		Op:         op,
		Outcome:    outcome,
		PaymentID:  res.PaymentID,
		Status:     res.Status,
		Latency:    took,
		Actor:      s.cfg.WorkerID,
		LeaseToken: l.Token,
		Note:       res.Reason,
	}
	if op == provider.OpCreate {
		attempt.Key = p.ProviderRequest.IdempotencyKey
	}
	if err != nil {
		attempt.Error = err.Error()
	}
	// The answer is applied even if the worker is stopping: it is the
	// only record of what the provider did.
	return s.apply(context.WithoutCancel(ctx), l, p, cause, attempt, res)
}

// apply records a provider answer and moves p accordingly, in one
// transaction fenced by the lease and conditional on p's state and version.
//
// If another writer changed p meanwhile without moving it (a webhook
// adding the payment id, the escalation sweep), the answer is applied on
// top of the fresh row. If it moved p (a webhook settling it), or the
// lease is lost, the answer is recorded unapplied: it is still a fact
// about the provider.
func (s *Service) apply(ctx context.Context, l Lease, p Purchase, cause Cause, a Attempt, res provider.Result) (bool, error) {
	var err error
	for range maxWriteRaces {
		var done bool
		done, err = s.applyOnce(ctx, l, p, cause, a, res)
		if err == nil {
			return done, nil
		}
		if !errors.Is(err, ErrConflict) {
			break
		}
		cur, rerr := s.read(ctx, p.ID)
		if rerr != nil {
			err = errors.Join(err, rerr)
			break
		}
		if cur.State != p.State {
			break
		}
		p = cur
	}
	// Not applied: record the answer anyway, as a fact about the provider.
	a.At = s.cfg.Now().UTC()
	a.Applied = false
	a.Note = joinNote(a.Note, "not applied: "+reasonOf(err))
	if aerr := s.store.InTx(ctx, func(tx Tx) error { return tx.InsertAttempt(ctx, a) }); aerr != nil {
		return false, errors.Join(err, fmt.Errorf("reconcile: record unapplied attempt: %w", aerr))
	}
	if errors.Is(err, ErrConflict) || errors.Is(err, ErrLeaseLost) {
		if cerr := s.flagContradiction(ctx, p.ID, a); cerr != nil {
			return false, errors.Join(err, cerr)
		}
	}
	if errors.Is(err, ErrConflict) {
		return false, nil // another writer moved it: re-read and decide again
	}
	if errors.Is(err, ErrDuplicate) {
		// The provider's payment id belongs to another purchase: the books
		// and the provider disagree about which charge is whose.
		cur, rerr := s.read(ctx, p.ID)
		if rerr != nil {
			return false, errors.Join(err, rerr)
		}
		s.cfg.Logger.Error("provider payment id already belongs to another purchase", "purchase", p.ID, "payment", a.PaymentID)
		return true, s.escalateOnly(ctx, l, cur, EscalationProviderMismatch, s.cfg.Now().UTC().Add(s.cfg.EscalatedInterval))
	}
	return false, err
}

// escalateOnly puts p on the operator list without moving it, fenced by
// the lease; with a non-zero next, it also schedules the next check.
func (s *Service) escalateOnly(ctx context.Context, l Lease, p Purchase, reason EscalationReason, next time.Time) error {
	now := s.cfg.Now().UTC()
	q := p
	if !q.Escalated() {
		q.EscalatedAt, q.EscalationReason = now, reason
	}
	q.UpdatedAt = now
	err := s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.CheckLease(ctx, l, now); err != nil {
			return err
		}
		if err := tx.UpdatePurchase(ctx, q, p.State); err != nil {
			return err
		}
		if next.IsZero() {
			return nil
		}
		return tx.RescheduleJob(ctx, p.ID, next)
	})
	if err != nil {
		return fmt.Errorf("reconcile: escalate %s: %w", p.ID, err)
	}
	s.cfg.Logger.Warn("purchase escalated to operators", "purchase", p.ID, "reason", q.EscalationReason)
	return nil
}

// flagContradiction escalates a purchase whose final state another writer
// set, when a late definite answer says the opposite: a success for a
// declined purchase, or a decline for a succeeded one. The books and the
// provider disagree; only a human can settle it. Only the escalation is
// written, never the state.
func (s *Service) flagContradiction(ctx context.Context, id string, a Attempt) error {
	if !a.Outcome.Final() {
		return nil
	}
	for range maxWriteRaces {
		cur, err := s.read(ctx, id)
		if err != nil {
			return err
		}
		contradicts := (cur.State == statemachine.Declined && a.Outcome == provider.Succeeded) ||
			(cur.State == statemachine.Succeeded && a.Outcome == provider.Declined)
		if !contradicts || cur.EscalationReason == EscalationContradiction {
			return nil
		}
		next := cur
		next.EscalatedAt, next.EscalationReason, next.UpdatedAt = s.cfg.Now().UTC(), EscalationContradiction, s.cfg.Now().UTC()
		err = s.store.InTx(ctx, func(tx Tx) error { return tx.UpdatePurchase(ctx, next, cur.State) })
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err == nil {
			s.cfg.Logger.Error("contradiction: a late provider answer contradicts the final state",
				"purchase", id, "state", cur.State, "provider", a.Outcome, "payment", a.PaymentID)
		}
		return err
	}
	return nil
}

func (s *Service) applyOnce(ctx context.Context, l Lease, p Purchase, cause Cause, a Attempt, res provider.Result) (bool, error) {
	now := s.cfg.Now().UTC()
	a.At = now
	next := p
	next.UpdatedAt = now
	if res.PaymentID != "" && next.ProviderPaymentID == "" {
		next.ProviderPaymentID = res.PaymentID
	}
	var escalate EscalationReason
	done := false
	switch a.Outcome {
	case provider.Succeeded:
		next.State, done = statemachine.Succeeded, true
	case provider.Declined:
		next.State, done = statemachine.Declined, true
	case provider.RetryLater:
		// The provider did not act. From submitted nothing is uncertain:
		// stay and resend the same request later.
		next.State = statemachine.Uncertain
		if p.State == statemachine.Submitted && l.Checks < s.cfg.MaxAttempts {
			next.State = statemachine.Submitted
		}
	case provider.IdempotencyMismatch:
		next.State, escalate = statemachine.Uncertain, EscalationIdempotencyMismatch
	case provider.Rejected:
		// Refused without acting: nothing is uncertain from submitted, but
		// resending unchanged will not help. A human fixes the cause; the
		// slow checks then resend the same request.
		next.State, escalate = statemachine.Uncertain, EscalationProviderRejected
		if p.State == statemachine.Submitted {
			next.State = statemachine.Submitted
		}
	default: // pending, unknown, not found: not proof of anything
		next.State = statemachine.Uncertain
		if a.Op == provider.OpSearch && a.Outcome == provider.NotFound && !s.keyReplayable(p) {
			escalate = EscalationKeyRetentionExpired
		}
	}

	if a.Outcome.Final() && res.Amount != 0 && (res.Amount != p.Amount || !strings.EqualFold(res.Currency, p.Currency)) {
		// The provider settled a charge that is not the one stored: apply
		// its word, but a human must look.
		escalate = EscalationProviderMismatch
	}
	var runAt time.Time
	if done {
		// A settled purchase leaves the operator list, unless what put it
		// there needs a human whatever the outcome.
		if !p.EscalationReason.Sticky() {
			next.EscalatedAt, next.EscalationReason = time.Time{}, ""
		}
		if escalate == EscalationProviderMismatch && !next.Escalated() {
			next.EscalatedAt, next.EscalationReason = now, escalate
		}
	} else {
		if next.State == statemachine.Uncertain && next.UncertainSince.IsZero() {
			next.UncertainSince = now
		}
		if escalate == "" && next.State == statemachine.Uncertain {
			switch {
			case l.Checks >= s.cfg.MaxAttempts:
				escalate = EscalationAttemptsExhausted
			case now.Sub(next.UncertainSince) >= s.cfg.MaxUncertainAge:
				escalate = EscalationUncertainTooLong
			}
		}
		if escalate != "" && !next.Escalated() {
			next.EscalatedAt, next.EscalationReason = now, escalate
		}
		runAt = now.Add(s.cfg.backoff(l.Checks - 1))
		if next.Escalated() {
			runAt = now.Add(s.cfg.EscalatedInterval)
		}
	}

	a.Applied = true
	evidence := fmt.Sprintf("%s: outcome=%s status=%s payment=%s", a.Op, a.Outcome, a.Status, a.PaymentID)
	if a.Error != "" {
		evidence += " error=" + a.Error
	}
	err := s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.CheckLease(ctx, l, now); err != nil {
			return err
		}
		if err := s.update(ctx, tx, s.cfg.WorkerID, l.Token, p, next, cause, evidence); err != nil {
			return err
		}
		if err := tx.InsertAttempt(ctx, a); err != nil {
			return err
		}
		if done {
			return tx.CompleteJob(ctx, p.ID, now)
		}
		return tx.RescheduleJob(ctx, p.ID, runAt)
	})
	switch {
	case err == nil:
		s.observeMove(p, next, cause)
		if escalate != "" && p.EscalatedAt.IsZero() {
			s.cfg.Logger.Warn("purchase escalated to operators", "purchase", p.ID, "reason", escalate)
		}
		return true, nil
	default:
		return false, err
	}
}

// moveOnly makes a transition that involves no provider call.
func (s *Service) moveOnly(ctx context.Context, l Lease, p Purchase, to statemachine.State, cause Cause, evidence string) error {
	next := p
	next.State = to
	next.UpdatedAt = s.cfg.Now().UTC()
	if to == statemachine.Uncertain && next.UncertainSince.IsZero() {
		next.UncertainSince = next.UpdatedAt
	}
	_, err := s.write(ctx, l, p, next, cause, evidence)
	return err
}

// write commits one fenced, conditional move. It returns false, nil when
// the purchase moved on under the caller (re-read and decide again).
func (s *Service) write(ctx context.Context, l Lease, p, next Purchase, cause Cause, evidence string) (bool, error) {
	err := s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.CheckLease(ctx, l, s.cfg.Now().UTC()); err != nil {
			return err
		}
		return s.update(ctx, tx, s.cfg.WorkerID, l.Token, p, next, cause, evidence)
	})
	switch {
	case err == nil:
		s.observeMove(p, next, cause)
		return true, nil
	case errors.Is(err, ErrConflict):
		return false, nil
	default:
		return false, err
	}
}

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

func reasonOf(err error) string {
	switch {
	case errors.Is(err, ErrLeaseLost):
		return "lease lost"
	case errors.Is(err, ErrConflict):
		return "purchase changed by another writer"
	default:
		return "the write failed: " + err.Error()
	}
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// RescueExpired takes over up to Config.BatchSize jobs whose lease
// expired without release (their worker died or stalled) and works them:
// a purchase left submitted or reconciling moves to uncertain (cause
// lease_lost) and is reconciled. Returns how many jobs it took over.
func (s *Service) RescueExpired(ctx context.Context) (int, error) {
	leases, err := s.store.ClaimExpiredJobs(ctx, s.cfg.WorkerID+"/rescue", s.cfg.BatchSize, s.cfg.Now().UTC(), s.cfg.LeaseDuration)
	if err != nil {
		return 0, fmt.Errorf("reconcile: rescue expired leases: %w", err)
	}
	if len(leases) > 0 {
		s.cfg.Observer.JobsClaimed(len(leases))
	}
	s.processAll(ctx, leases)
	return len(leases), nil
}

// EscalateOverdue puts on the operator list every uncertain purchase that
// has been uncertain longer than Config.MaxUncertainAge, without waiting
// for its next check. The purchase stays uncertain and keeps being
// checked. Returns how many it escalated.
func (s *Service) EscalateOverdue(ctx context.Context) (int, error) {
	now := s.cfg.Now().UTC()
	var overdue []Purchase
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		overdue, err = tx.ListOverdueUncertain(ctx, now.Add(-s.cfg.MaxUncertainAge), 500)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reconcile: escalate overdue: %w", err)
	}
	n := 0
	for _, p := range overdue {
		next := p
		next.EscalatedAt, next.EscalationReason, next.UpdatedAt = now, EscalationUncertainTooLong, now
		err := s.store.InTx(ctx, func(tx Tx) error { return tx.UpdatePurchase(ctx, next, p.State) })
		switch {
		case errors.Is(err, ErrConflict):
			continue // a worker moved it meanwhile; its next check decides
		case err != nil:
			return n, fmt.Errorf("reconcile: escalate %s: %w", p.ID, err)
		}
		n++
		s.cfg.Logger.Warn("purchase escalated to operators", "purchase", p.ID, "reason", EscalationUncertainTooLong)
	}
	return n, nil
}
