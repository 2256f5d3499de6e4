package reconcile_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// TestResolveWaitsForInFlightCall: an operator cannot settle a purchase
// while a worker is inside a provider call for it; once the worker is
// done, the operator can.
func TestResolveWaitsForInFlightCall(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("olga")
		f.fake.Script(p.ID, fakeprovider.Timeout, fakeprovider.Timeout)
		f.runUntilIdle(f.svc) // uncertain
		f.clock.Advance(30 * time.Second)

		a := f.stall(f.fake, provider.OpCreate) // reconciling, replay in flight

		before := f.detail(p.ID)
		_, err := f.svc.Resolve(context.Background(), reconcile.Resolution{
			PurchaseID: p.ID, Operator: "olga", To: statemachine.Declined, Evidence: "dashboard shows nothing",
		})
		if !errors.Is(err, reconcile.ErrBusy) {
			t.Fatalf("resolve during the call: %v, want ErrBusy", err)
		}
		if after := f.detail(p.ID); after.Purchase.Version != before.Purchase.Version || after.Job.LeaseToken != before.Job.LeaseToken {
			t.Fatalf("refused resolve changed something: %+v → %+v", before.Purchase, after.Purchase)
		}
		close(a.gate.release)
		if err := <-a.process; err != nil {
			t.Fatal(err)
		}
		d := f.wantState(p.ID, statemachine.Uncertain) // the replay timed out too
		_, err = f.svc.Resolve(context.Background(), reconcile.Resolution{
			PurchaseID: p.ID, Operator: "olga", To: statemachine.Declined, Evidence: "dashboard shows nothing", Version: d.Purchase.Version,
		})
		if err != nil {
			t.Fatalf("resolve after the call: %v", err)
		}
		d = f.wantState(p.ID, statemachine.Declined)
		wantPath(t, d, "created→submitted:submit", "submitted→uncertain:submit_response",
			"uncertain→reconciling:key_replay", "reconciling→uncertain:key_replay",
			"uncertain→reconciling:operator", "reconciling→declined:operator")
		if d.Job.DoneAt.IsZero() {
			t.Fatal("job not done after the resolution")
		}
	})
}

// TestLateSuccessContradictsDecline: while a worker's replay is in flight,
// a provider event declares the purchase declined; the replay then answers
// success. The decline stands (a final state never changes), the answer is
// recorded unapplied, confirmed by a status query, and the purchase is
// escalated as a state disagreement.
func TestLateSuccessContradictsDecline(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("pavel")
		f.fake.Script(p.ID, fakeprovider.LostReply)
		f.runUntilIdle(f.svc) // uncertain; the charge succeeded at the provider
		f.clock.Advance(30 * time.Second)

		a := f.stall(f.fake, provider.OpCreate)

		outcome, err := f.svc.ApplyEvent(context.Background(), reconcile.Event{
			Provider: "stripe", ID: "evt_decline", Type: "payment_intent.payment_failed",
			Outcome: provider.Declined, PurchaseID: p.ID, PayloadHash: "h1",
		})
		if err != nil || outcome != reconcile.EventApplied {
			t.Fatalf("decline event: %s, %v", outcome, err)
		}
		close(a.gate.release)
		if err := <-a.process; err != nil {
			t.Fatal(err)
		}
		d := f.wantState(p.ID, statemachine.Declined)
		if d.Purchase.EscalationReason != reconcile.EscalationStateDisagreement || d.Purchase.Doubt != "" {
			t.Fatalf("escalation %q doubt %q, want a confirmed state_disagreement\n%s", d.Purchase.EscalationReason, d.Purchase.Doubt, history(d))
		}
		var late, confirmed bool
		for _, at := range d.Attempts {
			late = late || (at.Op == provider.OpCreate && at.Outcome == provider.Succeeded && !at.Applied)
			confirmed = confirmed || (at.Op == provider.OpStatus && at.Outcome == provider.Succeeded)
		}
		if !late || !confirmed {
			t.Fatalf("want the late success recorded unapplied and confirmed by a status query\n%s", history(d))
		}
	})
}

// TestReplayStopsAtTheMargin: 23h30m after the first attempt the key may
// still be at the provider, but within the margin of its retention: the
// worker searches instead of replaying.
func TestReplayStopsAtTheMargin(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("quinn")
		f.fake.Script(p.ID, fakeprovider.LostReply)
		f.runUntilIdle(f.svc)
		f.clock.Advance(23*time.Hour + 30*time.Minute)
		f.runUntilIdle(f.svc)
		d := f.wantState(p.ID, statemachine.Succeeded)
		wantPath(t, d, "created→submitted:submit", "submitted→uncertain:submit_response",
			"uncertain→reconciling:search", "reconciling→succeeded:search")
		if n := f.fake.Calls(provider.OpCreate); n != 1 {
			t.Fatalf("%d creates, want 1: no replay within the margin", n)
		}
	})
}

// TestEscalateOverdue: the sweep escalates a purchase uncertain past the
// maximum age without waiting for its next check, once.
func TestEscalateOverdue(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{MaxUncertainAge: 2 * time.Hour})
		p := f.create("rita")
		fresh := f.create("sam")
		f.fake.Script(p.ID, fakeprovider.Timeout)
		f.runUntilIdle(f.svc)
		f.clock.Advance(3 * time.Hour)
		f.fake.Script(fresh.ID, fakeprovider.Timeout)
		n, err := f.svc.EscalateOverdue(context.Background())
		if err != nil || n != 1 {
			t.Fatalf("EscalateOverdue: %d, %v; want 1", n, err)
		}
		d := f.wantState(p.ID, statemachine.Uncertain)
		if d.Purchase.EscalationReason != reconcile.EscalationUncertainTooLong {
			t.Fatalf("escalation %q", d.Purchase.EscalationReason)
		}
		if n, _ := f.svc.EscalateOverdue(context.Background()); n != 0 {
			t.Fatalf("escalated again: %d", n)
		}
		if d := f.detail(fresh.ID); d.Purchase.Escalated() {
			t.Fatal("a purchase that was never uncertain was escalated")
		}
	})
}

// TestMaxAgeEscalation: a purchase still unknown past MaxUncertainAge is
// escalated by the worker's own check.
func TestMaxAgeEscalation(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{MaxUncertainAge: time.Hour, Backoff: []time.Duration{40 * time.Minute}})
		p := f.create("tom")
		f.fake.Script(p.ID, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout)
		f.runUntilIdle(f.svc)
		f.clock.Advance(40 * time.Minute)
		f.runUntilIdle(f.svc)
		if d := f.detail(p.ID); d.Purchase.Escalated() {
			t.Fatalf("escalated after 40m: %q", d.Purchase.EscalationReason)
		}
		f.clock.Advance(40 * time.Minute)
		f.runUntilIdle(f.svc)
		d := f.wantState(p.ID, statemachine.Uncertain)
		if d.Purchase.EscalationReason != reconcile.EscalationUncertainTooLong {
			t.Fatalf("escalation %q, want uncertain_too_long", d.Purchase.EscalationReason)
		}
	})
}

// TestIdempotencyMismatchEscalatesAtOnce: the provider holds the key with
// other parameters (a bug somewhere). The purchase is escalated at once and
// never retried under another key.
func TestIdempotencyMismatchEscalatesAtOnce(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("ursula")
		// Someone else used payrecon's key for this purchase with another
		// amount.
		if _, err := f.fake.Create(context.Background(), provider.CreateRequest{
			IdempotencyKey: reconcile.ProviderKeyFor(p.ID), PurchaseID: p.ID, Customer: "ursula",
			Amount: 999, Currency: "usd", PaymentMethod: "pm_card_visa",
		}); err != nil {
			t.Fatal(err)
		}
		f.runUntilIdle(f.svc)
		d := f.wantState(p.ID, statemachine.Uncertain)
		if d.Purchase.EscalationReason != reconcile.EscalationIdempotencyMismatch {
			t.Fatalf("escalation %q, want idempotency_mismatch", d.Purchase.EscalationReason)
		}
		for _, a := range d.Attempts {
			if a.Key != "" && a.Key != reconcile.ProviderKeyFor(p.ID) {
				t.Fatalf("a create went out under another key: %s", a.Key)
			}
		}
	})
}

// TestRescueExpiredTakesOver: the rescue sweep takes over a job whose
// worker stalled mid-reconcile: reconciling→uncertain (lease_lost), then a
// replay settles it. The stalled worker's late answer is not applied.
func TestRescueExpiredTakesOver(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("vera")
		f.fake.Script(p.ID, fakeprovider.LostReply)
		f.runUntilIdle(f.svc)
		f.clock.Advance(30 * time.Second)

		a := f.stall(f.fake, provider.OpCreate) // reconciling, stalled

		f.clock.Advance(31 * time.Second)
		n, err := f.svc.RescueExpired(context.Background())
		if err != nil || n != 1 {
			t.Fatalf("RescueExpired: %d, %v", n, err)
		}
		close(a.gate.release)
		if err := <-a.process; !errors.Is(err, reconcile.ErrLeaseLost) {
			t.Fatalf("stalled worker: %v, want ErrLeaseLost", err)
		}
		d := f.wantState(p.ID, statemachine.Succeeded)
		wantPath(t, d, "created→submitted:submit", "submitted→uncertain:submit_response",
			"uncertain→reconciling:key_replay", "reconciling→uncertain:lease_lost",
			"uncertain→reconciling:key_replay", "reconciling→succeeded:key_replay")
		f.wantMoneyTaken(p.ID, 1)
	})
}

// TestPaymentIDOfAnotherPurchaseEscalates: the provider answers with a
// payment id the books give to another purchase. The answer cannot be
// applied; it is recorded, and the purchase goes to the operators instead
// of failing its job forever.
func TestPaymentIDOfAnotherPurchaseEscalates(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("walt")
		other := f.create("xena")
		f.fake.Script(p.ID, fakeprovider.LostReply)
		f.fake.Script(other.ID, fakeprovider.Timeout)
		f.runUntilIdle(f.svc)
		pi := f.fake.ChargesFor(p.ID)[0].ID
		// The books wrongly give p's charge to the other purchase.
		ctx := context.Background()
		err := f.store.InTx(ctx, func(tx reconcile.Tx) error {
			o, err := tx.GetPurchase(ctx, other.ID)
			if err != nil {
				return err
			}
			o.ProviderPaymentID = pi
			return tx.UpdatePurchase(ctx, o, o.State)
		})
		if err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(30 * time.Second)
		if _, err := f.svc.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		d := f.detail(p.ID)
		if d.Purchase.EscalationReason != reconcile.EscalationForeignPayment || d.Purchase.State != statemachine.Uncertain {
			t.Fatalf("purchase %s escalation %q\n%s", d.Purchase.State, d.Purchase.EscalationReason, history(d))
		}
		last := d.Attempts[len(d.Attempts)-1]
		if last.Applied || last.PaymentID != pi {
			t.Fatalf("answer recorded as %+v", last)
		}
	})
}

// raceStatusQueryAndEvent holds a worker inside its status query, lets a
// success event arrive before (eventFirst) or after the query's answer is
// applied, and checks that exactly one move to succeeded is recorded.
func raceStatusQueryAndEvent(t *testing.T, newStore stores.Factory, eventFirst bool) {
	f := setup(t, newStore, fakeprovider.Config{SettleAfter: time.Minute}, reconcile.Config{})
	p := f.create("yusuf")
	f.fake.Script(p.ID, fakeprovider.Processing)
	f.runUntilIdle(f.svc) // uncertain, payment id known
	f.clock.Advance(2 * time.Minute)
	pi := f.detail(p.ID).Purchase.ProviderPaymentID

	a := f.stall(f.fake, provider.OpStatus)

	event := func() reconcile.EventOutcome {
		outcome, err := f.svc.ApplyEvent(context.Background(), reconcile.Event{
			Provider: "stripe", ID: "evt_succeeded", Type: "payment_intent.succeeded",
			Outcome: provider.Succeeded, PaymentID: pi, PurchaseID: p.ID, PayloadHash: "h",
		})
		if err != nil {
			t.Fatal(err)
		}
		return outcome
	}
	var outcome reconcile.EventOutcome
	if eventFirst {
		outcome = event()
	}
	close(a.gate.release)
	if err := <-a.process; err != nil {
		t.Fatal(err)
	}
	if !eventFirst {
		outcome = event()
	}
	d := f.wantState(p.ID, statemachine.Succeeded)
	n := 0
	var cause reconcile.Cause
	for _, tr := range d.Transitions {
		if tr.To == statemachine.Succeeded {
			n++
			cause = tr.Cause
		}
	}
	wantCause, wantOutcome := reconcile.CauseStatusQuery, reconcile.EventStale
	if eventFirst {
		wantCause, wantOutcome = reconcile.CauseWebhook, reconcile.EventApplied
	}
	if n != 1 || cause != wantCause || outcome != wantOutcome {
		t.Fatalf("%d moves to succeeded (last by %s), event %s; want 1 by %s, event %s\n%s", n, cause, outcome, wantCause, wantOutcome, history(d))
	}
	if d.Purchase.Escalated() || d.Job.DoneAt.IsZero() {
		t.Fatalf("after the race: escalated=%v job=%+v", d.Purchase.Escalated(), d.Job)
	}
	f.wantMoneyTaken(p.ID, 1)
}

func TestEventWinsRaceWithStatusQuery(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		raceStatusQueryAndEvent(t, newStore, true)
	})
}

func TestStatusQueryWinsRaceWithEvent(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		raceStatusQueryAndEvent(t, newStore, false)
	})
}

// TestRejectedEscalatesAtOnce: the provider refuses the create without
// acting (a bad API key, say). The purchase stays submitted, goes to the
// operators at once, and once the cause is fixed the slow check resends
// the same request: one charge, and off the list.
func TestRejectedEscalatesAtOnce(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("zoe")
		f.fake.Script(p.ID, fakeprovider.Reject)
		f.runUntilIdle(f.svc)
		d := f.wantState(p.ID, statemachine.Submitted)
		if d.Purchase.EscalationReason != reconcile.EscalationProviderRejected {
			t.Fatalf("escalation %q, want provider_rejected\n%s", d.Purchase.EscalationReason, history(d))
		}
		if last := d.Attempts[len(d.Attempts)-1]; last.Outcome != provider.Rejected {
			t.Fatalf("attempt %+v", last)
		}
		f.wantMoneyTaken(p.ID, 0)
		f.clock.Advance(6 * time.Hour)
		f.runUntilIdle(f.svc)
		d = f.wantState(p.ID, statemachine.Succeeded)
		if d.Purchase.Escalated() {
			t.Fatal("still escalated after settling")
		}
		f.wantMoneyTaken(p.ID, 1)
	})
}
