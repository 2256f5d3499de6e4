// Package applier applies the webhook inbox. The endpoint only stores
// each event, pending (reconcile.Service.ReceiveEvent); an Applier, in
// every serve and worker process, claims pending events in batches and
// applies them (reconcile.Service.ApplyPending), as soon as it is woken:
// in-process by the endpoint, across processes by the store's
// notification (reconcile.InboxListener: PostgreSQL's LISTEN/NOTIFY),
// and by a poll when neither comes. Beside its batches it retries the
// events stored unmatched, on their own schedule.
//
// Two appliers never apply one event: each claim holds its events until
// its transaction ends, and the others skip them.
package applier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/payrecon/payrecon/reconcile"
)

// Config configures an Applier. The zero value of each field is its
// documented default.
type Config struct {
	// Poll is how long the applier waits for a wake before it looks at
	// the inbox anyway: the bound on the lag when no wake comes (another
	// process received the event on a store without notifications).
	// Default 1s.
	Poll time.Duration
	// Gather is how long the applier waits, once woken, for more events
	// before it claims a batch: more events a transaction, each a little
	// later. Default the service's Config.InboxGather.
	Gather time.Duration
	// Listener wakes the applier when any process received events.
	// Default the service's store's (Service.InboxListener), if it has
	// one; otherwise in-process wakes and the poll.
	Listener reconcile.InboxListener
	// Unmatched retries the events stored unmatched (the unmatched
	// sweep, which holds its own lock across processes). Default none.
	Unmatched func(ctx context.Context) error
	// UnmatchedSchedule is when Unmatched runs, as a cron schedule.
	// Default "@every 1m".
	UnmatchedSchedule string
	// Now is the local clock, for the unmatched schedule. Default time.Now.
	Now func() time.Time
	// Logger logs failed rounds. Default slog.Default().
	Logger *slog.Logger
}

// Applier applies the inbox of one Service.
type Applier struct {
	svc       *reconcile.Service
	cfg       Config
	unmatched cron.Schedule
}

// New returns an Applier for svc, or an error naming a bad setting.
func New(svc *reconcile.Service, cfg Config) (*Applier, error) {
	if cfg.Poll == 0 {
		cfg.Poll = time.Second
	}
	if cfg.Poll < 0 {
		return nil, fmt.Errorf("applier: poll %s: must be positive", cfg.Poll)
	}
	if cfg.Gather == 0 {
		cfg.Gather = svc.Config().InboxGather
	}
	if cfg.Listener == nil {
		cfg.Listener = svc.InboxListener()
	}
	if cfg.UnmatchedSchedule == "" {
		cfg.UnmatchedSchedule = "@every 1m"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	sched, err := cron.ParseStandard(cfg.UnmatchedSchedule)
	if err != nil {
		return nil, fmt.Errorf("applier: unmatched schedule %q: %w", cfg.UnmatchedSchedule, err)
	}
	return &Applier{svc: svc, cfg: cfg, unmatched: sched}, nil
}

// Run applies the inbox until ctx ends, and then returns nil once the
// round in flight committed or rolled back. A round that fails is
// logged and tried again after the poll: its events stay pending.
func (a *Applier) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	if a.cfg.Listener != nil {
		// Run returns once the listener's connection is closed too.
		lctx, stop := context.WithCancel(ctx)
		listening := make(chan struct{})
		go func() { defer close(listening); a.listen(lctx, signal) }()
		defer func() { stop(); <-listening }()
	}
	if a.cfg.Unmatched != nil {
		// Beside the batches, not between them: its provider calls wait
		// for the rate budget, and must not hold the inbox back.
		unmatched := make(chan struct{})
		go func() { defer close(unmatched); a.runUnmatched(ctx) }()
		defer func() { <-unmatched }()
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		woken := true
		select {
		case <-ctx.Done():
			return nil
		case <-a.svc.ApplierWake():
		case <-wake:
		case <-timer.C:
			woken = false
		}
		if woken && a.cfg.Gather > 0 {
			// Let the events that arrive meanwhile join the batch.
			timer.Reset(a.cfg.Gather)
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
			}
		}
		a.drain(ctx)
		timer.Reset(a.cfg.Poll)
	}
}

// runUnmatched runs the unmatched sweep on its schedule until ctx ends.
func (a *Applier) runUnmatched(ctx context.Context) {
	for {
		now := a.cfg.Now()
		t := time.NewTimer(a.unmatched.Next(now).Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := a.cfg.Unmatched(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("unmatched webhook events: retry failed", "err", err)
		}
	}
}

// drain applies batches until one comes back short of a full batch, or
// fails (logged: its events stay pending, for the next round).
func (a *Applier) drain(ctx context.Context) {
	batch := a.svc.Config().InboxBatch
	for ctx.Err() == nil {
		n, err := a.svc.ApplyPending(ctx)
		if err != nil {
			if ctx.Err() == nil {
				a.cfg.Logger.Error("webhook applier: round failed; its events stay pending", "err", err)
			}
			return
		}
		if n < batch {
			return
		}
	}
}

// listen runs the store's listener until ctx ends, again after a pause
// when it fails (a lost connection): wakes are only lost meanwhile, and
// the poll covers them.
func (a *Applier) listen(ctx context.Context, wake func()) {
	const firstPause = time.Second
	pause := firstPause
	for {
		began := time.Now()
		err := a.cfg.Listener.ListenInbox(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > time.Minute {
			pause = firstPause // it was up: a new failure, not the same one
		}
		if err == nil {
			err = errors.New("the listener returned")
		}
		a.cfg.Logger.Warn("webhook applier: inbox notifications lost; polling until they are back", "err", err, "retry_in", pause)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wake() // whatever was received meanwhile
		pause = min(2*pause, 30*time.Second)
	}
}
