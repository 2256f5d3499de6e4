package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider/stripe"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/applier"
	"github.com/payrecon/payrecon/reconcile/cron"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
	"github.com/payrecon/payrecon/reconcile/prometheus"
)

// stackConfig configures a stack.
type stackConfig struct {
	store     reconcile.Store
	clock     func() time.Time
	fake      fakeprovider.Config
	hooks     fakeprovider.WebhookFaults
	reconcile reconcile.Config
	log       *slog.Logger
}

// stack is payrecon as `serve` runs it, against the fake Stripe server over
// real HTTP on loopback: the worker calls the fake through the real stripe
// adapter, and the fake's signed webhooks reach the real endpoint. The
// demo and the end-to-end tests run it.
type stack struct {
	fake    *fakeprovider.Fake
	fakeSrv *fakeprovider.Server
	svc     *reconcile.Service
	metrics *prometheus.Metrics
	app     *app

	fakeURL, payreconURL string
	fakeHTTP             *http.Server
	cancel               context.CancelFunc
	done                 chan error
}

// stackSecret signs the fake's webhooks; it never leaves the process.
const stackSecret = "whsec_payrecon_demo_0123456789"

func startStack(ctx context.Context, cfg stackConfig) (*stack, error) {
	metrics, err := prometheus.NewWithAccounts(cfg.reconcile.Accounts)
	if err != nil {
		return nil, err
	}
	s := &stack{metrics: metrics, done: make(chan error, 1)}
	fakeLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the fake Stripe server: %w", err)
	}
	appLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fakeLn.Close()
		return nil, fmt.Errorf("listen for payrecon: %w", err)
	}
	s.fakeURL = "http://" + fakeLn.Addr().String()
	s.payreconURL = "http://" + appLn.Addr().String()

	cfg.fake.Now = cfg.clock
	s.fake = fakeprovider.New(cfg.fake)
	s.fakeSrv = fakeprovider.NewServer(s.fake, fakeprovider.ServerConfig{
		WebhookURL:         s.payreconURL + "/webhooks/stripe",
		WebhookSecret:      stackSecret,
		WebhookFaults:      cfg.hooks,
		WebhookBackoff:     20 * time.Millisecond,
		WebhookMaxBackoff:  200 * time.Millisecond,
		WebhookMaxAttempts: 20,
		TickEvery:          -1, // the driver ticks, on the simulated clock
		Logger:             cfg.log,
	})
	s.fakeHTTP = &http.Server{Handler: s.fakeSrv, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.fakeHTTP.Serve(fakeLn) }()

	// One connection per request: a reply lost on a reused connection
	// would be resent by net/http itself (the request carries an
	// Idempotency-Key, so that is safe), hiding the lost reply the demo
	// means to show.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	adapter, err := stripe.New(stripe.Config{SecretKey: "sk_test_payrecon_demo", APIBase: s.fakeURL, HTTPClient: client, Logger: cfg.log})
	if err != nil {
		s.closeFake()
		appLn.Close()
		return nil, err
	}
	rc := cfg.reconcile
	rc.Now, rc.Logger, rc.Observer = cfg.clock, cfg.log, s.metrics
	if s.svc, err = reconcile.New(cfg.store, adapter, rc); err != nil {
		s.closeFake()
		appLn.Close()
		return nil, err
	}
	verifier, err := stripe.NewWebhookVerifier(stripe.WebhookConfig{Secret: stackSecret, Now: cfg.clock, Tolerance: time.Hour})
	if err != nil {
		s.closeFake()
		appLn.Close()
		return nil, err
	}
	sweeps, err := cron.Sweeps(s.svc, func(ctx context.Context) error {
		return s.metrics.Refresh(ctx, cfg.store)
	}, cron.SweepConfig{})
	if err != nil {
		s.closeFake()
		appLn.Close()
		return nil, err
	}
	sched, err := cron.New(cfg.store, sweeps, cron.Config{Owner: s.svc.Config().WorkerID, Logger: cfg.log, Now: cfg.clock, Observer: s.metrics})
	if err != nil {
		s.closeFake()
		appLn.Close()
		return nil, err
	}
	ap, err := applier.New(s.svc, applier.Config{Unmatched: unmatchedSweep(sched), Now: cfg.clock, Logger: cfg.log})
	if err != nil {
		s.closeFake()
		appLn.Close()
		return nil, err
	}
	s.app = &app{
		svc: s.svc, metrics: s.metrics, sched: sched, applier: ap, close: func() {},
		server: rhttp.New(s.svc, rhttp.Config{
			Webhooks: map[string]rhttp.WebhookVerifier{"stripe": verifier},
			Metrics:  s.metrics.Handler(), Observer: s.metrics, Logger: cfg.log,
		}),
	}
	runCtx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	e := &env{log: cfg.log}
	go func() { s.done <- s.app.run(runCtx, e, appLn, true) }()
	return s, nil
}

// stop drains payrecon (HTTP, worker, sweeps) and then the fake.
func (s *stack) stop() error {
	s.cancel()
	err := <-s.done
	s.closeFake()
	return err
}

func (s *stack) closeFake() {
	s.fakeSrv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.fakeHTTP.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = s.fakeHTTP.Close()
	}
}
