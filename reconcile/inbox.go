package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/payrecon/payrecon/internal/crashpoint"
)

// Webhooks are received, then applied. The endpoint verifies an event and
// stores it in the inbox as pending (ReceiveEvent), in a group-committed
// transaction, and answers: a 2xx means stored, not applied. The applier
// (ApplyPending, run in a loop by package reconcile/applier) claims
// pending events in batches and applies them set-based, as the event
// sweep's events are (webhook_batch.go), each effect in one transaction
// with the event's move to its outcome.

// InboxFailure is a failed try at applying a pending event
// (Tx.RecordInboxFailure).
type InboxFailure struct {
	Provider, EventID string
	Attempts          int
	Error             string
	At                time.Time    // when it was tried
	RetryAt           time.Time    // when it is due again (EventPending)
	Outcome           EventOutcome // EventPending, or EventFailed: tries are over
}

// OutcomeText is e's outcome as an operator reads it: with its tries and
// last error when the applier failed at it.
func (e InboxEvent) OutcomeText() string {
	switch {
	case e.Outcome == EventFailed:
		return fmt.Sprintf("failed after %d tries: %s", e.Attempts, e.LastError)
	case e.Outcome == EventPending && e.LastError != "":
		return fmt.Sprintf("pending, tried %d times: %s", e.Attempts, e.LastError)
	}
	return string(e.Outcome)
}

// InboxBacklog is what waits in the inbox (Tx.InboxBacklog).
type InboxBacklog struct {
	Pending int // events received and not yet applied
	// Retrying counts the pending events whose application failed and
	// that wait out a backoff (they are among Pending).
	Retrying int
	Failed   int       // events the applier gave up on, for an operator
	Oldest   time.Time // when the oldest pending event was received; zero if none
}

// ReceiveEvent stores a verified provider event in the inbox as pending,
// and returns once that has committed: EventReceived, or EventDuplicate
// for a repeat of a stored event (same id, same payload), which changes
// nothing. The same id with another payload returns EventConflict and an
// error wrapping ErrEventConflict. Concurrent events share one
// transaction and one statement (group commit). Nothing is applied: the
// applier does that after the answer, and a caller that has an answer
// may acknowledge the event.
func (s *Service) ReceiveEvent(ctx context.Context, ev Event) (EventOutcome, error) {
	run := &eventRun{ev: ev}
	err := s.inGroupSet(ctx, receiveSet{}, run, func(ctx context.Context, tx Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		inserted, err := tx.InsertInboxEvent(ctx, pendingRow(ev, now))
		if err != nil {
			return err
		}
		return run.received(ctx, tx, inserted)
	})
	if err != nil {
		return "", fmt.Errorf("reconcile: receive event %s/%s: %w", ev.Provider, ev.ID, err)
	}
	if run.outcome == EventConflict {
		return run.outcome, fmt.Errorf("reconcile: event %s/%s: %w", ev.Provider, ev.ID, ErrEventConflict)
	}
	if run.outcome == EventReceived {
		s.WakeApplier()
	}
	return run.outcome, nil
}

// received sets r's outcome once its insert ran: received when it stored
// the event, a duplicate or a conflict otherwise.
func (r *eventRun) received(ctx context.Context, tx Tx, inserted bool) (err error) {
	if inserted {
		r.outcome = EventReceived
		return nil
	}
	r.outcome, err = repeatOutcome(ctx, tx, r.ev)
	return err
}

// pendingRow is ev's inbox row as the endpoint stores it.
func pendingRow(ev Event, now time.Time) InboxEvent {
	row := inboxRow(ev, now)
	row.Outcome = EventPending
	return row
}

// receiveSet is the setRunner of received webhooks: one insert for the
// whole group.
type receiveSet struct{}

// runSet implements setRunner.
func (receiveSet) runSet(ctx context.Context, tx Tx, members []*member) ([]answer, error) {
	rows := make([]InboxEvent, len(members))
	for i, m := range members {
		rows[i] = pendingRow(m.arg.(*eventRun).ev, time.Time{})
	}
	inserted, _, err := tx.ReceiveInboxEvents(ctx, rows)
	if err != nil {
		// Refused as a whole: each member runs alone, where its own
		// failure is its own.
		answers := make([]answer, len(members))
		for i, m := range members {
			if answers[i], err = runMember(ctx, tx, m); err != nil {
				return nil, err
			}
		}
		return answers, nil
	}
	answers := make([]answer, len(members))
	for i, m := range members {
		run := m.arg.(*eventRun)
		run.outcome = ""
		if err := attribute(func() error { return run.received(ctx, tx, inserted[i]) }); err != nil {
			answers[i] = answer{err: err.(*memberFailure).err}
		}
	}
	return answers, nil
}

// WakeApplier tells this process's applier that events are pending.
// It never blocks.
func (s *Service) WakeApplier() {
	select {
	case s.inboxWake <- struct{}{}:
	default:
	}
}

// InboxListener returns the store's InboxListener, or nil when it has
// none (SQLite: one process, woken in-process).
func (s *Service) InboxListener() InboxListener { return s.listener }

// ApplierWake is signalled when this process received events (see
// WakeApplier).
func (s *Service) ApplierWake() <-chan struct{} { return s.inboxWake }

// ApplyPending claims up to Config.InboxBatch pending events that are
// due and applies them in one transaction, and returns how many it
// claimed. The events are applied in the provider's creation order (then
// as received), so that two events about one purchase in a batch apply
// as they happened, whatever order they arrived in. Each effect commits
// with its event's outcome. An event whose application fails is taken
// out of the batch, which goes on without it; it is due again after a
// backoff, and after Config.InboxMaxAttempts tries it is EventFailed,
// for an operator. Two appliers never apply one event: a claim skips
// the events another transaction holds.
func (s *Service) ApplyPending(ctx context.Context) (int, error) {
	var claimed, raced []InboxEvent
	var runs []*eventRun
	var answers []answer
	err := s.store.InTx(ctx, func(tx Tx) error {
		claimed, raced, runs, answers = nil, nil, nil, nil
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		if claimed, err = tx.ClaimPendingEvents(ctx, now, s.cfg.InboxBatch); err != nil || len(claimed) == 0 {
			return err
		}
		runs = pendingRuns(claimed, now)
		members := make([]*member, len(runs))
		for i, r := range runs {
			members[i] = &member{arg: r, fn: r.applyAlone(s)}
		}
		if answers, err = s.applyEventBatch(ctx, tx, members); err != nil {
			return err
		}
		for i, a := range answers {
			switch {
			case a.err == nil:
			case lostRace(a.err):
				// Not a failure: a concurrent writer (the worker, another
				// applier) moved its purchase first. Again, alone, once
				// this batch committed.
				raced = append(raced, runs[i].row)
			default:
				if err := s.recordFailure(ctx, tx, runs[i], a.err, now); err != nil {
					return err
				}
			}
		}
		crashpoint.Hit(crashpoint.InboxApplyWritten)
		return nil
	})
	switch {
	case err != nil && len(claimed) > 0 && ctx.Err() == nil:
		// The batch's transaction failed as a whole: each event alone, so
		// that one that breaks its transaction cannot hold the others, and
		// its failure is recorded, with a backoff.
		s.cfg.Logger.Warn("webhook batch failed; its events are applied one by one", "events", len(claimed), "err", err)
		return len(claimed), s.applyEachAlone(ctx, claimed)
	case err != nil:
		return 0, fmt.Errorf("reconcile: apply pending events: %w", err)
	}
	for i, r := range runs {
		if answers[i].err == nil || !lostRace(answers[i].err) {
			s.applied(r)
		}
	}
	return len(claimed), s.applyEachAlone(ctx, raced)
}

// lostRace reports whether err is a conditional write lost to a
// concurrent writer, which a re-read and a new judgement settle.
func lostRace(err error) bool {
	return errors.Is(err, ErrConflict) || errors.Is(err, ErrDuplicate)
}

// pendingRuns returns claimed as runs, claimed at now, in the provider's
// creation order, then as received.
func pendingRuns(claimed []InboxEvent, now time.Time) []*eventRun {
	rows := slices.Clone(claimed)
	slices.SortStableFunc(rows, func(a, b InboxEvent) int {
		return cmp.Or(a.Created.Compare(b.Created), a.ReceivedAt.Compare(b.ReceivedAt),
			strings.Compare(a.Provider, b.Provider), strings.Compare(a.EventID, b.EventID))
	})
	runs := make([]*eventRun, len(rows))
	for i, ie := range rows {
		runs[i] = &eventRun{ev: ie.event(), stored: true, row: ie, claimedAt: now}
	}
	return runs
}

// event is the Event an inbox row stores.
func (ie InboxEvent) event() Event {
	return Event{
		Provider: ie.Provider, ID: ie.EventID, Account: ie.Account, Type: ie.Type, PaymentID: ie.ObjectID,
		PurchaseID: ie.PurchaseID, PayloadHash: ie.PayloadHash, Payload: ie.Payload,
		Outcome: ie.Result, Amount: ie.Amount, Currency: ie.Currency, Created: ie.Created,
		Refund: ie.Refund, RefundID: ie.RefundID, Refunded: ie.Refunded, Dispute: ie.Dispute,
	}
}

// applyAlone is r's path by itself, in a transaction that holds its row.
func (r *eventRun) applyAlone(s *Service) func(context.Context, Tx) error {
	return func(ctx context.Context, tx Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		r.outcome, r.moves, err = s.applyEventTx(ctx, tx, r.ev, now)
		return err
	}
}

// applyEachAlone applies each of claimed in a transaction of its own
// (again, when it lost a write race), and records the failure of one
// whose transaction fails in another.
func (s *Service) applyEachAlone(ctx context.Context, claimed []InboxEvent) error {
	var errs []error
	for _, ie := range claimed {
		r := &eventRun{ev: ie.event(), stored: true, row: ie}
		err := s.retryRaces(ctx, func(tx Tx) error {
			r.outcome, r.moves = "", nil
			cur, err := tx.ClaimInboxEvent(ctx, ie.Provider, ie.EventID)
			if errors.Is(err, ErrNotFound) {
				return nil // applied meanwhile, or held by another applier
			}
			if err != nil {
				return err
			}
			r.row = cur
			// A panic is this event's failure, not the process's.
			return attribute(func() error { return r.applyAlone(s)(ctx, tx) })
		})
		if err == nil {
			if r.outcome != "" {
				s.applied(r)
			}
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cause := err
		err = s.store.InTx(ctx, func(tx Tx) error {
			cur, err := tx.ClaimInboxEvent(ctx, ie.Provider, ie.EventID)
			if err != nil {
				return err
			}
			r.row = cur
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			return s.recordFailure(ctx, tx, r, cause, now)
		})
		switch {
		case err == nil:
			s.applied(r)
		case !errors.Is(err, ErrNotFound):
			errs = append(errs, fmt.Errorf("reconcile: record the failure of event %s (%v): %w", ie.EventID, cause, err))
		}
	}
	return errors.Join(errs...)
}

// recordFailure records that r failed with err: due again after a
// backoff, or failed for good after Config.InboxMaxAttempts tries.
func (s *Service) recordFailure(ctx context.Context, tx Tx, r *eventRun, cause error, now time.Time) error {
	f := InboxFailure{
		Provider: r.ev.Provider, EventID: r.ev.ID, Attempts: r.row.Attempts + 1,
		Error: storableError(cause), At: now, Outcome: EventPending,
	}
	if f.Attempts >= s.cfg.InboxMaxAttempts {
		f.Outcome = EventFailed
		s.cfg.Logger.Error("a webhook event could not be applied and waits for an operator",
			"event", r.ev.ID, "type", r.ev.Type, "attempts", f.Attempts, "err", cause)
	} else {
		f.RetryAt = now.Add(inboxBackoff(s.cfg.InboxBackoff, f.Attempts))
		s.cfg.Logger.Warn("a webhook event could not be applied; it is tried again",
			"event", r.ev.ID, "type", r.ev.Type, "attempts", f.Attempts, "retry_at", f.RetryAt, "err", cause)
	}
	r.outcome = f.Outcome
	return tx.RecordInboxFailure(ctx, f)
}

// maxStoredError bounds an error's text as the inbox stores it.
const maxStoredError = 2000

// storableError is err's text as any store takes it: valid UTF-8, no NUL
// byte (PostgreSQL's text refuses one), at most maxStoredError bytes.
func storableError(err error) string {
	msg := strings.ReplaceAll(strings.ToValidUTF8(err.Error(), "?"), "\x00", "?")
	if len(msg) > maxStoredError {
		msg = strings.ToValidUTF8(msg[:maxStoredError], "") + "…"
	}
	return msg
}

// inboxBackoff is the wait after the attempts-th failure: base, doubling,
// at most 64 × base.
func inboxBackoff(base time.Duration, attempts int) time.Duration {
	return base << min(max(attempts-1, 0), 6)
}

// applied reports, after commit, what became of r.
func (s *Service) applied(r *eventRun) {
	s.observeMoves(r.moves)
	s.logOutcome(r.ev, r.outcome)
	s.cfg.Observer.EventApplied(r.ev.Type, r.outcome, s.cfg.Now().Sub(r.row.ReceivedAt))
}

// RetryFailedEvent puts an event the applier gave up on back in the
// inbox as pending, due at once, for an operator who fixed its cause.
// Returns an error wrapping ErrNotFound when no such event failed.
func (s *Service) RetryFailedEvent(ctx context.Context, provider, eventID, actor string) error {
	err := s.store.InTx(ctx, func(tx Tx) error {
		cur, err := tx.GetInboxEvent(ctx, provider, eventID)
		if err != nil {
			return err
		}
		if cur.Outcome != EventFailed {
			return fmt.Errorf("event %s is %s, not failed: %w", eventID, cur.Outcome, ErrNotFound)
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		return tx.RecordInboxFailure(ctx, InboxFailure{
			Provider: provider, EventID: eventID, Attempts: 0, At: now, Outcome: EventPending,
			Error: fmt.Sprintf("retried by %s after: %s", actor, cur.LastError),
		})
	})
	if err != nil {
		return fmt.Errorf("reconcile: retry event %s/%s: %w", provider, eventID, err)
	}
	s.WakeApplier()
	return nil
}

// FailedEvents returns up to limit events the applier gave up on, most
// recent first, and the inbox's backlog.
func (s *Service) FailedEvents(ctx context.Context, limit int) ([]InboxEvent, InboxBacklog, error) {
	var failed []InboxEvent
	var backlog InboxBacklog
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		if backlog, err = tx.InboxBacklog(ctx); err != nil {
			return err
		}
		failed, err = tx.ListFailedEvents(ctx, limit)
		return err
	})
	if err != nil {
		return nil, InboxBacklog{}, fmt.Errorf("reconcile: failed events: %w", err)
	}
	return failed, backlog, nil
}
