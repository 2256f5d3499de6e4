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

	r := newDemoRun(cfg, out, stk, clock, realStart)
	if err := r.create(ctx); err != nil {
		stk.Stop()
		return Report{}, err
	}
	if err := r.play(ctx); err != nil {
		stk.Stop()
		return Report{}, err
	}
	audit, err := r.audit(ctx)
	if err != nil {
		stk.Stop()
		return Report{}, err
	}
	r.audited = true // from now on, a finding a scenario wants must be there
	if err := stk.Stop(); err != nil {
		return Report{}, err
	}
	report, err := r.report(context.WithoutCancel(ctx), url, audit)
	if err != nil {
		return Report{}, err
	}
	report.PrintSummary(out)
	return report, nil
}
