package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
	backlogDefaultN       = 5000
	backlogDefaultRate    = 5.0
	backlogDefaultWorkers = 4
)

// outage is a provider in an outage while down: every call fails before
// reaching the fake with an unknown outcome, as a connection reset does.
type outage struct {
	provider.Provider
	down atomic.Bool
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

func runBenchBacklog(ctx context.Context, e *env, args []string) error {
	var (
		n, workers int
		rate       float64
		fresh      bool
	)
	rest, err := e.parse("bench backlog", args, func(fs *flag.FlagSet) {
		fs.IntVar(&n, "n", backlogDefaultN, "purchases made uncertain by the outage: the backlog")
		fs.Float64Var(&rate, "rate", backlogDefaultRate, "new purchases a second while the backlog drains")
		fs.IntVar(&workers, "workers", backlogDefaultWorkers, "worker processes (each a service with its own view of the shared budget)")
		fs.BoolVar(&fresh, "fresh", false, "the backlog is new purchases, created and never sent (a burst of orders), drained by their first creates: no outage")
	})
	if err != nil {
		return err
	}
	switch {
	case len(rest) > 0:
		return usageError(fmt.Errorf("unexpected arguments %q: bench backlog takes only flags", rest))
	case n <= 0 || n > benchMaxN:
		return usageError(fmt.Errorf("--n %d: want 1 to %d purchases", n, benchMaxN))
	case !(rate >= 0) || math.IsInf(rate, 0):
		return usageError(fmt.Errorf("--rate %v: want a number of purchases a second, 0 for none", rate))
	case workers <= 0 || workers > 64:
		return usageError(fmt.Errorf("--workers %d: want 1 to 64", workers))
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
	bcfg, err = bcfgDefaults(bcfg)
	if err != nil {
		return usageError(err)
	}
	base, err := s.reconcileConfig()
	if err != nil {
		return usageError(err)
	}
	level := s.str("log-level")
	if s.byKey["log-level"].source == fromDefault {
		level = "warn" // the progress lines say what happens
	}
	log, err := newLogger(e.stderr, level, s.str("log-format"))
	if err != nil {
		return usageError(err)
	}
	e = &env{stdout: e.stdout, stderr: e.stderr, settings: s, log: log}
	clock := &backlogClock{}
	st, err := openStoreFor(ctx, e, storeOptions{migrate: true, ready: true, now: clock.now})
	if err != nil {
		return err
	}
	defer st.Close()
	bs, ok := st.Store.(budget.Store)
	if !ok {
		return fmt.Errorf("bench backlog: the store keeps no budget")
	}
	var pending int
	err = st.Store.InTx(ctx, func(tx reconcile.Tx) error {
		c, err := tx.CountByState(ctx)
		for state, k := range c {
			if !state.Terminal() {
				pending += k
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	if pending > 0 {
		return usageError(fmt.Errorf("the database holds %d purchases not final: use a scratch database", pending))
	}

	fake := fakeprovider.New(fakeprovider.Config{})
	prov := &outage{Provider: fake}
	leaseLost := &leaseLostCounter{}
	newService := func(id string, budget reconcile.Budget, backoff time.Duration) (*reconcile.Service, error) {
		cfg := base
		cfg.WorkerID, cfg.Logger, cfg.Budget, cfg.Observer = id, e.log, budget, leaseLost
		cfg.Backoff = []time.Duration{backoff}
		cfg.MaxAttempts = 1000
		cfg.PollInterval = min(cfg.PollInterval, 50*time.Millisecond)
		return reconcile.New(st.Store, prov, cfg)
	}

	// The outage: every purchase's create fails, outcome unknown. A
	// fresh backlog is only created.
	prov.down.Store(true)
	down, err := newService("bench-outage", nil, time.Hour)
	if err != nil {
		return usageError(err)
	}
	if fresh {
		fmt.Fprintf(e.stderr, "creating %d purchases, none sent\n", n)
	} else {
		fmt.Fprintf(e.stderr, "outage: making %d purchases uncertain\n", n)
	}
	backlog := make(map[string]bool, n)
	for i := range n {
		p, err := down.CreatePurchase(ctx, benchPurchase(i))
		if err != nil {
			return err
		}
		backlog[p.ID] = true
	}
	for !fresh {
		k, err := down.RunOnce(ctx)
		if err != nil {
			return err
		}
		if k == 0 {
			break
		}
	}
	leaseLost.n.Store(0)

	// The outage lifts: the fake enforces the budget's limits, the
	// backlog is due, new purchases keep arriving.
	limits := bcfg.Limits
	fake.SetRateLimits(fakeprovider.RateLimits{Global: int(limits.Global), Create: int(limits.Create), Retrieve: int(limits.Retrieve),
		Search: int(limits.Search), List: int(limits.List), Refund: int(limits.Refund)})
	prov.down.Store(false)
	clock.offset.Store(int64(2 * time.Hour))
	var svcs []*reconcile.Service
	for i := range workers {
		b, err := budget.New(bs, bcfg)
		if err != nil {
			return usageError(err)
		}
		svc, err := newService(fmt.Sprintf("bench-%d", i+1), b, 200*time.Millisecond)
		if err != nil {
			return usageError(err)
		}
		svcs = append(svcs, svc)
	}
	lift := time.Now()
	workCtx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, svc := range svcs {
		wg.Go(func() { _ = svc.Work(workCtx) })
	}
	defer func() { stopWork(); wg.Wait() }()

	var (
		mu     sync.Mutex
		newIDs []string
	)
	arrive, stopArrivals := context.WithCancel(ctx)
	defer stopArrivals()
	var awg sync.WaitGroup
	awg.Go(func() {
		if rate == 0 {
			return
		}
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		for i := n; ; i++ {
			select {
			case <-arrive.Done():
				return
			case <-tick.C:
			}
			p, err := svcs[0].CreatePurchase(ctx, benchPurchase(i))
			if err != nil {
				e.log.Error("create a new purchase", "err", err)
				continue
			}
			mu.Lock()
			newIDs = append(newIDs, p.ID)
			mu.Unlock()
		}
	})
	finalOf := func(ids []string) (int, error) {
		k := 0
		for _, id := range ids {
			d, err := svcs[0].Purchase(ctx, id)
			if err != nil {
				return 0, err
			}
			if d.Purchase.State.Terminal() {
				k++
			}
		}
		return k, nil
	}
	terminal := func() (int, error) {
		k := 0
		err := st.Store.InTx(ctx, func(tx reconcile.Tx) error {
			c, err := tx.CountByState(ctx)
			for state, m := range c {
				if state.Terminal() {
					k += m
				}
			}
			return err
		})
		return k, err
	}
	startTerminal, err := terminal()
	if err != nil {
		return err
	}
	last := time.Now()
	for {
		mu.Lock()
		ids := slices.Clone(newIDs)
		mu.Unlock()
		nf, err := finalOf(ids)
		if err != nil {
			return err
		}
		all, err := terminal()
		if err != nil {
			return err
		}
		drainedSoFar := all - startTerminal - nf
		if time.Since(last) >= time.Second {
			fmt.Fprintf(e.stderr, "drain: %d/%d of the backlog final, %d new purchases\n", drainedSoFar, n, len(ids))
			last = time.Now()
		}
		if drainedSoFar >= n {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	drained := time.Now()
	stopArrivals()
	awg.Wait()
	for {
		mu.Lock()
		ids := slices.Clone(newIDs)
		mu.Unlock()
		nf, err := finalOf(ids)
		if err != nil {
			return err
		}
		if nf == len(ids) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopWork()
	wg.Wait()

	var calls int
	var first time.Time
	for _, at := range fake.AdmittedTimes("create") {
		if !at.Before(lift) && !at.After(drained) {
			if calls == 0 {
				first = at
			}
			calls++
		}
	}
	var lat []time.Duration
	for _, id := range newIDs {
		d, err := svcs[0].Purchase(ctx, id)
		if err != nil {
			return err
		}
		lat = append(lat, d.Purchase.UpdatedAt.Sub(d.Purchase.CreatedAt))
	}
	slices.Sort(lat)
	dur := drained.Sub(first)
	throttled := 0
	for _, c := range []string{"create", "retrieve", "search", "list", "refund"} {
		throttled += fake.ThrottledCalls(c)
	}
	var charged []time.Time
	for _, c := range fake.Charges() {
		if backlog[c.PurchaseID] {
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
	writeBacklogReport(e.stdout, backlogReport{
		n: n, workers: workers, rate: rate, limit: limits.Create, global: limits.Global, headroom: bcfg.Headroom, fresh: fresh,
		drain: dur, calls: calls, throttled: throttled, newLatencies: lat, charges: len(fake.Charges()),
		leaseLost: int(leaseLost.n.Load()), peak: maxPerSecond(fake.AdmittedTimes("create")), tail: tail, gap: gap,
	})
	if got, want := len(fake.Charges()), n+len(newIDs); got != want {
		return fmt.Errorf("THE LEDGER CHECK FAILED: %d charges for %d purchases", got, want)
	}
	return nil
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
	q := func(f float64) time.Duration {
		if len(r.newLatencies) == 0 {
			return 0
		}
		i := int(math.Ceil(f*float64(len(r.newLatencies)))) - 1
		return r.newLatencies[min(max(i, 0), len(r.newLatencies)-1)].Round(time.Millisecond)
	}
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
