package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ReferenceConflictError reports a reference the customer already used.
// It wraps ErrDuplicate.
type ReferenceConflictError struct {
	Reference string
	// ExistingPurchaseID is the purchase that holds the reference, when
	// the same client created it; empty when another client (or none)
	// did, so that a client never learns the id of a purchase it cannot
	// read.
	ExistingPurchaseID string
}

func (e *ReferenceConflictError) Error() string {
	if e.ExistingPurchaseID == "" {
		return fmt.Sprintf("reference %q is already used by another purchase", e.Reference)
	}
	return fmt.Sprintf("reference %q is already used by purchase %s", e.Reference, e.ExistingPurchaseID)
}

// Unwrap makes errors.Is(err, ErrDuplicate) true.
func (e *ReferenceConflictError) Unwrap() error { return ErrDuplicate }

// SavedResponse is the response remembered for an idempotency key.
type SavedResponse struct {
	StatusCode int
	Body       []byte
	PurchaseID string
	// Replayed is true when the response was saved by an earlier request
	// and nothing was created now.
	Replayed bool
}

// RenderFunc turns a created purchase into the response to save and send.
type RenderFunc func(Purchase) (statusCode int, body []byte, err error)

// CreatePurchaseOnce creates a purchase at most once per (client, key),
// and records client as the purchase's Client: only it may read the
// purchase through the API (ClientPurchase).
//
// In one transaction it inserts the key with requestHash (the unique key
// decides; nothing is read first), creates the purchase and its job, and
// saves the response render gives: all of it commits, or none. Concurrent
// calls share that transaction (group commit), and are created together in
// a set-based insert (groupcreate.go), save those that insert cannot
// settle, which run each under a savepoint of its own; every call returns
// after its transaction's commit. A later call with the same
// client, key and hash gets the saved response with Replayed set, and
// creates nothing. A concurrent call with the same key waits for the
// first transaction and then replays its answer; in the same group, it
// runs after the first one, reads its key and response and replays them.
// render gets the purchase before it is stored (its id, fields, and
// times, the transaction's now, are final); it may be called more than
// once, and must have no side effects.
//
// Returns an error wrapping ErrKeyMismatch if the key was used with
// another hash (the caller gets the saved response too, to name the
// difference); ErrInvalid for bad input and a *ReferenceConflictError for
// a reused reference, in both of which cases nothing is stored, so a
// corrected retry runs as a first attempt.
func (s *Service) CreatePurchaseOnce(ctx context.Context, client, key, requestHash string, np NewPurchase, render RenderFunc) (SavedResponse, error) {
	np, err := s.Validate(np)
	if err != nil {
		return SavedResponse{}, fmt.Errorf("reconcile: create purchase: %w", err)
	}
	var out SavedResponse
	fn := onceTx(&out, client, key, requestHash, func(ctx context.Context, tx Tx) (SavedResponse, error) {
		p, err := s.createPurchaseTx(ctx, tx, np, client)
		if errors.Is(err, ErrDuplicate) && np.Reference != "" {
			existing, ferr := tx.FindPurchaseByReference(ctx, np.Customer, np.Reference)
			if ferr != nil {
				return SavedResponse{}, errors.Join(err, ferr)
			}
			conflict := &ReferenceConflictError{Reference: np.Reference}
			if client != "" && existing.Client == client {
				conflict.ExistingPurchaseID = existing.ID
			}
			return SavedResponse{}, conflict
		}
		if err != nil {
			return SavedResponse{}, err
		}
		status, body, err := render(p)
		if err != nil {
			return SavedResponse{}, fmt.Errorf("render response: %w", err)
		}
		return SavedResponse{StatusCode: status, Body: body, PurchaseID: p.ID}, nil
	})
	if s.group == nil {
		err = s.store.InTx(ctx, func(tx Tx) error { return fn(ctx, tx) })
	} else {
		// With its neighbours in one statement (groupcreate.go), or fn.
		err = s.group.doSet(ctx, fn, purchaseSet{s}, &purchaseCreate{
			client: client, key: key, hash: requestHash, np: np, render: render, out: &out,
		})
	}
	if err != nil {
		return out, fmt.Errorf("reconcile: create purchase with key %q: %w", key, err)
	}
	return out, nil
}

// RenderRefundFunc turns a created refund into the response to save and
// send.
type RenderRefundFunc func(Refund) (statusCode int, body []byte, err error)

// CreateRefundOnce creates a refund at most once per (client, key), as
// CreatePurchaseOnce creates a purchase: the key, the refund, its job
// and the saved response commit together or not at all; a retry with
// the same key and hash replays the saved response and creates nothing;
// the same key with another hash returns an error wrapping
// ErrKeyMismatch. client must be the purchase's Client: a purchase the
// client did not create is not found. Errors of CreateRefund (ErrInvalid,
// ErrNotRefundable, ErrRefundExceeds) store nothing, so a corrected retry
// runs as a first attempt.
func (s *Service) CreateRefundOnce(ctx context.Context, client, key, requestHash string, nr NewRefund, render RenderRefundFunc) (SavedResponse, error) {
	nr, err := ValidateRefund(nr)
	if err != nil {
		return SavedResponse{}, fmt.Errorf("reconcile: create refund: %w", err)
	}
	out, err := s.once(ctx, client, key, requestHash, func(ctx context.Context, tx Tx) (SavedResponse, error) {
		p, err := tx.GetPurchase(ctx, nr.PurchaseID)
		if err != nil {
			return SavedResponse{}, err
		}
		if client == "" || p.Client != client {
			return SavedResponse{}, ErrNotFound // never tell a client about another's purchase
		}
		r, err := s.createRefundTx(ctx, tx, nr, client)
		if err != nil {
			return SavedResponse{}, err
		}
		status, body, err := render(r)
		if err != nil {
			return SavedResponse{}, fmt.Errorf("render response: %w", err)
		}
		return SavedResponse{StatusCode: status, Body: body, PurchaseID: p.ID}, nil
	})
	if err != nil {
		return out, fmt.Errorf("reconcile: create refund with key %q: %w", key, err)
	}
	return out, nil
}

// once runs create at most once per (client, key), in one transaction
// with the key's insert and the saved response (see CreatePurchaseOnce).
// create returns the response to save; its error rolls everything back.
func (s *Service) once(ctx context.Context, client, key, requestHash string, create func(context.Context, Tx) (SavedResponse, error)) (SavedResponse, error) {
	var out SavedResponse
	err := s.inGroup(ctx, onceTx(&out, client, key, requestHash, create))
	return out, err
}

// onceTx returns once's transaction function, which sets *out: the
// one-row path of a request, which may run more than once (it resets
// *out first).
func onceTx(out *SavedResponse, client, key, requestHash string, create func(context.Context, Tx) (SavedResponse, error)) func(context.Context, Tx) error {
	return func(ctx context.Context, tx Tx) error {
		*out = SavedResponse{}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		inserted, err := tx.InsertIdempotencyKey(ctx, IdempotencyKey{
			Client: client, Key: key, RequestHash: requestHash, CreatedAt: now,
		})
		if err != nil {
			return err
		}
		if !inserted {
			prev, err := tx.GetIdempotencyKey(ctx, client, key)
			if err != nil {
				return err
			}
			*out = SavedResponse{StatusCode: prev.StatusCode, Body: prev.Response, PurchaseID: prev.PurchaseID, Replayed: true}
			switch {
			case prev.RequestHash != requestHash:
				return ErrKeyMismatch
			case prev.StatusCode == 0:
				return ErrKeyInFlight
			}
			return nil
		}
		created, err := create(ctx, tx)
		if err != nil {
			return err
		}
		*out = created
		return tx.SaveIdempotencyResponse(ctx, client, key, out.StatusCode, out.Body, out.PurchaseID)
	}
}

// SweepIdempotencyKeys deletes keys created before now-retention, in
// batches of batch, and returns how many it deleted. Purchases stay.
func (s *Service) SweepIdempotencyKeys(ctx context.Context, retention time.Duration, batch int) (int, error) {
	return s.sweep(ctx, batch, func(tx Tx, before time.Time, n int) (int, error) {
		return tx.DeleteIdempotencyKeysBefore(ctx, before, n)
	}, -retention)
}

// SweepInbox deletes webhook inbox rows received before now-retention, in
// batches of batch, and returns how many it deleted.
func (s *Service) SweepInbox(ctx context.Context, retention time.Duration, batch int) (int, error) {
	return s.sweep(ctx, batch, func(tx Tx, before time.Time, n int) (int, error) {
		return tx.DeleteInboxEventsBefore(ctx, before, n)
	}, -retention)
}

// sweep runs del in its own transaction per batch until a batch comes back
// short, so no transaction holds locks on a large table for long. It
// deletes what is older than age (negative) by the store's clock.
func (s *Service) sweep(ctx context.Context, batch int, del func(Tx, time.Time, int) (int, error), age time.Duration) (int, error) {
	if batch <= 0 {
		batch = 1000
	}
	now, err := s.store.Now(ctx)
	if err != nil {
		return 0, fmt.Errorf("reconcile: sweep: %w", err)
	}
	before := now.Add(age)
	total := 0
	for {
		var n int
		err := s.store.InTx(ctx, func(tx Tx) error {
			var err error
			n, err = del(tx, before, batch)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("reconcile: sweep: %w", err)
		}
		total += n
		if n < batch {
			return total, nil
		}
	}
}
