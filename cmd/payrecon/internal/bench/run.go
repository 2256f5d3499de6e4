package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// Limits and defaults of the bench: the defaults of Config's fields, and
// the bounds the command checks them against.
const (
	DefaultN       = 10000
	MaxN           = 10_000_000
	DefaultClients = 8
	MaxClients     = 10_000
	// Loaders is how many purchases the load creates at once: twice
	// the Postgres store's connections, so that the load is not the
	// bottleneck.
	Loaders = 16
	// benchReaders is how many purchases are read back at once.
	benchReaders = 8
	// benchStall ends a burn-down in which no purchase moved for so long.
	benchStall = time.Minute
	// benchCustomer is the customer of every purchase the bench makes.
	benchCustomer = "payrecon-bench"
)

// Config is a run of bench burn-down, webhooks or api, as the command's
// flags and settings give it and its wiring provides the store and
// serve's HTTP server.
type Config struct {
	// Stdout receives the report.
	Stdout io.Writer
	// Stderr receives the progress lines, from several goroutines: it
	// must be safe for concurrent use.
	Stderr io.Writer
	// Log is the logger of the services, the worker and the fake
	// provider's server.
	Log *slog.Logger
	// N is how many purchases, events or requests the run makes (--n);
	// DefaultN by default, at most MaxN.
	N int
	// Clients is how many clients send the requests of webhooks and api
	// (--clients), with Rate the most requests in flight at once;
	// DefaultClients by default, at most MaxClients. Burn-down has none.
	Clients int
	// Rate makes webhooks and api an open loop, sending this many
	// requests a second on a fixed clock (--rate); 0 (the default) for a
	// closed loop.
	Rate float64
	// Yes runs on a database that already holds purchases, all of them
	// final (--yes); false by default.
	Yes bool
	// JSON writes the report as JSON (--json); false by default, for
	// text.
	JSON bool
	// CPUProfile names the file the timed phase's CPU profile is
	// written to (--cpuprofile); "" (the default) for none.
	CPUProfile string
	// Backlog holds the webhooks' applier until every event is received,
	// then times it alone on the backlog (--backlog); false by default:
	// it applies while the events arrive, as serve does.
	Backlog bool
	// Store is the database's kind, "postgres" or "sqlite", for the
	// report.
	Store string
	// Postgres is the database's URL when it is Postgres, a secret: the
	// bench reads the database's counters over connections of its own
	// and counts its stores' round trips. "" for SQLite.
	Postgres string
	// Reconcile is the worker's configuration (--concurrency,
	// --batch-size and the other worker settings); the bench sets its
	// Logger and Observer.
	Reconcile reconcile.Config
	// OpenStore opens the database as opts say. The caller closes the
	// store.
	OpenStore func(ctx context.Context, opts StoreOptions) (*Store, error)
	// NewApp wires serve's HTTP server as `payrecon serve` does, over a
	// store of its own, without the worker.
	NewApp func(ctx context.Context, opts AppOptions) (*App, error)
}

// StoreOptions say how the bench opens the store.
type StoreOptions struct {
	// Ready refuses a database whose schema is missing or older.
	Ready bool
	// Now is the store's clock; nil for the database's.
	Now func() time.Time
	// Tracer, when set, sees every statement and batch of a Postgres
	// store.
	Tracer pgx.QueryTracer
}

// Store is a store the bench runs on.
type Store struct {
	reconcile.Store
	Kind    string // "postgres" or "sqlite"
	Migrate func(context.Context) error
}

// AppOptions say which of serve's HTTP surfaces the app serves, and
// the bench's own secrets for them.
type AppOptions struct {
	Webhooks bool // POST /webhooks/stripe
	API      bool // the purchase API
	// WebhookSecret is the webhooks' signing secret
	// (STRIPE_WEBHOOK_SECRET); APIToken the purchase API's token, a
	// name:token item (--api-token). "" leaves the setting as it is.
	WebhookSecret, APIToken string
	// Tracer, when set, sees every statement and batch of the app's
	// Postgres store.
	Tracer pgx.QueryTracer
}

// App is serve's HTTP server, wired.
type App struct {
	// Serve serves on ln until ctx ends.
	Serve func(ctx context.Context, ln net.Listener) error
	// Close closes what the app opened, once Serve has returned.
	Close func()
	// Apply runs the webhook inbox's applier until ctx ends.
	Apply func(ctx context.Context) error
}

// UsageError is an error of the command line or a setting, found once
// the bench ran: the command exits 2 for it.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageError(err error) error { return &UsageError{Err: err} }

// bench is one run of a bench subcommand.
type bench struct {
	cfg    Config
	pg     *pgStats        // nil for SQLite
	rt     *roundTrips     // the Postgres stores' round trips; nil for SQLite
	tracer pgx.QueryTracer // rt, or nil for SQLite
	report *Report
}

// newBench starts a run of the bench sub; unit names what N counts;
// overHTTP reports the clients and the rate.
func newBench(cfg Config, sub, unit string, overHTTP bool) *bench {
	b := &bench{cfg: cfg}
	b.report = &Report{Bench: sub, Store: cfg.Store, N: cfg.N, Unit: unit, Latency: []Latency{}}
	if overHTTP {
		b.report.Clients, b.report.Rate = cfg.Clients, cfg.Rate
	}
	if cfg.Postgres != "" {
		b.pg = &pgStats{url: cfg.Postgres}
		b.rt = &roundTrips{}
		b.tracer = b.rt
	}
	return b
}

// startTimed starts what the bench measures of its timed phase besides
// its counts: the CPU time of the process and of the machine (the
// report's CPU), and the CPU profile when --cpuprofile asks for one. It
// returns the function that ends them, sets the report's CPU and closes
// the profile's file.
func (b *bench) startTimed() (stop func() error, err error) {
	stopProfile := func() error { return nil }
	if b.cfg.CPUProfile != "" {
		f, err := os.Create(b.cfg.CPUProfile)
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
	from := ReadCPU()
	return func() error {
		b.report.CPU = CPUBetween(from, ReadCPU(), b.report.N)
		return stopProfile()
	}, nil
}

// begin opens the database for the bench: it notes who else is
// connected (Postgres), migrates the schema if needed, and refuses a
// database that is not the bench's to fill. The caller closes the store.
func (b *bench) begin(ctx context.Context) (*Store, error) {
	if b.pg != nil {
		pg, err := newPGStats(ctx, b.pg.url)
		if err != nil {
			return nil, err
		}
		b.pg = pg
	}
	st, err := b.cfg.OpenStore(ctx, StoreOptions{Tracer: b.tracer})
	if err != nil {
		return nil, err
	}
	if st.Kind == "postgres" {
		if err := st.Migrate(ctx); err != nil {
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
	case total > 0 && !b.cfg.Yes:
		return fmt.Errorf("refusing to run: the database holds %d purchases (all final); run it on a scratch database, "+
			"or give --yes to add to them (a previous bench's, say)", total)
	}
	return nil
}

// open opens the database again (already migrated).
func (b *bench) open(ctx context.Context) (*Store, error) {
	return b.cfg.OpenStore(ctx, StoreOptions{Ready: true, Tracer: b.tracer})
}

// service is the reconcile service over st and p with the worker
// settings, observed by obs; tweak, if set, adjusts its configuration.
func (b *bench) service(st reconcile.Store, p provider.Provider, obs reconcile.Observer, tweak func(*reconcile.Config)) (*reconcile.Service, error) {
	cfg := b.cfg.Reconcile
	cfg.Logger, cfg.Observer = b.cfg.Log, obs
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

// load creates n purchases through Service.CreatePurchase, Loaders
// at a time, and returns their ids and the phase's time.
func (b *bench) load(ctx context.Context, svc *reconcile.Service, label string) ([]string, time.Duration, error) {
	n := b.cfg.N
	ids := make([]string, n)
	var done atomic.Int64
	p := startProgress(b.cfg.Stderr, label, "purchases", n, done.Load)
	start := time.Now()
	err := runEach(ctx, n, Loaders, &done, func(ctx context.Context, i int) error {
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
	// applied counts the webhook events the applier took, and lags holds
	// each one's time from receipt to application.
	applied atomic.Int64
	lagMu   sync.Mutex
	lags    []time.Duration
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

// EventApplied implements reconcile.Observer: it counts the event and
// keeps its lag.
func (o *benchObserver) EventApplied(_ string, _ reconcile.EventOutcome, sinceReceipt time.Duration) {
	o.lagMu.Lock()
	o.lags = append(o.lags, sinceReceipt)
	o.lagMu.Unlock()
	o.applied.Add(1)
}

// work runs the worker as `payrecon worker` does (Service.Work) until
// reached reports n purchases, ctx ends, or nothing moves for
// benchStall. It returns the time from the worker's start until reached
// reported n.
func (b *bench) work(ctx context.Context, svc *reconcile.Service, obs *benchObserver, reached func() int64, n int, label string) (time.Duration, error) {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	p := startProgress(b.cfg.Stderr, label, "purchases", n, reached)
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
	p := startProgress(b.cfg.Stderr, "read back (not timed)", "purchases", len(ids), done.Load)
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
func ledgerCheck(fake *fakeprovider.Fake, ids []string) *Ledger {
	charges := fake.Charges()
	taken := map[string]int{}
	l := &Ledger{Purchases: len(ids), Charges: len(charges)}
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
	if b.cfg.JSON {
		if err := r.writeJSON(b.cfg.Stdout); err != nil {
			return err
		}
	} else {
		r.writeText(b.cfg.Stdout)
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

// BurnDown runs bench burn-down: it loads N purchases, then times the
// worker taking them all to a final state.
func BurnDown(ctx context.Context, cfg Config) error {
	b := newBench(cfg, "burn-down", "purchases", false)
	r, n := b.report, b.cfg.N
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
	setup := newPhase(fmt.Sprintf("purchases created through Service.CreatePurchase, %d at a time", Loaders), n, took)
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
	rss := StartRSS()
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
	r.Latency = []Latency{
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
	// apply starts the app's webhook applier; stop stops it too.
	apply func()
}

// startApp starts serve's HTTP server as `payrecon serve` wires it
// (Config.NewApp, over a store of its own), with the surfaces and
// secrets opts names, on a loopback port of its own, without the worker.
func (b *bench) startApp(ctx context.Context, opts AppOptions) (*benchHTTP, error) {
	opts.Tracer = b.tracer
	a, err := b.cfg.NewApp(ctx, opts)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		a.Close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Serve(sctx, ln) }()
	var applying sync.WaitGroup
	var applyErr error
	return &benchHTTP{base: "http://" + ln.Addr().String(), stop: func() error {
		cancel()
		err := <-done
		applying.Wait()
		a.Close()
		return errors.Join(err, applyErr)
	}, apply: func() {
		applying.Go(func() { applyErr = a.Apply(sctx) })
	}}, nil
}

// latencyName names the latency of the HTTP benches.
func (b *bench) latencyName() (string, string) {
	if b.cfg.Rate > 0 {
		return "scheduled → answered", "from the time the request was due on the fixed clock, so that a stall counts in full"
	}
	return "sent → answered", "closed loop: each client's request, from sending it to reading the answer"
}

// afterDrive puts what the driver measured in the report.
func (b *bench) afterDrive(d driven, what string) {
	r := b.report
	r.Run = newPhase(what, b.cfg.N-d.failed, d.took)
	r.Outcomes = d.outcomes
	if b.cfg.Rate > 0 {
		r.Late, r.LateWakeups = &d.late, &d.lateWake
	}
	name, about := b.latencyName()
	r.Latency = append(r.Latency, summarise(name, about, d.latencies))
	if d.failed > 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("%d of %d %s failed: %s", d.failed, b.cfg.N, r.Unit, strings.Join(d.failures, "; ")))
	}
}
