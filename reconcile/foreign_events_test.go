package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// inboxOutcome returns the stored outcome of the provider event id.
func (f *fixture) inboxOutcome(id string) reconcile.EventOutcome {
	f.t.Helper()
	return f.inboxRow(id).Outcome
}

// TestForeignPaymentEvents: an event about a payment of another
// integration (its metadata names no purchase) is stored unmatched and
// deduplicated by its id; the unmatched-event sweep has the audit judge
// the payment once, by a status query: an orphan_charge finding when it
// took money, none when it was declined, and the events are not retried.
func TestForeignPaymentEvents(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		ctx := context.Background()
		paid := f.fake.ChargeOutside(fakeprovider.OutsideCharge{Amount: 4200, Currency: "usd"})
		failed := f.fake.ChargeOutside(fakeprovider.OutsideCharge{Amount: 900, Currency: "usd", Status: fakeprovider.StatusCanceled})
		if paid.PurchaseID != "" || failed.PurchaseID != "" {
			t.Fatalf("set-up: outside charges name purchases %q, %q", paid.PurchaseID, failed.PurchaseID)
		}

		f.apply(event("evt_other_created", provider.Pending, paid, f.clock.Now()), reconcile.EventUnmatched)
		f.apply(event("evt_other_paid", provider.Succeeded, paid, f.clock.Now()), reconcile.EventUnmatched)
		f.apply(event("evt_other_paid", provider.Succeeded, paid, f.clock.Now()), reconcile.EventDuplicate) // a redelivery
		f.apply(event("evt_other_failed", provider.Declined, failed, f.clock.Now()), reconcile.EventUnmatched)
		statusBefore := f.fake.Calls(provider.OpStatus)

		n, err := f.svc.ApplyUnmatched(ctx, 100)
		if err != nil || n != 3 {
			t.Fatalf("ApplyUnmatched: %d, %v; want the 3 events judged", n, err)
		}
		if got := f.fake.Calls(provider.OpStatus) - statusBefore; got != 2 {
			t.Errorf("%d status queries, want 2 (one per payment)", got)
		}
		for _, id := range []string{"evt_other_created", "evt_other_paid", "evt_other_failed"} {
			if got := f.inboxOutcome(id); got != reconcile.EventForeign {
				t.Errorf("event %s: outcome %s, want %s", id, got, reconcile.EventForeign)
			}
		}
		fs, err := f.svc.Findings(ctx, reconcile.AnyAccount, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != 1 || fs[0].Kind != reconcile.FindingOrphanCharge || fs[0].PaymentID != paid.ID || fs[0].PurchaseID != "" ||
			fs[0].Amount != 4200 || fs[0].Currency != "usd" {
			t.Fatalf("findings %+v, want one orphan_charge for %s, 4200 usd", fs, paid.ID)
		}

		// Judged once: the next sweep neither retries the events nor asks
		// the provider again.
		n, err = f.svc.ApplyUnmatched(ctx, 100)
		if err != nil || n != 0 || f.fake.Calls(provider.OpStatus)-statusBefore != 2 {
			t.Fatalf("second sweep: %d, %v, %d status queries", n, err, f.fake.Calls(provider.OpStatus)-statusBefore)
		}

		// The audit's listing judges the same payment the same way: the
		// finding is not repeated.
		rep, err := f.svc.Audit(ctx, provider.Window{From: f.clock.Now().Add(-time.Hour), Until: f.clock.Now().Add(time.Hour)})
		if err != nil || len(rep.New) != 0 {
			t.Fatalf("audit: %v, new findings %+v; want none", err, rep.New)
		}
	})
}

// TestUnknownPurchaseEventStaysUnmatched: an event whose metadata names a
// purchase the books do not know waits for it (a restore may bring it
// back): it stays unmatched, costs the provider no call, and the audit's
// listing reports the charge.
func TestUnknownPurchaseEventStaysUnmatched(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		ctx := context.Background()
		c := f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: "pur_unknown", Amount: 300, Currency: "usd"})
		f.apply(event("evt_unknown", provider.Succeeded, c, f.clock.Now()), reconcile.EventUnmatched)
		calls := f.fake.Calls(provider.OpStatus)
		if n, err := f.svc.ApplyUnmatched(ctx, 100); err != nil || n != 0 {
			t.Fatalf("ApplyUnmatched: %d, %v", n, err)
		}
		if got := f.inboxOutcome("evt_unknown"); got != reconcile.EventUnmatched || f.fake.Calls(provider.OpStatus) != calls {
			t.Fatalf("event: %s, %d status queries; want unmatched and none", got, f.fake.Calls(provider.OpStatus)-calls)
		}
		rep, err := f.svc.Audit(ctx, provider.Window{From: f.clock.Now().Add(-time.Hour), Until: f.clock.Now().Add(time.Hour)})
		if err != nil || len(rep.New) != 1 || rep.New[0].Kind != reconcile.FindingOrphanCharge || rep.New[0].PaymentID != c.ID {
			t.Fatalf("audit: %v, findings %+v; want one orphan_charge for %s", err, rep.New, c.ID)
		}
	})
}

// TestEventSweepStoresForeignPayments: a payment of another integration,
// whose webhooks were lost, reaches the inbox through the event sweep as
// its webhooks would have: listed, not refused, stored unmatched, and
// judged by the unmatched-event sweep (an orphan_charge finding).
func TestEventSweepStoresForeignPayments(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		ctx := context.Background()
		paid := f.fake.ChargeOutside(fakeprovider.OutsideCharge{Amount: 4200, Currency: "usd"})
		f.clock.Advance(sweepInterval)
		rep := f.sweepEvents(f.svc)
		if rep.Read == 0 || rep.Refused != 0 || rep.Outcomes[reconcile.EventUnmatched] != rep.Read {
			t.Fatalf("sweep %+v, want the outside charge's events read and stored unmatched, none refused", rep)
		}
		if n, err := f.svc.ApplyUnmatched(ctx, 100); err != nil || n != rep.Read {
			t.Fatalf("ApplyUnmatched: %d, %v; want the %d events judged", n, err, rep.Read)
		}
		fs, err := f.svc.Findings(ctx, reconcile.AnyAccount, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != 1 || fs[0].Kind != reconcile.FindingOrphanCharge || fs[0].PaymentID != paid.ID || fs[0].Amount != 4200 {
			t.Fatalf("findings %+v, want one orphan_charge for %s, 4200 usd", fs, paid.ID)
		}
		if rep := f.sweepEvents(f.svc); rep.New() != 0 {
			t.Fatalf("second sweep %+v, want nothing new", rep)
		}
	})
}
