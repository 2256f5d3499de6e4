package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The scenarios of "every charge matched to one purchase": each ends
// escalated with the right reason (or a refused resolution), no purchase
// waits in reconciling without a live lease, and no provider answer is an
// error of the service.

// event builds a verified provider event about a charge of the fake.
func event(id string, o provider.Outcome, c fakeprovider.Charge, created time.Time) reconcile.Event {
	typ := map[provider.Outcome]string{
		provider.Succeeded: "payment_intent.succeeded",
		provider.Declined:  "payment_intent.payment_failed",
		provider.Pending:   "payment_intent.processing",
	}[o]
	return reconcile.Event{
		Provider: "stripe", ID: id, Type: typ, Outcome: o, PaymentID: c.ID, PurchaseID: c.PurchaseID,
		Amount: c.Amount, Currency: c.Currency, Created: created, PayloadHash: "h-" + id,
	}
}

// apply applies ev and fails the test unless it gives want with no error.
func (f *fixture) apply(ev reconcile.Event, want reconcile.EventOutcome) {
	f.t.Helper()
	got, err := f.svc.ApplyEvent(context.Background(), ev)
	if err != nil || got != want {
		f.t.Fatalf("event %s (%s %s): %s, %v; want %s", ev.ID, ev.Type, ev.PaymentID, got, err, want)
	}
}

// wantEscalated fails unless the purchase is on the operator list for
// reason, and not left reconciling without a live lease.
func (f *fixture) wantEscalated(id string, reason reconcile.EscalationReason) reconcile.Detail {
	f.t.Helper()
	d := f.detail(id)
	if !d.Purchase.Escalated() || d.Purchase.EscalationReason != reason {
		f.t.Fatalf("purchase %s (%s): escalation %q, want %q\n%s", id, d.Purchase.State, d.Purchase.EscalationReason, reason, history(d))
	}
	f.wantNotStranded(id)
	return d
}

// wantNotStranded fails if the purchase is reconciling while its job holds
// no live lease: nothing would move it on.
func (f *fixture) wantNotStranded(id string) {
	f.t.Helper()
	d := f.detail(id)
	if d.Purchase.State == statemachine.Reconciling &&
		(d.Job.LeaseOwner == "" || !d.Job.LeaseExpiresAt.After(f.clock.Now())) {
		f.t.Fatalf("purchase %s stranded in reconciling: job %+v\n%s", id, d.Job, history(d))
	}
}

// Scenario 1: a second charge succeeds while the worker's create is in
// flight. Whichever answer arrives first, the purchase is escalated as a
// duplicate charge.
func TestScenarioSecondChargeDuringCreate(t *testing.T) {
	for _, webhookFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("webhook first %v", webhookFirst), func(t *testing.T) {
			stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
				f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
				p := f.create("amy")
				a := f.stall(f.fake, provider.OpCreate) // submitted; the create is in flight
				outside := f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: p.ID, Amount: 300, Currency: "usd"})
				if webhookFirst {
					f.apply(event("evt_outside", provider.Succeeded, outside, f.clock.Now()), reconcile.EventApplied)
					close(a.gate.release)
					<-a.process
				} else {
					close(a.gate.release)
					<-a.process
					f.apply(event("evt_outside", provider.Succeeded, outside, f.clock.Now()), reconcile.EventContradiction)
				}
				f.runUntilIdle(f.svc)
				d := f.wantEscalated(p.ID, reconcile.EscalationDuplicateCharge)
				if d.Purchase.State != statemachine.Succeeded {
					t.Fatalf("state %s, want succeeded (one of the charges is the purchase's)", d.Purchase.State)
				}
				f.wantMoneyTaken(p.ID, 2) // both charges are real: a human refunds one
			})
		})
	}
}

// Scenario 2: a search finds two charges for one purchase. It is not
// settled on either: it is escalated as a duplicate charge.
func TestScenarioSearchFindsTwoCharges(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("ben")
		f.fake.Script(p.ID, fakeprovider.LostReply)
		f.runUntilIdle(f.svc)
		f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: p.ID, Amount: 300, Currency: "usd"})
		f.clock.Advance(24 * time.Hour) // past the replay margin: search only
		f.runUntilIdle(f.svc)
		d := f.wantEscalated(p.ID, reconcile.EscalationDuplicateCharge)
		if d.Purchase.State != statemachine.Uncertain {
			t.Fatalf("state %s, want uncertain: two charges settle nothing by themselves", d.Purchase.State)
		}
		if n := f.fake.Calls(provider.OpCreate); n != 1 {
			t.Fatalf("%d creates, want 1", n)
		}
	})
}

// mislabeledSearch answers every search with the first charge in the
// fake's ledger that names no purchase, as stripe-mock answered any
// query with a fixture of empty metadata.
type mislabeledSearch struct{ *fakeprovider.Fake }

func (m mislabeledSearch) Search(ctx context.Context, purchaseID string) (provider.Result, error) {
	for _, c := range m.Fake.Charges() {
		if c.PurchaseID == "" {
			return m.Fake.Status(ctx, c.ID)
		}
	}
	return provider.Result{Outcome: provider.NotFound}, nil
}

// Scenario 3: a search result whose metadata does not name the purchase is
// never applied to it.
func TestScenarioSearchResultOfNoPurchase(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		svc := f.service(mislabeledSearch{f.fake}, "worker-a", reconcile.Config{})
		p := f.create("cleo")
		f.fake.Script(p.ID, fakeprovider.Timeout)
		f.runUntilIdle(svc)
		f.fake.ChargeOutside(fakeprovider.OutsideCharge{Amount: 300, Currency: "usd"}) // no purchase id
		f.clock.Advance(24 * time.Hour)
		f.runUntilIdle(svc)
		d := f.wantEscalated(p.ID, reconcile.EscalationForeignPayment)
		if d.Purchase.State.Terminal() || d.Purchase.ProviderPaymentID != "" {
			t.Fatalf("a foreign search result was applied: %s payment %q", d.Purchase.State, d.Purchase.ProviderPaymentID)
		}
	})
}

// Scenario 4: a webhook reports another amount or currency: nothing is
// applied, the purchase is escalated.
func TestScenarioWebhookWithAnotherAmount(t *testing.T) {
	for _, tc := range []struct {
		name     string
		amount   int64
		currency string
	}{{"amount", 999, "usd"}, {"currency", 300, "eur"}} {
		t.Run(tc.name, func(t *testing.T) {
			stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
				f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
				p := f.create("dora")
				f.fake.Script(p.ID, fakeprovider.Timeout)
				f.runUntilIdle(f.svc) // uncertain, no charge yet
				c := f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: p.ID, Amount: tc.amount, Currency: tc.currency})
				f.apply(event("evt_amount", provider.Succeeded, c, f.clock.Now()), reconcile.EventContradiction)
				d := f.wantEscalated(p.ID, reconcile.EscalationAmountMismatch)
				if d.Purchase.State != statemachine.Uncertain || d.Purchase.ProviderPaymentID != "" {
					t.Fatalf("applied: %s payment %q", d.Purchase.State, d.Purchase.ProviderPaymentID)
				}
			})
		})
	}
}

// Scenario 5: a webhook, or a worker's answer, names a payment the books
// give to another purchase: a verdict, never a database error, and no
// purchase is left reconciling.
func TestScenarioPaymentOfAnotherPurchase(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		x := f.create("eve")
		f.runUntilIdle(f.svc)
		xd := f.wantState(x.ID, statemachine.Succeeded)
		y := f.create("fay")
		f.fake.Script(y.ID, fakeprovider.Timeout)
		f.runUntilIdle(f.svc)

		// The webhook: Y's metadata, X's payment id.
		ev := event("evt_foreign", provider.Succeeded, fakeprovider.Charge{ID: xd.Purchase.ProviderPaymentID, PurchaseID: y.ID, Amount: 300, Currency: "usd"}, f.clock.Now())
		f.apply(ev, reconcile.EventContradiction)
		f.wantEscalated(y.ID, reconcile.EscalationForeignPayment)
		f.wantState(x.ID, statemachine.Succeeded)

		// The worker: its search answers with X's payment named as Y's.
		svc := f.service(foreignPayment{f.fake, xd.Purchase.ProviderPaymentID}, "worker-a", reconcile.Config{})
		f.clock.Advance(24 * time.Hour)
		f.runUntilIdle(svc)
		d := f.wantEscalated(y.ID, reconcile.EscalationForeignPayment)
		if d.Purchase.State != statemachine.Uncertain || d.Job.RunAt.IsZero() {
			t.Fatalf("state %s job %+v, want uncertain and scheduled", d.Purchase.State, d.Job)
		}
	})
}

// foreignPayment answers every search with payment id, relabelled with the
// searched purchase: the books give id to another purchase.
type foreignPayment struct {
	*fakeprovider.Fake
	id string
}

func (p foreignPayment) Search(ctx context.Context, purchaseID string) (provider.Result, error) {
	res, err := p.Fake.Status(ctx, p.id)
	res.PurchaseID = purchaseID
	return res, err
}

// Scenario 6: an operator's resolution that the provider's live view
// contradicts is refused, unless overridden with a reason; the override
// records both.
func TestScenarioResolveAgainstTheProvider(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{MaxAttempts: 1})
		p := f.create("gus")
		f.fake.Script(p.ID, fakeprovider.LostReply)
		f.runUntilIdle(f.svc) // uncertain, escalated: attempts exhausted; the money was taken
		f.wantEscalated(p.ID, reconcile.EscalationAttemptsExhausted)
		ctx := context.Background()

		_, err := f.svc.Resolve(ctx, reconcile.Resolution{PurchaseID: p.ID, Operator: "olga", To: statemachine.Declined, Evidence: "customer says no"})
		if !errors.Is(err, reconcile.ErrProviderDisagrees) {
			t.Fatalf("resolve declined against a success: %v, want ErrProviderDisagrees", err)
		}
		f.wantState(p.ID, statemachine.Uncertain)

		out, err := f.svc.Resolve(ctx, reconcile.Resolution{PurchaseID: p.ID, Operator: "olga", To: statemachine.Declined,
			Evidence: "bank confirms reversal", OverrideProvider: "refunded by phone, ticket 42"})
		if err != nil || out.State != statemachine.Declined {
			t.Fatalf("override: %v, %s", err, out.State)
		}
		c, err := f.svc.Case(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		act := c.Actions[len(c.Actions)-1]
		if !strings.Contains(act.Saw, "outcome=succeeded") || !strings.Contains(act.Did, "ticket 42") {
			t.Fatalf("action %+v: want the provider's view and the override recorded", act)
		}
	})
}

// Scenario 6b: a resolution the provider agrees with goes through, and
// what the operator saw is what payrecon fetched.
func TestScenarioResolveWithTheProvider(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{MaxAttempts: 1})
		p := f.create("hal")
		f.fake.Script(p.ID, fakeprovider.LostReply)
		f.runUntilIdle(f.svc)
		out, err := f.svc.Resolve(context.Background(), reconcile.Resolution{PurchaseID: p.ID, Operator: "olga", To: statemachine.Succeeded, Evidence: "dashboard"})
		if err != nil || out.State != statemachine.Succeeded || out.ProviderPaymentID == "" {
			t.Fatalf("resolve: %v, %+v", err, out)
		}
	})
}

// Scenario 7: a success event for a purchase never submitted: a charge
// exists that the worker did not make. The worker never sends a create
// over it.
func TestScenarioChargeBeforeSubmission(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("ida")
		c := f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: p.ID, Amount: 300, Currency: "usd"})
		f.apply(event("evt_early", provider.Succeeded, c, f.clock.Now()), reconcile.EventContradiction)
		for range 3 {
			f.runUntilIdle(f.svc)
			f.clock.Advance(7 * time.Hour)
		}
		f.wantEscalated(p.ID, reconcile.EscalationContradiction)
		f.wantState(p.ID, statemachine.Created)
		if n := f.fake.CreateCalls(reconcile.ProviderKeyFor(p.ID)); n != 0 {
			t.Fatalf("%d creates over an existing charge, want none", n)
		}
		f.wantMoneyTaken(p.ID, 1)
		// The operator records the charge the provider shows.
		out, err := f.svc.Resolve(context.Background(), reconcile.Resolution{PurchaseID: p.ID, Operator: "olga", To: statemachine.Succeeded, Evidence: "charged from the dashboard"})
		if err != nil || out.State != statemachine.Succeeded {
			t.Fatalf("resolve: %v, %s", err, out.State)
		}
	})
}

// Scenario 8: a decline or cancel after a success. An older decline is a
// reordered event from an earlier attempt: stale. A newer one is
// confirmed by a status query: if the provider still says succeeded,
// nothing happens; if it says canceled, the purchase is escalated.
func TestScenarioDeclineAfterSuccess(t *testing.T) {
	for _, tc := range []struct {
		name     string
		age      time.Duration // of the decline event, relative to the success
		cancel   bool          // the provider really cancels the payment
		outcome  reconcile.EventOutcome
		escalate bool
	}{
		{"reordered older decline is stale", -time.Minute, false, reconcile.EventStale, false},
		{"newer decline refuted by the status", time.Minute, false, reconcile.EventConfirming, false},
		{"newer cancel confirmed by the status", time.Minute, true, reconcile.EventConfirming, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
				f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
				p := f.create("jon")
				f.runUntilIdle(f.svc)
				d := f.wantState(p.ID, statemachine.Succeeded)
				c := f.fake.ChargesFor(p.ID)[0]
				if tc.cancel {
					if _, err := f.fake.SetStatus(c.ID, fakeprovider.StatusCanceled); err != nil {
						t.Fatal(err)
					}
				}
				f.clock.Advance(2 * time.Minute)
				f.apply(event("evt_late", provider.Declined, c, d.Purchase.SettledAt.Add(tc.age)), tc.outcome)
				f.runUntilIdle(f.svc)
				d = f.wantState(p.ID, statemachine.Succeeded)
				if d.Purchase.Doubt != "" {
					t.Fatalf("doubt %q left unanswered", d.Purchase.Doubt)
				}
				if tc.escalate {
					f.wantEscalated(p.ID, reconcile.EscalationStateDisagreement)
				} else if d.Purchase.Escalated() {
					t.Fatalf("escalated %q, want not", d.Purchase.EscalationReason)
				}
				if d.Job.DoneAt.IsZero() {
					t.Fatalf("job %+v not done again", d.Job)
				}
			})
		})
	}
}

// Scenario 10: the claim that takes over a stalled worker's job also
// reaches the attempts limit. The takeover keeps its meaning: the
// purchase goes uncertain (lease_lost), never a fresh submit.
func TestScenarioTakeoverAtTheAttemptsLimit(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{MaxAttempts: 1})
		p := f.create("kim")
		a := f.stall(f.fake, provider.OpCreate)
		f.clock.Advance(31 * time.Second)
		b := f.service(f.fake, "worker-b", reconcile.Config{MaxAttempts: 1})
		if _, err := b.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		d := f.detail(p.ID)
		want := "submitted→uncertain:lease_lost"
		if got := path(d); len(got) < 2 || got[1] != want {
			t.Fatalf("after the takeover: %v, want %s second", got, want)
		}
		for _, tr := range d.Transitions {
			if tr.Cause == reconcile.CauseSubmitResponse && tr.Actor == "worker-b" {
				t.Fatalf("the takeover resent the create as a fresh submit:\n%s", history(d))
			}
		}
		close(a.gate.release)
		<-a.process
		f.wantNotStranded(p.ID)
		f.wantMoneyTaken(p.ID, 1)
	})
}

// A provider call cut off by a crash leaves no row of its own; the
// history still shows it as sent, with no answer recorded.
func TestCrashedCallStaysInHistory(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("lou")
		a := f.stall(f.fake, provider.OpCreate) // the process "dies" inside the call
		t.Cleanup(func() { close(a.gate.release); <-a.process })
		f.clock.Advance(31 * time.Second)
		f.runUntilIdle(f.svc) // taken over and settled by the replay
		d := f.wantState(p.ID, statemachine.Succeeded)
		var cut []reconcile.Attempt
		for _, at := range d.Attempts {
			if at.Derived {
				cut = append(cut, at)
			}
		}
		if len(cut) != 1 || cut[0].LeaseToken != a.lease.Token || cut[0].Op != provider.OpCreate ||
			cut[0].Key != reconcile.ProviderKeyFor(p.ID) || cut[0].Outcome != provider.Unknown {
			t.Fatalf("derived calls %+v, want the cut-off create of lease %d\n%s", cut, a.lease.Token, history(d))
		}
		if !d.Attempts[0].Derived {
			t.Fatalf("the cut-off call is not first in time order\n%s", history(d))
		}
	})
}

// Scenario 9: a late approval after a decline, with no webhook. The
// declined purchase's job is done and nothing looks again; the audit from
// the provider's side finds it.
func TestScenarioLateApprovalWithoutWebhooks(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		start := f.clock.Now()
		p := f.create("max")
		f.fake.Script(p.ID, fakeprovider.Decline)
		f.runUntilIdle(f.svc)
		d := f.wantState(p.ID, statemachine.Declined)
		if _, err := f.fake.SetStatus(d.Purchase.ProviderPaymentID, fakeprovider.StatusSucceeded); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Hour)
		f.runUntilIdle(f.svc)
		f.wantState(p.ID, statemachine.Declined) // the worker never looks again

		rep, err := f.svc.Audit(context.Background(), provider.Window{From: start.Add(-time.Minute), Until: f.clock.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.New) != 1 || rep.New[0].Kind != reconcile.FindingStateDisagreement || rep.New[0].PurchaseID != p.ID {
			t.Fatalf("findings %+v, want one state_disagreement for %s", rep.New, p.ID)
		}
		f.wantEscalated(p.ID, reconcile.EscalationStateDisagreement)
		f.wantState(p.ID, statemachine.Declined) // the audit never moves a purchase
	})
}

// Scenario 6c: a payment still pending at the provider may yet take the
// money: calling the purchase declined needs an override.
func TestScenarioResolveDeclinedWhilePending(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{SettleAfter: 48 * time.Hour}, reconcile.Config{})
		p := f.create("ned")
		f.fake.Script(p.ID, fakeprovider.Processing)
		f.runUntilIdle(f.svc) // uncertain, processing at the provider
		_, err := f.svc.Resolve(context.Background(), reconcile.Resolution{PurchaseID: p.ID, Operator: "olga", To: statemachine.Declined, Evidence: "customer gave up"})
		if !errors.Is(err, reconcile.ErrProviderDisagrees) {
			t.Fatalf("resolve declined over a pending payment: %v, want ErrProviderDisagrees", err)
		}
		f.wantState(p.ID, statemachine.Uncertain)
	})
}
