// Package cron runs payrecon's scheduled sweeps on cron schedules, with
// github.com/robfig/cron/v3.
//
// Several replicas may run a Scheduler against one database. Each sweep
// runs under a lease row in the store (reconcile.Tx.AcquireSweepLock), not
// a local mutex, so at most one replica runs a given sweep at a time; the
// others log the run as skipped. The lease has a TTL, so a replica that
// dies mid-sweep blocks that sweep only until the TTL passes.
package cron

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/payrecon/payrecon/reconcile"
)

// Sweep is one scheduled job.
type Sweep struct {
	// Name identifies the sweep in logs, metrics and its lock.
	Name string
	// Schedule is a cron expression: five fields, or a descriptor such as
	// "@every 30s" or "@hourly".
	Schedule string
	// Looped: another loop runs the sweep on Schedule, by RunSweep (the
	// webhook applier runs the unmatched sweep between its batches); the
	// scheduler only checks the schedule and never starts it.
	Looped bool
	// Run does the work and returns how many items it handled.
	Run func(ctx context.Context) (int, error)
	// LockTTL, when not zero, replaces Config.LockTTL for this sweep: how
	// long its lock holds, and so how long one run may take, for a sweep
	// that needs longer than the others.
	LockTTL time.Duration
}

// Observer records sweep runs, for metrics. result is "ok", "error" or
// "skipped". Implementations must be safe for concurrent use.
type Observer interface {
	Sweep(name, result string, took time.Duration, items int, at time.Time)
}

// Config configures a Scheduler. Zero fields take their documented
// defaults, which DefaultConfig returns.
type Config struct {
	// Owner names this replica in the sweep locks. Default
	// reconcile.DefaultWorkerID().
	Owner string
	// LockTTL is how long a sweep's lock holds if its replica dies. A sweep
	// must finish well within it. Default 5m.
	LockTTL time.Duration
	// Now is the local clock, which only times runs, stamps their
	// observations and goes into each run's lock owner (reconcile.NewID);
	// the sweep locks' expiry uses the store's clock.
	// Default time.Now.
	Now func() time.Time
	// Logger receives one line per run. Default slog.Default().
	Logger *slog.Logger
	// Observer, if set, is told about every run. Default none.
	Observer Observer
}

// DefaultConfig returns the default of every field of Config, as
// documented on the field: what New uses for a zero field. Observer is
// nil: none.
func DefaultConfig() Config {
	return Config{
		Owner:   reconcile.DefaultWorkerID(),
		LockTTL: 5 * time.Minute,
		Now:     time.Now,
		Logger:  slog.Default(),
	}
}

// Scheduler runs sweeps on their schedules. Safe for concurrent use.
type Scheduler struct {
	store  reconcile.Store
	cfg    Config
	sweeps map[string]Sweep
	order  []string
	cron   *cron.Cron
	runCtx ctxBox // the context of Run, for scheduled runs
}

// New returns a Scheduler for sweeps. It returns an error naming the sweep
// whose schedule does not parse, or a repeated or empty name.
func New(store reconcile.Store, sweeps []Sweep, cfg Config) (*Scheduler, error) {
	def := DefaultConfig()
	if cfg.Owner == "" {
		cfg.Owner = def.Owner
	}
	if cfg.LockTTL == 0 {
		cfg.LockTTL = def.LockTTL
	}
	if cfg.Now == nil {
		cfg.Now = def.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = def.Logger
	}
	// A run still going when its next tick comes is not started again:
	// the store lock keeps replicas apart, this keeps one replica from
	// overlapping itself.
	skip := cron.SkipIfStillRunning(cron.DiscardLogger)
	s := &Scheduler{store: store, cfg: cfg, sweeps: map[string]Sweep{}, cron: cron.New(cron.WithChain(skip))}
	var errs []error
	for _, sw := range sweeps {
		switch {
		case sw.Name == "":
			errs = append(errs, errors.New("a sweep has no name"))
			continue
		case s.sweeps[sw.Name].Name != "":
			errs = append(errs, fmt.Errorf("sweep %q appears twice", sw.Name))
			continue
		case sw.Run == nil:
			errs = append(errs, fmt.Errorf("sweep %q has nothing to run", sw.Name))
			continue
		}
		name := sw.Name
		var err error
		if sw.Looped {
			_, err = cron.ParseStandard(sw.Schedule)
		} else {
			_, err = s.cron.AddFunc(sw.Schedule, func() { s.runScheduled(name) })
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("sweep %q: schedule %q: %w", sw.Name, sw.Schedule, err))
			continue
		}
		s.sweeps[name] = sw
		s.order = append(s.order, name)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("cron: %w", err)
	}
	return s, nil
}

// Run starts the schedules and blocks until ctx ends; it then stops
// scheduling and waits for running sweeps to finish.
func (s *Scheduler) Run(ctx context.Context) error {
	s.runCtx.set(ctx)
	s.cron.Start()
	s.cfg.Logger.Info("scheduler started", "sweeps", s.order, "owner", s.cfg.Owner)
	<-ctx.Done()
	<-s.cron.Stop().Done()
	s.cfg.Logger.Info("scheduler stopped")
	return nil
}

func (s *Scheduler) runScheduled(name string) {
	ctx := s.runCtx.get()
	if ctx.Err() != nil {
		return
	}
	_, _, _ = s.RunSweep(ctx, name) // logged and observed inside
}

// RunSweep runs the named sweep now if no replica holds its lock. It
// reports whether it ran, how many items it handled, and its error.
// Returns an error for an unknown name.
func (s *Scheduler) RunSweep(ctx context.Context, name string) (ran bool, items int, err error) {
	sw, ok := s.sweeps[name]
	if !ok {
		return false, 0, fmt.Errorf("cron: no sweep named %q", name)
	}
	start := s.cfg.Now()
	log := s.cfg.Logger.With("sweep", name)
	ttl := s.cfg.LockTTL
	if sw.LockTTL > 0 {
		ttl = sw.LockTTL
	}
	// Each run holds the lock under an owner of its own, so that no other
	// run, in this replica or another, can take or release it meanwhile.
	owner := reconcile.NewID(s.cfg.Owner+"#", start)
	var got bool
	err = s.store.InTx(ctx, func(tx reconcile.Tx) error {
		var err error
		got, err = tx.AcquireSweepLock(ctx, name, owner, ttl)
		return err
	})
	if err != nil {
		log.Error("sweep lock", "err", err)
		s.observe(name, "error", 0, 0, start)
		return false, 0, fmt.Errorf("cron: sweep %s: lock: %w", name, err)
	}
	if !got {
		log.Debug("sweep skipped: another replica holds its lock")
		s.observe(name, "skipped", 0, 0, start)
		return false, 0, nil
	}
	defer func() {
		rerr := s.store.InTx(context.WithoutCancel(ctx), func(tx reconcile.Tx) error {
			return tx.ReleaseSweepLock(ctx, name, owner)
		})
		if rerr != nil {
			log.Warn("sweep lock not released; it expires by itself", "err", rerr)
		}
	}()
	// The run must end before its lock expires and another replica starts
	// the same sweep.
	runCtx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	items, err = sw.Run(runCtx)
	took := s.cfg.Now().Sub(start)
	if err != nil {
		log.Error("sweep failed", "duration", took, "items", items, "err", err)
		s.observe(name, "error", took, items, start)
		return true, items, fmt.Errorf("cron: sweep %s: %w", name, err)
	}
	// A sweep that found nothing is routine: at info it would drown the
	// runs that did something.
	level := slog.LevelInfo
	if items == 0 {
		level = slog.LevelDebug
	}
	log.Log(ctx, level, "sweep ran", "duration", took, "items", items)
	s.observe(name, "ok", took, items, s.cfg.Now())
	return true, items, nil
}

func (s *Scheduler) observe(name, result string, took time.Duration, items int, at time.Time) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.Sweep(name, result, took, items, at)
	}
}

// ctxBox holds the context scheduled runs use, set by Run.
type ctxBox struct {
	mu  sync.Mutex
	ctx context.Context
}

func (b *ctxBox) set(ctx context.Context) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ctx = ctx
}

func (b *ctxBox) get() context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx == nil {
		return context.Background()
	}
	return b.ctx
}
