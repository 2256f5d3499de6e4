package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/payrecon/payrecon/events"
	"github.com/payrecon/payrecon/internal/crashpoint"
	"github.com/payrecon/payrecon/statemachine"
)

// The outbox's write side. Every transaction the Service runs goes
// through outboxStore, whose Tx (outboxTx) writes the event of each
// change a downstream system must act on with the change, in the same
// transaction, whatever path made it: the worker's single and batched
// writes, the webhooks, the operators, the refunds, the audit and the
// escalation sweeps all write through UpdatePurchase, ApplyMoves,
// UpdateRefund, InsertDispute, UpdateDispute, InsertFinding, CloseFinding
// or InsertOperatorAction.
//
// The events:
//   - purchase.succeeded, purchase.declined: a purchase moved to that
//     final state;
//   - purchase.escalated: a purchase went onto the operator list (it was
//     not on it);
//   - purchase.resolved: an operator resolved it (an operator action
//     "resolve"), with its outcome;
//   - refund.succeeded, refund.failed: a refund moved to that final state;
//   - dispute.opened: a dispute was stored; dispute.won, dispute.lost,
//     dispute.closed: it moved to that final state;
//   - finding.opened, finding.closed: an audit finding about a purchase
//     was stored or closed. A finding about a charge of no purchase (an
//     orphan) has no purchase to number its events by, and is reported on
//     the operator pages and the metrics only.

// outboxStore is a Store whose transactions write the outbox.
type outboxStore struct {
	Store
}

// InTx implements Store: fn gets an outboxTx over the store's Tx.
func (s outboxStore) InTx(ctx context.Context, fn func(Tx) error) error {
	return s.Store.InTx(ctx, func(tx Tx) error { return fn(outboxTx{tx}) })
}

// outboxTx is a Tx that writes the events of the changes it makes.
type outboxTx struct {
	Tx
}

// Savepoint implements Tx: fn gets an outboxTx too, so that the events of
// its changes roll back with them.
func (t outboxTx) Savepoint(ctx context.Context, fn func(Tx) error) error {
	return t.Tx.Savepoint(ctx, func(tx Tx) error { return fn(outboxTx{tx}) })
}

// purchaseData is the payload of a purchase event.
type purchaseData struct {
	State            statemachine.State `json:"state"`
	Customer         string             `json:"customer"`
	Reference        string             `json:"reference,omitempty"`
	Amount           int64              `json:"amount"`
	Currency         string             `json:"currency"`
	PaymentID        string             `json:"payment_id,omitempty"`
	EscalationReason EscalationReason   `json:"escalation_reason,omitempty"`
	// Outcome is the final state an operator resolved the purchase to
	// (purchase.resolved only).
	Outcome statemachine.State `json:"outcome,omitempty"`
	// Operator is who resolved it (purchase.resolved only).
	Operator string `json:"operator,omitempty"`
}

// disputeData is the payload of a dispute event.
type disputeData struct {
	DisputeID         string             `json:"dispute_id"`
	ProviderDisputeID string             `json:"provider_dispute_id"`
	State             statemachine.State `json:"state"`
	Status            string             `json:"status"`
	Inquiry           bool               `json:"inquiry"`
	Amount            int64              `json:"amount"`
	Currency          string             `json:"currency"`
	PaymentID         string             `json:"payment_id"`
	Reason            string             `json:"reason,omitempty"`
	EvidenceDueBy     *time.Time         `json:"evidence_due_by,omitempty"`
}

// disputePayload is d as its events carry it.
func disputePayload(d Dispute) disputeData {
	data := disputeData{
		DisputeID: d.ID, ProviderDisputeID: d.ProviderDisputeID, State: d.State, Status: d.ProviderStatus,
		Inquiry: d.Inquiry, Amount: d.Amount, Currency: d.Currency, PaymentID: d.PaymentID, Reason: d.Reason,
	}
	if !d.EvidenceDueBy.IsZero() {
		due := d.EvidenceDueBy.UTC()
		data.EvidenceDueBy = &due
	}
	return data
}

// InsertDispute implements Tx and writes dispute.opened.
func (t outboxTx) InsertDispute(ctx context.Context, d Dispute) error {
	if err := t.Tx.InsertDispute(ctx, d); err != nil {
		return err
	}
	return t.append(ctx, events.DisputeOpened, d.PurchaseID, "", d.CreatedAt, disputePayload(d))
}

// UpdateDispute implements Tx and writes dispute.won, dispute.lost or
// dispute.closed when the dispute reaches that final state.
func (t outboxTx) UpdateDispute(ctx context.Context, d Dispute, from statemachine.State) error {
	if err := t.Tx.UpdateDispute(ctx, d, from); err != nil {
		return err
	}
	if d.State == from {
		return nil
	}
	typ, ok := map[statemachine.State]events.Type{
		statemachine.Won: events.DisputeWon, statemachine.Lost: events.DisputeLost, statemachine.Closed: events.DisputeClosed,
	}[d.State]
	if !ok {
		return nil
	}
	return t.append(ctx, typ, d.PurchaseID, "", d.UpdatedAt, disputePayload(d))
}

// refundData is the payload of a refund event.
type refundData struct {
	State         statemachine.State `json:"state"`
	Amount        int64              `json:"amount"`
	Currency      string             `json:"currency"`
	PaymentID     string             `json:"payment_id"`
	Reason        string             `json:"reason,omitempty"`
	FailureReason string             `json:"failure_reason,omitempty"`
}

// findingData is the payload of a finding event.
type findingData struct {
	FindingID string      `json:"finding_id"`
	Kind      FindingKind `json:"kind"`
	Provider  string      `json:"provider"`
	PaymentID string      `json:"payment_id"`
	Amount    int64       `json:"amount"`
	Currency  string      `json:"currency"`
	Status    string      `json:"status"`
	Open      bool        `json:"open"`
	ClosedBy  string      `json:"closed_by,omitempty"`
	CloseNote string      `json:"close_note,omitempty"`
}

func purchasePayload(p Purchase) purchaseData {
	return purchaseData{
		State: p.State, Customer: p.Customer, Reference: p.Reference, Amount: p.Amount, Currency: p.Currency,
		PaymentID: p.ProviderPaymentID, EscalationReason: p.EscalationReason,
	}
}

// event returns an event of purchaseID (and refundID) of type typ with
// data, committed at at.
func event(typ events.Type, purchaseID, refundID string, at time.Time, data any) (events.Event, error) {
	ev := events.Event{ID: events.NewID(), Type: typ, PurchaseID: purchaseID, RefundID: refundID, CreatedAt: at}
	if err := ev.SetData(data); err != nil {
		return events.Event{}, fmt.Errorf("reconcile: %s event of %s: %w", typ, purchaseID, err)
	}
	return ev, nil
}

// append writes one event of purchaseID (and refundID) of type typ with
// data, committed at at (the store's now when zero).
func (t outboxTx) append(ctx context.Context, typ events.Type, purchaseID, refundID string, at time.Time, data any) error {
	if at.IsZero() {
		var err error
		if at, err = t.Now(ctx); err != nil {
			return err
		}
	}
	ev, err := event(typ, purchaseID, refundID, at, data)
	if err != nil {
		return err
	}
	return t.write(ctx, ev)
}

// write appends es in one call and reaches the crash point
// OutboxPending: the changes and their events are written, the
// transaction not committed.
func (t outboxTx) write(ctx context.Context, es ...events.Event) error {
	if len(es) == 0 {
		return nil
	}
	if _, err := t.AppendOutbox(ctx, es...); err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.OutboxPending)
	return nil
}

// purchaseEvents returns the events of a purchase's move from before to
// after; wasEscalated says whether before was on the operator list.
func purchaseEvents(before, after Purchase, wasEscalated bool) ([]events.Event, error) {
	var out []events.Event
	add := func(typ events.Type) error {
		ev, err := event(typ, after.ID, "", after.UpdatedAt, purchasePayload(after))
		out = append(out, ev)
		return err
	}
	if after.State != before.State {
		switch after.State {
		case statemachine.Succeeded:
			if err := add(events.PurchaseSucceeded); err != nil {
				return nil, err
			}
		case statemachine.Declined:
			if err := add(events.PurchaseDeclined); err != nil {
				return nil, err
			}
		}
	}
	if !after.EscalatedAt.IsZero() && !wasEscalated {
		if err := add(events.PurchaseEscalated); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// UpdatePurchase implements Tx and writes the move's events. Whether p
// was on the operator list is read first only when it is on it now.
func (t outboxTx) UpdatePurchase(ctx context.Context, p Purchase, from statemachine.State) error {
	wasEscalated := false
	if !p.EscalatedAt.IsZero() {
		before, err := t.GetPurchase(ctx, p.ID)
		if err != nil {
			return err
		}
		wasEscalated = !before.EscalatedAt.IsZero()
	}
	if err := t.Tx.UpdatePurchase(ctx, p, from); err != nil {
		return err
	}
	es, err := purchaseEvents(Purchase{ID: p.ID, State: from}, p, wasEscalated)
	if err != nil {
		return err
	}
	return t.write(ctx, es...)
}

// ApplyMoves implements Tx and writes the events of the applied moves,
// in the same transaction and in one AppendOutbox: each move carries the
// purchase as it was, so nothing is read.
func (t outboxTx) ApplyMoves(ctx context.Context, moves []Move) ([]bool, error) {
	applied, err := t.Tx.ApplyMoves(ctx, moves)
	if err != nil {
		return applied, err
	}
	var es []events.Event
	for i, ok := range applied {
		if !ok {
			continue
		}
		mv := moves[i]
		more, err := purchaseEvents(mv.From, mv.To, !mv.From.EscalatedAt.IsZero())
		if err != nil {
			return nil, err
		}
		es = append(es, more...)
	}
	if err := t.write(ctx, es...); err != nil {
		return nil, err
	}
	return applied, nil
}

// InsertOperatorAction implements Tx; an operator's resolution of a
// purchase writes purchase.resolved with the state it left the purchase
// in.
func (t outboxTx) InsertOperatorAction(ctx context.Context, a OperatorAction) error {
	if err := t.Tx.InsertOperatorAction(ctx, a); err != nil {
		return err
	}
	if a.Action != "resolve" || a.RefundID != "" {
		return nil
	}
	p, err := t.GetPurchase(ctx, a.PurchaseID)
	if err != nil {
		return err
	}
	data := purchasePayload(p)
	data.Outcome, data.Operator = p.State, a.Operator
	return t.append(ctx, events.PurchaseResolved, p.ID, "", a.At, data)
}

// UpdateRefund implements Tx and writes refund.succeeded or refund.failed
// when the refund reaches that final state.
func (t outboxTx) UpdateRefund(ctx context.Context, r Refund, from statemachine.State) error {
	if err := t.Tx.UpdateRefund(ctx, r, from); err != nil {
		return err
	}
	if r.State == from {
		return nil
	}
	var typ events.Type
	switch r.State {
	case statemachine.Succeeded:
		typ = events.RefundSucceeded
	case statemachine.Failed:
		typ = events.RefundFailed
	default:
		return nil
	}
	return t.append(ctx, typ, r.PurchaseID, r.ID, r.UpdatedAt, refundData{
		State: r.State, Amount: r.Amount, Currency: r.Currency, PaymentID: r.PaymentID,
		Reason: r.Reason, FailureReason: r.FailureReason,
	})
}

func findingPayload(f Finding) findingData {
	return findingData{
		FindingID: strconv.FormatInt(f.ID, 10), Kind: f.Kind, Provider: f.Provider, PaymentID: f.PaymentID,
		Amount: f.Amount, Currency: f.Currency, Status: f.Status, Open: f.Open(),
		ClosedBy: f.ClosedBy, CloseNote: f.CloseNote,
	}
}

// InsertFinding implements Tx and writes finding.opened for a new
// finding about a purchase.
func (t outboxTx) InsertFinding(ctx context.Context, f Finding) (bool, error) {
	inserted, err := t.Tx.InsertFinding(ctx, f)
	if err != nil || !inserted || f.PurchaseID == "" {
		return inserted, err
	}
	// The store numbers the finding: read it back for its id.
	stored, err := t.ListFindings(ctx, f.PurchaseID, AnyAccount, false, 0)
	if err != nil {
		return false, err
	}
	for _, s := range stored {
		if s.Provider == f.Provider && s.PaymentID == f.PaymentID && s.Kind == f.Kind {
			f = s
		}
	}
	return true, t.append(ctx, events.FindingOpened, f.PurchaseID, "", f.FoundAt, findingPayload(f))
}

// CloseFinding implements Tx and writes finding.closed for a finding
// about a purchase.
func (t outboxTx) CloseFinding(ctx context.Context, id int64, operator, note string, now time.Time) error {
	if err := t.Tx.CloseFinding(ctx, id, operator, note, now); err != nil {
		return err
	}
	f, err := t.GetFinding(ctx, id)
	if err != nil {
		return err
	}
	if f.PurchaseID == "" {
		return nil
	}
	return t.append(ctx, events.FindingClosed, f.PurchaseID, "", now, findingPayload(f))
}

// InsertKeyedPurchases implements KeyedPurchaseInserter when the Tx under
// t does: a new purchase has no event, so there is nothing to add. When
// it does not, it returns an error wrapping errors.ErrUnsupported having
// sent nothing, and the caller writes row by row.
func (t outboxTx) InsertKeyedPurchases(ctx context.Context, items []KeyedPurchase) ([]bool, error) {
	ins, ok := t.Tx.(KeyedPurchaseInserter)
	if !ok {
		return nil, fmt.Errorf("reconcile: insert keyed purchases: %w", errors.ErrUnsupported)
	}
	return ins.InsertKeyedPurchases(ctx, items)
}
