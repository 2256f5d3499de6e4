package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/crashpoint"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/sqlite"
)

// TestOutboxCrashPointLeavesNeither: a worker built with the failpoints
// tag is killed (SIGKILL) at crashpoint.OutboxPending, after a purchase's
// settlement and its outbox event are written and before they commit.
// The database then holds neither: the purchase is not final and its
// outbox is empty. (That the two commit together once nothing crashes is
// reconcile's TestOutboxCommitsWithItsChange.)
func TestOutboxCrashPointLeavesNeither(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary with -tags failpoints")
	}
	bin := filepath.Join(t.TempDir(), "payrecon-failpoints")
	if out, err := exec.Command("go", "build", "-tags", "failpoints", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags failpoints: %v\n%s", err, out)
	}
	dbPath := filepath.Join(t.TempDir(), "crash.db")
	db := "sqlite:" + dbPath
	env := append(cleanEnv(), "HOME="+t.TempDir())
	id := strings.TrimSpace(runBinary(t, bin, env, "purchase", "create", "--amount", "300", "--currency", "usd", "--customer", "C", "--database-url", db))

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "worker", "--provider", "fake", "--addr", "127.0.0.1:0", "--database-url", db)
	cmd.Env = append(env, crashpoint.Env+"="+string(crashpoint.OutboxPending))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL || ctx.Err() != nil {
		t.Fatalf("worker: %v, want killed at %s\n%s", err, crashpoint.OutboxPending, out)
	}

	st, err := sqlite.Open(t.Context(), sqlite.Config{Path: dbPath})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var (
		p      reconcile.Purchase
		events []reconcile.OutboxEvent
	)
	if err := st.InTx(t.Context(), func(tx reconcile.Tx) error {
		var err error
		if p, err = tx.GetPurchase(t.Context(), id); err != nil {
			return err
		}
		events, err = tx.ListOutbox(t.Context(), id)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if p.State.Terminal() || len(events) != 0 {
		t.Fatalf("after the crash: purchase %s with %d outbox events; want neither the settlement nor its event", p.State, len(events))
	}
}
