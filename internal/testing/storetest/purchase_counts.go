package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The tests of the counts of purchases by state: the plain ones, and
// counts that follow every way of writing purchases, concurrent writers
// included.

func testCountByState(t *testing.T, s *testStore) {
	count := func() map[statemachine.State]int {
		t.Helper()
		var m map[statemachine.State]int
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			m, err = tx.CountByState(t.Context())
			return err
		})
		return m
	}
	empty := count()
	for _, state := range statemachine.States {
		if n, ok := empty[state]; !ok || n != 0 {
			t.Fatalf("CountByState on an empty store: %v; want every state, each 0", empty)
		}
	}
	if len(empty) != len(statemachine.States) {
		t.Fatalf("CountByState on an empty store: %v; want exactly the %d states", empty, len(statemachine.States))
	}
	want := map[statemachine.State]int{
		statemachine.Created:     3,
		statemachine.Submitted:   1,
		statemachine.Uncertain:   0,
		statemachine.Reconciling: 2,
		statemachine.Succeeded:   1,
		statemachine.Declined:    2,
	}
	i := 0
	for _, state := range statemachine.States {
		for range want[state] {
			createIn(t, s, fmt.Sprintf("pur_%d", i), state)
			i++
		}
	}
	got := count()
	for _, state := range statemachine.States {
		if n, ok := got[state]; !ok || n != want[state] {
			t.Fatalf("CountByState: %v, want %v", got, want)
		}
	}
	for state := range got {
		if !slices.Contains(statemachine.States, state) {
			t.Fatalf("CountByState has unknown state %q: %v", state, got)
		}
	}
}

// countByState returns CountByState, read in a transaction of its own.
func countByState(t *testing.T, s reconcile.Store) map[statemachine.State]int {
	t.Helper()
	var m map[statemachine.State]int
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		m, err = tx.CountByState(t.Context())
		return err
	})
	return m
}

// plainCount counts the purchases ids by state, reading each one, in one
// transaction: what CountByState must say of a store that holds exactly
// them.
func plainCount(t *testing.T, s reconcile.Store, ids []string) map[statemachine.State]int {
	t.Helper()
	counts := map[statemachine.State]int{}
	for _, state := range statemachine.States {
		counts[state] = 0
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, id := range ids {
			p, err := tx.GetPurchase(t.Context(), id)
			if err != nil {
				return err
			}
			counts[p.State]++
		}
		return nil
	})
	return counts
}

// moveTx walks the purchase id along states inside tx, one UpdatePurchase
// a move, each from the state and version the previous one left.
func moveTx(ctx context.Context, tx reconcile.Tx, id string, states ...statemachine.State) error {
	p, err := tx.GetPurchase(ctx, id)
	if err != nil {
		return err
	}
	for _, to := range states {
		from := p.State
		p.State = to
		if err := tx.UpdatePurchase(ctx, p, from); err != nil {
			return fmt.Errorf("move %s %s -> %s: %w", id, from, to, err)
		}
		p.Version++
	}
	return nil
}

// numbered returns prefix0000, prefix0001, ... for i in [from, to).
func numbered(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%04d", prefix, i))
	}
	return out
}

// errRollback makes InTx roll a transaction back.
var errRollback = errors.New("storetest: roll back")

// testCountByStateFollowsWrites writes purchases in every way the
// protocol does (one per transaction, hundreds in one, a purchase moved
// several times in one transaction, writes the store refuses inside a
// transaction that commits, a transaction rolled back) and checks after
// each step that CountByState equals a plain count of the purchases.
func testCountByStateFollowsWrites(t *testing.T, s *testStore) {
	ctx := t.Context()
	var stored []string
	insert := func(tx reconcile.Tx, ids []string) error {
		for _, id := range ids {
			if err := tx.InsertPurchase(ctx, newPurchase(id)); err != nil {
				return err
			}
		}
		return nil
	}
	move := func(tx reconcile.Tx, ids []string, states ...statemachine.State) error {
		for _, id := range ids {
			if err := moveTx(ctx, tx, id, states...); err != nil {
				return err
			}
		}
		return nil
	}
	const (
		created     = statemachine.Created
		submitted   = statemachine.Submitted
		uncertain   = statemachine.Uncertain
		reconciling = statemachine.Reconciling
		succeeded   = statemachine.Succeeded
		declined    = statemachine.Declined
	)
	for _, step := range []struct {
		name     string
		inserted []string // the purchases the step stores
		rollback bool     // the step's transaction is rolled back
		tx       func(tx reconcile.Tx) error
	}{
		{name: "one insert", inserted: []string{"pur_a"}, tx: func(tx reconcile.Tx) error {
			return insert(tx, []string{"pur_a"})
		}},
		{name: "300 inserts in one transaction", inserted: numbered("pur_b", 0, 300), tx: func(tx reconcile.Tx) error {
			return insert(tx, numbered("pur_b", 0, 300))
		}},
		{name: "a walk to succeeded", tx: func(tx reconcile.Tx) error {
			return move(tx, []string{"pur_a"}, submitted, succeeded)
		}},
		{name: "200 moves, some purchases moved four times, in one transaction", tx: func(tx reconcile.Tx) error {
			return errors.Join(
				move(tx, numbered("pur_b", 0, 25), submitted, uncertain, reconciling, declined),
				move(tx, numbered("pur_b", 25, 50), submitted, uncertain, reconciling),
				move(tx, numbered("pur_b", 50, 100), submitted, uncertain),
				move(tx, numbered("pur_b", 100, 200), submitted),
			)
		}},
		{name: "inserts and moves in one transaction", inserted: numbered("pur_c", 0, 10), tx: func(tx reconcile.Tx) error {
			return errors.Join(
				insert(tx, numbered("pur_c", 0, 10)),
				move(tx, numbered("pur_c", 0, 10), submitted),
				move(tx, numbered("pur_b", 200, 250), submitted, succeeded),
				move(tx, numbered("pur_b", 25, 50), uncertain),
			)
		}},
		{name: "a transaction rolled back", rollback: true, tx: func(tx reconcile.Tx) error {
			return errors.Join(
				insert(tx, numbered("pur_d", 0, 10)),
				move(tx, numbered("pur_b", 250, 300), submitted, succeeded),
				move(tx, numbered("pur_b", 50, 100), reconciling),
				errRollback,
			)
		}},
		{name: "refused writes in a transaction that commits", tx: func(tx reconcile.Tx) error {
			p, err := tx.GetPurchase(ctx, "pur_b0250")
			if err != nil {
				return err
			}
			forbidden := p
			forbidden.State = succeeded
			wantErr(t, "created -> succeeded", tx.UpdatePurchase(ctx, forbidden, created), reconcile.ErrForbiddenTransition)
			stale := p
			stale.State, stale.Version = submitted, p.Version-1
			wantErr(t, "a stale version", tx.UpdatePurchase(ctx, stale, created), reconcile.ErrConflict)
			wantErr(t, "a duplicate insert", tx.InsertPurchase(ctx, newPurchase("pur_a")), reconcile.ErrDuplicate)
			notCreated := newPurchase("pur_e")
			notCreated.State = succeeded
			wantErr(t, "an insert in succeeded", tx.InsertPurchase(ctx, notCreated), reconcile.ErrForbiddenTransition)
			return move(tx, numbered("pur_b", 250, 260), submitted)
		}},
		{name: "writes that keep the state", tx: func(tx reconcile.Tx) error {
			for _, id := range numbered("pur_b", 50, 60) {
				p, err := tx.GetPurchase(ctx, id)
				if err != nil {
					return err
				}
				p.EscalatedAt, p.EscalationReason = at(time.Hour), reconcile.EscalationUncertainTooLong
				if err := tx.UpdatePurchase(ctx, p, p.State); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		err := txErr(t, s, step.tx)
		if step.rollback {
			wantErr(t, step.name, err, errRollback)
		} else if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		stored = append(stored, step.inserted...)
		equal(t, "CountByState after "+step.name, countByState(t, s), plainCount(t, s, stored))
	}
	want := map[statemachine.State]int{
		created: 40, submitted: 120, uncertain: 75, reconciling: 0, succeeded: 51, declined: 25,
	}
	equal(t, "CountByState at the end", countByState(t, s), want)
}

// testCountByStateConcurrentWriters races transactions that insert and
// move purchases, each its own, in the same states: the counts they keep
// in common must add up to a plain count of the purchases.
func testCountByStateConcurrentWriters(t *testing.T, s *testStore) {
	ctx := t.Context()
	const (
		rounds = 6
		perTx  = 12
	)
	paths := [][]statemachine.State{
		nil,
		{statemachine.Submitted},
		{statemachine.Submitted, statemachine.Succeeded},
		{statemachine.Submitted, statemachine.Uncertain},
		{statemachine.Submitted, statemachine.Uncertain, statemachine.Reconciling, statemachine.Declined},
	}
	var stored []string
	for round := range rounds {
		// Each writer inserts new purchases and moves them along the
		// paths, and moves on the ones it inserted the round before.
		race(t, s, racers, func(tx reconcile.Tx, w int) (struct{}, error) {
			for k, id := range numbered(fmt.Sprintf("pur_w%d_r%d_", w, round), 0, perTx) {
				if err := tx.InsertPurchase(ctx, newPurchase(id)); err != nil {
					return struct{}{}, err
				}
				if err := moveTx(ctx, tx, id, paths[k%len(paths)]...); err != nil {
					return struct{}{}, err
				}
			}
			if round == 0 {
				return struct{}{}, nil
			}
			for k, id := range numbered(fmt.Sprintf("pur_w%d_r%d_", w, round-1), 0, perTx) {
				var next []statemachine.State
				switch k % len(paths) {
				case 0:
					next = []statemachine.State{statemachine.Submitted}
				case 1:
					next = []statemachine.State{statemachine.Declined}
				case 3:
					next = []statemachine.State{statemachine.Reconciling, statemachine.Succeeded}
				}
				if err := moveTx(ctx, tx, id, next...); err != nil {
					return struct{}{}, err
				}
			}
			return struct{}{}, nil
		})
		for w := range racers {
			stored = append(stored, numbered(fmt.Sprintf("pur_w%d_r%d_", w, round), 0, perTx)...)
		}
		equal(t, fmt.Sprintf("CountByState after round %d", round), countByState(t, s), plainCount(t, s, stored))
	}
}
