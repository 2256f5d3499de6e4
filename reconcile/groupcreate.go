package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/statemachine"
)

// Set-based group create: the CreatePurchaseOnce requests of one group
// (see groupcommit.go) are created together, their keys, purchases, jobs
// and saved responses in one statement for the whole group
// (KeyedPurchaseInserter), instead of a savepoint and five statements
// each. A request's response is rendered before that statement: it
// depends only on the purchase, whose id is made here and whose times are
// the transaction's now, read once for the group.
//
// What the statement cannot settle runs as the request would alone, each
// under a savepoint of its own (runMember), after it and in queue order,
// so that each failure stays its request's:
//
//   - a key the statement did not insert (a replay, a mismatch, a key in
//     flight in another transaction): the one-row path reads it and
//     answers exactly as it would alone;
//   - a second request with the key of an earlier one in the group: it
//     runs after the earlier one's key is written, as if in a later
//     transaction, and replays it (or is refused as a mismatch);
//   - a render that fails or panics;
//   - every request of the group when the statement is refused (a
//     reference the customer already used, in the books or earlier in the
//     group): the statement wrote nothing, and the one-row path finds
//     whose reference it is, refuses that request alone
//     (ReferenceConflictError) and creates the others;
//   - every request, when the Tx cannot insert a set (a wrapper that
//     does not forward KeyedPurchaseInserter).

// purchaseCreate is one CreatePurchaseOnce request, as purchaseSet needs
// it.
type purchaseCreate struct {
	client, key, hash string
	np                NewPurchase // validated
	render            RenderFunc
	// out is the request's result, which the set sets for a purchase it
	// created; the request reads it once answered.
	out *SavedResponse
}

// purchaseSet is the setRunner of CreatePurchaseOnce requests.
type purchaseSet struct{ s *Service }

// runSet implements setRunner.
func (ps purchaseSet) runSet(ctx context.Context, tx Tx, members []*member) ([]answer, error) {
	answers := make([]answer, len(members))
	alone := make([]bool, len(members)) // to run one by one, after the set
	for i := range alone {
		alone[i] = true
	}
	if ins, ok := tx.(KeyedPurchaseInserter); ok {
		// The members it creates are answered: their zero answer. A panic
		// here fails the group's transaction, which rolls back, and every
		// request runs alone: the process and the neighbours' answers
		// survive it.
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("reconcile: group create panicked: %v", p)
				}
			}()
			return ps.insert(ctx, tx, ins, members, alone)
		}()
		if err != nil {
			return nil, err
		}
	}
	for i, m := range members {
		if !alone[i] {
			continue
		}
		if m.ctx.Err() != nil {
			// Its request left before its turn: nothing of it runs.
			answers[i] = answer{err: context.Cause(m.ctx)}
			continue
		}
		a, err := runMember(ctx, tx, m)
		if err != nil {
			return nil, fmt.Errorf("member %d of %d: %w", i+1, len(members), err)
		}
		answers[i] = a
	}
	return answers, nil
}

// insert creates in one statement the purchases of members that it can,
// sets their results and clears alone for them, and leaves alone set for
// the others (see the list above). An error means tx is unusable.
func (ps purchaseSet) insert(ctx context.Context, tx Tx, ins KeyedPurchaseInserter, members []*member, alone []bool) error {
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	type pair struct{ client, key string }
	seen := make(map[pair]bool, len(members))
	items := make([]KeyedPurchase, 0, len(members))
	at := make([]int, 0, len(members)) // member of each item
	saved := make([]SavedResponse, 0, len(members))
	for i, m := range members {
		pc := m.arg.(*purchaseCreate)
		k := pair{pc.client, pc.key}
		if seen[k] {
			continue // after the earlier one, one by one
		}
		seen[k] = true
		p := ps.s.newPurchase(pc.np, pc.client, now)
		status, body, ok := renderOnce(pc.render, p)
		if !ok {
			continue // its own path renders again, and fails or panics alone
		}
		items = append(items, KeyedPurchase{
			Key: IdempotencyKey{
				Client: pc.client, Key: pc.key, RequestHash: pc.hash,
				StatusCode: status, Response: body, PurchaseID: p.ID, CreatedAt: now,
			},
			Purchase: p,
		})
		at = append(at, i)
		saved = append(saved, SavedResponse{StatusCode: status, Body: body, PurchaseID: p.ID})
	}
	if len(items) == 0 {
		return nil
	}
	inserted, err := ins.InsertKeyedPurchases(ctx, items)
	if err != nil {
		// Refused as a whole, nothing written, the transaction usable (or
		// not: then the first one-row statement fails, and the group with
		// it): every member runs its own path.
		ps.s.cfg.Logger.Debug("group create refused as a set; its requests run one by one", "requests", len(items), "err", err)
		return nil
	}
	for j, i := range at {
		if !inserted[j] {
			continue
		}
		*members[i].arg.(*purchaseCreate).out = saved[j]
		alone[i] = false
	}
	return nil
}

// renderOnce calls render, and reports false when it fails or panics:
// the request's own path then calls it again, and answers with its
// failure or panic as it would alone.
func renderOnce(render RenderFunc, p Purchase) (status int, body []byte, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	status, body, err := render(p)
	return status, body, err == nil
}

// newPurchase returns the purchase np (validated) creates for client at
// now: in state created, with a new id.
func (s *Service) newPurchase(np NewPurchase, client string, now time.Time) Purchase {
	return Purchase{
		ID:            NewID("pur_", now),
		Customer:      np.Customer,
		Reference:     np.Reference,
		Amount:        np.Amount,
		Currency:      np.Currency,
		Description:   np.Description,
		PaymentMethod: np.PaymentMethod,
		Client:        client,
		Account:       np.Account,
		State:         statemachine.Created,
		Version:       1,
		CreatedAt:     now,
		UpdatedAt:     now,
	}
}
