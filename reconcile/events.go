package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// EventOutcome is what became of a provider event.
type EventOutcome string

// The outcomes of a provider event. They are also the values of the
// outcome label of payrecon_webhook_events_total.
const (
	// EventApplied: the event moved its purchase, or added a fact (its
	// payment id) without a move.
	EventApplied EventOutcome = "applied"
	// EventDuplicate: the same event (id and payload) was seen before;
	// nothing changed.
	EventDuplicate EventOutcome = "duplicate"
	// EventStale: the event changed nothing: it repeats or predates what
	// the books know (after a final state, or another declined payment).
	EventStale EventOutcome = "stale"
	// EventConflict: an event with this id but another payload was seen
	// before; nothing was applied.
	EventConflict EventOutcome = "conflict"
	// EventContradiction: the event disagrees with the books (the judge's
	// escalate verdict: a second charge, a foreign payment, another
	// amount, a charge before submission). Nothing is applied and the
	// purchase is escalated.
	EventContradiction EventOutcome = "contradiction"
	// EventConfirming: the event contradicts a final state and is newer
	// than the answer that settled it. Nothing is applied; the worker
	// confirms with a status query, which escalates a real disagreement.
	EventConfirming EventOutcome = "confirming"
	// EventUnmatched: no purchase matches yet; the event is kept and
	// applied if the purchase appears.
	EventUnmatched EventOutcome = "unmatched"
	// EventForeign: the event is about a payment of another integration
	// (made in the provider's dashboard or by another system on the same
	// account): it names no purchase and the books give its payment to
	// none. It was stored unmatched; the unmatched-event sweep had the
	// audit judge the payment as the provider shows it now (an
	// orphan_charge finding when it took or may take money), and it is not
	// retried.
	EventForeign EventOutcome = "foreign"
	// EventFinding: the event is about a dispute that disagrees with the
	// books (a payment no purchase owns, another purchase's, another
	// currency, more than the payment kept): an audit finding records it,
	// nothing is applied, and no purchase is escalated.
	EventFinding EventOutcome = "finding"
	// EventIgnored: a verified event of a type payrecon does not act on.
	EventIgnored EventOutcome = "ignored"
	// EventReceived: the endpoint stored the event, pending; the applier
	// applies it after the answer. Only the endpoint answers it: the
	// inbox row's outcome is EventPending.
	EventReceived EventOutcome = "received"
	// EventPending: an inbox row stored and not yet applied (or tried and
	// due again after a backoff).
	EventPending EventOutcome = "pending"
	// EventFailed: the applier tried the event Config.InboxMaxAttempts
	// times and failed each time; it waits for an operator, with its last
	// error.
	EventFailed EventOutcome = "failed"
	// EventRejected: the event failed verification or validation and was
	// not stored. Used only by the endpoint's metrics.
	EventRejected EventOutcome = "rejected"
)

// UnverifiedEventType stands for the type of a webhook rejected before its
// type could be trusted, in metrics and logs.
const UnverifiedEventType = "unverified"

// Event is a verified provider event in neutral terms.
type Event struct {
	Provider string // "stripe"
	ID       string // the provider's event id
	// Account is the provider account the event happened in
	// (provider.Event.Account): "" for the platform's own. The event is
	// judged against that account's books only.
	Account     string
	Type        string // the provider's event type, e.g. payment_intent.succeeded
	Outcome     provider.Outcome
	PaymentID   string // the object the event is about
	PurchaseID  string // from the object's metadata; empty if absent
	Amount      int64  // the payment's amount, 0 if the event carries none
	Currency    string // the payment's currency, "" if the event carries none
	Created     time.Time
	PayloadHash string // hex SHA-256 of the raw payload
	Payload     []byte
	// Refund is true for an event about a refund: PaymentID is then the
	// provider's refund id, Outcome the refund's, Amount and Currency the
	// refund's, RefundID the refund id its metadata names ("" for none)
	// and Refunded the payment it returns money from.
	Refund   bool
	RefundID string
	Refunded string
	// Dispute is set for an event about a dispute: the dispute as the
	// event shows it. PaymentID is then the disputed payment.
	Dispute *provider.Dispute
}

// InboxEvent is one row of the webhook inbox, unique by (Provider, EventID).
type InboxEvent struct {
	Provider string
	EventID  string
	// Account is the event's (see Event), stored with it so that the
	// applier judges it, however late, against that account's books.
	Account     string
	Type        string
	PayloadHash string
	Payload     []byte
	ObjectID    string           // the provider object the event is about (a payment id)
	Result      provider.Outcome // the neutral outcome the event reports
	PurchaseID  string           // the purchase id from the event's metadata, or the matched purchase
	Amount      int64            // the payment's amount as the event reports it, 0 if none
	Currency    string           // the payment's currency as the event reports it, "" if none
	Created     time.Time        // when the provider created the event; zero if unknown
	Outcome     EventOutcome
	ReceivedAt  time.Time
	ProcessedAt time.Time
	// Refund, RefundID and Refunded are the event's (see Event), so that
	// an unmatched refund event is retried as one.
	Refund   bool
	RefundID string
	Refunded string
	// Dispute is the event's dispute (see Event), stored with it.
	Dispute *provider.Dispute
	// Attempts counts the applier's failed tries; RetryAt is when a
	// pending event that failed is due again (zero: at once); LastError
	// is the error of the last failed try.
	Attempts  int
	RetryAt   time.Time
	LastError string
}

// InboxUpdate is what became of one inbox event (Tx.UpdateInboxEvents):
// its matched purchase (empty if none yet), its outcome and when it was
// processed.
type InboxUpdate struct {
	Provider    string
	EventID     string
	PurchaseID  string
	Outcome     EventOutcome
	ProcessedAt time.Time
}

// maxWriteRaces bounds how often a writer re-reads and tries again after
// losing a conditional write to another writer.
const maxWriteRaces = 5

// ApplyEvent records a verified provider event in the inbox and applies it
// to its purchase, both in one transaction: the caller may acknowledge the
// event only after ApplyEvent returns nil. Concurrent events share that
// transaction (group commit) and are applied together, set-based
// (webhook_batch.go); one that fails is taken out of the group, which
// runs again without it, so that it fails alone. ApplyEvent returns after
// the commit. Two deliveries of one event in one group are told apart by
// the inbox's unique key as in two transactions: the second is a
// duplicate. With Config.GroupCommitOff each event has a transaction of
// its own.
//
// A repeat of a stored event (same id, same payload) is a duplicate and
// changes nothing; the same id with another payload returns
// EventConflict and an error wrapping ErrEventConflict, and applies
// nothing. An event for an unknown purchase is stored as unmatched and
// applied by ApplyUnmatched once the purchase exists. An event about a
// payment that names no purchase (another integration's) is stored as
// unmatched too, never refused: ApplyUnmatched has the audit judge its
// payment.
func (s *Service) ApplyEvent(ctx context.Context, ev Event) (EventOutcome, error) {
	run := &eventRun{ev: ev}
	err := s.retryRacesInGroup(ctx, run, func(ctx context.Context, tx Tx) error {
		return s.applyEventAlone(ctx, tx, run)
	})
	if err != nil {
		return "", fmt.Errorf("reconcile: event %s/%s: %w", ev.Provider, ev.ID, err)
	}
	s.observeMoves(run.moves)
	s.logOutcome(ev, run.outcome)
	if run.outcome == EventConflict {
		return run.outcome, fmt.Errorf("reconcile: event %s/%s: %w", ev.Provider, ev.ID, ErrEventConflict)
	}
	return run.outcome, nil
}

// applyEventAlone records run's event in the inbox and applies it, by
// itself, in tx, and sets run's outcome and moves (reset first: it may
// run more than once).
func (s *Service) applyEventAlone(ctx context.Context, tx Tx, run *eventRun) error {
	run.outcome, run.moves = "", nil
	ev := run.ev
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	inserted, err := tx.InsertInboxEvent(ctx, inboxRow(ev, now))
	if err != nil {
		return err
	}
	if !inserted {
		run.outcome, err = repeatOutcome(ctx, tx, ev)
		return err
	}
	run.outcome, run.moves, err = s.applyEventTx(ctx, tx, ev, now)
	return err
}

// inboxRow is ev's inbox row as first stored, received at now: unmatched
// until applyEventTx records its outcome.
func inboxRow(ev Event, now time.Time) InboxEvent {
	return InboxEvent{
		Provider: ev.Provider, EventID: ev.ID, Account: ev.Account, Type: ev.Type, PayloadHash: ev.PayloadHash,
		Payload: ev.Payload, ObjectID: ev.PaymentID, Result: ev.Outcome, PurchaseID: ev.PurchaseID,
		Amount: ev.Amount, Currency: ev.Currency, Created: ev.Created,
		Outcome: EventUnmatched, ReceivedAt: now,
		Refund: ev.Refund, RefundID: ev.RefundID, Refunded: ev.Refunded, Dispute: ev.Dispute,
	}
}

// repeatOutcome is the outcome of ev when the inbox already holds its id:
// a duplicate when the stored payload is the same, a conflict otherwise.
func repeatOutcome(ctx context.Context, tx Tx, ev Event) (EventOutcome, error) {
	prev, err := tx.GetInboxEvent(ctx, ev.Provider, ev.ID)
	if err != nil {
		return "", err
	}
	if prev.PayloadHash != ev.PayloadHash {
		return EventConflict, nil
	}
	return EventDuplicate, nil
}

// ApplyUnmatched retries up to limit stored events that matched no
// purchase when they arrived, least recently tried first. An event about
// a payment that names no purchase and that the books give to none (a
// payment of another integration) never will match: its payment is
// judged once by the audit instead (judgeForeign), and the event
// recorded as EventForeign. It returns how many events left the
// unmatched list. An event that fails is reported and the others are
// still tried.
func (s *Service) ApplyUnmatched(ctx context.Context, limit int) (int, error) {
	var pending []InboxEvent
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		pending, err = tx.ListUnmatchedEvents(ctx, limit)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reconcile: list unmatched events: %w", err)
	}
	matched := 0
	var errs []error
	var foreign []Event
	for _, ie := range pending {
		ev := ie.event()
		var outcome EventOutcome
		var moves []move
		err := s.retryRaces(ctx, func(tx Tx) error {
			outcome, moves = "", nil
			// Another sweep may have applied it meanwhile: apply only what
			// is still unmatched, so that nothing is applied twice.
			cur, err := tx.GetInboxEvent(ctx, ie.Provider, ie.EventID)
			if err != nil || cur.Outcome != EventUnmatched {
				return err
			}
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			outcome, moves, err = s.applyEventTx(ctx, tx, ev, now)
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("reconcile: apply unmatched event %s: %w", ie.EventID, err))
			continue
		}
		s.observeMoves(moves)
		s.logOutcome(ev, outcome)
		if outcome != EventUnmatched && outcome != "" {
			matched++
		}
		if outcome == EventUnmatched && foreignPayment(ev) {
			foreign = append(foreign, ev)
		}
	}
	judged, err := s.judgeForeign(ctx, foreign)
	matched += judged
	if err != nil {
		errs = append(errs, err)
	}
	return matched, errors.Join(errs...)
}

// foreignPayment reports whether ev is about a payment that names no
// purchase: made by another integration, never by payrecon, which tags
// every payment it creates.
func foreignPayment(ev Event) bool {
	return !ev.Refund && ev.Dispute == nil && ev.Outcome != "" && ev.PurchaseID == "" && ev.PaymentID != ""
}

// judgeForeign has the audit judge the payments of events, still
// unmatched, that name no purchase: for each payment, a status query at
// the audit's priority, then matchPayment over the provider's answer, as
// if the audit had listed it (an orphan_charge finding when it took or
// may take money and no purchase owns it; a finding of its purchase when
// the books do own it meanwhile). Its events are then recorded as
// EventForeign. A payment the provider could not be asked about keeps its
// events unmatched, for the next sweep. It returns how many events it
// recorded.
func (s *Service) judgeForeign(ctx context.Context, events []Event) (int, error) {
	byPayment := map[string][]Event{}
	var order []string
	for _, ev := range events {
		if _, ok := byPayment[ev.PaymentID]; !ok {
			order = append(order, ev.PaymentID)
		}
		byPayment[ev.PaymentID] = append(byPayment[ev.PaymentID], ev)
	}
	judged := 0
	var errs []error
	for _, id := range order {
		evs := byPayment[id]
		res, outcome, err := s.auditRead(ctx, provider.OpStatus, evs[0].Account, id)
		if err != nil {
			return judged, errors.Join(append(errs, fmt.Errorf("reconcile: judge payment %s of another integration: %w", id, err))...)
		}
		switch outcome {
		case provider.Succeeded, provider.Declined, provider.Pending, provider.NotFound:
		default:
			s.cfg.Logger.Warn("a payment of another integration could not be looked up; its events stay unmatched",
				"payment", id, "outcome", outcome)
			continue
		}
		pay := provider.Payment{
			ID: id, PurchaseID: res.PurchaseID, Amount: res.Amount, Currency: res.Currency, Status: res.Status, Outcome: outcome,
		}
		var stored []Finding
		var recorded int
		err = s.retryRaces(ctx, func(tx Tx) error {
			stored, recorded = nil, 0
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			var found []Finding
			if outcome != provider.NotFound {
				if found, err = s.matchPayment(ctx, tx, evs[0].Account, pay, now); err != nil {
					return err
				}
			}
			for _, f := range found {
				f.Provider, f.FoundAt = s.cfg.ProviderName, now
				f.Evidence += fmt.Sprintf("; judged by the unmatched-event sweep from event %s (%s), which names no purchase", evs[0].ID, evs[0].Type)
				inserted, err := tx.InsertFinding(ctx, f)
				if err != nil {
					return err
				}
				if !inserted {
					continue
				}
				stored = append(stored, f)
				if err := s.escalateForFinding(ctx, tx, f, now); err != nil {
					return err
				}
			}
			for _, ev := range evs {
				cur, err := tx.GetInboxEvent(ctx, ev.Provider, ev.ID)
				if err != nil {
					return err
				}
				if cur.Outcome != EventUnmatched {
					continue // another sweep recorded it meanwhile
				}
				if err := tx.UpdateInboxEvent(ctx, ev.Provider, ev.ID, "", EventForeign, now); err != nil {
					return err
				}
				recorded++
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("reconcile: judge payment %s of another integration: %w", id, err))
			continue
		}
		judged += recorded
		for _, f := range stored {
			s.cfg.Logger.Warn("audit finding", "kind", f.Kind, "payment", f.PaymentID, "purchase", f.PurchaseID,
				"amount", f.Amount, "currency", f.Currency, "evidence", f.Evidence)
		}
	}
	return judged, errors.Join(errs...)
}

// logOutcome logs, after commit, what needs a human's attention.
func (s *Service) logOutcome(ev Event, outcome EventOutcome) {
	if outcome == EventContradiction {
		s.cfg.Logger.Error("a provider event disagrees with the books; the purchase is escalated",
			"event", ev.ID, "type", ev.Type, "purchase", ev.PurchaseID, "payment", ev.PaymentID)
	}
}

// retryRaces runs fn in a transaction, again from the start when a
// conditional write lost to a concurrent writer, or a payment id was taken
// by another purchase meanwhile: the loser re-reads and judges again.
func (s *Service) retryRaces(ctx context.Context, fn func(Tx) error) error {
	var err error
	for range maxWriteRaces {
		err = s.store.InTx(ctx, fn)
		if !errors.Is(err, ErrConflict) && !errors.Is(err, ErrDuplicate) {
			return err
		}
	}
	return err
}

// retryRacesInGroup is retryRaces for a webhook run by inGroupSet with
// its neighbours (eventSet): again, in a new group, when it lost a
// conditional write.
func (s *Service) retryRacesInGroup(ctx context.Context, run *eventRun, fn func(context.Context, Tx) error) error {
	var err error
	for range maxWriteRaces {
		err = s.inGroupSet(ctx, eventSet{s}, run, fn)
		if !errors.Is(err, ErrConflict) && !errors.Is(err, ErrDuplicate) {
			return err
		}
	}
	return err
}

// move is a committed transition, for the observer.
type move struct {
	from, to statemachine.State
	cause    Cause
	p        Purchase
}

func (s *Service) observeMoves(moves []move) {
	for _, m := range moves {
		s.observeTransition(m.p.Account, m.from, m.to, m.cause)
		if m.to.Terminal() && !m.p.UncertainSince.IsZero() {
			s.cfg.Observer.Resolved(m.p.UpdatedAt.Sub(m.p.UncertainSince))
		}
	}
}

// applyEventTx applies ev, already in the inbox, to its purchase and
// records the outcome on the inbox row.
func (s *Service) applyEventTx(ctx context.Context, tx Tx, ev Event, now time.Time) (EventOutcome, []move, error) {
	if ev.Outcome == "" {
		// A type payrecon does not act on: kept for the record, never
		// retried as unmatched.
		return EventIgnored, nil, tx.UpdateInboxEvent(ctx, ev.Provider, ev.ID, ev.PurchaseID, EventIgnored, now)
	}
	if ev.Refund {
		return s.applyRefundEventTx(ctx, tx, ev, now)
	}
	if ev.Dispute != nil {
		return s.applyDisputeEventTx(ctx, tx, ev, now)
	}
	p, err := s.matchEvent(ctx, tx, ev)
	if errors.Is(err, ErrNotFound) {
		return EventUnmatched, nil, tx.UpdateInboxEvent(ctx, ev.Provider, ev.ID, ev.PurchaseID, EventUnmatched, now)
	}
	if err != nil {
		return "", nil, err
	}
	outcome, moves, err := s.applyToPurchase(ctx, tx, p, ev, now)
	if err != nil {
		return "", nil, err
	}
	return outcome, moves, tx.UpdateInboxEvent(ctx, ev.Provider, ev.ID, p.ID, outcome, now)
}

func (s *Service) matchEvent(ctx context.Context, tx Tx, ev Event) (Purchase, error) {
	if ev.PurchaseID != "" {
		p, err := tx.GetPurchase(ctx, ev.PurchaseID)
		if !errors.Is(err, ErrNotFound) || ev.PaymentID == "" {
			return p, err
		}
	}
	if ev.PaymentID == "" {
		return Purchase{}, ErrNotFound
	}
	return tx.FindPurchaseByPaymentID(ctx, ev.PaymentID)
}

// applyToPurchase applies ev to p as the judge decides: a success or a
// definite failure about the purchase's own charge settles a submitted or
// reconciling purchase, and an uncertain one through reconciling (both
// moves recorded); "processing" never moves anything; an event that
// disagrees with the books escalates; one that contradicts a final state
// and is newer than what settled it is confirmed by the worker's status
// query; the rest changes nothing (stale).
func (s *Service) applyToPurchase(ctx context.Context, tx Tx, p Purchase, ev Event, now time.Time) (EventOutcome, []move, error) {
	ans := Answer{
		Source: SourceWebhook, Outcome: ev.Outcome, PaymentID: ev.PaymentID, PurchaseID: ev.PurchaseID,
		Account: ev.Account, Amount: ev.Amount, Currency: ev.Currency, At: ev.Created,
	}
	var err error
	if ans.Owner, err = ownerOf(ctx, tx, ev.PaymentID); err != nil {
		return "", nil, err
	}
	v := Judge(p, ans)
	evidence := fmt.Sprintf("%s event %s (%s) payment=%s", ev.Provider, ev.ID, ev.Type, ev.PaymentID)
	next := p
	next.UpdatedAt = now
	switch v.Kind {
	case VerdictEscalate:
		s.cfg.Logger.Debug("webhook escalates", "purchase", p.ID, "event", ev.ID, "verdict", v.String())
		if !markEscalated(&next, v.Reason, now) {
			return EventContradiction, nil, nil
		}
		return EventContradiction, nil, tx.UpdatePurchase(ctx, next, p.State)
	case VerdictConfirm:
		if !doubt(&next, ans, fmt.Sprintf("%s: %s", evidence, v.Why)) {
			return EventStale, nil, nil
		}
		if err := tx.UpdatePurchase(ctx, next, p.State); err != nil {
			return "", nil, err
		}
		return EventConfirming, nil, tx.ReopenJob(ctx, p.ID, now)
	case VerdictRecord:
		return EventStale, nil, nil
	}

	if next.ProviderPaymentID == "" && ev.PaymentID != "" {
		next.ProviderPaymentID = ev.PaymentID
	}
	if v.Settles == "" {
		// Pending: a fact (the payment id) without a move.
		if next.ProviderPaymentID == p.ProviderPaymentID {
			return EventApplied, nil, nil
		}
		return EventApplied, nil, tx.UpdatePurchase(ctx, next, p.State)
	}
	settledAt := ev.Created
	if settledAt.IsZero() {
		settledAt = now
	}
	var moves []move
	step := func(to statemachine.State) error {
		cur := webhookStep(next, to, settledAt)
		if err := purchaseKind.update(ctx, tx, "webhook", 0, next, cur, CauseWebhook, evidence); err != nil {
			return err
		}
		moves = append(moves, move{from: next.State, to: to, cause: CauseWebhook, p: cur})
		cur.Version++
		next = cur
		return nil
	}
	if p.State == statemachine.Uncertain {
		if err := step(statemachine.Reconciling); err != nil {
			return "", nil, err
		}
	}
	if err := step(v.Settles); err != nil {
		return "", nil, err
	}
	return EventApplied, moves, nil
}

// webhookStep returns p moved to state to by a webhook: a final state is
// settled at settledAt and takes the purchase off the operator list
// unless its escalation is sticky.
func webhookStep(p Purchase, to statemachine.State, settledAt time.Time) Purchase {
	p.State = to
	if to.Terminal() {
		p.SettledAt = settledAt
		if !p.EscalationReason.Sticky() {
			p.EscalatedAt, p.EscalationReason = time.Time{}, ""
		}
	}
	return p
}
