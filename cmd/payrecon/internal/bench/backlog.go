package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/budget"
	"github.com/payrecon/payrecon/statemachine"
)

// The defaults of bench backlog.
const (
	DefaultBacklogN       = 5000
	DefaultBacklogRate    = 5.0
	DefaultBacklogWorkers = 4
)

// outage is a provider in an outage while down: every call fails before
// reaching the fake with an unknown outcome, as a connection reset does.
type outage struct {
	provider.Provider
	down *atomic.Bool
}

// ForAccount implements provider.Accounts: the view of account of the
// provider, down while o is.
func (o *outage) ForAccount(account string) provider.Provider {
	return &outage{Provider: o.Provider.(provider.Accounts).ForAccount(account), down: o.down}
}

var errBenchOutage = errors.New("bench outage: connection reset by peer")

func (o *outage) Create(ctx context.Context, req provider.CreateRequest) (provider.Result, error) {
	if o.down.Load() {
		return provider.Result{}, errBenchOutage
	}
	return o.Provider.Create(ctx, req)
}

func (o *outage) Status(ctx context.Context, id string) (provider.Result, error) {
	if o.down.Load() {
		return provider.Result{}, errBenchOutage
	}
	return o.Provider.Status(ctx, id)
}

func (o *outage) Search(ctx context.Context, id string) (provider.Result, error) {
	if o.down.Load() {
		return provider.Result{}, errBenchOutage
	}
	return o.Provider.Search(ctx, id)
}

// backlogClock is the store's clock of the bench: the real one, moved on
// past the backlog's backoff when the outage lifts.
type backlogClock struct{ offset atomic.Int64 }

func (c *backlogClock) now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// BacklogConfig is a run of bench backlog, as the command's flags and
// settings give it and its wiring provides the store.
type BacklogConfig struct {
	// Stdout receives the report, Stderr the progress lines.
	Stdout, Stderr io.Writer
	// Log is the logger of the services.
	Log *slog.Logger
	// N is how many purchases the outage makes uncertain: the backlog
	// (--n); DefaultBacklogN by default, at most MaxN.
	N int
	// Rate is how many new purchases a second arrive while the backlog
	// drains (--rate); DefaultBacklogRate by default, 0 for none.
	Rate float64
	// Workers is how many worker processes drain it, each a service
	// with its own view of the shared budget (--workers);
	// DefaultBacklogWorkers by default.
	Workers int
	// Accounts spreads the backlog evenly over this many connected
	// accounts (acct_bench1 and on), each paced by a budget of its own at
	// Budget's limits and limited apart by the fake, and the new purchases
	// among them in turn (--accounts); 0 by default: the platform's
	// account alone.
	Accounts int
	// Hot queues this many more purchases in the first account, the
	// busy one, whose backlog must not delay the others' new purchases,
	// which then arrive in the other accounts alone (--hot, with at least
	// two Accounts); 0 by default. The run does not wait for the hot
	// backlog to drain.
	Hot int
	// For is how long new purchases keep arriving at the least, however
	// soon the backlog drains (--for, with Accounts); 0 by default.
	For time.Duration
	// Fresh makes the backlog new purchases, created and never sent,
	// drained by their first creates, with no outage (--fresh); false by
	// default.
	Fresh bool
	// Budget is the shared budget's configuration (--budget-create and
	// the others), its limits defaulted as budget.New
	// defaults them: the fake enforces them.
	Budget budget.Config
	// Reconcile is the workers' configuration; the bench sets its worker
	// id, Logger, Budget, Observer, Backoff, MaxAttempts and, to at most
	// 50ms, PollInterval.
	Reconcile reconcile.Config
	// OpenStore opens the database as opts say. The caller closes the
	// store.
	OpenStore func(ctx context.Context, opts StoreOptions) (*Store, error)
}

// Backlog runs bench backlog: it drains a backlog of uncertain purchases
// after a provider outage, within the shared rate budget.
func Backlog(ctx context.Context, cfg BacklogConfig) error {
	clock := &backlogClock{}
	st, err := cfg.OpenStore(ctx, StoreOptions{Ready: true, Now: clock.now})
	if err != nil {
		return err
	}
	defer st.Close()
	bs, ok := st.Store.(budget.Store)
	if !ok {
		return fmt.Errorf("bench backlog: the store keeps no budget")
	}
	pending, err := countStates(ctx, st.Store, false)
	if err != nil {
		return err
	}
	if pending > 0 {
		return usageError(fmt.Errorf("the database holds %d purchases not final: use a scratch database", pending))
	}
	if cfg.Accounts > 0 {
		return accountsBacklog(ctx, cfg, st.Store, bs, clock)
	}
	fake := fakeprovider.New(fakeprovider.Config{})
	r := &backlogRun{cfg: cfg, store: st.Store, fake: fake, prov: &outage{Provider: fake, down: new(atomic.Bool)}, leaseLost: &leaseLostCounter{}}
	if err := r.makeBacklog(ctx); err != nil {
		return err
	}

	// The outage lifts: the fake enforces the budget's limits, the
	// backlog is due, new purchases keep arriving.
	fake.SetRateLimits(fakeLimits(cfg.Budget.Limits))
	lift, stop, err := r.lift(ctx, bs, clock)
	if err != nil {
		return err
	}
	defer stop.all()

	if err := r.waitDrained(ctx); err != nil {
		return err
	}
	drained := time.Now()
	stop.arrivals()
	if err := r.waitNewFinal(ctx); err != nil {
		return err
	}
	stop.work()

	report, err := r.report(ctx, lift, drained)
	if err != nil {
		return err
	}
	writeBacklogReport(cfg.Stdout, report)
	if got, want := len(fake.Charges()), cfg.N+len(r.newIDs); got != want {
		return fmt.Errorf("THE LEDGER CHECK FAILED: %d charges for %d purchases", got, want)
	}
	return nil
}

// fakeLimits are the fake's limits equal to the budget's.
func fakeLimits(l budget.Limits) fakeprovider.RateLimits {
	return fakeprovider.RateLimits{Global: int(l.Global), Create: int(l.Create), Retrieve: int(l.Retrieve),
		Search: int(l.Search), List: int(l.List), Refund: int(l.Refund)}
}

// stoppers stop what lift started: the arrivals, then the workers.
type stoppers struct{ arrivals, work func() }

func (s stoppers) all() { s.arrivals(); s.work() }

// lift ends the outage: the backlog is due (the clock moves past its
// backoff), the workers start, each with its own view of the shared
// budgets, and new purchases keep arriving. It returns when it lifted,
// and how to stop each (each stop waits, and may be called again).
func (r *backlogRun) lift(ctx context.Context, bs budget.Store, clock *backlogClock) (time.Time, stoppers, error) {
	r.prov.down.Store(false)
	clock.offset.Store(int64(2 * time.Hour))
	for i := range r.cfg.Workers {
		b, err := budget.New(bs, r.cfg.Budget)
		if err != nil {
			return time.Time{}, stoppers{}, usageError(err)
		}
		svc, err := r.newService(fmt.Sprintf("bench-%d", i+1), b, 200*time.Millisecond)
		if err != nil {
			return time.Time{}, stoppers{}, usageError(err)
		}
		r.svcs = append(r.svcs, svc)
	}
	lift := time.Now()
	workCtx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, svc := range r.svcs {
		wg.Go(func() { _ = svc.Work(workCtx) })
	}
	arrive, stopArrivals := context.WithCancel(ctx)
	var awg sync.WaitGroup
	awg.Go(func() { r.arrivals(ctx, arrive.Done()) })
	return lift, stoppers{
		arrivals: func() { stopArrivals(); awg.Wait() },
		work:     func() { stopWork(); wg.Wait() },
	}, nil
}

// backlogRun is one run of bench backlog, from the outage to the report.
type backlogRun struct {
	cfg       BacklogConfig
	store     reconcile.Store
	fake      *fakeprovider.Fake
	prov      *outage
	leaseLost *leaseLostCounter
	backlog   map[string]bool // the ids of the backlog's purchases
	order     []string        // and in the order made
	svcs      []*reconcile.Service
	// accountOf is the account of the i-th purchase made; nil: the
	// platform's. accounts makes each worker's budgets of the connected
	// accounts; nil: none.
	accountOf func(i int) string
	accounts  func() (reconcile.AccountBudgets, error)

	mu     sync.Mutex
	newIDs []string // the purchases that arrived while it drained
}

// newService is a bench worker over the run's store and provider.
func (r *backlogRun) newService(id string, budget reconcile.Budget, backoff time.Duration) (*reconcile.Service, error) {
	rc := r.cfg.Reconcile
	rc.WorkerID, rc.Logger, rc.Budget, rc.Observer = id, r.cfg.Log, budget, r.leaseLost
	rc.Backoff = []time.Duration{backoff}
	rc.MaxAttempts = 1000
	rc.PollInterval = min(rc.PollInterval, 50*time.Millisecond)
	if r.accounts != nil && budget != nil {
		var err error
		if rc.AccountBudgets, err = r.accounts(); err != nil {
			return nil, err
		}
	}
	return reconcile.New(r.store, r.prov, rc)
}

// makeBacklog creates the backlog during the outage: every create fails,
// outcome unknown, so each purchase ends uncertain. A fresh backlog is
// only created.
func (r *backlogRun) makeBacklog(ctx context.Context) error {
	r.prov.down.Store(true)
	down, err := r.newService("bench-outage", nil, time.Hour)
	if err != nil {
		return usageError(err)
	}
	if r.cfg.Fresh {
		fmt.Fprintf(r.cfg.Stderr, "creating %d purchases, none sent\n", r.cfg.N)
	} else {
		fmt.Fprintf(r.cfg.Stderr, "outage: making %d purchases uncertain\n", r.cfg.N)
	}
	r.backlog = make(map[string]bool, r.size())
	r.order = make([]string, 0, r.size())
	for i := range r.size() {
		p, err := down.CreatePurchase(ctx, r.purchase(i))
		if err != nil {
			return err
		}
		r.backlog[p.ID] = true
		r.order = append(r.order, p.ID)
	}
	for !r.cfg.Fresh {
		k, err := down.RunOnce(ctx)
		if err != nil {
			return err
		}
		if k == 0 {
			break
		}
	}
	r.leaseLost.n.Store(0)
	return nil
}

// size is how many purchases the backlog holds: the even ones and the
// hot account's.
func (r *backlogRun) size() int { return r.cfg.N + r.cfg.Hot }

// purchase is the i-th purchase the run makes, in its account.
func (r *backlogRun) purchase(i int) reconcile.NewPurchase {
	p := benchPurchase(i)
	if r.accountOf != nil {
		p.Account = r.accountOf(i)
	}
	return p
}

// arrivals creates new purchases at the configured rate until stop is
// closed.
func (r *backlogRun) arrivals(ctx context.Context, stop <-chan struct{}) {
	if r.cfg.Rate == 0 {
		return
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / r.cfg.Rate))
	defer tick.Stop()
	for i := r.size(); ; i++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		p, err := r.svcs[0].CreatePurchase(ctx, r.purchase(i))
		if err != nil {
			r.cfg.Log.Error("create a new purchase", "err", err)
			continue
		}
		r.mu.Lock()
		r.newIDs = append(r.newIDs, p.ID)
		r.mu.Unlock()
	}
}

// arrived returns the purchases that have arrived so far.
func (r *backlogRun) arrived() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.newIDs)
}

// finalOf counts the purchases of ids that are final.
func (r *backlogRun) finalOf(ctx context.Context, ids []string) (int, error) {
	k := 0
	for _, id := range ids {
		d, err := r.svcs[0].Purchase(ctx, id)
		if err != nil {
			return 0, err
		}
		if d.Purchase.State.Terminal() {
			k++
		}
	}
	return k, nil
}

// waitDrained returns when every purchase of the backlog is final: the
// final purchases in the store, less those final at the start and the
// new ones, reach the backlog's size. It prints progress each second.
func (r *backlogRun) waitDrained(ctx context.Context) error {
	startTerminal, err := countStates(ctx, r.store, true)
	if err != nil {
		return err
	}
	last := time.Now()
	for {
		ids := r.arrived()
		nf, err := r.finalOf(ctx, ids)
		if err != nil {
			return err
		}
		all, err := countStates(ctx, r.store, true)
		if err != nil {
			return err
		}
		drained := all - startTerminal - nf
		if time.Since(last) >= time.Second {
			fmt.Fprintf(r.cfg.Stderr, "drain: %d/%d of the backlog final, %d new purchases\n", drained, r.cfg.N, len(ids))
			last = time.Now()
		}
		if drained >= r.cfg.N {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitNewFinal returns when every purchase that arrived is final.
func (r *backlogRun) waitNewFinal(ctx context.Context) error {
	for {
		ids := r.arrived()
		nf, err := r.finalOf(ctx, ids)
		if err != nil {
			return err
		}
		if nf == len(ids) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// report measures the run from the fake's ledger and the purchases:
// the creates admitted between the lift and the drain, the new
// purchases' latencies and the charges' spacing.
func (r *backlogRun) report(ctx context.Context, lift, drained time.Time) (backlogReport, error) {
	var calls int
	var first time.Time
	for _, at := range r.fake.AdmittedTimes("create") {
		if !at.Before(lift) && !at.After(drained) {
			if calls == 0 {
				first = at
			}
			calls++
		}
	}
	lat, err := r.newLatencies(ctx)
	if err != nil {
		return backlogReport{}, err
	}
	throttled := 0
	for _, c := range budgetClasses {
		throttled += r.fake.ThrottledCalls(c)
	}
	var charged []time.Time
	for _, c := range r.fake.Charges() {
		if r.backlog[c.PurchaseID] {
			charged = append(charged, c.CreatedAt)
		}
	}
	slices.SortFunc(charged, time.Time.Compare)
	var tail, gap time.Duration
	if k := len(charged); k >= 2 {
		tail = charged[k-1].Sub(charged[k-2])
	}
	for i := 1; i < len(charged); i++ {
		gap = max(gap, charged[i].Sub(charged[i-1]))
	}
	limits := r.cfg.Budget.Limits
	return backlogReport{
		n: r.cfg.N, workers: r.cfg.Workers, rate: r.cfg.Rate, limit: limits.Create, global: limits.Global, headroom: r.cfg.Budget.Headroom, fresh: r.cfg.Fresh,
		drain: drained.Sub(first), calls: calls, throttled: throttled, newLatencies: lat, charges: len(r.fake.Charges()),
		leaseLost: int(r.leaseLost.n.Load()), peak: maxPerSecond(r.fake.AdmittedTimes("create")), tail: tail, gap: gap,
	}, nil
}

// newLatencies are the new purchases' times from created to final,
// sorted.
func (r *backlogRun) newLatencies(ctx context.Context) ([]time.Duration, error) {
	var lat []time.Duration
	for _, id := range r.newIDs {
		d, err := r.svcs[0].Purchase(ctx, id)
		if err != nil {
			return nil, err
		}
		lat = append(lat, d.Purchase.UpdatedAt.Sub(d.Purchase.CreatedAt))
	}
	slices.Sort(lat)
	return lat, nil
}

// quantile is the f-quantile of sorted, rounded to the millisecond; 0
// when it is empty.
func quantile(sorted []time.Duration, f float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(f*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)].Round(time.Millisecond)
}

// countStates counts the purchases whose state is final (terminal) or
// not final.
func countStates(ctx context.Context, st reconcile.Store, terminal bool) (int, error) {
	k := 0
	err := st.InTx(ctx, func(tx reconcile.Tx) error {
		c, err := tx.CountByState(ctx)
		for state, m := range c {
			if state.Terminal() == terminal {
				k += m
			}
		}
		return err
	})
	return k, err
}

type backlogReport struct {
	n, workers          int
	rate, limit, global float64
	headroom            float64
	drain               time.Duration
	calls, throttled    int
	newLatencies        []time.Duration
	charges             int
	fresh               bool
	// leaseLost counts the transitions of cause lease_lost during the
	// drain; peak is the most creates the provider admitted in any
	// 1-second window; tail the time between the last two charges of the
	// backlog, gap the longest between two consecutive ones.
	leaseLost, peak int
	tail, gap       time.Duration
}

// leaseLostCounter is the bench workers' Observer: it counts the
// transitions of cause lease_lost.
type leaseLostCounter struct{ n atomic.Int64 }

func (c *leaseLostCounter) Transition(_, _ statemachine.State, cause reconcile.Cause) {
	if cause == reconcile.CauseLeaseLost {
		c.n.Add(1)
	}
}
func (*leaseLostCounter) ProviderCall(provider.Op, provider.Outcome, time.Duration)                {}
func (*leaseLostCounter) JobsClaimed(int)                                                          {}
func (*leaseLostCounter) LeaseLost()                                                               {}
func (*leaseLostCounter) Resolved(time.Duration)                                                   {}
func (*leaseLostCounter) RefundTransition(statemachine.State, statemachine.State, reconcile.Cause) {}
func (*leaseLostCounter) EventApplied(string, reconcile.EventOutcome, time.Duration)               {}

// maxPerSecond returns the most of the sorted times within any 1-second
// window (half-open).
func maxPerSecond(ts []time.Time) int {
	worst, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= time.Second {
			j++
		}
		worst = max(worst, i-j+1)
	}
	return worst
}

func writeBacklogReport(w io.Writer, r backlogReport) {
	q := func(f float64) time.Duration { return quantile(r.newLatencies, f) }
	what := "uncertain after an outage"
	if r.fresh {
		what = "created, none sent"
	}
	fmt.Fprintf(w, "bench backlog: %d purchases %s, %d workers, budget %.0f creates/s (global %.0f, headroom %.0f%%), %.1f new purchases/s during the drain\n",
		r.n, what, r.workers, r.limit, r.global, 100*r.headroom, r.rate)
	fmt.Fprintf(w, "  drain:           %s (%.1f backlog purchases/s)\n", r.drain.Round(time.Millisecond), float64(r.n)/r.drain.Seconds())
	fmt.Fprintf(w, "  budget used:     %d creates at the provider = %.1f%% of the budget\n", r.calls, 100*float64(r.calls)/(r.limit*r.drain.Seconds()))
	fmt.Fprintf(w, "  answered 429:    %d (%.2f%% of calls)\n", r.throttled, 100*float64(r.throttled)/float64(max(1, r.calls+r.throttled)))
	fmt.Fprintf(w, "  creates/s:       at most %d in any 1-second window\n", r.peak)
	fmt.Fprintf(w, "  lease_lost:      %d transitions\n", r.leaseLost)
	fmt.Fprintf(w, "  tail:            %s from the backlog's last-but-one charge to its last; longest gap between two charges %s\n",
		r.tail.Round(time.Millisecond), r.gap.Round(time.Millisecond))
	fmt.Fprintf(w, "  new purchases:   %d, created → final p50 %s, p99 %s\n", len(r.newLatencies), q(0.50), q(0.99))
	fmt.Fprintf(w, "  ledger:          %d charges\n", r.charges)
}
