// Package relay delivers the outbox: it sends the events reconcile's
// outbox holds to the shop's subscriptions, signed
// (events.NewRequestBody), at least once, in order per (subscription,
// purchase). Each round it leases a batch of deliveries
// (reconcile.Tx.ClaimDeliveries: only the first open delivery of each
// (subscription, purchase), so event n+1 waits until event n is
// acknowledged; different purchases go in parallel), POSTs them
// concurrently, and records each outcome under its lease
// (reconcile.Tx.FinishDelivery): done only after a 2xx; otherwise
// retried with exponential backoff until RetryWindow has passed since the
// event's commit (or its replay), then dead, for an operator's replay.
//
// A relay that dies between a POST and recording its 2xx leaves the
// delivery leased; when the lease expires another relay (or the same one,
// restarted) sends it again, with the same id and bytes and a higher
// Delivery-Attempt: the receiver answers the duplicate with a 2xx. Two
// relays never send the same delivery at the same time: the lease is
// exclusive, and it outlasts the POST (LeaseFor is more than Timeout).
package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/payrecon/payrecon/events"
	"github.com/payrecon/payrecon/reconcile"
)

// DeliveryOutcome is what became of one POST, for metrics.
type DeliveryOutcome string

// The outcomes of a delivery attempt.
const (
	DeliveryDelivered DeliveryOutcome = "delivered"  // a 2xx: done
	DeliveryRetry     DeliveryOutcome = "retry"      // failed; retried later
	DeliveryDied      DeliveryOutcome = "dead"       // failed past the window, or refused for good (409)
	DeliveryLeaseLost DeliveryOutcome = "lease_lost" // the outcome could not be recorded: the lease was gone
)

// DeliveryOutcomes lists the outcomes, for metrics.
var DeliveryOutcomes = []DeliveryOutcome{DeliveryDelivered, DeliveryRetry, DeliveryDied, DeliveryLeaseLost}

// Observer is told of each delivery attempt, for metrics. It must be
// safe for concurrent use and must not block.
type Observer interface {
	OutboxDelivery(outcome DeliveryOutcome, sinceCommit time.Duration)
}

// Config configures a Relay. The zero value of each field is its
// documented default.
type Config struct {
	// Owner names this relay's leases. Default "relay".
	Owner string
	// Client sends the POSTs. Default: an http.Client with Timeout that
	// keeps Batch idle connections per endpoint.
	Client *http.Client
	// Timeout bounds one POST. Default 10s.
	Timeout time.Duration
	// LeaseFor is how long a claim holds a delivery; it must exceed
	// Timeout, so that a POST ends before another relay may take its
	// delivery over. Default 6 × Timeout.
	LeaseFor time.Duration
	// Batch is how many deliveries one round claims and sends
	// concurrently. Default 32.
	Batch int
	// RetryWindow is how long a failing delivery is retried, from its
	// event's commit (or its last replay), before it is dead. Default 72h
	// (3 days).
	RetryWindow time.Duration
	// MinBackoff and MaxBackoff bound the wait before a retry: MinBackoff
	// after the first failure, doubling each time, at most MaxBackoff.
	// Defaults 1s and 1h.
	MinBackoff, MaxBackoff time.Duration
	// Idle is how long Run waits when a round found nothing due. Default
	// 1s.
	Idle time.Duration
	// Wait waits for d or until ctx ends (Run's idle wait). Default: a
	// timer. Tests inject their own.
	Wait func(ctx context.Context, d time.Duration) error
	// Observer is told of each attempt. Default: nobody.
	Observer Observer
	// Logger logs failures and dead letters. Default slog.Default().
	Logger *slog.Logger
}

// DefaultRetryWindow is Config.RetryWindow's default.
const DefaultRetryWindow = 72 * time.Hour

func (c Config) withDefaults() (Config, error) {
	if c.Owner == "" {
		c.Owner = "relay"
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.LeaseFor == 0 {
		c.LeaseFor = 6 * c.Timeout
	}
	if c.Batch == 0 {
		c.Batch = 32
	}
	if c.Client == nil {
		// Keep a connection per concurrent POST to each endpoint.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = c.Batch
		c.Client = &http.Client{Timeout: c.Timeout, Transport: tr}
	}
	if c.RetryWindow == 0 {
		c.RetryWindow = DefaultRetryWindow
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = time.Second
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = time.Hour
	}
	if c.Idle == 0 {
		c.Idle = time.Second
	}
	if c.Wait == nil {
		c.Wait = func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.Timeout < 0 || c.LeaseFor <= c.Timeout:
		return c, fmt.Errorf("reconcile: relay: lease %s must exceed the POST timeout %s", c.LeaseFor, c.Timeout)
	case c.Batch < 0:
		return c, fmt.Errorf("reconcile: relay: batch %d", c.Batch)
	case c.RetryWindow < 0 || c.MinBackoff < 0 || c.MaxBackoff < c.MinBackoff:
		return c, fmt.Errorf("reconcile: relay: retry window %s, backoff %s to %s", c.RetryWindow, c.MinBackoff, c.MaxBackoff)
	}
	return c, nil
}

// Relay delivers the outbox. Several relays (in several processes) may
// run over one store. Safe for concurrent use.
type Relay struct {
	store reconcile.Store
	cfg   Config

	mu      sync.Mutex
	failing map[string]bool // subscriptions whose last attempts failed, to log changes only
}

// New returns a relay over store. It returns an error if cfg is
// invalid.
func New(store reconcile.Store, cfg Config) (*Relay, error) {
	if store == nil {
		return nil, errors.New("reconcile: relay: nil store")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Relay{store: store, cfg: cfg, failing: map[string]bool{}}, nil
}

// Run delivers until ctx ends, then returns ctx's error. A round's error
// is logged and the round retried after Idle.
func (r *Relay) Run(ctx context.Context) error {
	for {
		n, err := r.RunOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			r.cfg.Logger.Error("outbox relay round failed", "err", err)
		}
		if n == 0 || err != nil {
			if err := r.cfg.Wait(ctx, r.cfg.Idle); err != nil {
				return err
			}
		}
	}
}

// RunOnce claims up to Batch due deliveries, sends them concurrently,
// records their outcomes together in one transaction once every POST has
// ended (one write for the round, not one per delivery: SQLite has a
// single writer), and returns how many it claimed. An outcome it could not
// record (the lease was lost, or ctx ended: not an error) leaves the
// delivery to be sent again once its lease expires.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	var claimed []reconcile.Delivery
	err := r.store.InTx(ctx, func(tx reconcile.Tx) error {
		var err error
		claimed, err = tx.ClaimDeliveries(ctx, r.cfg.Owner, r.cfg.Batch, r.cfg.LeaseFor)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reconcile: relay: claim: %w", err)
	}
	if len(claimed) == 0 {
		return 0, nil
	}
	results := make([]result, len(claimed))
	var wg sync.WaitGroup
	for i, d := range claimed {
		wg.Go(func() { results[i] = r.send(ctx, d) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		// Stopped mid-round: record nothing; the leases expire and the
		// deliveries are sent again.
		return len(claimed), nil
	}
	now, err := r.store.Now(ctx)
	if err != nil {
		return len(claimed), fmt.Errorf("reconcile: relay: %w", err)
	}
	for i := range results {
		r.judge(&results[i], claimed[i], now)
	}
	err = r.store.InTx(ctx, func(tx reconcile.Tx) error {
		for i, d := range claimed {
			res := &results[i]
			res.lost = false
			err := tx.FinishDelivery(ctx, d, res.state, res.next, res.why)
			switch {
			case errors.Is(err, reconcile.ErrLeaseLost):
				res.lost = true
			case err != nil:
				return err
			}
		}
		return nil
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return len(claimed), nil
	case err != nil:
		return len(claimed), fmt.Errorf("reconcile: relay: record %d deliveries: %w", len(claimed), err)
	}
	r.logTransitions(claimed, results)
	for i, d := range claimed {
		res := results[i]
		if res.lost {
			res.outcome = DeliveryLeaseLost
		}
		if r.cfg.Observer != nil {
			r.cfg.Observer.OutboxDelivery(res.outcome, now.Sub(d.CreatedAt))
		}
		if res.outcome == DeliveryDied {
			r.cfg.Logger.Warn("outbox delivery dead: replay it from the operator pages once the endpoint is fixed",
				"subscription", d.Subscription.Name, "event", d.EventID, "purchase", d.PurchaseID, "sequence", d.Sequence, "why", res.why)
		}
	}
	return len(claimed), nil
}

// logTransitions logs each subscription of a recorded round that starts
// failing (a warning, with the masked URL, the error and the next
// attempt) or recovers (its deliveries of the round all got a 2xx after a
// failure): once per change, not once per retry. The state is this
// relay's, in memory: a restarted relay warns again at its first failure.
func (r *Relay) logTransitions(claimed []reconcile.Delivery, results []result) {
	type round struct {
		sub    reconcile.Subscription
		failed *result
		ok     bool
	}
	var order []string
	rounds := map[string]*round{}
	for i, d := range claimed {
		res := &results[i]
		if res.lost {
			continue
		}
		rd := rounds[d.Subscription.Name]
		if rd == nil {
			rd = &round{sub: d.Subscription}
			rounds[d.Subscription.Name] = rd
			order = append(order, d.Subscription.Name)
		}
		switch {
		case res.outcome == DeliveryDelivered:
			rd.ok = true
		case rd.failed == nil:
			rd.failed = res
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, name := range order {
		rd := rounds[name]
		switch {
		case rd.failed != nil && !r.failing[name]:
			r.failing[name] = true
			attrs := []any{"subscription", name, "url", rd.sub.RedactedURL(), "err", rd.failed.why}
			if !rd.failed.next.IsZero() {
				attrs = append(attrs, "next_attempt", rd.failed.next)
			}
			r.cfg.Logger.Warn("outbox subscription failing: its deliveries are retried with backoff (see /ops/outbox)", attrs...)
		case rd.failed == nil && rd.ok && r.failing[name]:
			delete(r.failing, name)
			r.cfg.Logger.Info("outbox subscription recovered: its deliveries succeed again", "subscription", name, "url", rd.sub.RedactedURL())
		}
	}
}

// result is one POST's answer and what the relay makes of it.
type result struct {
	status  int
	err     error
	state   reconcile.DeliveryState
	next    time.Time
	why     string
	outcome DeliveryOutcome
	lost    bool // the lease was gone when the outcome was recorded
}

// send POSTs d once, signed at the store's now.
func (r *Relay) send(ctx context.Context, d reconcile.Delivery) result {
	now, err := r.store.Now(ctx)
	if err != nil {
		return result{err: err}
	}
	req, err := events.NewRequestBody(ctx, d.Subscription.URL, []string{d.Subscription.Secret}, d.EventID, d.Payload, d.Attempts, now)
	if err != nil {
		return result{err: err}
	}
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		return result{err: err}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return result{status: resp.StatusCode}
}

// judge decides what becomes of a POST's delivery at now: done after a
// 2xx; dead after a 409 (the receiver refuses the event for good) or once
// the retry window has passed; else retried after the backoff.
func (r *Relay) judge(res *result, d reconcile.Delivery, now time.Time) {
	if res.err == nil && res.status >= 200 && res.status < 300 {
		res.state, res.outcome = reconcile.DeliveryDone, DeliveryDelivered
		return
	}
	res.why = fmt.Sprintf("attempt %d: HTTP %d", d.Attempts, res.status)
	if res.err != nil {
		res.why = fmt.Sprintf("attempt %d: %s", d.Attempts, redactError(res.err, d.Subscription.URL))
	}
	switch {
	case res.status == http.StatusConflict:
		res.state, res.outcome = reconcile.DeliveryDead, DeliveryDied
		res.why += " (refused for good)"
	case now.Sub(d.WindowFrom) >= r.cfg.RetryWindow:
		res.state, res.outcome = reconcile.DeliveryDead, DeliveryDied
		res.why += fmt.Sprintf(" (failing for %s, past the retry window)", now.Sub(d.WindowFrom).Truncate(time.Second))
	default:
		res.state, res.outcome, res.next = reconcile.DeliveryPending, DeliveryRetry, now.Add(r.backoff(d.Attempts))
	}
}

// redactError is err's text with the secrets of the subscription's URL
// masked (reconcile.RedactURL): a *url.Error from net/http names the
// full URL, query token included, and last_error is shown to operators.
func redactError(err error, subscriptionURL string) string {
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) && ue.URL != "" {
		msg = strings.ReplaceAll(msg, ue.URL, reconcile.RedactURL(ue.URL))
	}
	if subscriptionURL != "" {
		msg = strings.ReplaceAll(msg, subscriptionURL, reconcile.RedactURL(subscriptionURL))
	}
	return msg
}

// backoff is the wait after the attempts-th failure: MinBackoff doubled
// per earlier failure, at most MaxBackoff.
func (r *Relay) backoff(attempts int) time.Duration {
	d := r.cfg.MinBackoff
	for i := 1; i < attempts && d < r.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, r.cfg.MaxBackoff)
}
