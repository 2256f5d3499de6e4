package reconcile

import (
	"context"
	"time"
)

// IdempotencyKeyStore is the part of Tx that stores the clients'
// idempotency keys and the responses they replay. The stores'
// idempotency_keys.go implement it, and KeyedPurchaseInserter.
type IdempotencyKeyStore interface {
	// InsertIdempotencyKey stores a client's key with its request hash
	// unless the (Client, Key) pair exists, and reports whether it stored
	// it. Like InsertInboxEvent it never reads first, and a concurrent
	// insert of the same pair waits for the other transaction. An empty
	// Key or a zero CreatedAt is refused with ErrInvalid. An empty
	// response is read back as nil.
	InsertIdempotencyKey(ctx context.Context, k IdempotencyKey) (inserted bool, err error)
	// GetIdempotencyKey returns the stored key, or ErrNotFound.
	GetIdempotencyKey(ctx context.Context, client, key string) (IdempotencyKey, error)
	// SaveIdempotencyResponse stores the response to replay for a key:
	// the status, the body and the purchase id as given (an empty
	// purchaseID clears it). Returns ErrNotFound if there is no such key.
	SaveIdempotencyResponse(ctx context.Context, client, key string, statusCode int, body []byte, purchaseID string) error
	// DeleteIdempotencyKeysBefore deletes up to limit keys created
	// strictly before the given time, oldest first, and returns how many
	// it deleted. Purchases are never touched. limit must be positive
	// (ErrInvalid otherwise).
	DeleteIdempotencyKeysBefore(ctx context.Context, before time.Time, limit int) (int, error)
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
