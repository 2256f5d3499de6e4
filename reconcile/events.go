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
	// EventStale: the event arrived after its purchase was terminal and
	// changed nothing.
	EventStale EventOutcome = "stale"
	// EventConflict: an event with this id but another payload was seen
	// before; nothing was applied.
	EventConflict EventOutcome = "conflict"
	// EventContradiction: the provider reports a success the books call
	// declined. The purchase is escalated.
	EventContradiction EventOutcome = "contradiction"
	// EventUnmatched: no purchase matches yet; the event is kept and
	// applied if the purchase appears.
	EventUnmatched EventOutcome = "unmatched"
	// EventIgnored: a verified event of a type payrecon does not act on.
	EventIgnored EventOutcome = "ignored"
	// EventRejected: the event failed verification or validation and was
	// not stored. Used only by the endpoint's metrics.
	EventRejected EventOutcome = "rejected"
)

// UnverifiedEventType stands for the type of a webhook rejected before its
// type could be trusted, in metrics and logs.
const UnverifiedEventType = "unverified"

// Event is a verified provider event in neutral terms.
type Event struct {
	Provider    string // "stripe"
	ID          string // the provider's event id
	Type        string // the provider's event type, e.g. payment_intent.succeeded
	Outcome     provider.Outcome
	PaymentID   string // the object the event is about
	PurchaseID  string // from the object's metadata; empty if absent
	PayloadHash string // hex SHA-256 of the raw payload
	Payload     []byte
}

// InboxEvent is one row of the webhook inbox, unique by (Provider, EventID).
type InboxEvent struct {
	Provider    string
	EventID     string
	Type        string
	PayloadHash string
	Payload     []byte
	ObjectID    string           // the provider object the event is about (a payment id)
	Result      provider.Outcome // the neutral outcome the event reports
	PurchaseID  string           // the purchase id from the event's metadata, or the matched purchase
	Outcome     EventOutcome
	ReceivedAt  time.Time
	ProcessedAt time.Time
}

// ErrEventConflict is returned by ApplyEvent for an event id already seen
// with a different payload.
var ErrEventConflict = errors.New("event id reused with a different payload")

// maxWriteRaces bounds how often a writer re-reads and tries again after
// losing a conditional write to another writer.
const maxWriteRaces = 5

// ApplyEvent records a verified provider event in the inbox and applies it
// to its purchase, both in one transaction: the caller may acknowledge the
// event only after ApplyEvent returns nil.
//
// A repeat of a stored event (same id, same payload) is a duplicate and
// changes nothing; the same id with another payload returns
// EventConflict and an error wrapping ErrEventConflict, and applies
// nothing. An event for an unknown purchase is stored as unmatched and
// applied by ApplyUnmatched once the purchase exists.
func (s *Service) ApplyEvent(ctx context.Context, ev Event) (EventOutcome, error) {
	var outcome EventOutcome
	var moves []move
	err := s.retryRaces(ctx, func(tx Tx) error {
		outcome, moves = "", nil // fn may run again
		now := s.cfg.Now().UTC()
		inserted, err := tx.InsertInboxEvent(ctx, InboxEvent{
			Provider: ev.Provider, EventID: ev.ID, Type: ev.Type, PayloadHash: ev.PayloadHash,
			Payload: ev.Payload, ObjectID: ev.PaymentID, Result: ev.Outcome, PurchaseID: ev.PurchaseID,
			Outcome: EventUnmatched, ReceivedAt: now,
		})
		if err != nil {
			return err
		}
		if !inserted {
			prev, err := tx.GetInboxEvent(ctx, ev.Provider, ev.ID)
			if err != nil {
				return err
			}
			if prev.PayloadHash != ev.PayloadHash {
				outcome = EventConflict
				return nil
			}
			outcome = EventDuplicate
			return nil
		}
		outcome, moves, err = s.applyEventTx(ctx, tx, ev, now)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("reconcile: event %s/%s: %w", ev.Provider, ev.ID, err)
	}
	s.observeMoves(moves)
	s.logOutcome(ev, outcome)
	if outcome == EventConflict {
		return outcome, fmt.Errorf("reconcile: event %s/%s: %w", ev.Provider, ev.ID, ErrEventConflict)
	}
	return outcome, nil
}

// ApplyUnmatched retries up to limit stored events that matched no
// purchase when they arrived, least recently tried first. It returns how
// many now matched. An event that fails is reported and the others are
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
	for _, ie := range pending {
		ev := Event{
			Provider: ie.Provider, ID: ie.EventID, Type: ie.Type, PaymentID: ie.ObjectID,
			PurchaseID: ie.PurchaseID, PayloadHash: ie.PayloadHash, Payload: ie.Payload,
			Outcome: ie.Result,
		}
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
			outcome, moves, err = s.applyEventTx(ctx, tx, ev, s.cfg.Now().UTC())
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
	}
	return matched, errors.Join(errs...)
}

// logOutcome logs, after commit, what needs a human's attention.
func (s *Service) logOutcome(ev Event, outcome EventOutcome) {
	if outcome == EventContradiction {
		s.cfg.Logger.Error("contradiction: a provider event contradicts the books; the purchase is escalated",
			"event", ev.ID, "type", ev.Type, "purchase", ev.PurchaseID, "payment", ev.PaymentID)
	}
}

// retryRaces runs fn in a transaction, again from the start when a
// conditional write lost to a concurrent writer: the loser re-reads.
func (s *Service) retryRaces(ctx context.Context, fn func(Tx) error) error {
	var err error
	for range maxWriteRaces {
		err = s.store.InTx(ctx, fn)
		if !errors.Is(err, ErrConflict) {
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
		s.cfg.Observer.Transition(m.from, m.to, m.cause)
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

// applyToPurchase moves p as ev says, following the table: a success or a
// definite failure settles a submitted or reconciling purchase, and an
// uncertain one through reconciling (both moves recorded). "processing"
// never moves anything. After a terminal state nothing changes (stale),
// except a success after a decline: a contradiction, escalated.
func (s *Service) applyToPurchase(ctx context.Context, tx Tx, p Purchase, ev Event, now time.Time) (EventOutcome, []move, error) {
	evidence := fmt.Sprintf("%s event %s (%s) payment=%s", ev.Provider, ev.ID, ev.Type, ev.PaymentID)
	escalate := func(why string) (EventOutcome, []move, error) {
		if p.EscalationReason == EscalationContradiction {
			return EventContradiction, nil, nil
		}
		next := p
		next.EscalatedAt, next.EscalationReason, next.UpdatedAt = now, EscalationContradiction, now
		s.cfg.Logger.Debug("contradiction", "purchase", p.ID, "why", why)
		return EventContradiction, nil, tx.UpdatePurchase(ctx, next, p.State)
	}
	switch {
	case p.State == statemachine.Created:
		// No charge can exist before submission stored its key: the books
		// and the provider disagree.
		return escalate("event for a purchase never submitted")
	case ev.PaymentID != "" && p.ProviderPaymentID != "" && ev.PaymentID != p.ProviderPaymentID:
		// Another payment for the same purchase: possibly a second charge.
		return escalate("event about another payment than the purchase's")
	}

	next := p
	next.UpdatedAt = now
	if next.ProviderPaymentID == "" && ev.PaymentID != "" && !p.State.Terminal() {
		next.ProviderPaymentID = ev.PaymentID
	}
	var target statemachine.State
	switch ev.Outcome {
	case provider.Succeeded:
		target = statemachine.Succeeded
	case provider.Declined:
		target = statemachine.Declined
	case provider.Pending:
		if p.State.Terminal() {
			return EventStale, nil, nil
		}
		if next.ProviderPaymentID == p.ProviderPaymentID {
			return EventApplied, nil, nil
		}
		return EventApplied, nil, tx.UpdatePurchase(ctx, next, p.State)
	default:
		return EventIgnored, nil, nil
	}

	switch {
	case p.State == statemachine.Declined && target == statemachine.Succeeded:
		// The books say declined, the provider says the money moved.
		// Nothing here may undo a terminal state: a human decides.
		return escalate("success after a decline")
	case p.State.Terminal():
		return EventStale, nil, nil
	}

	var moves []move
	step := func(to statemachine.State) error {
		cur := next
		cur.State = to
		if to.Terminal() && !cur.EscalationReason.Sticky() {
			cur.EscalatedAt, cur.EscalationReason = time.Time{}, ""
		}
		if err := s.update(ctx, tx, "webhook", 0, next, cur, CauseWebhook, evidence); err != nil {
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
	if err := step(target); err != nil {
		return "", nil, err
	}
	return EventApplied, moves, nil
}
