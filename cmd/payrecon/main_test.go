package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/demo"
	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/cron"
	"github.com/payrecon/payrecon/reconcile/prometheus"
	"github.com/payrecon/payrecon/reconcile/sqlite"
	"github.com/payrecon/payrecon/statemachine"
)

// run calls runMain as the command line would, returning its exit code and
// output.
func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var stdout, stderr bytes.Buffer
	code := runMain(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestDemoEndToEnd runs `payrecon demo --json` and checks its report: every
// scenario ends as expected, with the charges the seed lesson demands, and
// the audit from the provider's side finds exactly the disagreements the
// scenarios made, with the money they put at risk.
func TestDemoEndToEnd(t *testing.T) {
	// A generous wall-time limit: a slow machine fails only on behaviour.
	code, stdout, stderr := run(t, nil, "demo", "--json", "--timeout", "5m")
	if code != 0 {
		t.Fatalf("demo exited %d\n%s", code, stderr)
	}
	var report demo.Report
	if err := json.Unmarshal([]byte(stdout), &report); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, stdout)
	}
	if !report.OK || len(report.Results) != len(demo.Scenarios()) {
		t.Fatalf("report: ok=%v, %d results", report.OK, len(report.Results))
	}
	want := map[string]struct {
		state      string
		escalation string
		charges    int
	}{
		"clean success":                             {"succeeded", "", 1},
		"decline":                                   {"declined", "", 0},
		"reply lost after the charge":               {"succeeded", "", 1},
		"timeout before the charge":                 {"succeeded", "", 1},
		"delayed webhook":                           {"succeeded", "", 1},
		"duplicated webhook":                        {"succeeded", "", 1},
		"stale processing after success":            {"succeeded", "", 1},
		"search not-found lag":                      {"succeeded", "", 1},
		"key retention expired, outcome unknown":    {"uncertain", "key_retention_expired", 0},
		"success after a decline":                   {"declined", "state_disagreement", 1},
		"second charge outside payrecon":            {"succeeded", "duplicate_charge", 2},
		"late approval, no webhook":                 {"declined", "state_disagreement", 1},
		"webhook with a wrong amount":               {"uncertain", "amount_mismatch", 1},
		"refund with a lost reply":                  {"succeeded", "", 1},
		"duplicate charge refunded by the operator": {"succeeded", "duplicate_charge", 2},
		"disputed and lost":                         {"succeeded", "", 1},
	}
	// The refunds: the lost reply's refund is settled by its webhook or
	// by replaying its own key, whichever first, and made once; the
	// operator's refund of the duplicate charge leaves one net charge.
	wantRefunds := map[string]struct {
		maxCreates, net int
	}{
		"refund with a lost reply":                  {2, 0},
		"duplicate charge refunded by the operator": {1, 1},
	}
	for _, r := range report.Results {
		w, ok := want[r.Scenario]
		if !ok {
			t.Errorf("unexpected scenario %q", r.Scenario)
			continue
		}
		if !r.OK || r.FinalState != w.state || r.Escalation != w.escalation || r.Charges != w.charges {
			t.Errorf("%s: %+v, want %+v", r.Scenario, r, w)
		}
		if len(r.Timeline) < 2 {
			t.Errorf("%s: timeline has %d lines", r.Scenario, len(r.Timeline))
		}
		if wr, ok := wantRefunds[r.Scenario]; ok {
			if len(r.Refunds) != 1 || r.Refunds[0].State != "succeeded" || r.Refunds[0].ProviderRefunds != 1 ||
				r.Refunds[0].Creates < 1 || r.Refunds[0].Creates > wr.maxCreates || r.NetCharges != wr.net {
				t.Errorf("%s: refunds %+v, %d net charges; want one succeeded refund made once in at most %d creates, %d net charges",
					r.Scenario, r.Refunds, r.NetCharges, wr.maxCreates, wr.net)
			}
		} else if len(r.Refunds) != 0 {
			t.Errorf("%s: unexpected refunds %+v", r.Scenario, r.Refunds)
		}
		// The chargeback: lost, its money withdrawn; the refund asked for
		// while it was open refused, nothing refunded.
		if r.Scenario == "disputed and lost" && (len(r.Disputes) != 1 || r.Disputes[0].State != "lost" ||
			r.Disputes[0].Withdrawn != r.Disputes[0].Amount || !strings.Contains(r.RefusedRefund, "the payment is disputed") || r.NetCharges != 1) {
			t.Errorf("%s: disputes %+v, refused refund %q, %d net charges; want one lost, withdrawn, the refund refused as disputed, 1 net charge",
				r.Scenario, r.Disputes, r.RefusedRefund, r.NetCharges)
		}
		// The clock stands still until the wrong amount's webhook is
		// judged: its purchase never gets a replay. (Its first create may
		// not have been sent at all, when a loaded machine let the
		// simulated clock pass the lease before the call.)
		if r.Scenario == "webhook with a wrong amount" && r.Creates > 1 {
			t.Errorf("%s: %d create calls, want at most 1: no replay after the webhook was judged", r.Scenario, r.Creates)
		}
	}

	// The audit found each disagreement once, and nothing about the other
	// purchases.
	a := report.Audit
	if a == nil {
		t.Fatal("the report has no audit")
	}
	wantFindings := map[string]string{
		"success after a decline":                   "state_disagreement",
		"second charge outside payrecon":            "duplicate_charge",
		"late approval, no webhook":                 "state_disagreement",
		"duplicate charge refunded by the operator": "duplicate_charge",
		"webhook with a wrong amount":               "amount_mismatch",
	}
	var atRisk int64
	for _, f := range a.Findings {
		if wantFindings[f.Scenario] != f.Kind {
			t.Errorf("unexpected finding %+v", f)
		}
		delete(wantFindings, f.Scenario)
		if f.Kind == "amount_mismatch" && f.Amount != demo.WrongAmount {
			t.Errorf("amount_mismatch puts %d %s at risk, want the wrong amount %d", f.Amount, f.Currency, demo.WrongAmount)
		}
		if f.Amount <= 0 || f.Currency != "usd" || f.PaymentID == "" {
			t.Errorf("finding without its money at risk: %+v", f)
		}
		atRisk += f.Amount
	}
	for scenario, kind := range wantFindings {
		t.Errorf("no %s finding for %q", kind, scenario)
	}
	// The chargeback, open at the audit, is at risk too.
	if len(a.Disputes) != 1 || a.Disputes[0].Scenario != "disputed and lost" || a.Disputes[0].Amount <= 0 || a.Disputes[0].Currency != "usd" {
		t.Errorf("open disputes at the audit %+v, want the chargeback of \"disputed and lost\"", a.Disputes)
	}
	for _, d := range a.Disputes {
		atRisk += d.Amount
	}
	if len(a.AtRisk) != 1 || a.AtRisk[0] != (demo.Money{Amount: atRisk, Currency: "usd"}) {
		t.Errorf("money at risk %+v, want %d usd", a.AtRisk, atRisk)
	}
	if a.Payments < len(report.Results) {
		t.Errorf("the audit listed %d payments, fewer than the scenarios", a.Payments)
	}
	for _, line := range []string{"Summary (", "Audit from the provider's side", "Money at risk: ", "All scenarios ended as expected"} {
		if !strings.Contains(stderr, line) {
			t.Errorf("the human report lacks %q", line)
		}
	}
	checkREADMEDemoFigures(t, len(report.Results), len(a.Findings), a.AtRisk)
}

// checkREADMEDemoFigures fails when the README's account of the demo (its
// scenarios, the audit's findings, the money at risk) differs from what
// the demo did.
func checkREADMEDemoFigures(t *testing.T, scenarios, findings int, atRisk []demo.Money) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := strings.Join(strings.Fields(string(data)), " ")
	money := make([]string, len(atRisk))
	for i, m := range atRisk {
		money[i] = m.String()
	}
	for _, f := range []struct{ re, want string }{
		{`it plays (\d+) scenarios`, strconv.Itoa(scenarios)},
		{`which finds (\d+) findings`, strconv.Itoa(findings)},
		{`findings with (.+?) at risk`, strings.Join(money, " and ")},
	} {
		m := regexp.MustCompile(f.re).FindStringSubmatch(readme)
		if m == nil {
			t.Errorf("README.md does not say %q about the demo", f.re)
			continue
		}
		if m[1] != f.want {
			t.Errorf("README.md says of the demo %q, but the demo gave %s", m[0], f.want)
		}
	}
}

// TestEndToEndWebhookFaults: 500 purchases through the real stripe adapter
// against the fake Stripe server, with every webhook fault on and create
// faults too. Each purchase ends terminal or escalated, with exactly one
// charge for each success and no forbidden move.
func TestEndToEndWebhookFaults(t *testing.T) {
	n := 500
	if testing.Short() {
		n = 100
	}
	ctx := context.Background()
	// The store, the worker and the fake share the simulated clock.
	clock := testclock.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "e2e.db"), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	stk, err := startStack(ctx, stackConfig{
		store: st,
		clock: clock.Now,
		fake: fakeprovider.Config{Seed: 11, SettleAfter: time.Minute, SearchLag: 30 * time.Second, Faults: fakeprovider.Faults{
			LostReply: 0.10, Timeout: 0.02, FailBefore: 0.05, Processing: 0.05, StaleProcessing: 0.05, Decline: 0.05,
		}},
		hooks: fakeprovider.WebhookFaults{Drop: 0.1, Duplicate: 0.2, Reorder: 0.2, Delay: 0.2, StaleProcessing: 0.1},
		reconcile: reconcile.Config{
			// The lease outlasts the simulated minutes that pass during a
			// real call; the key replay margin (1h) must exceed it.
			WorkerID: "e2e", LeaseDuration: 30 * time.Minute, ProviderTimeout: 200 * time.Millisecond,
			PollInterval: 5 * time.Millisecond, BatchSize: 32, Concurrency: 4,
		},
		log: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < n; i++ {
		p, err := stk.svc.CreatePurchase(ctx, reconcile.NewPurchase{Customer: "e2e", Amount: int64(100 + i), Currency: "eur"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	// settled counts the purchases that are terminal or escalated, and
	// returns the earliest time a job of another one is due.
	settled := func() (int, time.Time) {
		k, next := 0, clock.Now().Add(time.Hour)
		for _, id := range ids {
			d, err := stk.svc.Purchase(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if d.Purchase.State.Terminal() || d.Purchase.Escalated() {
				k++
			} else if d.Job.RunAt.Before(next) {
				next = d.Job.RunAt
			}
		}
		return k, next
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		k, next := settled()
		if k == n {
			break
		}
		if time.Now().After(deadline) {
			reportUnsettled(t, stk.svc, ids, clock.Now())
			t.Fatalf("%d of %d purchases settled after 3 minutes", k, n)
		}
		// A minute passes, or more when every purchase left waits longer:
		// a purchase whose checks keep timing out on a loaded machine
		// walks its backoff (up to an hour a check) to the attempt budget
		// without the test ticking through every minute of it. A step
		// stays well within the lease, which a call in flight (an
		// escalated purchase's check, say) must outlast.
		step := min(max(time.Minute, next.Sub(clock.Now())), 10*time.Minute)
		clock.Advance(step)
		stk.fakeSrv.Tick()
		// Let the worker and deliveries run; progress is checked, not slept on.
		drainCtx, cancel := context.WithTimeout(ctx, time.Second)
		_ = stk.fakeSrv.Drain(drainCtx)
		cancel()
	}
	if err := stk.stop(); err != nil {
		t.Fatal(err)
	}

	states := map[statemachine.State]int{}
	for _, id := range ids {
		d, err := stk.svc.Purchase(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		p := d.Purchase
		states[p.State]++
		charges := stk.fake.MoneyTaken(id)
		switch {
		case p.State == statemachine.Succeeded && charges != 1:
			t.Errorf("%s succeeded with %d charges", id, charges)
		case p.State == statemachine.Declined && charges != 0:
			t.Errorf("%s declined with %d charges", id, charges)
		case charges > 1:
			t.Errorf("%s has %d charges", id, charges)
		}
		for _, tr := range d.Transitions {
			if err := statemachine.Transition(tr.From, tr.To); err != nil {
				t.Errorf("%s: %v", id, err)
			}
		}
	}
	if dc := stk.fake.DoubleCharged(); len(dc) != 0 {
		t.Fatalf("double charged: %v", dc)
	}
	ws := stk.fakeSrv.WebhookStats()
	t.Logf("%d purchases: %v; webhooks: %+v", n, states, ws)
	if ws.Duplicated == 0 || ws.Dropped == 0 || ws.Reordered == 0 || ws.Delayed == 0 || ws.Stale == 0 {
		t.Fatalf("not every webhook fault happened: %+v", ws)
	}
}

// reportUnsettled logs every purchase of ids that is neither terminal nor
// escalated, with its job, transitions and attempts, so that a purchase
// left behind can be told from a slow machine.
func reportUnsettled(t *testing.T, svc *reconcile.Service, ids []string, now time.Time) {
	t.Helper()
	for _, id := range ids {
		d, err := svc.Purchase(context.Background(), id)
		if err != nil {
			t.Errorf("%s: %v", id, err)
			continue
		}
		if d.Purchase.State.Terminal() || d.Purchase.Escalated() {
			continue
		}
		t.Logf("unsettled at %s: %+v\njob: %+v", now.Format(time.RFC3339), d.Purchase, d.Job)
		for _, tr := range d.Transitions {
			t.Logf("  transition %+v", tr)
		}
		for _, a := range d.Attempts {
			t.Logf("  attempt %+v", a)
		}
	}
}

// TestNewcomerBinary builds payrecon and runs it as a newcomer would, with
// no database configured: it creates the SQLite file in the user's data
// directory, applies the schema, and works.
func TestNewcomerBinary(t *testing.T) {
	bin := buildBinary(t)
	data := t.TempDir()
	env := append(cleanEnv(), "XDG_DATA_HOME="+data, "HOME="+t.TempDir())
	out := runBinary(t, bin, env, "purchase", "create", "--amount", "300", "--currency", "usd", "--customer", "C", "--description", "D")
	id := strings.TrimSpace(out)
	if !strings.HasPrefix(id, "pur_") {
		t.Fatalf("purchase create printed %q, want an id", out)
	}
	dbPath := filepath.Join(data, "payrecon", "payrecon.db")
	if _, err := os.Stat(dbPath); err != nil {
		t.Fatalf("no SQLite file at %s: %v", dbPath, err)
	}
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: dbPath})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Ready(context.Background()); err != nil {
		t.Fatalf("schema not applied: %v", err)
	}
	show := runBinary(t, bin, env, "purchase", "show", id)
	for _, want := range []string{"state", "created", "3.00 USD"} {
		if !strings.Contains(show, want) {
			t.Fatalf("purchase show lacks %q:\n%s", want, show)
		}
	}
	// Bad input is refused with a clear message and nothing stored.
	cmd := exec.Command(bin, "purchase", "create", "--amount", "-5", "--currency", "usd", "--customer", "C")
	cmd.Env = env
	msg, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "amount") {
		t.Fatalf("negative amount: %v\n%s", err, msg)
	}
	cmd = exec.Command(bin, "purchase", "show", "pur_nope")
	cmd.Env = env
	if msg, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(msg), `no purchase with id "pur_nope"`) {
		t.Fatalf("unknown id: %v\n%s", err, msg)
	}
}

// TestServeDrainsOnSIGTERM starts `payrecon serve`, checks it answers, sends
// SIGTERM and expects a clean exit with the worker stopped.
func TestServeDrainsOnSIGTERM(t *testing.T) {
	bin := buildBinary(t)
	env := append(cleanEnv(),
		"PAYRECON_DATABASE_URL=sqlite:"+filepath.Join(t.TempDir(), "serve.db"),
		"PAYRECON_ADDR=127.0.0.1:0",
		"PAYRECON_API_TOKEN=shop:shop-token-0123456789",
		"PAYRECON_OPS_TOKEN=ops-token-0123456789abcdef")
	cmd := exec.Command(bin, "serve")
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	addr := ""
	var log []string
	timeout := time.After(30 * time.Second)
	for addr == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("serve exited early:\n%s", strings.Join(log, "\n"))
			}
			log = append(log, line)
			if i := strings.Index(line, "msg=listening addr="); i >= 0 {
				addr = strings.Fields(line[i+len("msg=listening addr="):])[0]
			}
		case <-timeout:
			t.Fatalf("serve did not listen:\n%s", strings.Join(log, "\n"))
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %v %v", path, err, resp)
		}
		resp.Body.Close()
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for line := range lines {
			log = append(log, line)
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve exited with %v after SIGTERM:\n%s", err, strings.Join(log, "\n"))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30s of SIGTERM")
	}
	if !strings.Contains(strings.Join(log, "\n"), "worker stopped") {
		t.Fatalf("no clean worker stop in the log:\n%s", strings.Join(log, "\n"))
	}
}

func TestServeRefusesUnauthenticatedAPI(t *testing.T) {
	code, _, stderr := run(t, map[string]string{
		"PAYRECON_DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "x.db"),
		"PAYRECON_API_TOKEN":    "",
	}, "serve", "--addr", "127.0.0.1:0")
	if code != 2 || !strings.Contains(stderr, "refusing to serve the purchase API unauthenticated") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

func TestBadSettingsAreNamed(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "x.db")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"worker", "--database-url", db, "--lease-duration", "soon"}, "--lease-duration"},
		{[]string{"worker", "--database-url", db, "--fake-faults", "lost_reply=2"}, "lost_reply=2"},
		{[]string{"worker", "--database-url", db, "--inbox-retention", "24h"}, "redelivery window"},
		{[]string{"worker", "--database-url", db, "--sweep-audit", "every hour"}, `--sweep-audit "every hour"`},
		{[]string{"worker", "--database-url", db, "--audit-overlap", "soon"}, "--audit-overlap"},
		{[]string{"worker", "--database-url", db, "--audit-settle", "0s"}, "--audit-settle"},
		{[]string{"worker", "--database-url", "mysql://x"}, "want postgres://"},
		{[]string{"worker", "--database-url", "postgres://nobody@127.0.0.1:1/none"}, "cannot reach database"},
		{[]string{"purchase", "create", "--database-url", db, "--amount", "3.50", "--currency", "usd", "--customer", "c"}, "whole number"},
		{[]string{"nonsense"}, "unknown command"},
	}
	for _, tt := range tests {
		code, _, stderr := run(t, nil, tt.args...)
		if code == 0 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q, want it to mention %q", tt.args, code, stderr, tt.want)
		}
	}
}

// TestHelpListsSettings: `payrecon help settings` lists every setting
// with its variable, and `payrecon help` the commands.
func TestHelpListsSettings(t *testing.T) {
	code, commands, _ := run(t, nil, "help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	code, out, _ := run(t, nil, "help", "settings")
	if code != 0 {
		t.Fatalf("help settings: exit %d", code)
	}
	out = commands + out
	for _, want := range []string{"--database-url", "PAYRECON_DATABASE_URL", "--lease-duration", "--backoff", "--max-attempts",
		"--max-uncertain-age", "--key-retention", "--provider", "--fake-faults", "--worker-id", "--addr", "127.0.0.1:8080", "STRIPE_SECRET_KEY",
		"--webhooks", "PAYRECON_WEBHOOKS", "--sweep-audit", "PAYRECON_SWEEP_AUDIT", "--audit-overlap", "PAYRECON_AUDIT_OVERLAP",
		"--audit-settle", "PAYRECON_AUDIT_SETTLE", "audit --since T"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %s", want)
		}
	}
	// --addr is the listen address of every command that listens, with
	// worker's own default.
	_, block, ok := strings.Cut(out, "\n  --addr host:port")
	if !ok {
		t.Fatalf("help has no --addr row:\n%s", out)
	}
	block, _, _ = strings.Cut(block, "\n  --")
	for _, want := range []string{"serve", "worker", "fakeprovider", "default " + defaultAddr, "(worker " + defaultWorkerAddr + ")", "(fakeprovider " + defaultFakeAddr + ")"} {
		if !strings.Contains(block, want) {
			t.Errorf("the --addr row does not name %s: %q", want, block)
		}
	}
}

// TestAuditSettings: the audit sweep's schedule and the audit's overlap
// and settle time come from their flags, else the environment, else the
// defaults, and reach the sweeps and the service.
func TestAuditSettings(t *testing.T) {
	unsetenv(t, "PAYRECON_SWEEP_AUDIT", "PAYRECON_AUDIT_OVERLAP", "PAYRECON_AUDIT_SETTLE")
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		schedule string
		overlap  time.Duration
		settle   time.Duration
	}{
		{"defaults", nil, nil, "@hourly", time.Hour, 5 * time.Minute},
		{"flags", nil, []string{"--sweep-audit", "*/10 * * * *", "--audit-overlap", "2h", "--audit-settle", "10m"}, "*/10 * * * *", 2 * time.Hour, 10 * time.Minute},
		{"environment", map[string]string{"PAYRECON_SWEEP_AUDIT": "@every 2h", "PAYRECON_AUDIT_OVERLAP": "90m", "PAYRECON_AUDIT_SETTLE": "1m"},
			nil, "@every 2h", 90 * time.Minute, time.Minute},
		{"a flag wins over the environment", map[string]string{"PAYRECON_SWEEP_AUDIT": "@every 2h"},
			[]string{"--sweep-audit", "@daily"}, "@daily", time.Hour, 5 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			ctx := context.Background()
			e := &env{stdout: io.Discard, stderr: io.Discard, settings: newSettings()}
			args := append([]string{"--database-url", "sqlite:" + filepath.Join(t.TempDir(), "s.db")}, tt.args...)
			if _, err := e.parse("worker", args, nil); err != nil {
				t.Fatal(err)
			}
			svc, cleanup, err := newService(ctx, e)
			if err != nil {
				t.Fatal(err)
			}
			defer cleanup()
			if got := svc.Config(); got.AuditOverlap != tt.overlap || got.AuditSettle != tt.settle {
				t.Errorf("audit overlap %s, settle %s; want %s, %s", got.AuditOverlap, got.AuditSettle, tt.overlap, tt.settle)
			}
			sweeps, err := e.sweeps(svc, prometheus.New())
			if err != nil {
				t.Fatal(err)
			}
			var schedule string
			for _, sw := range sweeps {
				if sw.Name == cron.SweepAudit {
					schedule = sw.Schedule
				}
			}
			if schedule != tt.schedule {
				t.Errorf("audit sweep schedule %q, want %q", schedule, tt.schedule)
			}
		})
	}
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "payrecon")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// cleanEnv is the test's environment without payrecon settings.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PAYRECON_") && !strings.HasPrefix(kv, "STRIPE_") &&
			!strings.HasPrefix(kv, "XDG_DATA_HOME=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	return env
}

func runBinary(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("payrecon %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}
