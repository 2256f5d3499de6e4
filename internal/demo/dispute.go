package demo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// DisputePlan is a chargeback the card network opens on a scenario's
// purchase once it has reached its wanted state, and how the network
// decides it. Every change is the fake's (fakeprovider.Server.OpenDispute,
// MoveDispute), announced by webhook: payrecon hears of it as it would of
// Stripe's.
type DisputePlan struct {
	// Reason is the network's reason word, one of Stripe's.
	Reason string
	// RefundWhileOpen: once payrecon's books hold the chargeback open, a
	// client asks for a refund of the whole purchase, which payrecon must
	// refuse (reconcile.ErrDisputed) with nothing stored and nothing sent.
	RefundWhileOpen bool
	// Before are the statuses the network moves the dispute to before the
	// audit, one a round, and After those it moves it to once the audit
	// has run: the audit counts the dispute at risk while it is open.
	Before, After []string
}

// String says what the plan is, in words.
func (dp DisputePlan) String() string {
	return fmt.Sprintf("a chargeback (%s), announced by webhook", dp.Reason)
}

// moves returns the statuses the dispute must have been moved through:
// Before, and After too once audited.
func (dp DisputePlan) moves(audited bool) []string {
	if !audited {
		return dp.Before
	}
	return slices.Concat(dp.Before, dp.After)
}

// state returns the state payrecon's books must hold the dispute in once
// moves(audited) are made: open for a chargeback not moved yet.
func (dp DisputePlan) state(audited bool) statemachine.State {
	status := provider.DisputeNeedsResponse
	if ms := dp.moves(audited); len(ms) > 0 {
		status = ms[len(ms)-1]
	}
	st, _ := reconcile.DisputeStateOf(status)
	return st
}

// disputeOutbox returns the types of the events a shop must have been told
// of a succeeded purchase whose only dispute is in state st, in order:
// events.PurchaseSucceeded, events.DisputeOpened and, once decided, the
// decision's (events.DisputeWon, DisputeLost, DisputeClosed). Spelled
// out: the demo does not import the wire format's package.
func disputeOutbox(st statemachine.State) []string {
	want := []string{"purchase.succeeded", "dispute.opened"}
	if statemachine.Dispute.Terminal(st) {
		want = append(want, "dispute."+string(st))
	}
	return want
}

// OpenLine renders the chargeback d the network opened as a timeline line
// stamped with its offset from start, in Timeline's format.
func (dp DisputePlan) OpenLine(d provider.Dispute, start time.Time) string {
	return fmt.Sprintf("+%s  card network: chargeback %s on payment %s (%s, %s), announced by webhook",
		ClockOffset(d.Created.Sub(start)), d.ID, d.PaymentID, d.Reason, provider.FormatAmount(d.Amount, d.Currency))
}

// MoveLine renders the network's move of dispute d at offset at as a
// timeline line.
func (dp DisputePlan) MoveLine(d provider.Dispute, at time.Duration) string {
	return fmt.Sprintf("+%s  card network: dispute %s → %s, announced by webhook", ClockOffset(at), d.ID, d.Status)
}

// RefundLine renders, at offset at, the answer err of payrecon to a
// client's refund of amount while the dispute was open: its refusal, or
// the refund it stored against the plan (rf).
func (dp DisputePlan) RefundLine(at time.Duration, amount reconcile.Money, rf reconcile.Refund, err error) string {
	switch {
	case err == nil:
		return fmt.Sprintf("+%s  the client asks for refund %s of %s: accepted while disputed", ClockOffset(at), rf.ID, amount)
	case errors.Is(err, reconcile.ErrDisputed):
		return fmt.Sprintf("+%s  refund refused: payment disputed: the client asked for %s back; %s", ClockOffset(at), amount, reconcile.DetailOf(err))
	}
	return fmt.Sprintf("+%s  refund refused: %v", ClockOffset(at), err)
}

// disputeRun is where a scenario's dispute plan stands.
type disputeRun struct {
	opened *provider.Dispute // the chargeback as opened, nil until then
	asked  bool              // the refund while open was asked for
	// refusal is CreateRefund's error for that refund, nil if accepted.
	refusal error
	moved   int // statuses moved through
}

// pending reports whether part of the plan dp is still to play.
func (st disputeRun) pending(dp *DisputePlan) bool {
	return dp != nil && (st.opened == nil || dp.RefundWhileOpen && !st.asked || st.moved < len(dp.Before)+len(dp.After))
}

// dispute takes scenario i's dispute plan one step on, if one is due: the
// network opens the chargeback once the purchase has reached its wanted
// state; once payrecon's books hold it open and forbidding refunds, the
// client asks for a refund; then the network moves it, a status a round,
// through Before, and once the audit has run through After. Each change
// at the provider is delivered before it returns; it returns the case as
// it stands then. The refund waits for the books rather than for the
// delivery: the endpoint may apply an event after acknowledging it.
func (r *demoRun) dispute(ctx context.Context, i int, c reconcile.Case) (reconcile.Case, error) {
	dp, st := r.scenarios[i].Dispute, &r.disputes[i]
	p := c.Purchase
	switch {
	case dp == nil:
		return c, nil
	case st.opened == nil:
		if p.State != r.scenarios[i].Want || p.ProviderPaymentID == "" {
			return c, nil
		}
		d, err := r.stk.FakeServer.OpenDispute(p.ProviderPaymentID, fakeprovider.DisputeOptions{Reason: dp.Reason}, true)
		if err != nil {
			return c, fmt.Errorf("open a chargeback on payment %s: %w", p.ProviderPaymentID, err)
		}
		st.opened = &d
		r.say(i, dp.OpenLine(d, r.start))
		return r.delivered(ctx, i, "the chargeback")
	case dp.RefundWhileOpen && !st.asked:
		if !slices.ContainsFunc(c.Disputes, func(d reconcile.DisputeRecord) bool {
			return d.Dispute.ProviderDisputeID == st.opened.ID && d.Dispute.BlocksRefund()
		}) {
			return c, nil // payrecon has not heard of it yet
		}
		rf, err := r.stk.Service.CreateRefund(ctx, reconcile.NewRefund{
			PurchaseID: p.ID, Amount: p.Amount, Reason: "demo: the customer wants the money back", RequestedBy: "demo",
		})
		// A refusal of the protocol's is the answer the check judges; a
		// failure of the store stops the demo.
		if k := reconcile.KindOf(err); err != nil && (k == reconcile.KindInternal || k == reconcile.KindUnavailable) {
			return c, fmt.Errorf("refund while disputed: %w", err)
		}
		st.asked, st.refusal = true, err
		r.say(i, dp.RefundLine(r.elapsed(), Money{Amount: p.Amount, Currency: p.Currency}, rf, err))
		return c, nil
	}
	moves := dp.moves(r.audited)
	if st.moved >= len(moves) {
		return c, nil
	}
	d, err := r.stk.FakeServer.MoveDispute(st.opened.ID, moves[st.moved], true)
	if err != nil {
		return c, fmt.Errorf("move dispute %s to %s: %w", st.opened.ID, moves[st.moved], err)
	}
	st.moved++
	r.say(i, dp.MoveLine(d, r.elapsed()))
	return r.delivered(ctx, i, "dispute "+d.ID+" "+d.Status)
}

// delivered waits until the webhooks of a change at the provider, what,
// are delivered and judged, and returns scenario i's case as it stands
// then. The endpoint acknowledges an event once the inbox holds it and
// the applier judges it after, so the pending events are applied here
// too: on a loaded machine the clock would otherwise move on first, and
// the purchase's next check would race the verdict.
func (r *demoRun) delivered(ctx context.Context, i int, what string) (reconcile.Case, error) {
	dctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	if err := r.stk.FakeServer.Drain(dctx); err != nil {
		return reconcile.Case{}, fmt.Errorf("deliver the webhooks of %s: %w", what, err)
	}
	if err := r.judged(dctx); err != nil {
		return reconcile.Case{}, fmt.Errorf("judge the webhooks of %s: %w", what, err)
	}
	return r.stk.Service.Case(ctx, r.results[i].PurchaseID)
}

// judged applies the inbox's pending events until none is left but
// those waiting out a retry after a failure (due again only once the
// clock moves), waiting for those the applier holds in its own
// transaction.
func (r *demoRun) judged(ctx context.Context) error {
	for {
		n, err := r.stk.Service.ApplyPending(ctx)
		if err != nil {
			return err
		}
		var backlog reconcile.InboxBacklog
		err = r.stk.Service.Store().InTx(ctx, func(tx reconcile.Tx) error {
			var err error
			backlog, err = tx.InboxBacklog(ctx)
			return err
		})
		if err != nil || backlog.Pending == backlog.Retrying {
			return err
		}
		if n > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d events still pending: %w", backlog.Pending-backlog.Retrying, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// observeDispute adds to o what checkDispute looks at for scenario i:
// where its plan stands, the purchase's outbox, and the provider's
// refunds of its payment.
func (r *demoRun) observeDispute(ctx context.Context, i int, o *Observed) error {
	st := r.disputes[i]
	o.Dispute, o.RefundAsked, o.RefusedRefund = st.opened, st.asked, st.refusal
	p := o.Case.Purchase
	err := r.stk.Service.Store().InTx(ctx, func(tx reconcile.Tx) error {
		evs, err := tx.ListOutbox(ctx, p.ID)
		o.Outbox = nil
		for _, ev := range evs {
			o.Outbox = append(o.Outbox, string(ev.Type))
		}
		return err
	})
	if err != nil {
		return err
	}
	if p.ProviderPaymentID != "" {
		o.PaymentRefunds = len(r.stk.Fake.RefundsOf(p.ProviderPaymentID))
	}
	return nil
}

// checkDispute returns what is wrong with the scenario's dispute: the
// chargeback must be opened at the provider and held once by payrecon's
// books, on the purchase's own payment, in the state the moves made so
// far lead to (those after the audit too, once audited), its amount
// withdrawn and, unless won, not reinstated; the purchase's outbox must
// tell the shop of its success, the dispute's opening and its decision,
// once each and in that order; and the refund asked for while it was open
// must have been refused as disputed, with nothing sent to the provider
// (checkRefund sees that nothing was stored). A scenario without a plan
// must have no dispute.
func (sc Scenario) checkDispute(o Observed) []string {
	ds := o.Case.Disputes
	dp := sc.Dispute
	if dp == nil {
		if len(ds) > 0 {
			return []string{fmt.Sprintf("%d unexpected disputes", len(ds))}
		}
		return nil
	}
	if o.Dispute == nil {
		return []string{"not opened yet: " + dp.String()}
	}
	if len(ds) != 1 {
		return []string{fmt.Sprintf("%d disputes in the books, want 1: %s", len(ds), o.Dispute.ID)}
	}
	var problems []string
	d := ds[0].Dispute
	pay := o.Case.Purchase.ProviderPaymentID
	if d.ProviderDisputeID != o.Dispute.ID || d.PaymentID != pay {
		problems = append(problems, fmt.Sprintf("dispute %s of payment %s in the books, want %s of %s",
			d.ProviderDisputeID, d.PaymentID, o.Dispute.ID, pay))
	}
	want := dp.state(o.Audited)
	if d.State != want {
		problems = append(problems, fmt.Sprintf("dispute %s %s, want %s", d.ProviderDisputeID, d.State, want))
	}
	reinstated := int64(0)
	if want == statemachine.Won {
		reinstated = d.Amount
	}
	if d.Inquiry || d.Withdrawn != d.Amount || d.Reinstated != reinstated {
		problems = append(problems, fmt.Sprintf("dispute %s withdrew %s and reinstated %s of %s, want a chargeback that withdrew it all and reinstated %s",
			d.ProviderDisputeID, provider.FormatAmount(d.Withdrawn, d.Currency), provider.FormatAmount(d.Reinstated, d.Currency),
			provider.FormatAmount(d.Amount, d.Currency), provider.FormatAmount(reinstated, d.Currency)))
	}
	if w := disputeOutbox(want); !slices.Equal(o.Outbox, w) {
		problems = append(problems, fmt.Sprintf("outbox %q, want %q", o.Outbox, w))
	}
	if dp.RefundWhileOpen {
		switch {
		case !o.RefundAsked:
			problems = append(problems, "no refund asked for while disputed")
		case o.RefusedRefund == nil:
			problems = append(problems, "the refund asked for while disputed was accepted")
		case !errors.Is(o.RefusedRefund, reconcile.ErrDisputed):
			problems = append(problems, fmt.Sprintf("the refund asked for while disputed was refused with %q, want it refused as disputed", o.RefusedRefund))
		}
	}
	if o.PaymentRefunds > 0 {
		problems = append(problems, fmt.Sprintf("%d refunds at the provider of payment %s, want none", o.PaymentRefunds, pay))
	}
	return problems
}
