package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/statemachine"
)

// Webhooks in a group are applied set-based (the group committer's batch
// function, see groupcommit.go), so that a group costs a handful of
// statements, not a dozen per event:
//
//  1. one insert of every member's inbox row (Tx.ReceiveInboxEvents),
//     which also reads the store's now, once, for the whole set: the
//     unique key tells the first delivery of an event from its repeats,
//     within the group as between transactions;
//  2. one read of the purchases the new events name, by purchase id and
//     payment id (Tx.FindPurchases), which also gives the owners of the
//     payment ids the judge needs;
//  3. the judge, per event, as applyToPurchase runs it; the common case,
//     an answer that settles its purchase, becomes moves written set-based
//     by Tx.ApplyMoves, without a lease, fenced by the purchase's state and
//     version: one batch, and a second for the purchases that were
//     uncertain (uncertain → reconciling → final: one UPDATE cannot move a
//     row twice, and the database refuses uncertain → final);
//  4. the outcome on each settled event's inbox row.
//
// Everything else (repeats, refunds, events that match no purchase or
// that the judge does not settle, a purchase two events of the group
// name, a move that did not apply because its purchase moved meanwhile)
// goes through the per-event path, applyEventTx,
// in the same transaction: it re-reads, so it is right whatever the
// batch read.
//
// The whole runs under one savepoint. An event whose own part fails (its
// inbox update, its per-event path, a panic) cannot be rolled back alone,
// since its inbox row and its move share statements with its neighbours':
// the savepoint is rolled back, the event is answered its failure (the
// group committer then runs it alone, or returns its error), and the
// others run again without it. A failure of the set's own statements
// (a refused insert or batch of moves) rolls the savepoint back too, and
// the events then
// run one by one, each under a savepoint of its own, as group commit runs
// any request.

// eventRun is one webhook of a group: its event, and what became of it,
// set by whichever path ran it last (reset by each), and read by its
// request once its transaction committed.
type eventRun struct {
	ev      Event
	outcome EventOutcome
	moves   []move
	// stored: the event is a pending inbox row the applier claimed (row)
	// at claimedAt, the store's clock, not one to insert.
	stored    bool
	row       InboxEvent
	claimedAt time.Time
}

// eventSet is the setRunner of webhooks: every member's arg is an
// *eventRun.
type eventSet struct{ s *Service }

// runSet implements setRunner.
func (es eventSet) runSet(ctx context.Context, tx Tx, members []*member) ([]answer, error) {
	return es.s.applyEventBatch(ctx, tx, members)
}

// applyEventBatch runs the webhooks of a group set-based (see eventSet).
func (s *Service) applyEventBatch(ctx context.Context, tx Tx, members []*member) ([]answer, error) {
	answers := make([]answer, len(members))
	live := make([]int, len(members))
	for i := range live {
		live[i] = i
	}
	for len(live) > 0 {
		runs := make([]*eventRun, len(live))
		for j, i := range live {
			runs[j] = members[i].arg.(*eventRun)
		}
		var culprit int
		var failed *memberFailure
		err := tx.Savepoint(ctx, func(tx Tx) (err error) {
			defer func() {
				// A panic outside any event's own part fails the set: the
				// events then run one by one, each panic its own.
				if p := recover(); p != nil {
					culprit, failed = -1, &memberFailure{err: fmt.Errorf("reconcile: webhook batch panicked: %v", p)}
					err = failed
				}
			}()
			c, err := s.applyEventSet(ctx, tx, runs)
			if err == nil {
				return nil
			}
			culprit, failed = c, asMemberFailure(err)
			return failed
		})
		switch {
		case err == nil:
			return answers, nil
		case failed == nil || err != error(failed):
			// The savepoint itself failed: the transaction is unusable.
			return nil, err
		case culprit >= 0:
			i := live[culprit]
			s.cfg.Logger.Debug("webhook of a batch failed; the others run again without it", "event", runs[culprit].ev.ID, "err", failed.err)
			answers[i] = answer{err: failed.err, panicked: failed.panicked}
			live = append(live[:culprit:culprit], live[culprit+1:]...)
			continue
		}
		// The set's own statements failed (a refused insert or batch of
		// moves): each event runs by itself, under a savepoint of its own.
		s.cfg.Logger.Debug("webhook batch refused; its events run one by one", "events", len(live), "err", failed.err)
		for _, i := range live {
			a, err := runMember(ctx, tx, members[i])
			if err != nil {
				return nil, err
			}
			answers[i] = a
		}
		return answers, nil
	}
	return answers, nil
}

// asMemberFailure returns err as a *memberFailure, wrapping it if needed.
func asMemberFailure(err error) *memberFailure {
	if f, ok := err.(*memberFailure); ok {
		return f
	}
	return &memberFailure{err: err}
}

// attribute runs one event's own part of a set, and returns its error or
// panic as a *memberFailure.
func attribute(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &memberFailure{err: fmt.Errorf("reconcile: group member panicked: %v", p), panicked: p}
		}
	}()
	if err := fn(); err != nil {
		return &memberFailure{err: err}
	}
	return nil
}

// settlePlan is how the batch settles one event's purchase: one move, or
// two for an uncertain purchase, with the transitions for the observer.
type settlePlan struct {
	run      int // index in the set
	purchase string
	moves    []Move
	observed []move
}

// applyEventSet applies runs set-based in tx, and sets each one's outcome
// and moves. It returns nil, or the index of the run whose own part
// failed with its failure (a *memberFailure), or -1 with the error of a
// statement of the whole set.
func (s *Service) applyEventSet(ctx context.Context, tx Tx, runs []*eventRun) (int, error) {
	for _, r := range runs {
		r.outcome, r.moves = "", nil
	}
	inserted, now, err := storeRuns(ctx, tx, runs)
	if err != nil {
		return -1, err
	}

	var ids, payments []string
	for i, r := range runs {
		if !inserted[i] {
			if err := attribute(func() (err error) {
				r.outcome, err = repeatOutcome(ctx, tx, r.ev)
				return err
			}); err != nil {
				return i, err
			}
			continue
		}
		if r.ev.Outcome != "" && !r.ev.Refund && r.ev.Dispute == nil {
			ids, payments = append(ids, r.ev.PurchaseID), append(payments, r.ev.PaymentID)
		}
	}
	found, err := tx.FindPurchases(ctx, ids, payments)
	if err != nil {
		return -1, err
	}
	byID := make(map[string]Purchase, len(found))
	byPayment := make(map[string]Purchase, len(found))
	for _, p := range found {
		byID[p.ID] = p
		if p.ProviderPaymentID != "" {
			byPayment[p.ProviderPaymentID] = p
		}
	}

	// Plan the settling moves, in queue order. An event that names a
	// purchase or payment an earlier event of the set named goes the
	// per-event way, after the moves, so that it sees what they wrote, as
	// it would after them in a transaction of its own.
	slow := make([]bool, len(runs))
	var plans []*settlePlan
	touched := map[string]bool{}
	for i, r := range runs {
		if !inserted[i] {
			continue
		}
		ev := r.ev
		keys := []string{"purchase:" + ev.PurchaseID, "payment:" + ev.PaymentID, "payment:" + ev.Refunded}
		p, matched := matchFound(ev, byID, byPayment)
		if matched {
			keys = append(keys, "purchase:"+p.ID, "payment:"+p.ProviderPaymentID)
		}
		clash := false
		for _, k := range keys {
			clash = clash || touched[k]
		}
		for _, k := range keys {
			if k != "purchase:" && k != "payment:" { // an empty id names nothing
				touched[k] = true
			}
		}
		if clash || !matched || ev.Outcome == "" || ev.Refund || ev.Dispute != nil {
			slow[i] = true
			continue
		}
		owner := ""
		if o, ok := byPayment[ev.PaymentID]; ok && ev.PaymentID != "" {
			owner = o.ID
		}
		plan := planSettle(ev, p, owner, now)
		if plan == nil {
			slow[i] = true
			continue
		}
		plan.run = i
		plans = append(plans, plan)
	}

	// The first moves of every plan, then the second moves of those
	// whose first applied. A move that did not apply (its purchase moved
	// meanwhile) leaves its event to the per-event path, which re-reads
	// and judges again.
	settled := make([]bool, len(runs))
	for step := 0; ; step++ {
		var batch []Move
		var of []*settlePlan
		for _, pl := range plans {
			if step < len(pl.moves) && !slow[pl.run] {
				batch = append(batch, pl.moves[step])
				of = append(of, pl)
			}
		}
		if len(batch) == 0 {
			break
		}
		applied, err := tx.ApplyMoves(ctx, batch)
		if err != nil {
			// A refusal of the store wrote nothing, but an error after
			// the moves (their outbox events) may leave some written: the
			// savepoint takes the whole set back, and the events run one
			// by one.
			return -1, err
		}
		for j, pl := range of {
			r := runs[pl.run]
			if !applied[j] {
				slow[pl.run] = true
				continue
			}
			r.moves = append(r.moves, pl.observed[step])
			settled[pl.run] = step == len(pl.moves)-1
		}
	}

	// Each event's own part, in queue order: the per-event path for the
	// events the moves did not settle; the outcomes of the settled ones,
	// recorded together after them.
	var updates []InboxUpdate
	var updated []int // the run of each update
	for i, r := range runs {
		if !inserted[i] {
			continue
		}
		if settled[i] && !slow[i] {
			r.outcome = EventApplied
			updates = append(updates, InboxUpdate{Provider: r.ev.Provider, EventID: r.ev.ID, PurchaseID: settledPurchase(plans, i), Outcome: EventApplied, ProcessedAt: now})
			updated = append(updated, i)
			continue
		}
		err := attribute(func() error {
			outcome, moves, err := s.applyEventTx(ctx, tx, r.ev, now)
			r.outcome, r.moves = outcome, append(r.moves, moves...)
			return err
		})
		if err != nil {
			return i, err
		}
	}
	if err := attribute(func() error { return tx.UpdateInboxEvents(ctx, updates) }); err != nil {
		// A refused batch wrote none of its rows: each alone, so that a
		// failure names its own event and spares the others.
		for k, u := range updates {
			if err := attribute(func() error {
				return tx.UpdateInboxEvent(ctx, u.Provider, u.EventID, u.PurchaseID, u.Outcome, u.ProcessedAt)
			}); err != nil {
				return updated[k], err
			}
		}
	}
	return -1, nil
}

// storeRuns inserts the inbox rows of runs and reports which it stored,
// and the store's clock, which the insert reads: the set's now, for its
// moves and outcomes too, costs no round trip of its own. Runs the
// applier claimed are stored already: all new, at the claim's clock.
func storeRuns(ctx context.Context, tx Tx, runs []*eventRun) ([]bool, time.Time, error) {
	if len(runs) > 0 && runs[0].stored {
		inserted := make([]bool, len(runs))
		for i := range inserted {
			inserted[i] = true
		}
		return inserted, runs[0].claimedAt, nil
	}
	rows := make([]InboxEvent, len(runs))
	for i, r := range runs {
		rows[i] = inboxRow(r.ev, time.Time{})
	}
	return tx.ReceiveInboxEvents(ctx, rows)
}

// settledPurchase is the purchase the plan of run i settled.
func settledPurchase(plans []*settlePlan, i int) string {
	for _, pl := range plans {
		if pl.run == i {
			return pl.purchase
		}
	}
	return ""
}

// matchFound is matchEvent over the purchases a batch read: by the
// event's purchase id, else by its payment id.
func matchFound(ev Event, byID, byPayment map[string]Purchase) (Purchase, bool) {
	if ev.PurchaseID != "" {
		if p, ok := byID[ev.PurchaseID]; ok {
			return p, true
		}
	}
	if ev.PaymentID == "" {
		return Purchase{}, false
	}
	p, ok := byPayment[ev.PaymentID]
	return p, ok
}

// planSettle judges ev against p as applyToPurchase does, and returns
// the moves that apply it when the verdict settles p, or nil for every
// other verdict (the per-event path writes those). The moves hold no
// lease, and are the writes applyToPurchase's steps make: the same
// purchase fields, transitions (cause webhook, actor "webhook") and
// evidence.
func planSettle(ev Event, p Purchase, owner string, now time.Time) *settlePlan {
	ans := Answer{
		Source: SourceWebhook, Outcome: ev.Outcome, PaymentID: ev.PaymentID, PurchaseID: ev.PurchaseID,
		Account: ev.Account, Amount: ev.Amount, Currency: ev.Currency, At: ev.Created, Owner: owner,
	}
	v := Judge(p, ans)
	if v.Kind != VerdictApply || v.Settles == "" {
		return nil
	}
	evidence := fmt.Sprintf("%s event %s (%s) payment=%s", ev.Provider, ev.ID, ev.Type, ev.PaymentID)
	next := p
	next.UpdatedAt = now
	if next.ProviderPaymentID == "" && ev.PaymentID != "" {
		next.ProviderPaymentID = ev.PaymentID
	}
	settledAt := ev.Created
	if settledAt.IsZero() {
		settledAt = now
	}
	steps := []statemachine.State{v.Settles}
	if p.State == statemachine.Uncertain {
		steps = []statemachine.State{statemachine.Reconciling, v.Settles}
	}
	plan := &settlePlan{purchase: p.ID}
	for _, to := range steps {
		if statemachine.Transition(next.State, to) != nil {
			// The per-event path reports it.
			return nil
		}
		cur := webhookStep(next, to, settledAt)
		plan.moves = append(plan.moves, Move{
			From: next, To: cur,
			Transition: &TransitionRecord{
				PurchaseID: p.ID, From: next.State, To: to, Cause: CauseWebhook,
				Evidence: evidence, Actor: "webhook", At: cur.UpdatedAt,
			},
		})
		plan.observed = append(plan.observed, move{from: next.State, to: to, cause: CauseWebhook, p: cur})
		cur.Version++
		next = cur
	}
	return plan
}
