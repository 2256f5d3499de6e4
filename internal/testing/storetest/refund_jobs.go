package storetest

import (
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// Refund jobs beside the purchases': claims, fencing and completion.

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
