package reconcile

import (
	"net/url"
	"strings"
	"time"

	"github.com/payrecon/payrecon/events"
)

// The transactional outbox (migrations postgres 00011, sqlite 00010):
// every change a downstream system must act on writes its event in the
// same transaction as the change (see outboxTx), and the relay (package
// reconcile/relay) sends it to every subscription that wants its type
// until a 2xx.

// OutboxEvent is an event as the outbox stores it. Every field is fixed
// when it is written; the database refuses any change to the row.
type OutboxEvent struct {
	ID            string // "evt_…" (events.NewID)
	PurchaseID    string
	RefundID      string // "" unless a refund event
	Type          events.Type
	SchemaVersion int
	// Sequence numbers the purchase's events from 1, without gaps, in the
	// order they committed.
	Sequence int64
	// Epoch is the event's epoch (events.Event.Epoch, Recovery.EventEpoch):
	// that of the latest recovery recorded when it was written. The store
	// keeps it in Payload only (sqlstore.PayloadEpoch reads it back).
	Epoch int64
	// Payload is the body of every delivery: events.Marshal of the event.
	Payload []byte
	// Digest is the event's data digest (events.Digest).
	Digest    string
	CreatedAt time.Time
}

// Subscription is an endpoint the relay delivers events to.
type Subscription struct {
	Name   string // unique; how the CLI and the operator pages name it
	URL    string // where deliveries are POSTed
	Secret string // the HMAC-SHA256 signing secret (events.Sign)
	// Types are the event types it wants; none means every type.
	Types     []events.Type
	CreatedAt time.Time
}

// Wants reports whether the subscription wants events of type t.
func (s Subscription) Wants(t events.Type) bool {
	if len(s.Types) == 0 {
		return true
	}
	for _, w := range s.Types {
		if w == t {
			return true
		}
	}
	return false
}

// DeliveryState is where one event's delivery to one subscription is.
type DeliveryState string

// The delivery states.
const (
	// DeliveryPending: not yet acknowledged; due at its next attempt.
	DeliveryPending DeliveryState = "pending"
	// DeliveryDone: the endpoint answered 2xx.
	DeliveryDone DeliveryState = "done"
	// DeliveryDead: the endpoint kept failing past the retry window, or
	// an earlier event of the same purchase is dead. An operator's
	// replay makes it pending again.
	DeliveryDead DeliveryState = "dead"
)

// Delivery is one event's delivery to one subscription, as a relay's
// claim (Tx.ClaimDeliveries) or the dead-letter list read it.
type Delivery struct {
	Subscription Subscription
	EventID      string
	PurchaseID   string
	Sequence     int64
	Type         events.Type
	Payload      []byte // the event's stored bytes
	State        DeliveryState
	// Attempts counts the claims of this delivery, this one included: the
	// Delivery-Attempt header.
	Attempts int
	// WindowFrom is when the retry window started: the event's commit, or
	// the operator's last replay of it.
	WindowFrom    time.Time
	NextAttemptAt time.Time
	LastError     string
	CreatedAt     time.Time // the event's commit
	DeliveredAt   time.Time // zero until done

	// LeaseOwner and LeaseToken fence a claim's outcome (Tx.FinishDelivery).
	LeaseOwner     string
	LeaseToken     int64
	LeaseExpiresAt time.Time
}

// SubscriptionOutbox is one subscription's part of the outbox
// (Tx.OutboxBySubscription).
type SubscriptionOutbox struct {
	Name    string
	URL     string    // as stored: mask it (RedactURL) before showing it
	Pending int       // deliveries not yet acknowledged, not dead
	Dead    int       // dead deliveries
	Oldest  time.Time // the commit of the oldest pending delivery's event; zero if none
	// NextAttempt is when the earliest pending delivery is due; zero if
	// none is pending.
	NextAttempt time.Time
	// LastError is the error of the oldest failing delivery, pending
	// ones first; "" when none has failed.
	LastError string
}

// SubscriptionHealth is how a subscription's deliveries fare.
type SubscriptionHealth string

// The subscription healths, worst last.
const (
	// SubscriptionHealthy: no pending delivery has failed, none is dead.
	SubscriptionHealthy SubscriptionHealth = "healthy"
	// SubscriptionFailing: pending deliveries failed and are retried with
	// backoff until the retry window has passed.
	SubscriptionFailing SubscriptionHealth = "failing"
	// SubscriptionDead: deliveries are dead, waiting for an operator's
	// replay (and the later events of their purchases behind them).
	SubscriptionDead SubscriptionHealth = "dead"
)

// Health is how the subscription's deliveries fare: dead if any is dead,
// failing if a pending one failed, else healthy.
func (s SubscriptionOutbox) Health() SubscriptionHealth {
	switch {
	case s.Dead > 0:
		return SubscriptionDead
	case s.Pending > 0 && s.LastError != "":
		return SubscriptionFailing
	}
	return SubscriptionHealthy
}

// OutboxStats is what the metrics read of the outbox.
type OutboxStats struct {
	Pending int       // deliveries not yet acknowledged, not dead
	Dead    int       // dead deliveries
	Oldest  time.Time // the commit of the oldest pending delivery's event; zero if none
}

// RedactURL returns raw with its secrets masked, for printing and for
// stored errors: the userinfo password and every query-parameter value
// become "****" (https://user:****@shop/x?token=****), and so does a
// fragment. The user name, host, path and parameter names stay, to tell
// endpoints apart. A raw that does not parse is masked whole after its
// scheme, since it may hold a secret anywhere.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if scheme, _, ok := strings.Cut(raw, "://"); ok {
			return scheme + "://****"
		}
		return "****"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "****")
	}
	if u.RawQuery != "" {
		var parts []string
		for p := range strings.SplitSeq(u.RawQuery, "&") {
			if name, _, hasValue := strings.Cut(p, "="); hasValue {
				p = name + "=****"
			}
			parts = append(parts, p)
		}
		u.RawQuery = strings.Join(parts, "&")
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = "****", ""
	}
	// url.Userinfo escapes the mask's stars; put them back.
	return strings.Replace(u.String(), ":%2A%2A%2A%2A@", ":****@", 1)
}

// RedactedURL is s.URL with its secrets masked (RedactURL).
func (s Subscription) RedactedURL() string { return RedactURL(s.URL) }
