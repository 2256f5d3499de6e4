package reconcile

import (
	"context"
	"time"

	"github.com/payrecon/payrecon/events"
)

// OutboxStore is the part of Tx that writes the events a shop must act
// on with the changes they report, and leases their deliveries to the
// shops' subscriptions. The stores' outbox.go implement it.
type OutboxStore interface {
	// AppendOutbox writes es to the outbox, and a pending delivery of
	// each to every subscription that wants its type, in this
	// transaction, all or none. Each event must have its ID, Type,
	// PurchaseID, CreatedAt and Data (with its Digest,
	// events.Event.SetData) set; its Sequence, Epoch and SchemaVersion
	// are the store's: the next sequence number of its purchase (1 for
	// the first; events of one purchase in one call are numbered in their
	// order; numbers are taken in a row the transaction holds until it
	// ends, so they follow the commit order and a rollback leaves no
	// gap), the epoch of the latest recovery recorded (EventEpochOf; 0
	// when none is) and events.SchemaVersion. Returns the stored events,
	// in es's order, each with its Payload events.Marshal of it. Returns
	// ErrDuplicate if an id exists and ErrInvalid if an event is not
	// valid; either way nothing is written, no sequence number is taken,
	// and the transaction stays usable.
	AppendOutbox(ctx context.Context, es ...events.Event) ([]OutboxEvent, error)
	// ListOutbox returns a purchase's events, in sequence order.
	ListOutbox(ctx context.Context, purchaseID string) ([]OutboxEvent, error)

	// InsertSubscription stores a subscription, created at the store's
	// now (its CreatedAt is ignored). Returns ErrDuplicate if its name
	// exists and ErrInvalid if its name, URL or secret is empty. It
	// receives the events committed after it, not earlier ones
	// (ReplayDeliveries sends those).
	InsertSubscription(ctx context.Context, s Subscription) error
	// ListSubscriptions returns every subscription, by name.
	ListSubscriptions(ctx context.Context) ([]Subscription, error)
	// DeleteSubscription removes a subscription and its deliveries.
	// Returns ErrNotFound if there is none of that name.
	DeleteSubscription(ctx context.Context, name string) error

	// ClaimDeliveries leases up to limit pending deliveries that are due
	// (next attempt at or before the store's now, not leased or lease
	// expired) and first of their (subscription, purchase): no earlier
	// event of the same purchase for the same subscription is pending or
	// dead, so event n+1 is never claimed before event n is acknowledged.
	// Each gets a new fencing token, owner, the store's now+leaseFor as
	// its expiry, and one more attempt. Concurrent callers never receive
	// the same delivery. Oldest due first.
	ClaimDeliveries(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]Delivery, error)
	// FinishDelivery records a claim's outcome, if d's lease (its owner
	// and token) is still the delivery's: DeliveryDone (delivered at the
	// store's now), DeliveryPending (to retry at nextAttempt, with
	// lastError) or DeliveryDead (with lastError; the later pending
	// deliveries of its (subscription, purchase) die with it, since they
	// may not overtake it). Returns ErrLeaseLost otherwise.
	FinishDelivery(ctx context.Context, d Delivery, state DeliveryState, nextAttempt time.Time, lastError string) error
	// ListDeliveries returns up to limit deliveries in state, oldest event
	// first (limit 0: no cap).
	ListDeliveries(ctx context.Context, state DeliveryState, limit int) ([]Delivery, error)
	// ReplayDeliveries makes pending again, due at once with a new retry
	// window from the store's now, the deliveries of the events committed
	// at or after since, done or dead (not leased pending ones), to
	// subscription (every subscription when empty), and writes the
	// missing deliveries of those events to subscriptions that want them
	// (one added since). The same events are sent, with the same ids and
	// bytes. With deadOnly, only dead deliveries are replayed. Returns how
	// many deliveries it made pending.
	ReplayDeliveries(ctx context.Context, subscription string, since time.Time, deadOnly bool) (int, error)
	// OutboxStats counts the pending and dead deliveries and finds the
	// oldest pending one.
	OutboxStats(ctx context.Context) (OutboxStats, error)
	// OutboxBySubscription returns, for every subscription, by name, its
	// pending and dead counts, the commit of its oldest pending delivery's
	// event, its earliest next attempt, and the last error of its oldest
	// failing delivery (pending ones first): what an operator needs to
	// see which endpoint fails and why.
	OutboxBySubscription(ctx context.Context) ([]SubscriptionOutbox, error)
	// DeleteDeliveredOutboxBefore deletes up to limit events committed
	// before the given time whose every delivery is done (events no
	// subscription wanted included), with their deliveries, and returns
	// how many events it deleted. The purchases' sequence numbers carry
	// on: a later AppendOutbox never reuses one.
	DeleteDeliveredOutboxBefore(ctx context.Context, before time.Time, limit int) (int, error)
}
