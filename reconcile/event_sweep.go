package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// The event sweep catches up from the provider's event log what its
// webhooks did not bring: a webhook lost, an endpoint down for hours, a
// late change of an old payment (a decline approved hours later, a
// success canceled) whose webhook never came. The audit cannot see those:
// it windows payments by their creation time, and an old payment changed
// today lies before its window.
//
// A run lists the payment, refund and dispute events (provider.EventTypes) created
// since its watermark minus Config.EventSweepOverlap (Config.
// EventSweepFirstWindow back, the first time), every page, one token of
// the rate budget per page, at the audit's priority. It then applies them
// oldest first through the webhooks' own inbox (applyEventAlone): stored
// once by (provider, event id), so that an event a webhook already brought
// is a duplicate and changes nothing, and judged as its webhook would
// have been. The events of one chunk (Config.EventSweepChunk) and the
// watermark they carry commit in one transaction: the watermark is the
// creation time of the chunk's newest event, and, with the last chunk,
// the time the listing began. A run that dies midway resumes from the
// last chunk it committed, and the overlap re-lists what was created
// around the watermark but listed late, so nothing falls between runs.
//
// The watermark is kept as an audit run (Tx.GetAuditRun) named
// "<provider>/events": Done is the watermark, From where the run's listing
// started, Until when it began.

// EventSweepReport says what one event sweep did.
type EventSweepReport struct {
	// Since is the creation time from which the run listed events; Until
	// when its listing began, the watermark it reached if it completed.
	Since, Until time.Time
	// Pages is how many pages of the event log the run read, each one
	// provider call and one token of the rate budget.
	Pages int
	// Read is how many events the listing returned and the run
	// translated; Refused how many more the adapter refused (see
	// provider.EventPage.Refused).
	Read, Refused int
	// Outcomes counts what became of the events the run applied, by
	// outcome: EventDuplicate for those the inbox already held (brought by
	// a webhook, or by an earlier run).
	Outcomes map[EventOutcome]int
	// Watermark is the watermark the run left: everything the provider
	// created before it has been through the inbox.
	Watermark time.Time
}

// New counts the events that were new to the inbox.
func (r EventSweepReport) New() int {
	n := 0
	for o, c := range r.Outcomes {
		if o != EventDuplicate && o != EventConflict {
			n += c
		}
	}
	return n
}

// EventSweepObserver is told about each run of the event sweep, for
// metrics. A Config.Observer that implements it is told.
type EventSweepObserver interface {
	// EventsSwept is called once per run that read the log, with its
	// report (the outcomes of the chunks it committed).
	EventsSwept(rep EventSweepReport)
}

// eventSweepName is the name of the event sweep's watermark among the
// audit runs.
func (s *Service) eventSweepName(account string) string { return s.runName(account, "/events") }

// EventWatermark returns the event sweep's watermark: every event the
// provider created before it has been through the inbox. The zero time
// before the first run committed.
//
// With several watched accounts, each has its own, and this is the
// oldest: the zero time until every account's first run committed.
func (s *Service) EventWatermark(ctx context.Context) (time.Time, error) {
	accounts, err := s.watchedAccounts(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("reconcile: event watermark: %w", err)
	}
	var at time.Time
	err = s.store.InTx(ctx, func(tx Tx) error {
		for i, account := range accounts {
			run, err := tx.GetAuditRun(ctx, s.eventSweepName(account))
			switch {
			case errors.Is(err, ErrNotFound):
				at = time.Time{}
				return nil
			case err != nil:
				return err
			case i == 0 || run.Done.Before(at):
				at = run.Done
			}
		}
		return nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("reconcile: event watermark: %w", err)
	}
	return at, nil
}

// providerEventRetention is how long Stripe keeps its events: a watermark
// older than it may have lost events for good.
const providerEventRetention = 30 * 24 * time.Hour

// SweepEvents runs the event sweep once (see the comment above): it lists
// the provider's payment, refund and dispute events since its watermark minus the
// overlap and applies them through the inbox, chunk by chunk with the
// watermark. A failure of the listing changes nothing; a failure while
// applying keeps the chunks committed before it. Either way the next run
// resumes from the watermark.
//
// Each watched account's log is read on behalf of that account, with its
// own watermark; the report sums them (Since, Until and Watermark are
// the oldest). An account whose sweep fails does not stop the others.
func (s *Service) SweepEvents(ctx context.Context) (EventSweepReport, error) {
	accounts, err := s.watchedAccounts(ctx)
	if err != nil {
		return EventSweepReport{}, fmt.Errorf("reconcile: event sweep: %w", err)
	}
	sum := EventSweepReport{Outcomes: map[EventOutcome]int{}}
	var errs []error
	for i, account := range accounts {
		rep, err := s.sweepAccountEvents(ctx, account)
		if err != nil {
			errs = append(errs, fmt.Errorf("account %s: %w", accountName(account), err))
		}
		if i == 0 || rep.Since.Before(sum.Since) {
			sum.Since = rep.Since
		}
		if i == 0 || rep.Until.Before(sum.Until) {
			sum.Until = rep.Until
		}
		if i == 0 || rep.Watermark.Before(sum.Watermark) {
			sum.Watermark = rep.Watermark
		}
		sum.Pages += rep.Pages
		sum.Read += rep.Read
		sum.Refused += rep.Refused
		for o, n := range rep.Outcomes {
			sum.Outcomes[o] += n
		}
	}
	s.observeEventSweep(sum)
	return sum, errors.Join(errs...)
}

// sweepAccountEvents is SweepEvents for one account.
func (s *Service) sweepAccountEvents(ctx context.Context, account string) (EventSweepReport, error) {
	rep := EventSweepReport{Outcomes: map[EventOutcome]int{}}
	name := s.eventSweepName(account)
	var prev AuditRun
	err := s.store.InTx(ctx, func(tx Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		rep.Until = now.UTC().Truncate(time.Second)
		rep.Since = rep.Until.Add(-s.cfg.EventSweepFirstWindow)
		prev, err = tx.GetAuditRun(ctx, name)
		switch {
		case errors.Is(err, ErrNotFound):
			prev = AuditRun{Name: name}
		case err != nil:
			return err
		default:
			rep.Since = prev.Done.Add(-s.cfg.EventSweepOverlap)
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("reconcile: event sweep: %w", err)
	}
	rep.Watermark = prev.Done
	if rep.Until.Sub(rep.Since) > providerEventRetention {
		s.cfg.Logger.Error("the event sweep's watermark is older than the provider keeps its events: changes in between may be lost; run an audit over that time",
			"watermark", prev.Done, "since", rep.Since)
	}

	events, err := s.listEvents(ctx, account, &rep)
	if err != nil {
		return rep, fmt.Errorf("reconcile: event sweep since %s: %w", rep.Since.Format(time.RFC3339), err)
	}
	run := AuditRun{Name: name, From: rep.Since, Until: rep.Until, Done: prev.Done, StartedAt: rep.Until, Findings: prev.Findings}
	for start := 0; start < len(events) || start == 0; start += s.cfg.EventSweepChunk {
		chunk := events[start:min(start+s.cfg.EventSweepChunk, len(events))]
		done := rep.Until
		if start+len(chunk) < len(events) {
			done = chunk[len(chunk)-1].Created
		}
		if err := s.applyEventChunk(ctx, &run, chunk, done, &rep); err != nil {
			return rep, fmt.Errorf("reconcile: event sweep since %s: apply events: %w", rep.Since.Format(time.RFC3339), err)
		}
		rep.Watermark = run.Done
	}
	s.cfg.Logger.Info("event sweep complete", "account", account, "since", rep.Since, "until", rep.Until, "pages", rep.Pages,
		"events", rep.Read, "new", rep.New(), "refused", rep.Refused)
	return rep, nil
}

// listEvents reads every page of the provider's event log since
// rep.Since, each after a token of the rate budget, and returns the
// events oldest first, each once.
func (s *Service) listEvents(ctx context.Context, account string, rep *EventSweepReport) ([]provider.Event, error) {
	q := provider.EventQuery{Since: rep.Since, Limit: s.cfg.EventSweepPage}
	var listed []provider.Event
	for {
		page, err := s.listEventPage(ctx, account, q)
		if err != nil {
			return nil, err
		}
		rep.Pages++
		for _, ev := range page.Events {
			// Listed on behalf of account: it happened there, whatever
			// the adapter read.
			ev.Account = account
			listed = append(listed, ev)
		}
		rep.Refused += len(page.Refused)
		for _, r := range page.Refused {
			s.cfg.Logger.Warn("event sweep: the provider's event is refused as its webhook would be", "event", r.ID, "type", r.Type, "err", r.Err)
		}
		if !page.HasMore || page.Next == "" {
			break
		}
		q.After = page.Next
	}
	// Newest first, as listed; the oldest first, by creation time, the
	// listing's order within a second.
	slices.Reverse(listed)
	slices.SortStableFunc(listed, func(a, b provider.Event) int { return a.Created.Compare(b.Created) })
	seen := make(map[string]bool, len(listed))
	out := listed[:0]
	for _, ev := range listed {
		if !seen[ev.ID] {
			seen[ev.ID] = true
			out = append(out, ev)
		}
	}
	rep.Read = len(out)
	return out, nil
}

// listEventPage asks the provider for one page of its event log, after
// one token of the rate budget, at the audit's priority.
func (s *Service) listEventPage(ctx context.Context, account string, q provider.EventQuery) (provider.EventPage, error) {
	callCtx, cancel := context.WithTimeout(ctx, s.cfg.AuditListTimeout)
	defer cancel()
	if err := s.awaitBudget(callCtx, account, provider.OpEventList, PriorityAudit, 0, false); err != nil {
		return provider.EventPage{}, fmt.Errorf("list the provider's events: %w", err)
	}
	start := s.cfg.Now()
	page, err := s.providerFor(account).ListEvents(callCtx, q)
	s.observeCall(account, provider.OpEventList, provider.OutcomeOf(provider.Result{Outcome: provider.Succeeded}, err), s.cfg.Now().Sub(start))
	s.noteThrottle(ctx, account, provider.OpEventList, err)
	if err != nil {
		return provider.EventPage{}, fmt.Errorf("list the provider's events: %w", err)
	}
	return page, nil
}

// applyEventChunk applies chunk through the inbox, as webhooks are, and
// advances run's watermark to done, in one transaction.
func (s *Service) applyEventChunk(ctx context.Context, run *AuditRun, chunk []provider.Event, done time.Time, rep *EventSweepReport) error {
	runs := make([]*eventRun, len(chunk))
	for i, pe := range chunk {
		runs[i] = &eventRun{ev: EventFromProvider(s.cfg.ProviderName, pe, "", []byte(pe.Payload))}
	}
	var next AuditRun
	err := s.retryRaces(ctx, func(tx Tx) error {
		next = *run
		for _, r := range runs {
			if err := s.applyEventAlone(ctx, tx, r); err != nil {
				return fmt.Errorf("event %s (%s): %w", r.ev.ID, r.ev.Type, err)
			}
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		if done.After(next.Done) {
			next.Done = done
		}
		next.UpdatedAt = now
		return tx.SaveAuditRun(ctx, next)
	})
	if err != nil {
		return err
	}
	*run = next
	for _, r := range runs {
		s.observeMoves(r.moves)
		s.logOutcome(r.ev, r.outcome)
		rep.Outcomes[r.outcome]++
		switch r.outcome {
		case EventConflict:
			// The webhook of this id carried another rendering of the
			// event (an endpoint pinned to another API version): that one
			// is the stored one, applied or pending.
			s.cfg.Logger.Warn("event sweep: the inbox holds this event id with another payload; nothing applied",
				"event", r.ev.ID, "type", r.ev.Type)
		case EventDuplicate:
		default:
			s.cfg.Logger.Info("event sweep: an event no webhook brought went through the inbox",
				"event", r.ev.ID, "type", r.ev.Type, "purchase", r.ev.PurchaseID, "outcome", r.outcome)
		}
	}
	return nil
}

// observeEventSweep tells an EventSweepObserver about rep.
func (s *Service) observeEventSweep(rep EventSweepReport) {
	if o, ok := s.cfg.Observer.(EventSweepObserver); ok {
		o.EventsSwept(rep)
	}
}

// EventFromProvider is a verified provider event in the protocol's terms,
// as the inbox stores it, for the provider named name: an event about a
// refund names the provider's refund (and the refund id and refunded
// payment its object carries), any other the payment. digest is the
// event's (ev.Digest when ""; else the SHA-256 of body), body its payload
// as received. The webhook endpoint and the event sweep both use it, so
// that an event is one row of the inbox whichever way it came.
func EventFromProvider(name string, ev provider.Event, digest string, body []byte) Event {
	if digest == "" {
		digest = ev.Digest
	}
	if digest == "" {
		sum := sha256.Sum256(body)
		digest = hex.EncodeToString(sum[:])
	}
	out := Event{
		Provider:    name,
		ID:          ev.ID,
		Account:     ev.Account,
		Type:        ev.Type,
		Outcome:     ev.Outcome,
		PaymentID:   ev.PaymentID,
		PurchaseID:  ev.PurchaseID,
		Amount:      ev.Amount,
		Currency:    ev.Currency,
		Created:     ev.Created,
		PayloadHash: digest,
		Payload:     body,
	}
	if rf := ev.Refund; rf != nil {
		out.Refund = true
		out.Outcome = rf.Outcome
		out.PaymentID = rf.ID
		out.RefundID = rf.RefundID
		out.Refunded = rf.PaymentID
		out.Amount, out.Currency = rf.Amount, rf.Currency
		if rf.PurchaseID != "" {
			out.PurchaseID = rf.PurchaseID
		}
	}
	if d := ev.Dispute; d != nil {
		// A dispute settles no payment: its events carry the dispute, and
		// the disputed payment's id.
		dc := *d
		out.Dispute = &dc
		out.Outcome = provider.Pending
		out.PaymentID = d.PaymentID
		out.Amount, out.Currency = d.Amount, d.Currency
		if d.PurchaseID != "" {
			out.PurchaseID = d.PurchaseID
		}
	}
	return out
}
