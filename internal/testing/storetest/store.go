package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The tests of the store itself: Ready, InTx, what a refused write
// leaves of a transaction, and Savepoint.

func testReady(t *testing.T, s *testStore) {
	if err := s.Ready(t.Context()); err != nil {
		t.Fatalf("Ready on a migrated store: %v", err)
	}
}

func testInTx(t *testing.T, newStore func(*testing.T) *testStore) {
	parallel(t, "RollsBackOnError", func(t *testing.T) {
		s := newStore(t)
		boom := errors.New("boom")
		err := txErr(t, s, func(tx reconcile.Tx) error {
			if err := tx.InsertPurchase(t.Context(), newPurchase("pur_1")); err != nil {
				return err
			}
			if _, err := tx.GetPurchase(t.Context(), "pur_1"); err != nil {
				return fmt.Errorf("the transaction does not see its own write: %w", err)
			}
			return boom
		})
		wantErr(t, "InTx", err, boom)
		err = txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetPurchase(t.Context(), "pur_1"); return err })
		wantErr(t, "GetPurchase after rollback", err, reconcile.ErrNotFound)
	})

	parallel(t, "StaleLeaseWritesNothing", func(t *testing.T) {
		s := newStore(t)
		const leaseFor = time.Minute
		purchaseWithJob(t, s, "pur_1", base)
		old := claimOne(t, s, "w1", "pur_1", base, leaseFor)
		claimOne(t, s, "w2", "pur_1", old.ExpiresAt, leaseFor) // takes over

		// The stale worker writes its result, then checks its lease
		// before committing, as the protocol requires, at a time its own
		// lease has not reached.
		s.clock.Set(old.ExpiresAt.Add(-time.Second))
		err := txErr(t, s, func(tx reconcile.Tx) error {
			ctx := t.Context()
			p, err := tx.GetPurchase(ctx, "pur_1")
			if err != nil {
				return err
			}
			p.State = statemachine.Submitted
			if err := tx.UpdatePurchase(ctx, p, statemachine.Created); err != nil {
				return err
			}
			if err := tx.InsertTransition(ctx, reconcile.TransitionRecord{PurchaseID: "pur_1", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, Actor: "w1", LeaseToken: old.Token, At: base}); err != nil {
				return err
			}
			if err := tx.RescheduleJob(ctx, "pur_1", at(time.Hour)); err != nil {
				return err
			}
			return tx.CheckLease(ctx, old)
		})
		wantErr(t, "InTx with a stale lease", err, reconcile.ErrLeaseLost)
		if p := getPurchase(t, s, "pur_1"); p.State != statemachine.Created || p.Version != 1 {
			t.Fatalf("purchase written under a stale lease: %+v", p)
		}
		inTx(t, s, func(tx reconcile.Tx) error {
			rs, err := tx.ListTransitions(t.Context(), "pur_1")
			if err == nil && len(rs) != 0 {
				err = fmt.Errorf("transitions written under a stale lease: %+v", rs)
			}
			return err
		})
		if j := getJob(t, s, "pur_1"); j.LeaseOwner != "w2" || j.LeaseToken != 2 {
			t.Fatalf("job after the stale worker's rollback: %+v; want w2's lease, token 2", j)
		}
	})
}

// testTxUsableAfterRefusal checks that a refused write (duplicate,
// forbidden move, conflict) fails alone: the transaction goes on and its
// other writes commit.
func testTxUsableAfterRefusal(t *testing.T, s *testStore) {
	insertPurchase(t, s, newPurchase("pur_1"))
	inTx(t, s, func(tx reconcile.Tx) error {
		ctx := t.Context()
		wantErr(t, "duplicate insert", tx.InsertPurchase(ctx, newPurchase("pur_1")), reconcile.ErrDuplicate)
		p, err := tx.GetPurchase(ctx, "pur_1")
		if err != nil {
			return fmt.Errorf("read after a refused insert: %w", err)
		}
		forbidden := p
		forbidden.State = statemachine.Succeeded
		wantErr(t, "forbidden move", tx.UpdatePurchase(ctx, forbidden, statemachine.Created), reconcile.ErrForbiddenTransition)
		stale := p
		stale.Version--
		stale.State = statemachine.Submitted
		wantErr(t, "stale update", tx.UpdatePurchase(ctx, stale, statemachine.Created), reconcile.ErrConflict)
		p.State = statemachine.Submitted
		if err := tx.UpdatePurchase(ctx, p, statemachine.Created); err != nil {
			return fmt.Errorf("allowed move after refusals: %w", err)
		}
		return tx.InsertPurchase(ctx, newPurchase("pur_2"))
	})
	if got := getPurchase(t, s, "pur_1"); got.State != statemachine.Submitted || got.Version != 2 {
		t.Fatalf("pur_1: state %s version %d, want submitted 2", got.State, got.Version)
	}
	getPurchase(t, s, "pur_2")
}

// testSavepoint checks Tx.Savepoint: a failed nested function is undone
// alone, and the transaction around it goes on and commits; a function
// that succeeded commits, or rolls back, with its transaction.
func testSavepoint(t *testing.T, newStore func(*testing.T) *testStore) {
	boom := errors.New("boom")

	parallel(t, "FailedMemberLeavesTheRestCommitted", func(t *testing.T) {
		s := newStore(t)
		inTx(t, s, func(tx reconcile.Tx) error {
			ctx := t.Context()
			if err := tx.InsertPurchase(ctx, newPurchase("pur_before")); err != nil {
				return err
			}
			err := tx.Savepoint(ctx, func(tx reconcile.Tx) error {
				if err := tx.InsertPurchase(ctx, newPurchase("pur_failed")); err != nil {
					return err
				}
				if _, err := tx.InsertInboxEvent(ctx, inboxEvent("evt_failed", base)); err != nil {
					return err
				}
				return boom
			})
			if err != boom {
				return fmt.Errorf("tx.Savepoint returned %v, want fn's error unchanged", err)
			}
			if _, err := tx.GetPurchase(ctx, "pur_failed"); !errors.Is(err, reconcile.ErrNotFound) {
				return fmt.Errorf("a failed member's write is still visible: %v", err)
			}
			if err := tx.Savepoint(ctx, func(tx reconcile.Tx) error {
				return tx.InsertPurchase(ctx, newPurchase("pur_member"))
			}); err != nil {
				return fmt.Errorf("a member after a failed one: %w", err)
			}
			return tx.InsertPurchase(ctx, newPurchase("pur_after"))
		})
		for _, id := range []string{"pur_before", "pur_member", "pur_after"} {
			getPurchase(t, s, id)
		}
		err := txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetPurchase(t.Context(), "pur_failed"); return err })
		wantErr(t, "the failed member's purchase after commit", err, reconcile.ErrNotFound)
		if !insertEvent(t, s, inboxEvent("evt_failed", base)) {
			t.Fatal("the failed member's inbox event was committed")
		}
	})

	parallel(t, "RefusedWriteInsideAFailedMember", func(t *testing.T) {
		s := newStore(t)
		insertPurchase(t, s, newPurchase("pur_1"))
		inTx(t, s, func(tx reconcile.Tx) error {
			ctx := t.Context()
			err := tx.Savepoint(ctx, func(tx reconcile.Tx) error {
				if err := tx.InsertPurchase(ctx, newPurchase("pur_2")); err != nil {
					return err
				}
				return tx.InsertPurchase(ctx, newPurchase("pur_1")) // refused: the member gives up
			})
			wantErr(t, "member with a duplicate", err, reconcile.ErrDuplicate)
			// A read the database refuses (PostgreSQL takes no NUL in
			// text, and aborts the transaction) is undone with its member.
			err = tx.Savepoint(ctx, func(tx reconcile.Tx) error {
				if _, err := tx.GetInboxEvent(ctx, "stripe", "evt_\x00"); err != nil && !errors.Is(err, reconcile.ErrNotFound) {
					return err
				}
				return boom
			})
			if err == nil || errors.Is(err, reconcile.ErrNotFound) {
				return fmt.Errorf("member with a refused read: %v, want its error", err)
			}
			return tx.InsertPurchase(ctx, newPurchase("pur_3"))
		})
		getPurchase(t, s, "pur_3")
		err := txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetPurchase(t.Context(), "pur_2"); return err })
		wantErr(t, "pur_2 of the failed member", err, reconcile.ErrNotFound)
	})

	parallel(t, "SecondMemberSeesTheFirstsRow", func(t *testing.T) {
		// Two deliveries of one event in one transaction: the unique key
		// decides, and the second reads the first's row.
		s := newStore(t)
		var first, second bool
		inTx(t, s, func(tx reconcile.Tx) error {
			ctx := t.Context()
			for _, got := range []*bool{&first, &second} {
				if err := tx.Savepoint(ctx, func(tx reconcile.Tx) error {
					var err error
					*got, err = tx.InsertInboxEvent(ctx, inboxEvent("evt_1", base))
					if err == nil && !*got {
						_, err = tx.GetInboxEvent(ctx, "stripe", "evt_1")
					}
					return err
				}); err != nil {
					return err
				}
			}
			return nil
		})
		if !first || second {
			t.Fatalf("inserted: first %v, second %v; want true, false", first, second)
		}
	})

	parallel(t, "Nested", func(t *testing.T) {
		s := newStore(t)
		inTx(t, s, func(tx reconcile.Tx) error {
			ctx := t.Context()
			err := tx.Savepoint(ctx, func(tx reconcile.Tx) error {
				if err := tx.InsertPurchase(ctx, newPurchase("pur_outer")); err != nil {
					return err
				}
				if err := tx.Savepoint(ctx, func(tx reconcile.Tx) error {
					if err := tx.InsertPurchase(ctx, newPurchase("pur_inner")); err != nil {
						return err
					}
					return boom
				}); err != boom {
					return fmt.Errorf("inner Savepoint returned %v, want boom", err)
				}
				return tx.Savepoint(ctx, func(tx reconcile.Tx) error {
					return tx.InsertPurchase(ctx, newPurchase("pur_inner_ok"))
				})
			})
			if err != nil {
				return err
			}
			wantErr(t, "outer member failing after an inner success", tx.Savepoint(ctx, func(tx reconcile.Tx) error {
				if err := tx.Savepoint(ctx, func(tx reconcile.Tx) error {
					return tx.InsertPurchase(ctx, newPurchase("pur_undone"))
				}); err != nil {
					return err
				}
				return boom
			}), boom)
			return nil
		})
		getPurchase(t, s, "pur_outer")
		getPurchase(t, s, "pur_inner_ok")
		for _, id := range []string{"pur_inner", "pur_undone"} {
			err := txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetPurchase(t.Context(), id); return err })
			wantErr(t, id, err, reconcile.ErrNotFound)
		}
	})

	parallel(t, "ManyMembers", func(t *testing.T) {
		// A group's worth of members one after the other, every third
		// failing, some sending no statement at all.
		s := newStore(t)
		const n = 70
		inTx(t, s, func(tx reconcile.Tx) error {
			ctx := t.Context()
			for i := range n {
				err := tx.Savepoint(ctx, func(tx reconcile.Tx) error {
					if i%5 == 4 {
						return nil // no statement
					}
					if err := tx.InsertPurchase(ctx, newPurchase(fmt.Sprintf("pur_%d", i))); err != nil {
						return err
					}
					if i%3 == 2 {
						return boom
					}
					return nil
				})
				if err != nil && err != boom {
					return fmt.Errorf("member %d: %w", i, err)
				}
			}
			if err := tx.Savepoint(ctx, func(tx reconcile.Tx) error { return boom }); err != boom { // sends nothing
				return fmt.Errorf("a failing member that sent nothing: %v, want boom", err)
			}
			return nil
		})
		inTx(t, s, func(tx reconcile.Tx) error {
			for i := range n {
				_, err := tx.GetPurchase(t.Context(), fmt.Sprintf("pur_%d", i))
				switch stored := err == nil; {
				case err != nil && !errors.Is(err, reconcile.ErrNotFound):
					return err
				case stored != (i%5 != 4 && i%3 != 2):
					return fmt.Errorf("pur_%d stored: %v", i, stored)
				}
			}
			return nil
		})
	})

	parallel(t, "CommitsOnlyWithItsTransaction", func(t *testing.T) {
		s := newStore(t)
		err := txErr(t, s, func(tx reconcile.Tx) error {
			if err := tx.Savepoint(t.Context(), func(tx reconcile.Tx) error {
				return tx.InsertPurchase(t.Context(), newPurchase("pur_1"))
			}); err != nil {
				return err
			}
			return boom
		})
		wantErr(t, "InTx", err, boom)
		err = txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetPurchase(t.Context(), "pur_1"); return err })
		wantErr(t, "a member of a transaction rolled back", err, reconcile.ErrNotFound)
	})

	parallel(t, "MemberCutOffByItsContext", func(t *testing.T) {
		// A member whose own context ends mid-way is undone alone; the
		// transaction, on its own context, goes on.
		s := newStore(t)
		inTx(t, s, func(tx reconcile.Tx) error {
			ctx, cancel := context.WithCancel(t.Context())
			err := tx.Savepoint(ctx, func(tx reconcile.Tx) error {
				if err := tx.InsertPurchase(ctx, newPurchase("pur_cut")); err != nil {
					return err
				}
				cancel()
				_, err := tx.GetPurchase(ctx, "pur_cut")
				return err
			})
			wantErr(t, "member cut off", err, context.Canceled)
			return tx.InsertPurchase(t.Context(), newPurchase("pur_after"))
		})
		getPurchase(t, s, "pur_after")
		err := txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetPurchase(t.Context(), "pur_cut"); return err })
		wantErr(t, "the cut-off member's purchase", err, reconcile.ErrNotFound)
	})
}
