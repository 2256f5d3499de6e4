package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"

	"github.com/payrecon/payrecon/cmd/payrecon/internal/bench"
	"github.com/payrecon/payrecon/internal/dburl"
	"github.com/payrecon/payrecon/reconcile/budget"
)

// `payrecon bench` measures payrecon's capacity on the user's own
// database, as pgbench measures Postgres'. The benches are
// cmd/payrecon/internal/bench's; the command parses their flags and
// settings and wires the store and serve's HTTP server.

// benchSafety is the part of each bench subcommand's help about the
// database it runs on.
const benchSafety = " It needs --database-url (postgres://… or sqlite:PATH) and refuses a database that holds purchases, unless --yes; " +
	"even with --yes it refuses one that holds purchases not final, which its worker would take through its fake provider: use a scratch database. " +
	"The provider is always the in-process fake. Progress goes to stderr every second, the report to stdout; warnings and errors are logged unless --log-level says otherwise. " +
	"It exits 1 when anything went wrong, a double charge above all."

// benchCPUAbout says, in each bench subcommand's help, what its CPU
// figures are.
const benchCPUAbout = " (the bench process's user and system time, and the whole machine's busy time from /proc/stat," +
	" which includes the database's when it runs on the same machine: whether the CPU was the limit, and what a unit of work cost it)"

func runBench(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageError(errors.New("want bench burn-down | bench webhooks | bench api | bench backlog"))
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help":
		e.printGroupHelp("bench")
		return flag.ErrHelp
	case "burn-down":
		return runBenchBurnDown(ctx, e, rest)
	case "webhooks":
		return runBenchWebhooks(ctx, e, rest)
	case "api":
		return runBenchAPI(ctx, e, rest)
	case "backlog":
		return runBenchBacklog(ctx, e, rest)
	default:
		return usageError(fmt.Errorf("unknown bench subcommand %q: want burn-down, webhooks, api or backlog", sub))
	}
}

func runBenchBurnDown(ctx context.Context, e *env, args []string) error {
	cfg, err := benchConfig(e, "burn-down", "purchases", args, false)
	if err != nil {
		return err
	}
	return benchError(bench.BurnDown(ctx, cfg))
}

func runBenchWebhooks(ctx context.Context, e *env, args []string) error {
	var backlog bool
	cfg, err := benchConfigWith(e, "webhooks", "events", args, true, func(fs *flag.FlagSet) {
		fs.BoolVar(&backlog, "backlog", false, "hold the applier until every event is received, then time it alone on the backlog (default: it applies as the events arrive, as serve does)")
	})
	if err != nil {
		return err
	}
	cfg.Backlog = backlog
	return benchError(bench.Webhooks(ctx, cfg))
}

func runBenchAPI(ctx context.Context, e *env, args []string) error {
	cfg, err := benchConfig(e, "api", "requests", args, true)
	if err != nil {
		return err
	}
	return benchError(bench.API(ctx, cfg))
}

// benchError makes the bench's usage errors the command's (exit 2).
func benchError(err error) error {
	if _, ok := errors.AsType[*bench.UsageError](err); ok {
		return usageError(err)
	}
	return err
}

// benchConfig parses a bench subcommand's command line and checks it
// before anything is opened. unit names what --n counts; overHTTP adds
// --clients and --rate.
func benchConfig(e *env, sub, unit string, args []string, overHTTP bool) (bench.Config, error) {
	return benchConfigWith(e, sub, unit, args, overHTTP, nil)
}

// benchConfigWith is benchConfig with the subcommand's own flags, which
// more adds.
func benchConfigWith(e *env, sub, unit string, args []string, overHTTP bool, more func(*flag.FlagSet)) (bench.Config, error) {
	cfg := bench.Config{}
	rest, err := e.parse("bench "+sub, args, func(fs *flag.FlagSet) {
		if more != nil {
			more(fs)
		}
		fs.IntVar(&cfg.N, "n", bench.DefaultN, "how many "+unit)
		if overHTTP {
			fs.IntVar(&cfg.Clients, "clients", bench.DefaultClients, "concurrent clients; with --rate, the most requests in flight at once")
			fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: send this many requests a second, on a fixed clock (0: closed loop)")
		}
		fs.BoolVar(&cfg.Yes, "yes", false, "run on a database that already holds purchases, all of them final (a previous bench's, say); the bench adds its own")
		fs.BoolVar(&cfg.JSON, "json", false, "write the report as JSON on stdout")
		fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the timed phase to this file, for go tool pprof (the bench's process: worker, server, clients and fake together)")
	})
	if err != nil {
		return cfg, err
	}
	if len(rest) > 0 {
		return cfg, usageError(fmt.Errorf("unexpected arguments %q: bench %s takes only flags", rest, sub))
	}
	switch {
	case cfg.N <= 0 || cfg.N > bench.MaxN:
		return cfg, usageError(fmt.Errorf("--n %d: want a number of %s from 1 to %d", cfg.N, unit, bench.MaxN))
	case overHTTP && (cfg.Clients <= 0 || cfg.Clients > bench.MaxClients):
		return cfg, usageError(fmt.Errorf("--clients %d: want a number of clients from 1 to %d", cfg.Clients, bench.MaxClients))
	case cfg.Rate < 0 || math.IsNaN(cfg.Rate) || math.IsInf(cfg.Rate, 0):
		return cfg, usageError(fmt.Errorf("--rate %v: want a number of requests a second, or 0 for a closed loop", cfg.Rate))
	}
	s := e.settings
	if p := s.str("provider"); p != "fake" {
		return cfg, usageError(fmt.Errorf("--provider %s: the bench runs against the in-process fake provider only", p))
	}
	if s.str("fake-faults") != "" {
		return cfg, usageError(errors.New("--fake-faults: the bench's fake provider has no faults and no latency; unset it"))
	}
	raw, err := s.secret("database-url")
	if err != nil {
		return cfg, usageError(err)
	}
	if raw == "" {
		return cfg, usageError(errors.New("--database-url is required: a scratch database (postgres://… or sqlite:PATH), which the bench fills with purchases"))
	}
	db, err := dburl.Parse(raw)
	if err != nil {
		return cfg, usageError(fmt.Errorf("--database-url: %w", err))
	}
	if cfg.Reconcile, err = s.reconcileConfig(); err != nil {
		return cfg, usageError(err)
	}
	be, err := benchEnv(e)
	if err != nil {
		return cfg, err
	}
	cfg.Stdout, cfg.Stderr, cfg.Log = be.stdout, be.stderr, be.log
	cfg.Store = string(db.Kind)
	if db.Kind == dburl.Postgres {
		cfg.Postgres = db.Postgres
	}
	cfg.OpenStore = benchOpenStore(be)
	cfg.NewApp = func(ctx context.Context, o bench.AppOptions) (*bench.App, error) {
		s.set("webhooks", strconv.FormatBool(o.Webhooks))
		s.set("api", strconv.FormatBool(o.API))
		if o.WebhookSecret != "" {
			s.set("stripe-webhook-secret", o.WebhookSecret)
		}
		if o.APIToken != "" {
			s.set("api-token", o.APIToken)
		}
		ae := &env{stdout: be.stdout, stderr: be.stderr, settings: s, log: be.log, tracer: o.Tracer}
		a, err := newApp(ctx, ae, appOptions{webhooks: o.Webhooks, api: o.API})
		if err != nil {
			return nil, err
		}
		return &bench.App{Serve: a.server.Serve, Close: a.close, Apply: a.applier.Run}, nil
	}
	return cfg, nil
}

// benchEnv is the command's env for a bench: its logger logs warnings
// and errors only unless --log-level is set, since the progress lines
// say what happens. runMain serializes the writes to stderr, which the
// progress lines and the logs make from several goroutines.
func benchEnv(e *env) (*env, error) {
	s := e.settings
	level := s.str("log-level")
	if s.byKey["log-level"].source == fromDefault {
		level = "warn" // the progress lines say what happens
	}
	log, err := newLogger(e.stderr, level, s.str("log-format"))
	if err != nil {
		return nil, usageError(err)
	}
	return &env{stdout: e.stdout, stderr: e.stderr, settings: s, log: log}, nil
}

// benchOpenStore opens the store for a bench, as be's settings name it.
func benchOpenStore(be *env) func(ctx context.Context, o bench.StoreOptions) (*bench.Store, error) {
	return func(ctx context.Context, o bench.StoreOptions) (*bench.Store, error) {
		oe := &env{stdout: be.stdout, stderr: be.stderr, settings: be.settings, log: be.log, tracer: o.Tracer}
		st, err := openStoreFor(ctx, oe, storeOptions{migrate: true, ready: o.Ready, now: o.Now})
		if err != nil {
			return nil, err
		}
		return &bench.Store{Store: st.Store, Kind: st.kind, Migrate: st.migrate}, nil
	}
}

func runBenchBacklog(ctx context.Context, e *env, args []string) error {
	cfg := bench.BacklogConfig{}
	rest, err := e.parse("bench backlog", args, func(fs *flag.FlagSet) {
		fs.IntVar(&cfg.N, "n", bench.DefaultBacklogN, "purchases made uncertain by the outage: the backlog")
		fs.Float64Var(&cfg.Rate, "rate", bench.DefaultBacklogRate, "new purchases a second while the backlog drains")
		fs.IntVar(&cfg.Workers, "workers", bench.DefaultBacklogWorkers, "worker processes (each a service with its own view of the shared budget)")
		fs.BoolVar(&cfg.Fresh, "fresh", false, "the backlog is new purchases, created and never sent (a burst of orders), drained by their first creates: no outage")
		fs.IntVar(&cfg.Accounts, "accounts", 0, "spread the backlog over this many connected accounts, each paced by its own budget and limited apart by the fake (0: the platform's account alone)")
		fs.IntVar(&cfg.Hot, "hot", 0, "with --accounts: this many more purchases queued in the first account, the new purchases arriving in the others")
		fs.DurationVar(&cfg.For, "for", 0, "with --accounts: new purchases keep arriving for at least this long")
	})
	if err != nil {
		return err
	}
	switch {
	case len(rest) > 0:
		return usageError(fmt.Errorf("unexpected arguments %q: bench backlog takes only flags", rest))
	case cfg.Accounts < 0 || cfg.Accounts > bench.MaxAccounts:
		return usageError(fmt.Errorf("--accounts %d: want 0 to %d", cfg.Accounts, bench.MaxAccounts))
	case cfg.Hot < 0 || cfg.Hot > bench.MaxN:
		return usageError(fmt.Errorf("--hot %d: want 0 to %d purchases", cfg.Hot, bench.MaxN))
	case cfg.Hot > 0 && cfg.Accounts < 2:
		return usageError(fmt.Errorf("--hot %d: want --accounts 2 or more, one hot and the others quiet", cfg.Hot))
	case cfg.For < 0 || (cfg.For > 0 && cfg.Accounts == 0):
		return usageError(fmt.Errorf("--for %s: want a duration of 0 or more, with --accounts", cfg.For))
	case cfg.N < 0 || cfg.N > bench.MaxN || (cfg.N == 0 && cfg.Hot == 0):
		return usageError(fmt.Errorf("--n %d: want 1 to %d purchases (0 with --hot)", cfg.N, bench.MaxN))
	case cfg.Accounts > 0 && cfg.N > 0 && cfg.N < cfg.Accounts:
		return usageError(fmt.Errorf("--n %d: want at least one purchase for each of the %d accounts", cfg.N, cfg.Accounts))
	case !(cfg.Rate >= 0) || math.IsInf(cfg.Rate, 0):
		return usageError(fmt.Errorf("--rate %v: want a number of purchases a second, 0 for none", cfg.Rate))
	case cfg.Workers <= 0 || cfg.Workers > 64:
		return usageError(fmt.Errorf("--workers %d: want 1 to 64", cfg.Workers))
	}
	s := e.settings
	raw, err := s.secret("database-url")
	if err != nil {
		return usageError(err)
	}
	if raw == "" {
		return usageError(errors.New("--database-url is required: a scratch database (postgres://… or sqlite:PATH), which the bench fills with purchases"))
	}
	bcfg, _, err := s.budgetConfig(false)
	if err != nil {
		return usageError(err)
	}
	if cfg.Budget, err = bcfgDefaults(bcfg); err != nil {
		return usageError(err)
	}
	if cfg.Reconcile, err = s.reconcileConfig(); err != nil {
		return usageError(err)
	}
	be, err := benchEnv(e)
	if err != nil {
		return err
	}
	cfg.Stdout, cfg.Stderr, cfg.Log = be.stdout, be.stderr, be.log
	cfg.OpenStore = benchOpenStore(be)
	return benchError(bench.Backlog(ctx, cfg))
}

// bcfgDefaults returns cfg with its limits defaulted as budget.New
// would, for the report and the fake.
func bcfgDefaults(cfg budget.Config) (budget.Config, error) {
	b, err := budget.New(nil, cfg)
	if err != nil {
		return cfg, err
	}
	return b.Config(), nil
}
