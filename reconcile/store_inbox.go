package reconcile

import (
	"context"
	"time"
)

// InboxListener is implemented by a store that can tell the appliers of
// every process that events were received (PostgreSQL: LISTEN/NOTIFY on
// the inbox's inserts).
type InboxListener interface {
	// ListenInbox calls wake, from its own goroutine, each time a
	// transaction that stored pending events committed, until ctx ends
	// (nil) or the connection fails (its error). Notifications may be
	// folded together: one wake can stand for many events.
	ListenInbox(ctx context.Context, wake func()) error
}

// InboxStore is the part of Tx that stores the provider's events as they
// arrive, deduplicated by their key, and records what became of each.
// The stores' inbox.go implement it.
type InboxStore interface {
	// InsertInboxEvent stores a provider event unless one with the same
	// (Provider, EventID) exists, and reports whether it stored it. It never
	// reads before writing: the unique key decides, and a concurrent insert
	// of the same key waits for the other transaction and then reports
	// false (or true, if that one rolled back). A nil or empty payload is
	// stored empty and read back as nil. An empty Provider or EventID, or
	// a zero ReceivedAt, is refused with ErrInvalid.
	InsertInboxEvent(ctx context.Context, e InboxEvent) (inserted bool, err error)
	// InsertInboxEvents is InsertInboxEvent for a batch, in one
	// statement where the store can: inserted[i] reports whether events[i]
	// was stored. A later member with the key of an earlier one is not
	// stored (as if inserted after it: a duplicate). On an error nothing
	// of the batch is stored and the transaction stays usable.
	InsertInboxEvents(ctx context.Context, events []InboxEvent) (inserted []bool, err error)
	// ReceiveInboxEvents is InsertInboxEvents for events received now:
	// each one's ReceivedAt is ignored, and the stored events have the
	// store's clock at this statement (what Now would return), which it
	// returns. It spares the round trip of a Now before the insert.
	ReceiveInboxEvents(ctx context.Context, events []InboxEvent) (inserted []bool, now time.Time, err error)
	// GetInboxEvent returns the stored event, or ErrNotFound.
	GetInboxEvent(ctx context.Context, provider, eventID string) (InboxEvent, error)
	// UpdateInboxEvent records what became of an event: its matched
	// purchase (empty if none yet: an empty purchaseID clears it), its
	// outcome and when it was processed. Returns ErrNotFound if there is
	// no such event.
	UpdateInboxEvent(ctx context.Context, provider, eventID, purchaseID string, outcome EventOutcome, processedAt time.Time) error
	// UpdateInboxEvents is UpdateInboxEvent for a batch of distinct
	// events, in one statement where the store can. Returns ErrNotFound,
	// and writes nothing, if one of them does not exist; the transaction
	// stays usable.
	UpdateInboxEvents(ctx context.Context, updates []InboxUpdate) error
	// ListInboxEvents returns the events matched to a purchase (as stored
	// at insert or by UpdateInboxEvent), oldest received first, then by
	// provider and event id.
	ListInboxEvents(ctx context.Context, purchaseID string) ([]InboxEvent, error)
	// ListUnmatchedEvents returns up to limit events whose outcome is
	// unmatched, least recently tried first: never-processed events, then
	// by processed_at (which UpdateInboxEvent sets on every retry),
	// received_at, provider and event id. Retrying a batch and recording
	// the retry thus moves it behind the rest, so that events that never
	// match cannot starve newer ones. limit must be positive (ErrInvalid
	// otherwise).
	ListUnmatchedEvents(ctx context.Context, limit int) ([]InboxEvent, error)
	// ClaimPendingEvents returns up to limit pending events due at now (no
	// RetryAt, or one not after now), oldest received first, then by
	// provider and event id, and holds them until the transaction ends:
	// a concurrent claim skips them rather than wait (FOR UPDATE SKIP
	// LOCKED where the store has it; SQLite's single writer otherwise).
	// limit must be positive (ErrInvalid otherwise).
	ClaimPendingEvents(ctx context.Context, now time.Time, limit int) ([]InboxEvent, error)
	// ClaimInboxEvent is ClaimPendingEvents for one event, due or not:
	// it returns the event held, or ErrNotFound when it is not pending
	// or another transaction holds it.
	ClaimInboxEvent(ctx context.Context, provider, eventID string) (InboxEvent, error)
	// RecordInboxFailure records a failed try at applying a pending
	// event: its attempts, its error, when it was tried, and either when
	// it is due again (outcome EventPending) or that it waits for an
	// operator (outcome EventFailed, retryAt ignored). Returns ErrNotFound
	// if there is no such event.
	RecordInboxFailure(ctx context.Context, f InboxFailure) error
	// InboxBacklog counts the pending events, those of them that wait out
	// a retry, and the failed ones, and finds when the oldest pending one
	// was received.
	InboxBacklog(ctx context.Context) (InboxBacklog, error)
	// ListFailedEvents returns up to limit failed events, most recently
	// failed first. limit must be positive (ErrInvalid otherwise).
	ListFailedEvents(ctx context.Context, limit int) ([]InboxEvent, error)
	// DeleteInboxEventsBefore deletes up to limit events received strictly
	// before the given time, oldest first, and returns how many it
	// deleted. Pending and failed events are never deleted: they are not
	// applied yet. limit must be positive (ErrInvalid otherwise).
	DeleteInboxEventsBefore(ctx context.Context, before time.Time, limit int) (int, error)
}
