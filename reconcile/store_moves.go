package reconcile

import "context"

// MoveStore is the part of Tx that reads and moves a group of purchases
// set-based: a batch of webhooks' or of the worker's verdicts. The
// stores' moves.go implement it.
type MoveStore interface {
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
}
