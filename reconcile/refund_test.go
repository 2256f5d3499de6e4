package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// settle runs purchase p to succeeded.
func (f *fixture) settle(customer string) reconcile.Purchase {
	f.t.Helper()
	p := f.create(customer)
	f.runUntilIdle(f.svc)
	return f.wantState(p.ID, statemachine.Succeeded).Purchase
}

func (f *fixture) refund(p reconcile.Purchase, amount int64) reconcile.Refund {
	f.t.Helper()
	r, err := f.svc.CreateRefund(context.Background(), reconcile.NewRefund{
		PurchaseID: p.ID, Amount: amount, Reason: "customer returned the goods", RequestedBy: "test",
	})
	if err != nil {
		f.t.Fatalf("create refund of %s: %v", p.ID, err)
	}
	return r
}

func (f *fixture) refundDetail(id string) reconcile.RefundDetail {
	f.t.Helper()
	d, err := f.svc.Refund(context.Background(), id)
	if err != nil {
		f.t.Fatalf("refund %s: %v", id, err)
	}
	return d
}

func refundHistory(d reconcile.RefundDetail) string {
	return history(reconcile.Detail{Transitions: d.Transitions, Attempts: d.Attempts})
}

func (f *fixture) wantRefundState(id string, want statemachine.State) reconcile.RefundDetail {
	f.t.Helper()
	d := f.refundDetail(id)
	if d.Refund.State != want {
		f.t.Fatalf("refund %s: state %s, want %s\n%s", id, d.Refund.State, want, refundHistory(d))
	}
	return d
}

// moneyBack counts the provider refunds made for refund id that returned
// or may still return money.
func (f *fixture) moneyBack(id string) int {
	f.t.Helper()
	n := 0
	for _, r := range f.fake.RefundsFor(id) {
		if r.FinalStatus != fakeprovider.RefundStatusFailed && r.FinalStatus != fakeprovider.RefundStatusCanceled {
			n++
		}
	}
	return n
}

func refundPath(d reconcile.RefundDetail) []string {
	return path(reconcile.Detail{Transitions: d.Transitions})
}

// TestRefundCleanSuccess: a refund is its own process, with its own key,
// and its transitions and call are recorded apart from the purchase's.
func TestRefundCleanSuccess(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.settle("amy")
		r := f.refund(p, 100)
		if r.ProviderKey != reconcile.RefundKeyFor(r.ID) || r.ProviderRequest == nil || r.ProviderRequest.PaymentID != p.ProviderPaymentID {
			t.Fatalf("refund stored without its key and request: %+v", r)
		}
		f.runUntilIdle(f.svc)
		d := f.wantRefundState(r.ID, statemachine.Succeeded)
		if got := fmt.Sprint(refundPath(d)); got != "[created→submitted:submit submitted→succeeded:submit_response]" {
			t.Fatalf("refund path %s", got)
		}
		if f.moneyBack(r.ID) != 1 || f.fake.Refunded(p.ProviderPaymentID) != 100 {
			t.Fatalf("provider refunds for %s: %+v", r.ID, f.fake.RefundsFor(r.ID))
		}
		pd := f.wantState(p.ID, statemachine.Succeeded)
		for _, tr := range pd.Transitions {
			if tr.RefundID != "" {
				t.Fatalf("a refund's move in the purchase's own transitions: %+v", tr)
			}
		}
		if d.Refund.ProviderRefundID == "" || d.Refund.SettledAt.IsZero() {
			t.Fatalf("refund settled without its provider id or time: %+v", d.Refund)
		}
	})
}

// TestRefundLostReplyThenReconciliation: the reply to the refund create is
// lost after the provider made the refund. The refund is uncertain, never
// failed; its reconciliation replays the same key and finds the one
// refund. The fake's ledger holds exactly one refund.
func TestRefundLostReplyThenReconciliation(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.settle("bert")
		r := f.refund(p, 300)
		f.fake.ScriptRefund(r.ID, fakeprovider.LostReply)
		f.runUntilIdle(f.svc)
		f.wantRefundState(r.ID, statemachine.Uncertain)
		if n := len(f.fake.RefundsFor(r.ID)); n != 1 {
			t.Fatalf("%d refunds at the provider after the lost reply, want 1", n)
		}
		f.clock.Advance(30 * time.Second)
		f.runUntilIdle(f.svc)
		d := f.wantRefundState(r.ID, statemachine.Succeeded)
		if got := fmt.Sprint(refundPath(d)); got != "[created→submitted:submit submitted→uncertain:submit_response uncertain→reconciling:key_replay reconciling→succeeded:key_replay]" {
			t.Fatalf("refund path %s\n%s", got, refundHistory(d))
		}
		if n := len(f.fake.RefundsFor(r.ID)); n != 1 {
			t.Fatalf("%d refunds at the provider, want exactly 1", n)
		}
		if n := f.fake.RefundCreateCalls(r.ProviderKey); n != 2 {
			t.Fatalf("%d refund creates under the key, want 2 (the lost one and its replay)", n)
		}
		for _, a := range d.Attempts {
			if a.Op == provider.OpRefundCreate && a.Key != r.ProviderKey {
				t.Fatalf("refund create sent with key %q, want the stable key %q", a.Key, r.ProviderKey)
			}
		}
	})
}

// TestRefundTimeoutThenNotFoundIsNeverFailed: a refund whose outcome stays
// unknown past the key's retention is looked for by listing the payment's
// refunds; finding none is not a failure: it stays uncertain and goes to
// the operators, and no refund is ever sent under a new key.
func TestRefundTimeoutThenNotFoundIsNeverFailed(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.settle("cora")
		r := f.refund(p, 50)
		f.fake.ScriptRefund(r.ID, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout)
		f.runUntilIdle(f.svc)
		f.clock.Advance(30 * time.Hour) // past the key's retention
		for range 4 {
			f.runUntilIdle(f.svc)
			f.clock.Advance(2 * time.Hour)
		}
		d := f.wantRefundState(r.ID, statemachine.Uncertain)
		if !d.Refund.Escalated() || d.Refund.EscalationReason != reconcile.EscalationKeyRetentionExpired {
			t.Fatalf("refund not escalated for the expired key: %+v\n%s", d.Refund, refundHistory(d))
		}
		if n := len(f.fake.RefundsFor(r.ID)); n != 0 {
			t.Fatalf("%d refunds at the provider, want none", n)
		}
		for _, a := range d.Attempts {
			if a.Op == provider.OpRefundCreate && a.At.After(d.Refund.FirstAttemptAt.Add(24*time.Hour)) {
				t.Fatalf("a refund create after the key's retention: %+v", a)
			}
		}
	})
}

// TestConcurrentRefundsExceedingAmount: two refund requests at once that
// together exceed the payment: one is stored, the other refused with
// ErrRefundExceeds, and nothing is ever sent for it.
func TestConcurrentRefundsExceedingAmount(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.settle("dora") // 300
		var wg sync.WaitGroup
		errs := make([]error, 2)
		refunds := make([]reconcile.Refund, 2)
		start := make(chan struct{})
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				refunds[i], errs[i] = f.svc.CreateRefund(context.Background(), reconcile.NewRefund{
					PurchaseID: p.ID, Amount: 200, Reason: fmt.Sprintf("request %d", i),
				})
			}()
		}
		close(start)
		wg.Wait()
		ok, refused := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, reconcile.ErrRefundExceeds):
				refused++
			default:
				t.Fatalf("refund: %v", err)
			}
		}
		if ok != 1 || refused != 1 {
			t.Fatalf("%d stored, %d refused; want 1 and 1 (errors %v)", ok, refused, errs)
		}
		f.runUntilIdle(f.svc)
		if got := f.fake.Refunded(p.ProviderPaymentID); got != 200 {
			t.Fatalf("provider refunded %d of the payment, want 200", got)
		}
		if n := len(f.fake.RefundsOf(p.ProviderPaymentID)); n != 1 {
			t.Fatalf("%d refunds sent, want 1", n)
		}
		// The refused request left nothing behind.
		rs, err := f.svc.Refunds(context.Background(), p.ID)
		if err != nil || len(rs) != 1 {
			t.Fatalf("purchase's refunds: %d, %v; want 1", len(rs), err)
		}
	})
}

// TestRefundRefusedBeforeAnythingIsStored: bad requests are refused with a
// clear error and store nothing.
func TestRefundRefusedBeforeAnythingIsStored(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.settle("edda")
		pending := f.create("fred") // never run: still created
		for _, tc := range []struct {
			name string
			nr   reconcile.NewRefund
			want error
		}{
			{"zero amount", reconcile.NewRefund{PurchaseID: p.ID, Amount: 0, Reason: "x"}, reconcile.ErrInvalid},
			{"no reason", reconcile.NewRefund{PurchaseID: p.ID, Amount: 10}, reconcile.ErrInvalid},
			{"unknown purchase", reconcile.NewRefund{PurchaseID: "pur_nope", Amount: 10, Reason: "x"}, reconcile.ErrNotFound},
			{"not succeeded", reconcile.NewRefund{PurchaseID: pending.ID, Amount: 10, Reason: "x"}, reconcile.ErrNotRefundable},
			{"more than the payment", reconcile.NewRefund{PurchaseID: p.ID, Amount: 301, Reason: "x"}, reconcile.ErrRefundExceeds},
		} {
			if _, err := f.svc.CreateRefund(context.Background(), tc.nr); !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			}
		}
		rs, err := f.svc.Refunds(context.Background(), p.ID)
		if err != nil || len(rs) != 0 {
			t.Fatalf("refunds after refused requests: %d, %v", len(rs), err)
		}
	})
}

// TestStaleRefundPendingAfterSuccess: a "pending" that arrives after the
// refund succeeded, by webhook or by lookup, changes nothing.
func TestStaleRefundPendingAfterSuccess(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.settle("gus")
		r := f.refund(p, 120)
		f.runUntilIdle(f.svc)
		d := f.wantRefundState(r.ID, statemachine.Succeeded)
		outcome, err := f.svc.ApplyEvent(context.Background(), reconcile.Event{
			Provider: "stripe", ID: "evt_stale_refund", Type: "refund.updated", Outcome: provider.Pending,
			PaymentID: d.Refund.ProviderRefundID, PurchaseID: p.ID, Amount: 120, Currency: "usd",
			Refund: true, RefundID: r.ID, Refunded: p.ProviderPaymentID, PayloadHash: "stale",
			Created: f.clock.Now().Add(time.Minute),
		})
		if err != nil || outcome != reconcile.EventStale {
			t.Fatalf("stale pending event: %s, %v; want stale", outcome, err)
		}
		after := f.wantRefundState(r.ID, statemachine.Succeeded)
		if after.Refund.Version != d.Refund.Version || after.Refund.Escalated() {
			t.Fatalf("a stale pending changed the refund: %+v → %+v", d.Refund, after.Refund)
		}
		// A failure after the success is a disagreement for a human, never
		// a silent change of the books.
		outcome, err = f.svc.ApplyEvent(context.Background(), reconcile.Event{
			Provider: "stripe", ID: "evt_refund_failed", Type: "refund.failed", Outcome: provider.Failed,
			PaymentID: d.Refund.ProviderRefundID, PurchaseID: p.ID, Amount: 120, Currency: "usd",
			Refund: true, RefundID: r.ID, Refunded: p.ProviderPaymentID, PayloadHash: "failed",
		})
		if err != nil || outcome != reconcile.EventContradiction {
			t.Fatalf("failure after success: %s, %v; want contradiction", outcome, err)
		}
		after = f.wantRefundState(r.ID, statemachine.Succeeded)
		if after.Refund.EscalationReason != reconcile.EscalationStateDisagreement {
			t.Fatalf("refund escalation %q, want state_disagreement", after.Refund.EscalationReason)
		}
	})
}

// TestRefundWebhookSettlesUncertainRefund: a refund whose reply was lost is
// settled by the provider's event, through the inbox, both moves recorded;
// a duplicate of the event changes nothing.
func TestRefundWebhookSettlesUncertainRefund(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.settle("hana")
		r := f.refund(p, 300)
		f.fake.ScriptRefund(r.ID, fakeprovider.LostReply)
		f.runUntilIdle(f.svc)
		f.wantRefundState(r.ID, statemachine.Uncertain)
		made := f.fake.RefundsFor(r.ID)
		if len(made) != 1 {
			t.Fatalf("%d provider refunds, want 1", len(made))
		}
		ev := reconcile.Event{
			Provider: "stripe", ID: "evt_refund_ok", Type: "refund.updated", Outcome: provider.Succeeded,
			PaymentID: made[0].ID, PurchaseID: p.ID, Amount: 300, Currency: "usd",
			Refund: true, RefundID: r.ID, Refunded: p.ProviderPaymentID, PayloadHash: "ok",
		}
		for i, want := range []reconcile.EventOutcome{reconcile.EventApplied, reconcile.EventDuplicate} {
			if outcome, err := f.svc.ApplyEvent(context.Background(), ev); err != nil || outcome != want {
				t.Fatalf("delivery %d: %s, %v; want %s", i+1, outcome, err, want)
			}
		}
		d := f.wantRefundState(r.ID, statemachine.Succeeded)
		if got := fmt.Sprint(refundPath(d)); got != "[created→submitted:submit submitted→uncertain:submit_response uncertain→reconciling:webhook reconciling→succeeded:webhook]" {
			t.Fatalf("refund path %s", got)
		}
		f.clock.Advance(time.Hour)
		f.runUntilIdle(f.svc) // completes the job; sends nothing
		if n := f.fake.RefundCreateCalls(r.ProviderKey); n != 1 {
			t.Fatalf("%d refund creates, want 1", n)
		}
	})
}

// TestOperatorRefundsDuplicateCharge: a second charge made outside
// payrecon is found by the audit; the operator's "refund this charge"
// returns it through the refund process, and the provider ends with one
// net charge for the purchase, every step audited.
func TestOperatorRefundsDuplicateCharge(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		start := f.clock.Now()
		p := f.settle("ines")
		dup := f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: p.ID, Amount: p.Amount, Currency: p.Currency})
		f.clock.Advance(time.Minute)
		ctx := context.Background()
		if _, err := f.svc.Audit(ctx, provider.Window{From: start.Add(-time.Minute), Until: f.clock.Now()}); err != nil {
			t.Fatalf("audit: %v", err)
		}
		findings, err := f.svc.Findings(ctx, reconcile.AnyAccount, false)
		if err != nil {
			t.Fatal(err)
		}
		var found *reconcile.Finding
		for i := range findings {
			if findings[i].Kind == reconcile.FindingDuplicateCharge && findings[i].PaymentID == dup.ID {
				found = &findings[i]
			}
		}
		if found == nil {
			t.Fatalf("no duplicate_charge finding about %s: %+v", dup.ID, findings)
		}
		if n := f.fake.NetCharges(p.ID); n != 2 {
			t.Fatalf("%d net charges before the refund, want 2", n)
		}
		if _, err := f.svc.RefundCharge(ctx, found.ID, 0, "olga", ""); !errors.Is(err, reconcile.ErrInvalid) {
			t.Fatalf("refund without evidence: %v, want ErrInvalid", err)
		}
		r, err := f.svc.RefundCharge(ctx, found.ID, 0, "olga", "two charges for one purchase in the dashboard")
		if err != nil {
			t.Fatalf("refund this charge: %v", err)
		}
		if r.PaymentID != dup.ID || r.Amount != dup.Amount || r.FindingID != found.ID {
			t.Fatalf("refund of the finding's charge: %+v", r)
		}
		f.runUntilIdle(f.svc)
		d := f.wantRefundState(r.ID, statemachine.Succeeded)
		if n := f.fake.NetCharges(p.ID); n != 1 {
			t.Fatalf("%d net charges after the operator's refund, want 1", n)
		}
		if got := f.fake.Refunded(p.ProviderPaymentID); got != 0 {
			t.Fatalf("the purchase's own payment was refunded %d", got)
		}
		if len(d.Transitions) == 0 || len(d.Attempts) == 0 {
			t.Fatalf("refund not audited:\n%s", refundHistory(d))
		}
		c, err := f.svc.Case(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		var action *reconcile.OperatorAction
		for i := range c.Actions {
			if c.Actions[i].RefundID == r.ID {
				action = &c.Actions[i]
			}
		}
		if action == nil || action.Operator != "olga" || action.Evidence == "" {
			t.Fatalf("operator action not recorded with the refund: %+v", c.Actions)
		}
	})
}

// TestRaceWorkersWithRefundFaults: 4 workers race over 500 purchases, each
// succeeded one with one or two partial refunds, 30% of charge and refund
// creates faulty. Every refund ends terminal or escalated, at most one
// provider refund per refund id moved money, no payment is refunded
// beyond its amount, and every refund's chain of transitions is unbroken
// and in the refund table.
func TestRaceWorkersWithRefundFaults(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		n := 500
		if testing.Short() {
			n = 100
		}
		f := setup(t, newStore, fakeprovider.Config{Seed: 11, Faults: faultMix30, RefundFaults: refundFaultMix30, SearchLag: 30 * time.Second}, reconcile.Config{})
		var workers []*reconcile.Service
		for _, id := range []string{"w1", "w2", "w3", "w4"} {
			workers = append(workers, f.service(f.fake, id, reconcile.Config{}))
		}
		ids := make([]string, n)
		for i := range ids {
			ids[i] = f.create("race").ID
		}
		raceWorkers(t, f, workers, ids, time.Hour, 40)

		var refundIDs []string
		for i, id := range ids {
			p := f.detail(id).Purchase
			if p.State != statemachine.Succeeded {
				continue
			}
			amounts := []int64{100}
			if i%2 == 0 {
				amounts = []int64{100, 150}
			}
			for _, a := range amounts {
				refundIDs = append(refundIDs, f.refund(p, a).ID)
			}
		}
		raceRefunds(t, f, workers, refundIDs, time.Hour, 40)

		states := map[statemachine.State]int{}
		escalated := 0
		for _, id := range refundIDs {
			d := f.refundDetail(id)
			r := d.Refund
			states[r.State]++
			if r.Escalated() {
				escalated++
			}
			back := f.moneyBack(id)
			switch {
			case back > 1:
				t.Errorf("refund %s: %d provider refunds moved money\n%s", id, back, refundHistory(d))
			case r.State == statemachine.Succeeded && back != 1:
				t.Errorf("succeeded refund %s has %d provider refunds, want 1", id, back)
			case r.State == statemachine.Failed && back != 0:
				t.Errorf("failed refund %s has %d provider refunds that moved money", id, back)
			}
			prev := statemachine.Created
			for _, tr := range d.Transitions {
				if err := statemachine.Refund.Transition(tr.From, tr.To); err != nil {
					t.Errorf("refund %s: audit holds a forbidden move: %v", id, err)
				}
				if tr.From != prev {
					t.Errorf("refund %s: audit chain broken: %s→%s after %s", id, tr.From, tr.To, prev)
				}
				prev = tr.To
			}
			if prev != r.State {
				t.Errorf("refund %s: audit ends in %s but state is %s", id, prev, r.State)
			}
		}
		for _, id := range ids {
			p := f.detail(id).Purchase
			if p.ProviderPaymentID == "" {
				continue
			}
			if got := f.fake.Refunded(p.ProviderPaymentID); got > p.Amount {
				t.Errorf("payment %s refunded %d, more than its %d", p.ProviderPaymentID, got, p.Amount)
			}
		}
		t.Logf("%d purchases, %d refunds: %v, %d escalated; %d refund creates, %d lookups, %d listings",
			n, len(refundIDs), states, escalated, f.fake.Calls(provider.OpRefundCreate), f.fake.Calls(provider.OpRefundGet), f.fake.Calls(provider.OpRefundList))
		if states[statemachine.Succeeded] == 0 {
			t.Fatalf("no refund succeeded: %v", states)
		}
	})
}

// refundFaultMix30 injects a fault into 30% of refund creates.
var refundFaultMix30 = fakeprovider.Faults{
	LostReply:       0.10,
	Timeout:         0.06,
	FailBefore:      0.04,
	Processing:      0.04,
	StaleProcessing: 0.03,
	Decline:         0.03,
}

// raceRefunds is raceWorkers until every refund in ids is terminal or
// escalated.
func raceRefunds(t *testing.T, f *fixture, workers []*reconcile.Service, ids []string, step time.Duration, rounds int) {
	t.Helper()
	for range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, len(workers))
		for _, w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					n, err := w.RunOnce(context.Background())
					if err != nil {
						errs <- err
						return
					}
					if n == 0 {
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("worker: %v", err)
		}
		all := true
		for _, id := range ids {
			r := f.refundDetail(id).Refund
			if !statemachine.Refund.Terminal(r.State) && !r.Escalated() {
				all = false
				break
			}
		}
		if all {
			return
		}
		f.clock.Advance(step)
	}
	t.Fatalf("refunds still unsettled after %d rounds", rounds)
}

// TestAuditMatchesRefunds: the audit from the provider's side matches
// every refund the provider made to one refund of the books. A refund
// made in the dashboard is an orphan_refund, one whose amount disagrees
// with the books a refund_mismatch; payrecon's own refund is no finding.
func TestAuditMatchesRefunds(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		start := f.clock.Now()
		ours := f.settle("jon")
		r := f.refund(ours, 100)
		f.runUntilIdle(f.svc)
		f.wantRefundState(r.ID, statemachine.Succeeded)

		other := f.settle("kai")
		orphan, err := f.fake.RefundOutside(fakeprovider.OutsideRefund{PaymentID: other.ProviderPaymentID, Amount: 50})
		if err != nil {
			t.Fatal(err)
		}
		third := f.settle("lea")
		// A refund that names a refund of the books but another amount:
		// made by hand in the dashboard with copied metadata.
		r3 := f.refund(third, 10)
		f.fake.ScriptRefund(r3.ID, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout)
		f.runUntilIdle(f.svc)
		mismatch, err := f.fake.RefundOutside(fakeprovider.OutsideRefund{PaymentID: third.ProviderPaymentID, Amount: 20, RefundID: r3.ID, PurchaseID: third.ID})
		if err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Minute)
		ctx := context.Background()
		rep, err := f.svc.Audit(ctx, provider.Window{From: start.Add(-time.Minute), Until: f.clock.Now()})
		if err != nil {
			t.Fatalf("audit: %v", err)
		}
		if rep.Refunds != 3 {
			t.Fatalf("the audit listed %d refunds, want 3", rep.Refunds)
		}
		got := map[string]reconcile.FindingKind{}
		for _, fd := range rep.New {
			got[fd.PaymentID] = fd.Kind
		}
		want := map[string]reconcile.FindingKind{
			orphan.ID:   reconcile.FindingOrphanRefund,
			mismatch.ID: reconcile.FindingRefundMismatch,
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("findings %v, want %v", got, want)
		}
		if p := f.detail(other.ID).Purchase; !p.Escalated() {
			t.Fatalf("purchase %s with a refund the books do not know is not escalated", other.ID)
		}
		if r := f.refundDetail(r3.ID).Refund; r.EscalationReason != reconcile.EscalationStateDisagreement {
			t.Fatalf("refund %s the provider disagrees with: escalation %q, want state_disagreement", r3.ID, r.EscalationReason)
		}
		if p := f.detail(third.ID).Purchase; p.Escalated() {
			t.Fatalf("purchase %s escalated (%s) for its refund's mismatch: the refund is", third.ID, p.EscalationReason)
		}
		again, err := f.svc.Audit(ctx, provider.Window{From: start.Add(-time.Minute), Until: f.clock.Now()})
		if err != nil || len(again.New) != 0 {
			t.Fatalf("a second audit of the window: %d new findings, %v; want none", len(again.New), err)
		}
	})
}

// TestEscalateOverdueRefunds: a refund uncertain longer than the limit
// goes to the operator list, stays uncertain and keeps being checked.
func TestEscalateOverdueRefunds(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{MaxUncertainAge: time.Hour})
		p := f.settle("max")
		r := f.refund(p, 30)
		f.fake.ScriptRefund(r.ID, fakeprovider.Timeout)
		f.runUntilIdle(f.svc)
		f.wantRefundState(r.ID, statemachine.Uncertain)
		ctx := context.Background()
		if n, err := f.svc.EscalateOverdueRefunds(ctx); err != nil || n != 0 {
			t.Fatalf("escalate before the limit: %d, %v", n, err)
		}
		f.clock.Advance(2 * time.Hour)
		if n, err := f.svc.EscalateOverdueRefunds(ctx); err != nil || n != 1 {
			t.Fatalf("escalate after the limit: %d, %v; want 1", n, err)
		}
		d := f.wantRefundState(r.ID, statemachine.Uncertain)
		if d.Refund.EscalationReason != reconcile.EscalationUncertainTooLong {
			t.Fatalf("escalation %q, want uncertain_too_long", d.Refund.EscalationReason)
		}
		f.runUntilIdle(f.svc) // the check goes on: the replay makes the refund
		f.wantRefundState(r.ID, statemachine.Succeeded)
		if n := f.moneyBack(r.ID); n != 1 {
			t.Fatalf("%d provider refunds, want 1", n)
		}
	})
}

// TestRefundChargeTwiceRefundsOnce: the operator's "refund this charge"
// submitted twice refunds the charge once; a second refund is refused
// with the first one's id until the first has failed.
func TestRefundChargeTwiceRefundsOnce(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		start := f.clock.Now()
		p := f.settle("nils")
		dup := f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: p.ID, Amount: p.Amount, Currency: p.Currency})
		f.clock.Advance(time.Minute)
		ctx := context.Background()
		if _, err := f.svc.Audit(ctx, provider.Window{From: start.Add(-time.Minute), Until: f.clock.Now()}); err != nil {
			t.Fatal(err)
		}
		fs, err := f.svc.Findings(ctx, reconcile.AnyAccount, false)
		if err != nil || len(fs) != 1 {
			t.Fatalf("findings: %+v, %v", fs, err)
		}
		half := dup.Amount / 2
		first, err := f.svc.RefundCharge(ctx, fs[0].ID, half, "olga", "two charges in the dashboard")
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.svc.RefundCharge(ctx, fs[0].ID, half, "olga", "two charges in the dashboard")
		if !errors.Is(err, reconcile.ErrDuplicate) || !strings.Contains(err.Error(), first.ID) {
			t.Fatalf("second submission: %v, want ErrDuplicate naming %s", err, first.ID)
		}
		f.runUntilIdle(f.svc)
		if got := f.fake.Refunded(dup.ID); got != half {
			t.Fatalf("refunded %d of the duplicate, want %d", got, half)
		}
	})
}

// TestRefundRefusedByTheProviderFails: a refund the provider refuses for
// a reason of the payment (here: a refund made in its dashboard left too
// little) made nothing under its key: it fails at once, with the
// provider's reason, and no longer holds the payment's amount.
func TestRefundRefusedByTheProviderFails(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.settle("rex") // 300
		if _, err := f.fake.RefundOutside(fakeprovider.OutsideRefund{PaymentID: p.ProviderPaymentID, Amount: 200}); err != nil {
			t.Fatal(err)
		}
		r := f.refund(p, 150)
		f.runUntilIdle(f.svc)
		d := f.wantRefundState(r.ID, statemachine.Failed)
		if d.Refund.FailureReason == "" || d.Refund.Escalated() {
			t.Fatalf("failed refund without the provider's reason, or escalated: %+v", d.Refund)
		}
		if n := f.fake.RefundCreateCalls(r.ProviderKey); n != 1 {
			t.Fatalf("%d refund creates, want 1", n)
		}
		// The failed refund holds nothing: what is left can be refunded.
		r2 := f.refund(p, 100)
		f.runUntilIdle(f.svc)
		f.wantRefundState(r2.ID, statemachine.Succeeded)
	})
}
