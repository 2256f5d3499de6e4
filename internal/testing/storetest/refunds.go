package storetest

import (
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
