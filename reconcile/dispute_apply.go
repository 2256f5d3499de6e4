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

// A dispute arrives as an answer: a webhook or an event of the log (one
// inbox row each), or a line of the audit's listing. Every answer goes
// through applyDisputeTx, so that the judge, the database guard, the
// history and the shop's events are the same whichever way it came, and
// an answer that arrives twice, late or out of order changes nothing
// twice (JudgeDispute).

// disputeSource says where a dispute answer came from, for the history.
type disputeSource struct {
	cause    Cause  // CauseWebhook or CauseAudit
	actor    string // "webhook", "audit"
	evidence string // the event or listing, for the transition's evidence
	at       time.Time
	// account is the provider account the answer comes from: the one its
	// event happened in, or the one the audit listed it in.
	account string
}

// applyDisputeEventTx applies ev, an event about a dispute already in the
// inbox, and records its outcome on the inbox row.
func (s *Service) applyDisputeEventTx(ctx context.Context, tx Tx, ev Event, now time.Time) (EventOutcome, []move, error) {
	at := ev.Created
	if at.IsZero() {
		at = now
	}
	src := disputeSource{cause: CauseWebhook, actor: "webhook", at: at, account: ev.Account,
		evidence: fmt.Sprintf("%s event %s (%s) dispute=%s status=%s", ev.Provider, ev.ID, ev.Type, ev.Dispute.ID, ev.Dispute.Status)}
	res, err := s.applyDisputeTx(ctx, tx, *ev.Dispute, src, now)
	if err != nil {
		return "", nil, err
	}
	if err := tx.UpdateInboxEvent(ctx, ev.Provider, ev.ID, res.purchaseID, res.outcome, now); err != nil {
		return "", nil, err
	}
	if res.outcome == EventApplied {
		crashpoint.Hit(crashpoint.DisputeApplyWritten)
	}
	return res.outcome, nil, nil
}

// disputeApplied is what applyDisputeTx did with an answer.
type disputeApplied struct {
	// outcome is the event outcome the verdict means: applied, stale,
	// finding, or unmatched when the dispute names a purchase whose
	// payment the books do not know yet.
	outcome EventOutcome
	// purchaseID is the purchase the dispute concerns, "" when none.
	purchaseID string
	// finding is the finding it stored, nil when none (or one stored
	// before).
	finding *Finding
}

// applyDisputeTx judges answer d against the books and applies the
// verdict in tx: it stores or moves the dispute, records a finding, or
// changes nothing.
func (s *Service) applyDisputeTx(ctx context.Context, tx Tx, d provider.Dispute, src disputeSource, now time.Time) (disputeApplied, error) {
	fail := func(err error) (disputeApplied, error) { return disputeApplied{}, err }
	var cur *Dispute
	switch got, err := tx.FindDispute(ctx, d.ID); {
	case err == nil:
		cur = &got
	case !errors.Is(err, ErrNotFound):
		return fail(err)
	}
	var books DisputeBooks
	if d.PaymentID != "" {
		switch p, err := tx.FindPurchaseByPaymentID(ctx, d.PaymentID); {
		case err == nil:
			books.Owner = &p
		case !errors.Is(err, ErrNotFound):
			return fail(err)
		}
	}
	if books.Owner == nil && cur == nil && d.PurchaseID != "" {
		// The payment's metadata names a purchase of the answer's account
		// that does not know its payment yet: the dispute waits,
		// unmatched, until it does. A purchase of another account never
		// owns it: the judge finds it foreign.
		switch p, err := tx.GetPurchase(ctx, d.PurchaseID); {
		case err == nil && p.ProviderPaymentID == "" && p.Account == src.account:
			return disputeApplied{outcome: EventUnmatched, purchaseID: p.ID}, nil
		case err != nil && !errors.Is(err, ErrNotFound):
			return fail(err)
		}
	}
	if books.Owner != nil {
		var err error
		if books.Refunded, books.Pending, books.OtherLost, err = paymentReturns(ctx, tx, books.Owner.ID, d.PaymentID, d.ID); err != nil {
			return fail(err)
		}
	}
	v := JudgeDispute(cur, books, d, src.account, src.at)
	purchaseID := ""
	switch {
	case cur != nil:
		purchaseID = cur.PurchaseID
	case books.Owner != nil:
		purchaseID = books.Owner.ID
	}
	if v.Finding == FindingForeignDispute {
		// Another account's dispute, or one of a payment no purchase
		// owns: no purchase of the books is concerned.
		purchaseID = ""
	}
	switch v.Kind {
	case DisputeStale:
		return disputeApplied{outcome: EventStale, purchaseID: purchaseID}, nil
	case DisputeReject:
		s.cfg.Logger.Warn("dispute answer disagrees with the books", "dispute", d.ID, "verdict", v.String())
		f, err := s.disputeFinding(ctx, tx, d, v, purchaseID, now)
		return disputeApplied{outcome: EventFinding, purchaseID: purchaseID, finding: f}, err
	}
	if cur == nil {
		opened := Dispute{
			ID: NewID("dsp_", now), ProviderDisputeID: d.ID, PurchaseID: books.Owner.ID, PaymentID: d.PaymentID,
			Amount: d.Amount, Currency: books.Owner.Currency, State: statemachine.Dispute.Start(), Version: 1,
			CreatedAt: now, UpdatedAt: now,
		}
		mergeDispute(&opened, d, src.at, now)
		opened.State = statemachine.Dispute.Start()
		if err := tx.InsertDispute(ctx, opened); err != nil {
			return fail(err)
		}
		if v.To == opened.State && v.Finding == "" {
			return disputeApplied{outcome: EventApplied, purchaseID: purchaseID}, nil
		}
		cur = &opened
	}
	next := *cur
	mergeDispute(&next, d, src.at, now)
	next.State = v.To
	if err := s.moveDispute(ctx, tx, *cur, next, src); err != nil {
		return fail(err)
	}
	if cur.Open() && !next.Open() {
		if err := wakeHeldRefunds(ctx, tx, next, now); err != nil {
			return fail(err)
		}
	}
	res := disputeApplied{outcome: EventApplied, purchaseID: purchaseID}
	if v.Finding != "" {
		s.cfg.Logger.Warn("dispute applied with a finding", "dispute", d.ID, "verdict", v.String())
		var err error
		if res.finding, err = s.disputeFinding(ctx, tx, d, v, purchaseID, now); err != nil {
			return fail(err)
		}
	}
	return res, nil
}

// mergeDispute writes answer d, of the provider's time at, over next: the
// provider's words, and funds that only grow.
func mergeDispute(next *Dispute, d provider.Dispute, at, now time.Time) {
	next.ProviderStatus = d.Status
	next.Inquiry = provider.DisputeInquiry(d.Status)
	next.EvidenceDueBy = d.EvidenceDueBy
	next.ChargeRefundable = d.ChargeRefundable
	if d.Reason != "" {
		next.Reason = d.Reason
	}
	next.Withdrawn = max(next.Withdrawn, d.Withdrawn)
	next.Reinstated = max(next.Reinstated, d.Reinstated)
	if at.After(next.ProviderUpdatedAt) {
		next.ProviderUpdatedAt = at
	}
	next.UpdatedAt = now
}

// moveDispute writes next over cur, conditional on cur's state and
// version, and appends the transition when the state changes: the one
// write path of a dispute.
func (s *Service) moveDispute(ctx context.Context, tx Tx, cur, next Dispute, src disputeSource) error {
	if next.State != cur.State {
		if err := statemachine.Dispute.Transition(cur.State, next.State); err != nil {
			return fmt.Errorf("reconcile: dispute %s: %w", cur.ID, err)
		}
		if statemachine.Dispute.Terminal(next.State) {
			next.ClosedAt = src.at
		}
	}
	if err := tx.UpdateDispute(ctx, next, cur.State); err != nil {
		return err
	}
	if next.State == cur.State {
		return nil
	}
	return tx.InsertTransition(ctx, TransitionRecord{
		PurchaseID: cur.PurchaseID, DisputeID: cur.ID, From: cur.State, To: next.State,
		Cause: src.cause, Evidence: src.evidence, Actor: src.actor, At: next.UpdatedAt,
	})
}

// disputeFinding records the finding of verdict v about answer d, and
// returns it if it is new (a finding is stored once per dispute and
// kind).
func (s *Service) disputeFinding(ctx context.Context, tx Tx, d provider.Dispute, v DisputeVerdict, purchaseID string, now time.Time) (*Finding, error) {
	f := Finding{
		Provider: s.cfg.ProviderName, PaymentID: d.ID, Kind: v.Finding, PurchaseID: purchaseID,
		Amount: d.Amount, Currency: d.Currency, Status: d.Status, Evidence: v.Reason, FoundAt: now,
	}
	inserted, err := tx.InsertFinding(ctx, f)
	if err != nil || !inserted {
		return nil, err
	}
	return &f, nil
}

// paymentReturns sums what payment paymentID of purchase purchaseID has
// returned or may return: its refunds succeeded, its refunds not final
// (pending), and its lost disputes other than the provider's dispute
// except.
func paymentReturns(ctx context.Context, tx Tx, purchaseID, paymentID, except string) (refunded, pending, lost int64, err error) {
	refunds, err := tx.ListRefunds(ctx, purchaseID)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, r := range refunds {
		switch {
		case r.PaymentID != paymentID || r.State == statemachine.Failed:
		case r.State == statemachine.Succeeded:
			refunded += r.Amount
		default:
			pending += r.Amount
		}
	}
	disputes, err := tx.ListDisputes(ctx, purchaseID)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, x := range disputes {
		if x.PaymentID == paymentID && x.ProviderDisputeID != except {
			lost += x.Returned()
		}
	}
	return refunded, pending, lost, nil
}

// wakeHeldRefunds makes due now the jobs of the refunds of d's payment
// that the worker held, unsent, while d was open (a live lease keeps its
// worker, ReopenJob): d is decided. Won or
// closed, the refund goes; lost, the provider refuses it and it fails,
// nothing refunded, and the shop is told.
func wakeHeldRefunds(ctx context.Context, tx Tx, d Dispute, now time.Time) error {
	refunds, err := tx.ListRefunds(ctx, d.PurchaseID)
	if err != nil {
		return err
	}
	for _, r := range refunds {
		if r.PaymentID == d.PaymentID && r.State == statemachine.Created {
			if err := tx.ReopenJob(ctx, r.ID, now); err != nil {
				return err
			}
		}
	}
	return nil
}
