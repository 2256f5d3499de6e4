package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/events"
	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/stores"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// disputeEvents returns the fake's dispute events created at or after
// since, oldest first, as the inbox stores them.
func (f *fixture) disputeEvents(since time.Time) []reconcile.Event {
	f.t.Helper()
	var out []reconcile.Event
	q := provider.EventQuery{Since: since, Types: provider.DisputeEventTypes}
	for {
		page, err := f.fake.ListEvents(context.Background(), q)
		if err != nil {
			f.t.Fatalf("list the fake's dispute events: %v", err)
		}
		for _, ev := range page.Events {
			out = append(out, reconcile.EventFromProvider("stripe", ev, "", []byte(ev.Payload)))
		}
		if !page.HasMore {
			break
		}
		q.After = page.Next
	}
	slices.Reverse(out)
	return out
}

// deliver receives events as the webhook endpoint does and has the
// applier apply them, returning each one's outcome on its inbox row.
func (f *fixture) deliver(evs ...reconcile.Event) []reconcile.EventOutcome {
	f.t.Helper()
	ctx := context.Background()
	for _, ev := range evs {
		if _, err := f.svc.ReceiveEvent(ctx, ev); err != nil {
			f.t.Fatalf("receive %s: %v", ev.ID, err)
		}
	}
	for {
		n, err := f.svc.ApplyPending(ctx)
		if err != nil {
			f.t.Fatalf("apply pending: %v", err)
		}
		if n == 0 {
			break
		}
	}
	var out []reconcile.EventOutcome
	for _, ev := range evs {
		var row reconcile.InboxEvent
		if err := f.store.InTx(ctx, func(tx reconcile.Tx) error {
			var err error
			row, err = tx.GetInboxEvent(ctx, ev.Provider, ev.ID)
			return err
		}); err != nil {
			f.t.Fatalf("inbox row of %s: %v", ev.ID, err)
		}
		out = append(out, row.Outcome)
	}
	return out
}

// disputesOf returns a purchase's disputes with their histories.
func (f *fixture) disputesOf(purchaseID string) []reconcile.DisputeRecord {
	f.t.Helper()
	c, err := f.svc.Case(context.Background(), purchaseID)
	if err != nil {
		f.t.Fatalf("case %s: %v", purchaseID, err)
	}
	return c.Disputes
}

// theDispute returns the one dispute of a purchase.
func (f *fixture) theDispute(purchaseID string) reconcile.DisputeRecord {
	f.t.Helper()
	ds := f.disputesOf(purchaseID)
	if len(ds) != 1 {
		f.t.Fatalf("purchase %s has %d disputes, want 1", purchaseID, len(ds))
	}
	return ds[0]
}

func disputeMoves(r reconcile.DisputeRecord) []string {
	var out []string
	for _, t := range r.Transitions {
		out = append(out, fmt.Sprintf("%s→%s:%s", t.From, t.To, t.Cause))
	}
	return out
}

// wantRefundRefused asks for a refund of p and wants it refused as
// disputed, with nothing stored and nothing sent.
func (f *fixture) wantRefundRefused(p reconcile.Purchase) {
	f.t.Helper()
	_, err := f.svc.CreateRefund(context.Background(), reconcile.NewRefund{PurchaseID: p.ID, Amount: 100, Reason: "customer asked", RequestedBy: "test"})
	if !errors.Is(err, reconcile.ErrDisputed) {
		f.t.Fatalf("refund of a disputed payment: %v, want ErrDisputed", err)
	}
	refunds, err := f.svc.PurchaseRefunds(context.Background(), p.ID)
	if err != nil || len(refunds) != 0 {
		f.t.Fatalf("refunds stored: %d, %v; want none", len(refunds), err)
	}
	if n := len(f.fake.RefundsOf(p.ProviderPaymentID)); n != 0 {
		f.t.Fatalf("%d refunds at the provider, want none", n)
	}
}

func wantOutbox(t *testing.T, st reconcile.Store, purchaseID string, want ...events.Type) {
	t.Helper()
	got := outboxOf(t, st, purchaseID)
	if !slices.Equal(outboxTypes(got), want) {
		t.Fatalf("outbox of %s: %v, want %v", purchaseID, outboxTypes(got), want)
	}
	for i, e := range got {
		if e.Sequence != int64(i+1) {
			t.Fatalf("outbox of %s numbered %v, want 1 to %d", purchaseID, sequences(got), len(got))
		}
	}
}

// TestDisputeLost: a chargeback of a succeeded purchase, answered and
// lost. The purchase stays succeeded; the dispute is lost with its funds
// withdrawn; the shop is told dispute.opened then dispute.lost; the money
// at risk shows it while it is open; and no refund is stored or sent,
// while it is open or after it is lost.
func TestDisputeLost(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		since := f.clock.Now()
		p := f.settle("mia")
		if _, err := f.fake.OpenDispute(p.ProviderPaymentID, fakeprovider.DisputeOptions{Reason: "product_not_received"}); err != nil {
			t.Fatal(err)
		}
		// The dispute's first event already shows the money withdrawn: the
		// funds_withdrawn event after it adds nothing.
		if got := f.deliver(f.disputeEvents(since)...); !slices.Equal(got, []reconcile.EventOutcome{reconcile.EventApplied, reconcile.EventStale}) {
			t.Fatalf("created and funds_withdrawn: %v, want applied then stale", got)
		}
		d := f.theDispute(p.ID).Dispute
		if d.State != statemachine.Open || d.Inquiry || d.Withdrawn != p.Amount || d.Reason != "product_not_received" || d.EvidenceDueBy.IsZero() {
			t.Fatalf("open dispute %+v", d)
		}
		open, _, err := f.svc.OpenDisputes(context.Background(), reconcile.AnyAccount)
		if err != nil || len(open) != 1 || open[0].ID != d.ID {
			t.Fatalf("open disputes %v, %v", open, err)
		}
		if got := reconcile.MoneyAtRisk(nil, open); !slices.Equal(got, []reconcile.Money{{Amount: p.Amount, Currency: "usd"}}) {
			t.Fatalf("money at risk %v, want the disputed amount", got)
		}
		f.wantRefundRefused(p)

		f.clock.Advance(24 * time.Hour)
		since = f.clock.Now()
		for _, status := range []string{provider.DisputeUnderReview, provider.DisputeLost} {
			if _, err := f.fake.MoveDispute(d.ProviderDisputeID, status); err != nil {
				t.Fatal(err)
			}
		}
		f.deliver(f.disputeEvents(since)...)
		r := f.theDispute(p.ID)
		if r.Dispute.State != statemachine.Lost || r.Dispute.ClosedAt.IsZero() || r.Dispute.Withdrawn != p.Amount || r.Dispute.Reinstated != 0 {
			t.Fatalf("lost dispute %+v", r.Dispute)
		}
		if got := fmt.Sprint(disputeMoves(r)); got != "[open→evidence_submitted:webhook evidence_submitted→lost:webhook]" {
			t.Fatalf("dispute moves %s", got)
		}
		f.wantState(p.ID, statemachine.Succeeded)
		wantOutbox(t, f.store, p.ID, events.PurchaseSucceeded, events.DisputeOpened, events.DisputeLost)
		f.wantRefundRefused(p)
		if open, _, _ := f.svc.OpenDisputes(context.Background(), reconcile.AnyAccount); len(open) != 0 {
			t.Fatalf("%d open disputes after the loss", len(open))
		}
	})
}

// TestDisputeWon: a chargeback won: the funds are reinstated, the shop is
// told dispute.won, and the payment may be refunded again.
func TestDisputeWon(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		since := f.clock.Now()
		p := f.settle("noa")
		du, err := f.fake.OpenDispute(p.ProviderPaymentID, fakeprovider.DisputeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.fake.MoveDispute(du.ID, provider.DisputeWon); err != nil {
			t.Fatal(err)
		}
		f.deliver(f.disputeEvents(since)...)
		d := f.theDispute(p.ID).Dispute
		if d.State != statemachine.Won || d.Withdrawn != p.Amount || d.Reinstated != p.Amount {
			t.Fatalf("won dispute %+v", d)
		}
		wantOutbox(t, f.store, p.ID, events.PurchaseSucceeded, events.DisputeOpened, events.DisputeWon)
		r := f.refund(p, 100)
		f.runUntilIdle(f.svc)
		f.wantRefundState(r.ID, statemachine.Succeeded)
	})
}

// TestDisputeJudgedAgainstTheBooks: a dispute of a payment no purchase
// owns, one whose payment's metadata names another purchase, one in
// another currency and one larger than what its payment kept after a
// refund are each a finding, and nothing is applied: no dispute, no event
// to the shop, no change to the purchase.
func TestDisputeJudgedAgainstTheBooks(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		a, b := f.settle("ola"), f.settle("pia")
		r := f.refund(b, 200)
		f.runUntilIdle(f.svc)
		f.wantRefundState(r.ID, statemachine.Succeeded)
		event := func(id string, d provider.Dispute) reconcile.Event {
			d.Status, d.Reason = provider.DisputeNeedsResponse, "fraudulent"
			return reconcile.EventFromProvider("stripe", provider.Event{
				ID: "evt_" + id, Type: provider.EventDisputeCreated, Outcome: provider.Pending, PaymentID: d.PaymentID,
				Dispute: &d, Amount: d.Amount, Currency: d.Currency, Created: f.clock.Now(), Digest: "digest-" + id,
			}, "", nil)
		}
		cases := []struct {
			ev      reconcile.Event
			kind    reconcile.FindingKind
			against string // the purchase the finding names
		}{
			{event("foreign", provider.Dispute{ID: "du_foreign", PaymentID: "pi_not_ours", Amount: 100, Currency: "usd"}), reconcile.FindingForeignDispute, ""},
			{event("other", provider.Dispute{ID: "du_other", PaymentID: a.ProviderPaymentID, PurchaseID: b.ID, Amount: 100, Currency: "usd"}), reconcile.FindingDisputeMismatch, a.ID},
			{event("currency", provider.Dispute{ID: "du_currency", PaymentID: a.ProviderPaymentID, Amount: 100, Currency: "eur"}), reconcile.FindingDisputeMismatch, a.ID},
			// 300 paid, 200 refunded: 101 is more than the payment kept.
			{event("large", provider.Dispute{ID: "du_large", PaymentID: b.ProviderPaymentID, Amount: 101, Currency: "usd"}), reconcile.FindingDisputeExceeds, b.ID},
		}
		for _, c := range cases {
			if got := f.deliver(c.ev, c.ev); !slices.Equal(got, []reconcile.EventOutcome{reconcile.EventFinding, reconcile.EventFinding}) {
				t.Fatalf("%s: outcomes %v, want finding (a redelivery is the same row)", c.ev.ID, got)
			}
		}
		fs, err := f.svc.Findings(context.Background(), reconcile.AnyAccount, false)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, fd := range fs {
			got[fd.PaymentID] = string(fd.Kind) + " " + fd.PurchaseID
		}
		for _, c := range cases {
			du := c.ev.Dispute.ID
			if want := string(c.kind) + " " + c.against; got[du] != want {
				t.Errorf("finding of %s: %q, want %q", du, got[du], want)
			}
		}
		for _, p := range []reconcile.Purchase{a, b} {
			if ds := f.disputesOf(p.ID); len(ds) != 0 {
				t.Fatalf("purchase %s has %d disputes, want none applied", p.ID, len(ds))
			}
			if d := f.wantState(p.ID, statemachine.Succeeded); d.Purchase.Escalated() {
				t.Fatalf("purchase %s escalated (%s) for a dispute's finding", p.ID, d.Purchase.EscalationReason)
			}
			for _, e := range outboxTypes(outboxOf(t, f.store, p.ID)) {
				if e == events.DisputeOpened {
					t.Fatalf("purchase %s: the shop was told of a dispute that was not applied", p.ID)
				}
			}
		}
	})
}

// TestDisputeEventsRedeliveredReorderedStale: a dispute's events arrive
// newest first, then all again: the dispute ends lost once, with one
// history and one dispute.opened and one dispute.lost, and the stale
// events change nothing.
func TestDisputeEventsRedeliveredReorderedStale(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		since := f.clock.Now()
		p := f.settle("quinn")
		du, err := f.fake.OpenDispute(p.ProviderPaymentID, fakeprovider.DisputeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, status := range []string{provider.DisputeUnderReview, provider.DisputeLost} {
			f.clock.Advance(time.Hour)
			if _, err := f.fake.MoveDispute(du.ID, status); err != nil {
				t.Fatal(err)
			}
		}
		evs := f.disputeEvents(since)
		if len(evs) < 4 {
			t.Fatalf("%d dispute events, want created, funds_withdrawn, updated, closed", len(evs))
		}
		newestFirst := slices.Clone(evs)
		slices.Reverse(newestFirst)
		var outcomes []reconcile.EventOutcome
		for _, ev := range newestFirst {
			outcomes = append(outcomes, f.deliver(ev)...)
		}
		// The closing event, first to arrive, decides the dispute; the
		// older ones after it are stale.
		if outcomes[0] != reconcile.EventApplied || slices.ContainsFunc(outcomes[1:], func(o reconcile.EventOutcome) bool { return o != reconcile.EventStale }) {
			t.Fatalf("outcomes newest first %v, want applied then stale", outcomes)
		}
		for _, ev := range evs {
			if o, err := f.svc.ReceiveEvent(context.Background(), ev); err != nil || o != reconcile.EventDuplicate {
				t.Fatalf("redelivery of %s (%s): %s, %v; want duplicate", ev.ID, ev.Type, o, err)
			}
		}
		f.deliver()
		r := f.theDispute(p.ID)
		if r.Dispute.State != statemachine.Lost || r.Dispute.Withdrawn != p.Amount {
			t.Fatalf("dispute %+v", r.Dispute)
		}
		if got := fmt.Sprint(disputeMoves(r)); got != "[open→lost:webhook]" {
			t.Fatalf("dispute moves %s: the closing event, first to arrive, decides it", got)
		}
		wantOutbox(t, f.store, p.ID, events.PurchaseSucceeded, events.DisputeOpened, events.DisputeLost)
	})
}

// TestAuditFindsDisputeWithLostWebhooks: a dispute opened and lost while
// every webhook about it was lost is found by the audit from the
// provider's side: stored lost, told to the shop, and a second audit
// changes nothing.
func TestAuditFindsDisputeWithLostWebhooks(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		start := f.clock.Now()
		p := f.settle("ria")
		du, err := f.fake.OpenDispute(p.ProviderPaymentID, fakeprovider.DisputeOptions{Amount: 200})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.fake.MoveDispute(du.ID, provider.DisputeLost); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Minute)
		w := provider.Window{From: start.Add(-time.Minute), Until: f.clock.Now()}
		rep, err := f.svc.Audit(context.Background(), w)
		if err != nil {
			t.Fatalf("audit: %v", err)
		}
		if rep.Disputes != 1 || len(rep.New) != 0 {
			t.Fatalf("audit listed %d disputes with %d findings, want 1 and none", rep.Disputes, len(rep.New))
		}
		r := f.theDispute(p.ID)
		if r.Dispute.State != statemachine.Lost || r.Dispute.Amount != 200 || r.Dispute.ProviderDisputeID != du.ID {
			t.Fatalf("dispute %+v", r.Dispute)
		}
		if got := fmt.Sprint(disputeMoves(r)); got != "[open→lost:audit]" {
			t.Fatalf("dispute moves %s", got)
		}
		wantOutbox(t, f.store, p.ID, events.PurchaseSucceeded, events.DisputeOpened, events.DisputeLost)
		if _, err := f.svc.Audit(context.Background(), w); err != nil {
			t.Fatal(err)
		}
		wantOutbox(t, f.store, p.ID, events.PurchaseSucceeded, events.DisputeOpened, events.DisputeLost)
	})
}

// TestRefundHeldWhileDisputed: a refund stored before its payment was
// disputed is held by the worker, with nothing sent, while the
// chargeback is open, and sent at once when the dispute is won (its job
// woken, not left to the hold's slow cadence).
func TestRefundHeldWhileDisputed(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		since := f.clock.Now()
		p := f.settle("sam")
		r := f.refund(p, 100)
		du, err := f.fake.OpenDispute(p.ProviderPaymentID, fakeprovider.DisputeOptions{Amount: 200})
		if err != nil {
			t.Fatal(err)
		}
		f.deliver(f.disputeEvents(since)...)
		f.runUntilIdle(f.svc)
		f.wantRefundState(r.ID, statemachine.Created)
		if n := f.fake.RefundCreateCalls(r.ProviderKey); n != 0 {
			t.Fatalf("%d refund creates while disputed, want none", n)
		}
		since = f.clock.Now()
		if _, err := f.fake.MoveDispute(du.ID, provider.DisputeWon); err != nil {
			t.Fatal(err)
		}
		f.deliver(f.disputeEvents(since)...)
		f.runUntilIdle(f.svc)
		f.wantRefundState(r.ID, statemachine.Succeeded)
	})
}

// TestRefundHeldThenDisputeLost: a refund held while its payment's
// chargeback was open is sent once the dispute is lost; the provider
// refuses it, and it fails with nothing refunded and the shop told,
// rather than wait for ever. A chargeback of the whole payment while that
// refund was pending is still stored (a pending refund may fail), and
// its loss, with the refund, is a finding.
func TestRefundHeldThenDisputeLost(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		since := f.clock.Now()
		p := f.settle("tom")
		r := f.refund(p, 100)
		du, err := f.fake.OpenDispute(p.ProviderPaymentID, fakeprovider.DisputeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.deliver(f.disputeEvents(since)...)
		if d := f.theDispute(p.ID).Dispute; d.State != statemachine.Open || d.Amount != p.Amount {
			t.Fatalf("dispute %+v, want the whole payment open", d)
		}
		f.runUntilIdle(f.svc)
		f.wantRefundState(r.ID, statemachine.Created)
		since = f.clock.Now()
		if _, err := f.fake.MoveDispute(du.ID, provider.DisputeLost); err != nil {
			t.Fatal(err)
		}
		f.deliver(f.disputeEvents(since)...)
		f.runUntilIdle(f.svc)
		f.wantRefundState(r.ID, statemachine.Failed)
		if n := len(f.fake.RefundsOf(p.ProviderPaymentID)); n != 0 {
			t.Fatalf("%d refunds made at the provider, want none", n)
		}
		fs, err := f.svc.Findings(context.Background(), reconcile.AnyAccount, false)
		if err != nil || len(fs) != 1 || fs[0].Kind != reconcile.FindingDisputeExceeds || fs[0].PaymentID != du.ID {
			t.Fatalf("findings %+v, %v; want dispute_exceeds for %s", fs, err, du.ID)
		}
		wantOutbox(t, f.store, p.ID, events.PurchaseSucceeded, events.DisputeOpened, events.DisputeLost, events.FindingOpened, events.RefundFailed)
	})
}

// TestDisputeAuditRacesTheApplier: the audit's listing and the applier's
// webhooks bring the same disputes at the same time, from two services:
// whichever inserts a dispute first, the other loses the race, judges
// again, and each dispute is stored once, decided once and told once.
func TestDisputeAuditRacesTheApplier(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		start := f.clock.Now()
		var ps []reconcile.Purchase
		for i := range 8 {
			p := f.settle(fmt.Sprintf("race-%d", i))
			du, err := f.fake.OpenDispute(p.ProviderPaymentID, fakeprovider.DisputeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.fake.MoveDispute(du.ID, provider.DisputeLost); err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		evs := f.disputeEvents(start)
		f.clock.Advance(time.Minute)
		auditor := f.service(f.fake, "auditor", reconcile.Config{})
		ctx := context.Background()
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		wg.Go(func() {
			_, err := auditor.Audit(ctx, provider.Window{From: start.Add(-time.Minute), Until: f.clock.Now()})
			errs <- err
		})
		wg.Go(func() {
			for _, ev := range evs {
				if _, err := f.svc.ReceiveEvent(ctx, ev); err != nil {
					errs <- err
					return
				}
				if _, err := f.svc.ApplyPending(ctx); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		f.deliver() // whatever the race left pending
		for _, p := range ps {
			r := f.theDispute(p.ID)
			if r.Dispute.State != statemachine.Lost || len(r.Transitions) != 1 {
				t.Fatalf("purchase %s: dispute %+v with moves %v, want lost in one move", p.ID, r.Dispute, disputeMoves(r))
			}
			wantOutbox(t, f.store, p.ID, events.PurchaseSucceeded, events.DisputeOpened, events.DisputeLost)
		}
	})
}
