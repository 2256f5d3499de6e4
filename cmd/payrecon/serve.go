package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/payrecon/payrecon/provider/stripe"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/applier"
	"github.com/payrecon/payrecon/reconcile/cron"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
	"github.com/payrecon/payrecon/reconcile/prometheus"
	"github.com/payrecon/payrecon/reconcile/relay"
)

// app is a wired payrecon process: the service over its store and
// provider, its metrics, its sweeps and its HTTP server.
type app struct {
	svc     *reconcile.Service
	metrics *prometheus.Metrics
	sched   *cron.Scheduler
	relay   *relay.Relay // delivers the outbox beside the worker; nil: none (the demo's stack)
	applier *applier.Applier
	server  *rhttp.Server
	close   func()
	// restorePending is set when the start could not check for signs of
	// a restore: the worker and the sweeps wait for that check.
	restorePending bool
}

// appOptions says which HTTP surfaces an app serves.
type appOptions struct {
	api      bool // the purchase API
	webhooks bool // POST /webhooks/stripe, when STRIPE_WEBHOOK_SECRET is set
	ops      bool // the operator pages, when --ops-token is set
}

func newApp(ctx context.Context, e *env, opts appOptions) (*app, error) {
	// The metrics label the declared accounts by id, every other
	// connected account as other.
	metrics, err := prometheus.NewWithAccounts(e.settings.declaredAccounts())
	if err != nil {
		return nil, usageError(err)
	}
	svc, closeStore, err := newObservedService(ctx, e, metrics)
	if err != nil {
		return nil, err
	}
	a := &app{svc: svc, metrics: metrics, close: closeStore}
	fail := func(err error) (*app, error) { a.close(); return nil, err }
	st := svc.Store()

	sweeps, err := e.sweeps(a.svc, metrics)
	if err != nil {
		return fail(err)
	}
	a.sched, err = cron.New(st, sweeps, cron.Config{Owner: a.svc.Config().WorkerID, Logger: e.log, Observer: metrics})
	if err != nil {
		return fail(usageError(err))
	}
	if a.relay, err = e.relay(a.svc, metrics); err != nil {
		return fail(err)
	}
	if a.applier, err = e.applier(a); err != nil {
		return fail(err)
	}

	tolerance, err := e.settings.duration("webhook-tolerance")
	if err != nil {
		return fail(usageError(err))
	}
	webhooks, connectHooks := map[string]rhttp.WebhookVerifier{}, map[string]rhttp.WebhookVerifier{}
	if opts.webhooks {
		on, err := e.settings.boolean("webhooks")
		if err != nil {
			return fail(usageError(err))
		}
		secret, err := e.settings.secret("stripe-webhook-secret")
		if err != nil && on {
			return fail(usageError(err))
		}
		switch {
		case !on:
			e.log.Info("webhooks are off (--webhooks=false): POST /webhooks/stripe is not served")
		case secret != "":
			v, err := stripe.NewWebhookVerifier(stripe.WebhookConfig{Secret: secret, Tolerance: tolerance})
			if err != nil {
				return fail(usageError(fmt.Errorf("STRIPE_WEBHOOK_SECRET: %w", err)))
			}
			webhooks["stripe"] = v
			e.log.Info("serving POST /webhooks/stripe")
		case e.settings.str("provider") == "stripe":
			// Stripe's webhooks are the second source of truth: without them
			// every unknown outcome waits for the next scheduled check.
			return fail(usageError(errors.New("refusing to serve --provider stripe without webhooks: STRIPE_WEBHOOK_SECRET is not set; " +
				"set it (or STRIPE_WEBHOOK_SECRET_FILE) to the endpoint's signing secret (whsec_…), or run without webhooks with --webhooks=false / PAYRECON_WEBHOOKS=false")))
		default:
			e.log.Warn("STRIPE_WEBHOOK_SECRET is not set: POST /webhooks/stripe is not served")
		}
		connect, err := e.settings.secret("stripe-connect-webhook-secret")
		if err != nil && on {
			return fail(usageError(err))
		}
		if on && connect != "" {
			v, err := stripe.NewWebhookVerifier(stripe.WebhookConfig{Secret: connect, Tolerance: tolerance})
			if err != nil {
				return fail(usageError(fmt.Errorf("STRIPE_CONNECT_WEBHOOK_SECRET: %w", err)))
			}
			connectHooks["stripe"] = v
			e.log.Info("serving POST /webhooks/stripe/connect, the connected accounts' events")
		}
	}
	metricsToken, err := e.settings.secret("metrics-token")
	if err != nil {
		return fail(usageError(err))
	}
	a.server = rhttp.New(a.svc, rhttp.Config{
		Addr:            e.settings.str("addr"),
		Webhooks:        webhooks,
		ConnectWebhooks: connectHooks,
		Metrics:         metrics.Handler(),
		MetricsAddr:     e.settings.str("metrics-addr"),
		MetricsToken:    metricsToken,
		Observer:        metrics,
		Logger:          e.log,
	})

	if opts.api {
		serveAPI, err := e.settings.boolean("api")
		if err != nil {
			return fail(usageError(err))
		}
		if serveAPI {
			tokens, err := e.settings.secret("api-token")
			if err != nil {
				return fail(usageError(err))
			}
			if tokens == "" {
				return fail(usageError(errors.New("refusing to serve the purchase API unauthenticated: set --api-token / PAYRECON_API_TOKEN (or PAYRECON_API_TOKEN_FILE), or turn the API off with --api=false")))
			}
			clients, err := rhttp.ParseAPITokens(tokens)
			if err != nil {
				return fail(usageError(fmt.Errorf("--api-token / PAYRECON_API_TOKEN: %w", err)))
			}
			api, err := rhttp.NewPurchaseAPI(a.svc, clients)
			if err != nil {
				return fail(err)
			}
			api.Register(a.server)
			e.log.Info("serving the purchase API", "clients", len(clients))
		}
	}
	if opts.ops {
		if err := e.registerOps(a); err != nil {
			return fail(err)
		}
	}
	// Last, once the settings are known good: a restored backup. The books
	// may show as never charged what the provider charged, and lack
	// purchases it charged. Refuse to start (the API's writes would hide
	// the signs) until recover has run.
	switch err := svc.CheckRestore(ctx); {
	case errors.Is(err, reconcile.ErrRestoreSuspected):
		return fail(fmt.Errorf("refusing to start: %w", err))
	case err != nil:
		// The provider cannot be listed now: HTTP starts, the worker and
		// its sweeps wait until the check can be made (app.run).
		e.log.Warn("cannot check for signs of a restored backup now: the worker waits until it can", "err", err)
		a.restorePending = true
	}
	return a, nil
}

// applier builds the webhook inbox's applier: it runs the unmatched
// sweep, under its lock, on --sweep-unmatched.
func (e *env) applier(a *app) (*applier.Applier, error) {
	sw, err := e.settings.sweepConfig()
	if err != nil {
		return nil, usageError(err)
	}
	ap, err := applier.New(a.svc, applier.Config{
		Unmatched: unmatchedSweep(a.sched), UnmatchedSchedule: sw.UnmatchedSchedule, Logger: e.log,
	})
	if err != nil {
		return nil, usageError(err)
	}
	return ap, nil
}

// unmatchedSweep runs the unmatched sweep of sched, under its lock: the
// applier's to run on its schedule.
func unmatchedSweep(sched *cron.Scheduler) func(context.Context) error {
	return func(ctx context.Context) error {
		_, _, err := sched.RunSweep(ctx, cron.SweepUnmatched)
		return err
	}
}

// relay builds the outbox's relay from the settings: its leases are the
// worker's (--worker-id), its retry window --outbox-retry-window.
func (e *env) relay(svc *reconcile.Service, metrics *prometheus.Metrics) (*relay.Relay, error) {
	window, err := e.settings.duration("outbox-retry-window")
	if err != nil {
		return nil, usageError(err)
	}
	r, err := relay.New(svc.Store(), relay.Config{
		Owner: svc.Config().WorkerID, RetryWindow: window, Observer: metrics, Logger: e.log,
	})
	if err != nil {
		return nil, usageError(err)
	}
	return r, nil
}

// sweeps builds the standard sweeps from the settings.
func (e *env) sweeps(svc *reconcile.Service, metrics *prometheus.Metrics) ([]cron.Sweep, error) {
	cfg, err := e.settings.sweepConfig()
	if err != nil {
		return nil, usageError(err)
	}
	st := svc.Store()
	sweeps, err := cron.Sweeps(svc, func(ctx context.Context) error { return metrics.Refresh(ctx, st) }, cfg)
	if err != nil {
		return nil, usageError(err)
	}
	return sweeps, nil
}

// run serves HTTP on ln and, with worker, runs the worker loop and the
// sweeps, until ctx ends. Then it drains: the server stops accepting and
// finishes requests in flight, the worker finishes or releases its
// leases, and the scheduler waits for running sweeps.
func (a *app) run(ctx context.Context, e *env, ln net.Listener, worker bool) error {
	defer a.close()
	e.log.Info("listening", "addr", ln.Addr().String(), "worker", worker)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	start := func(name string, fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	// One part failing stops the others: a process that serves webhooks
	// but no longer works its jobs must not look healthy.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start("http", func() error { defer cancel(); return a.server.Serve(ctx, ln) })
	// Every process applies the webhooks it (or another) received, once
	// the books are known not to be a restored backup.
	start("applier", func() error {
		defer cancel()
		if a.restorePending {
			if err := a.svc.WaitRestoreCheck(ctx, restoreCheckRetry); err != nil {
				return fmt.Errorf("refusing to start: %w", err)
			}
		}
		return a.applier.Run(ctx)
	})
	if worker {
		_ = a.metrics.Refresh(ctx, a.svc.Store())
		start("worker", func() error {
			defer cancel()
			if a.restorePending {
				if err := a.svc.WaitRestoreCheck(ctx, restoreCheckRetry); err != nil {
					return fmt.Errorf("refusing to start: %w", err)
				}
			}
			// The sweeps work jobs too (the rescue sweep): they start
			// with the worker, not before.
			start("scheduler", func() error { defer cancel(); return a.sched.Run(ctx) })
			a.metrics.WorkerRunning(true)
			defer a.metrics.WorkerRunning(false)
			return a.svc.Work(ctx)
		})
		if a.relay != nil {
			start("relay", func() error {
				defer cancel()
				if err := a.relay.Run(ctx); !errors.Is(err, context.Canceled) {
					return err
				}
				return nil
			})
		}
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

func runServe(ctx context.Context, e *env, args []string) error {
	rest, err := e.parse("serve", args, nil)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageError(fmt.Errorf("unexpected arguments %q: serve takes only flags", rest))
	}
	worker, err := e.settings.boolean("worker")
	if err != nil {
		return usageError(err)
	}
	a, err := newApp(ctx, e, appOptions{api: true, webhooks: true, ops: true})
	if err != nil {
		return err
	}
	ln, err := a.server.Listen()
	if err != nil {
		a.close()
		return err
	}
	return a.run(ctx, e, ln, worker)
}

func runWorker(ctx context.Context, e *env, args []string) error {
	rest, err := e.parse("worker", args, nil)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageError(fmt.Errorf("unexpected arguments %q: worker takes only flags", rest))
	}
	a, err := newApp(ctx, e, appOptions{})
	if err != nil {
		return err
	}
	// The worker serves /healthz, /readyz and /metrics only.
	ln, err := a.server.Listen()
	if err != nil {
		a.close()
		return err
	}
	return a.run(ctx, e, ln, true)
}

// restoreCheckRetry is how often a process that could not check for
// signs of a restore at start (the provider could not be listed) tries
// again before its worker starts.
const restoreCheckRetry = 30 * time.Second

// shutdownTimeout bounds a command's own cleanup after SIGTERM.
const shutdownTimeout = 30 * time.Second
