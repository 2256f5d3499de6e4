package reconcile_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// hookStore runs onRead before the next transaction once a transaction
// has read purchase watch in a final state with no doubt (or, with when,
// in a state when accepts): another writer commits right between a
// worker's read and its next write.
type hookStore struct {
	reconcile.Store
	mu      sync.Mutex
	watch   string
	onRead  func()
	pending func()
	when    func(reconcile.Purchase) bool
}

func (h *hookStore) InTx(ctx context.Context, fn func(reconcile.Tx) error) error {
	h.mu.Lock()
	hook := h.pending
	h.pending = nil
	h.mu.Unlock()
	if hook != nil {
		hook()
	}
	return h.Store.InTx(ctx, func(tx reconcile.Tx) error { return fn(hookTx{tx, h}) })
}

type hookTx struct {
	reconcile.Tx
	h *hookStore
}

func (t hookTx) GetPurchase(ctx context.Context, id string) (reconcile.Purchase, error) {
	p, err := t.Tx.GetPurchase(ctx, id)
	if err == nil {
		t.h.read(p)
	}
	return p, err
}

// ClaimJobs counts the purchases a claim reads with its leases as reads.
func (h *hookStore) ClaimJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
	leases, err := h.Store.ClaimJobs(ctx, owner, limit, leaseFor)
	for _, l := range leases {
		if l.Purchase != nil {
			h.read(*l.Purchase)
		}
	}
	return leases, err
}

// read arms the hook when p is the watched purchase in the state it waits
// for.
func (h *hookStore) read(p reconcile.Purchase) {
	if p.ID == h.watch && (h.when == nil && p.State.Terminal() && p.Doubt == "" || h.when != nil && h.when(p)) {
		h.mu.Lock()
		if h.onRead != nil {
			h.pending, h.onRead = h.onRead, nil
		}
		h.mu.Unlock()
	}
}

// A doubt raised between the worker's read of a final purchase and its
// completion of the job is not lost: the job is not completed over it.
func TestDoubtRaisedBeforeFinishJobIsConfirmed(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("rev1")
		f.fake.Script(p.ID, fakeprovider.LostReply)
		f.runUntilIdle(f.svc) // uncertain; charge exists; job due in 30s
		c := f.fake.ChargesFor(p.ID)[0]
		f.apply(event("evt_ok", provider.Succeeded, c, f.clock.Now()), reconcile.EventApplied)
		f.wantState(p.ID, statemachine.Succeeded) // job still open
		if _, err := f.fake.SetStatus(c.ID, fakeprovider.StatusCanceled); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Minute)

		hs := &hookStore{Store: f.store, watch: p.ID}
		hs.onRead = func() { // the webhook lands between step's read and finishJob
			f.apply(event("evt_cancel", provider.Declined, c, f.clock.Now()), reconcile.EventConfirming)
		}
		w, err := reconcile.New(hs, f.fake, reconcile.Config{WorkerID: "worker-h", Now: f.clock.Now, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			f.clock.Advance(7 * time.Hour)
			f.runUntilIdle(f.svc)
		}
		d := f.detail(p.ID)
		t.Logf("doubt=%q job.done=%v escalated=%q", d.Purchase.Doubt, !d.Job.DoneAt.IsZero(), d.Purchase.EscalationReason)
		if d.Purchase.EscalationReason != reconcile.EscalationStateDisagreement {
			t.Fatalf("provider canceled a succeeded purchase, doubt %q never confirmed (job done %v); escalation %q",
				d.Purchase.Doubt, !d.Job.DoneAt.IsZero(), d.Purchase.EscalationReason)
		}
	})
}

// An audit by hand keeps its own watermark: the periodic audit goes on
// from its own, and covers what happened between.
func TestManualAuditLeavesNoGapForTheSweep(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		ctx := context.Background()
		if _, err := f.svc.AuditDue(ctx); err != nil { // sweep: Done = T0-5m
			t.Fatal(err)
		}
		f.clock.Advance(time.Hour)
		orphan := f.fake.ChargeOutside(fakeprovider.OutsideCharge{Amount: 500, Currency: "usd"}) // at T0+1h
		f.clock.Advance(2 * time.Hour)
		now := f.clock.Now()
		if _, err := f.svc.Audit(ctx, provider.Window{From: now.Add(-time.Hour), Until: now}); err != nil { // operator: audit --since 1h
			t.Fatal(err)
		}
		f.clock.Advance(time.Hour)
		if _, err := f.svc.AuditDue(ctx); err != nil {
			t.Fatal(err)
		}
		fs, _ := f.svc.Findings(ctx, reconcile.AnyAccount, true)
		for _, fd := range fs {
			if fd.PaymentID == orphan.ID {
				return
			}
		}
		t.Fatalf("orphan charge %s (created between the sweep's watermark and the manual window) never audited; findings %d", orphan.ID, len(fs))
	})
}

// Two charges for a purchase the books link to no payment, in different
// chunks: found as a duplicate in one run, and when the run dies between
// them and resumes.
func TestAuditFindsADuplicateAcrossAResume(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "one run", true: "resumed"}[crash], func(t *testing.T) {
			stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
				f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
				ctx := context.Background()
				start := f.clock.Now()
				p := f.create("rev3")
				f.fake.Script(p.ID, fakeprovider.Timeout, fakeprovider.Timeout)
				f.runUntilIdle(f.svc) // uncertain, no charge, no payment id
				f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: p.ID, Amount: 300, Currency: "usd"})
				f.clock.Advance(30 * time.Minute)
				f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: p.ID, Amount: 300, Currency: "usd"})
				f.clock.Advance(time.Hour)
				fl := &crashingList{Fake: f.fake}
				if crash {
					fl.failOn.Store(3) // chunk 3 of [start, start+1h)
				}
				svc := f.service(fl, "auditor", reconcile.Config{})
				w := provider.Window{From: start, Until: start.Add(time.Hour)}
				if _, err := svc.Audit(ctx, w); err != nil && !crash {
					t.Fatal(err)
				}
				if crash {
					if _, err := svc.Audit(ctx, w); err != nil {
						t.Fatal(err)
					}
				}
				fs, _ := svc.Findings(ctx, reconcile.AnyAccount, true)
				if len(fs) != 1 || fs[0].Kind != reconcile.FindingDuplicateCharge {
					t.Fatalf("findings %+v; want one duplicate_charge", fs)
				}
			})
		})
	}
}

// A finding that a charge may exist, committed between the step's read of
// a submitted purchase and its resend of the create, stops the create.
func TestNoResendAfterAFindingCommittedMeanwhile(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("rev4")
		f.fake.Script(p.ID, fakeprovider.FailBefore)
		f.runUntilIdle(f.svc) // submitted, refused before acting; resend due in 30s
		f.wantState(p.ID, statemachine.Submitted)
		f.clock.Advance(time.Minute)
		c := f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: p.ID, Amount: 999, Currency: "usd"})
		hs := &hookStore{Store: f.store, watch: p.ID, when: func(q reconcile.Purchase) bool { return q.State == statemachine.Submitted && !q.Escalated() }}
		hs.onRead = func() {
			f.apply(event("evt_amount", provider.Succeeded, c, f.clock.Now()), reconcile.EventContradiction)
		}
		w, err := reconcile.New(hs, f.fake, reconcile.Config{WorkerID: "worker-h", Now: f.clock.Now, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		d := f.detail(p.ID)
		t.Logf("state=%s escalation=%q creates=%d moneyTaken=%d", d.Purchase.State, d.Purchase.EscalationReason,
			f.fake.CreateCalls(reconcile.ProviderKeyFor(p.ID)), f.fake.MoneyTaken(p.ID))
		if n := f.fake.MoneyTaken(p.ID); n != 1 {
			t.Fatalf("a create was sent after amount_mismatch was recorded: %d charges with money taken\n%s", n, history(d))
		}
	})
}

// unknownForeign answers a search with an unrecognised status (Unknown,
// as provider/stripe's translate does) about a payment the books give to
// another purchase.
type unknownForeign struct {
	*fakeprovider.Fake
	id string
}

func (u unknownForeign) Search(ctx context.Context, purchaseID string) (provider.Result, error) {
	return provider.Result{PaymentID: u.id, PurchaseID: "pur_other", Status: "requires_something_new", Amount: 1},
		errors.New("stripe: search: payment intent has unrecognised status")
}

// An answer that settles nothing but names a payment (an error body can
// carry one) is still judged: the books give it to another purchase.
func TestUnknownAnswerAboutAForeignPaymentEscalates(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		x := f.create("rev5x")
		f.runUntilIdle(f.svc)
		xd := f.wantState(x.ID, statemachine.Succeeded)
		y := f.create("rev5y")
		f.fake.Script(y.ID, fakeprovider.Timeout)
		f.runUntilIdle(f.svc)
		f.clock.Advance(24 * time.Hour)
		svc := f.service(unknownForeign{f.fake, xd.Purchase.ProviderPaymentID}, "worker-a", reconcile.Config{})
		for range 3 {
			f.runUntilIdle(svc)
			d := f.detail(y.ID)
			t.Logf("state=%s escalation=%q job=%+v", d.Purchase.State, d.Purchase.EscalationReason, d.Job)
			f.clock.Advance(31 * time.Second)
		}
		d := f.detail(y.ID)
		if d.Purchase.EscalationReason != reconcile.EscalationForeignPayment {
			t.Fatalf("escalation %q, want foreign_payment\n%s", d.Purchase.EscalationReason, history(d))
		}
	})
}
