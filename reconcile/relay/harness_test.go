package relay_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The stores the relay's tests run against, and the helpers they share
// with reconcile's own tests.

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// newClock returns the manual clock shared by the store, the service and
// the fake provider.
func newClock() *testclock.Clock { return testclock.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)) }

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

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

// wantPurchaseState returns purchase id, failing unless it is in want.
func wantPurchaseState(t *testing.T, svc *reconcile.Service, id string, want statemachine.State) reconcile.Purchase {
	t.Helper()
	d, err := svc.Purchase(context.Background(), id)
	if err != nil || d.Purchase.State != want {
		t.Fatalf("purchase %s: %v (%v), want %s", id, d.Purchase.State, err, want)
	}
	return d.Purchase
}
