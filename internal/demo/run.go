package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/dburl"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// Limits of a demo run.
const (
	// simLimit is the simulated time after which unfinished scenarios
	// fail.
	simLimit = 6 * time.Hour
	// DefaultTimeout is the default of Config.Timeout (the command's
	// --timeout), the wall time after which unfinished scenarios fail:
	// the demo must finish in under a minute.
	DefaultTimeout = 50 * time.Second
	// clockOffset is how far in the past the simulated clock starts,
	// more than the simulated time the scenarios take, so that a kept
	// database holds no timestamps in the future (`ops list` would show
	// negative ages).
	clockOffset = 3 * time.Hour
)

// Config is a demo run, as the command's flags and settings give it and
// its wiring provides the store and the stack.
type Config struct {
	// Stdout receives the timeline, the summary and, with Keep, the
	// commands to explore the database; with JSON, the report alone.
	Stdout io.Writer
	// Stderr receives the timeline with JSON, and errors logged by the
	// stack.
	Stderr io.Writer
	// DatabaseURL is the database to run on (--database-url); "" (the
	// default) for a temporary SQLite file, removed at the end unless
	// Keep.
	DatabaseURL string
	// Keep keeps the database and prints commands to explore it
	// (--keep); false by default.
	Keep bool
	// JSON writes the report as JSON on Stdout, and the timeline on
	// Stderr (--json); false by default.
	JSON bool
	// Timeout is the wall time after which scenarios not yet settled
	// fail (--timeout); DefaultTimeout, 50s, by default. It must be
	// positive.
	Timeout time.Duration
	// OpenStore opens the database at url (a postgres://… or sqlite:PATH
	// URL) with now as the store's clock, logging to log.
	OpenStore func(ctx context.Context, url string, now func() time.Time, log *slog.Logger) (*Store, error)
	// StartStack starts payrecon as `serve` runs it against the fake
	// Stripe server, over loopback.
	StartStack func(ctx context.Context, cfg StackConfig) (*Stack, error)
}

// Store is the store the demo runs on.
type Store struct {
	reconcile.Store
	Kind    string // "postgres" or "sqlite", for the timeline's first line
	Migrate func(context.Context) error
}

// StackConfig configures the stack the demo runs.
type StackConfig struct {
	Store     reconcile.Store
	Clock     func() time.Time
	Fake      fakeprovider.Config
	Reconcile reconcile.Config
	Log       *slog.Logger
}

// Stack is payrecon as `serve` runs it, against the fake Stripe server
// over real HTTP on loopback: the worker calls the fake through the real
// stripe adapter, and the fake's signed webhooks reach the real endpoint.
type Stack struct {
	Fake                 *fakeprovider.Fake
	FakeServer           *fakeprovider.Server
	Service              *reconcile.Service
	FakeURL, PayreconURL string
	// Stop drains payrecon (HTTP, worker, sweeps) and then the fake.
	Stop func() error
}

// Run plays the demo as cfg says and returns an error when it could not
// run or some scenario did not end as expected.
func Run(ctx context.Context, cfg Config) error {
	out := cfg.Stdout
	if cfg.JSON {
		out = cfg.Stderr
	}
	url := cfg.DatabaseURL
	if url == "" {
		dir, err := os.MkdirTemp("", "payrecon-demo-")
		if err != nil {
			return err
		}
		url = "sqlite:" + filepath.Join(dir, "payrecon.db")
		if !cfg.Keep {
			defer os.RemoveAll(dir)
		}
	}
	report, err := drive(ctx, cfg, out, url)
	if err != nil {
		return err
	}
	if cfg.JSON {
		enc := json.NewEncoder(cfg.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	}
	if cfg.Keep {
		// A Postgres URL's password is not printed: the commands carry
		// it redacted.
		shown := dburl.Redact(url)
		fmt.Fprintf(out, "\nThe database is kept. Explore it with:\n  payrecon ops list --database-url %s\n", shown)
		for _, r := range report.Results {
			fmt.Fprintf(out, "  payrecon purchase show --database-url %s %s   # %s\n", shown, r.PurchaseID, r.Scenario)
		}
	}
	if !report.OK {
		return errors.New("some scenarios did not end as expected")
	}
	return nil
}

// simClock is a clock the demo moves forward by hand, so that hours of
// backoff and key retention pass in seconds. Safe for concurrent use. It
// is the demo's, not a test's: tests use internal/testing/testclock.
type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *simClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// drainTimeout bounds the wait for the webhooks of a change made
// outside payrecon to be delivered, over loopback.
const drainTimeout = 10 * time.Second

// drive runs every scenario of the tour through the stack, on the
// simulated clock, makes each scenario's change outside payrecon when it
// is due, runs the audit from the provider's side once they have all
// played out, and returns the report.
func drive(ctx context.Context, cfg Config, out io.Writer, url string) (Report, error) {
	realStart := time.Now()
	quiet := slog.New(slog.NewTextHandler(cfg.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	// The store owns the protocol's clock (due times, leases, key
	// retention): it must run on the simulated clock, as the worker and
	// the fake do.
	clock := &simClock{now: time.Now().UTC().Add(-clockOffset).Truncate(time.Second)}
	start := clock.Now()
	st, err := cfg.OpenStore(ctx, url, clock.Now, quiet)
	if err != nil {
		return Report{}, err
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		return Report{}, err
	}
	stk, err := cfg.StartStack(ctx, StackConfig{
		Store: st.Store,
		Clock: clock.Now,
		// Time is compressed: the provider keeps keys 2h here (Stripe:
		// 24h) and search lags 2.5 hours, so that the cases that need
		// the key to expire play out in seconds.
		Fake: fakeprovider.Config{KeyRetention: 2 * time.Hour, SettleAfter: 2 * time.Minute, SearchLag: 150 * time.Minute},
		Reconcile: reconcile.Config{
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
		Log: quiet,
	})
	if err != nil {
		return Report{}, err
	}
	fmt.Fprintf(out, "payrecon demo: store %s, fake Stripe at %s, payrecon serve at %s\n", st.Kind, stk.FakeURL, stk.PayreconURL)
	fmt.Fprintf(out, "Simulated clock: hours of backoff and key retention pass in seconds.\n\n")

	scenarios := Scenarios()
	results := make([]Result, len(scenarios))
	seen := make([]map[string]bool, len(scenarios)) // lines printed, per scenario
	width := 0
	for _, sc := range scenarios {
		width = max(width, len(sc.Name))
	}
	for i, sc := range scenarios {
		p, err := stk.Service.CreatePurchase(ctx, reconcile.NewPurchase{
			Customer: "demo-customer", Reference: fmt.Sprintf("demo-%d-%d", start.Unix(), i+1),
			Amount: int64(300 + 100*i), Currency: "usd", Description: sc.Name,
		})
		if err != nil {
			stk.Stop()
			return Report{}, err
		}
		stk.Fake.Script(p.ID, sc.Faults...)
		stk.FakeServer.ScriptWebhooks(p.ID, sc.Hooks...)
		results[i] = Result{Scenario: sc.Name, PurchaseID: p.ID, Expected: sc.Expect}
	}

	outside := make([]*fakeprovider.Charge, len(scenarios)) // the changes made outside payrecon, per scenario
	audited := false
	// observe gathers what a check looks at: the case and its refunds,
	// and what the fake provider knows of them.
	observe := func(i int, c reconcile.Case) (Observed, error) {
		refunds, err := stk.Service.Refunds(ctx, c.Purchase.ID)
		if err != nil {
			return Observed{}, err
		}
		back := make(map[string]int, len(refunds))
		for _, d := range refunds {
			for _, r := range stk.Fake.RefundsFor(d.Refund.ID) {
				if r.MoneyReturned() {
					back[d.Refund.ID]++
				}
			}
		}
		return Observed{
			Case: c, Charges: stk.Fake.MoneyTaken(c.Purchase.ID), Deliveries: stk.FakeServer.Deliveries(),
			Outside: outside[i], Audited: audited,
			Refunds: refunds, ProviderRefunds: back, NetCharges: stk.Fake.NetCharges(c.Purchase.ID),
		}, nil
	}

	say := func(i int, line string) {
		if seen[i] == nil {
			seen[i] = map[string]bool{}
		}
		if seen[i][line] {
			return
		}
		seen[i][line] = true
		fmt.Fprintf(out, "%-*s  %s\n", width, scenarios[i].Name, line)
		results[i].Timeline = append(results[i].Timeline, line)
	}
	tick := func(i int, c reconcile.Case) {
		for _, line := range Timeline(c, start) {
			say(i, line)
		}
		refunds, err := stk.Service.Refunds(ctx, c.Purchase.ID)
		if err != nil {
			return // the check that follows reads them again and fails
		}
		for _, line := range RefundTimeline(refunds, start) {
			say(i, line)
		}
	}
	// refunded holds, per scenario, the refund it asked for.
	refunded := make([]string, len(scenarios))
	// askRefund asks for scenario i's refund of the purchase's own payment
	// once the purchase has reached the state the scenario wants: the
	// client's refund of the whole amount, with the plan's faults.
	askRefund := func(i int, c reconcile.Case) error {
		rp := scenarios[i].Refund
		if rp == nil || rp.OfFinding || refunded[i] != "" || c.Purchase.State != scenarios[i].Want {
			return nil
		}
		r, err := stk.Service.CreateRefund(ctx, reconcile.NewRefund{
			PurchaseID: c.Purchase.ID, Amount: c.Purchase.Amount, Reason: "demo: the customer returns the goods", RequestedBy: "demo",
		})
		if err != nil {
			return err
		}
		stk.Fake.ScriptRefund(r.ID, rp.Faults...)
		refunded[i] = r.ID
		say(i, fmt.Sprintf("+%s  the client asks for refund %s of %s", ClockOffset(clock.Now().Sub(start)), r.ID,
			Money{Amount: r.Amount, Currency: r.Currency}))
		return nil
	}
	// change makes scenario i's change outside payrecon if it is due. A
	// change announced by webhook is delivered before the clock moves on,
	// so that its verdict lands before the purchase's next check. It
	// returns the case as it stands after the change.
	change := func(i int, c reconcile.Case) (reconcile.Case, error) {
		o := scenarios[i].Outside
		if o == nil || outside[i] != nil || !o.Due(c.Purchase) {
			return c, nil
		}
		ch, err := o.Do(stk.FakeServer, c.Purchase)
		if err != nil {
			return c, err
		}
		outside[i] = &ch
		say(i, o.Line(ch, start))
		if !o.Webhooks {
			return c, nil
		}
		dctx, cancel := context.WithTimeout(ctx, drainTimeout)
		defer cancel()
		if err := stk.FakeServer.Drain(dctx); err != nil {
			return c, fmt.Errorf("deliver the webhooks of %s: %w", o, err)
		}
		return stk.Service.Case(ctx, results[i].PurchaseID)
	}
	finished := func() (int, error) {
		n := 0
		for i := range scenarios {
			c, err := stk.Service.Case(ctx, results[i].PurchaseID)
			if err != nil {
				return 0, err
			}
			tick(i, c)
			if c, err = change(i, c); err != nil {
				return 0, fmt.Errorf("scenario %q: %w", scenarios[i].Name, err)
			}
			tick(i, c)
			if err := askRefund(i, c); err != nil {
				return 0, fmt.Errorf("scenario %q: refund: %w", scenarios[i].Name, err)
			}
			o, err := observe(i, c)
			if err != nil {
				return 0, err
			}
			if len(scenarios[i].Check(o)) == 0 {
				n++
			}
		}
		return n, nil
	}
	// play moves the simulated clock until every scenario is settled (or
	// waits for the audit only), or a limit is reached.
	play := func() error {
		lastProgress := time.Now()
		for {
			done, err := finished()
			if err != nil {
				return err
			}
			elapsed := clock.Now().Sub(start)
			if done == len(scenarios) || elapsed > simLimit || time.Since(realStart) > cfg.Timeout || ctx.Err() != nil {
				return nil
			}
			if time.Since(lastProgress) > 2*time.Second {
				fmt.Fprintf(out, "… simulated time +%s, %d of %d scenarios settled\n", ClockOffset(elapsed), done, len(scenarios))
				lastProgress = time.Now()
			}
			// Fine steps while first answers and short backoffs play out, then
			// coarse ones through the hours of key retention.
			step := 15 * time.Second
			if elapsed > 15*time.Minute {
				step = 2 * time.Minute
			}
			clock.Advance(step)
			stk.FakeServer.Tick()
			select {
			case <-ctx.Done():
			case <-time.After(25 * time.Millisecond): // let the worker and the webhooks run
			}
		}
	}
	if err := play(); err != nil {
		stk.Stop()
		return Report{}, err
	}

	// The audit from the provider's side, over every payment the
	// scenarios made: the real one, listing the fake's payments over HTTP
	// through the Stripe adapter. It stores its findings and escalates the
	// purchases they concern; the clock stands still meanwhile. An
	// interrupted demo skips it, and the scenarios that need it fail.
	var audit *Audit
	if ctx.Err() == nil {
		window := provider.Window{From: start, Until: clock.Now().Add(time.Second)}
		fmt.Fprintf(out, "\nThe audit from the provider's side lists the payments created from +%s to +%s and matches them to the books:\n",
			ClockOffset(window.From.Sub(start)), ClockOffset(window.Until.Sub(start)))
		rep, err := stk.Service.Audit(ctx, window)
		if err != nil {
			stk.Stop()
			return Report{}, fmt.Errorf("run the audit from the provider's side: %w", err)
		}
		findings, err := stk.Service.Findings(ctx, true)
		if err != nil {
			stk.Stop()
			return Report{}, err
		}
		audit = NewAudit(rep, findings, results, start)
		// The operator's "refund this charge" on each duplicate charge a
		// scenario wants refunded; then the clock runs again until those
		// refunds settle.
		asked := false
		for i, sc := range scenarios {
			if sc.Refund == nil || !sc.Refund.OfFinding {
				continue
			}
			for _, f := range findings {
				if f.PurchaseID != results[i].PurchaseID || f.Kind != reconcile.FindingDuplicateCharge || !f.Open() {
					continue
				}
				r, err := stk.Service.RefundCharge(ctx, f.ID, 0, "demo-operator", "the audit shows a second charge for one purchase")
				if err != nil {
					stk.Stop()
					return Report{}, fmt.Errorf("scenario %q: refund this charge: %w", sc.Name, err)
				}
				refunded[i], asked = r.ID, true
				say(i, fmt.Sprintf("+%s  the operator refunds charge %s (finding %d): refund %s", ClockOffset(clock.Now().Sub(start)), f.PaymentID, f.ID, r.ID))
			}
		}
		audited = true
		if asked {
			fmt.Fprintf(out, "\nThe operators refund the duplicate charges the audit found, through the refund process:\n")
			if err := play(); err != nil {
				stk.Stop()
				return Report{}, err
			}
		}
	}
	audited = true // from now on, a finding a scenario wants must be there
	if err := stk.Stop(); err != nil {
		return Report{}, err
	}

	report := Report{OK: true, Database: dburl.Redact(url), Audit: audit, Simulated: ClockOffset(clock.Now().Sub(start))}
	for i, sc := range scenarios {
		c, err := stk.Service.Case(context.WithoutCancel(ctx), results[i].PurchaseID)
		if err != nil {
			return Report{}, err
		}
		tick(i, c)
		r := &results[i]
		r.FinalState = string(c.Purchase.State)
		r.Escalation = string(c.Purchase.EscalationReason)
		o, err := observe(i, c)
		if err != nil {
			return Report{}, err
		}
		r.Charges = o.Charges
		r.NetCharges = o.NetCharges
		for _, d := range o.Refunds {
			r.Refunds = append(r.Refunds, RefundResult{
				ID: d.Refund.ID, State: string(d.Refund.State), Escalation: string(d.Refund.EscalationReason),
				ProviderRefunds: o.ProviderRefunds[d.Refund.ID], Creates: stk.Fake.RefundCreateCalls(d.Refund.ProviderKey),
			})
		}
		r.Creates = stk.Fake.CreateCalls(c.Purchase.ProviderKey)
		r.Problems = sc.Check(o)
		r.OK = len(r.Problems) == 0
		r.SimDuration = report.Simulated
		report.OK = report.OK && r.OK
	}
	report.Results = results
	report.RealTime = time.Since(realStart).Round(10 * time.Millisecond).String()
	report.PrintSummary(out)
	return report, nil
}
