package reconcile_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/events"
	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// outboxOf returns a purchase's outbox events.
func outboxOf(t *testing.T, st reconcile.Store, id string) []reconcile.OutboxEvent {
	t.Helper()
	var out []reconcile.OutboxEvent
	if err := st.InTx(t.Context(), func(tx reconcile.Tx) error {
		var err error
		out, err = tx.ListOutbox(t.Context(), id)
		return err
	}); err != nil {
		t.Fatalf("list outbox of %s: %v", id, err)
	}
	return out
}

func outboxTypes(es []reconcile.OutboxEvent) []events.Type {
	var out []events.Type
	for _, e := range es {
		out = append(out, e.Type)
	}
	return out
}

// TestOutboxEventsOfSettlements: a purchase that succeeds or is declined
// writes one event of that type, numbered 1, whose stored bytes are a
// valid event saying so; an operator's resolution of an escalated
// purchase writes its events after the escalation's.
func TestOutboxEventsOfSettlements(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		for _, tc := range []struct {
			name   string
			method string
			want   statemachine.State
			typ    events.Type
		}{
			{"succeeded", "", statemachine.Succeeded, events.PurchaseSucceeded},
			{"declined", fakeprovider.PaymentMethodDeclined, statemachine.Declined, events.PurchaseDeclined},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
				p, err := f.svc.CreatePurchase(t.Context(), reconcile.NewPurchase{Customer: "c", Amount: 300, Currency: "usd", PaymentMethod: tc.method})
				if err != nil {
					t.Fatal(err)
				}
				f.runUntilIdle(f.svc)
				f.wantState(p.ID, tc.want)
				got := outboxOf(t, f.store, p.ID)
				if len(got) != 1 || got[0].Type != tc.typ || got[0].Sequence != 1 {
					t.Fatalf("outbox of %s: %v, want one %s numbered 1", p.ID, outboxTypes(got), tc.typ)
				}
				ev, err := events.Unmarshal(got[0].Payload)
				if err != nil {
					t.Fatal(err)
				}
				if ev.ID != got[0].ID || ev.PurchaseID != p.ID || ev.Sequence != 1 || !bytes.Contains(ev.Data, []byte(`"state":"`+string(tc.want)+`"`)) {
					t.Fatalf("stored event %s does not match its row %+v", got[0].Payload, got[0])
				}
			})
		}
	})
}

// crashBeforeCommit is a store whose transactions, while armed, fail
// after fn returned nil if fn wrote an outbox event: the process died
// after the change and its event were written and before the commit
// (the crash point outbox-pending), so the database rolls both back.
type crashBeforeCommit struct {
	reconcile.Store
	armed   atomic.Bool
	crashes atomic.Int64
}

var errCrashed = errors.New("crashed before the commit")

func (s *crashBeforeCommit) InTx(ctx context.Context, fn func(reconcile.Tx) error) error {
	return s.Store.InTx(ctx, func(tx reconcile.Tx) error {
		spy := &outboxSpy{Tx: tx}
		if err := fn(spy); err != nil {
			return err
		}
		if spy.wrote && s.armed.Load() {
			s.crashes.Add(1)
			return errCrashed
		}
		return nil
	})
}

type outboxSpy struct {
	reconcile.Tx
	wrote bool
}

func (t *outboxSpy) AppendOutbox(ctx context.Context, es ...events.Event) ([]reconcile.OutboxEvent, error) {
	t.wrote = true
	return t.Tx.AppendOutbox(ctx, es...)
}

// TestOutboxCommitsWithItsChange: a transaction that dies after a
// purchase's settlement and its event are written leaves neither; once
// the worker runs again both commit, together.
func TestOutboxCommitsWithItsChange(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		clock := newClock()
		st := &crashBeforeCommit{Store: newStore(t, clock.Now)}
		st.armed.Store(true)
		fake := fakeprovider.New(fakeprovider.Config{Now: clock.Now})
		svc, err := reconcile.New(st, fake, reconcile.Config{WorkerID: "w", Now: clock.Now, Logger: discardLogger(), GroupCommitOff: true})
		if err != nil {
			t.Fatal(err)
		}
		p, err := svc.CreatePurchase(t.Context(), reconcile.NewPurchase{Customer: "c", Amount: 300, Currency: "usd"})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = svc.RunOnce(t.Context()) // charges, then dies before the settlement commits
		if st.crashes.Load() == 0 {
			t.Fatal("no transaction wrote an event: nothing crashed")
		}
		d, err := svc.Purchase(t.Context(), p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.Purchase.State.Terminal() || len(outboxOf(t, st.Store, p.ID)) != 0 {
			t.Fatalf("after the crash: purchase %s with %d events; want it unsettled and none", d.Purchase.State, len(outboxOf(t, st.Store, p.ID)))
		}
		st.armed.Store(false)
		for range 20 {
			clock.Advance(time.Minute)
			if n, err := svc.RunOnce(t.Context()); err != nil {
				t.Fatal(err)
			} else if n == 0 {
				break
			}
		}
		d, err = svc.Purchase(t.Context(), p.ID)
		if err != nil {
			t.Fatal(err)
		}
		got := outboxOf(t, st.Store, p.ID)
		if d.Purchase.State != statemachine.Succeeded || !slices.Equal(outboxTypes(got), []events.Type{events.PurchaseSucceeded}) {
			t.Fatalf("after the restart: purchase %s with events %v; want succeeded with one purchase.succeeded", d.Purchase.State, outboxTypes(got))
		}
		if n := fake.MoneyTaken(p.ID); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})
}

// TestOutboxEventsOfEscalationAndResolution: a purchase whose reply was
// lost goes to the operator list (purchase.escalated), and an operator's
// resolution writes its move (purchase.succeeded) and the resolution
// (purchase.resolved, with its outcome and operator), numbered 1, 2, 3 in
// commit order.
func TestOutboxEventsOfEscalationAndResolution(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{MaxAttempts: 1})
		p := f.create("c")
		f.fake.Script(p.ID, fakeprovider.LostReply)
		if _, err := f.svc.RunOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := outboxTypes(outboxOf(t, f.store, p.ID)); !slices.Equal(got, []events.Type{events.PurchaseEscalated}) {
			t.Fatalf("after the escalation: events %v, want purchase.escalated", got)
		}
		if _, err := f.svc.Resolve(t.Context(), reconcile.Resolution{PurchaseID: p.ID, Operator: "alice", To: statemachine.Succeeded, Evidence: "the dashboard shows the charge"}); err != nil {
			t.Fatal(err)
		}
		got := outboxOf(t, f.store, p.ID)
		if !slices.Equal(outboxTypes(got), []events.Type{events.PurchaseEscalated, events.PurchaseSucceeded, events.PurchaseResolved}) || !slices.Equal(sequences(got), []int64{1, 2, 3}) {
			t.Fatalf("after the resolution: events %v numbered %v", outboxTypes(got), sequences(got))
		}
		ev, err := events.Unmarshal(got[2].Payload)
		if err != nil || !bytes.Contains(ev.Data, []byte(`"outcome":"succeeded"`)) || !bytes.Contains(ev.Data, []byte(`"operator":"alice"`)) {
			t.Fatalf("purchase.resolved: %s, %v", got[2].Payload, err)
		}
	})
}

func sequences(es []reconcile.OutboxEvent) []int64 {
	var out []int64
	for _, e := range es {
		out = append(out, e.Sequence)
	}
	return out
}

// TestOutboxEventsOfRefundsAndFindings: a refund's final state and an
// audit finding's opening and closing write their events, after the
// purchase's own, in the purchase's numbering; a finding about no
// purchase (an orphan charge) writes none.
func TestOutboxEventsOfRefundsAndFindings(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("c")
		f.runUntilIdle(f.svc)
		r, err := f.svc.CreateRefund(t.Context(), reconcile.NewRefund{PurchaseID: p.ID, Amount: 100, Reason: "customer asked"})
		if err != nil {
			t.Fatal(err)
		}
		f.runUntilIdle(f.svc)
		now := f.clock.Now()
		for _, pid := range []string{p.ID, ""} {
			if err := f.svc.Store().InTx(t.Context(), func(tx reconcile.Tx) error {
				_, err := tx.InsertFinding(t.Context(), reconcile.Finding{
					Provider: "stripe", PaymentID: "pi_other_" + pid, Kind: reconcile.FindingDuplicateCharge, PurchaseID: pid,
					Amount: 300, Currency: "usd", Status: "succeeded", Evidence: "a second charge", FoundAt: now,
				})
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		fs, err := f.svc.Findings(t.Context(), reconcile.AnyAccount, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fs {
			if _, err := f.svc.CloseFinding(t.Context(), fd.ID, "alice", "refunded"); err != nil {
				t.Fatal(err)
			}
		}
		got := outboxOf(t, f.store, p.ID)
		want := []events.Type{events.PurchaseSucceeded, events.RefundSucceeded, events.FindingOpened, events.FindingClosed}
		if !slices.Equal(outboxTypes(got), want) || !slices.Equal(sequences(got), []int64{1, 2, 3, 4}) {
			t.Fatalf("events %v numbered %v, want %v numbered 1 to 4", outboxTypes(got), sequences(got), want)
		}
		if got[1].RefundID != r.ID {
			t.Fatalf("refund event of %q, want %s", got[1].RefundID, r.ID)
		}
	})
}
