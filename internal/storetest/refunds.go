package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The tests of refunds: their writes and guard, the limits the database
// holds them to, their jobs beside the purchases', their rows of the
// audit, and the reads of the operator list and the metrics.

// newRefund returns a valid refund in state created of amount from
// payment paymentID of purchase purchaseID, with its provider key,
// request and hash.
func newRefund(id, purchaseID, paymentID string, amount int64) reconcile.Refund {
	req := &provider.RefundRequest{
		IdempotencyKey: reconcile.RefundKeyFor(id),
		RefundID:       id,
		PurchaseID:     purchaseID,
		PaymentID:      paymentID,
		Amount:         amount,
		Currency:       "eur",
		Reason:         "requested_by_customer",
	}
	return reconcile.Refund{
		ID:              id,
		PurchaseID:      purchaseID,
		PaymentID:       paymentID,
		Amount:          amount,
		Currency:        "eur",
		Reason:          "the customer sent it back",
		RequestedBy:     "cli",
		State:           statemachine.Created,
		Version:         1,
		ProviderKey:     req.IdempotencyKey,
		ProviderRequest: req,
		ParamsHash:      req.Hash(),
		CreatedAt:       base,
		UpdatedAt:       base,
	}
}

// paidPurchase inserts purchase id of amount, succeeded with payment
// paymentID, and returns it as stored.
func paidPurchase(t *testing.T, s reconcile.Store, id, paymentID string, amount int64) reconcile.Purchase {
	t.Helper()
	p := newPurchase(id)
	p.Amount = amount
	insertPurchase(t, s, p)
	p = walkTo(t, s, id, statemachine.Submitted)
	p.State, p.ProviderPaymentID = statemachine.Succeeded, paymentID
	return update(t, s, p, statemachine.Submitted)
}

func insertRefund(t *testing.T, s reconcile.Store, r reconcile.Refund) {
	t.Helper()
	inTx(t, s, func(tx reconcile.Tx) error { return tx.InsertRefund(t.Context(), r) })
}

// refundErr inserts r and returns the store's error.
func refundErr(t *testing.T, s reconcile.Store, r reconcile.Refund) error {
	t.Helper()
	return txErr(t, s, func(tx reconcile.Tx) error { return tx.InsertRefund(t.Context(), r) })
}

func getRefund(t *testing.T, s reconcile.Store, id string) reconcile.Refund {
	t.Helper()
	var r reconcile.Refund
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		r, err = tx.GetRefund(t.Context(), id)
		return err
	})
	return r
}

// wantNoRefund fails unless there is no refund id.
func wantNoRefund(t *testing.T, s reconcile.Store, id string) {
	t.Helper()
	err := txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetRefund(t.Context(), id); return err })
	wantErr(t, "GetRefund of the refused refund "+id, err, reconcile.ErrNotFound)
}

// updateRefund writes r (moving it from state from to r.State) and
// returns it as stored afterwards.
func updateRefund(t *testing.T, s reconcile.Store, r reconcile.Refund, from statemachine.State) reconcile.Refund {
	t.Helper()
	inTx(t, s, func(tx reconcile.Tx) error { return tx.UpdateRefund(t.Context(), r, from) })
	return getRefund(t, s, r.ID)
}

// walkRefundTo moves the stored refund id, from the state it is in,
// along the refund machine's allowed moves to target and returns it as
// stored.
func walkRefundTo(t *testing.T, s reconcile.Store, id string, target statemachine.State) reconcile.Refund {
	t.Helper()
	r := getRefund(t, s, id)
	for _, move := range pathFrom(statemachine.Refund, r.State, target) {
		r.State = move.To
		r = updateRefund(t, s, r, move.From)
	}
	return r
}

// refundIn inserts r and walks it to state.
func refundIn(t *testing.T, s reconcile.Store, r reconcile.Refund, state statemachine.State) reconcile.Refund {
	t.Helper()
	insertRefund(t, s, r)
	return walkRefundTo(t, s, r.ID, state)
}

func listRefunds(t *testing.T, s reconcile.Store, purchaseID string) []reconcile.Refund {
	t.Helper()
	var out []reconcile.Refund
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		out, err = tx.ListRefunds(t.Context(), purchaseID)
		return err
	})
	return out
}

func refundIDs(rs []reconcile.Refund) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func testRefund(t *testing.T, newStore func(*testing.T) *testStore) {
	parallel(t, "RoundTripEveryField", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		dup := mustInsertFinding(t, s, newFinding("pi_dup", reconcile.FindingDuplicateCharge, "pur_1", at(time.Hour)))
		zone := time.FixedZone("UTC-3", -3*3600)
		in := newRefund("ref_full", "pur_1", "pi_dup", 1250)
		in.FindingID = dup.ID
		in.Currency = "eur"
		in.Reason = "duplicate charge — \"twice\" ✓"
		in.Client = "shop — \"eu\" ✓"
		in.RequestedBy = "alice"
		in.Version = 4
		in.ProviderRequest.Reason = "duplicate"
		in.ParamsHash = in.ProviderRequest.Hash()
		in.ProviderRefundID = "re_1"
		in.FailureReason = "insufficient_funds"
		in.FirstAttemptAt = at(time.Second + time.Microsecond).In(zone)
		in.UncertainSince = at(2*time.Second + 999999*time.Microsecond).In(zone)
		in.EscalatedAt = at(3*time.Hour + 5*time.Microsecond).In(zone)
		in.EscalationReason = reconcile.EscalationUncertainTooLong
		in.SettledAt = at(4*time.Hour + 11*time.Microsecond).In(zone)
		in.CreatedAt = at(123456 * time.Microsecond).In(zone)
		in.UpdatedAt = at(time.Minute + 654321*time.Microsecond).In(zone)
		insertRefund(t, s, in)
		want := in
		for _, tm := range []*time.Time{&want.FirstAttemptAt, &want.UncertainSince, &want.EscalatedAt, &want.SettledAt, &want.CreatedAt, &want.UpdatedAt} {
			*tm = tm.UTC()
		}
		equal(t, "refund read back", getRefund(t, s, in.ID), want)
	})

	parallel(t, "RoundTripZeroFields", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		in := newRefund("ref_min", "pur_1", "pi_1", 1)
		in.Reason, in.RequestedBy = "", ""
		insertRefund(t, s, in)
		got := getRefund(t, s, in.ID)
		equal(t, "refund read back", got, in)
		if got.FindingID != 0 || got.Client != "" || got.ProviderRefundID != "" || got.Escalated() ||
			!got.FirstAttemptAt.IsZero() || !got.SettledAt.IsZero() || got.CreatedAt.Location() != time.UTC {
			t.Fatalf("unset fields came back set: %+v", got)
		}
	})

	parallel(t, "NotFound", func(t *testing.T) {
		s := newStore(t)
		wantNoRefund(t, s, "ref_missing")
	})

	// A refused insert leaves the transaction usable: the caller reads
	// on and commits what else it wrote.
	parallel(t, "Duplicates", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		first := newRefund("ref_1", "pur_1", "pi_1", 100)
		insertRefund(t, s, first)
		sameKey := newRefund("ref_2", "pur_1", "pi_1", 100)
		sameKey.ProviderKey = first.ProviderKey
		inTx(t, s, func(tx reconcile.Tx) error {
			ctx := t.Context()
			again := newRefund("ref_1", "pur_1", "pi_1", 5)
			wantErr(t, "a second refund ref_1", tx.InsertRefund(ctx, again), reconcile.ErrDuplicate)
			wantErr(t, "a refund with ref_1's provider key", tx.InsertRefund(ctx, sameKey), reconcile.ErrDuplicate)
			if _, err := tx.GetRefund(ctx, "ref_1"); err != nil {
				return fmt.Errorf("read after the refused inserts: %w", err)
			}
			return tx.InsertRefund(ctx, newRefund("ref_3", "pur_1", "pi_1", 100))
		})
		equal(t, "refunds of pur_1", refundIDs(listRefunds(t, s, "pur_1")), []string{"ref_1", "ref_3"})
		equal(t, "ref_1 after the refused duplicate", getRefund(t, s, "ref_1"), first)
	})

	parallel(t, "InsertOnlyInCreated", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		for _, state := range statemachine.Refund.States() {
			if state == statemachine.Created {
				continue
			}
			r := newRefund("ref_"+string(state), "pur_1", "pi_1", 1)
			r.State = state
			wantErr(t, "InsertRefund in state "+string(state), refundErr(t, s, r), reconcile.ErrForbiddenTransition)
			wantNoRefund(t, s, r.ID)
		}
	})

	parallel(t, "Invalid", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		for _, tc := range []struct {
			name    string
			mutate  func(r *reconcile.Refund)
			wantErr error
		}{
			{"no provider key", func(r *reconcile.Refund) { r.ProviderKey = "" }, reconcile.ErrInvalid},
			{"no provider request", func(r *reconcile.Refund) { r.ProviderRequest = nil }, reconcile.ErrInvalid},
			{"no params hash", func(r *reconcile.Refund) { r.ParamsHash = "" }, reconcile.ErrInvalid},
			{"zero amount", func(r *reconcile.Refund) { r.Amount = 0 }, reconcile.ErrInvalid},
			{"negative amount", func(r *reconcile.Refund) { r.Amount = -5 }, reconcile.ErrInvalid},
			{"no payment", func(r *reconcile.Refund) { r.PaymentID = "" }, reconcile.ErrInvalid},
			{"no created time", func(r *reconcile.Refund) { r.CreatedAt = time.Time{} }, reconcile.ErrInvalid},
			{"unknown purchase", func(r *reconcile.Refund) { r.PurchaseID = "pur_missing" }, reconcile.ErrNotFound},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := newRefund("ref_bad", "pur_1", "pi_1", 10)
				tc.mutate(&r)
				wantErr(t, "InsertRefund with "+tc.name, refundErr(t, s, r), tc.wantErr)
				wantNoRefund(t, s, r.ID)
			})
		}
	})

	parallel(t, "ListAndFind", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		paidPurchase(t, s, "pur_2", "pi_2", 1250)
		later := newRefund("ref_a", "pur_1", "pi_1", 10)
		later.CreatedAt = at(time.Hour)
		insertRefund(t, s, later)
		earlier := newRefund("ref_b", "pur_1", "pi_1", 10)
		earlier.CreatedAt = at(time.Minute)
		insertRefund(t, s, earlier)
		tied := newRefund("ref_c", "pur_1", "pi_1", 10) // same instant as ref_a: by id
		tied.CreatedAt = at(time.Hour)
		insertRefund(t, s, tied)
		other := newRefund("ref_d", "pur_2", "pi_2", 10)
		other.ProviderRefundID = "re_d"
		insertRefund(t, s, other)

		equal(t, "refunds of pur_1, oldest first", refundIDs(listRefunds(t, s, "pur_1")), []string{"ref_b", "ref_a", "ref_c"})
		equal(t, "refunds of pur_2", listRefunds(t, s, "pur_2"), []reconcile.Refund{other})
		if got := listRefunds(t, s, "pur_missing"); len(got) != 0 {
			t.Fatalf("ListRefunds(unknown purchase): %+v", got)
		}

		find := func(ids, providerIDs []string) []string {
			t.Helper()
			var out []reconcile.Refund
			inTx(t, s, func(tx reconcile.Tx) error {
				var err error
				out, err = tx.FindRefunds(t.Context(), ids, providerIDs)
				return err
			})
			return sorted(refundIDs(out))
		}
		equal(t, "FindRefunds by id and provider id", find([]string{"ref_a", "ref_d", "ref_missing", ""}, []string{"re_d", "re_missing", ""}), []string{"ref_a", "ref_d"})
		equal(t, "FindRefunds by provider id", find(nil, []string{"re_d"}), []string{"ref_d"})
		equal(t, "FindRefunds of nothing", len(find(nil, nil)), 0)
		equal(t, "FindRefunds of empty strings", len(find([]string{""}, []string{""})), 0)
	})
}

func testUpdateRefund(t *testing.T, newStore func(*testing.T) *testStore) {
	parallel(t, "WritesFieldsAndBumpsVersion", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		orig := newRefund("ref_1", "pur_1", "pi_1", 300)
		orig.Client = "shop"
		insertRefund(t, s, orig)

		r := getRefund(t, s, "ref_1")
		r.State = statemachine.Submitted
		r.ProviderRefundID = "re_1"
		r.FailureReason = "expired_or_canceled_card"
		r.FirstAttemptAt = at(time.Second)
		r.UncertainSince = at(2 * time.Second)
		r.EscalatedAt = at(3 * time.Second)
		r.EscalationReason = reconcile.EscalationAttemptsExhausted
		r.SettledAt = at(3*time.Second + 500*time.Microsecond)
		r.UpdatedAt = at(4 * time.Second)
		want := r
		want.Version = r.Version + 1
		// Fields fixed at insert are not the update's to change.
		r.Amount, r.PaymentID, r.Currency, r.Reason, r.Client, r.RequestedBy = 1, "pi_other", "usd", "r_x", "other", "bob"
		r.ProviderKey, r.ParamsHash, r.CreatedAt = "key_x", "hash_x", at(time.Hour)
		r.ProviderRequest = &provider.RefundRequest{IdempotencyKey: "key_x", Amount: 1}

		got := updateRefund(t, s, r, statemachine.Created)
		equal(t, "refund after update", got, want)

		// Fields can be cleared again, and a same-state write is no move.
		got.EscalatedAt, got.EscalationReason, got.UncertainSince = time.Time{}, "", time.Time{}
		got.SettledAt, got.FailureReason, got.ProviderRefundID = time.Time{}, "", ""
		got.UpdatedAt = at(5 * time.Second)
		want = got
		want.Version++
		equal(t, "refund after clearing", updateRefund(t, s, got, statemachine.Submitted), want)
	})

	parallel(t, "Conditional", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		r := refundIn(t, s, newRefund("ref_1", "pur_1", "pi_1", 100), statemachine.Submitted) // version 2

		for _, tc := range []struct {
			name    string
			mutate  func(r *reconcile.Refund) statemachine.State
			wantErr error
		}{
			{"stale version", func(r *reconcile.Refund) statemachine.State {
				r.Version--
				r.State = statemachine.Uncertain
				return statemachine.Submitted
			}, reconcile.ErrConflict},
			{"future version", func(r *reconcile.Refund) statemachine.State {
				r.Version++
				r.State = statemachine.Uncertain
				return statemachine.Submitted
			}, reconcile.ErrConflict},
			{"wrong from state", func(r *reconcile.Refund) statemachine.State {
				r.State = statemachine.Reconciling
				return statemachine.Uncertain
			}, reconcile.ErrConflict},
			{"unknown id", func(r *reconcile.Refund) statemachine.State {
				r.ID = "ref_missing"
				r.State = statemachine.Uncertain
				return statemachine.Submitted
			}, reconcile.ErrNotFound},
		} {
			t.Run(tc.name, func(t *testing.T) {
				q := r
				from := tc.mutate(&q)
				err := txErr(t, s, func(tx reconcile.Tx) error { return tx.UpdateRefund(t.Context(), q, from) })
				wantErr(t, "UpdateRefund", err, tc.wantErr)
				equal(t, "refund after the refused update", getRefund(t, s, "ref_1"), r)
			})
		}

		// The version the store wrote is the one the next write must use.
		r.State = statemachine.Failed
		if got := updateRefund(t, s, r, statemachine.Submitted); got.Version != r.Version+1 || got.State != statemachine.Failed {
			t.Fatalf("after update: version %d state %s, want %d failed", got.Version, got.State, r.Version+1)
		}
	})

	// A provider refund id belongs to one refund.
	parallel(t, "ProviderRefundIDIsUnique", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		a := refundIn(t, s, newRefund("ref_a", "pur_1", "pi_1", 100), statemachine.Submitted)
		a.ProviderRefundID = "re_1"
		updateRefund(t, s, a, statemachine.Submitted)
		b := refundIn(t, s, newRefund("ref_b", "pur_1", "pi_1", 100), statemachine.Submitted)
		b.ProviderRefundID = "re_1"
		err := txErr(t, s, func(tx reconcile.Tx) error { return tx.UpdateRefund(t.Context(), b, statemachine.Submitted) })
		wantErr(t, "a second refund with provider refund id re_1", err, reconcile.ErrDuplicate)
		b.ProviderRefundID = ""
		equal(t, "ref_b after the refused update", getRefund(t, s, "ref_b"), b)
	})
}

// testRefundTransitionGuard tries every move between two different
// states of a refund, and to the purchase's declined: the store must
// accept exactly statemachine.Refund.Transitions() and refuse every other
// with ErrForbiddenTransition, leaving the row as it was.
func testRefundTransitionGuard(t *testing.T, s *testStore) {
	paidPurchase(t, s, "pur_1", "pi_1", 1250)
	allowed := map[statemachine.Pair]bool{}
	for _, p := range statemachine.Refund.Transitions() {
		allowed[p] = true
	}
	for _, from := range statemachine.Refund.States() {
		for _, to := range append(statemachine.Refund.States(), statemachine.Declined) {
			if from == to {
				continue
			}
			move := statemachine.Pair{From: from, To: to}
			t.Run(string(from)+"_to_"+string(to), func(t *testing.T) {
				id := "ref_" + string(from) + "_" + string(to)
				before := refundIn(t, s, newRefund(id, "pur_1", "pi_1", 1), from)
				r := before
				r.State = to
				r.UpdatedAt = at(time.Hour)
				err := txErr(t, s, func(tx reconcile.Tx) error { return tx.UpdateRefund(t.Context(), r, from) })
				if allowed[move] {
					if err != nil {
						t.Fatalf("allowed move %s refused: %v", move, err)
					}
					if got := getRefund(t, s, id); got.State != to || got.Version != before.Version+1 {
						t.Fatalf("after %s: state %s version %d, want %s %d", move, got.State, got.Version, to, before.Version+1)
					}
					return
				}
				wantErr(t, "forbidden refund move "+move.String(), err, reconcile.ErrForbiddenTransition)
				equal(t, "refund after the refused move", getRefund(t, s, id), before)
			})
		}
	}
}

// testRefundLimits covers what the database refuses of a refund: one of
// a purchase that is not succeeded or of a payment that is not the
// purchase's (ErrNotRefundable), one whose finding does not name its
// payment and purchase (ErrNotRefundable), and refunds of one payment
// adding up to more than it took (ErrRefundExceeds), pending ones
// counted, failed ones not.
func testRefundLimits(t *testing.T, newStore func(*testing.T) *testStore) {
	parallel(t, "PurchaseNotSucceeded", func(t *testing.T) {
		s := newStore(t)
		for _, state := range statemachine.States {
			if state == statemachine.Succeeded {
				continue
			}
			id := "pur_" + string(state)
			insertPurchase(t, s, newPurchase(id))
			p := walkTo(t, s, id, state)
			if state != statemachine.Created {
				p.ProviderPaymentID = "pi_" + string(state)
				update(t, s, p, state)
			}
			r := newRefund("ref_"+string(state), id, "pi_"+string(state), 1)
			wantErr(t, "a refund of a purchase in "+string(state), refundErr(t, s, r), reconcile.ErrNotRefundable)
			wantNoRefund(t, s, r.ID)
		}
	})

	parallel(t, "NotThePurchasesPayment", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		paidPurchase(t, s, "pur_2", "pi_2", 1250)
		wantErr(t, "a refund of another payment", refundErr(t, s, newRefund("ref_1", "pur_1", "pi_other", 1)), reconcile.ErrNotRefundable)
		wantErr(t, "a refund of another purchase's payment", refundErr(t, s, newRefund("ref_2", "pur_1", "pi_2", 1)), reconcile.ErrNotRefundable)
		// Succeeded, but the books never learnt its payment id.
		insertPurchase(t, s, newPurchase("pur_nopay"))
		walkTo(t, s, "pur_nopay", statemachine.Succeeded)
		wantErr(t, "a refund of a purchase without a payment id", refundErr(t, s, newRefund("ref_3", "pur_nopay", "pi_1", 1)), reconcile.ErrNotRefundable)
		for _, id := range []string{"ref_1", "ref_2", "ref_3"} {
			wantNoRefund(t, s, id)
		}
		insertRefund(t, s, newRefund("ref_ok", "pur_1", "pi_1", 1))
	})

	parallel(t, "FindingMismatch", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		paidPurchase(t, s, "pur_2", "pi_2", 1250)
		dup := mustInsertFinding(t, s, newFinding("pi_dup", reconcile.FindingDuplicateCharge, "pur_1", at(time.Hour)))
		orphanRefund := mustInsertFinding(t, s, newFinding("re_orphan", reconcile.FindingOrphanRefund, "pur_1", at(time.Hour)))
		for _, tc := range []struct {
			name string
			r    reconcile.Refund
		}{
			{"another payment than the finding's", func() reconcile.Refund {
				r := newRefund("ref_1", "pur_1", "pi_other", 1)
				r.FindingID = dup.ID
				return r
			}()},
			{"the purchase's own payment under the finding", func() reconcile.Refund {
				r := newRefund("ref_2", "pur_1", "pi_1", 1)
				r.FindingID = dup.ID
				return r
			}()},
			{"another purchase than the finding's", func() reconcile.Refund {
				r := newRefund("ref_3", "pur_2", "pi_dup", 1)
				r.FindingID = dup.ID
				return r
			}()},
			{"an unknown finding", func() reconcile.Refund {
				r := newRefund("ref_4", "pur_1", "pi_dup", 1)
				r.FindingID = dup.ID + orphanRefund.ID + 100
				return r
			}()},
			{"a finding about a refund, not a charge", func() reconcile.Refund {
				r := newRefund("ref_5", "pur_1", "re_orphan", 1)
				r.FindingID = orphanRefund.ID
				return r
			}()},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wantErr(t, "a refund of "+tc.name, refundErr(t, s, tc.r), reconcile.ErrNotRefundable)
				wantNoRefund(t, s, tc.r.ID)
			})
		}
	})

	parallel(t, "Exceeds", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		wantErr(t, "a refund of more than the payment", refundErr(t, s, newRefund("ref_over", "pur_1", "pi_1", 1251)), reconcile.ErrRefundExceeds)
		wantNoRefund(t, s, "ref_over")

		// Pending refunds count: 700 created, then 500 submitted.
		insertRefund(t, s, newRefund("ref_a", "pur_1", "pi_1", 700))
		wantErr(t, "700 + 600 of 1250", refundErr(t, s, newRefund("ref_b", "pur_1", "pi_1", 600)), reconcile.ErrRefundExceeds)
		refundIn(t, s, newRefund("ref_c", "pur_1", "pi_1", 500), statemachine.Uncertain)
		wantErr(t, "700 + 500 + 51 of 1250", refundErr(t, s, newRefund("ref_d", "pur_1", "pi_1", 51)), reconcile.ErrRefundExceeds)
		insertRefund(t, s, newRefund("ref_e", "pur_1", "pi_1", 50)) // exactly the amount
		wantErr(t, "a refund of 1 past the amount", refundErr(t, s, newRefund("ref_f", "pur_1", "pi_1", 1)), reconcile.ErrRefundExceeds)

		// A failed refund returned nothing: it no longer counts. A
		// succeeded one does.
		walkRefundTo(t, s, "ref_a", statemachine.Failed)
		walkRefundTo(t, s, "ref_c", statemachine.Succeeded)
		insertRefund(t, s, newRefund("ref_g", "pur_1", "pi_1", 700))
		wantErr(t, "500 + 50 + 700 + 1 of 1250", refundErr(t, s, newRefund("ref_h", "pur_1", "pi_1", 1)), reconcile.ErrRefundExceeds)
		for _, id := range []string{"ref_b", "ref_d", "ref_f", "ref_h"} {
			wantNoRefund(t, s, id)
		}
		equal(t, "refunds of pur_1", sorted(refundIDs(listRefunds(t, s, "pur_1"))), []string{"ref_a", "ref_c", "ref_e", "ref_g"})
	})

	// An operator's "refund this charge": a duplicate charge the audit
	// found is refunded under its finding, up to the finding's amount,
	// beside the purchase's own payment and its refunds, whatever the
	// purchase's state.
	parallel(t, "DuplicateChargeFinding", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		insertRefund(t, s, newRefund("ref_own", "pur_1", "pi_1", 1250))
		f := newFinding("pi_dup", reconcile.FindingDuplicateCharge, "pur_1", at(time.Hour))
		f.Amount = 1000
		dup := mustInsertFinding(t, s, f)
		over := newRefund("ref_dup_over", "pur_1", "pi_dup", 1001)
		over.FindingID = dup.ID
		wantErr(t, "a refund of more than the finding's payment", refundErr(t, s, over), reconcile.ErrRefundExceeds)
		r := newRefund("ref_dup", "pur_1", "pi_dup", 1000)
		r.FindingID, r.RequestedBy = dup.ID, "alice"
		insertRefund(t, s, r)
		again := newRefund("ref_dup_2", "pur_1", "pi_dup", 1)
		again.FindingID = dup.ID
		wantErr(t, "a second refund of the duplicate charge", refundErr(t, s, again), reconcile.ErrRefundExceeds)

		// The purchase's state does not matter for a finding's payment:
		// its outcome may still be open while the provider holds two
		// charges.
		insertPurchase(t, s, newPurchase("pur_open"))
		walkTo(t, s, "pur_open", statemachine.Uncertain)
		open := mustInsertFinding(t, s, newFinding("pi_dup_open", reconcile.FindingDuplicateCharge, "pur_open", at(time.Hour)))
		r = newRefund("ref_open", "pur_open", "pi_dup_open", 1250)
		r.FindingID = open.ID
		insertRefund(t, s, r)
		equal(t, "refund of an uncertain purchase's duplicate charge", getRefund(t, s, "ref_open").FindingID, open.ID)
	})
}

// testConcurrentRefunds races transactions that each insert a refund of
// the same payment, each alone within its amount, any two together past
// it: exactly one must commit, the others must be refused with
// ErrRefundExceeds. The store serializes them (an advisory lock on the
// payment on PostgreSQL, the single writer on SQLite); without that, two
// could each read the sum without the other's refund and both commit.
func testConcurrentRefunds(t *testing.T, s *testStore) {
	paidPurchase(t, s, "pur_1", "pi_1", 1250)
	dup := mustInsertFinding(t, s, newFinding("pi_dup", reconcile.FindingDuplicateCharge, "pur_1", at(time.Hour)))
	for round, payment := range []string{"pi_1", "pi_dup"} {
		got := race(t, s, racers, func(tx reconcile.Tx, i int) (bool, error) {
			r := newRefund(fmt.Sprintf("ref_%d_%d", round, i), "pur_1", payment, 700)
			if payment == "pi_dup" {
				r.FindingID = dup.ID
			}
			err := tx.InsertRefund(t.Context(), r)
			if errors.Is(err, reconcile.ErrRefundExceeds) {
				return false, nil
			}
			return err == nil, err
		})
		won := winners(got)
		if len(won) != 1 {
			t.Fatalf("%d concurrent refunds of 700 of payment %s (1250): %v committed, want exactly one", racers, payment, won)
		}
		var n int
		for _, r := range listRefunds(t, s, "pur_1") {
			if r.PaymentID == payment {
				n++
				if want := fmt.Sprintf("ref_%d_%d", round, won[0]); r.ID != want {
					t.Fatalf("refund %s of %s stored, want only the winner's, %s", r.ID, payment, want)
				}
			}
		}
		if n != 1 {
			t.Fatalf("%d refunds of %s stored, want 1", n, payment)
		}
	}
}

// refundJob inserts the job of refund r, due at runAt.
func refundJob(t *testing.T, s reconcile.Store, r reconcile.Refund, runAt time.Time) {
	t.Helper()
	inTx(t, s, func(tx reconcile.Tx) error {
		return tx.InsertJob(t.Context(), reconcile.Job{Kind: reconcile.JobRefund, PurchaseID: r.PurchaseID, RefundID: r.ID, RunAt: runAt})
	})
}

// refundWithJob inserts refund id of purchase purchaseID's payment
// paymentID and its job, due at runAt.
func refundWithJob(t *testing.T, s reconcile.Store, id, purchaseID, paymentID string, runAt time.Time) reconcile.Refund {
	t.Helper()
	r := newRefund(id, purchaseID, paymentID, 10)
	insertRefund(t, s, r)
	refundJob(t, s, r, runAt)
	return r
}

func testRefundJobs(t *testing.T, newStore func(*testing.T) *testStore) {
	const leaseFor = 30 * time.Second

	parallel(t, "InsertGet", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		paidPurchase(t, s, "pur_2", "pi_2", 1250)
		insertJob(t, s, "pur_1", at(time.Hour))
		r := refundWithJob(t, s, "ref_1", "pur_1", "pi_1", at(time.Minute+3*time.Microsecond))
		equal(t, "refund job", getJob(t, s, "ref_1"), reconcile.Job{
			Kind: reconcile.JobRefund, PurchaseID: "pur_1", RefundID: "ref_1", RunAt: at(time.Minute + 3*time.Microsecond),
		})
		equal(t, "the purchase's job beside it", getJob(t, s, "pur_1"), reconcile.Job{Kind: reconcile.JobPurchase, PurchaseID: "pur_1", RunAt: at(time.Hour)})

		insertRefund(t, s, newRefund("ref_2", "pur_2", "pi_2", 10))
		for _, tc := range []struct {
			name    string
			job     reconcile.Job
			wantErr error
		}{
			{"a second job of ref_1", reconcile.Job{Kind: reconcile.JobRefund, PurchaseID: "pur_1", RefundID: "ref_1", RunAt: base}, reconcile.ErrDuplicate},
			{"the job of an unknown refund", reconcile.Job{Kind: reconcile.JobRefund, PurchaseID: "pur_1", RefundID: "ref_missing", RunAt: base}, reconcile.ErrNotFound},
			{"the job of another purchase's refund", reconcile.Job{Kind: reconcile.JobRefund, PurchaseID: "pur_1", RefundID: "ref_2", RunAt: base}, reconcile.ErrNotFound},
			{"a refund's job naming no refund", reconcile.Job{Kind: reconcile.JobRefund, PurchaseID: "pur_1", RunAt: base}, reconcile.ErrInvalid},
			{"a purchase's job naming a refund", reconcile.Job{Kind: reconcile.JobPurchase, PurchaseID: "pur_2", RefundID: "ref_2", RunAt: base}, reconcile.ErrInvalid},
			{"a job of an unknown kind", reconcile.Job{Kind: "payout", PurchaseID: "pur_2", RunAt: base}, reconcile.ErrInvalid},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := txErr(t, s, func(tx reconcile.Tx) error { return tx.InsertJob(t.Context(), tc.job) })
				wantErr(t, "InsertJob of "+tc.name, err, tc.wantErr)
			})
		}
		equal(t, "ref_1's job after the refused inserts", getJob(t, s, r.ID).RunAt, at(time.Minute+3*time.Microsecond))
		err := txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetJob(t.Context(), "ref_2"); return err })
		wantErr(t, "GetJob of a refund without a job", err, reconcile.ErrNotFound)
	})

	// One claim takes both kinds, in run_at order, each lease with what
	// it moves read by the claim (checkLeaseNow compares them with the
	// rows).
	parallel(t, "ClaimedAlongsidePurchases", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		paidPurchase(t, s, "pur_2", "pi_2", 1250)
		insertJob(t, s, "pur_1", at(2*time.Second))
		insertJob(t, s, "pur_2", at(4*time.Second))
		refundWithJob(t, s, "ref_a", "pur_1", "pi_1", at(time.Second))
		refundWithJob(t, s, "ref_b", "pur_1", "pi_1", at(3*time.Second))
		refundWithJob(t, s, "ref_c", "pur_2", "pi_2", at(time.Minute+10*time.Second)) // not due yet
		now := at(time.Minute)
		got := claim(t, s, "w1", 10, now, leaseFor)
		lease := func(kind reconcile.JobKind, purchaseID, refundID string) reconcile.Lease {
			return reconcile.Lease{Kind: kind, PurchaseID: purchaseID, RefundID: refundID, Owner: "w1", Token: 1, ExpiresAt: now.Add(leaseFor), Checks: 1, Now: now}
		}
		equal(t, "leases", got, []reconcile.Lease{
			lease(reconcile.JobRefund, "pur_1", "ref_a"),
			lease(reconcile.JobPurchase, "pur_1", ""),
			lease(reconcile.JobRefund, "pur_1", "ref_b"),
			lease(reconcile.JobPurchase, "pur_2", ""),
		})
		equal(t, "ids", ids(got), []string{"ref_a", "pur_1", "ref_b", "pur_2"})
		for _, l := range got {
			if err := checkLease(t, s, l, now); err != nil {
				t.Fatalf("CheckLease of %s: %v", l.JobID(), err)
			}
		}
		// Due before w1's leases expire: alone.
		equal(t, "the refund job due later", ids(claim(t, s, "w2", 10, at(time.Minute+10*time.Second), leaseFor)), []string{"ref_c"})
	})

	// A refund's job is leased and fenced as a purchase's: a lease taken
	// over is lost, rescheduling releases it, completing ends it,
	// reopening brings it back, the rescue sweep and a shutdown release
	// take it too.
	parallel(t, "Fenced", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		refundWithJob(t, s, "ref_1", "pur_1", "pi_1", base)
		first := claimOne(t, s, "w1", "ref_1", base, leaseFor)
		if first.Kind != reconcile.JobRefund || first.RefundID != "ref_1" || first.PurchaseID != "pur_1" || first.Token != 1 {
			t.Fatalf("first claim of ref_1's job: %+v", first)
		}

		// w1 stalls; the rescue sweep takes the job over.
		s.clock.Set(first.ExpiresAt)
		rescued, err := s.ClaimExpiredJobs(t.Context(), "w2", 10, leaseFor)
		if err != nil {
			t.Fatal(err)
		}
		checkLeaseNow(t, s, rescued, first.ExpiresAt)
		equal(t, "rescue lease", rescued, []reconcile.Lease{{
			Kind: reconcile.JobRefund, PurchaseID: "pur_1", RefundID: "ref_1", Owner: "w2", Token: 2,
			ExpiresAt: first.ExpiresAt.Add(leaseFor), TakenOver: true, Checks: 2, Now: first.ExpiresAt,
		}})
		second := rescued[0]
		wantErr(t, "CheckLease of the stale lease", checkLease(t, s, first, first.ExpiresAt.Add(-time.Second)), reconcile.ErrLeaseLost)
		// The stale worker's writes roll back with its lease check.
		err = txErr(t, s, func(tx reconcile.Tx) error {
			r, err := tx.GetRefund(t.Context(), "ref_1")
			if err != nil {
				return err
			}
			r.State = statemachine.Submitted
			if err := tx.UpdateRefund(t.Context(), r, statemachine.Created); err != nil {
				return err
			}
			if err := tx.RescheduleJob(t.Context(), "ref_1", at(time.Hour)); err != nil {
				return err
			}
			return tx.CheckLease(t.Context(), first)
		})
		wantErr(t, "the stale worker's transaction", err, reconcile.ErrLeaseLost)
		if r := getRefund(t, s, "ref_1"); r.State != statemachine.Created || r.Version != 1 {
			t.Fatalf("refund written under a stale lease: %+v", r)
		}

		// The new holder reschedules: the lease is released.
		runAt := at(10 * time.Minute)
		inTx(t, s, func(tx reconcile.Tx) error {
			if err := tx.CheckLease(t.Context(), second); err != nil {
				return err
			}
			return tx.RescheduleJob(t.Context(), "ref_1", runAt)
		})
		equal(t, "rescheduled refund job", getJob(t, s, "ref_1"), reconcile.Job{
			Kind: reconcile.JobRefund, PurchaseID: "pur_1", RefundID: "ref_1", RunAt: runAt, LeaseToken: 2, Checks: 2,
		})
		if got := claim(t, s, "w3", 10, runAt.Add(-time.Microsecond), leaseFor); len(got) != 0 {
			t.Fatalf("claimed %v before the refund job's new run_at", ids(got))
		}
		third := claimOne(t, s, "w3", "ref_1", runAt, leaseFor)
		if third.TakenOver || third.Token != 3 {
			t.Fatalf("claim after reschedule: %+v, want token 3, not taken over", third)
		}

		// A shutdown releases it.
		s.clock.Set(runAt.Add(time.Second))
		if n, err := s.ReleaseLeases(t.Context(), "w3"); err != nil || n != 1 {
			t.Fatalf("ReleaseLeases(w3) = %d, %v; want 1, nil", n, err)
		}
		wantErr(t, "CheckLease of a released lease", checkLease(t, s, third, runAt.Add(time.Second)), reconcile.ErrLeaseLost)
		fourth := claimOne(t, s, "w4", "ref_1", runAt.Add(time.Second), leaseFor)

		// Done: never claimed again, until reopened.
		inTx(t, s, func(tx reconcile.Tx) error {
			if err := tx.CheckLease(t.Context(), fourth); err != nil {
				return err
			}
			return tx.CompleteJob(t.Context(), "ref_1", runAt.Add(2*time.Second))
		})
		if got := claim(t, s, "w4", 10, at(1000*time.Hour), leaseFor); len(got) != 0 {
			t.Fatalf("claimed done jobs %v", ids(got))
		}
		reopenAt := at(1001 * time.Hour)
		inTx(t, s, func(tx reconcile.Tx) error { return tx.ReopenJob(t.Context(), "ref_1", reopenAt) })
		if l := claimOne(t, s, "w5", "ref_1", reopenAt, leaseFor); l.Token != 5 || l.TakenOver {
			t.Fatalf("claim of the reopened refund job: %+v, want token 5, not taken over", l)
		}
	})

	// A purchase's job and its refunds' jobs are separate rows: each is
	// completed, rescheduled and claimed without touching the others, and
	// ClaimJob(purchase) takes the purchase's alone.
	parallel(t, "PurchaseAndRefundJobsApart", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		insertJob(t, s, "pur_1", base)
		refundWithJob(t, s, "ref_1", "pur_1", "pi_1", base)
		refundWithJob(t, s, "ref_2", "pur_1", "pi_1", base)
		leases := claim(t, s, "w1", 10, base, leaseFor)
		equal(t, "claimed", ids(leases), []string{"pur_1", "ref_1", "ref_2"})
		byID := map[string]reconcile.Lease{}
		for _, l := range leases {
			byID[l.JobID()] = l
		}

		// The purchase's job completes; its refunds' stay leased.
		inTx(t, s, func(tx reconcile.Tx) error {
			if err := tx.CheckLease(t.Context(), byID["pur_1"]); err != nil {
				return err
			}
			return tx.CompleteJob(t.Context(), "pur_1", at(time.Second))
		})
		for _, id := range []string{"ref_1", "ref_2"} {
			if err := checkLease(t, s, byID[id], at(time.Second)); err != nil {
				t.Fatalf("%s's lease after the purchase's job completed: %v", id, err)
			}
		}
		// A refund's job completes; the other one's and the purchase's
		// stay as they were.
		inTx(t, s, func(tx reconcile.Tx) error {
			if err := tx.CheckLease(t.Context(), byID["ref_1"]); err != nil {
				return err
			}
			return tx.CompleteJob(t.Context(), "ref_1", at(2*time.Second))
		})
		equal(t, "the purchase's job", getJob(t, s, "pur_1"), reconcile.Job{
			Kind: reconcile.JobPurchase, PurchaseID: "pur_1", RunAt: base, LeaseToken: 1, Checks: 1, DoneAt: at(time.Second),
		})
		if err := checkLease(t, s, byID["ref_2"], at(2*time.Second)); err != nil {
			t.Fatalf("ref_2's lease after ref_1's job completed: %v", err)
		}
		inTx(t, s, func(tx reconcile.Tx) error {
			return tx.RescheduleJob(t.Context(), "ref_2", at(time.Minute))
		})
		equal(t, "claim after the reschedule", ids(claim(t, s, "w2", 10, at(time.Minute), leaseFor)), []string{"ref_2"})

		// ClaimJob(pur_1) is the purchase's job: done, whatever its
		// refunds' jobs are.
		s.clock.Set(at(2 * time.Minute))
		_, err := s.ClaimJob(t.Context(), "pur_1", "operator", leaseFor)
		wantErr(t, "ClaimJob of a purchase whose job is done", err, reconcile.ErrConflict)
		_, err = s.ClaimJob(t.Context(), "ref_2", "operator", leaseFor)
		wantErr(t, "ClaimJob of a refund id", err, reconcile.ErrNotFound)
		inTx(t, s, func(tx reconcile.Tx) error { return tx.ReopenJob(t.Context(), "pur_1", at(time.Hour)) })
		l, err := s.ClaimJob(t.Context(), "pur_1", "operator", leaseFor)
		if err != nil || l.Kind != reconcile.JobPurchase || l.PurchaseID != "pur_1" || l.RefundID != "" || l.Refund != nil || l.Purchase == nil {
			t.Fatalf("ClaimJob(pur_1) of the reopened job = %+v, %v; want the purchase's job", l, err)
		}
		equal(t, "ref_1's job after all that", getJob(t, s, "ref_1").DoneAt, at(2*time.Second))
	})

	// ApplyMoves moves purchases only: under its purchase job's lease it
	// completes that job alone, and a batch fenced by a refund job's lease
	// is refused whole.
	parallel(t, "ApplyMovesLeavesRefundJobs", func(t *testing.T) {
		s := newStore(t)
		insertPurchase(t, s, newPurchase("pur_1"))
		p := walkTo(t, s, "pur_1", statemachine.Submitted)
		p.ProviderPaymentID = "pi_1"
		p = update(t, s, p, statemachine.Submitted)
		insertJob(t, s, "pur_1", base)
		// A refund of the purchase's duplicate charge, while its own
		// outcome is open.
		dup := mustInsertFinding(t, s, newFinding("pi_dup", reconcile.FindingDuplicateCharge, "pur_1", base))
		r := newRefund("ref_1", "pur_1", "pi_dup", 10)
		r.FindingID = dup.ID
		insertRefund(t, s, r)
		refundJob(t, s, r, base)
		leases := claim(t, s, "w1", 10, base, leaseFor)
		byID := map[string]reconcile.Lease{}
		for _, l := range leases {
			byID[l.JobID()] = l
		}

		bad := move(byID["ref_1"], p, statemachine.Succeeded, at(time.Second))
		err := txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.ApplyMoves(t.Context(), []reconcile.Move{bad}); return err })
		wantErr(t, "ApplyMoves under a refund job's lease", err, reconcile.ErrInvalid)

		mv := move(byID["pur_1"], p, statemachine.Succeeded, at(time.Second))
		mv.Job, mv.RunAt = reconcile.JobComplete, at(time.Second)
		equal(t, "applied", applyMoves(t, s, []reconcile.Move{mv}), []bool{true})
		if got := getJob(t, s, "pur_1"); got.DoneAt.IsZero() {
			t.Fatalf("the purchase's job after its move: %+v, want done", got)
		}
		if err := checkLease(t, s, byID["ref_1"], at(time.Second)); err != nil {
			t.Fatalf("the refund job's lease after the purchase's move: %v", err)
		}
		equal(t, "the refund's transitions after the purchase's move", len(refundTransitionsOf(t, s, "ref_1")), 0)
	})
}

func refundTransitionsOf(t *testing.T, s reconcile.Store, refundID string) []reconcile.TransitionRecord {
	t.Helper()
	var got []reconcile.TransitionRecord
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		got, err = tx.ListRefundTransitions(t.Context(), refundID)
		return err
	})
	return got
}

func refundAttemptsOf(t *testing.T, s reconcile.Store, refundID string) []reconcile.Attempt {
	t.Helper()
	var got []reconcile.Attempt
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		got, err = tx.ListRefundAttempts(t.Context(), refundID)
		return err
	})
	return got
}

// withIDs fails unless got has rows with positive, increasing ids, and
// returns want with got's ids, for comparing a list with what was written.
func withIDs[T any](t *testing.T, what string, got, want []T, id func(*T) *int64) []T {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d: %+v", what, len(got), len(want), got)
	}
	out := make([]T, len(want))
	for i := range got {
		g := *id(&got[i])
		if g <= 0 || (i > 0 && g <= *id(&got[i-1])) {
			t.Fatalf("%s: row %d has id %d, want positive and increasing", what, i, g)
		}
		out[i] = want[i]
		*id(&out[i]) = g
	}
	return out
}

// testRefundAuditTrail: a refund's transitions and provider calls are
// rows of the audit with its refund id, listed apart from its purchase's,
// held to the refund machine and to the refund's purchase.
func testRefundAuditTrail(t *testing.T, s *testStore) {
	paidPurchase(t, s, "pur_1", "pi_1", 1250)
	paidPurchase(t, s, "pur_2", "pi_2", 1250)
	insertRefund(t, s, newRefund("ref_1", "pur_1", "pi_1", 100))
	insertRefund(t, s, newRefund("ref_2", "pur_1", "pi_1", 100))
	insertRefund(t, s, newRefund("ref_other", "pur_2", "pi_2", 100))

	purchaseRows := []reconcile.TransitionRecord{
		{PurchaseID: "pur_1", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, Actor: "w1", LeaseToken: 1, At: at(time.Second)},
		{PurchaseID: "pur_1", From: statemachine.Submitted, To: statemachine.Succeeded, Cause: reconcile.CauseSubmitResponse, Actor: "w1", LeaseToken: 1, At: at(2 * time.Second)},
	}
	refundRows := []reconcile.TransitionRecord{
		{PurchaseID: "pur_1", RefundID: "ref_1", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, Actor: "w2", LeaseToken: 3, At: at(time.Minute)},
		{PurchaseID: "pur_1", RefundID: "ref_2", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, Actor: "w2", LeaseToken: 1, At: at(time.Minute)},
		{PurchaseID: "pur_1", RefundID: "ref_1", From: statemachine.Submitted, To: statemachine.Uncertain, Cause: reconcile.CauseSubmitResponse, Evidence: "timeout after 10s", Actor: "w2", LeaseToken: 3, At: at(time.Minute + 10*time.Second)},
		{PurchaseID: "pur_1", RefundID: "ref_1", From: statemachine.Uncertain, To: statemachine.Reconciling, Cause: reconcile.CauseLeaseLost, Actor: "w3", LeaseToken: 4, At: at(2 * time.Minute)},
		{PurchaseID: "pur_1", RefundID: "ref_1", From: statemachine.Reconciling, To: statemachine.Failed, Cause: reconcile.CauseStatusQuery, Evidence: "re_1: failed (expired_or_canceled_card)", Actor: "w3", LeaseToken: 4, At: at(2*time.Minute + 7*time.Microsecond).In(time.FixedZone("x", 3600))},
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, r := range append(append([]reconcile.TransitionRecord{purchaseRows[0]}, refundRows...), purchaseRows[1]) {
			if err := tx.InsertTransition(t.Context(), r); err != nil {
				return err
			}
		}
		return nil
	})
	transitionID := func(r *reconcile.TransitionRecord) *int64 { return &r.ID }
	got := transitionsOf(t, s, "pur_1")
	equal(t, "the purchase's own transitions", got, withIDs(t, "ListTransitions(pur_1)", got, purchaseRows, transitionID))
	var want []reconcile.TransitionRecord
	for _, r := range refundRows {
		if r.RefundID == "ref_1" {
			r.At = r.At.UTC()
			want = append(want, r)
		}
	}
	got = refundTransitionsOf(t, s, "ref_1")
	equal(t, "ref_1's transitions", got, withIDs(t, "ListRefundTransitions(ref_1)", got, want, transitionID))
	equal(t, "ref_2's transitions", len(refundTransitionsOf(t, s, "ref_2")), 1)
	equal(t, "an unknown refund's transitions", len(refundTransitionsOf(t, s, "ref_missing")), 0)

	// A refund's row holds a refund's move, a purchase's row a
	// purchase's; a refund's row names its refund's purchase.
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, tc := range []struct {
			name    string
			r       reconcile.TransitionRecord
			wantErr error
		}{
			{"a purchase's move in a refund's row", reconcile.TransitionRecord{PurchaseID: "pur_1", RefundID: "ref_2", From: statemachine.Submitted, To: statemachine.Declined}, reconcile.ErrForbiddenTransition},
			{"a refund's move in a purchase's row", reconcile.TransitionRecord{PurchaseID: "pur_1", From: statemachine.Submitted, To: statemachine.Failed}, reconcile.ErrForbiddenTransition},
			{"a move out of a final refund state", reconcile.TransitionRecord{PurchaseID: "pur_1", RefundID: "ref_2", From: statemachine.Failed, To: statemachine.Submitted}, reconcile.ErrForbiddenTransition},
			{"a move past submitted", reconcile.TransitionRecord{PurchaseID: "pur_1", RefundID: "ref_2", From: statemachine.Created, To: statemachine.Succeeded}, reconcile.ErrForbiddenTransition},
			{"an unknown refund", reconcile.TransitionRecord{PurchaseID: "pur_1", RefundID: "ref_missing", From: statemachine.Created, To: statemachine.Submitted}, reconcile.ErrNotFound},
			{"another purchase's refund", reconcile.TransitionRecord{PurchaseID: "pur_1", RefundID: "ref_other", From: statemachine.Created, To: statemachine.Submitted}, reconcile.ErrNotFound},
		} {
			tc.r.Cause, tc.r.At = reconcile.CauseOperator, base
			wantErr(t, "InsertTransition of "+tc.name, tx.InsertTransition(t.Context(), tc.r), tc.wantErr)
		}
		return nil
	})
	equal(t, "ref_2's transitions after the refused ones", len(refundTransitionsOf(t, s, "ref_2")), 1)
	equal(t, "pur_1's transitions after the refused ones", len(transitionsOf(t, s, "pur_1")), 2)

	purchaseCalls := []reconcile.Attempt{
		{PurchaseID: "pur_1", Op: provider.OpCreate, Key: reconcile.ProviderKeyFor("pur_1"), Outcome: provider.Succeeded, PaymentID: "pi_1", Status: "succeeded", Latency: time.Second, Actor: "w1", LeaseToken: 1, Applied: true, At: at(time.Second)},
	}
	refundCalls := []reconcile.Attempt{
		{PurchaseID: "pur_1", RefundID: "ref_1", Op: provider.OpRefundCreate, Key: reconcile.RefundKeyFor("ref_1"), Outcome: provider.Unknown, PaymentID: "pi_1", Latency: 10*time.Second + time.Microsecond, Error: "context deadline exceeded", Actor: "w2", LeaseToken: 3, Applied: true, At: at(time.Minute)},
		{PurchaseID: "pur_1", RefundID: "ref_1", Op: provider.OpRefundList, Outcome: provider.NotFound, PaymentID: "pi_1", Latency: 1234567 * time.Microsecond, Actor: "w3", LeaseToken: 4, Applied: false, Note: "listing lags", At: at(2 * time.Minute)},
		{PurchaseID: "pur_1", RefundID: "ref_1", Op: provider.OpRefundGet, Outcome: provider.Failed, PaymentID: "re_1", Status: "failed", Actor: "w3", LeaseToken: 4, Applied: true, At: at(2 * time.Minute)},
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, a := range append([]reconcile.Attempt{refundCalls[0], purchaseCalls[0]}, refundCalls[1:]...) {
			if err := tx.InsertAttempt(t.Context(), a); err != nil {
				return err
			}
		}
		return nil
	})
	attemptID := func(a *reconcile.Attempt) *int64 { return &a.ID }
	gotCalls := attemptsOf(t, s, "pur_1")
	equal(t, "the purchase's own calls", gotCalls, withIDs(t, "ListAttempts(pur_1)", gotCalls, purchaseCalls, attemptID))
	gotCalls = refundAttemptsOf(t, s, "ref_1")
	equal(t, "ref_1's calls", gotCalls, withIDs(t, "ListRefundAttempts(ref_1)", gotCalls, refundCalls, attemptID))
	equal(t, "ref_2's calls", len(refundAttemptsOf(t, s, "ref_2")), 0)
	err := txErr(t, s, func(tx reconcile.Tx) error {
		return tx.InsertAttempt(t.Context(), reconcile.Attempt{PurchaseID: "pur_1", RefundID: "ref_other", Op: provider.OpRefundGet, Outcome: provider.NotFound, At: base})
	})
	wantErr(t, "InsertAttempt of another purchase's refund", err, reconcile.ErrNotFound)
	err = txErr(t, s, func(tx reconcile.Tx) error {
		return tx.InsertAttempt(t.Context(), reconcile.Attempt{PurchaseID: "pur_missing", RefundID: "ref_1", Op: provider.OpRefundGet, Outcome: provider.NotFound, At: base})
	})
	wantErr(t, "InsertAttempt of an unknown purchase", err, reconcile.ErrNotFound)

	// Operator actions about a refund carry it, and are listed with the
	// purchase's; "refund" (an operator's "refund this charge") is one.
	actions := []reconcile.OperatorAction{
		{PurchaseID: "pur_1", Operator: "alice", Action: "note", Evidence: "customer called", At: at(time.Hour)},
		{PurchaseID: "pur_1", RefundID: "ref_2", Operator: "alice", Action: "refund", Saw: "provider: pi_dup succeeded", Did: "refund ref_2 of 100 created", Evidence: "finding 7", At: at(time.Hour + time.Microsecond)},
		{PurchaseID: "pur_1", RefundID: "ref_1", Operator: "bob", Action: "resolve", Saw: "provider: re_1 failed", Did: "reconciling→failed", Evidence: "dashboard", At: at(2 * time.Hour)},
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, a := range actions {
			if err := tx.InsertOperatorAction(t.Context(), a); err != nil {
				return err
			}
		}
		return nil
	})
	var gotActions []reconcile.OperatorAction
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		gotActions, err = tx.ListOperatorActions(t.Context(), "pur_1")
		return err
	})
	equal(t, "pur_1's operator actions", gotActions, withIDs(t, "ListOperatorActions(pur_1)", gotActions, actions, func(a *reconcile.OperatorAction) *int64 { return &a.ID }))
	err = txErr(t, s, func(tx reconcile.Tx) error {
		return tx.InsertOperatorAction(t.Context(), reconcile.OperatorAction{PurchaseID: "pur_1", RefundID: "ref_other", Operator: "alice", Action: "note", At: base})
	})
	wantErr(t, "InsertOperatorAction of another purchase's refund", err, reconcile.ErrNotFound)
}

// testRefundReads covers the reads of the operator list, the escalation
// sweep and the metrics.
func testRefundReads(t *testing.T, newStore func(*testing.T) *testStore) {
	// withRefund inserts refund id of pur_1, walks it to state, then sets
	// its UncertainSince to base+since (none when since < 0) and, when
	// escalatedAt > 0, escalates it at base+escalatedAt.
	withRefund := func(t *testing.T, s reconcile.Store, id string, state statemachine.State, since time.Duration, escalatedAt time.Duration) reconcile.Refund {
		t.Helper()
		r := refundIn(t, s, newRefund(id, "pur_1", "pi_1", 1), state)
		if since >= 0 {
			r.UncertainSince = at(since)
		}
		if escalatedAt > 0 {
			r.EscalatedAt, r.EscalationReason = at(escalatedAt), reconcile.EscalationUncertainTooLong
		}
		return updateRefund(t, s, r, state)
	}

	parallel(t, "ListEscalatedRefunds", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		list := func() []reconcile.Refund {
			t.Helper()
			var out []reconcile.Refund
			inTx(t, s, func(tx reconcile.Tx) error {
				var err error
				out, err = tx.ListEscalatedRefunds(t.Context())
				return err
			})
			return out
		}
		if got := list(); len(got) != 0 {
			t.Fatalf("ListEscalatedRefunds with none: %+v", got)
		}
		a := withRefund(t, s, "ref_a", statemachine.Uncertain, 0, 2*time.Hour)
		b := withRefund(t, s, "ref_b", statemachine.Failed, -1, time.Hour) // final, still listed
		c := withRefund(t, s, "ref_c", statemachine.Submitted, -1, 3*time.Hour)
		withRefund(t, s, "ref_d", statemachine.Succeeded, -1, 0)
		equal(t, "escalated refunds, oldest first", list(), []reconcile.Refund{b, a, c})
		b.EscalatedAt, b.EscalationReason = time.Time{}, ""
		updateRefund(t, s, b, statemachine.Failed)
		equal(t, "escalated after resolving ref_b", list(), []reconcile.Refund{a, c})
	})

	parallel(t, "ListOverdueUncertainRefunds", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		list := func(before time.Time, limit int) []reconcile.Refund {
			t.Helper()
			var out []reconcile.Refund
			inTx(t, s, func(tx reconcile.Tx) error {
				var err error
				out, err = tx.ListOverdueUncertainRefunds(t.Context(), before, limit)
				return err
			})
			return out
		}
		before := at(5 * time.Minute)
		if got := list(before, 10); len(got) != 0 {
			t.Fatalf("ListOverdueUncertainRefunds with none: %+v", got)
		}
		u3 := withRefund(t, s, "ref_u3", statemachine.Uncertain, 3*time.Minute, 0)
		withRefund(t, s, "ref_escalated", statemachine.Uncertain, 2*time.Minute, time.Hour)
		u1 := withRefund(t, s, "ref_u1", statemachine.Uncertain, time.Minute+time.Microsecond, 0)
		withRefund(t, s, "ref_reconciling", statemachine.Reconciling, 0, 0)
		withRefund(t, s, "ref_created", statemachine.Created, 0, 0)
		withRefund(t, s, "ref_failed", statemachine.Failed, 0, 0)
		withRefund(t, s, "ref_at", statemachine.Uncertain, 5*time.Minute, 0) // at the cut-off, not before it
		u4 := withRefund(t, s, "ref_u4", statemachine.Uncertain, 4*time.Minute, 0)
		equal(t, "overdue, oldest first", list(before, 10), []reconcile.Refund{u1, u3, u4})
		equal(t, "overdue, limit 2", list(before, 2), []reconcile.Refund{u1, u3})
		err := txErr(t, s, func(tx reconcile.Tx) error {
			_, err := tx.ListOverdueUncertainRefunds(t.Context(), before, 0)
			return err
		})
		wantErr(t, "ListOverdueUncertainRefunds with limit 0", err, reconcile.ErrInvalid)
	})

	parallel(t, "CountRefundsByState", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		count := func() map[statemachine.State]int {
			t.Helper()
			var got map[statemachine.State]int
			inTx(t, s, func(tx reconcile.Tx) error {
				var err error
				got, err = tx.CountRefundsByState(t.Context())
				return err
			})
			return got
		}
		want := map[statemachine.State]int{}
		for _, st := range statemachine.Refund.States() {
			want[st] = 0
		}
		equal(t, "counts with no refund", count(), want)
		for i, st := range []statemachine.State{statemachine.Created, statemachine.Submitted, statemachine.Uncertain,
			statemachine.Uncertain, statemachine.Succeeded, statemachine.Failed, statemachine.Failed, statemachine.Failed} {
			refundIn(t, s, newRefund(fmt.Sprintf("ref_%d", i), "pur_1", "pi_1", 1), st)
			want[st]++
		}
		equal(t, "counts", count(), want)
		walkRefundTo(t, s, "ref_0", statemachine.Succeeded)
		want[statemachine.Created]--
		want[statemachine.Succeeded]++
		equal(t, "counts after a move", count(), want)
		// A purchase's state counts are not the refunds'.
		if counts := count(); counts[statemachine.Declined] != 0 {
			t.Fatalf("refund counts have declined: %v", counts)
		}
	})

	parallel(t, "OldestUncertainRefundSince", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		oldest := func() time.Time {
			t.Helper()
			var got time.Time
			inTx(t, s, func(tx reconcile.Tx) error {
				var err error
				got, err = tx.OldestUncertainRefundSince(t.Context())
				return err
			})
			return got
		}
		if got := oldest(); !got.IsZero() {
			t.Fatalf("OldestUncertainRefundSince with none: %s", got)
		}
		// Earlier times on refunds that do not count, and on a purchase.
		withRefund(t, s, "ref_created", statemachine.Created, time.Second, 0)
		withRefund(t, s, "ref_failed", statemachine.Failed, 2*time.Second, 0)
		withRefund(t, s, "ref_succeeded", statemachine.Succeeded, 3*time.Second, 0)
		insertPurchase(t, s, newPurchase("pur_u"))
		pu := walkTo(t, s, "pur_u", statemachine.Uncertain)
		pu.UncertainSince = at(time.Second)
		update(t, s, pu, statemachine.Uncertain)
		if got := oldest(); !got.IsZero() {
			t.Fatalf("OldestUncertainRefundSince with no refund uncertain or reconciling: %s", got)
		}
		withRefund(t, s, "ref_u", statemachine.Uncertain, 10*time.Minute, 0)
		rec := withRefund(t, s, "ref_r", statemachine.Reconciling, 5*time.Minute+7*time.Microsecond, 0)
		got := oldest()
		equal(t, "OldestUncertainRefundSince", got, at(5*time.Minute+7*time.Microsecond))
		if got.Location() != time.UTC {
			t.Fatalf("OldestUncertainRefundSince in %v, want UTC", got.Location())
		}
		rec.State = statemachine.Succeeded
		updateRefund(t, s, rec, statemachine.Reconciling)
		equal(t, "OldestUncertainRefundSince after ref_r succeeded", oldest(), at(10*time.Minute))
	})
}
