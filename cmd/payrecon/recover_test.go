package main

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// TestRecoverCommand restores an old copy of a SQLite file under the
// CLI: worker and serve refuse to start and name `payrecon recover`;
// recover re-links the charged purchase and reports the lost one; then
// the signs are gone and the re-linked purchase settles without a second
// charge.
func TestRecoverCommand(t *testing.T) {
	var (
		mu  sync.Mutex
		now = time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	f := newOpsFixtureWith(t, fakeprovider.Config{Now: clock})
	ctx := context.Background()
	create := func(svc *reconcile.Service, customer string) string {
		t.Helper()
		p, err := svc.CreatePurchase(ctx, reconcile.NewPurchase{Customer: customer, Amount: 300, Currency: "usd", Description: "restore test"})
		if err != nil {
			t.Fatal(err)
		}
		return p.ID
	}
	copyFile := func(from, to string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
		os.Remove(to + "-wal")
		os.Remove(to + "-shm")
	}

	// The backup holds a purchase not yet charged.
	svc, _, done := f.serviceAt(t, true, clock)
	restored := create(svc, "cust-restored")
	done()
	backupAt := clock().Add(30 * time.Second)
	backup := f.path + ".backup"
	copyFile(f.path, backup)

	// After the backup it is charged, and another is made and charged.
	advance(time.Minute)
	svc, _, done = f.serviceAt(t, true, clock)
	if n, err := svc.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("RunOnce: %d, %v", n, err)
	}
	advance(time.Minute)
	lost := create(svc, "cust-lost")
	if n, err := svc.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("RunOnce: %d, %v", n, err)
	}
	done()
	copyFile(backup, f.path)

	args := func(cmd ...string) []string {
		return append(append(cmd, "--database-url", f.db, "--key-retention", "2h"), f.stripeArgs()...)
	}
	for _, cmd := range [][]string{{"worker", "--addr", "127.0.0.1:0"}, {"serve", "--addr", "127.0.0.1:0", "--api=false", "--webhooks=false"}} {
		code, _, stderr := run(t, stripeEnv, args(cmd...)...)
		if code != 1 || !strings.Contains(stderr, "refusing to start") || !strings.Contains(stderr, "payrecon recover --restored-at") ||
			!strings.Contains(stderr, lost) {
			t.Fatalf("%s after the restore: exit %d, want 1 with a refusal naming recover and the lost purchase:\n%s", cmd[0], code, stderr)
		}
	}

	code, out, stderr := run(t, stripeEnv, args("recover", "--restored-at", backupAt.Format(time.RFC3339))...)
	if code != 0 {
		t.Fatalf("recover: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"re-linked to their charge (settled by status query): 1", restored, "orphan charges (purchases the restore lost), on the operator list: 1", lost, "the guard is lifted"} {
		if !strings.Contains(out, want) {
			t.Errorf("recover's report lacks %q:\n%s", want, out)
		}
	}
	code, out, stderr = run(t, stripeEnv, "recover", "--status", "--database-url", f.db)
	if code != 0 || !strings.Contains(out, "re-linked 1, orphans 1, completed") {
		t.Errorf("recover --status: exit %d: %s%s", code, out, stderr)
	}

	// The worker resumes: no sign left, and the purchase settles by a
	// status query.
	svc, _, done = f.serviceAt(t, true, time.Now)
	defer done()
	if err := svc.CheckRestore(ctx); err != nil {
		t.Fatalf("start after recover: %v", err)
	}
	if _, err := svc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := svc.Purchase(ctx, restored)
	if err != nil || d.Purchase.State != statemachine.Succeeded {
		t.Fatalf("the re-linked purchase: %+v, %v", d.Purchase.State, err)
	}
	if f.fake.MoneyTaken(restored) != 1 || len(f.fake.DoubleCharged()) != 0 {
		t.Fatalf("charges of %s: %d; double charged %v", restored, f.fake.MoneyTaken(restored), f.fake.DoubleCharged())
	}
}
