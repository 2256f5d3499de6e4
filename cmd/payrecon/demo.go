package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// scenario is one purchase of the demo: the fault it meets and the outcome
// payrecon must reach despite it.
type scenario struct {
	name   string
	faults []fakeprovider.Fault        // the purchase's create calls, in order
	hooks  []fakeprovider.WebhookFault // its webhook events, in order
	want   statemachine.State
	// escalation is the reason it must end on the operator list with, or
	// "" for a purchase that must end off it.
	escalation reconcile.EscalationReason
	charges    int // charges with money taken at the provider
	// webhook, if set, is an event outcome that must be seen for it.
	webhook reconcile.EventOutcome
	expect  string // the expected outcome, in words
}

// demoScenarios are the failures of the seed lesson, one purchase each.
func demoScenarios() []scenario {
	return []scenario{
		{name: "clean success", want: statemachine.Succeeded, charges: 1,
			expect: "succeeded, 1 charge"},
		{name: "decline", faults: []fakeprovider.Fault{fakeprovider.Decline}, want: statemachine.Declined,
			expect: "declined, no charge"},
		{name: "reply lost after the charge", faults: []fakeprovider.Fault{fakeprovider.LostReply},
			hooks: []fakeprovider.WebhookFault{fakeprovider.WebhookDrop}, want: statemachine.Succeeded, charges: 1,
			expect: "succeeded by replaying the same key, 1 charge"},
		{name: "timeout before the charge", faults: []fakeprovider.Fault{fakeprovider.Timeout},
			want: statemachine.Succeeded, charges: 1, expect: "succeeded by replaying the same key, 1 charge"},
		{name: "delayed webhook", faults: []fakeprovider.Fault{fakeprovider.LostReply},
			hooks: []fakeprovider.WebhookFault{fakeprovider.WebhookDelay}, want: statemachine.Succeeded, charges: 1,
			expect: "succeeded (webhook or replay, whichever first), 1 charge"},
		{name: "duplicated webhook", faults: []fakeprovider.Fault{fakeprovider.LostReply},
			hooks: []fakeprovider.WebhookFault{fakeprovider.WebhookDuplicate}, want: statemachine.Succeeded, charges: 1,
			webhook: reconcile.EventDuplicate, expect: "succeeded, the duplicate changes nothing, 1 charge"},
		{name: "stale processing after success",
			hooks: []fakeprovider.WebhookFault{fakeprovider.WebhookStaleProcessing}, want: statemachine.Succeeded, charges: 1,
			webhook: reconcile.EventStale, expect: "succeeded, the stale processing changes nothing, 1 charge"},
		{name: "search not-found lag",
			faults: []fakeprovider.Fault{fakeprovider.LostReply, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout},
			hooks:  []fakeprovider.WebhookFault{fakeprovider.WebhookDrop}, want: statemachine.Succeeded, charges: 1,
			expect: "succeeded once search catches up, never a second create, 1 charge"},
		{name: "key retention expired, outcome unknown",
			faults: []fakeprovider.Fault{fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout},
			want:   statemachine.Uncertain, escalation: reconcile.EscalationKeyRetentionExpired,
			expect: "uncertain on the operator list, no charge, never a new key"},
		{name: "success after a decline", faults: []fakeprovider.Fault{fakeprovider.DeclineThenSucceed},
			want: statemachine.Declined, escalation: reconcile.EscalationContradiction, charges: 1,
			webhook: reconcile.EventContradiction, expect: "declined, contradiction escalated, 1 charge"},
	}
}

// demoResult is one row of the report.
type demoResult struct {
	Scenario    string   `json:"scenario"`
	PurchaseID  string   `json:"purchase_id"`
	FinalState  string   `json:"final_state"`
	Escalation  string   `json:"escalation,omitempty"`
	Charges     int      `json:"charges_at_provider"`
	Creates     int      `json:"create_calls"`
	Expected    string   `json:"expected"`
	OK          bool     `json:"ok"`
	Problems    []string `json:"problems,omitempty"`
	Timeline    []string `json:"timeline"`
	SimDuration string   `json:"simulated_time"`
}

// demoReport is what --json writes.
type demoReport struct {
	OK        bool         `json:"ok"`
	Database  string       `json:"database"`
	Results   []demoResult `json:"results"`
	RealTime  string       `json:"real_time"`
	Simulated string       `json:"simulated_time"`
}

// Limits of a demo run.
const (
	// demoSimLimit is the simulated time after which unfinished scenarios
	// fail.
	demoSimLimit = 6 * time.Hour
	// demoTimeout is the default of --timeout, the wall time after which
	// unfinished scenarios fail: the demo must finish in under a minute.
	demoTimeout = 50 * time.Second
	// demoClockOffset is how far in the past the simulated clock starts,
	// more than the simulated time the scenarios take, so that a kept
	// database holds no timestamps in the future (`ops list` would show
	// negative ages).
	demoClockOffset = 3 * time.Hour
)

func runDemo(ctx context.Context, e *env, args []string) error {
	var keep, asJSON bool
	var timeout time.Duration
	rest, err := e.parse("demo", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&keep, "keep", false, "keep the database and print commands to explore it")
		fs.BoolVar(&asJSON, "json", false, "write the report as JSON on stdout (the timeline goes to stderr)")
		fs.DurationVar(&timeout, "timeout", demoTimeout, "wall time after which scenarios not yet settled fail")
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, rest)
	}
	if timeout <= 0 {
		return fmt.Errorf("%w: --timeout %s: want a positive duration such as 50s or 5m", errUsage, timeout)
	}
	out := e.stdout
	if asJSON {
		out = e.stderr
	}
	url := e.settings.str("database-url")
	var dir string
	if url == "" {
		if dir, err = os.MkdirTemp("", "payrecon-demo-"); err != nil {
			return err
		}
		url = "sqlite:" + filepath.Join(dir, "payrecon.db")
		e.settings.byKey["database-url"].value = url
		if !keep {
			defer os.RemoveAll(dir)
		}
	}
	report, err := demo(ctx, e, out, url, timeout)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	}
	if keep {
		fmt.Fprintf(out, "\nThe database is kept. Explore it with:\n  go run ./cmd/payrecon ops list --database-url %s\n", url)
		for _, r := range report.Results {
			fmt.Fprintf(out, "  go run ./cmd/payrecon purchase show --database-url %s %s   # %s\n", url, r.PurchaseID, r.Scenario)
		}
	}
	if !report.OK {
		return errors.New("some scenarios did not end as expected")
	}
	return nil
}

// demo runs every scenario through the stack and returns the report.
func demo(ctx context.Context, e *env, out io.Writer, url string, timeout time.Duration) (demoReport, error) {
	realStart := time.Now()
	quiet := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	qe := &env{stdout: io.Discard, stderr: e.stderr, settings: e.settings, log: quiet}
	st, err := openStore(ctx, qe, false)
	if err != nil {
		return demoReport{}, err
	}
	defer st.Close()
	if err := st.migrate(ctx); err != nil {
		return demoReport{}, err
	}

	clock := &simClock{now: time.Now().UTC().Add(-demoClockOffset).Truncate(time.Second)}
	start := clock.Now()
	stk, err := startStack(ctx, stackConfig{
		store: st.Store,
		clock: clock.Now,
		// Time is compressed: the provider keeps keys 2h here (Stripe:
		// 24h) and search lags 2.5 hours, so that the cases that need
		// the key to expire play out in seconds.
		fake: fakeprovider.Config{KeyRetention: 2 * time.Hour, SettleAfter: 2 * time.Minute, SearchLag: 150 * time.Minute},
		reconcile: reconcile.Config{
			WorkerID:          "demo-worker",
			KeyRetention:      2 * time.Hour,
			KeyReplayMargin:   time.Hour,
			EscalatedInterval: 30 * time.Minute,
			// Simulated time runs fast during real calls (up to about 25
			// minutes during a 300ms timeout); the lease must outlast that,
			// and the replay margin must exceed the lease.
			LeaseDuration:   30 * time.Minute,
			ProviderTimeout: 300 * time.Millisecond,
			PollInterval:    10 * time.Millisecond,
			ShutdownGrace:   5 * time.Second,
		},
		log: quiet,
	})
	if err != nil {
		return demoReport{}, err
	}
	fmt.Fprintf(out, "payrecon demo: store %s, fake Stripe at %s, payrecon serve at %s\n", st.kind, stk.fakeURL, stk.payreconURL)
	fmt.Fprintf(out, "Simulated clock: hours of backoff and key retention pass in seconds.\n\n")

	scenarios := demoScenarios()
	results := make([]demoResult, len(scenarios))
	seen := make([]map[string]bool, len(scenarios)) // lines printed, per scenario
	width := 0
	for _, sc := range scenarios {
		width = max(width, len(sc.name))
	}
	for i, sc := range scenarios {
		p, err := stk.svc.CreatePurchase(ctx, reconcile.NewPurchase{
			Customer: "demo-customer", Reference: fmt.Sprintf("demo-%d-%d", start.Unix(), i+1),
			Amount: int64(300 + 100*i), Currency: "usd", Description: sc.name,
		})
		if err != nil {
			stk.stop()
			return demoReport{}, err
		}
		stk.fake.Script(p.ID, sc.faults...)
		stk.fakeSrv.ScriptWebhooks(p.ID, sc.hooks...)
		results[i] = demoResult{Scenario: sc.name, PurchaseID: p.ID, Expected: sc.expect}
	}

	tick := func(i int, c reconcile.Case) {
		if seen[i] == nil {
			seen[i] = map[string]bool{}
		}
		for _, line := range timeline(c, start) {
			if seen[i][line] {
				continue
			}
			seen[i][line] = true
			fmt.Fprintf(out, "%-*s  %s\n", width, scenarios[i].name, line)
			results[i].Timeline = append(results[i].Timeline, line)
		}
	}
	cases := make([]reconcile.Case, len(scenarios))
	finished := func() (int, error) {
		n := 0
		for i := range scenarios {
			c, err := stk.svc.Case(ctx, results[i].PurchaseID)
			if err != nil {
				return 0, err
			}
			cases[i] = c
			tick(i, c)
			if len(check(scenarios[i], c, stk)) == 0 {
				n++
			}
		}
		return n, nil
	}
	lastProgress := time.Now()
	for {
		done, err := finished()
		if err != nil {
			stk.stop()
			return demoReport{}, err
		}
		elapsed := clock.Now().Sub(start)
		if done == len(scenarios) || elapsed > demoSimLimit || time.Since(realStart) > timeout || ctx.Err() != nil {
			break
		}
		if time.Since(lastProgress) > 2*time.Second {
			fmt.Fprintf(out, "… simulated time +%s, %d of %d scenarios settled\n", clockOffset(elapsed), done, len(scenarios))
			lastProgress = time.Now()
		}
		// Fine steps while first answers and short backoffs play out, then
		// coarse ones through the hours of key retention.
		step := 15 * time.Second
		if elapsed > 15*time.Minute {
			step = 2 * time.Minute
		}
		clock.Advance(step)
		stk.fakeSrv.Tick()
		select {
		case <-ctx.Done():
		case <-time.After(25 * time.Millisecond): // let the worker and the webhooks run
		}
	}
	if err := stk.stop(); err != nil {
		return demoReport{}, err
	}

	report := demoReport{OK: true, Database: url, Simulated: clockOffset(clock.Now().Sub(start))}
	for i, sc := range scenarios {
		c, err := stk.svc.Case(context.WithoutCancel(ctx), results[i].PurchaseID)
		if err != nil {
			return demoReport{}, err
		}
		tick(i, c)
		r := &results[i]
		r.FinalState = string(c.Purchase.State)
		r.Escalation = string(c.Purchase.EscalationReason)
		r.Charges = stk.fake.MoneyTaken(r.PurchaseID)
		r.Creates = stk.fake.CreateCalls(c.Purchase.ProviderKey)
		r.Problems = check(sc, c, stk)
		r.OK = len(r.Problems) == 0
		r.SimDuration = report.Simulated
		report.OK = report.OK && r.OK
	}
	report.Results = results
	report.RealTime = time.Since(realStart).Round(10 * time.Millisecond).String()
	printSummary(out, report)
	return report, nil
}

// check returns what is wrong with a scenario's purchase now, or nothing.
func check(sc scenario, c reconcile.Case, stk *stack) []string {
	var problems []string
	p := c.Purchase
	if p.State != sc.want {
		problems = append(problems, fmt.Sprintf("state %s, want %s", p.State, sc.want))
	}
	if p.EscalationReason != sc.escalation {
		problems = append(problems, fmt.Sprintf("escalation %q, want %q", p.EscalationReason, sc.escalation))
	}
	if n := stk.fake.MoneyTaken(p.ID); n != sc.charges {
		problems = append(problems, fmt.Sprintf("%d charges at the provider, want %d", n, sc.charges))
	}
	switch sc.webhook {
	case "":
	case reconcile.EventDuplicate:
		// The inbox keeps one row per event: a duplicate shows as a second
		// copy the endpoint acknowledged, with one move to the final state.
		if !slices.ContainsFunc(stk.fakeSrv.Deliveries(), func(d fakeprovider.Delivery) bool {
			return d.PaymentID == p.ProviderPaymentID && d.Copy == 2 && d.Acked
		}) {
			problems = append(problems, "no duplicate delivery acknowledged")
		}
		if n := countTo(c, sc.want); n != 1 {
			problems = append(problems, fmt.Sprintf("%d moves to %s, want 1", n, sc.want))
		}
	default:
		if !slices.ContainsFunc(c.Events, func(ev reconcile.InboxEvent) bool { return ev.Outcome == sc.webhook }) {
			problems = append(problems, fmt.Sprintf("no webhook with outcome %s", sc.webhook))
		}
	}
	// Never a second key: every create carried the purchase's own key.
	for _, a := range c.Attempts {
		if a.Op == "create" && a.Key != reconcile.ProviderKeyFor(p.ID) {
			problems = append(problems, "a create was sent with another key: "+a.Key)
		}
	}
	return problems
}

func countTo(c reconcile.Case, s statemachine.State) int {
	n := 0
	for _, t := range c.Transitions {
		if t.To == s {
			n++
		}
	}
	return n
}

// timeline renders a case as time-ordered lines: transitions with their
// cause, provider calls, webhook outcomes.
func timeline(c reconcile.Case, start time.Time) []string {
	type entry struct {
		at   time.Time
		seq  int
		text string
	}
	var es []entry
	for i, t := range c.Transitions {
		es = append(es, entry{t.At, i, fmt.Sprintf("%-11s → %-11s  (%s)", t.From, t.To, t.Cause)})
	}
	for i, a := range c.Attempts {
		text := fmt.Sprintf("provider %-6s → %s", a.Op, a.Outcome)
		if a.Status != "" {
			text += " [" + a.Status + "]"
		}
		if !a.Applied {
			text += " (not applied)"
		}
		es = append(es, entry{a.At, 1000 + i, text})
	}
	for i, ev := range c.Events {
		es = append(es, entry{ev.ReceivedAt, 2000 + i, fmt.Sprintf("webhook  %s → %s", ev.Type, ev.Outcome)})
	}
	if c.Purchase.Escalated() {
		es = append(es, entry{c.Purchase.EscalatedAt, 3000, "escalated to the operators: " + string(c.Purchase.EscalationReason)})
	}
	slices.SortStableFunc(es, func(a, b entry) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.seq - b.seq
	})
	lines := make([]string, len(es))
	for i, en := range es {
		lines[i] = "+" + clockOffset(en.at.Sub(start)) + "  " + en.text
	}
	return lines
}

func clockOffset(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("%02d:%02d:%02d", int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60)
}

func printSummary(out io.Writer, r demoReport) {
	fmt.Fprintf(out, "\nSummary (%s simulated in %s):\n", r.Simulated, r.RealTime)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PURCHASE\tSCENARIO\tFINAL STATE\tCHARGES\tCREATES\tEXPECTED\tRESULT")
	for _, res := range r.Results {
		state := res.FinalState
		if res.Escalation != "" {
			state += " (escalated: " + res.Escalation + ")"
		}
		verdict := "OK"
		if !res.OK {
			verdict = "FAIL: " + strings.Join(res.Problems, "; ")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", res.PurchaseID, res.Scenario, state, res.Charges, res.Creates, res.Expected, verdict)
	}
	w.Flush()
	if r.OK {
		fmt.Fprintln(out, "\nAll scenarios ended as expected: no purchase was charged twice, none called failed while its outcome was unknown.")
	} else {
		fmt.Fprintln(out, "\nSome scenarios did not end as expected (FAIL above).")
	}
}
