package reconcile

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/payrecon/payrecon/internal/crashpoint"

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
	// spawn runs one claimed job's work in a free slot.
	spawn := func(f func()) {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
			<-slots
			select {
			case wake <- struct{}{}:
			default:
			}
		}()
	}
	ap := s.startApplier()
	log.Info("worker started", "concurrency", s.cfg.Concurrency, "batch", s.cfg.BatchSize, "lease", s.cfg.LeaseDuration)

	timer := time.NewTimer(0)
	defer timer.Stop()
	for ctx.Err() == nil {
		free := cap(slots) - len(slots)
		if free > s.cfg.BatchSize {
			free = s.cfg.BatchSize
		}
		var batches []batch
		if free > 0 {
			var err error
			batches, err = s.claim(ctx, free)
			if err != nil && ctx.Err() == nil {
				log.Error("claim jobs", "err", err)
			}
		}
		// Every lease takes one slot: there are free of them.
		claimed := 0
		wait := s.cfg.PollInterval
		for _, b := range batches {
			s.runBatch(workCtx, b.leases, b.g, ap, spawn)
			claimed += len(b.leases)
			if b.g != nil && len(b.g.due) == 0 && b.g.retry > 0 {
				// The budget is spoken for beyond the horizon: ask again
				// when it has room, or when a slot frees. Jitter spreads
				// the workers over the next token's interval.
				wait = min(wait, time.Duration(float64(b.g.retry)*(0.5+rand.Float64())))
			}
		}
		if claimed == free && free > 0 {
			continue // more may be due: claim again at once
		}
		timer.Reset(wait)
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
	ap.stop()
	released, err := s.store.ReleaseLeases(context.WithoutCancel(ctx), s.cfg.WorkerID)
	if err != nil {
		return fmt.Errorf("reconcile: release leases: %w", err)
	}
	log.Info("worker stopped", "leases_released", released)
	return nil
}

// RunOnce claims up to Config.BatchSize due jobs and works each to its next
// wait, Config.Concurrency at a time. It returns how many jobs it claimed.
// Tests and benchmarks use it; Work is the loop.
//
// With a budget that reserves (a Reserver: the shared budget), it claims
// only as many jobs as the budget serves within their leases (see claim),
// and none while the budget is spoken for: 0 then does not mean that no
// job is due.
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	batches, err := s.claim(ctx, s.cfg.BatchSize)
	s.processAll(ctx, batches)
	claimed := 0
	for _, b := range batches {
		claimed += len(b.leases)
	}
	return claimed, err
}

// processAll works the batches' leases, Config.Concurrency at a time,
// so that none waits in line while its lease runs out, the batched way
// (runBatch), each batch with the budget's tokens reserved for it.
func (s *Service) processAll(ctx context.Context, batches []batch) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.cfg.Concurrency)
	ap := s.startApplier()
	for _, b := range batches {
		s.runBatch(ctx, b.leases, b.g, ap, func(f func()) {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				f()
			}()
		})
	}
	wg.Wait()
	ap.stop()
}

// batch is what one claim leased of one account (of any account, when
// the deployment serves the platform's alone), with the tokens reserved
// for its creates from that account's budget (nil: none reserved).
type batch struct {
	leases []Lease
	g      *grants
}

// claim leases up to n due jobs, in batches. With a budget that reserves
// (Reserver), each batch first reserves the tokens of the creates it may
// make, each due within reserveHorizon, and claims only as many jobs as it
// reserved tokens: see grants.
//
// A deployment that serves connected accounts claims each account apart,
// from its own budget, and shares n fairly among the accounts with work:
// each gets an equal share first, in turn from where the last claim
// stopped, and what the others leave goes to those with more. So one
// account's backlog, however deep, never delays another's new purchase by
// more than a claim, and no account waits while the worker has room.
func (s *Service) claim(ctx context.Context, n int) ([]batch, error) {
	if err := s.refreshRecovery(ctx); err != nil && s.recovery.Load() == nil {
		// Never read: claim nothing rather than work unguarded.
		return nil, err
	}
	if !s.cfg.servesConnected() {
		b, err := s.claimOf(ctx, provider.PlatformAccount, false, n)
		return []batch{b}, err
	}
	// The accounts whose budget the worker found spoken for are listed
	// too, and passed over, so that n others can still be offered a share.
	listed, err := s.dueAccounts(ctx, n+s.countSpokenFor())
	if err != nil || len(listed) == 0 {
		return nil, err
	}
	var accounts []string
	var wait time.Duration // until the first passed-over account has a token
	for _, a := range listed {
		if d := s.spokenForLeft(a); d > 0 {
			if wait == 0 || d < wait {
				wait = d
			}
			continue
		}
		if len(accounts) < n {
			accounts = append(accounts, a)
		}
	}
	if len(accounts) == 0 {
		// Every account with work is spoken for: ask again when the
		// first has a token (Work waits for a batch's retry).
		return []batch{{g: &grants{retry: wait}}}, nil
	}
	share := (n + len(accounts) - 1) / len(accounts)
	var out []batch
	var more []string // the accounts that filled their share
	for _, a := range accounts {
		if n == 0 {
			break
		}
		want := min(share, n)
		b, err := s.claimOf(ctx, a, true, want)
		s.claimCursor.Store(&a)
		out = append(out, b)
		if err != nil {
			return out, err
		}
		n -= len(b.leases)
		if len(b.leases) == want {
			more = append(more, a)
		}
	}
	for _, a := range more {
		if n == 0 {
			break
		}
		b, err := s.claimOf(ctx, a, true, n)
		out = append(out, b)
		if err != nil {
			return out, err
		}
		n -= len(b.leases)
	}
	return out, nil
}

// dueAccounts returns up to n accounts with jobs due, each once, in turn:
// those after the last one the worker claimed for first, then from the
// start. The store orders accounts; this compares none, so that its
// collation decides alone.
func (s *Service) dueAccounts(ctx context.Context, n int) ([]string, error) {
	list := func(after string, limit int) ([]string, error) {
		accounts, err := s.store.DueAccounts(ctx, after, limit)
		if err != nil {
			return nil, fmt.Errorf("reconcile: claim: the accounts with jobs due: %w", err)
		}
		return accounts, nil
	}
	cursor := s.claimCursor.Load()
	if cursor == nil {
		return list("", n)
	}
	var accounts []string
	var err error
	if *cursor == provider.PlatformAccount {
		// After "" means from the start (DueAccounts): the platform's
		// own sorts first, so the accounts after it are the others.
		if accounts, err = list("", n+1); err == nil && len(accounts) > 0 && accounts[0] == provider.PlatformAccount {
			accounts = accounts[1:]
		}
		accounts = accounts[:min(len(accounts), n)]
	} else {
		accounts, err = list(*cursor, n)
	}
	if err != nil || len(accounts) == n {
		return accounts, err
	}
	first, err := list("", n)
	if err != nil {
		return nil, err
	}
	listed := make(map[string]bool, len(accounts))
	for _, a := range accounts {
		listed[a] = true
	}
	for _, a := range first {
		if len(accounts) == n {
			break
		}
		if !listed[a] {
			accounts = append(accounts, a)
		}
	}
	return accounts, nil
}

// claimOf leases up to n due jobs of account (of any account unless
// ofAccount), after reserving their creates' tokens from account's budget.
func (s *Service) claimOf(ctx context.Context, account string, ofAccount bool, n int) (batch, error) {
	g, err := s.reserve(ctx, account, n)
	if err != nil {
		return batch{}, err
	}
	if g != nil {
		n = len(g.due)
		if n == 0 {
			if ofAccount && g.retry > 0 {
				s.spokenFor.Store(account, s.cfg.Now().Add(g.retry))
			}
			return batch{g: g}, nil
		}
	}
	var leases []Lease
	if ofAccount {
		leases, err = s.store.ClaimAccountJobs(ctx, s.cfg.WorkerID, account, n, s.cfg.LeaseDuration)
	} else {
		leases, err = s.store.ClaimJobs(ctx, s.cfg.WorkerID, n, s.cfg.LeaseDuration)
	}
	if err != nil {
		s.unreserve(ctx, g, g.left())
		return batch{}, fmt.Errorf("reconcile: claim: %w", err)
	}
	s.claimed(leases)
	return batch{leases: leases, g: g}, nil
}

// spokenForLeft returns how long the worker's last reservation found
// account's budget spoken for from now: 0 once it has a token.
func (s *Service) spokenForLeft(account string) time.Duration {
	until, ok := s.spokenFor.Load(account)
	if !ok {
		return 0
	}
	if d := until.(time.Time).Sub(s.cfg.Now()); d > 0 {
		return d
	}
	s.spokenFor.Delete(account)
	return 0
}

// countSpokenFor counts the accounts whose budget the worker found spoken
// for, forgetting those that have a token again.
func (s *Service) countSpokenFor() int {
	k := 0
	s.spokenFor.Range(func(a, _ any) bool {
		if s.spokenForLeft(a.(string)) > 0 {
			k++
		}
		return true
	})
	return k
}

// claimed notes the worker's own clock reading of a claim on each lease
// (see leaseNow) and counts the claim.
func (s *Service) claimed(leases []Lease) {
	local := s.cfg.Now()
	for i := range leases {
		leases[i].local = local
	}
	if len(leases) > 0 {
		s.cfg.Observer.JobsClaimed(len(leases))
	}
}

// leaseNow is the time by the store's clock as measured under the lease:
// the store's time of the claim plus what the worker's own clock says has
// elapsed since. A worker whose clock is hours off decides exactly as one
// whose clock is right; only its rate matters, over one lease.
func (s *Service) leaseNow(l Lease) time.Time {
	if l.Now.IsZero() || l.local.IsZero() {
		return s.cfg.Now().UTC() // a lease not from a claim: tests only
	}
	return l.Now.Add(s.cfg.Now().Sub(l.local)).UTC()
}

// Process moves one leased purchase as far as it can go now: to a terminal
// state, or to a scheduled next check. l must come from the store's
// ClaimJobs (or ClaimJob, ClaimExpiredJobs); every write and every
// provider call is fenced by it, so a stale lease writes and sends
// nothing. It returns the error that stopped it, already logged; a job
// whose run failed is retried when its lease expires.
func (s *Service) Process(ctx context.Context, l Lease) error {
	if l.local.IsZero() {
		l.local = s.cfg.Now()
	}
	if l.Kind == JobRefund {
		return s.processRefund(ctx, l)
	}
	limited, err := purchaseKind.runSteps(s, ctx, l, l.PurchaseID, s.step)
	if limited && err != nil {
		s.cfg.Logger.With("purchase", l.PurchaseID, "lease_token", l.Token).Warn("reschedule after step limit", "err", err)
	}
	return err
}

// runFailed logs and counts the error that stopped a run under l, and
// returns it.
func (s *Service) runFailed(l Lease, err error) error {
	log := s.cfg.Logger.With("purchase", l.PurchaseID, "lease_token", l.Token)
	if l.Kind == JobRefund {
		log = log.With("refund", l.RefundID)
	}
	if errors.Is(err, ErrLeaseLost) {
		s.cfg.Observer.LeaseLost()
		log.Warn("lease lost: leaving the purchase to its new owner")
		return err
	}
	log.Error("job failed; it will be retried when its lease expires", "err", err)
	return err
}

// step makes one move. It returns done when the job needs nothing more
// until its next scheduled run.
func (s *Service) step(ctx context.Context, l *Lease) (done bool, err error) {
	var p Purchase
	if l.Purchase != nil {
		// The claim read it: the first step needs no read of its own.
		// Every write is conditional on its version, so a purchase
		// changed since only costs a read and a step more.
		p, l.Purchase = *l.Purchase, nil
	} else if p, err = s.read(ctx, l.PurchaseID); err != nil {
		return false, err
	}
	// A takeover means the previous worker may have died inside a provider
	// call. It keeps that meaning until the step that handles a purchase
	// left submitted or reconciling has used it; in any other state there
	// is no call to take over.
	if p.State != statemachine.Submitted && p.State != statemachine.Reconciling {
		l.TakenOver = false
	}
	if !p.State.Terminal() && !p.Escalated() && l.Checks > s.cfg.MaxAttempts {
		// Runs beyond the budget that never reached the point of escalating
		// (each failed before its answer was applied): put it in front of a
		// human now, whatever keeps failing. The state is left for the next
		// step to handle.
		return false, purchaseKind.escalateOnly(s, ctx, *l, p, EscalationAttemptsExhausted, "attempts exhausted before an answer was applied")
	}
	switch p.State {
	case statemachine.Succeeded, statemachine.Declined:
		if p.Doubt != "" {
			return s.confirm(ctx, *l, p)
		}
		return purchaseKind.finishJob(s, ctx, *l, l.PurchaseID, p)
	case statemachine.Created:
		if p.EscalationReason.ChargeMayExist() {
			// A charge for this purchase may exist already: never send a
			// create over it. The operator decides.
			return true, s.hold(ctx, *l, p.ID)
		}
		if s.heldByRecovery(p.CreatedAt) {
			// Restored from a backup: the provider may hold its charge
			// and have forgotten its key. The recovery audit decides.
			return true, s.holdForRecovery(ctx, *l, p.ID, "create")
		}
		// Nothing was sent yet, even if a previous worker died: submit.
		return s.advance(ctx, s.submitIntent(*l, p))
	case statemachine.Submitted:
		if l.TakenOver {
			// The previous worker died or stalled during its call: the
			// provider may have acted. Never a new key; reconcile instead.
			l.TakenOver = false
			return false, purchaseKind.moveOnly(s, ctx, *l, p, statemachine.Uncertain, CauseLeaseLost,
				"previous lease expired while submitted: the create call's outcome is unknown")
		}
		if p.EscalationReason.ChargeMayExist() {
			return false, purchaseKind.moveOnly(s, ctx, *l, p, statemachine.Uncertain, CauseFinding,
				"a charge may exist ("+string(p.EscalationReason)+"): no create is resent; reconciling by status or search")
		}
		if s.heldByRecovery(p.CreatedAt) {
			return true, s.holdForRecovery(ctx, *l, p.ID, "replay of the create")
		}
		// Submitted with a clean lease: the provider refused an earlier
		// attempt before acting. Send the same stored request again.
		if !s.keyReplayable(p, s.leaseNow(*l)) {
			return false, purchaseKind.moveOnly(s, ctx, *l, p, statemachine.Uncertain, CauseSubmitResponse,
				"provider key retention ended before a create was accepted")
		}
		// The purchase must still be as read: a finding that a charge may
		// exist, committed since, forbids the resend.
		if ok, err := purchaseKind.fenceUnchanged(s, ctx, *l, p); err != nil || !ok {
			return false, err
		}
		return s.callAndApply(ctx, *l, p, provider.OpCreate, SourceCreate, CauseSubmitResponse)
	case statemachine.Reconciling:
		// Only a lost lease leaves a purchase reconciling between runs.
		l.TakenOver = false
		return false, purchaseKind.moveOnly(s, ctx, *l, p, statemachine.Uncertain, CauseLeaseLost,
			"previous lease expired while reconciling")
	case statemachine.Uncertain:
		return s.advance(ctx, s.reconcileIntent(*l, p))
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
	return s.store.InTx(ctx, func(tx Tx) error { return tx.CheckLease(ctx, l) })
}

// leaseCommitMargin is the part of a lease kept free after a provider call
// for committing its answer.
func (s *Service) leaseCommitMargin() time.Duration { return s.cfg.LeaseDuration / 10 }

// keyReplayable reports whether the provider still certainly retains p's
// idempotency key at now (the store's clock), so that replaying the
// stored create cannot make a second charge.
func (s *Service) keyReplayable(p Purchase, now time.Time) bool {
	if p.ProviderRequest == nil || p.FirstAttemptAt.IsZero() {
		return false
	}
	deadline := p.FirstAttemptAt.Add(s.cfg.KeyRetention - s.cfg.KeyReplayMargin)
	return now.Before(deadline)
}

// intent is a move made before a provider call, and the call it
// announces: created→submitted storing the request, or
// uncertain→reconciling naming the check.
type intent struct {
	l        Lease
	p, next  Purchase // the purchase as read, and as the intent writes it
	cause    Cause    // the intent's transition
	evidence string
	op       provider.Op
	src      Source
	answer   Cause // the cause of the move that applies the answer
	// due is when the call's token, reserved by the claim, is due; valid
	// when reserved, else the call waits for the budget (see grants).
	due      time.Time
	reserved bool
}

// intentOf returns the intent of the step that moves p under l when that
// step is a provider call (a first submit, or a check of an uncertain
// purchase), and false for every other step.
func (s *Service) intentOf(l Lease, p Purchase) (intent, bool) {
	if !p.State.Terminal() && !p.Escalated() && l.Checks > s.cfg.MaxAttempts {
		return intent{}, false // see step: escalated first
	}
	switch {
	case p.State == statemachine.Created && !p.EscalationReason.ChargeMayExist() && !s.heldByRecovery(p.CreatedAt):
		return s.submitIntent(l, p), true
	case p.State == statemachine.Uncertain:
		return s.reconcileIntent(l, p), true
	}
	return intent{}, false
}

// submitIntent stores the provider request, its hash and the stable key
// while moving created→submitted; only after that commit is the provider
// called. The request is of the current version (a merchant-initiated,
// off-session charge); a request stored earlier keeps its own version, so
// that every later call replays exactly what was stored.
func (s *Service) submitIntent(l Lease, p Purchase) intent {
	now := s.leaseNow(l)
	req := provider.CreateRequest{
		IdempotencyKey: ProviderKeyFor(p.ID),
		PurchaseID:     p.ID,
		Customer:       p.Customer,
		Amount:         p.Amount,
		Currency:       p.Currency,
		Description:    p.Description,
		PaymentMethod:  p.PaymentMethod,
		Account:        p.Account,
		Version:        provider.CurrentRequestVersion,
	}
	next := p
	next.State = statemachine.Submitted
	next.ProviderKey = req.IdempotencyKey
	next.ProviderRequest = &req
	next.ParamsHash = req.Hash()
	next.FirstAttemptAt = now
	next.UpdatedAt = now
	return intent{
		l: l, p: p, next: next,
		cause: CauseSubmit, evidence: "stored request " + next.ParamsHash[:12] + " under key " + req.IdempotencyKey,
		op: provider.OpCreate, src: SourceCreate, answer: CauseSubmitResponse,
	}
}

// reconcileIntent resolves an uncertain purchase by the safest means
// available: a status query when the provider's id is known, else a
// replay of the stored create under the same key while the provider
// retains it, else a search by metadata. It never makes a new key, and
// never replays while a finding says a charge may already exist, or
// while an open recovery epoch holds the purchase (heldByRecovery).
func (s *Service) reconcileIntent(l Lease, p Purchase) intent {
	op, src, cause := provider.OpSearch, SourceSearch, CauseSearch
	switch {
	case p.ProviderPaymentID != "":
		op, src, cause = provider.OpStatus, SourceStatus, CauseStatusQuery
	case s.keyReplayable(p, s.leaseNow(l)) && !p.EscalationReason.ChargeMayExist() && !s.heldByRecovery(p.CreatedAt):
		op, src, cause = provider.OpCreate, SourceReplay, CauseKeyReplay
	}
	next := p
	next.State = statemachine.Reconciling
	next.UpdatedAt = s.leaseNow(l)
	return intent{
		l: l, p: p, next: next,
		cause: cause, evidence: "checking by " + string(op),
		op: op, src: src, answer: cause,
	}
}

// advance writes in and, once it has committed, makes its call and
// applies the answer.
func (s *Service) advance(ctx context.Context, in intent) (bool, error) {
	ok, err := purchaseKind.write(s, ctx, in.l, in.p, in.next, in.cause, in.evidence)
	if err != nil || !ok {
		return false, err
	}
	crashpoint.Hit(crashpoint.IntentCommitted)
	in.next.Version++
	return s.callAndApply(ctx, in.l, in.next, in.op, in.src, in.answer)
}

// confirm settles a doubt about a final state: a newer answer contradicted
// it, so the provider is asked for its current view (by payment id, else
// by search) and the judge weighs that. The final state itself never
// changes: a confirmed disagreement goes to the operators.
func (s *Service) confirm(ctx context.Context, l Lease, p Purchase) (bool, error) {
	op, src := provider.OpSearch, SourceSearch
	if p.ProviderPaymentID != "" {
		op, src = provider.OpStatus, SourceStatus
	}
	if err := s.fence(ctx, l); err != nil {
		return false, err
	}
	return s.callAndApply(ctx, l, p, op, src, CauseStatusQuery)
}

// markEscalated puts p on the operator list for reason at now, or gives it
// reason when that weighs more than the one it is listed for (see
// escalationRank). It reports whether p changed.
func markEscalated(p *Purchase, reason EscalationReason, now time.Time) bool {
	return escalate(&p.EscalatedAt, &p.EscalationReason, reason, now)
}

// escalate is markEscalated over the escalation fields of a purchase or a
// refund.
func escalate(at *time.Time, current *EscalationReason, reason EscalationReason, now time.Time) bool {
	switch {
	case at.IsZero():
		*at, *current = now, reason
		return true
	case escalationRank(reason) > escalationRank(*current):
		*current = reason
		return true
	}
	return false
}

// escalationRank orders reasons by what they demand: a charge that may
// exist (it stops every create and replay) over any other reason that
// needs a human whatever the outcome, over a reason that settles itself.
func escalationRank(r EscalationReason) int {
	switch {
	case r.ChargeMayExist():
		return 2
	case r.Sticky():
		return 1
	}
	return 0
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
	if err := s.refreshRecovery(ctx); err != nil && s.recovery.Load() == nil {
		return 0, err
	}
	leases, err := s.store.ClaimExpiredJobs(ctx, s.cfg.WorkerID+"/rescue", s.cfg.BatchSize, s.cfg.LeaseDuration)
	if err != nil {
		return 0, fmt.Errorf("reconcile: rescue expired leases: %w", err)
	}
	s.claimed(leases)
	s.processAll(ctx, []batch{{leases: leases}})
	return len(leases), nil
}

// EscalateOverdue puts on the operator list every uncertain purchase that
// has been uncertain longer than Config.MaxUncertainAge, without waiting
// for its next check. The purchase stays uncertain and keeps being
// checked. Returns how many it escalated.
func (s *Service) EscalateOverdue(ctx context.Context) (int, error) {
	return purchaseKind.escalateOverdue(s, ctx)
}

// observeMove counts a committed move of a purchase, and the time it
// spent uncertain when it settles.
func (s *Service) observeMove(p, next Purchase, cause Cause) {
	if p.State == next.State {
		return
	}
	s.observeTransition(p.Account, p.State, next.State, cause)
	if next.State.Terminal() && !next.UncertainSince.IsZero() {
		s.cfg.Observer.Resolved(next.UpdatedAt.Sub(next.UncertainSince))
	}
}
