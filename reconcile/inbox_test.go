package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/stores"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The tests of webhooks received, then applied (inbox.go).

// uncertain creates a purchase left uncertain (processing at the
// provider) with its payment id known, and returns it with its charge.
func (f *fixture) uncertain(customer string) (reconcile.Purchase, fakeprovider.Charge) {
	f.t.Helper()
	p := f.create(customer)
	f.fake.Script(p.ID, fakeprovider.Processing)
	f.runUntilIdle(f.svc)
	f.wantState(p.ID, statemachine.Uncertain)
	charges := f.fake.ChargesFor(p.ID)
	if len(charges) != 1 {
		f.t.Fatalf("purchase %s: %d charges, want 1", p.ID, len(charges))
	}
	return p, charges[0]
}

// receive stores ev as the endpoint does and fails unless it is want.
func (f *fixture) receive(svc *reconcile.Service, ev reconcile.Event, want reconcile.EventOutcome) {
	f.t.Helper()
	got, err := svc.ReceiveEvent(context.Background(), ev)
	if got != want || (err != nil) != (want == reconcile.EventConflict) {
		f.t.Fatalf("receive %s: %s, %v; want %s", ev.ID, got, err, want)
	}
}

// drain runs svc's applier until no event is due, and returns how many
// it claimed.
func (f *fixture) drain(svc *reconcile.Service) int {
	f.t.Helper()
	total := 0
	for {
		n, err := svc.ApplyPending(context.Background())
		if err != nil {
			f.t.Fatalf("ApplyPending: %v", err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
}

// wantSettledOnce fails unless the purchase succeeded with exactly one
// move to succeeded.
func (f *fixture) wantSettledOnce(id string) {
	f.t.Helper()
	d := f.wantState(id, statemachine.Succeeded)
	n := 0
	for _, tr := range d.Transitions {
		if tr.To == statemachine.Succeeded {
			n++
		}
	}
	if n != 1 {
		f.t.Fatalf("purchase %s: %d moves to succeeded, want 1\n%s", id, n, history(d))
	}
}

func (f *fixture) inboxRow(id string) reconcile.InboxEvent {
	f.t.Helper()
	var e reconcile.InboxEvent
	err := f.store.InTx(context.Background(), func(tx reconcile.Tx) error {
		var err error
		e, err = tx.GetInboxEvent(context.Background(), "stripe", id)
		return err
	})
	if err != nil {
		f.t.Fatalf("inbox event %s: %v", id, err)
	}
	return e
}

// TestReceiveStoresOnly: a received event is in the inbox, pending,
// once ReceiveEvent returns, and nothing is applied until the applier
// runs; a repeat is a duplicate, another payload under its id a
// conflict, and neither is stored again.
func TestReceiveStoresOnly(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{SettleAfter: time.Minute}, reconcile.Config{})
		p, c := f.uncertain("c")
		ev := event("evt_ok", provider.Succeeded, c, f.clock.Now())
		f.receive(f.svc, ev, reconcile.EventReceived)
		if row := f.inboxRow("evt_ok"); row.Outcome != reconcile.EventPending {
			t.Fatalf("received event: outcome %s, want pending", row.Outcome)
		}
		f.wantState(p.ID, statemachine.Uncertain)
		f.receive(f.svc, ev, reconcile.EventDuplicate)
		other := ev
		other.PayloadHash = "another"
		f.receive(f.svc, other, reconcile.EventConflict)
		if n := f.drain(f.svc); n != 1 {
			t.Fatalf("the applier claimed %d events, want 1", n)
		}
		f.wantState(p.ID, statemachine.Succeeded)
		if row := f.inboxRow("evt_ok"); row.Outcome != reconcile.EventApplied || row.PurchaseID != p.ID {
			t.Fatalf("applied event: %+v", row)
		}
	})
}

// TestPendingAppliedInCreationOrder: a success and a stale processing
// about one purchase, received in either order and applied in one batch,
// apply in the provider's creation order: the processing adds its fact,
// then the success settles the purchase, once.
func TestPendingAppliedInCreationOrder(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		for _, successFirst := range []bool{true, false} {
			t.Run(fmt.Sprintf("success received first %v", successFirst), func(t *testing.T) {
				f := setup(t, newStore, fakeprovider.Config{SettleAfter: time.Minute}, reconcile.Config{})
				p, c := f.uncertain("c")
				t0 := f.clock.Now()
				processing := event("evt_processing", provider.Pending, c, t0.Add(5*time.Second))
				success := event("evt_success", provider.Succeeded, c, t0.Add(10*time.Second))
				order := []reconcile.Event{processing, success}
				if successFirst {
					order = []reconcile.Event{success, processing}
				}
				for _, ev := range order {
					f.receive(f.svc, ev, reconcile.EventReceived)
					f.clock.Advance(time.Millisecond)
				}
				if n := f.drain(f.svc); n != 2 {
					t.Fatalf("claimed %d, want both in one batch", n)
				}
				for _, id := range []string{"evt_processing", "evt_success"} {
					if got := f.inboxOutcome(id); got != reconcile.EventApplied {
						t.Fatalf("%s: %s, want applied (in creation order)", id, got)
					}
				}
				f.wantSettledOnce(p.ID)
			})
		}
	})
}

// failingEventStore refuses every batch of inbox outcomes, and each
// outcome of the event bad, as a store error would: the event fails
// alone. With refuseRecords > 0 it also refuses that many records of a
// failure (as PostgreSQL refuses a text it cannot store), which fails the
// batch's transaction as a whole. With racePurchase set, the batch's
// moves of that purchase do not apply, and its first conditional write
// after them loses to a concurrent writer.
type failingEventStore struct {
	reconcile.Store
	bad           atomic.Value // string
	refuseRecords atomic.Int32
	racePurchase  atomic.Value // string
	raced         atomic.Bool
}

func (s *failingEventStore) InTx(ctx context.Context, fn func(reconcile.Tx) error) error {
	return s.Store.InTx(ctx, func(tx reconcile.Tx) error { return fn(failingEventTx{tx, s}) })
}

type failingEventTx struct {
	reconcile.Tx
	s *failingEventStore
}

func (t failingEventTx) Savepoint(ctx context.Context, fn func(reconcile.Tx) error) error {
	return t.Tx.Savepoint(ctx, func(tx reconcile.Tx) error { return fn(failingEventTx{tx, t.s}) })
}

func (t failingEventTx) UpdateInboxEvents(ctx context.Context, updates []reconcile.InboxUpdate) error {
	return errors.New("batch refused")
}

func (t failingEventTx) RecordInboxFailure(ctx context.Context, f reconcile.InboxFailure) error {
	if t.s.refuseRecords.Add(-1) >= 0 {
		return errors.New("invalid byte sequence for encoding UTF8: 0x00")
	}
	return t.Tx.RecordInboxFailure(ctx, f)
}

func (t failingEventTx) ApplyMoves(ctx context.Context, moves []reconcile.Move) ([]bool, error) {
	id, _ := t.s.racePurchase.Load().(string)
	var keep []reconcile.Move
	var at []int
	applied := make([]bool, len(moves))
	for i, m := range moves {
		if m.From.ID != id {
			keep, at = append(keep, m), append(at, i)
		}
	}
	done, err := t.Tx.ApplyMoves(ctx, keep)
	for j, ok := range done {
		applied[at[j]] = ok
	}
	return applied, err
}

func (t failingEventTx) UpdatePurchase(ctx context.Context, p reconcile.Purchase, from statemachine.State) error {
	if id, _ := t.s.racePurchase.Load().(string); p.ID == id && t.s.raced.CompareAndSwap(false, true) {
		return fmt.Errorf("purchase %s moved meanwhile: %w", p.ID, reconcile.ErrConflict)
	}
	return t.Tx.UpdatePurchase(ctx, p, from)
}

func (t failingEventTx) UpdateInboxEvent(ctx context.Context, provider, eventID, purchaseID string, outcome reconcile.EventOutcome, at time.Time) error {
	if eventID == t.s.bad.Load().(string) {
		return errors.New("the disk said no")
	}
	return t.Tx.UpdateInboxEvent(ctx, provider, eventID, purchaseID, outcome, at)
}

// failingApplier returns a failingEventStore over f's store, its bad
// event bad and no purchase racing, and a service over it configured by
// cfg.
func (f *fixture) failingApplier(bad string, cfg reconcile.Config) (*failingEventStore, *reconcile.Service) {
	f.t.Helper()
	failing := &failingEventStore{Store: f.store}
	failing.bad.Store(bad)
	failing.racePurchase.Store("")
	cfg.WorkerID, cfg.Now, cfg.Logger = "applier", f.clock.Now, discardLogger()
	svc, err := reconcile.New(failing, f.fake, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return failing, svc
}

// receivedSuccesses makes n uncertain purchases and has svc receive a
// success event for each, evt_0 to evt_n-1.
func (f *fixture) receivedSuccesses(svc *reconcile.Service, n int) []reconcile.Purchase {
	f.t.Helper()
	var ps []reconcile.Purchase
	for i := range n {
		p, c := f.uncertain(fmt.Sprintf("c%d", i))
		ps = append(ps, p)
		f.receive(svc, event(fmt.Sprintf("evt_%d", i), provider.Succeeded, c, f.clock.Now()), reconcile.EventReceived)
	}
	return ps
}

// TestFailingEventSparesItsBatch: an event whose application fails is
// taken out of its batch, which applies the others; it is tried again
// after a doubling backoff, and after its last try it waits for an
// operator, who retries it once the cause is gone.
func TestFailingEventSparesItsBatch(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{SettleAfter: time.Minute}, reconcile.Config{})
		failing, svc := f.failingApplier("evt_1", reconcile.Config{InboxMaxAttempts: 3})
		ps := f.receivedSuccesses(svc, 3)
		if n := f.drain(svc); n != 3 {
			t.Fatalf("claimed %d, want 3", n)
		}
		f.wantState(ps[0].ID, statemachine.Succeeded)
		f.wantState(ps[1].ID, statemachine.Uncertain)
		f.wantState(ps[2].ID, statemachine.Succeeded)
		row := f.inboxRow("evt_1")
		if row.Outcome != reconcile.EventPending || row.Attempts != 1 || !strings.Contains(row.LastError, "the disk said no") ||
			!row.RetryAt.Equal(f.clock.Now().Add(time.Second)) {
			t.Fatalf("after its first failure: %+v", row)
		}
		// Not due before its backoff; then 2s after the second failure.
		if n := f.drain(svc); n != 0 {
			t.Fatalf("claimed %d before the backoff, want 0", n)
		}
		f.clock.Advance(time.Second)
		f.drain(svc)
		if row = f.inboxRow("evt_1"); row.Attempts != 2 || !row.RetryAt.Equal(f.clock.Now().Add(2*time.Second)) {
			t.Fatalf("after its second failure: %+v", row)
		}
		f.clock.Advance(2 * time.Second)
		f.drain(svc)
		row = f.inboxRow("evt_1")
		if row.Outcome != reconcile.EventFailed || row.Attempts != 3 {
			t.Fatalf("after its last try: %+v", row)
		}
		failed, backlog, err := svc.FailedEvents(context.Background(), 10)
		if err != nil || len(failed) != 1 || failed[0].EventID != "evt_1" || backlog.Failed != 1 || backlog.Pending != 0 {
			t.Fatalf("failed events %v, backlog %+v, %v; want evt_1 alone", failed, backlog, err)
		}

		failing.bad.Store("")
		if err := svc.RetryFailedEvent(context.Background(), "stripe", "evt_1", "ops@example.com"); err != nil {
			t.Fatal(err)
		}
		if err := svc.RetryFailedEvent(context.Background(), "stripe", "evt_0", "ops@example.com"); !errors.Is(err, reconcile.ErrNotFound) {
			t.Fatalf("retry of an applied event: %v, want ErrNotFound", err)
		}
		if n := f.drain(svc); n != 1 {
			t.Fatalf("claimed %d after the retry, want 1", n)
		}
		f.wantState(ps[1].ID, statemachine.Succeeded)
		if got := f.inboxOutcome("evt_1"); got != reconcile.EventApplied {
			t.Fatalf("retried event: %s, want applied", got)
		}
	})
}

// appliedCounter counts the events the applier reports applied, by id of
// nothing but their number: two appliers that applied one event both
// would count it twice.
type appliedCounter struct {
	countingObserver
	applied atomic.Int64
}

func (o *appliedCounter) EventApplied(_ string, outcome reconcile.EventOutcome, _ time.Duration) {
	if outcome == reconcile.EventApplied {
		o.applied.Add(1)
	}
}

// TestTwoAppliersApplyEachEventOnce: two appliers (two services over one
// store, as two processes) drain one inbox at once; each event is
// applied by one of them, and each purchase settles once.
func TestTwoAppliersApplyEachEventOnce(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{SettleAfter: time.Minute}, reconcile.Config{})
		const n = 30
		ps := f.receivedSuccesses(f.svc, n)
		var obs [2]appliedCounter
		var wg sync.WaitGroup
		for i := range obs {
			svc := f.service(f.fake, fmt.Sprintf("applier-%d", i), reconcile.Config{Observer: &obs[i], InboxBatch: 4})
			wg.Go(func() {
				for {
					k, err := svc.ApplyPending(context.Background())
					if err != nil {
						t.Error(err)
						return
					}
					if k == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		if got := obs[0].applied.Load() + obs[1].applied.Load(); got != n {
			t.Fatalf("%d + %d events applied, want %d in all", obs[0].applied.Load(), obs[1].applied.Load(), n)
		}
		for _, p := range ps {
			f.wantSettledOnce(p.ID)
		}
		t.Logf("applier 0 applied %d, applier 1 %d", obs[0].applied.Load(), obs[1].applied.Load())
	})
}

// TestBatchThatFailsWholeIsAppliedOneByOne: when a batch's transaction
// fails as a whole (here, the record of its bad event's failure is
// refused), each event is applied in a transaction of its own: the good
// ones apply, and the bad one's failure is recorded with its backoff.
// A batch of the bad event alone goes the same way.
func TestBatchThatFailsWholeIsAppliedOneByOne(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{SettleAfter: time.Minute}, reconcile.Config{})
		failing, svc := f.failingApplier("evt_1", reconcile.Config{})
		ps := f.receivedSuccesses(svc, 3)
		failing.refuseRecords.Store(1)
		if _, err := svc.ApplyPending(context.Background()); err != nil {
			t.Fatalf("ApplyPending: %v", err)
		}
		f.wantState(ps[0].ID, statemachine.Succeeded)
		f.wantState(ps[1].ID, statemachine.Uncertain)
		f.wantState(ps[2].ID, statemachine.Succeeded)
		if row := f.inboxRow("evt_1"); row.Outcome != reconcile.EventPending || row.Attempts != 1 || !strings.Contains(row.LastError, "the disk said no") {
			t.Fatalf("the bad event, one by one: %+v", row)
		}

		f.clock.Advance(time.Second)
		failing.refuseRecords.Store(1)
		if n, err := svc.ApplyPending(context.Background()); n != 1 || err != nil {
			t.Fatalf("ApplyPending of the bad event alone: %d, %v", n, err)
		}
		if row := f.inboxRow("evt_1"); row.Outcome != reconcile.EventPending || row.Attempts != 2 {
			t.Fatalf("the bad event, alone: %+v", row)
		}
	})
}

// TestLostRaceIsNoFailure: an event whose conditional write loses to a
// concurrent writer is judged again at once, and no try is counted.
func TestLostRaceIsNoFailure(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{SettleAfter: time.Minute}, reconcile.Config{})
		failing, svc := f.failingApplier("", reconcile.Config{})
		p, c := f.uncertain("c")
		failing.racePurchase.Store(p.ID)
		f.receive(svc, event("evt_race", provider.Succeeded, c, f.clock.Now()), reconcile.EventReceived)
		if n, err := svc.ApplyPending(context.Background()); n != 1 || err != nil {
			t.Fatalf("ApplyPending: %d, %v", n, err)
		}
		if !failing.raced.Load() {
			t.Fatal("the race was never run")
		}
		f.wantState(p.ID, statemachine.Succeeded)
		if row := f.inboxRow("evt_race"); row.Outcome != reconcile.EventApplied || row.Attempts != 0 || row.LastError != "" {
			t.Fatalf("an event that lost a race: %+v, want applied with no try counted", row)
		}
	})
}

// TestReceivedEventsMeetRefundsAndOutbox: what the applier applies tells
// the shop as the request path did, in the purchase's sequence: a
// purchase settled by a received success event has its
// purchase.succeeded, and a refund settled by a received refund event its
// refund.succeeded after it, the refund moving through reconciling by
// the webhook's cause.
func TestReceivedEventsMeetRefundsAndOutbox(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{SettleAfter: time.Minute}, reconcile.Config{})
		p, c := f.uncertain("c")
		f.receive(f.svc, event("evt_paid", provider.Succeeded, c, f.clock.Now()), reconcile.EventReceived)
		f.drain(f.svc)
		f.wantSettledOnce(p.ID)
		p = f.detail(p.ID).Purchase

		f.clock.Advance(2 * time.Minute) // settled at the provider too
		r := f.refund(p, 300)
		f.fake.ScriptRefund(r.ID, fakeprovider.LostReply)
		f.runUntilIdle(f.svc)
		f.wantRefundState(r.ID, statemachine.Uncertain)
		made := f.fake.RefundsFor(r.ID)
		if len(made) != 1 {
			t.Fatalf("%d provider refunds, want 1", len(made))
		}
		f.receive(f.svc, reconcile.Event{
			Provider: "stripe", ID: "evt_refunded", Type: "refund.updated", Outcome: provider.Succeeded,
			PaymentID: made[0].ID, PurchaseID: p.ID, Amount: 300, Currency: "usd",
			Refund: true, RefundID: r.ID, Refunded: p.ProviderPaymentID, PayloadHash: "refunded",
		}, reconcile.EventReceived)
		if n := f.drain(f.svc); n != 1 {
			t.Fatalf("claimed %d, want the refund event", n)
		}
		d := f.wantRefundState(r.ID, statemachine.Succeeded)
		if got := fmt.Sprint(refundPath(d)); !strings.HasSuffix(got, "uncertain→reconciling:webhook reconciling→succeeded:webhook]") {
			t.Fatalf("refund path %s", got)
		}
		out := outboxOf(t, f.store, p.ID)
		types := outboxTypes(out)
		if fmt.Sprint(types) != "[purchase.succeeded refund.succeeded]" {
			t.Fatalf("outbox of %s: %v, want purchase.succeeded then refund.succeeded", p.ID, types)
		}
		if out[0].Sequence != 1 || out[1].Sequence != 2 {
			t.Fatalf("sequences %d, %d; want 1, 2", out[0].Sequence, out[1].Sequence)
		}
		if n := f.fake.RefundCreateCalls(r.ProviderKey); n != 1 {
			t.Fatalf("%d refund creates, want 1", n)
		}
	})
}
