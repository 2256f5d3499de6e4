package applier_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/internal/testing/stores"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/applier"
	"github.com/payrecon/payrecon/statemachine"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// applied is an Observer that reports each event the applier applied on
// a channel.
type applied struct{ ch chan string }

func (a applied) EventApplied(eventType string, _ reconcile.EventOutcome, _ time.Duration) {
	a.ch <- eventType
}
func (applied) Transition(statemachine.State, statemachine.State, reconcile.Cause)       {}
func (applied) ProviderCall(provider.Op, provider.Outcome, time.Duration)                {}
func (applied) JobsClaimed(int)                                                          {}
func (applied) LeaseLost()                                                               {}
func (applied) Resolved(time.Duration)                                                   {}
func (applied) RefundTransition(statemachine.State, statemachine.State, reconcile.Cause) {}

func service(t *testing.T, st reconcile.Store, obs reconcile.Observer) *reconcile.Service {
	t.Helper()
	svc, err := reconcile.New(st, fakeprovider.New(fakeprovider.Config{}), reconcile.Config{Logger: quiet(), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// run runs a's loop until the test ends.
func run(t *testing.T, a *applier.Applier) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := a.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// event is a verified event about a payment no purchase owns (it is
// applied as unmatched).
func event(i int) reconcile.Event {
	return reconcile.Event{
		Provider: "stripe", ID: fmt.Sprintf("evt_%d", i), Type: "payment_intent.succeeded", Outcome: provider.Succeeded,
		PaymentID: fmt.Sprintf("pi_%d", i), PurchaseID: fmt.Sprintf("pur_%d", i), Amount: 300, Currency: "usd",
		PayloadHash: fmt.Sprintf("h%d", i), Created: time.Now(),
	}
}

// await waits for n applications, or fails after a minute.
func await(t *testing.T, ch chan string, n int) {
	t.Helper()
	timeout := time.After(time.Minute)
	for i := range n {
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("%d of %d events applied after a minute", i, n)
		}
	}
}

// TestAppliedOnReceipt: the applier applies what its own service
// receives, woken in-process: its poll is an hour.
func TestAppliedOnReceipt(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		st := newStore(t, nil)
		obs := applied{make(chan string, 100)}
		svc := service(t, st, obs)
		a, err := applier.New(svc, applier.Config{Poll: time.Hour, Listener: noListener{}, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		run(t, a)
		for i := range 20 {
			if _, err := svc.ReceiveEvent(context.Background(), event(i)); err != nil {
				t.Fatal(err)
			}
		}
		await(t, obs.ch, 20)
		var backlog reconcile.InboxBacklog
		if err := st.InTx(context.Background(), func(tx reconcile.Tx) error {
			var err error
			backlog, err = tx.InboxBacklog(context.Background())
			return err
		}); err != nil || backlog.Pending != 0 {
			t.Fatalf("backlog %+v, %v; want none pending", backlog, err)
		}
	})
}

// noListener never wakes its applier.
type noListener struct{}

func (noListener) ListenInbox(ctx context.Context, _ func()) error { <-ctx.Done(); return nil }

// TestWokenByAnotherProcess: on PostgreSQL, an applier is woken by the
// inbox's notification when another process received events: its poll
// is an hour.
func TestWokenByAnotherProcess(t *testing.T) {
	st := stores.Postgres(t, nil)
	if _, ok := st.(reconcile.InboxListener); !ok {
		t.Fatal("the Postgres store does not notify its appliers")
	}
	obs := applied{make(chan string, 100)}
	receiver := service(t, st, nil)
	a, err := applier.New(service(t, st, obs), applier.Config{Poll: time.Hour, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	run(t, a)
	// A first event may come before LISTEN ran, or be applied by the
	// applier's first look at the inbox: each round sends one more, and
	// the second application can only have been woken by a notification.
	for i, n := 0, 0; n < 2; i++ {
		if _, err := receiver.ReceiveEvent(context.Background(), event(i)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-obs.ch:
			n++
		case <-time.After(time.Second):
			if i == 30 {
				t.Fatalf("%d events applied after 30 receipts in another service, want 2", n)
			}
		}
	}
}

// TestUnmatchedOnItsSchedule: the applier runs the unmatched sweep on
// its schedule, between its batches.
func TestUnmatchedOnItsSchedule(t *testing.T) {
	st := stores.SQLite(t, nil)
	ran := make(chan struct{}, 10)
	a, err := applier.New(service(t, st, nil), applier.Config{
		Poll: time.Hour, Listener: noListener{}, Logger: quiet(), UnmatchedSchedule: "@every 1s",
		Unmatched: func(context.Context) error { ran <- struct{}{}; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, a)
	for range 2 {
		select {
		case <-ran:
		case <-time.After(time.Minute):
			t.Fatal("the unmatched sweep did not run on its schedule")
		}
	}
	if _, err := applier.New(service(t, st, nil), applier.Config{UnmatchedSchedule: "every minute"}); err == nil {
		t.Fatal("a schedule that does not parse was accepted")
	}
}
