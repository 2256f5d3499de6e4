package reconcile

import (
	"context"
	"time"

	"github.com/payrecon/payrecon/events"

	"github.com/payrecon/payrecon/statemachine"
)

// Store is the persistence payrecon's protocol needs. reconcile/postgres
// and reconcile/sqlite implement it; internal/testing/storetest is the
// suite both must pass unchanged.
//
// Implementations must be safe for concurrent use, translate driver errors
// into this package's errors (wrapped with %w), and enforce the transition
// table in the database itself, so that no SQL path can write a forbidden
// move.
type Store interface {
	// InTx runs fn in one transaction, committing if fn returns nil and
	// rolling back otherwise. fn must use only the Tx it is given, and may
	// be called more than once if the database asks for a retry
	// (serialization failures), so it must not have side effects outside
	// the transaction.
	InTx(ctx context.Context, fn func(Tx) error) error

	// Now returns the store's clock: the database server's clock by
	// default, the one clock every worker and replica shares, so that a
	// worker whose own clock is off changes no decision. Tests and the demo
	// inject a clock into the store instead (its Config.Now).
	Now(ctx context.Context) (time.Time, error)

	// ClaimJobs leases up to limit jobs that are due (run_at <= now and not
	// leased) or whose lease expired (lease_expires_at <= now), now being
	// the store's clock, giving each a new fencing token greater than any
	// before it, owner as its owner and now+leaseFor as its expiry.
	// Concurrent callers never receive the same job. Jobs whose lease
	// expired are taken first (their purchases may be mid-call), then due
	// jobs oldest run_at first; the leases come back in run_at order.
	// Each Lease's Now is the store's time of the claim, and its Purchase
	// the purchase as the claim read it.
	ClaimJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]Lease, error)

	// ClaimExpiredJobs is ClaimJobs restricted to jobs whose lease expired
	// without being released (their worker died or stalled). The rescue
	// sweep uses it to move such purchases on promptly.
	ClaimExpiredJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]Lease, error)

	// ClaimJobs and ClaimExpiredJobs return jobs of both kinds, in one
	// order (run_at, then job id), each Lease with its Kind set; a
	// JobRefund's Lease carries its Refund as the claim read it, and the
	// purchase it belongs to as PurchaseID and Purchase.
	//
	// ClaimJob leases the purchase job of purchaseID (never one of its
	// refunds' jobs), whether due or not, if it is not done and not leased
	// (or its lease expired), with a new fencing token as ClaimJobs does.
	// For an operator's recheck. Returns ErrConflict if another owner
	// holds an unexpired lease or the job is done, ErrNotFound if there is
	// no such job.
	ClaimJob(ctx context.Context, purchaseID, owner string, leaseFor time.Duration) (Lease, error)

	// ReleaseLeases gives up every lease owner holds, making those jobs due
	// at the store's now. Used on shutdown so that another worker picks
	// them up at once. Returns how many were released.
	ReleaseLeases(ctx context.Context, owner string) (int, error)

	// Ready returns nil when the database is reachable and migrated to the
	// version this binary expects; ErrNotMigrated when it is not.
	Ready(ctx context.Context) error

	// Close releases the store's connections.
	Close() error
}

// Tx is the set of operations available inside one transaction. Reads see
// the transaction's own writes. A refused write (ErrDuplicate, ErrConflict,
// ErrForbiddenTransition, ...) leaves the transaction usable: the caller
// may read on and decide. Times round-trip exactly to the microsecond, in
// UTC; a zero time.Time is stored as NULL.
type Tx interface {
	// Now returns the store's clock (see Store.Now).
	Now(ctx context.Context) (time.Time, error)

	// Savepoint runs fn under a savepoint of its own, nested in the
	// transaction (and in any savepoint around it). fn must use only the
	// Tx it is given. If fn returns nil, its writes stay in the
	// transaction, to commit with it. If fn returns an error, everything
	// fn wrote is rolled back to the savepoint, the transaction stays
	// usable (its writes before and after fn commit as usual), and
	// Savepoint returns fn's error unchanged. Any other error (the
	// savepoint could not be set, released or rolled back to, e.g. the
	// connection was lost) means the transaction is unusable: its caller
	// must end it with an error.
	Savepoint(ctx context.Context, fn func(Tx) error) error

	// InsertPurchase stores a new purchase. Returns ErrDuplicate if its id,
	// or its (customer, reference) when reference is set, exists, and
	// ErrForbiddenTransition if its state is not created.
	InsertPurchase(ctx context.Context, p Purchase) error

	// GetPurchase returns the purchase with id, or ErrNotFound.
	GetPurchase(ctx context.Context, id string) (Purchase, error)

	// FindPurchases returns, in one read, the purchases whose id is in
	// ids or whose provider payment id is in paymentIDs, each once, in no
	// particular order; unknown ids and empty strings find nothing. A
	// batch of answers reads what its judge needs with it.
	FindPurchases(ctx context.Context, ids, paymentIDs []string) ([]Purchase, error)

	// ApplyMoves writes a batch of fenced moves set-based (a statement
	// per table, not per move) and reports which it applied. A move
	// applies only if its lease is still the job's current one, unexpired
	// by the store's clock, and its purchase is still at From's state and
	// version; a move that does not match writes nothing, and the others
	// are unaffected. A move without a lease (Move.Leaseless: a
	// webhook's) is fenced by its purchase's state and version alone,
	// takes no lock on the job and must leave it alone (JobKeep; a job
	// action is refused with ErrInvalid): a worker holding the job's
	// lease meanwhile finds the purchase moved on, as after any
	// UpdatePurchase. Moves must name distinct purchases. The database
	// guards still hold: if any move is refused (ErrForbiddenTransition,
	// ErrDuplicate for a payment id another purchase holds, ...), the
	// call writes nothing and returns that error, and the transaction
	// stays usable; the caller then writes the moves one by one.
	ApplyMoves(ctx context.Context, moves []Move) (applied []bool, err error)

	// FindPurchaseByPaymentID returns the purchase whose provider payment id
	// is paymentID, or ErrNotFound.
	FindPurchaseByPaymentID(ctx context.Context, paymentID string) (Purchase, error)

	// UpdatePurchase writes p (state, provider fields, escalation,
	// updated_at) if the stored row is still in state from at version
	// p.Version; it stores version p.Version+1. Returns ErrConflict if the
	// row moved on, ErrNotFound if there is no such row, and
	// ErrForbiddenTransition if the database refuses from → p.State, and
	// ErrDuplicate if p's provider payment id belongs to another purchase.
	UpdatePurchase(ctx context.Context, p Purchase, from statemachine.State) error

	// InsertTransition appends to the transition audit: a purchase's move,
	// or a refund's when r.RefundID is set.
	InsertTransition(ctx context.Context, r TransitionRecord) error
	// ListTransitions returns a purchase's own transitions (not its
	// refunds'), oldest first.
	ListTransitions(ctx context.Context, purchaseID string) ([]TransitionRecord, error)
	// ListRefundTransitions returns a refund's transitions, oldest first.
	ListRefundTransitions(ctx context.Context, refundID string) ([]TransitionRecord, error)

	// InsertAttempt appends to the provider call audit: a call about the
	// purchase's charge, or about a refund when a.RefundID is set.
	InsertAttempt(ctx context.Context, a Attempt) error
	// ListAttempts returns the provider calls about a purchase's own
	// charge (not its refunds), oldest first.
	ListAttempts(ctx context.Context, purchaseID string) ([]Attempt, error)
	// ListRefundAttempts returns a refund's provider calls, oldest first.
	ListRefundAttempts(ctx context.Context, refundID string) ([]Attempt, error)

	// InsertJob creates a job, due at job.RunAt: a purchase's (Kind
	// JobPurchase or empty) or a refund's (JobRefund, with RefundID and
	// its PurchaseID). Returns ErrDuplicate if a job with its id exists,
	// ErrNotFound if its purchase does not exist or its refund is not
	// one of that purchase's, and ErrInvalid for another kind, a refund's
	// job without its RefundID, or a purchase's job naming a refund.
	//
	// The job methods below take a job id: the purchase id of a
	// purchase's job, the refund id of a refund's (ids are distinct by
	// their prefixes).
	InsertJob(ctx context.Context, job Job) error
	// GetJob returns the job with id jobID, its Kind set, or ErrNotFound.
	GetJob(ctx context.Context, jobID string) (Job, error)

	// CheckLease returns nil if l is still its job's current lease (same
	// owner and token) and unexpired by the store's clock, and locks the
	// job row for the rest of the transaction so that no claim can take it
	// over before commit. Returns ErrLeaseLost otherwise.
	CheckLease(ctx context.Context, l Lease) error

	// RescheduleJob releases the job's lease and makes it due at runAt.
	// Call it after CheckLease (or for a job not leased).
	RescheduleJob(ctx context.Context, jobID string, runAt time.Time) error

	// CompleteJob releases the job's lease and marks it done at now; a done
	// job is never claimed again, unless reopened.
	CompleteJob(ctx context.Context, jobID string, now time.Time) error

	// ReopenJob makes a job due at runAt again, done or not, without
	// touching a live lease (a leased job keeps its lease and gets runAt
	// for its next run). For a settled purchase whose final state a newer
	// provider answer puts in doubt. Returns ErrNotFound if there is no
	// such job.
	ReopenJob(ctx context.Context, jobID string, runAt time.Time) error

	// InsertRefund stores a new refund in state created, with its
	// provider key, request and hash. The database refuses, and the
	// transaction stays usable:
	//   - ErrDuplicate if its id or its provider key exists;
	//   - ErrForbiddenTransition if its state is not created;
	//   - ErrNotFound if its purchase does not exist;
	//   - ErrInvalid if its provider key, request or hash is missing, or
	//     its amount is not positive;
	//   - ErrNotRefundable if r.FindingID is 0 and its purchase is not
	//     succeeded or r.PaymentID is not the purchase's payment id, or
	//     if r.FindingID names no finding of r.PaymentID for r.PurchaseID
	//     (or names a finding about a refund, FindingOrphanRefund or
	//     FindingRefundMismatch, whose PaymentID is no payment);
	//   - ErrRefundExceeds if the refunds of r.PaymentID not failed,
	//     pending ones included, would add up to more than the payment's
	//     amount (the purchase's amount for its own payment, the
	//     finding's amount for a finding's payment). Concurrent inserts
	//     for one payment are serialized, so two that together exceed it
	//     cannot both commit.
	InsertRefund(ctx context.Context, r Refund) error
	// GetRefund returns the refund with id, or ErrNotFound.
	GetRefund(ctx context.Context, id string) (Refund, error)
	// ListRefunds returns a purchase's refunds, oldest first.
	ListRefunds(ctx context.Context, purchaseID string) ([]Refund, error)
	// FindRefunds returns, in one read, the refunds whose id is in ids or
	// whose provider refund id is in providerIDs, each once, in no
	// particular order; unknown ids and empty strings find nothing.
	FindRefunds(ctx context.Context, ids, providerIDs []string) ([]Refund, error)
	// UpdateRefund writes r (state, provider refund id, failure reason,
	// times, escalation) if the stored row is still in state from at
	// version r.Version; it stores version r.Version+1. Amount, payment,
	// key and request never change. Returns ErrConflict if the row moved
	// on, ErrNotFound if there is no such row, ErrForbiddenTransition if
	// statemachine.Refund refuses from → r.State, and ErrDuplicate if r's
	// provider refund id belongs to another refund.
	UpdateRefund(ctx context.Context, r Refund, from statemachine.State) error
	// ListEscalatedRefunds returns the refunds on the operator list,
	// oldest escalation first.
	ListEscalatedRefunds(ctx context.Context) ([]Refund, error)
	// ListOverdueUncertainRefunds returns up to limit refunds in state
	// uncertain, not escalated, uncertain since before the given time,
	// oldest first.
	ListOverdueUncertainRefunds(ctx context.Context, uncertainBefore time.Time, limit int) ([]Refund, error)
	// CountRefundsByState returns how many refunds are in each state;
	// every statemachine.Refund state is present, 0 when it has none.
	CountRefundsByState(ctx context.Context) (map[statemachine.State]int, error)
	// OldestUncertainRefundSince returns the earliest UncertainSince of
	// the refunds now uncertain or reconciling, or the zero time.
	OldestUncertainRefundSince(ctx context.Context) (time.Time, error)

	// ListEscalated returns the purchases on the operator list, oldest
	// escalation first.
	ListEscalated(ctx context.Context) ([]Purchase, error)

	// CountByState returns how many purchases are in each state; every
	// state is present, with 0 when it has none.
	CountByState(ctx context.Context) (map[statemachine.State]int, error)

	// CountEscalated returns how many purchases are on the operator list.
	CountEscalated(ctx context.Context) (int, error)

	// OldestUncertainSince returns the earliest UncertainSince of the
	// purchases now in uncertain or reconciling, or the zero time if there
	// are none.
	OldestUncertainSince(ctx context.Context) (time.Time, error)

	// ListOverdueUncertain returns up to limit purchases in state uncertain,
	// not escalated, that became uncertain before the given time, oldest
	// first.
	ListOverdueUncertain(ctx context.Context, uncertainBefore time.Time, limit int) ([]Purchase, error)

	// ListSubmittedBetween returns the purchases in state whose first
	// attempt (FirstAttemptAt) falls in [from, until) and whose provider
	// payment id is not one of listed (a purchase with none is returned),
	// oldest first. The audit uses it to find succeeded purchases whose
	// payment the provider does not list: it passes the ones the provider
	// listed, so that the store returns only the few it did not, not
	// every purchase of the window.
	ListSubmittedBetween(ctx context.Context, from, until time.Time, state statemachine.State, listed []string) ([]Purchase, error)

	// ListSucceededWithoutPayment returns the succeeded purchases that hold
	// no provider payment id and whose SettledAt falls in [from, until),
	// oldest SettledAt first (then by id). The books say such a purchase
	// took the money yet name no payment: the audit asks the provider for
	// one in the chunk that holds the settlement.
	ListSucceededWithoutPayment(ctx context.Context, from, until time.Time) ([]Purchase, error)

	// FindPurchaseByReference returns the customer's purchase with that
	// reference, or ErrNotFound.
	FindPurchaseByReference(ctx context.Context, customer, reference string) (Purchase, error)

	// InsertInboxEvent stores a provider event unless one with the same
	// (Provider, EventID) exists, and reports whether it stored it. It never
	// reads before writing: the unique key decides, and a concurrent insert
	// of the same key waits for the other transaction and then reports
	// false (or true, if that one rolled back).
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
	// purchase (empty if none yet), its outcome and when it was processed.
	// Returns ErrNotFound if there is no such event.
	UpdateInboxEvent(ctx context.Context, provider, eventID, purchaseID string, outcome EventOutcome, processedAt time.Time) error
	// UpdateInboxEvents is UpdateInboxEvent for a batch of distinct
	// events, in one statement where the store can. Returns ErrNotFound,
	// and writes nothing, if one of them does not exist.
	UpdateInboxEvents(ctx context.Context, updates []InboxUpdate) error
	// ListInboxEvents returns the events matched to a purchase, oldest
	// received first.
	ListInboxEvents(ctx context.Context, purchaseID string) ([]InboxEvent, error)
	// ListUnmatchedEvents returns up to limit events whose outcome is
	// unmatched, least recently tried first: never-processed events, then
	// by processed_at (which UpdateInboxEvent sets on every retry),
	// received_at, provider and event id. Retrying a batch and recording
	// the retry thus moves it behind the rest, so that events that never
	// match cannot starve newer ones.
	ListUnmatchedEvents(ctx context.Context, limit int) ([]InboxEvent, error)
	// DeleteInboxEventsBefore deletes up to limit events received before
	// the given time and returns how many it deleted.
	DeleteInboxEventsBefore(ctx context.Context, before time.Time, limit int) (int, error)

	// InsertIdempotencyKey stores a client's key with its request hash
	// unless the (Client, Key) pair exists, and reports whether it stored
	// it. Like InsertInboxEvent it never reads first, and a concurrent
	// insert of the same pair waits for the other transaction.
	InsertIdempotencyKey(ctx context.Context, k IdempotencyKey) (inserted bool, err error)
	// GetIdempotencyKey returns the stored key, or ErrNotFound.
	GetIdempotencyKey(ctx context.Context, client, key string) (IdempotencyKey, error)
	// SaveIdempotencyResponse stores the response to replay for a key.
	// Returns ErrNotFound if there is no such key.
	SaveIdempotencyResponse(ctx context.Context, client, key string, statusCode int, body []byte, purchaseID string) error
	// DeleteIdempotencyKeysBefore deletes up to limit keys created before
	// the given time and returns how many it deleted. Purchases are never
	// touched.
	DeleteIdempotencyKeysBefore(ctx context.Context, before time.Time, limit int) (int, error)

	// InsertOperatorAction appends to the operator audit: an action on a
	// purchase, or on one of its refunds when a.RefundID is set (ErrNotFound
	// if that refund is not the purchase's).
	InsertOperatorAction(ctx context.Context, a OperatorAction) error
	// ListOperatorActions returns a purchase's operator actions, those on
	// its refunds included, oldest first.
	ListOperatorActions(ctx context.Context, purchaseID string) ([]OperatorAction, error)

	// AcquireSweepLock takes the named lock for owner until the store's
	// now+ttl and reports whether it got it: it is free, expired, or
	// already owner's. With several replicas, each sweep runs under its
	// lock, so at most one runs at a time.
	AcquireSweepLock(ctx context.Context, name, owner string, ttl time.Duration) (bool, error)
	// ReleaseSweepLock frees the named lock if owner holds it.
	ReleaseSweepLock(ctx context.Context, name, owner string) error

	// InsertFinding stores an audit finding unless one with the same
	// (Provider, PaymentID, Kind) exists, open or closed, and reports
	// whether it stored it. Like InsertInboxEvent it never reads first.
	// f.ID is ignored; ClosedAt must be zero.
	InsertFinding(ctx context.Context, f Finding) (inserted bool, err error)
	// GetFinding returns the finding with id, or ErrNotFound.
	GetFinding(ctx context.Context, id int64) (Finding, error)
	// ListFindings returns findings, oldest first (by FoundAt, then ID):
	// the open ones, or all of them with includeClosed; only those of
	// purchaseID when it is not empty. limit caps how many (0: no cap).
	ListFindings(ctx context.Context, purchaseID string, includeClosed bool, limit int) ([]Finding, error)
	// CloseFinding closes an open finding with the operator's name and
	// note at now. Returns ErrNotFound for an unknown id and ErrConflict
	// if it is already closed.
	CloseFinding(ctx context.Context, id int64, operator, note string, now time.Time) error
	// CountOpenFindings returns how many findings are open, per kind;
	// every kind of FindingKinds is present, with 0 when it has none.
	CountOpenFindings(ctx context.Context) (map[FindingKind]int, error)

	// LinkAuditPayment records paymentID as the first money-taking payment
	// the audit saw for purchaseID, a purchase the books link to no
	// payment, unless one is recorded already, and returns the one
	// recorded: paymentID, or the earlier one. Like InsertFinding it never
	// reads before writing.
	LinkAuditPayment(ctx context.Context, provider, purchaseID, paymentID string, at time.Time) (first string, err error)

	// GetAuditRun returns the named audit run, or ErrNotFound if none
	// was ever saved.
	GetAuditRun(ctx context.Context, name string) (AuditRun, error)
	// SaveAuditRun stores r under r.Name, replacing what was there.
	SaveAuditRun(ctx context.Context, r AuditRun) error

	// InsertRecovery stores a new recovery epoch (r.ID is ignored, and
	// CompletedAt must be zero) and returns its id. Returns ErrInvalid
	// for a zero RestoredAt, RecordedAt or audit window bound.
	InsertRecovery(ctx context.Context, r Recovery) (int64, error)
	// OpenRecovery returns the latest recorded epoch whose audit has not
	// completed, or ErrNotFound when there is none.
	OpenRecovery(ctx context.Context) (Recovery, error)
	// ListRecoveries returns up to limit epochs, latest recorded first
	// (0: no cap).
	ListRecoveries(ctx context.Context, limit int) ([]Recovery, error)
	// CompleteRecovery marks the open epoch id completed at at with its
	// counts. Returns ErrNotFound for an unknown id and ErrConflict for
	// one completed already.
	CompleteRecovery(ctx context.Context, id int64, relinked, orphans int, at time.Time) error
	// CountRecoveryHeld returns how many purchases and refunds not final
	// were created before cutoff: those a recovery guard holds back from
	// creates and replays.
	CountRecoveryHeld(ctx context.Context, cutoff time.Time) (purchases, refunds int, err error)
	// SendHorizon returns the time after which the provider created every
	// charge and refund of a purchase or refund the books show as created
	// or do not hold: the latest first attempt (first_attempt_at) of a
	// purchase or refund, or the latest recorded recovery epoch, whichever
	// is later; when the books record neither, the earliest created_at of
	// a purchase or refund; the zero time for empty books. No write but a
	// send (created → submitted) or a recovery moves it, so a purchase or
	// refund stored after a restore by a command that sends nothing does
	// not move it past the backup.
	SendHorizon(ctx context.Context) (time.Time, error)
	// SystemIdentifier returns the identifier of the database cluster
	// the store runs on now, and the one recorded by
	// RecordSystemIdentifier ("" if none was). A store that has no such
	// identifier (SQLite) returns an error wrapping errors.ErrUnsupported.
	SystemIdentifier(ctx context.Context) (current, recorded string, err error)
	// RecordSystemIdentifier records id as the cluster's identifier at
	// at, replacing what was recorded.
	RecordSystemIdentifier(ctx context.Context, id string, at time.Time) error
	// AppendOutbox writes es to the outbox, and a pending delivery of
	// each to every subscription that wants its type, in this
	// transaction, all or none. Each event must have its ID, Type,
	// PurchaseID, CreatedAt and Data (with its Digest,
	// events.Event.SetData) set; its Sequence and SchemaVersion are the
	// store's: the next sequence number of its purchase (1 for the first;
	// events of one purchase in one call are numbered in their order;
	// numbers are taken in a row the transaction holds until it ends, so
	// they follow the commit order and a rollback leaves no gap) and
	// events.SchemaVersion. Returns the stored events, in es's order, each
	// with its Payload events.Marshal of it. Returns ErrDuplicate if an id
	// exists and ErrInvalid if an event is not valid; either way nothing
	// is written and the transaction stays usable.
	AppendOutbox(ctx context.Context, es ...events.Event) ([]OutboxEvent, error)
	// ListOutbox returns a purchase's events, in sequence order.
	ListOutbox(ctx context.Context, purchaseID string) ([]OutboxEvent, error)

	// InsertSubscription stores a subscription. Returns ErrDuplicate if
	// its name exists and ErrInvalid if its name, URL or secret is
	// empty. It receives the events committed after it, not earlier ones
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
	// the same delivery (PostgreSQL: FOR UPDATE SKIP LOCKED; SQLite: its
	// single writer). Oldest due first.
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
	// DeleteDeliveredOutboxBefore deletes up to limit events committed
	// before the given time whose every delivery is done (events no
	// subscription wanted included), with their deliveries, and returns
	// how many events it deleted.
	DeleteDeliveredOutboxBefore(ctx context.Context, before time.Time, limit int) (int, error)
}

// KeyedPurchase is a purchase to create under an idempotency key, with
// its job (due at the purchase's CreatedAt) and the response the key
// saves for replays.
type KeyedPurchase struct {
	// Key is the key to insert, its response already rendered: its
	// StatusCode, Response and PurchaseID (Purchase.ID) set.
	Key      IdempotencyKey
	Purchase Purchase
}

// KeyedPurchaseInserter is a Tx that creates many keyed purchases in one
// set-based write. It is optional: a Tx that lacks it (a test's or a
// wrapper's that intercepts the one-row writes) gets the one-row writes,
// so that no wrapper is bypassed without opting in. Both stores'
// transactions implement it.
type KeyedPurchaseInserter interface {
	// InsertKeyedPurchases inserts each item's key unless its (Client,
	// Key) exists, as InsertIdempotencyKey does (the unique key decides,
	// nothing is read first, a concurrent insert of the same pair waits
	// for the other transaction), and, for each key it inserted only,
	// the item's purchase and its job, as InsertPurchase and InsertJob
	// do. It reports, per item, whether it inserted the key (and so the
	// purchase and job).
	//
	// The items must name distinct (Client, Key) pairs (ErrInvalid
	// otherwise). If any write is refused (ErrDuplicate for a reference
	// or id that exists, ErrInvalid, ...), the call writes nothing and
	// returns that error, and the transaction stays usable: the caller
	// then creates the purchases one by one to learn whose it is.
	InsertKeyedPurchases(ctx context.Context, items []KeyedPurchase) (inserted []bool, err error)
}
