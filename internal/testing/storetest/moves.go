package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The tests of batched writes: FindPurchases and ApplyMoves.

// move is the fenced move of p to state under l, recorded with a
// transition, leaving the job as it is.
func move(l reconcile.Lease, p reconcile.Purchase, to statemachine.State, at time.Time) reconcile.Move {
	next := p
	next.State, next.UpdatedAt = to, at
	return reconcile.Move{
		Lease: l, From: p, To: next,
		Transition: &reconcile.TransitionRecord{
			PurchaseID: p.ID, From: p.State, To: to, Cause: reconcile.CauseSubmit,
			Evidence: "batched " + string(to), Actor: l.Owner, LeaseToken: l.Token, At: at,
		},
	}
}

func applyMoves(t *testing.T, s reconcile.Store, moves []reconcile.Move) []bool {
	t.Helper()
	var applied []bool
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		applied, err = tx.ApplyMoves(t.Context(), moves)
		return err
	})
	return applied
}

func transitionsOf(t *testing.T, s reconcile.Store, id string) []reconcile.TransitionRecord {
	t.Helper()
	var got []reconcile.TransitionRecord
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		got, err = tx.ListTransitions(t.Context(), id)
		return err
	})
	return got
}

func attemptsOf(t *testing.T, s reconcile.Store, id string) []reconcile.Attempt {
	t.Helper()
	var got []reconcile.Attempt
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		got, err = tx.ListAttempts(t.Context(), id)
		return err
	})
	return got
}

func testApplyMoves(t *testing.T, newStore func(*testing.T) *testStore) {
	const leaseFor = 30 * time.Second

	// A batch whose members' fences differ: the member whose lease was
	// taken over, the one read at an old version and the one whose lease
	// expired commit nothing, and the rest of the batch commits.
	parallel(t, "EachMemberFencedAlone", func(t *testing.T) {
		s := newStore(t)
		for _, id := range []string{"pur_ok", "pur_taken", "pur_stale", "pur_attempt", "pur_expired"} {
			purchaseWithJob(t, s, id, base)
		}
		leases := claim(t, s, "w1", 10, base, leaseFor)
		lease := map[string]reconcile.Lease{}
		for _, l := range leases {
			lease[l.PurchaseID] = l
		}
		// pur_expired's lease ends first: set it to expire at 10s.
		inTx(t, s, func(tx reconcile.Tx) error {
			return tx.RescheduleJob(t.Context(), "pur_expired", base)
		})
		s.clock.Set(at(time.Second))
		exp, err := s.ClaimJob(t.Context(), "pur_expired", "w1", 9*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		lease["pur_expired"] = exp
		// pur_taken: its lease expires and another worker takes it over.
		s.clock.Set(at(leaseFor + time.Second))
		if _, err := s.ClaimJob(t.Context(), "pur_taken", "w2", leaseFor); err != nil {
			t.Fatal(err)
		}
		now := at(20 * time.Second) // w1's leases hold but pur_expired's
		s.clock.Set(now)

		stale := getPurchase(t, s, "pur_stale")
		stale.Version = 0
		withAttempt := move(lease["pur_attempt"], getPurchase(t, s, "pur_attempt"), statemachine.Submitted, now)
		withAttempt.Attempt = &reconcile.Attempt{PurchaseID: "pur_attempt", Op: provider.OpCreate, Key: "k1", Outcome: provider.RetryLater,
			Latency: 3 * time.Millisecond, Actor: "w1", LeaseToken: lease["pur_attempt"].Token, Note: "refused", At: now}
		withAttempt.Job, withAttempt.RunAt = reconcile.JobReschedule, at(time.Minute)
		moves := []reconcile.Move{
			move(lease["pur_ok"], getPurchase(t, s, "pur_ok"), statemachine.Submitted, now),
			move(lease["pur_taken"], getPurchase(t, s, "pur_taken"), statemachine.Submitted, now),
			move(lease["pur_stale"], stale, statemachine.Submitted, now),
			withAttempt,
			move(lease["pur_expired"], getPurchase(t, s, "pur_expired"), statemachine.Submitted, now),
		}
		equal(t, "applied", applyMoves(t, s, moves), []bool{true, false, false, true, false})

		for _, id := range []string{"pur_taken", "pur_stale", "pur_expired"} {
			p := getPurchase(t, s, id)
			if p.State != statemachine.Created || p.Version != 1 || len(transitionsOf(t, s, id)) != 0 || len(attemptsOf(t, s, id)) != 0 {
				t.Fatalf("%s: a member that did not match wrote: %+v", id, p)
			}
		}
		if j := getJob(t, s, "pur_taken"); j.LeaseOwner != "w2" {
			t.Fatalf("pur_taken's job: %+v, want w2's lease untouched", j)
		}
		ok := getPurchase(t, s, "pur_ok")
		if ok.State != statemachine.Submitted || ok.Version != 2 || !ok.UpdatedAt.Equal(now) {
			t.Fatalf("pur_ok after its move: %+v", ok)
		}
		trs := transitionsOf(t, s, "pur_ok")
		if len(trs) != 1 {
			t.Fatalf("pur_ok: transitions %+v, want one", trs)
		}
		want := *moves[0].Transition
		want.ID = trs[0].ID
		equal(t, "pur_ok's transition", trs[0], want)
		if j := getJob(t, s, "pur_ok"); j.LeaseOwner != "w1" || j.LeaseToken != lease["pur_ok"].Token || !j.DoneAt.IsZero() {
			t.Fatalf("pur_ok's job after a move that keeps it: %+v", j)
		}
		atts := attemptsOf(t, s, "pur_attempt")
		if len(atts) != 1 {
			t.Fatalf("pur_attempt: attempts %+v, want one", atts)
		}
		wantAtt := *withAttempt.Attempt
		wantAtt.ID = atts[0].ID
		equal(t, "pur_attempt's attempt", atts[0], wantAtt)
		equal(t, "pur_attempt's job", getJob(t, s, "pur_attempt"), reconcile.Job{
			Kind: reconcile.JobPurchase, PurchaseID: "pur_attempt", RunAt: at(time.Minute), LeaseToken: lease["pur_attempt"].Token, Checks: 1,
		})

		// The next move of pur_ok completes its job.
		fin := move(lease["pur_ok"], ok, statemachine.Succeeded, at(21*time.Second))
		fin.To.ProviderPaymentID, fin.To.SettledAt = "pi_batch_1", at(21*time.Second)
		fin.Job, fin.RunAt = reconcile.JobComplete, at(21*time.Second)
		equal(t, "applied", applyMoves(t, s, []reconcile.Move{fin}), []bool{true})
		if p := getPurchase(t, s, "pur_ok"); p.State != statemachine.Succeeded || p.ProviderPaymentID != "pi_batch_1" || p.Version != 3 {
			t.Fatalf("pur_ok after it settled: %+v", p)
		}
		if j := getJob(t, s, "pur_ok"); !j.DoneAt.Equal(at(21*time.Second)) || j.LeaseOwner != "" {
			t.Fatalf("pur_ok's job after a move that completes it: %+v", j)
		}
	})

	// The database's guards hold for batches: one refused member and the
	// whole call writes nothing, and the transaction stays usable.
	parallel(t, "RefusedBatchWritesNothing", func(t *testing.T) {
		s := newStore(t)
		for _, id := range []string{"pur_a", "pur_b", "pur_owner"} {
			purchaseWithJob(t, s, id, base)
		}
		leases := claim(t, s, "w1", 10, base, leaseFor)
		lease := map[string]reconcile.Lease{}
		for _, l := range leases {
			lease[l.PurchaseID] = l
		}
		owner := getPurchase(t, s, "pur_owner")
		sub := move(lease["pur_owner"], owner, statemachine.Submitted, base)
		sub.To.ProviderPaymentID = "pi_taken"
		equal(t, "applied", applyMoves(t, s, []reconcile.Move{sub}), []bool{true})

		good := move(lease["pur_a"], getPurchase(t, s, "pur_a"), statemachine.Submitted, base)
		forbidden := move(lease["pur_b"], getPurchase(t, s, "pur_b"), statemachine.Succeeded, base)
		taken := move(lease["pur_b"], getPurchase(t, s, "pur_b"), statemachine.Submitted, base)
		taken.To.ProviderPaymentID = "pi_taken"
		for _, tc := range []struct {
			name  string
			moves []reconcile.Move
			want  error
		}{
			{"a forbidden move", []reconcile.Move{good, forbidden}, reconcile.ErrForbiddenTransition},
			{"a payment id another purchase holds", []reconcile.Move{good, taken}, reconcile.ErrDuplicate},
			{"one purchase twice", []reconcile.Move{good, good}, reconcile.ErrInvalid},
			{"a move without its transition", []reconcile.Move{{Lease: good.Lease, From: good.From, To: good.To}}, reconcile.ErrInvalid},
		} {
			var refusal error
			inTx(t, s, func(tx reconcile.Tx) error {
				_, refusal = tx.ApplyMoves(t.Context(), tc.moves)
				// Still usable: read on and commit.
				_, err := tx.GetPurchase(t.Context(), "pur_a")
				return err
			})
			wantErr(t, "ApplyMoves with "+tc.name, refusal, tc.want)
			if p := getPurchase(t, s, "pur_a"); p.State != statemachine.Created || len(transitionsOf(t, s, "pur_a")) != 0 {
				t.Fatalf("%s: the batch's other member was written: %+v", tc.name, p)
			}
		}
	})

	// A move without a lease (a webhook's) is fenced by its purchase's
	// state and version alone: it applies whoever holds the job, leaves
	// the job and its lease as they are, and one read at a stale version
	// writes nothing while its neighbours apply. It may not touch the job.
	parallel(t, "LeaselessMoves", func(t *testing.T) {
		s := newStore(t)
		for _, id := range []string{"pur_free", "pur_leased", "pur_stale"} {
			purchaseWithJob(t, s, id, base)
		}
		var leased reconcile.Lease
		for _, l := range claim(t, s, "w1", 10, base, leaseFor) {
			if l.PurchaseID == "pur_leased" {
				leased = l
			}
		}
		now := at(time.Second)
		s.clock.Set(now)
		leaseless := func(p reconcile.Purchase) reconcile.Move {
			mv := move(reconcile.Lease{}, p, statemachine.Submitted, now)
			mv.Transition.Cause, mv.Transition.Actor = reconcile.CauseWebhook, "webhook"
			return mv
		}
		stale := getPurchase(t, s, "pur_stale")
		stale.Version = 0
		moves := []reconcile.Move{
			leaseless(getPurchase(t, s, "pur_free")),
			leaseless(stale),
			leaseless(getPurchase(t, s, "pur_leased")),
		}
		equal(t, "applied", applyMoves(t, s, moves), []bool{true, false, true})
		for _, id := range []string{"pur_free", "pur_leased"} {
			p := getPurchase(t, s, id)
			if p.State != statemachine.Submitted || p.Version != 2 || !p.UpdatedAt.Equal(now) {
				t.Fatalf("%s after a move without a lease: %+v", id, p)
			}
			trs := transitionsOf(t, s, id)
			if len(trs) != 1 || trs[0].Actor != "webhook" || trs[0].Cause != reconcile.CauseWebhook || trs[0].LeaseToken != 0 {
				t.Fatalf("%s: transitions %+v, want the webhook's one", id, trs)
			}
		}
		if p := getPurchase(t, s, "pur_stale"); p.State != statemachine.Created || p.Version != 1 || len(transitionsOf(t, s, "pur_stale")) != 0 {
			t.Fatalf("pur_stale: a move at a stale version wrote: %+v", p)
		}
		if j := getJob(t, s, "pur_leased"); j.LeaseOwner != "w1" || j.LeaseToken != leased.Token || !j.DoneAt.IsZero() {
			t.Fatalf("pur_leased's job after a move without a lease: %+v, want w1's lease untouched", j)
		}

		complete := leaseless(getPurchase(t, s, "pur_stale"))
		complete.Job, complete.RunAt = reconcile.JobComplete, now
		err := txErr(t, s, func(tx reconcile.Tx) error {
			_, err := tx.ApplyMoves(t.Context(), []reconcile.Move{complete})
			return err
		})
		wantErr(t, "ApplyMoves completing a job without its lease", err, reconcile.ErrInvalid)
	})

	parallel(t, "FindPurchases", func(t *testing.T) {
		s := newStore(t)
		for _, id := range []string{"pur_1", "pur_2", "pur_3"} {
			purchaseWithJob(t, s, id, base)
		}
		leases := claim(t, s, "w1", 10, base, leaseFor)
		for _, l := range leases {
			if l.PurchaseID == "pur_3" {
				mv := move(l, getPurchase(t, s, "pur_3"), statemachine.Submitted, base)
				mv.To.ProviderPaymentID = "pi_3"
				applyMoves(t, s, []reconcile.Move{mv})
			}
		}
		var got []reconcile.Purchase
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			got, err = tx.FindPurchases(t.Context(), []string{"pur_1", "pur_missing", "", "pur_3"}, []string{"pi_3", "pi_missing", ""})
			return err
		})
		found := map[string]reconcile.Purchase{}
		for _, p := range got {
			if _, dup := found[p.ID]; dup {
				t.Fatalf("FindPurchases returned %s twice", p.ID)
			}
			found[p.ID] = p
		}
		if len(found) != 2 {
			t.Fatalf("FindPurchases found %v, want pur_1 and pur_3", fmt.Sprint(len(found)))
		}
		equal(t, "pur_1", found["pur_1"], getPurchase(t, s, "pur_1"))
		equal(t, "pur_3", found["pur_3"], getPurchase(t, s, "pur_3"))
		inTx(t, s, func(tx reconcile.Tx) error {
			none, err := tx.FindPurchases(t.Context(), nil, []string{""})
			if err != nil || len(none) != 0 {
				return fmt.Errorf("FindPurchases(nothing) = %v, %v", none, err)
			}
			return nil
		})
	})
}
