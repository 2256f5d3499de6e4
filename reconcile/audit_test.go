package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// auditBooks creates n purchases spread over n/10 minutes of the fake
// clock, a tenth declined and a tenth left uncertain with no charge, and
// works them until nothing is due. It returns the purchases and the window
// that covers them.
func auditBooks(t *testing.T, f *fixture, svc *reconcile.Service, n int) ([]reconcile.Purchase, provider.Window) {
	t.Helper()
	from := f.clock.Now().Add(-time.Minute)
	var ps []reconcile.Purchase
	for i := range n {
		p := f.create(fmt.Sprintf("audit-%04d", i))
		switch i % 10 {
		case 3:
			f.fake.Script(p.ID, fakeprovider.Decline)
		case 7:
			// No charge, and none while the audit runs: every replay times out.
			f.fake.Script(p.ID, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout,
				fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout)
		}
		ps = append(ps, p)
		if i%10 == 9 {
			f.runUntilIdle(svc)
			f.clock.Advance(time.Minute)
		}
	}
	f.runUntilIdle(svc)
	return ps, provider.Window{From: from, Until: f.clock.Now().Add(time.Hour)}
}

// anomalies are the discrepancies injected into the provider's ledger (or
// the books), by the finding each must produce: kind → payment ids.
type anomalies map[reconcile.FindingKind][]string

func (a anomalies) add(k reconcile.FindingKind, id string) { a[k] = append(a[k], id) }

// inject makes, among ps, second charges, orphans, late approvals,
// amount and currency mismatches and a payment the provider lost.
func inject(t *testing.T, f *fixture, ps []reconcile.Purchase, rng *rand.Rand) anomalies {
	t.Helper()
	want := anomalies{}
	by := map[statemachine.State][]reconcile.Purchase{}
	for _, p := range ps {
		d := f.detail(p.ID)
		by[d.Purchase.State] = append(by[d.Purchase.State], d.Purchase)
	}
	pick := func(st statemachine.State) reconcile.Purchase {
		list := by[st]
		if len(list) == 0 {
			t.Fatalf("no %s purchase left to spoil", st)
		}
		i := rng.IntN(len(list))
		p := list[i]
		by[st] = append(list[:i], list[i+1:]...)
		return p
	}
	for range 7 { // a second charge for a succeeded purchase, made outside
		p := pick(statemachine.Succeeded)
		c := f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: p.ID, Amount: p.Amount, Currency: p.Currency})
		want.add(reconcile.FindingDuplicateCharge, c.ID)
	}
	for i := range 5 { // money taken for no purchase, or an unknown one
		id := ""
		if i%2 == 1 {
			id = fmt.Sprintf("pur_unknown%d", i)
		}
		c := f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: id, Amount: 500, Currency: "usd"})
		want.add(reconcile.FindingOrphanCharge, c.ID)
	}
	for range 6 { // a late approval after a decline
		p := pick(statemachine.Declined)
		if _, err := f.fake.SetStatus(p.ProviderPaymentID, fakeprovider.StatusSucceeded); err != nil {
			t.Fatal(err)
		}
		want.add(reconcile.FindingStateDisagreement, p.ProviderPaymentID)
	}
	for range 4 { // a charge of another amount for a purchase still uncertain
		p := pick(statemachine.Uncertain)
		c := f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: p.ID, Amount: p.Amount + 1, Currency: p.Currency})
		want.add(reconcile.FindingAmountMismatch, c.ID)
	}
	for range 3 { // ... or of another currency
		p := pick(statemachine.Uncertain)
		c := f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: p.ID, Amount: p.Amount, Currency: "eur"})
		want.add(reconcile.FindingCurrencyMismatch, c.ID)
	}
	for range 2 { // the books hold a payment the provider does not have
		p := pick(statemachine.Succeeded)
		// ... while the provider's real charge for it, which the books no
		// longer link, is one more for the purchase.
		want.add(reconcile.FindingDuplicateCharge, p.ProviderPaymentID)
		ctx := context.Background()
		lost := "pi_lost_" + p.ID
		err := f.store.InTx(ctx, func(tx reconcile.Tx) error {
			cur, err := tx.GetPurchase(ctx, p.ID)
			if err != nil {
				return err
			}
			cur.ProviderPaymentID = lost
			return tx.UpdatePurchase(ctx, cur, cur.State)
		})
		if err != nil {
			t.Fatal(err)
		}
		want.add(reconcile.FindingMissingAtProvider, lost)
	}
	return want
}

// foundBy groups findings by kind, payment ids sorted.
func foundBy(fs []reconcile.Finding) anomalies {
	got := anomalies{}
	for _, f := range fs {
		got.add(f.Kind, f.PaymentID)
	}
	for k := range got {
		sort.Strings(got[k])
	}
	return got
}

func (a anomalies) String() string {
	var keys []string
	for k := range a {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	s := ""
	for _, k := range keys {
		ids := append([]string(nil), a[reconcile.FindingKind(k)]...)
		sort.Strings(ids)
		s += fmt.Sprintf("%s: %d %v\n", k, len(ids), ids)
	}
	return s
}

// TestAuditFindsEveryAnomalyOnce: over 1,000 purchases, a clean audit
// finds nothing; after outside charges, late approvals, amount and
// currency mismatches and a payment lost at the provider, it finds each
// exactly once, escalates the purchases concerned, and a second run finds
// nothing new.
func TestAuditFindsEveryAnomalyOnce(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{Instance: "audit"}, reconcile.Config{})
		svc := f.service(f.fake, "worker-a", reconcile.Config{BatchSize: 100, Concurrency: 8})
		ps, w := auditBooks(t, f, svc, 1000)
		ctx := context.Background()

		start := time.Now()
		rep, err := svc.Audit(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.New) != 0 || rep.Payments != len(f.fake.Charges()) {
			t.Fatalf("clean books: %d findings over %d payments (ledger %d)\n%s", len(rep.New), rep.Payments, len(f.fake.Charges()), foundBy(rep.New))
		}
		clean := time.Since(start)

		want := inject(t, f, ps, rand.New(rand.NewPCG(1, 2)))
		start = time.Now()
		rep, err = svc.Audit(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		spoiled := time.Since(start)
		if got := foundBy(rep.New); got.String() != want.String() {
			t.Fatalf("findings:\n%s\nwant:\n%s", got, want)
		}
		t.Logf("audit of %d payments: clean run %s, run with %d injected anomalies %s; found %v",
			rep.Payments, clean.Round(time.Millisecond), len(rep.New), spoiled.Round(time.Millisecond), kinds(rep.New))

		// Each purchase concerned is on the operator list, no state moved.
		for _, fd := range rep.New {
			if fd.PurchaseID == "" {
				continue
			}
			d := f.detail(fd.PurchaseID)
			if !d.Purchase.Escalated() || !d.Purchase.EscalationReason.Sticky() {
				t.Fatalf("finding %s: purchase %s escalation %q", fd.Kind, fd.PurchaseID, d.Purchase.EscalationReason)
			}
		}
		open, err := svc.Findings(ctx, reconcile.AnyAccount, false)
		if err != nil || len(open) != len(rep.New) {
			t.Fatalf("open findings: %d, %v; want %d", len(open), err, len(rep.New))
		}

		again, err := svc.Audit(ctx, w)
		if err != nil || len(again.New) != 0 {
			t.Fatalf("second run: %d new findings, %v", len(again.New), err)
		}

		// An operator closes one with a note; it leaves the open list.
		closed, err := svc.CloseFinding(ctx, open[0].ID, "olga", "refunded in the dashboard")
		if err != nil || closed.Open() || closed.ClosedBy != "olga" {
			t.Fatalf("close: %+v, %v", closed, err)
		}
		if _, err := svc.CloseFinding(ctx, open[0].ID, "olga", "again"); !errors.Is(err, reconcile.ErrConflict) {
			t.Fatalf("closing twice: %v, want ErrConflict", err)
		}
		if rest, _ := svc.Findings(ctx, reconcile.AnyAccount, false); len(rest) != len(open)-1 {
			t.Fatalf("%d open after closing one, want %d", len(rest), len(open)-1)
		}
	})
}

func kinds(fs []reconcile.Finding) map[reconcile.FindingKind]int {
	out := map[reconcile.FindingKind]int{}
	for _, f := range fs {
		out[f.Kind]++
	}
	return out
}

// crashingList fails the provider's listing on its n-th call, as a
// process dying mid-run would leave it.
type crashingList struct {
	*fakeprovider.Fake
	calls, failOn atomic.Int64
}

var errCrash = errors.New("crash in the middle of the audit")

func (c *crashingList) List(ctx context.Context, w provider.Window, gate provider.PageGate) ([]provider.Payment, error) {
	if c.calls.Add(1) == c.failOn.Load() {
		return nil, errCrash
	}
	return c.Fake.List(ctx, w, gate)
}

// TestAuditResumesAfterACrash: a run that dies midway resumes from its
// watermark: together the two runs store exactly what one clean run
// would, with no finding twice and none missed.
func TestAuditResumesAfterACrash(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{Instance: "crash"}, reconcile.Config{})
		crashing := &crashingList{Fake: f.fake}
		cfg := reconcile.Config{BatchSize: 100, Concurrency: 8, AuditChunk: 5 * time.Minute}
		svc := f.service(crashing, "worker-a", cfg)
		ps, w := auditBooks(t, f, svc, 300)
		want := inject(t, f, ps, rand.New(rand.NewPCG(3, 4)))
		ctx := context.Background()

		crashing.failOn.Store(4)
		rep, err := svc.Audit(ctx, w)
		if !errors.Is(err, errCrash) {
			t.Fatalf("first run: %v, want the crash", err)
		}
		if rep.Run.Complete() || !rep.Run.Done.After(w.From) {
			t.Fatalf("first run's watermark %s of [%s, %s): want midway", rep.Run.Done, rep.Run.From, rep.Run.Until)
		}
		first := rep.New

		again, err := svc.Audit(ctx, w)
		if err != nil || !again.Resumed || !again.Run.Complete() {
			t.Fatalf("resume: %v, resumed %v, run %+v", err, again.Resumed, again.Run)
		}
		all := append(first, again.New...)
		if got := foundBy(all); got.String() != want.String() {
			t.Fatalf("findings after the resume:\n%s\nwant:\n%s", got, want)
		}
		stored, err := svc.Findings(ctx, reconcile.AnyAccount, true)
		if err != nil || len(stored) != len(all) {
			t.Fatalf("stored %d findings, %v; want %d", len(stored), err, len(all))
		}
	})
}
