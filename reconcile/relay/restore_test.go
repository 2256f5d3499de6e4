package relay_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/events"
	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/relay"
	"github.com/payrecon/payrecon/statemachine"
)

// TestRestoreKeepsTheShopInStep: a shop receives the outbox's events
// through the project's events.Receiver on a real HTTP server. A backup
// is taken with a purchase and a refund still created, and with a
// delivery dead (the shop was down); after it, the purchase is charged,
// the refund sent, the dead delivery replayed, and the shop hears of it
// all. The books are restored and recovered: the re-linked purchase and
// refund settle and are reported again, numbered from the backup's
// sequences but in the new epoch, and a refund made after the recovery
// is reported too. The shop accepts every event (no 409); the only dead
// delivery is the one the backup brought back, and replaying it
// succeeds, the new event queued behind it with it, as does replaying
// every event.
func TestRestoreKeepsTheShopInStep(t *testing.T) {
	for _, b := range stores.Backupables {
		t.Run(b.Name, func(t *testing.T) { testRestoreKeepsTheShopInStep(t, b.Make) })
	}
}

func testRestoreKeepsTheShopInStep(t *testing.T, makeBackupable func(*testing.T, func() time.Time) stores.Backupable) {
	const retention = 10 * time.Minute
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	b := makeBackupable(t, clock.Now)
	fake := fakeprovider.New(fakeprovider.Config{Now: clock.Now, KeyRetention: retention})
	cfg := reconcile.Config{KeyRetention: retention, KeyReplayMargin: 2 * time.Minute, Now: clock.Now, Logger: discardLogger()}
	relayCfg := relay.Config{RetryWindow: time.Hour, MinBackoff: time.Minute, MaxBackoff: 10 * time.Minute}
	s := newShop(t, clock.Now)
	var down atomic.Bool
	s.before = func(*http.Request) bool { return !down.Load() }

	var (
		st  reconcile.Store
		svc *reconcile.Service
		rel *relay.Relay
	)
	open := func() {
		t.Helper()
		st = b.Open(t)
		var err error
		if svc, err = reconcile.New(st, fake, cfg); err != nil {
			t.Fatal(err)
		}
		rel = newRelay(t, st, "relay", relayCfg)
	}
	work := func() {
		t.Helper()
		for range 100 {
			n, err := svc.RunOnce(ctx)
			if err != nil {
				t.Fatalf("RunOnce: %v", err)
			}
			if n == 0 {
				return
			}
		}
		t.Fatal("jobs still due after 100 runs")
	}
	// deliver runs the relay until no delivery is pending, or none is
	// claimed for longer than the longest backoff (those left are queued
	// behind a dead one), the clock moving on while the failed ones wait
	// for their retry.
	deliver := func() {
		t.Helper()
		idle := 0
		for range 200 {
			if outboxStats(t, st).Pending == 0 {
				return
			}
			n, err := rel.RunOnce(ctx)
			if err != nil {
				t.Fatalf("relay: %v", err)
			}
			if n > 0 {
				idle = 0
				continue
			}
			if idle++; idle > 2 {
				return
			}
			clock.Advance(relayCfg.MaxBackoff)
		}
		t.Fatal("deliveries still pending after 200 rounds")
	}
	create := func(customer string) reconcile.Purchase {
		t.Helper()
		p, err := svc.CreatePurchase(ctx, reconcile.NewPurchase{Customer: customer, Amount: 500, Currency: "usd", Description: "course"})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	refund := func(p reconcile.Purchase, amount int64) reconcile.Refund {
		t.Helper()
		r, err := svc.CreateRefund(ctx, reconcile.NewRefund{PurchaseID: p.ID, Amount: amount, Reason: "returned", RequestedBy: "test"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	open()
	if err := svc.CheckRestore(ctx); err != nil {
		t.Fatalf("first start: %v", err)
	}
	s.subscribe(t, st, "shop")
	paid := create("paid")
	work()
	deliver()
	// The shop is down while "unheard" settles: its delivery dies.
	down.Store(true)
	unheard := create("unheard")
	work()
	deliver()
	down.Store(false)
	if got := outboxStats(t, st).Dead; got != 1 {
		t.Fatalf("%d dead deliveries before the backup, want 1", got)
	}
	pending := create("pending")
	inBackup := refund(paid, 100)
	clock.Advance(time.Minute)
	backupAt := clock.Now()
	backup := b.Dump(t, st)

	// The lost period: the purchase is charged, the refund sent, the
	// dead delivery replayed; the shop hears of it all.
	clock.Advance(time.Minute)
	open()
	work()
	if _, err := svc.ReplayEvents(ctx, reconcile.Replay{DeadOnly: true}); err != nil {
		t.Fatal(err)
	}
	deliver()
	if got := outboxStats(t, st); got.Dead != 0 {
		t.Fatalf("before the restore: %+v, want nothing dead", got)
	}
	heardBefore := len(s.applied()[pending.ID]) + len(s.applied()[paid.ID])
	if heardBefore != 3 {
		t.Fatalf("the shop applied %d events of %s and %s before the restore, want 3: %v", heardBefore, pending.ID, paid.ID, s.applied())
	}

	// The restore and the recovery.
	b.Restore(t, st, backup)
	clock.Advance(retention + time.Minute)
	open()
	if err := svc.CheckRestore(ctx); !errors.Is(err, reconcile.ErrRestoreSuspected) {
		t.Fatalf("CheckRestore after the restore: %v, want a refusal", err)
	}
	rep, err := svc.Recover(ctx, backupAt)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	epoch := rep.Recovery.EventEpoch()
	if epoch == 0 {
		t.Fatal("the recovery's event epoch is 0")
	}
	clock.Advance(time.Hour)
	work()
	after := refund(wantPurchaseState(t, svc, pending.ID, statemachine.Succeeded), 200)
	work()
	deliver()

	// Every event of the re-linked purchase and refund, and of the
	// refund made after the recovery, is in the new epoch and accepted.
	for _, id := range []string{pending.ID, paid.ID} {
		for _, e := range outboxOf(t, st, id) {
			if e.CreatedAt.After(backupAt) && e.Epoch != epoch {
				t.Errorf("event %s (%s %d) committed after the recovery has epoch %d, want %d", e.ID, e.Type, e.Sequence, e.Epoch, epoch)
			}
		}
	}
	if c := s.statusCounts()[http.StatusConflict]; c != 0 {
		t.Errorf("the shop answered 409 %d times", c)
	}
	for _, r := range []reconcile.Refund{inBackup, after} {
		if d, err := svc.Refund(ctx, r.ID); err != nil || d.Refund.State != statemachine.Succeeded {
			t.Errorf("refund %s: %v (%v), want succeeded", r.ID, d.Refund.State, err)
		}
	}
	applied := s.applied()
	// paid: succeeded, the refund (lost period), the refund again (new
	// epoch); pending: succeeded (lost period), succeeded again and the
	// refund made after the recovery (new epoch).
	if got := len(applied[paid.ID]) + len(applied[pending.ID]); got != 3+3 {
		t.Errorf("the shop applied %d events of %s and %s, want 6: %v", got, paid.ID, pending.ID, applied)
	}
	for _, id := range []string{paid.ID, pending.ID} {
		if e, _ := events.SplitOrder(shopOrder(t, s, id)); e != epoch {
			t.Errorf("the shop's highest event of %s is of epoch %d, want %d", id, e, epoch)
		}
	}

	// The backup brought back the dead delivery of "unheard" (which the
	// shop had since): a new event of it queues behind it. Replaying the
	// dead ones succeeds: the old one is a duplicate, the new one is
	// applied.
	refund(wantPurchaseState(t, svc, unheard.ID, statemachine.Succeeded), 100)
	work()
	deliver()
	if got := outboxStats(t, st); got.Dead != 1 || got.Pending != 1 {
		t.Errorf("after the recovery: %+v, want the dead delivery the backup held and one pending behind it", got)
	}
	if _, err := svc.ReplayEvents(ctx, reconcile.Replay{DeadOnly: true}); err != nil {
		t.Fatal(err)
	}
	deliver()
	if got := outboxStats(t, st); got.Dead != 0 || got.Pending != 0 {
		t.Errorf("after replaying the dead ones: %+v, want none dead or pending", got)
	}
	if got := len(s.applied()[unheard.ID]); got != 2 {
		t.Errorf("the shop applied %d events of %s, want 2", got, unheard.ID)
	}
	// Replaying everything: every event is a duplicate.
	before := s.statusCounts()
	if _, err := svc.ReplayEvents(ctx, reconcile.Replay{}); err != nil {
		t.Fatal(err)
	}
	deliver()
	if got := outboxStats(t, st); got.Dead != 0 || got.Pending != 0 {
		t.Errorf("after replaying everything: %+v, want none dead or pending", got)
	}
	final := s.statusCounts()
	if c := final[http.StatusConflict]; c != 0 {
		t.Errorf("the shop answered 409 %d times", c)
	}
	t.Logf("epoch %d; shop answers: %v (before the full replay: %v); re-linked %v and refunds %v; charges %d, provider refunds %d",
		epoch, final, before, rep.Relinked, rep.RelinkedRefunds, len(fake.Charges()), len(fake.Refunds()))
	if d := fake.DoubleCharged(); len(d) != 0 {
		t.Errorf("double charged: %v", d)
	}
	if got := len(fake.RefundsFor(inBackup.ID)); got != 1 {
		t.Errorf("%d provider refunds of %s, want 1", got, inBackup.ID)
	}
}

// shopOrder is the highest order (events.Event.Order) the shop's
// receiver recorded for purchase id.
func shopOrder(t *testing.T, s *shop, id string) int64 {
	t.Helper()
	var order int64
	if err := s.db.QueryRow(`SELECT last_sequence FROM payrecon_event_sequences WHERE purchase_id = ?`, id).Scan(&order); err != nil {
		t.Fatal(err)
	}
	return order
}
