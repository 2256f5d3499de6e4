package reconcile

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/payrecon/payrecon/events"
)

// The outbox's operations: subscriptions, dead letters and replays, for
// the CLI and the operator pages.

// AddSubscription stores a subscription after checking it: a name, an
// absolute http(s) URL, a secret, and known event types (none: every
// type). It receives the events committed from now on. Returns an error
// wrapping ErrInvalid (a FieldError) or ErrDuplicate.
func (s *Service) AddSubscription(ctx context.Context, sub Subscription) (Subscription, error) {
	sub.Name, sub.URL = strings.TrimSpace(sub.Name), strings.TrimSpace(sub.URL)
	u, err := url.Parse(sub.URL)
	switch {
	case sub.Name == "":
		return Subscription{}, fmt.Errorf("reconcile: add subscription: %w", &FieldError{"name", "is required"})
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return Subscription{}, fmt.Errorf("reconcile: add subscription %s: %w", sub.Name, &FieldError{"url", fmt.Sprintf("%q is not an absolute http or https URL", RedactURL(sub.URL))})
	case sub.Secret == "":
		return Subscription{}, fmt.Errorf("reconcile: add subscription %s: %w", sub.Name, &FieldError{"secret", "is required"})
	}
	for _, t := range sub.Types {
		if !slices.Contains(events.Types, t) {
			return Subscription{}, fmt.Errorf("reconcile: add subscription %s: %w", sub.Name, &FieldError{"types", fmt.Sprintf("unknown event type %q", t)})
		}
	}
	var out Subscription
	err = s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.InsertSubscription(ctx, sub); err != nil {
			return err
		}
		subs, err := tx.ListSubscriptions(ctx)
		for _, x := range subs {
			if x.Name == sub.Name {
				out = x
			}
		}
		return err
	})
	if err != nil {
		return Subscription{}, fmt.Errorf("reconcile: add subscription %s: %w", sub.Name, err)
	}
	return out, nil
}

// Subscriptions returns every subscription, by name.
func (s *Service) Subscriptions(ctx context.Context) ([]Subscription, error) {
	var out []Subscription
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		out, err = tx.ListSubscriptions(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile: list subscriptions: %w", err)
	}
	return out, nil
}

// RemoveSubscription removes a subscription and its deliveries, pending
// and dead ones included. Returns an error wrapping ErrNotFound if there
// is none of that name.
func (s *Service) RemoveSubscription(ctx context.Context, name string) error {
	if err := s.store.InTx(ctx, func(tx Tx) error { return tx.DeleteSubscription(ctx, name) }); err != nil {
		return fmt.Errorf("reconcile: remove subscription %s: %w", name, err)
	}
	return nil
}

// Replay says which deliveries ReplayEvents sends again.
type Replay struct {
	// Subscription limits the replay to one subscription; empty: every
	// subscription.
	Subscription string
	// Since: the events committed at or after it. Zero: every event kept.
	Since time.Time
	// DeadOnly replays only dead deliveries (the operator pages' action);
	// otherwise done ones are sent again too, and subscriptions that
	// never had an event (added after it) get it.
	DeadOnly bool
}

// ReplayEvents makes the deliveries r names pending again, due at once
// with a new retry window: the relay sends the same events, with the
// same ids and bytes, in order per purchase. Returns how many deliveries
// it made pending. Returns an error wrapping ErrNotFound for an unknown
// subscription.
func (s *Service) ReplayEvents(ctx context.Context, r Replay) (int, error) {
	var n int
	err := s.store.InTx(ctx, func(tx Tx) error {
		if r.Subscription != "" {
			subs, err := tx.ListSubscriptions(ctx)
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(subs, func(x Subscription) bool { return x.Name == r.Subscription }) {
				return E(KindNotFound, "no subscription "+r.Subscription, nil)
			}
		}
		var err error
		n, err = tx.ReplayDeliveries(ctx, r.Subscription, r.Since, r.DeadOnly)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reconcile: replay events: %w", err)
	}
	s.cfg.Logger.Info("replayed outbox events", "subscription", r.Subscription, "since", r.Since, "dead_only", r.DeadOnly, "deliveries", n)
	return n, nil
}

// OutboxView is the outbox as an operator sees it (Service.Outbox).
type OutboxView struct {
	Stats OutboxStats
	// Subscriptions are every subscription's part of the outbox, by name;
	// their URLs are masked (RedactURL).
	Subscriptions []SubscriptionOutbox
	// Dead are dead deliveries, oldest event first.
	Dead []Delivery
}

// Outbox returns the outbox's counts, each subscription's part and up to
// limit dead deliveries (0: all), read in one transaction.
func (s *Service) Outbox(ctx context.Context, limit int) (OutboxView, error) {
	var v OutboxView
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		if v.Dead, err = tx.ListDeliveries(ctx, DeliveryDead, limit); err != nil {
			return err
		}
		if v.Subscriptions, err = tx.OutboxBySubscription(ctx); err != nil {
			return err
		}
		v.Stats, err = tx.OutboxStats(ctx)
		return err
	})
	if err != nil {
		return OutboxView{}, fmt.Errorf("reconcile: outbox: %w", err)
	}
	for i := range v.Subscriptions {
		v.Subscriptions[i].URL = RedactURL(v.Subscriptions[i].URL)
	}
	for i := range v.Dead {
		v.Dead[i].Subscription.URL = RedactURL(v.Dead[i].Subscription.URL)
		v.Dead[i].Subscription.Secret = ""
	}
	return v, nil
}

// SweepOutbox deletes, in batches, the outbox events committed more than
// retention ago whose every delivery is done, and returns how many it
// deleted. Undelivered and dead ones stay. The caller checks retention
// against the relay's retry window (cron.SweepConfig).
func (s *Service) SweepOutbox(ctx context.Context, retention time.Duration, batch int) (int, error) {
	return s.sweep(ctx, batch, func(tx Tx, before time.Time, n int) (int, error) {
		return tx.DeleteDeliveredOutboxBefore(ctx, before, n)
	}, -retention)
}
