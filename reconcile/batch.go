package reconcile

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/payrecon/payrecon/internal/crashpoint"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// The batched path of the worker. A claim returns its purchases; the
// intents of every purchase of the claim whose next step is a provider
// call are written in one transaction; the calls run in parallel; and the
// answers are applied together as they come back, a group per
// transaction. Each member stays fenced by its own lease, state and
// version: a member whose purchase or lease moved on writes nothing and
// goes the single way (Process), which reads it again and decides again.

// runBatch works the claimed leases: the ones whose next step is a
// provider call through the batched path, the others one by one. Each
// create takes one of the tokens g reserved for the claim (nil: none),
// and the tokens left over go back to the budget. spawn runs a
// member's work, bounded by the caller's concurrency; ap applies answers
// in groups.
func (s *Service) runBatch(ctx context.Context, leases []Lease, g *grants, ap *applier, spawn func(func())) {
	var intents []intent
	var single []Lease
	for _, l := range leases {
		if l.Purchase != nil && l.Kind != JobRefund {
			if in, ok := s.intentOf(l, *l.Purchase); ok {
				in.l.Purchase = nil // spent: later steps read afresh
				intents = append(intents, in)
				continue
			}
		}
		single = append(single, l)
	}
	written := s.writeIntents(ctx, intents)
	s.ready(g)
	for i := range intents {
		in := &intents[i]
		if written[i] && in.op == provider.OpCreate {
			in.due, in.reserved = g.next()
		}
	}
	s.unreserve(ctx, g, g.left())
	for i, in := range intents {
		if !written[i] {
			l := in.l
			l.Purchase = nil // it moved on, or the write failed: read it again
			single = append(single, l)
			continue
		}
		spawn(func() { s.finishIntent(ctx, in, ap) })
	}
	for _, l := range single {
		spawn(func() { _ = s.Process(ctx, l) }) // logged inside
	}
}

// writeIntents writes the intents in one transaction and reports which it
// wrote. A failure of the whole transaction writes none: the caller then
// takes each the single way.
func (s *Service) writeIntents(ctx context.Context, intents []intent) []bool {
	if len(intents) == 0 {
		return nil
	}
	moves := make([]Move, len(intents))
	for i, in := range intents {
		if err := statemachine.Transition(in.p.State, in.next.State); err != nil {
			return make([]bool, len(intents)) // a bug: let the single path say so
		}
		moves[i] = Move{Lease: in.l, From: in.p, To: in.next, Transition: s.transition(in.l, in.p, in.next, in.cause, in.evidence)}
	}
	var written []bool
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		written, err = tx.ApplyMoves(ctx, moves)
		return err
	})
	if err != nil {
		s.cfg.Logger.Warn("batched intents not written; writing them one by one", "n", len(intents), "err", err)
		return make([]bool, len(intents))
	}
	crashpoint.Hit(crashpoint.IntentCommitted)
	for i, in := range intents {
		if written[i] {
			s.observeMove(in.p, in.next, in.cause)
		}
	}
	return written
}

// finishIntent makes the call of a written intent and has ap apply its
// answer. A member ap could not apply in its group (its purchase or lease
// moved on, or the group failed) is applied the single way, and a job the
// answer did not settle steps on the single way too.
func (s *Service) finishIntent(ctx context.Context, in intent, ap *applier) {
	before := in.next
	before.Version++
	ap.expect()
	a, ans, err := s.callDue(ctx, in.l, before, in.op, in.src, in.due, in.reserved)
	if err != nil {
		ap.cancelExpected()
		_ = s.runFailed(in.l, err)
		return
	}
	// An answer applied in its group completed or scheduled the job; one
	// that was not goes the single way. Either way it is applied even if
	// the worker is stopping: it is the only record of what the provider
	// did (the group's transaction runs on a context of its own).
	done := ap.apply(pendingAnswer{l: in.l, before: before, cause: in.answer, a: a, ans: ans})
	if !done {
		if done, err = s.apply(context.WithoutCancel(ctx), in.l, before, in.answer, a, ans); err != nil {
			_ = s.runFailed(in.l, err)
			return
		}
	}
	if !done {
		_ = s.Process(ctx, in.l) // the purchase moved under the call: step again
	}
}

// pendingAnswer is a provider answer waiting to be applied in a group.
type pendingAnswer struct {
	l      Lease
	before Purchase // the purchase as the worker left it for the call
	cause  Cause
	a      Attempt
	ans    Answer
	result chan bool // true when applied in the group
}

// applier applies provider answers in groups: one transaction for every
// answer that arrived while the previous group was being written, or
// within Config.ApplyWindow of the first while calls are still out, up to
// a group's maximum. Safe for concurrent use.
type applier struct {
	s           *Service
	in          chan pendingAnswer
	max         int
	outstanding atomic.Int64 // calls out whose answers are still to come
	wg          sync.WaitGroup
}

func (s *Service) startApplier() *applier {
	ap := &applier{s: s, in: make(chan pendingAnswer), max: max(s.cfg.BatchSize, s.cfg.Concurrency)}
	ap.wg.Add(1)
	go func() {
		defer ap.wg.Done()
		ap.run()
	}()
	return ap
}

// stop ends the applier once every answer sent to it is applied. No apply
// may be called after it.
func (ap *applier) stop() {
	close(ap.in)
	ap.wg.Wait()
}

// expect notes a call whose answer will come, so that a group waits for
// it (within the window) rather than commit without it.
func (ap *applier) expect() { ap.outstanding.Add(1) }

// cancelExpected notes that an expected answer will not come.
func (ap *applier) cancelExpected() { ap.outstanding.Add(-1) }

// apply hands p to the group being formed and waits until that group is
// written. It reports whether p was applied.
func (ap *applier) apply(p pendingAnswer) bool {
	p.result = make(chan bool, 1)
	ap.outstanding.Add(-1)
	ap.in <- p
	return <-p.result
}

func (ap *applier) run() {
	window := ap.s.cfg.ApplyWindow
	timer := time.NewTimer(window)
	timer.Stop()
	for first := range ap.in {
		group := []pendingAnswer{first}
		timer.Reset(window)
	collect:
		for len(group) < ap.max {
			select {
			case p, ok := <-ap.in:
				if !ok {
					break collect
				}
				group = append(group, p)
				continue
			default:
			}
			if ap.outstanding.Load() <= 0 {
				break collect // nothing more is coming
			}
			select {
			case p, ok := <-ap.in:
				if !ok {
					break collect
				}
				group = append(group, p)
			case <-timer.C:
				break collect
			}
		}
		timer.Stop()
		applied := ap.s.applyGroup(context.Background(), group)
		for i, p := range group {
			p.result <- applied[i]
		}
	}
}

// applyGroup judges each answer of group against its purchase as it is
// now and writes every verdict in one transaction of fenced moves. It
// reports which it applied; the others wrote nothing.
func (s *Service) applyGroup(ctx context.Context, group []pendingAnswer) []bool {
	type member struct {
		i  int
		p  Purchase
		mv Move
		v  Verdict
	}
	var members []member
	var applied []bool
	err := s.store.InTx(ctx, func(tx Tx) error {
		members, applied = members[:0], make([]bool, len(group))
		ids := make([]string, len(group))
		payments := make([]string, 0, len(group))
		for i, g := range group {
			ids[i] = g.before.ID
			payments = append(payments, g.ans.PaymentID)
		}
		found, err := tx.FindPurchases(ctx, ids, payments)
		if err != nil {
			return err
		}
		byID := make(map[string]Purchase, len(found))
		owner := make(map[string]string, len(found))
		for _, p := range found {
			byID[p.ID] = p
			if p.ProviderPaymentID != "" {
				owner[p.ProviderPaymentID] = p.ID
			}
		}
		moves := make([]Move, 0, len(group))
		for i, g := range group {
			p, ok := byID[g.before.ID]
			if !ok || p.State != g.before.State || p.Version != g.before.Version {
				continue // it moved under the call: the single way judges it
			}
			ans := g.ans
			ans.Owner = owner[ans.PaymentID]
			mv, v := s.answerMove(g.l, g.before, p, g.cause, g.a, ans, s.leaseNow(g.l))
			if mv.To.State != p.State && statemachine.Transition(p.State, mv.To.State) != nil {
				continue // a bug: the single way reports it
			}
			members = append(members, member{i: i, p: p, mv: mv, v: v})
			moves = append(moves, mv)
		}
		ok, err := tx.ApplyMoves(ctx, moves)
		if err != nil {
			return err
		}
		for k, m := range members {
			applied[m.i] = ok[k]
		}
		return nil
	})
	if err != nil {
		s.cfg.Logger.Warn("a group of provider answers was not written; applying them one by one", "n", len(group), "err", err)
		return make([]bool, len(group))
	}
	crashpoint.Hit(crashpoint.ApplyCommitted)
	for _, m := range members {
		if !applied[m.i] {
			continue
		}
		s.observeMove(m.p, m.mv.To, group[m.i].cause)
		if next := m.mv.To; next.EscalationReason != m.p.EscalationReason && next.Escalated() {
			s.cfg.Logger.Warn("purchase escalated to operators", "purchase", m.p.ID, "reason", next.EscalationReason, "verdict", m.v.String())
		}
	}
	return applied
}
