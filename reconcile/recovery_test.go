package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// TestRestoreOldBackup is issue 16's backup-restore test: take a backup;
// run purchases through the fake with a short key retention; restore the
// backup and let the retention pass; run recover. No purchase is charged
// twice, every purchase the restore lost is reported, the re-linked ones
// settle, and the worker refuses to start before recover and resumes
// after.
func TestRestoreOldBackup(t *testing.T) {
	for _, b := range stores.Backupables {
		t.Run(b.Name, func(t *testing.T) { testRestoreOldBackup(t, b.Make) })
	}
}

func testRestoreOldBackup(t *testing.T, makeBackupable func(*testing.T, func() time.Time) stores.Backupable) {
	const (
		settledBefore = 8  // settled before the backup
		inBackup      = 12 // created before the backup, charged after it
		lostByRestore = 10 // created and charged after the backup
		retention     = 10 * time.Minute
	)
	start := time.Now()
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	b := makeBackupable(t, clock.Now)
	fake := fakeprovider.New(fakeprovider.Config{Now: clock.Now, KeyRetention: retention})
	cfg := reconcile.Config{KeyRetention: retention, KeyReplayMargin: 2 * time.Minute, Now: clock.Now, Logger: discardLogger()}
	newService := func(st reconcile.Store) *reconcile.Service {
		t.Helper()
		svc, err := reconcile.New(st, fake, cfg)
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
	create := func(svc *reconcile.Service, prefix string, n int) []string {
		t.Helper()
		var ids []string
		for i := range n {
			p, err := svc.CreatePurchase(ctx, reconcile.NewPurchase{
				Customer: fmt.Sprintf("%s-%02d", prefix, i), Amount: 500, Currency: "usd", Description: "course",
			})
			if err != nil {
				t.Fatalf("create purchase: %v", err)
			}
			ids = append(ids, p.ID)
		}
		return ids
	}
	state := func(svc *reconcile.Service, id string) statemachine.State {
		t.Helper()
		d, err := svc.Purchase(ctx, id)
		if err != nil {
			t.Fatalf("purchase %s: %v", id, err)
		}
		return d.Purchase.State
	}

	// Before the backup: the first start records the cluster, some
	// purchases settle, more are created and not yet worked.
	st := b.Open(t)
	svc := newService(st)
	if err := svc.CheckRestore(ctx); err != nil {
		t.Fatalf("first start: %v", err)
	}
	settled := create(svc, "settled", settledBefore)
	runUntilIdle(svc)
	restored := create(svc, "restored", inBackup)
	refund, err := svc.CreateRefund(ctx, reconcile.NewRefund{
		PurchaseID: settled[0], Amount: 200, Reason: "returned", RequestedBy: "test",
	})
	if err != nil {
		t.Fatalf("create refund: %v", err)
	}
	clock.Advance(time.Minute)
	backupAt := clock.Now()
	backup := b.Dump(t, st)
	st = b.Open(t) // the books go on (SQLite's copy closed them)
	svc = newService(st)

	// After the backup: the restored ones are charged, and more are
	// created and charged: the ones the restore will lose.
	clock.Advance(time.Minute)
	runUntilIdle(svc)
	lost := create(svc, "lost", lostByRestore)
	runUntilIdle(svc)
	for _, id := range append(slices.Clone(restored), lost...) {
		if s := state(svc, id); s != statemachine.Succeeded {
			t.Fatalf("before the restore: purchase %s is %s, want succeeded", id, s)
		}
	}
	charges := len(fake.Charges())

	// The restore, and the key retention passes: a create now would
	// charge the restored purchases a second time.
	b.Restore(t, st, backup)
	clock.Advance(retention + time.Minute)
	st = b.Open(t)
	svc = newService(st)
	for _, id := range restored {
		if s := state(svc, id); s != statemachine.Created {
			t.Fatalf("after the restore: purchase %s is %s, want created (the backup's state)", id, s)
		}
	}

	// The worker refuses to start, and says why.
	err = svc.CheckRestore(ctx)
	if !errors.Is(err, reconcile.ErrRestoreSuspected) || !strings.Contains(err.Error(), "payrecon recover") {
		t.Fatalf("start after the restore: %v, want a refusal naming payrecon recover", err)
	}
	t.Logf("start refused: %v", err)

	// recover records the epoch; until its audit completes the worker
	// runs but holds every purchase of the backup.
	epoch, resumed, err := svc.RecordRecovery(ctx, backupAt)
	if err != nil || resumed {
		t.Fatalf("RecordRecovery: %v (resumed %v)", err, resumed)
	}
	if !epoch.AuditFrom.Equal(backupAt.Add(-retention)) {
		t.Fatalf("audit window from %s, want %s", epoch.AuditFrom, backupAt.Add(-retention))
	}
	if err := svc.CheckRestore(ctx); err != nil {
		t.Fatalf("start after the epoch is recorded: %v", err)
	}
	runUntilIdle(svc)
	if got := len(fake.Charges()); got != charges {
		t.Fatalf("while the recovery audit is pending: %d charges, want %d: the guard let a create through", got, charges)
	}
	status, err := svc.RecoveryStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status.HeldPurchases != inBackup || len(status.Epochs) != 1 || !status.Epochs[0].Open() {
		t.Fatalf("recovery status %+v, want %d purchases held by one open epoch", status, inBackup)
	}

	// The recovery audit: re-links the restored purchases, reports the
	// lost ones, lifts the guard.
	rep, err := svc.Recover(ctx, time.Time{})
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if !rep.Resumed || rep.Recovery.Open() {
		t.Fatalf("Recover: resumed %v, epoch %+v, want the recorded epoch completed", rep.Resumed, rep.Recovery)
	}
	if got, want := sorted(rep.Relinked), sorted(restored); !slices.Equal(got, want) {
		t.Fatalf("re-linked %v, want %v", got, want)
	}
	for _, id := range lost {
		if !slices.ContainsFunc(rep.Orphans, func(f reconcile.Finding) bool {
			return f.Kind == reconcile.FindingOrphanCharge && strings.Contains(f.Evidence, `"`+id+`"`)
		}) {
			t.Errorf("purchase %s, lost by the restore, is not reported as an orphan charge (findings %v)", id, rep.Orphans)
		}
	}
	if len(rep.Orphans) != lostByRestore {
		t.Errorf("%d orphan findings, want %d", len(rep.Orphans), lostByRestore)
	}

	// The worker resumes: the re-linked purchases settle by status query;
	// a new purchase goes through as usual.
	clock.Advance(time.Hour)
	fresh := create(svc, "fresh", 2)
	runUntilIdle(svc)
	for _, id := range slices.Concat(settled, restored, fresh) {
		if s := state(svc, id); s != statemachine.Succeeded {
			t.Errorf("after recovery: purchase %s is %s, want succeeded", id, s)
		}
	}
	for _, id := range slices.Concat(settled, restored, lost, fresh) {
		if n := fake.MoneyTaken(id); n != 1 {
			t.Errorf("purchase %s: %d charges took money, want 1", id, n)
		}
	}
	if !slices.Equal(rep.RelinkedRefunds, []string{refund.ID}) {
		t.Errorf("re-linked refunds %v, want %s", rep.RelinkedRefunds, refund.ID)
	}
	if d, err := svc.Refund(ctx, refund.ID); err != nil || d.Refund.State != statemachine.Succeeded {
		t.Errorf("refund %s after recovery: %v (%v), want succeeded", refund.ID, d.Refund.State, err)
	}
	if n := len(fake.Refunds()); n != 1 {
		t.Errorf("%d refunds at the provider, want 1: %+v", n, fake.Refunds())
	}
	if d := fake.DoubleCharged(); len(d) != 0 {
		t.Fatalf("double charged: %v", d)
	}
	if got, want := len(fake.Charges()), charges+len(fresh); got != want {
		t.Fatalf("%d charges in the fake's ledger, want %d", got, want)
	}
	t.Logf("purchases %d (settled before the backup %d, charged after it %d, lost by the restore %d, after recovery %d); "+
		"re-linked %d purchases and %d refund, orphans reported %d, charges %d, second charges %d, refunds at the provider %d; %s",
		settledBefore+inBackup+lostByRestore+len(fresh), settledBefore, inBackup, lostByRestore, len(fresh),
		len(rep.Relinked), len(rep.RelinkedRefunds), len(rep.Orphans), len(fake.Charges()), len(fake.DoubleCharged()), len(fake.Refunds()),
		time.Since(start).Round(time.Millisecond))
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// TestRecoveryGuard checks the guard of an open recovery epoch on each
// path that sends a create or a replay: nothing created before the epoch
// is sent to the provider until its audit completes; what is created
// after goes through; status queries and searches still run.
func TestRecoveryGuard(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		for _, tc := range []struct {
			name string
			// before makes the job the epoch finds, and returns the
			// provider key whose create calls count.
			before func(f *fixture) (key string, check func(held bool))
		}{
			{"purchase created", func(f *fixture) (string, func(bool)) {
				p := f.create("guard-created")
				return reconcile.ProviderKeyFor(p.ID), func(held bool) {
					want := statemachine.Succeeded
					if held {
						want = statemachine.Created
					}
					f.wantState(p.ID, want)
				}
			}},
			{"purchase uncertain, key replayable", func(f *fixture) (string, func(bool)) {
				p := f.create("guard-uncertain")
				f.fake.Script(p.ID, fakeprovider.Timeout)
				f.runUntilIdle(f.svc)
				f.wantState(p.ID, statemachine.Uncertain)
				return reconcile.ProviderKeyFor(p.ID), func(held bool) {
					if !held {
						f.wantState(p.ID, statemachine.Succeeded)
					}
				}
			}},
			{"refund created", func(f *fixture) (string, func(bool)) {
				p := f.settle("guard-refund")
				r := f.refund(p, 100)
				return r.ProviderKey, func(held bool) {
					want := statemachine.Succeeded
					if held {
						want = statemachine.Created
					}
					f.wantRefundState(r.ID, want)
				}
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
				ctx := context.Background()
				key, check := tc.before(f)
				calls := f.fake.CreateCalls(key)
				f.clock.Advance(time.Minute)
				if _, _, err := f.svc.RecordRecovery(ctx, f.clock.Now().Add(-time.Minute)); err != nil {
					t.Fatalf("RecordRecovery: %v", err)
				}
				after := f.create("guard-after-epoch")
				for range 3 {
					f.clock.Advance(time.Hour)
					f.runUntilIdle(f.svc)
				}
				if got := f.fake.CreateCalls(key); got != calls {
					t.Fatalf("%d create calls under key %s while the epoch is open, want %d", got, key, calls)
				}
				check(true)
				f.wantState(after.ID, statemachine.Succeeded)
				st, err := f.svc.RecoveryStatus(ctx)
				if err != nil || st.HeldPurchases+st.HeldRefunds == 0 {
					t.Fatalf("RecoveryStatus %+v, %v: want what the guard holds counted", st, err)
				}
				if _, err := f.svc.Recover(ctx, time.Time{}); err != nil {
					t.Fatalf("Recover: %v", err)
				}
				for range 3 {
					f.clock.Advance(time.Hour)
					f.runUntilIdle(f.svc)
				}
				check(false)
			})
		}
	})
}

// TestCheckRestoreSystemIdentifier: on Postgres, a system identifier
// other than the one recorded is a sign of a restore into another
// cluster, until recover records the new one. SQLite has none.
func TestCheckRestoreSystemIdentifier(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		ctx := context.Background()
		if err := f.svc.CheckRestore(ctx); err != nil {
			t.Fatalf("first start: %v", err)
		}
		var supported bool
		err := f.store.InTx(ctx, func(tx reconcile.Tx) error {
			current, recorded, err := tx.SystemIdentifier(ctx)
			if errors.Is(err, errors.ErrUnsupported) {
				return nil
			}
			if err != nil {
				return err
			}
			if current == "" || recorded != current {
				return fmt.Errorf("current %q, recorded %q: want the first start to record the current one", current, recorded)
			}
			supported = true
			return tx.RecordSystemIdentifier(ctx, "1", f.clock.Now()) // as if recorded on another cluster
		})
		if err != nil {
			t.Fatal(err)
		}
		if !supported {
			t.Skip("this store has no system identifier")
		}
		err = f.svc.CheckRestore(ctx)
		if !errors.Is(err, reconcile.ErrRestoreSuspected) || !strings.Contains(err.Error(), "system identifier") {
			t.Fatalf("CheckRestore: %v, want a refusal for the system identifier", err)
		}
		if _, err := f.svc.Recover(ctx, f.clock.Now().Add(-time.Hour)); err != nil {
			t.Fatalf("Recover: %v", err)
		}
		if err := f.svc.CheckRestore(ctx); err != nil {
			t.Fatalf("after recover: %v", err)
		}
	})
}

// failingList is a provider whose List fails while down is set.
type failingList struct {
	*fakeprovider.Fake
	down *atomic.Bool
}

func (p failingList) List(ctx context.Context, w provider.Window, gate provider.PageGate) ([]provider.Payment, error) {
	if p.down.Load() {
		return nil, errors.New("provider unreachable")
	}
	return p.Fake.List(ctx, w, gate)
}

// TestWaitRestoreCheck: a process that could not list the provider at
// start waits, and a purchase written meanwhile (the API serves) does not
// hide the signs from the check made once the provider answers.
func TestWaitRestoreCheck(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		ctx := context.Background()
		// A charge the books do not know, newer than their latest write:
		// the sign a restore leaves.
		f.clock.Advance(time.Minute)
		f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: "pur_lostbytherestore", Amount: 300, Currency: "usd"})
		f.clock.Advance(time.Minute)

		var down atomic.Bool
		down.Store(true)
		svc := f.service(failingList{f.fake, &down}, "worker-b", reconcile.Config{})
		if err := svc.CheckRestore(ctx); err == nil || errors.Is(err, reconcile.ErrRestoreSuspected) {
			t.Fatalf("CheckRestore with the provider down: %v, want an error that is not a sign", err)
		}
		f.create("written-meanwhile") // the books' latest write moves on
		f.clock.Advance(time.Minute)
		down.Store(false)
		err := svc.WaitRestoreCheck(ctx, time.Millisecond)
		if !errors.Is(err, reconcile.ErrRestoreSuspected) || !strings.Contains(err.Error(), "pur_lostbytherestore") {
			t.Fatalf("WaitRestoreCheck: %v, want the sign the restore left", err)
		}
	})
}
