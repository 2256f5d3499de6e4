package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/sqlite"
	"github.com/payrecon/payrecon/statemachine"
)

// opsFixture is a SQLite database whose purchases the test sets up through
// the reconcile API, and a fake Stripe server (over HTTP) that holds the
// charges of those made through the real stripe adapter: the server the
// CLI's `--provider stripe --stripe-api-base` points at.
type opsFixture struct {
	path string // the SQLite file
	db   string // its --database-url
	fake *fakeprovider.Fake
	api  string // the fake Stripe server's URL
	// now is the fixed clock of the set-up, an hour in the past so that
	// the CLI (on the real clock) finds every lease expired and every age
	// positive.
	now time.Time
}

// stripeKey is the test-mode key the fake Stripe server accepts.
const stripeKey = "sk_test_x"

func newOpsFixture(t *testing.T) *opsFixture { return newOpsFixtureWith(t, fakeprovider.Config{}) }

// newOpsFixtureWith is newOpsFixture with the fake Stripe server's
// configuration.
func newOpsFixtureWith(t *testing.T, cfg fakeprovider.Config) *opsFixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ops.db")
	fake := fakeprovider.New(cfg)
	srv := fakeprovider.NewServer(fake, fakeprovider.ServerConfig{Logger: quietLog()})
	hs := httptest.NewServer(srv)
	// Close the fake first: it releases requests held by Timeout faults.
	t.Cleanup(func() { srv.Close(); hs.Close() })
	return &opsFixture{
		path: path, db: "sqlite:" + path, fake: fake, api: hs.URL,
		now: time.Now().UTC().Add(-time.Hour).Truncate(time.Second),
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// stripeEnv is the environment of CLI runs with --provider stripe.
func (f *opsFixture) stripeArgs() []string {
	return []string{"--provider", "stripe", "--stripe-api-base", f.api}
}

var stripeEnv = map[string]string{"STRIPE_SECRET_KEY": stripeKey}

// service opens the fixture's database and returns a service over it on
// the fixed clock (the store's and the worker's), with MaxAttempts 1 so
// that a purchase whose first run leaves it uncertain is escalated at
// once. viaStripe selects the real
// stripe adapter over the fake Stripe server; otherwise an in-process fake,
// which the caller may script, is used.
func (f *opsFixture) service(t *testing.T, viaStripe bool) (*reconcile.Service, *fakeprovider.Fake, func()) {
	t.Helper()
	return f.serviceAt(t, viaStripe, func() time.Time { return f.now })
}

// serviceAt is service on clock: time.Now, for a worker that takes jobs
// the CLI made on the real clock.
func (f *opsFixture) serviceAt(t *testing.T, viaStripe bool, clock func() time.Time) (*reconcile.Service, *fakeprovider.Fake, func()) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: f.path, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		st.Close()
		t.Fatal(err)
	}
	var p provider.Provider
	scripted := fakeprovider.New(fakeprovider.Config{Now: clock})
	p = scripted
	if viaStripe {
		adapter, err := stripe.New(stripe.Config{SecretKey: stripeKey, APIBase: f.api, Logger: quietLog()})
		if err != nil {
			st.Close()
			t.Fatal(err)
		}
		p, scripted = adapter, f.fake
	}
	svc, err := reconcile.New(st, p, reconcile.Config{
		WorkerID: "test-worker", MaxAttempts: 1, Now: clock,
		ProviderTimeout: 200 * time.Millisecond, Logger: quietLog(),
	})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	return svc, scripted, func() { st.Close() }
}

// purchase creates a purchase, scripts faults for its create calls, and
// works its job once. The store is closed again before it returns, so that
// the CLI has the database to itself.
func (f *opsFixture) purchase(t *testing.T, viaStripe bool, faults ...fakeprovider.Fault) reconcile.Purchase {
	t.Helper()
	ctx := context.Background()
	svc, fake, done := f.service(t, viaStripe)
	defer done()
	p, err := svc.CreatePurchase(ctx, reconcile.NewPurchase{Customer: "cust-1", Amount: 300, Currency: "usd", Description: "ops test"})
	if err != nil {
		t.Fatal(err)
	}
	fake.Script(p.ID, faults...)
	if n, err := svc.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("RunOnce: %d jobs, %v", n, err)
	}
	d, err := svc.Purchase(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	return d.Purchase
}

// escalated is a purchase on the operator list: its create hit faults,
// it is uncertain, and its only attempt is spent.
func (f *opsFixture) escalated(t *testing.T, viaStripe bool, faults ...fakeprovider.Fault) string {
	t.Helper()
	p := f.purchase(t, viaStripe, faults...)
	if p.State != statemachine.Uncertain || p.EscalationReason != reconcile.EscalationAttemptsExhausted {
		t.Fatalf("set-up: %s is %s, escalation %q; want uncertain, %s", p.ID, p.State, p.EscalationReason, reconcile.EscalationAttemptsExhausted)
	}
	return p.ID
}

// inspect reads a purchase's whole record from the database.
func (f *opsFixture) inspect(t *testing.T, id string) reconcile.Case {
	t.Helper()
	svc, _, done := f.service(t, false)
	defer done()
	c, err := svc.Case(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// unchanged fails the test if the purchase's record differs from before.
func (f *opsFixture) unchanged(t *testing.T, before reconcile.Case) {
	t.Helper()
	after := f.inspect(t, before.Purchase.ID)
	if after.Purchase.Version != before.Purchase.Version || after.Purchase.State != before.Purchase.State ||
		len(after.Transitions) != len(before.Transitions) || len(after.Attempts) != len(before.Attempts) ||
		len(after.Actions) != len(before.Actions) || !after.Purchase.EscalatedAt.Equal(before.Purchase.EscalatedAt) {
		t.Fatalf("the purchase changed:\nbefore %+v\nafter  %+v", before, after)
	}
}

func TestOpsListShowNote(t *testing.T) {
	f := newOpsFixture(t)
	id := f.escalated(t, false, fakeprovider.Timeout)
	clean := f.purchase(t, false) // succeeded: not on the list
	if clean.State != statemachine.Succeeded {
		t.Fatalf("set-up: clean purchase is %s", clean.State)
	}

	t.Run("list", func(t *testing.T) {
		code, out, stderr := run(t, nil, "ops", "list", "--database-url", f.db)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var row string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, id) {
				row = line
			}
		}
		if !strings.HasPrefix(out, "PURCHASE") || row == "" {
			t.Fatalf("no header or no row for %s:\n%s", id, out)
		}
		for _, want := range []string{"attempts_exhausted", "uncertain", "3.00 USD", "cust-1"} {
			if !strings.Contains(row, want) {
				t.Errorf("row lacks %q: %q", want, row)
			}
		}
		if strings.Contains(out, clean.ID) {
			t.Errorf("a succeeded purchase is on the list:\n%s", out)
		}
		if !strings.Contains(out, "no open audit findings") {
			t.Errorf("the list does not say there are no open findings:\n%s", out)
		}
	})

	t.Run("list --json", func(t *testing.T) {
		code, out, stderr := run(t, nil, "ops", "list", "--json", "--database-url", f.db)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var list opsListJSON
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		if len(list.Cases) != 1 || list.Findings == nil || len(list.Findings) != 0 {
			t.Fatalf("%d cases and findings %v, want 1 case and an empty list of findings:\n%s", len(list.Cases), list.Findings, out)
		}
		c := list.Cases[0]
		if c.PurchaseID != id || c.Reason != "attempts_exhausted" || c.State != "uncertain" ||
			c.Amount != 300 || c.Currency != "usd" || c.ProviderCalls != 1 || !c.EscalatedAt.Equal(f.now) {
			t.Errorf("case %+v", c)
		}
		// Escalated on the fixed clock an hour ago, listed on the real one.
		if c.AgeSeconds < 3000 {
			t.Errorf("age %vs, want about an hour", c.AgeSeconds)
		}
	})

	t.Run("show", func(t *testing.T) {
		code, out, stderr := run(t, nil, "ops", "show", id, "--database-url", f.db)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, want := range []string{id, "uncertain", "escalated", "attempts_exhausted", "transitions:",
			"created → submitted", "submitted → uncertain", "provider calls:", "create", "webhooks:", "operator actions:"} {
			if !strings.Contains(out, want) {
				t.Errorf("ops show lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("show unknown", func(t *testing.T) {
		code, _, stderr := run(t, nil, "ops", "show", "pur_nope", "--database-url", f.db)
		if code == 0 || !strings.Contains(stderr, `no purchase with id "pur_nope"`) {
			t.Fatalf("exit %d: %s", code, stderr)
		}
	})

	t.Run("note", func(t *testing.T) {
		before := f.inspect(t, id)
		code, out, stderr := run(t, nil, "ops", "note", id, "--text", "called the bank: no charge on the card", "--operator", "alice", "--database-url", f.db)
		if code != 0 || strings.TrimSpace(out) != "noted" {
			t.Fatalf("exit %d, out %q: %s", code, out, stderr)
		}
		after := f.inspect(t, id)
		if len(after.Actions) != len(before.Actions)+1 {
			t.Fatalf("%d operator actions, want %d", len(after.Actions), len(before.Actions)+1)
		}
		a := after.Actions[len(after.Actions)-1]
		if a.Action != "note" || a.Operator != "alice" || a.Evidence != "called the bank: no charge on the card" {
			t.Errorf("action %+v", a)
		}
		// A note changes nothing else: the case stays open.
		if after.Purchase.Version != before.Purchase.Version || !after.Purchase.Escalated() {
			t.Errorf("the note changed the purchase: %+v", after.Purchase)
		}
		code, out, _ = run(t, nil, "ops", "show", id, "--database-url", f.db)
		if code != 0 || !strings.Contains(out, "note by alice") || !strings.Contains(out, "called the bank") {
			t.Errorf("ops show does not list the note:\n%s", out)
		}
	})

	t.Run("note without text", func(t *testing.T) {
		before := f.inspect(t, id)
		code, _, stderr := run(t, nil, "ops", "note", id, "--operator", "alice", "--database-url", f.db)
		if code != 2 || !strings.Contains(stderr, "--text is required") {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		f.unchanged(t, before)
	})
}

func TestOpsResolveDeclined(t *testing.T) {
	f := newOpsFixture(t)
	// The create timed out before the provider acted: no charge anywhere.
	id := f.escalated(t, true, fakeprovider.Timeout)
	before := f.inspect(t, id)
	args := append([]string{"ops", "resolve", id, "--declined", "--evidence", "no charge at Stripe for this purchase", "--yes",
		"--operator", "alice", "--database-url", f.db}, f.stripeArgs()...)
	code, out, stderr := run(t, stripeEnv, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "provider now says: outcome="+string(provider.NotFound)) || !strings.Contains(out, id+" is now declined") {
		t.Fatalf("output:\n%s", out)
	}
	c := f.inspect(t, id)
	if c.Purchase.State != statemachine.Declined || c.Purchase.Escalated() || c.Job.DoneAt.IsZero() {
		t.Fatalf("purchase %+v, job %+v", c.Purchase, c.Job)
	}
	moves := c.Transitions[len(before.Transitions):]
	if len(moves) != 2 || moves[0].To != statemachine.Reconciling || moves[1].To != statemachine.Declined {
		t.Fatalf("new transitions %+v", moves)
	}
	for _, m := range moves {
		if m.Cause != reconcile.CauseOperator || m.Actor != "operator:alice" || !strings.Contains(m.Evidence, "no charge at Stripe") {
			t.Errorf("transition %+v", m)
		}
	}
	if len(c.Actions) != 1 {
		t.Fatalf("operator actions %+v", c.Actions)
	}
	a := c.Actions[0]
	if a.Action != "resolve" || a.Operator != "alice" || a.Did != "uncertain→reconciling→declined" ||
		a.Evidence != "no charge at Stripe for this purchase" || !strings.Contains(a.Saw, "outcome=not_found") {
		t.Errorf("action %+v", a)
	}
	if n := f.fake.MoneyTaken(id); n != 0 {
		t.Errorf("%d charges at the provider, want 0", n)
	}
}

// TestOpsResolveSucceeded resolves, with the flags written after the id as
// the issue writes them, a purchase whose reply was lost after the charge:
// the live view comes from the fake Stripe server that holds the charge.
func TestOpsResolveSucceeded(t *testing.T) {
	f := newOpsFixture(t)
	id := f.escalated(t, true, fakeprovider.LostReply)
	args := append([]string{"ops", "resolve", id, "--succeeded", "--evidence", "Stripe dashboard shows the charge succeeded", "--yes",
		"--operator", "bob", "--database-url", f.db}, f.stripeArgs()...)
	code, out, stderr := run(t, stripeEnv, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "provider now says: outcome=succeeded status=succeeded payment=pi_") {
		t.Fatalf("no live view of the charge:\n%s", out)
	}
	c := f.inspect(t, id)
	if c.Purchase.State != statemachine.Succeeded || len(c.Actions) != 1 || c.Actions[0].Operator != "bob" {
		t.Fatalf("purchase %+v, actions %+v", c.Purchase, c.Actions)
	}
	// The live view only looks: one create, one charge.
	if n, calls := f.fake.MoneyTaken(id), f.fake.CreateCalls(reconcile.ProviderKeyFor(id)); n != 1 || calls != 1 {
		t.Errorf("%d charges, %d creates; want 1 and 1", n, calls)
	}
}

func TestOpsRecheck(t *testing.T) {
	f := newOpsFixture(t)
	id := f.escalated(t, true, fakeprovider.LostReply)
	args := append([]string{"ops", "recheck", id, "--operator", "carol", "--database-url", f.db}, f.stripeArgs()...)
	code, out, stderr := run(t, stripeEnv, args...)
	if code != 0 || strings.TrimSpace(out) != id+" is succeeded" {
		t.Fatalf("exit %d, out %q: %s", code, out, stderr)
	}
	c := f.inspect(t, id)
	if c.Purchase.State != statemachine.Succeeded || c.Purchase.Escalated() {
		t.Fatalf("purchase %+v", c.Purchase)
	}
	if len(c.Actions) != 1 || c.Actions[0].Action != "recheck" || c.Actions[0].Operator != "carol" {
		t.Fatalf("actions %+v", c.Actions)
	}
	// Reconciled by replaying the same key: still one charge.
	if n := f.fake.MoneyTaken(id); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
	if dc := f.fake.DoubleCharged(); len(dc) != 0 {
		t.Errorf("double charged: %v", dc)
	}
}

// TestOpsResolveTerminalRefused is the issue's "ops resolve on a terminal
// purchase is refused with a clear message".
func TestOpsResolveTerminalRefused(t *testing.T) {
	f := newOpsFixture(t)
	p := f.purchase(t, true)
	if p.State != statemachine.Succeeded {
		t.Fatalf("set-up: %s is %s", p.ID, p.State)
	}
	before := f.inspect(t, p.ID)
	args := append([]string{"ops", "resolve", p.ID, "--declined", "--evidence", "customer says so", "--yes",
		"--operator", "alice", "--database-url", f.db}, f.stripeArgs()...)
	code, out, stderr := run(t, stripeEnv, args...)
	if code == 0 {
		t.Fatalf("exit 0:\n%s", out)
	}
	if want := "ops resolve refused: " + p.ID + " is already succeeded, and an operator cannot change a final state; nothing changed"; !strings.Contains(stderr, want) {
		t.Fatalf("stderr lacks %q:\n%s", want, stderr)
	}
	f.unchanged(t, before)

	// The same without --yes: refused before any question is asked.
	args = slices.DeleteFunc(args, func(a string) bool { return a == "--yes" })
	if code, out, stderr := run(t, stripeEnv, args...); code == 0 || strings.Contains(out, "type yes") || !strings.Contains(stderr, "already succeeded") {
		t.Fatalf("exit %d, out %q: %s", code, out, stderr)
	}
	f.unchanged(t, before)
}

func TestOpsResolveRefusesBadCommandLines(t *testing.T) {
	f := newOpsFixture(t)
	id := f.escalated(t, true, fakeprovider.LostReply)
	before := f.inspect(t, id)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no evidence", []string{"--succeeded", "--yes"}, "--evidence is required"},
		{"blank evidence", []string{"--succeeded", "--evidence", "  ", "--yes"}, "--evidence is required"},
		{"no outcome", []string{"--evidence", "x", "--yes"}, "exactly one of --succeeded or --declined"},
		{"both outcomes", []string{"--succeeded", "--declined", "--evidence", "x", "--yes"}, "exactly one of --succeeded or --declined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"ops", "resolve", id}, tt.args...), append([]string{"--database-url", f.db}, f.stripeArgs()...)...)
			code, _, stderr := run(t, stripeEnv, args...)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, want 2 and %q: %s", code, tt.want, stderr)
			}
			f.unchanged(t, before)
		})
	}
}

// TestOpsRefuseInProcessFake: recheck and resolve ask the provider, and the
// in-process fake of a fresh CLI process knows none of the charges.
func TestOpsRefuseInProcessFake(t *testing.T) {
	f := newOpsFixture(t)
	id := f.escalated(t, true, fakeprovider.LostReply)
	before := f.inspect(t, id)
	creates := f.fake.Calls(provider.OpCreate)
	for _, args := range [][]string{
		{"ops", "recheck", id, "--operator", "alice", "--database-url", f.db},
		{"ops", "resolve", id, "--succeeded", "--evidence", "x", "--yes", "--operator", "alice", "--database-url", f.db},
		{"ops", "resolve", id, "--succeeded", "--evidence", "x", "--yes", "--operator", "alice", "--database-url", f.db, "--provider", "fake"},
	} {
		code, _, stderr := run(t, nil, args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", args, code, stderr)
		}
		for _, want := range []string{"the in-process fake provider (--provider fake, the default) knows no charges made by other processes",
			"use --provider stripe with --stripe-api-base pointing at `payrecon fakeprovider` or Stripe"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%v: stderr lacks %q:\n%s", args, want, stderr)
			}
		}
		f.unchanged(t, before)
	}
	if n := f.fake.Calls(provider.OpCreate); n != creates {
		t.Errorf("%d creates at the fake Stripe server, want %d", n, creates)
	}
}

// TestFlagsAfterID: the issue writes the flags after the purchase id.
func TestFlagsAfterID(t *testing.T) {
	f := newOpsFixture(t)
	id := f.escalated(t, false, fakeprovider.Timeout)
	for _, args := range [][]string{
		{"purchase", "show", id, "--json", "--database-url", f.db},
		{"purchase", "show", "--json", "--database-url", f.db, id},
		{"purchase", "show", "--database-url", f.db, id, "--json"},
	} {
		code, out, stderr := run(t, nil, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		var d reconcile.Detail
		if err := json.Unmarshal([]byte(out), &d); err != nil || d.Purchase.ID != id {
			t.Fatalf("%v: not the purchase's JSON (%v):\n%s", args, err, out)
		}
	}
	// A value that looks like a flag or like "--" stays the flag's value.
	code, _, stderr := run(t, nil, "ops", "note", id, "--text", "--close", "--operator", "--", "--database-url", f.db)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	c := f.inspect(t, id)
	if a := c.Actions[len(c.Actions)-1]; a.Evidence != "--close" || a.Operator != "--" || !c.Purchase.Escalated() {
		t.Fatalf("action %+v, purchase %+v", a, c.Purchase)
	}
	for _, args := range [][]string{
		{"ops", "show", "--database-url", f.db},
		{"ops", "show", id, "pur_other", "--database-url", f.db},
		{"ops", "show", id, "--database-url", f.db, "--", "--json"},
	} {
		if code, _, stderr := run(t, nil, args...); code != 2 || !strings.Contains(stderr, "want exactly one purchase id") {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
	if code, _, stderr := run(t, nil, "ops", "show", id, "--database-url", f.db, "--bogus"); code != 2 || !strings.Contains(stderr, "-bogus") {
		t.Errorf("unknown flag after the id: exit %d: %s", code, stderr)
	}
}

func TestFlagsFirst(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Bool("yes", false, "")
	fs.String("text", "", "")
	tests := []struct{ in, want []string }{
		{[]string{"ID"}, []string{"--", "ID"}},
		{[]string{"ID", "--yes", "--text", "a b"}, []string{"--yes", "--text", "a b", "--", "ID"}},
		{[]string{"--text", "ID", "X"}, []string{"--text", "ID", "--", "X"}},
		{[]string{"ID", "-text=v", "--yes=false"}, []string{"-text=v", "--yes=false", "--", "ID"}},
		{[]string{"ID", "--text", "--", "--yes"}, []string{"--text", "--", "--yes", "--", "ID"}},
		{[]string{"--yes", "--", "--text", "ID"}, []string{"--yes", "--", "--text", "ID"}},
		{[]string{"-", "--unknown", "ID"}, []string{"--unknown", "--", "-", "ID"}},
		// A flag missing its value is left last, for fs.Parse to report.
		{[]string{"ID", "--text"}, []string{"--text"}},
	}
	for _, tt := range tests {
		if got := flagsFirst(fs, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("flagsFirst(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestStatemachineRejectsArguments(t *testing.T) {
	for _, args := range [][]string{{"statemachine", "extra"}, {"statemachine", "--mermaid", "diagram"}, {"statemachine", "x", "--mermaid"}} {
		code, out, stderr := run(t, nil, args...)
		if code != 2 || !strings.Contains(stderr, "unexpected arguments") || out != "" {
			t.Errorf("%v: exit %d, out %q: %s", args, code, out, stderr)
		}
	}
	code, out, stderr := run(t, nil, "statemachine", "--mermaid")
	if code != 0 || !strings.Contains(out, "stateDiagram") {
		t.Errorf("statemachine --mermaid: exit %d: %s", code, stderr)
	}
}

// unsetenv removes environment variables for the test, restoring them
// after it.
func unsetenv(t *testing.T, keys ...string) {
	t.Helper()
	for _, k := range keys {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
}

func TestServeStripeNeedsWebhookSecret(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "serve.db")
	unsetenv(t, "STRIPE_WEBHOOK_SECRET", "PAYRECON_WEBHOOKS", "PAYRECON_API_TOKEN", "PAYRECON_OPS_TOKEN", "PAYRECON_PROVIDER")
	serve := []string{"serve", "--addr", "127.0.0.1:0", "--database-url", db}
	const refused = "refusing to serve --provider stripe without webhooks: STRIPE_WEBHOOK_SECRET is not set"
	const noAPI = "refusing to serve the purchase API unauthenticated"

	code, _, stderr := run(t, stripeEnv, append(serve, "--provider", "stripe")...)
	if code != 2 || !strings.Contains(stderr, refused) || !strings.Contains(stderr, "--webhooks=false / PAYRECON_WEBHOOKS=false") {
		t.Fatalf("stripe without a webhook secret: exit %d: %s", code, stderr)
	}

	// Switched off, by flag or environment, the check passes: serve gets
	// as far as the next refusal, the unauthenticated API.
	for _, tc := range []struct {
		env  map[string]string
		args []string
	}{
		{map[string]string{"STRIPE_SECRET_KEY": stripeKey}, []string{"--provider", "stripe", "--webhooks=false"}},
		{map[string]string{"STRIPE_SECRET_KEY": stripeKey, "PAYRECON_WEBHOOKS": "false"}, []string{"--provider", "stripe"}},
	} {
		code, _, stderr := run(t, tc.env, append(serve, tc.args...)...)
		if code != 2 || strings.Contains(stderr, refused) || !strings.Contains(stderr, noAPI) ||
			!strings.Contains(stderr, "webhooks are off") {
			t.Errorf("%v %v: exit %d: %s", tc.env, tc.args, code, stderr)
		}
		os.Unsetenv("PAYRECON_WEBHOOKS")
	}

	// The in-process fake keeps today's behaviour: a warning.
	code, _, stderr = run(t, nil, append(serve, "--provider", "fake")...)
	if code != 2 || strings.Contains(stderr, refused) || !strings.Contains(stderr, noAPI) ||
		!strings.Contains(stderr, "STRIPE_WEBHOOK_SECRET is not set: POST /webhooks/stripe is not served") {
		t.Errorf("fake provider: exit %d: %s", code, stderr)
	}

	code, _, stderr = run(t, nil, append(serve, "--webhooks=maybe")...)
	if code != 2 || !strings.Contains(stderr, `--webhooks "maybe": want true or false`) {
		t.Errorf("--webhooks=maybe: exit %d: %s", code, stderr)
	}
	code, _, stderr = run(t, map[string]string{"PAYRECON_WEBHOOKS": "maybe"}, serve...)
	if code != 2 || !strings.Contains(stderr, `PAYRECON_WEBHOOKS="maybe" (--webhooks): want true or false`) {
		t.Errorf("PAYRECON_WEBHOOKS=maybe: exit %d: %s", code, stderr)
	}
	os.Unsetenv("PAYRECON_WEBHOOKS")

	// With --webhooks=false and nothing else refused, serve starts: told
	// to stop as soon as it logs that it listens, it drains and exits 0.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errOut := &cancelOn{want: "msg=listening", cancel: cancel}
	args := append(serve, "--provider", "stripe", "--webhooks=false", "--api=false")
	if code := runMain(ctx, args, io.Discard, errOut); code != 0 || !strings.Contains(errOut.String(), "worker stopped") {
		t.Errorf("%v: exit %d: %s", args, code, errOut.String())
	}
}

// cancelOn is a log writer that calls cancel once the log contains want.
type cancelOn struct {
	mu     sync.Mutex
	buf    strings.Builder
	want   string
	cancel func()
}

func (w *cancelOn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.cancel()
	}
	return len(p), nil
}

func (w *cancelOn) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestDemoRefusesBadTimeout(t *testing.T) {
	for _, v := range []string{"0s", "-1m", "soon"} {
		code, _, stderr := run(t, nil, "demo", "--timeout", v)
		if code != 2 || !strings.Contains(stderr, "-timeout") {
			t.Errorf("--timeout %s: exit %d: %s", v, code, stderr)
		}
	}
}

// postForm posts a form to the fake Stripe server's own endpoints, as an
// outside tool would, and fails the test unless it answers 200.
func postForm(t *testing.T, u string, form url.Values) {
	t.Helper()
	resp, err := http.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", u, resp.StatusCode, body)
	}
}

// TestAuditCommand runs `payrecon audit` against the fake Stripe server
// (its List API, over HTTP), after charges made outside payrecon through
// the server's POST /_fake/charges: a second charge for a succeeded
// purchase and a charge for no purchase. It prints both, stores them once
// however often it runs, and the operator commands list and close them.
func TestAuditCommand(t *testing.T) {
	now := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	f := newOpsFixtureWith(t, fakeprovider.Config{Now: func() time.Time { return now }})
	f.now = now
	p := f.purchase(t, true)
	if p.State != statemachine.Succeeded {
		t.Fatalf("set-up: %s is %s", p.ID, p.State)
	}
	postForm(t, f.api+"/_fake/charges", url.Values{"purchase_id": {p.ID}, "amount": {"300"}, "currency": {"usd"}, "webhooks": {"false"}})
	postForm(t, f.api+"/_fake/charges", url.Values{"amount": {"999"}, "currency": {"eur"}, "webhooks": {"false"}})
	var dup, orphan fakeprovider.Charge
	for _, c := range f.fake.Charges() {
		switch {
		case c.Outside && c.PurchaseID == p.ID:
			dup = c
		case c.Outside:
			orphan = c
		}
	}
	if dup.ID == "" || orphan.ID == "" {
		t.Fatalf("set-up: the fake's charges %+v", f.fake.Charges())
	}
	db := []string{"--database-url", f.db}
	audit := func(args ...string) []string {
		return append(append(append([]string{"audit"}, args...), db...), f.stripeArgs()...)
	}

	code, out, stderr := run(t, stripeEnv, audit("--since", "2h")...)
	if code != 0 {
		t.Fatalf("audit: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"payments listed: 3", "new findings: 2", "money at risk (new findings): 9.99 EUR, 3.00 USD", "open findings in all: 2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the audit's summary lacks %q:\n%s", want, out)
		}
	}
	for kind, n := range map[string]string{"duplicate_charge": "1", "orphan_charge": "1", "amount_mismatch": "0", "missing_at_provider": "0"} {
		if !regexp.MustCompile(`(?m)^  ` + kind + ` +` + n + `$`).MatchString(out) {
			t.Errorf("the summary does not count %s %s findings:\n%s", n, kind, out)
		}
	}
	lineOf := func(out, payment string) string {
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, payment) {
				return line
			}
		}
		return ""
	}
	if line := lineOf(out, dup.ID); !strings.Contains(line, "duplicate_charge") || !strings.Contains(line, p.ID) || !strings.Contains(line, "3.00 USD") {
		t.Errorf("the duplicate charge's line: %q\n%s", line, out)
	}
	if line := lineOf(out, orphan.ID); !strings.Contains(line, "orphan_charge") || !strings.Contains(line, "9.99 EUR") {
		t.Errorf("the orphan charge's line: %q\n%s", line, out)
	}
	c := f.inspect(t, p.ID)
	if c.Purchase.State != statemachine.Succeeded || c.Purchase.EscalationReason != reconcile.EscalationDuplicateCharge ||
		len(c.Findings) != 1 || c.Findings[0].PaymentID != dup.ID {
		t.Fatalf("the purchase after the audit: %s escalated for %q, findings %+v", c.Purchase.State, c.Purchase.EscalationReason, c.Findings)
	}
	if n := f.fake.MoneyTaken(p.ID); n != 2 {
		t.Errorf("%d charges for the purchase at the provider, want the 2 the audit found (it never moves money)", n)
	}
	// Each new finding is printed with the id close-finding takes.
	if id := fmt.Sprint(c.Findings[0].ID); c.Findings[0].ID == 0 || !strings.HasPrefix(lineOf(out, dup.ID), id+" ") {
		t.Errorf("the duplicate charge's line %q does not start with its stored id %s", lineOf(out, dup.ID), id)
	}

	// Again, over an overlapping window given as RFC 3339 times: nothing new.
	code, out, stderr = run(t, stripeEnv, audit("--since", now.Add(-3*time.Hour).Format(time.RFC3339), "--until", now.Add(time.Minute).Format(time.RFC3339))...)
	if code != 0 || !strings.Contains(out, "payments listed: 3") || !strings.Contains(out, "new findings: 0") || !strings.Contains(out, "open findings in all: 2") {
		t.Fatalf("second audit: exit %d: %s\n%s", code, stderr, out)
	}
	// A window before the charges lists nothing.
	code, out, stderr = run(t, stripeEnv, audit("--since", "5h", "--until", "4h")...)
	if code != 0 || !strings.Contains(out, "payments listed: 0") || !strings.Contains(out, "new findings: 0") {
		t.Fatalf("audit of an empty window: exit %d: %s\n%s", code, stderr, out)
	}

	// Bad command lines, and the in-process fake, are refused.
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{audit(), stripeEnv, "--since is required"},
		{audit("--since", "yesterday"), stripeEnv, `--since "yesterday"`},
		{audit("--since", "-2h"), stripeEnv, `--since "-2h"`},
		{audit("--since", "1h", "--until", "2h"), stripeEnv, "is not before --until"},
		{audit("--since", "2h", "extra"), stripeEnv, "unexpected arguments"},
		{append([]string{"audit", "--since", "2h"}, db...), nil, "the in-process fake provider (--provider fake, the default) knows no charges made by other processes"},
	} {
		if code, _, stderr := run(t, tc.env, tc.args...); code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, want 2 and %q: %s", tc.args, code, tc.want, stderr)
		}
	}

	// --account: the platform's list holds the duplicate of its purchase
	// and not the orphan, which is of no purchase; an account nobody
	// holds lists nothing; a malformed one is a usage error.
	code, out, stderr = run(t, nil, append([]string{"ops", "list", "--account", "platform", "--json"}, db...)...)
	var platform opsListJSON
	if err := json.Unmarshal([]byte(out), &platform); code != 0 || err != nil {
		t.Fatalf("ops list --account platform --json: exit %d, %v: %s\n%s", code, err, stderr, out)
	}
	if platform.Account != "platform" || len(platform.Findings) != 1 || platform.Findings[0].PurchaseID != p.ID || platform.Findings[0].Account != "platform" {
		t.Errorf("ops list --account platform: account %q, findings %+v; want the duplicate of %s only, of the platform", platform.Account, platform.Findings, p.ID)
	}
	if code, out, stderr := run(t, nil, append([]string{"ops", "findings", "--account", "acct_1Nobody"}, db...)...); code != 0 || !strings.Contains(out, "no open audit findings") {
		t.Errorf("ops findings --account acct_1Nobody: exit %d: %s\n%s", code, stderr, out)
	}
	for _, sub := range []string{"list", "findings"} {
		if code, _, stderr := run(t, nil, append([]string{"ops", sub, "--account", "acct-1"}, db...)...); code != 2 || !strings.Contains(stderr, `--account "acct-1" is not an account`) {
			t.Errorf("ops %s --account acct-1: exit %d, want 2: %s", sub, code, stderr)
		}
	}

	// The operator list and `ops findings` show both findings.
	code, out, stderr = run(t, nil, append([]string{"ops", "list"}, db...)...)
	if code != 0 || !strings.Contains(out, "open audit findings (2;") || !strings.Contains(out, "money at risk (open findings and open disputes): 9.99 EUR, 3.00 USD") ||
		!strings.Contains(lineOf(out, orphan.ID), "orphan_charge") || !strings.Contains(lineOf(out, p.ID), "duplicate_charge") {
		t.Fatalf("ops list: exit %d: %s\n%s", code, stderr, out)
	}
	code, out, stderr = run(t, nil, append([]string{"ops", "list", "--json"}, db...)...)
	var list opsListJSON
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil {
		t.Fatalf("ops list --json: exit %d, %v: %s\n%s", code, err, stderr, out)
	}
	var orphanID int64
	for _, fj := range list.Findings {
		if fj.PaymentID == orphan.ID {
			orphanID = fj.ID
			if fj.Kind != "orphan_charge" || fj.Amount != 999 || fj.Currency != "eur" || fj.PurchaseID != "" || !fj.Open || fj.Evidence == "" {
				t.Errorf("orphan finding in JSON: %+v", fj)
			}
		}
	}
	if len(list.Findings) != 2 || orphanID == 0 || len(list.Cases) != 1 || list.Cases[0].PurchaseID != p.ID || list.Cases[0].Reason != "duplicate_charge" {
		t.Fatalf("ops list --json: %+v", list)
	}
	code, out, _ = run(t, nil, append([]string{"ops", "show", p.ID}, db...)...)
	if code != 0 || !strings.Contains(out, "audit findings:") || !strings.Contains(lineOf(out, dup.ID), "duplicate_charge") {
		t.Errorf("ops show does not list the purchase's finding:\n%s", out)
	}

	// Close the orphan finding.
	closeArgs := func(args ...string) []string {
		return append(append([]string{"ops", "close-finding"}, args...), db...)
	}
	id := fmt.Sprint(orphanID)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{closeArgs(id, "--operator", "alice"), 2, "--note is required"},
		{closeArgs(id, "--note", "  ", "--operator", "alice"), 2, "--note is required"},
		{closeArgs("pi_x", "--note", "x"), 2, "finding id"},
		{closeArgs("--note", "x"), 2, "want exactly one finding id"},
		{closeArgs("99999", "--note", "x", "--operator", "alice"), 1, "no audit finding with id 99999"},
	} {
		if code, _, stderr := run(t, nil, tc.args...); code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, want %d and %q: %s", tc.args, code, tc.code, tc.want, stderr)
		}
	}
	code, out, stderr = run(t, nil, closeArgs(id, "--note", "test charge by support, refunded re_1", "--operator", "alice")...)
	if code != 0 || !strings.Contains(out, "finding "+id+" (orphan_charge, payment "+orphan.ID+") closed by alice") {
		t.Fatalf("close-finding: exit %d: %s\n%s", code, stderr, out)
	}
	if code, _, stderr := run(t, nil, closeArgs(id, "--note", "again", "--operator", "alice")...); code != 1 || !strings.Contains(stderr, "already closed") {
		t.Errorf("closing twice: exit %d: %s", code, stderr)
	}
	code, out, _ = run(t, nil, append([]string{"ops", "findings"}, db...)...)
	if code != 0 || strings.Contains(out, orphan.ID) || !strings.Contains(out, dup.ID) {
		t.Errorf("ops findings after closing one:\n%s", out)
	}
	code, out, _ = run(t, nil, append([]string{"ops", "findings", "--all", "--json"}, db...)...)
	var all []findingJSON
	if err := json.Unmarshal([]byte(out), &all); code != 0 || err != nil || len(all) != 2 {
		t.Fatalf("ops findings --all --json: exit %d, %v:\n%s", code, err, out)
	}
	for _, fj := range all {
		if fj.ID == orphanID && (fj.Open || fj.ClosedBy != "alice" || fj.CloseNote != "test charge by support, refunded re_1" || fj.ClosedAt == nil) {
			t.Errorf("closed finding: %+v", fj)
		}
	}
	// Refund the duplicate charge from the command line: a refund of the
	// finding's payment, through the refund process; a closed finding
	// refunds nothing.
	var dupID int64
	for _, fj := range all {
		if fj.PaymentID == dup.ID {
			dupID = fj.ID
		}
	}
	refundArgs := func(args ...string) []string {
		return append(append([]string{"ops", "refund-charge"}, args...), db...)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{refundArgs(fmt.Sprint(dupID), "--operator", "alice"), 2, "--evidence is required"},
		{refundArgs(fmt.Sprint(dupID), "--evidence", "x", "--amount", "-1"), 2, "--amount -1"},
		{refundArgs("99999", "--evidence", "x", "--operator", "alice"), 1, "no audit finding with id 99999"},
		{refundArgs(id, "--evidence", "x", "--operator", "alice"), 1, "is closed; nothing was refunded"},
	} {
		if code, _, stderr := run(t, nil, tc.args...); code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, want %d and %q: %s", tc.args, code, tc.code, tc.want, stderr)
		}
	}
	code, out, stderr = run(t, nil, refundArgs(fmt.Sprint(dupID), "--evidence", "two charges in the dashboard", "--operator", "alice")...)
	if code != 0 || !strings.Contains(out, "from payment "+dup.ID+" created (state created)") {
		t.Fatalf("ops refund-charge: exit %d: %s\n%s", code, stderr, out)
	}
}

// TestOpsResolveOverride: a resolution the provider's live view
// contradicts (declined, while the provider holds the successful charge)
// is refused with the provider's answer and how to override, changing
// nothing; with --override-provider it goes through and the reason is
// recorded beside the provider's answer.
func TestOpsResolveOverride(t *testing.T) {
	f := newOpsFixture(t)
	id := f.escalated(t, true, fakeprovider.LostReply) // charged, reply lost
	charge := f.fake.ChargesFor(id)[0].ID
	before := f.inspect(t, id)
	args := append([]string{"ops", "resolve", id, "--declined", "--evidence", "the customer says no money left the account", "--yes",
		"--operator", "alice", "--database-url", f.db}, f.stripeArgs()...)
	code, out, stderr := run(t, stripeEnv, args...)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s\n%s", code, out, stderr)
	}
	for _, want := range []string{"ops resolve refused (the provider's live view contradicts the resolution): ", "the provider answered:", charge,
		"succeeded", "--override-provider \"REASON\"", "nothing changed"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, stderr)
		}
	}
	after := f.inspect(t, id)
	if after.Purchase.Version != before.Purchase.Version || after.Purchase.State != statemachine.Uncertain || !after.Purchase.Escalated() ||
		len(after.Transitions) != len(before.Transitions) || len(after.Actions) != 0 {
		t.Fatalf("the refused resolution changed the purchase: %+v, %d transitions, actions %+v", after.Purchase, len(after.Transitions), after.Actions)
	}

	reason := "refunded by hand in the dashboard, ticket OPS-9"
	code, out, stderr = run(t, stripeEnv, append(args, "--override-provider", reason)...)
	if code != 0 || !strings.Contains(out, id+" is now declined (overriding the provider: "+reason+")") {
		t.Fatalf("with --override-provider: exit %d: %s\n%s", code, stderr, out)
	}
	c := f.inspect(t, id)
	if c.Purchase.State != statemachine.Declined || c.Purchase.Escalated() || len(c.Actions) != 1 {
		t.Fatalf("after the override: %+v, actions %+v", c.Purchase, c.Actions)
	}
	a := c.Actions[0]
	if a.Operator != "alice" || !strings.Contains(a.Did, "override: "+reason) || !strings.Contains(a.Saw, "payment="+charge) ||
		!strings.Contains(a.Saw, "outcome=succeeded") {
		t.Errorf("operator action %+v: want the override reason and the provider's answer", a)
	}
	if last := c.Transitions[len(c.Transitions)-1]; !strings.Contains(last.Evidence, "overriding the provider") || !strings.Contains(last.Evidence, reason) {
		t.Errorf("last transition %+v: want the override in its evidence", last)
	}
	code, out, _ = run(t, nil, "ops", "show", id, "--database-url", f.db)
	if code != 0 || !strings.Contains(out, "override: "+reason) || !strings.Contains(out, "provider showed: ") {
		t.Errorf("ops show does not show the override and the provider's answer:\n%s", out)
	}
}

// TestOpsResolveSucceededWithoutCharge: calling succeeded a purchase the
// provider holds no charge for is refused, naming --override-provider;
// with it, the resolution and its reason are recorded, and the audit then
// reports the purchase as missing at the provider.
func TestOpsResolveSucceededWithoutCharge(t *testing.T) {
	f := newOpsFixture(t)
	id := f.escalated(t, true, fakeprovider.Timeout) // the create never reached the provider
	before := f.inspect(t, id)
	args := append([]string{"ops", "resolve", id, "--succeeded", "--evidence", "the customer says they paid", "--yes",
		"--operator", "alice", "--database-url", f.db}, f.stripeArgs()...)
	code, out, stderr := run(t, stripeEnv, args...)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s\n%s", code, out, stderr)
	}
	for _, want := range []string{"ops resolve refused", "no payment", "not_found", "--override-provider \"REASON\"", "nothing changed"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, stderr)
		}
	}
	after := f.inspect(t, id)
	if after.Purchase.Version != before.Purchase.Version || after.Purchase.State != statemachine.Uncertain ||
		len(after.Transitions) != len(before.Transitions) || len(after.Actions) != 0 {
		t.Fatalf("the refused resolution changed the purchase: %+v, %d transitions, actions %+v", after.Purchase, len(after.Transitions), after.Actions)
	}

	reason := "paid by bank transfer, ticket OPS-12"
	code, out, stderr = run(t, stripeEnv, append(args, "--override-provider", reason)...)
	if code != 0 || !strings.Contains(out, id+" is now succeeded (overriding the provider: "+reason+")") {
		t.Fatalf("with --override-provider: exit %d: %s\n%s", code, stderr, out)
	}
	c := f.inspect(t, id)
	if c.Purchase.State != statemachine.Succeeded || c.Purchase.ProviderPaymentID != "" || len(c.Actions) != 1 ||
		!strings.Contains(c.Actions[0].Did, "override: "+reason) || !strings.Contains(c.Actions[0].Saw, "outcome=not_found") {
		t.Fatalf("after the override: %+v, actions %+v", c.Purchase, c.Actions)
	}
	if n := f.fake.MoneyTaken(id); n != 0 {
		t.Fatalf("%d charges, want none", n)
	}

	svc, _, done := f.serviceAt(t, true, time.Now)
	defer done()
	now := time.Now().UTC()
	rep, err := svc.Audit(context.Background(), provider.Window{From: now.Add(-2 * time.Hour), Until: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.New) != 1 || rep.New[0].Kind != reconcile.FindingMissingAtProvider || rep.New[0].PurchaseID != id || rep.New[0].Amount != 300 {
		t.Fatalf("findings %+v, want one missing_at_provider for %s, 300 at risk", rep.New, id)
	}
}

// TestOpsRetryEvent: ops retry-event puts a failed webhook event back in
// the inbox, pending, with the operator's name; an event that did not
// fail, or none, is refused.
func TestOpsRetryEvent(t *testing.T) {
	f := newOpsFixture(t)
	svc, _, done := f.service(t, false)
	ctx := context.Background()
	err := svc.Store().InTx(ctx, func(tx reconcile.Tx) error {
		for _, id := range []string{"evt_broken", "evt_waiting"} {
			if _, err := tx.InsertInboxEvent(ctx, reconcile.InboxEvent{Provider: "stripe", EventID: id, Outcome: reconcile.EventPending, ReceivedAt: f.now}); err != nil {
				return err
			}
		}
		if err := tx.RecordInboxFailure(ctx, reconcile.InboxFailure{Provider: "stripe", EventID: "evt_waiting", Attempts: 1, Error: "busy",
			At: f.now, RetryAt: f.now.Add(time.Second), Outcome: reconcile.EventPending}); err != nil {
			return err
		}
		return tx.RecordInboxFailure(ctx, reconcile.InboxFailure{Provider: "stripe", EventID: "evt_broken", Attempts: 8, Error: "boom", At: f.now, Outcome: reconcile.EventFailed})
	})
	done()
	if err != nil {
		t.Fatal(err)
	}
	// The operator's list tells the event waiting out a retry from the
	// one given up on.
	code, out, stderr := run(t, nil, "ops", "list", "--database-url", f.db)
	if code != 0 || !strings.Contains(out, "webhook inbox: 1 received and not yet applied") ||
		!strings.Contains(out, "1 of them failed to apply and will be tried again") || !strings.Contains(out, "evt_broken") {
		t.Fatalf("ops list: exit %d: %s%s", code, out, stderr)
	}
	code, out, stderr = run(t, nil, "ops", "list", "--json", "--database-url", f.db)
	var list struct {
		Inbox struct{ Pending, Retrying, Failed int } `json:"webhook_inbox"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || list.Inbox.Pending != 1 || list.Inbox.Retrying != 1 || list.Inbox.Failed != 1 {
		t.Fatalf("ops list --json: exit %d, inbox %+v: %s%s", code, list.Inbox, out, stderr)
	}
	code, out, stderr = run(t, nil, "ops", "retry-event", "evt_broken", "--operator", "alice", "--database-url", f.db)
	if code != 0 || !strings.Contains(out, "webhook event evt_broken is pending again") {
		t.Fatalf("exit %d: %s%s", code, out, stderr)
	}
	svc, _, done = f.service(t, false)
	defer done()
	failed, backlog, err := svc.FailedEvents(ctx, 10)
	// The operator's retry is due at once: pending, not waiting out a
	// backoff as evt_waiting is.
	if err != nil || len(failed) != 0 || backlog.Pending != 2 || backlog.Retrying != 1 {
		t.Fatalf("after the retry: failed %v, backlog %+v, %v; want none failed, 2 pending, 1 of them retrying", failed, backlog, err)
	}
	for _, id := range []string{"evt_waiting", "evt_none"} {
		code, _, stderr = run(t, nil, "ops", "retry-event", id, "--database-url", f.db)
		if code != 1 || !strings.Contains(stderr, "no failed webhook event "+id) {
			t.Fatalf("retry of %s: exit %d: %s", id, code, stderr)
		}
	}
	if code, _, _ := run(t, nil, "ops", "retry-event", "--database-url", f.db); code != 2 {
		t.Fatalf("retry-event without an id: exit %d, want 2", code)
	}
}
