package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/payrecon/payrecon/internal/demo"
)

func runDemo(ctx context.Context, e *env, args []string) error {
	cfg := demo.Config{Stdout: e.stdout, Stderr: e.stderr}
	rest, err := e.parse("demo", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&cfg.Keep, "keep", false, "keep the database and print commands to explore it")
		fs.BoolVar(&cfg.JSON, "json", false, "write the report as JSON on stdout (the timeline goes to stderr)")
		fs.DurationVar(&cfg.Timeout, "timeout", demo.DefaultTimeout, "wall time after which scenarios not yet settled fail")
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, rest)
	}
	if cfg.Timeout <= 0 {
		return fmt.Errorf("%w: --timeout %s: want a positive duration such as 50s or 5m", errUsage, cfg.Timeout)
	}
	if cfg.DatabaseURL, err = e.settings.secret("database-url"); err != nil {
		return usageError(err)
	}
	cfg.OpenStore = func(ctx context.Context, url string, now func() time.Time, log *slog.Logger) (*demo.Store, error) {
		e.settings.set("database-url", url)
		qe := &env{stdout: io.Discard, stderr: e.stderr, settings: e.settings, log: log}
		st, err := openStoreAt(ctx, qe, false, now)
		if err != nil {
			return nil, err
		}
		return &demo.Store{Store: st.Store, Kind: st.kind, Migrate: st.migrate}, nil
	}
	cfg.StartStack = func(ctx context.Context, sc demo.StackConfig) (*demo.Stack, error) {
		stk, err := startStack(ctx, stackConfig{store: sc.Store, clock: sc.Clock, fake: sc.Fake, reconcile: sc.Reconcile, log: sc.Log})
		if err != nil {
			return nil, err
		}
		return &demo.Stack{Fake: stk.fake, FakeServer: stk.fakeSrv, Service: stk.svc, FakeURL: stk.fakeURL, PayreconURL: stk.payreconURL, Stop: stk.stop}, nil
	}
	return demo.Run(ctx, cfg)
}
