package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	harness "github.com/payrecon/payrecon/cmd/payrecon/internal/bench"
	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/dburl"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// `payrecon bench` measures payrecon's capacity on the user's own
// database, as pgbench measures Postgres': the worker's burn-down, the
// webhook endpoint and the purchase API, each through the code that
// serves them in production, against the in-process fake provider.

// Limits and defaults of the bench.
const (
	benchDefaultN       = 10000
	benchMaxN           = 10_000_000
	benchDefaultClients = 8
	benchMaxClients     = 10_000
	// benchLoaders is how many purchases the load creates at once: twice
	// the Postgres store's connections, so that the load is not the
	// bottleneck.
	benchLoaders = 16
	// benchReaders is how many purchases are read back at once.
	benchReaders = 8
	// benchStall ends a burn-down in which no purchase moved for so long.
	benchStall = time.Minute
	// benchCustomer is the customer of every purchase the bench makes.
	benchCustomer = "payrecon-bench"
)

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

// benchOptions are a bench subcommand's own flags.
type benchOptions struct {
	n       int
	clients int
	rate    float64
	yes     bool
	asJSON  bool
	// cpuProfile names the file the timed phase's CPU profile is
	// written to; "" for none.
	cpuProfile string
}

// bench is one run of a bench subcommand.
type bench struct {
	opts   benchOptions
	e      *env        // the command's, with its stderr serialised
	pg     *pgStats    // nil for SQLite
	rt     *roundTrips // the Postgres stores' round trips; nil for SQLite
	report *benchReport
}

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

// newBench parses a bench subcommand's command line and checks it
// before anything is opened. unit names what --n counts; overHTTP adds
// --clients and --rate.
func newBench(e *env, sub, unit string, args []string, overHTTP bool) (*bench, error) {
	o := benchOptions{}
	rest, err := e.parse("bench "+sub, args, func(fs *flag.FlagSet) {
		fs.IntVar(&o.n, "n", benchDefaultN, "how many "+unit)
		if overHTTP {
			fs.IntVar(&o.clients, "clients", benchDefaultClients, "concurrent clients; with --rate, the most requests in flight at once")
			fs.Float64Var(&o.rate, "rate", 0, "open loop: send this many requests a second, on a fixed clock (0: closed loop)")
		}
		fs.BoolVar(&o.yes, "yes", false, "run on a database that already holds purchases, all of them final (a previous bench's, say); the bench adds its own")
		fs.BoolVar(&o.asJSON, "json", false, "write the report as JSON on stdout")
		fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the timed phase to this file, for go tool pprof (the bench's process: worker, server, clients and fake together)")
	})
	if err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		return nil, usageError(fmt.Errorf("unexpected arguments %q: bench %s takes only flags", rest, sub))
	}
	switch {
	case o.n <= 0 || o.n > benchMaxN:
		return nil, usageError(fmt.Errorf("--n %d: want a number of %s from 1 to %d", o.n, unit, benchMaxN))
	case overHTTP && (o.clients <= 0 || o.clients > benchMaxClients):
		return nil, usageError(fmt.Errorf("--clients %d: want a number of clients from 1 to %d", o.clients, benchMaxClients))
	case o.rate < 0 || math.IsNaN(o.rate) || math.IsInf(o.rate, 0):
		return nil, usageError(fmt.Errorf("--rate %v: want a number of requests a second, or 0 for a closed loop", o.rate))
	}
	s := e.settings
	if p := s.str("provider"); p != "fake" {
		return nil, usageError(fmt.Errorf("--provider %s: the bench runs against the in-process fake provider only", p))
	}
	if s.str("fake-faults") != "" {
		return nil, usageError(errors.New("--fake-faults: the bench's fake provider has no faults and no latency; unset it"))
	}
	raw, err := s.secret("database-url")
	if err != nil {
		return nil, usageError(err)
	}
	if raw == "" {
		return nil, usageError(errors.New("--database-url is required: a scratch database (postgres://… or sqlite:PATH), which the bench fills with purchases"))
	}
	db, err := dburl.Parse(raw)
	if err != nil {
		return nil, usageError(fmt.Errorf("--database-url: %w", err))
	}
	if _, err := s.reconcileConfig(); err != nil {
		return nil, usageError(err)
	}
	w := e.stderr // runMain serializes its writes: the progress lines and the logs come from several goroutines
	level := s.str("log-level")
	if s.byKey["log-level"].source == fromDefault {
		level = "warn" // the progress lines say what happens
	}
	log, err := newLogger(w, level, s.str("log-format"))
	if err != nil {
		return nil, usageError(err)
	}
	b := &bench{opts: o, e: &env{stdout: e.stdout, stderr: w, settings: s, log: log}}
	b.report = &benchReport{Bench: sub, Store: string(db.Kind), N: o.n, Unit: unit, Latency: []benchLatency{}}
	if overHTTP {
		b.report.Clients, b.report.Rate = o.clients, o.rate
	}
	if db.Kind == dburl.Postgres {
		b.pg = &pgStats{url: db.Postgres}
		b.rt = &roundTrips{}
		b.e.tracer = b.rt
	}
	return b, nil
}

// startTimed starts what the bench measures of its timed phase besides
// its counts: the CPU time of the process and of the machine (the
// report's CPU), and the CPU profile when --cpuprofile asks for one. It
// returns the function that ends them, sets the report's CPU and closes
// the profile's file.
func (b *bench) startTimed() (stop func() error, err error) {
	stopProfile := func() error { return nil }
	if b.opts.cpuProfile != "" {
		f, err := os.Create(b.opts.cpuProfile)
		if err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		stopProfile = func() error {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				return fmt.Errorf("--cpuprofile: %w", err)
			}
			return nil
		}
	}
	from := harness.ReadCPU()
	return func() error {
		b.report.CPU = harness.CPUBetween(from, harness.ReadCPU(), b.report.N)
		return stopProfile()
	}, nil
}

// begin opens the database for the bench: it notes who else is
// connected (Postgres), migrates the schema if needed, and refuses a
// database that is not the bench's to fill. The caller closes the store.
func (b *bench) begin(ctx context.Context) (*openedStore, error) {
	if b.pg != nil {
		pg, err := newPGStats(ctx, b.pg.url)
		if err != nil {
			return nil, err
		}
		b.pg = pg
	}
	st, err := openStoreFor(ctx, b.e, storeOptions{migrate: true})
	if err != nil {
		return nil, err
	}
	if st.kind == "postgres" {
		if err := st.migrate(ctx); err != nil {
			st.Close()
			return nil, err
		}
	}
	if err := b.refuseUnlessScratch(ctx, st); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// refuseUnlessScratch refuses a database that holds purchases, unless
// --yes, and one that holds purchases not final, whatever --yes says: the
// bench's worker would take them through its fake provider.
func (b *bench) refuseUnlessScratch(ctx context.Context, st reconcile.Store) error {
	var counts map[statemachine.State]int
	err := st.InTx(ctx, func(tx reconcile.Tx) error {
		var err error
		counts, err = tx.CountByState(ctx)
		return err
	})
	if err != nil {
		return err
	}
	total, open := 0, 0
	for state, n := range counts {
		total += n
		if !state.Terminal() {
			open += n
		}
	}
	switch {
	case open > 0:
		return fmt.Errorf("refusing to run: the database holds %d purchases, %d of them not final, which the bench's worker would take through its fake provider; "+
			"run it on a scratch database (--yes does not override this)", total, open)
	case total > 0 && !b.opts.yes:
		return fmt.Errorf("refusing to run: the database holds %d purchases (all final); run it on a scratch database, "+
			"or give --yes to add to them (a previous bench's, say)", total)
	}
	return nil
}

// open opens the database again (already migrated).
func (b *bench) open(ctx context.Context) (*openedStore, error) {
	return openStoreFor(ctx, b.e, storeOptions{migrate: true, ready: true})
}

// service is the reconcile service over st and p with the worker
// settings, observed by obs; tweak, if set, adjusts its configuration.
func (b *bench) service(st reconcile.Store, p provider.Provider, obs reconcile.Observer, tweak func(*reconcile.Config)) (*reconcile.Service, error) {
	cfg, err := b.e.settings.reconcileConfig()
	if err != nil {
		return nil, usageError(err)
	}
	cfg.Logger, cfg.Observer = b.e.log, obs
	if tweak != nil {
		tweak(&cfg)
	}
	svc, err := reconcile.New(st, p, cfg)
	if err != nil {
		return nil, usageError(err)
	}
	return svc, nil
}

// counters reads the database's counters (Postgres; zero for SQLite).
func (b *bench) counters(ctx context.Context) (pgCounters, error) {
	if b.pg == nil {
		return pgCounters{}, nil
	}
	c, err := b.pg.read(ctx)
	c.roundTrips, c.sent, c.sentTxControl = b.rt.n.Load(), b.rt.statements.Load(), b.rt.txControl.Load()
	return c, err
}

// benchPurchase is the i-th purchase of a run.
func benchPurchase(i int) reconcile.NewPurchase {
	return reconcile.NewPurchase{Customer: benchCustomer, Amount: 300 + int64(i%700), Currency: "usd", Description: "payrecon bench"}
}

// load creates n purchases through Service.CreatePurchase, benchLoaders
// at a time, and returns their ids and the phase's time.
func (b *bench) load(ctx context.Context, svc *reconcile.Service, label string) ([]string, time.Duration, error) {
	n := b.opts.n
	ids := make([]string, n)
	var done atomic.Int64
	p := startProgress(b.e.stderr, label, "purchases", n, done.Load)
	start := time.Now()
	err := runEach(ctx, n, benchLoaders, &done, func(ctx context.Context, i int) error {
		pu, err := svc.CreatePurchase(ctx, benchPurchase(i))
		if err != nil {
			return fmt.Errorf("create purchase %d: %w", i+1, err)
		}
		ids[i] = pu.ID
		return nil
	})
	took := time.Since(start)
	p.end()
	return ids, took, err
}

// benchObserver counts the worker's moves into final states and into
// uncertain. It never blocks.
type benchObserver struct {
	final, uncertain atomic.Int64
	moved            chan struct{}
}

func newBenchObserver() *benchObserver { return &benchObserver{moved: make(chan struct{}, 1)} }

func (o *benchObserver) Transition(_, to statemachine.State, _ reconcile.Cause) {
	switch {
	case to.Terminal():
		o.final.Add(1)
	case to == statemachine.Uncertain:
		o.uncertain.Add(1)
	}
	select {
	case o.moved <- struct{}{}:
	default:
	}
}
func (o *benchObserver) ProviderCall(provider.Op, provider.Outcome, time.Duration) {}
func (o *benchObserver) JobsClaimed(int)                                           {}
func (o *benchObserver) LeaseLost()                                                {}
func (o *benchObserver) Resolved(time.Duration)                                    {}

// RefundTransition implements reconcile.Observer; the bench counts
// purchases only.
func (o *benchObserver) RefundTransition(_, _ statemachine.State, _ reconcile.Cause) {}

// work runs the worker as `payrecon worker` does (Service.Work) until
// reached reports n purchases, ctx ends, or nothing moves for
// benchStall. It returns the time from the worker's start until reached
// reported n.
func (b *bench) work(ctx context.Context, svc *reconcile.Service, obs *benchObserver, reached func() int64, n int, label string) (time.Duration, error) {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	p := startProgress(b.e.stderr, label, "purchases", n, reached)
	exited := make(chan error, 1)
	start := time.Now()
	go func() { exited <- svc.Work(wctx) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, lastMove := reached(), time.Now()
	var err error
	for err == nil && reached() < int64(n) {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case werr := <-exited:
			p.end()
			return time.Since(start), fmt.Errorf("%s: the worker stopped early: %v", label, werr)
		case <-obs.moved:
		case <-tick.C:
		}
		if c := reached(); c != last {
			last, lastMove = c, time.Now()
		} else if time.Since(lastMove) > benchStall {
			err = fmt.Errorf("%s stalled: %d of %d purchases, none moved for %s", label, c, n, benchStall)
		}
	}
	took := time.Since(start)
	p.end()
	stop()
	if werr := <-exited; werr != nil && err == nil {
		err = werr
	}
	return took, err
}

// readBack reads every purchase of ids and returns how many ended in
// each state and, by the store's clock, the time each took from created
// to final and from submitted (its first provider call) to final.
func (b *bench) readBack(ctx context.Context, st reconcile.Store, ids []string) (map[statemachine.State]int, []time.Duration, []time.Duration, error) {
	ps := make([]reconcile.Purchase, len(ids))
	var done atomic.Int64
	p := startProgress(b.e.stderr, "read back (not timed)", "purchases", len(ids), done.Load)
	err := runEach(ctx, len(ids), benchReaders, &done, func(ctx context.Context, i int) error {
		return st.InTx(ctx, func(tx reconcile.Tx) error {
			var err error
			ps[i], err = tx.GetPurchase(ctx, ids[i])
			return err
		})
	})
	p.end()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read the purchases back: %w", err)
	}
	states := map[statemachine.State]int{}
	var created, submitted []time.Duration
	for _, pu := range ps {
		states[pu.State]++
		if !pu.State.Terminal() {
			continue
		}
		created = append(created, pu.UpdatedAt.Sub(pu.CreatedAt))
		if !pu.FirstAttemptAt.IsZero() {
			submitted = append(submitted, pu.UpdatedAt.Sub(pu.FirstAttemptAt))
		}
	}
	return states, created, submitted, nil
}

// expectSucceeded adds a problem to the report unless every purchase ended
// succeeded.
func (b *bench) expectSucceeded(states map[statemachine.State]int, n int) {
	if states[statemachine.Succeeded] == n {
		return
	}
	var parts []string
	for _, s := range statemachine.States {
		if states[s] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, states[s]))
		}
	}
	b.report.Problems = append(b.report.Problems, fmt.Sprintf("%d of %d purchases succeeded, want all: %s", states[statemachine.Succeeded], n, strings.Join(parts, ", ")))
}

// ledgerCheck compares the fake's ledger with the purchases: each must
// have exactly one charge that took money, and there must be no other
// charge.
func ledgerCheck(fake *fakeprovider.Fake, ids []string) *benchLedger {
	charges := fake.Charges()
	taken := map[string]int{}
	l := &benchLedger{Purchases: len(ids), Charges: len(charges)}
	ours := make(map[string]bool, len(ids))
	for _, id := range ids {
		ours[id] = true
	}
	for _, c := range charges {
		if !ours[c.PurchaseID] {
			l.Foreign++
		}
		if c.MoneyTaken() {
			taken[c.PurchaseID]++
		}
	}
	for _, id := range ids {
		switch n := taken[id]; {
		case n == 0:
			l.Uncharged++
		case n > 1:
			l.DoubleCharged = append(l.DoubleCharged, id)
		}
	}
	l.OK = l.Uncharged == 0 && len(l.DoubleCharged) == 0 && l.Foreign == 0 && l.Charges == len(ids)
	return l
}

// finish writes the report and returns the error that makes the exit
// status 1 when something went wrong.
func (b *bench) finish() error {
	r := b.report
	if b.pg == nil {
		r.Notes = append(r.Notes, "round trips, commits and statements are Postgres' figures (pgx, pg_stat_database, pg_stat_statements): not measured on SQLite, which runs in the process")
	} else {
		r.Notes = append(r.Notes, b.pg.notes...)
		r.Notes = append(r.Notes,
			"round trips are counted by the store's pgx tracer: one for each statement sent alone, one for each batch; a statement's first preparation on a connection is not counted; so are the statements, each when its result is read",
			"commits and pg_stat_statements' count are the database's, over the measured phase: another session's work would be counted too; pg_stat_statements (seen on PostgreSQL 15) leaves out BEGIN, SET, SAVEPOINT and RELEASE sent in a batch after their first run on a connection")
	}
	ledgerOK := r.Ledger == nil || r.Ledger.OK
	r.OK = len(r.Problems) == 0 && ledgerOK
	if b.opts.asJSON {
		if err := r.writeJSON(b.e.stdout); err != nil {
			return err
		}
	} else {
		r.writeText(b.e.stdout)
	}
	switch {
	case !ledgerOK:
		l := r.Ledger
		shown := l.DoubleCharged[:min(len(l.DoubleCharged), maxFailuresShown)]
		return fmt.Errorf("THE LEDGER CHECK FAILED: %d purchases charged more than once %v, %d not charged, %d charges for no purchase of this run",
			len(l.DoubleCharged), shown, l.Uncharged, l.Foreign)
	case !r.OK:
		return fmt.Errorf("%d problems: %s", len(r.Problems), strings.Join(r.Problems, "; "))
	}
	return nil
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

func runBenchBurnDown(ctx context.Context, e *env, args []string) error {
	b, err := newBench(e, "burn-down", "purchases", args, false)
	if err != nil {
		return err
	}
	r, n := b.report, b.opts.n
	st, err := b.begin(ctx)
	if err != nil {
		return err
	}
	fake := fakeprovider.New(fakeprovider.Config{})
	loader, err := b.service(st, fake, nil, nil)
	if err != nil {
		st.Close()
		return err
	}
	ids, took, err := b.load(ctx, loader, "load")
	st.Close()
	if err != nil {
		return err
	}
	setup := newPhase(fmt.Sprintf("purchases created through Service.CreatePurchase, %d at a time", benchLoaders), n, took)
	r.Setup = &setup

	before, err := b.counters(ctx)
	if err != nil {
		return err
	}
	ws, err := b.open(ctx)
	if err != nil {
		return err
	}
	obs := newBenchObserver()
	svc, err := b.service(ws, fake, obs, nil)
	if err != nil {
		ws.Close()
		return err
	}
	r.Concurrency, r.BatchSize = svc.Config().Concurrency, svc.Config().BatchSize
	rss := harness.StartRSS()
	stopTimed, err := b.startTimed()
	if err != nil {
		ws.Close()
		return err
	}
	took, err = b.work(ctx, svc, obs, obs.final.Load, n, "burn-down")
	err = errors.Join(err, stopTimed())
	r.RSS = rss.Finish()
	ws.Close()
	if err != nil {
		return err
	}
	r.Run = newPhase("purchases taken from created to final by the worker (Service.Work)", n, took)
	after, err := b.counters(ctx)
	if err != nil {
		return err
	}
	if b.pg != nil {
		r.DB = b.pg.delta(before, after)
	}
	if r.RSS != nil {
		r.Notes = append(r.Notes, "RSS is the bench process's: the worker, the in-process fake provider with its ledger, and the bench's own records; the load ran in it before, and is idle")
	} else {
		r.Notes = append(r.Notes, "RSS not measured: /proc/self/status cannot be read here")
	}

	vs, err := b.open(ctx)
	if err != nil {
		return err
	}
	states, created, submitted, err := b.readBack(ctx, vs, ids)
	vs.Close()
	if err != nil {
		return err
	}
	r.Latency = []benchLatency{
		summarise("created → final", "store clock; in a burn-down it includes the wait behind the load and the backlog", created),
		summarise("submitted → final", "store clock; the worker's own time for one purchase: its provider call and the commits around it", submitted),
	}
	b.expectSucceeded(states, n)
	r.Ledger = ledgerCheck(fake, ids)
	return b.finish()
}

// benchHTTP is what an HTTP bench sends through.
type benchHTTP struct {
	base string // http://127.0.0.1:PORT
	stop func() error
}

// startApp starts serve's HTTP server as `payrecon serve` wires it
// (newApp, over a store of its own), with the surfaces opts names, on a
// loopback port of its own, without the worker. set overrides settings
// first (the bench's own secrets).
func (b *bench) startApp(ctx context.Context, opts appOptions, set map[string]string) (*benchHTTP, error) {
	s := b.e.settings
	s.set("webhooks", strconv.FormatBool(opts.webhooks))
	s.set("api", strconv.FormatBool(opts.api))
	for k, v := range set {
		s.set(k, v)
	}
	a, err := newApp(ctx, b.e, opts)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		a.close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.server.Serve(sctx, ln) }()
	return &benchHTTP{base: "http://" + ln.Addr().String(), stop: func() error {
		cancel()
		err := <-done
		a.close()
		return err
	}}, nil
}

// latencyName names the latency of the HTTP benches.
func (b *bench) latencyName() (string, string) {
	if b.opts.rate > 0 {
		return "scheduled → answered", "from the time the request was due on the fixed clock, so that a stall counts in full"
	}
	return "sent → answered", "closed loop: each client's request, from sending it to reading the answer"
}

// afterDrive puts what the driver measured in the report.
func (b *bench) afterDrive(d driven, what string) {
	r := b.report
	r.Run = newPhase(what, b.opts.n-d.failed, d.took)
	r.Outcomes = d.outcomes
	if b.opts.rate > 0 {
		r.Late, r.LateWakeups = &d.late, &d.lateWake
	}
	name, about := b.latencyName()
	r.Latency = append(r.Latency, summarise(name, about, d.latencies))
	if d.failed > 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("%d of %d %s failed: %s", d.failed, b.opts.n, r.Unit, strings.Join(d.failures, "; ")))
	}
}
