package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
)

// Batched writes: one read of what a batch of answers needs, and one
// savepoint that writes a batch of fenced moves. SQLite has one writer
// and no round trips: a batch saves what matters here, the commits (one
// sync for the whole batch).

// FindPurchases implements reconcile.Tx, in one statement.
func (t *txn) FindPurchases(ctx context.Context, ids, paymentIDs []string) ([]reconcile.Purchase, error) {
	ids, paymentIDs = sqlstore.NonEmpty(ids), sqlstore.NonEmpty(paymentIDs)
	if len(ids) == 0 && len(paymentIDs) == 0 {
		return nil, nil
	}
	what := fmt.Sprintf("find %d purchases", len(ids)+len(paymentIDs))
	idList, err := json.Marshal(ids)
	if err != nil {
		return nil, wrap(err, "%s", what)
	}
	paymentList, err := json.Marshal(paymentIDs)
	if err != nil {
		return nil, wrap(err, "%s", what)
	}
	return queryAll(ctx, t, scanPurchase, what, `SELECT `+purchaseColumns+` FROM purchases
WHERE id IN (SELECT value FROM json_each(?1))
   OR provider_payment_id IN (SELECT value FROM json_each(?2))`, string(idList), string(paymentList))
}

// ApplyMoves implements reconcile.Tx: each move's lease check,
// conditional update and appends, all under one savepoint, so that a
// refused move undoes the whole batch and leaves the transaction usable.
func (t *txn) ApplyMoves(ctx context.Context, moves []reconcile.Move) (applied []bool, err error) {
	if len(moves) == 0 {
		return nil, nil
	}
	what := fmt.Sprintf("apply %d moves", len(moves))
	if err := sqlstore.CheckMoves(moves); err != nil {
		return nil, dialect.Invalid(what, err.Error())
	}
	if _, err := t.tx.ExecContext(ctx, "SAVEPOINT payrecon_moves"); err != nil {
		return nil, wrap(err, "%s", what)
	}
	defer func() {
		end := "RELEASE SAVEPOINT payrecon_moves"
		if err != nil {
			end = "ROLLBACK TO SAVEPOINT payrecon_moves; " + end
			applied = nil
		}
		if _, eerr := t.tx.ExecContext(ctx, end); eerr != nil {
			err = errors.Join(err, wrap(eerr, "%s", what))
			applied = nil
		}
	}()
	applied = make([]bool, len(moves))
	for i, mv := range moves {
		ok, err := t.applyMove(ctx, mv)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		applied[i] = ok
	}
	return applied, nil
}

// applyMove writes one move of a batch and reports whether it matched.
func (t *txn) applyMove(ctx context.Context, mv reconcile.Move) (bool, error) {
	// A move without a lease is fenced by the purchase's version alone.
	if !mv.Leaseless() {
		if err := t.CheckLease(ctx, mv.Lease); errors.Is(err, reconcile.ErrLeaseLost) {
			return false, nil
		} else if err != nil {
			return false, err
		}
	}
	to := mv.To
	to.Version = mv.From.Version // the version the move is conditional on
	if err := t.UpdatePurchase(ctx, to, mv.From.State); errors.Is(err, reconcile.ErrConflict) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if mv.Transition != nil {
		if err := t.InsertTransition(ctx, *mv.Transition); err != nil {
			return false, err
		}
	}
	if mv.Attempt != nil {
		if err := t.InsertAttempt(ctx, *mv.Attempt); err != nil {
			return false, err
		}
	}
	switch mv.Job {
	case reconcile.JobComplete:
		return true, t.CompleteJob(ctx, mv.From.ID, mv.RunAt)
	case reconcile.JobReschedule:
		return true, t.RescheduleJob(ctx, mv.From.ID, mv.RunAt)
	}
	return true, nil
}
