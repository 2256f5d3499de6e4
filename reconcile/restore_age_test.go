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
	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// TestRestoreOfAnyAgeIsDetected: a backup holding a purchase and a
// refund still created, both sent to the provider after the backup, is
// restored when the books are 26 hours, 7 days or 40 days older than the
// last charge, and the key retention (Stripe's 24 hours) has passed: a
// create now would charge again and refund again. The operator skips
// recover (and even stores a purchase first, as `purchase create` does):
// the check refuses, naming `payrecon recover --restored-at`, whatever
// the age, so does an operator's recheck, and nothing is sent a second
// time. After recover the purchase
// and the refund settle with one charge and one refund.
//
// The same holds when the purchase and the refund are of a connected
// account, whose sends only that account's listings show.
func TestRestoreOfAnyAgeIsDetected(t *testing.T) {
	for _, b := range stores.Backupables {
		for _, age := range []time.Duration{26 * time.Hour, 7 * 24 * time.Hour, 40 * 24 * time.Hour} {
			t.Run(fmt.Sprintf("%s/%s", b.Name, age), func(t *testing.T) { testRestoreOfAge(t, b.Make, age, "") })
		}
		t.Run(b.Name+"/connected-account", func(t *testing.T) { testRestoreOfAge(t, b.Make, 26*time.Hour, acctB) })
	}
}

func testRestoreOfAge(t *testing.T, makeBackupable func(*testing.T, func() time.Time) stores.Backupable, age time.Duration, account string) {
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	b := makeBackupable(t, clock.Now)
	platform := fakeprovider.New(fakeprovider.Config{Now: clock.Now}) // keys kept 24h, as Stripe does
	fake := platform.Account(account)
	// Recover's audit covers the whole age: a day a chunk keeps it short.
	cfg := reconcile.Config{Now: clock.Now, Logger: discardLogger(), AuditChunk: 24 * time.Hour, Accounts: []string{acctA, acctB}}
	newService := func(st reconcile.Store) *reconcile.Service {
		t.Helper()
		svc, err := reconcile.New(st, platform, cfg)
		if err != nil {
			t.Fatalf("reconcile.New: %v", err)
		}
		return svc
	}
	runUntilIdle := func(svc *reconcile.Service) {
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
	create := func(svc *reconcile.Service, customer string) reconcile.Purchase {
		t.Helper()
		p, err := svc.CreatePurchase(ctx, reconcile.NewPurchase{Customer: customer, Amount: 500, Currency: "usd", Description: "course", Account: account})
		if err != nil {
			t.Fatalf("create purchase: %v", err)
		}
		return p
	}

	st := b.Open(t)
	svc := newService(st)
	if err := svc.CheckRestore(ctx); err != nil {
		t.Fatalf("first start: %v", err)
	}
	paid := create(svc, "paid")
	runUntilIdle(svc)
	pending := create(svc, "pending")
	refund, err := svc.CreateRefund(ctx, reconcile.NewRefund{PurchaseID: paid.ID, Amount: 100, Reason: "returned", RequestedBy: "test"})
	if err != nil {
		t.Fatalf("create refund: %v", err)
	}
	clock.Advance(time.Minute)
	backupAt := clock.Now()
	backup := b.Dump(t, st)

	// The books go on for age: the purchase is charged and the refund
	// sent an hour before the restore.
	clock.Advance(age - time.Hour)
	st = b.Open(t)
	svc = newService(st)
	runUntilIdle(svc)
	if got := fake.MoneyTaken(pending.ID); got != 1 {
		t.Fatalf("before the restore: %d charges of %s, want 1", got, pending.ID)
	}
	if got := len(fake.RefundsFor(refund.ID)); got != 1 {
		t.Fatalf("before the restore: %d provider refunds of %s, want 1", got, refund.ID)
	}
	charges, refunds := len(fake.Charges()), len(fake.Refunds())

	// The restore; the provider forgets the keys (a day passes).
	clock.Advance(time.Hour)
	b.Restore(t, st, backup)
	clock.Advance(25 * time.Hour)
	st = b.Open(t)
	svc = newService(st)
	create(svc, "stored-after-the-restore") // `purchase create` runs no check
	if d, err := svc.Purchase(ctx, pending.ID); err != nil || d.Purchase.State != statemachine.Created {
		t.Fatalf("after the restore: %s is %v (%v), want created", pending.ID, d.Purchase.State, err)
	}

	// The worker's start: refused, naming the command, before anything is
	// sent. WaitRestoreCheck is what serve and worker run when the first
	// check could not list the provider.
	for name, check := range map[string]func() error{
		"CheckRestore":     func() error { return svc.CheckRestore(ctx) },
		"WaitRestoreCheck": func() error { return svc.WaitRestoreCheck(ctx, time.Millisecond) },
	} {
		err := check()
		if !errors.Is(err, reconcile.ErrRestoreSuspected) || !strings.Contains(err.Error(), "payrecon recover --restored-at") {
			t.Fatalf("%s after a restore of a backup %s old: %v, want a refusal naming payrecon recover --restored-at", name, age, err)
		}
		for _, id := range []string{pending.ID, refund.ID} {
			if !strings.Contains(err.Error(), id) {
				t.Errorf("%s: the refusal does not name %s: %v", name, id, err)
			}
		}
	}
	// An operator's recheck of the purchase (`payrecon ops recheck`, a
	// process of its own, or serve's operator pages) would send its
	// create: it runs the check and refuses too.
	if _, err := newService(st).Recheck(ctx, pending.ID, "ops"); !errors.Is(err, reconcile.ErrRestoreSuspected) {
		t.Fatalf("Recheck of %s after the restore: %v, want a refusal", pending.ID, err)
	}
	if got, gotRefunds := len(fake.Charges()), len(fake.Refunds()); got != charges || gotRefunds != refunds {
		t.Fatalf("after the refusal: %d charges and %d refunds at the provider, want %d and %d", got, gotRefunds, charges, refunds)
	}

	// The way out: recover; then everything settles, sent once.
	if _, err := svc.Recover(ctx, backupAt); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	svc = newService(st)
	if err := svc.CheckRestore(ctx); err != nil {
		t.Fatalf("start after recover: %v", err)
	}
	for range 3 {
		clock.Advance(time.Hour)
		runUntilIdle(svc)
	}
	if d, err := svc.Purchase(ctx, pending.ID); err != nil || d.Purchase.State != statemachine.Succeeded {
		t.Errorf("after recover: %s is %v (%v), want succeeded", pending.ID, d.Purchase.State, err)
	}
	if d, err := svc.Refund(ctx, refund.ID); err != nil || d.Refund.State != statemachine.Succeeded {
		t.Errorf("after recover: %s is %v (%v), want succeeded", refund.ID, d.Refund.State, err)
	}
	if got := fake.MoneyTaken(pending.ID); got != 1 {
		t.Errorf("%s: %d charges took money, want 1", pending.ID, got)
	}
	if got := len(fake.RefundsFor(refund.ID)); got != 1 {
		t.Errorf("%s: %d provider refunds, want 1", refund.ID, got)
	}
	if d := fake.DoubleCharged(); len(d) != 0 {
		t.Errorf("double charged: %v", d)
	}
	if account != "" && (len(platform.Charges()) != 0 || len(platform.Refunds()) != 0) {
		t.Errorf("the platform's account holds %d charges and %d refunds of a connected account's purchase", len(platform.Charges()), len(platform.Refunds()))
	}
	t.Logf("backup %s older than the last charge: refused; charges %d (of %s: %d), provider refunds %d (of %s: %d)",
		age, len(fake.Charges()), pending.ID, fake.MoneyTaken(pending.ID), len(fake.Refunds()), refund.ID, len(fake.RefundsFor(refund.ID)))
}

// TestLongIdleBooksStart: books whose last send was 40 days ago, not
// restored, with nothing at the provider since, start: the check lists
// from that send and finds nothing. A purchase stored meanwhile and not
// yet sent is no sign either.
func TestLongIdleBooksStart(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		ctx := context.Background()
		p := f.settle("idle")
		f.refund(p, 100)
		f.runUntilIdle(f.svc)
		f.clock.Advance(40 * 24 * time.Hour)
		f.create("stored-while-idle")
		f.clock.Advance(time.Hour)
		svc := f.service(f.fake, "worker-after-40-days", reconcile.Config{})
		if err := svc.CheckRestore(ctx); err != nil {
			t.Fatalf("start after 40 idle days: %v", err)
		}
		charges := len(f.fake.Charges())
		f.runUntilIdle(svc)
		if got := len(f.fake.Charges()); got != charges+1 {
			t.Fatalf("%d charges, want %d: the purchase stored while idle is charged once", got, charges+1)
		}
	})
}
