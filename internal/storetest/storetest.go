// Package storetest is the conformance suite of reconcile.Store: the one
// set of tests every store (reconcile/postgres, reconcile/sqlite) runs
// unchanged, so that they behave alike wherever the protocol can tell.
//
// A store's test calls Run with a constructor, which injects the clock
// it is given into the store (its Config.Now):
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, now func() time.Time) reconcile.Store {
//			s := openFreshMigratedStore(t, Config{Now: now})
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// The store owns the clock: it judges due jobs, lease expiry and sweep
// locks by its own now. The suite injects a clock that it sets by hand
// (starting at base, 2026-01-01 UTC) and checks that the store follows
// it; one test checks the store's default clock (now nil). The suite
// never sleeps. Times it writes have microsecond precision: a store must
// return them exactly (same instant, in UTC). Byte strings (event
// payloads, saved responses) may come back nil where empty was written,
// and the reverse.
//
// Some tests race transactions: up to 8 at once, each from its own
// goroutine, inserting the same inbox event or idempotency key, or taking
// the same sweep lock. The store must make them wait for each other (or
// retry them inside InTx), not fail them: exactly one must report
// success, the others must see its row.
//
// Checks that need raw SQL (the audit tables refusing UPDATE and DELETE,
// audit findings refusing any change but their closing, the transition
// table refusing changes, the transition guard holding for statements the
// store does not write) belong in each store's own tests.
package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// base is the suite's "now" before any test advances it.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at returns base+d.
func at(d time.Duration) time.Time { return base.Add(d) }

// Run runs the suite. newStore must return a fresh, migrated, empty store
// each time it is called, whose clock is now (nil: the store's default
// clock), and arrange (with t.Cleanup) for it to be closed when t ends.
// The suite calls it once per subtest, with that subtest's t; subtests
// that own a store run in parallel (t.Parallel), so newStore must be safe
// to call concurrently. now is safe for concurrent use.
func Run(t *testing.T, newStore func(t *testing.T, now func() time.Time) reconcile.Store) {
	for _, tc := range []struct {
		name string
		run  func(*testing.T, func(*testing.T) *testStore)
	}{
		{"StoreClock", testStoreClock},
		{"DefaultClock", func(t *testing.T, _ func(*testing.T) *testStore) { testDefaultClock(t, newStore(t, nil)) }},
		{"Ready", withStore(testReady)},
		{"Purchase", testPurchase},
		{"UpdatePurchase", testUpdatePurchase},
		{"TransitionGuard", withStore(testTransitionGuard)},
		{"TxUsableAfterRefusal", withStore(testTxUsableAfterRefusal)},
		{"Transitions", withStore(testTransitions)},
		{"Attempts", withStore(testAttempts)},
		{"Jobs", testJobs},
		{"ConcurrentClaims", withStore(testConcurrentClaims)},
		{"InTx", testInTx},
		{"ListEscalated", withStore(testListEscalated)},
		{"CountByState", withStore(testCountByState)},
		{"FindPurchaseByPaymentID", withStore(testFindByPaymentID)},
		{"FindPurchaseByReference", withStore(testFindByReference)},
		{"CountEscalated", withStore(testCountEscalated)},
		{"OldestUncertainSince", withStore(testOldestUncertainSince)},
		{"ListOverdueUncertain", withStore(testListOverdueUncertain)},
		{"ListSubmittedBetween", withStore(testListSubmittedBetween)},
		{"ClaimExpiredJobs", withStore(testClaimExpiredJobs)},
		{"ClaimJob", withStore(testClaimJob)},
		{"Inbox", testInbox},
		{"IdempotencyKeys", testIdempotencyKeys},
		{"OperatorActions", withStore(testOperatorActions)},
		{"SweepLocks", testSweepLocks},
		{"Findings", testFindings},
		{"AuditRuns", withStore(testAuditRuns)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, openStore(newStore))
		})
	}
}

// withStore adapts a test of one store to Run's table.
func withStore(test func(*testing.T, *testStore)) func(*testing.T, func(*testing.T) *testStore) {
	return func(t *testing.T, newStore func(*testing.T) *testStore) { test(t, newStore(t)) }
}

// parallel runs the subtests of a group that each make their own store
// in parallel.
func parallel(t *testing.T, name string, test func(t *testing.T)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		test(t)
	})
}

// ---- helpers ----

// inTx runs fn in a transaction and fails the test if it returns an error.
func inTx(t *testing.T, s reconcile.Store, fn func(tx reconcile.Tx) error) {
	t.Helper()
	if err := s.InTx(t.Context(), fn); err != nil {
		t.Fatalf("InTx: %v", err)
	}
}

// txErr runs fn in a transaction and returns InTx's error.
func txErr(t *testing.T, s reconcile.Store, fn func(tx reconcile.Tx) error) error {
	t.Helper()
	return s.InTx(t.Context(), fn)
}

// wantErr fails the test unless errors.Is(err, want).
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

// newPurchase returns a valid purchase in state created, with only the
// required fields set.
func newPurchase(id string) reconcile.Purchase {
	return reconcile.Purchase{
		ID:        id,
		Customer:  "cus_1",
		Amount:    1250,
		Currency:  "eur",
		State:     statemachine.Created,
		Version:   1,
		CreatedAt: base,
		UpdatedAt: base,
	}
}

func insertPurchase(t *testing.T, s reconcile.Store, p reconcile.Purchase) {
	t.Helper()
	inTx(t, s, func(tx reconcile.Tx) error { return tx.InsertPurchase(t.Context(), p) })
}

func getPurchase(t *testing.T, s reconcile.Store, id string) reconcile.Purchase {
	t.Helper()
	var p reconcile.Purchase
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		p, err = tx.GetPurchase(t.Context(), id)
		return err
	})
	return p
}

// update writes p (moving it from its stored state to p.State) and
// returns it as stored afterwards.
func update(t *testing.T, s reconcile.Store, p reconcile.Purchase, from statemachine.State) reconcile.Purchase {
	t.Helper()
	inTx(t, s, func(tx reconcile.Tx) error { return tx.UpdatePurchase(t.Context(), p, from) })
	return getPurchase(t, s, p.ID)
}

// pathTo returns the allowed moves from created to target, shortest
// first found.
func pathTo(target statemachine.State) []statemachine.Pair {
	prev := map[statemachine.State]statemachine.Pair{}
	seen := map[statemachine.State]bool{statemachine.Created: true}
	queue := []statemachine.State{statemachine.Created}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, p := range statemachine.Transitions() {
			if p.From == cur && !seen[p.To] {
				seen[p.To] = true
				prev[p.To] = p
				queue = append(queue, p.To)
			}
		}
	}
	var path []statemachine.Pair
	for s := target; s != statemachine.Created; s = prev[s].From {
		if _, ok := prev[s]; !ok {
			panic(fmt.Sprintf("storetest: state %s is unreachable from created", target))
		}
		path = append([]statemachine.Pair{prev[s]}, path...)
	}
	return path
}

// walkTo moves the stored purchase id along allowed moves to target and
// returns it as stored.
func walkTo(t *testing.T, s reconcile.Store, id string, target statemachine.State) reconcile.Purchase {
	t.Helper()
	p := getPurchase(t, s, id)
	for _, move := range pathTo(target) {
		p.State = move.To
		p = update(t, s, p, move.From)
	}
	return p
}

// createIn inserts a fresh purchase id and walks it to state.
func createIn(t *testing.T, s reconcile.Store, id string, state statemachine.State) reconcile.Purchase {
	t.Helper()
	insertPurchase(t, s, newPurchase(id))
	return walkTo(t, s, id, state)
}

func insertJob(t *testing.T, s reconcile.Store, id string, runAt time.Time) {
	t.Helper()
	inTx(t, s, func(tx reconcile.Tx) error {
		return tx.InsertJob(t.Context(), reconcile.Job{PurchaseID: id, RunAt: runAt})
	})
}

// purchaseWithJob creates a purchase and its job, due at runAt.
func purchaseWithJob(t *testing.T, s reconcile.Store, id string, runAt time.Time) {
	t.Helper()
	insertPurchase(t, s, newPurchase(id))
	insertJob(t, s, id, runAt)
}

func getJob(t *testing.T, s reconcile.Store, id string) reconcile.Job {
	t.Helper()
	var j reconcile.Job
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		j, err = tx.GetJob(t.Context(), id)
		return err
	})
	return j
}

// claim sets the store's clock to now and claims. Every lease must say
// it was granted at now.
func claim(t *testing.T, s *testStore, owner string, limit int, now time.Time, leaseFor time.Duration) []reconcile.Lease {
	t.Helper()
	s.clock.Set(now)
	leases, err := s.ClaimJobs(t.Context(), owner, limit, leaseFor)
	if err != nil {
		t.Fatalf("ClaimJobs(%s, %d) at %s: %v", owner, limit, now, err)
	}
	checkLeaseNow(t, leases, now)
	return leases
}

// checkLeaseNow fails unless every lease's Now is now, in UTC.
func checkLeaseNow(t *testing.T, leases []reconcile.Lease, now time.Time) {
	t.Helper()
	for _, l := range leases {
		if !l.Now.Equal(now) || l.Now.Location() != time.UTC {
			t.Fatalf("lease of %s granted at store time %s: Now = %s, want it in UTC", l.PurchaseID, now, l.Now)
		}
	}
}

// claimOne claims at now and fails unless exactly the job id comes back.
func claimOne(t *testing.T, s *testStore, owner, id string, now time.Time, leaseFor time.Duration) reconcile.Lease {
	t.Helper()
	leases := claim(t, s, owner, 10, now, leaseFor)
	if len(leases) != 1 || leases[0].PurchaseID != id {
		t.Fatalf("ClaimJobs at %s: got %v, want the job of %s alone", now, ids(leases), id)
	}
	return leases[0]
}

func ids(leases []reconcile.Lease) []string {
	out := make([]string, len(leases))
	for i, l := range leases {
		out[i] = l.PurchaseID
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// checkLease sets the store's clock to now and checks l.
func checkLease(t *testing.T, s *testStore, l reconcile.Lease, now time.Time) error {
	t.Helper()
	s.clock.Set(now)
	return txErr(t, s, func(tx reconcile.Tx) error { return tx.CheckLease(t.Context(), l) })
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %+v\n want %+v", what, got, want)
	}
}

// ---- tests ----

func testReady(t *testing.T, s *testStore) {
	if err := s.Ready(t.Context()); err != nil {
		t.Fatalf("Ready on a migrated store: %v", err)
	}
}

func testPurchase(t *testing.T, newStore func(*testing.T) *testStore) {
	parallel(t, "RoundTripEveryField", func(t *testing.T) {
		s := newStore(t)
		zone := time.FixedZone("UTC+5", 5*3600)
		req := &provider.CreateRequest{
			IdempotencyKey: reconcile.ProviderKeyFor("pur_full"),
			PurchaseID:     "pur_full",
			Customer:       "cus_42",
			Amount:         123456,
			Currency:       "usd",
			Description:    "Annual plan — \"pro\" ✓",
			PaymentMethod:  "pm_card_visa",
		}
		in := reconcile.Purchase{
			ID:                "pur_full",
			Customer:          "cus_42",
			Reference:         "order-7",
			Amount:            123456,
			Currency:          "usd",
			Description:       "Annual plan — \"pro\" ✓",
			PaymentMethod:     "pm_card_visa",
			State:             statemachine.Created,
			Version:           7,
			ProviderKey:       req.IdempotencyKey,
			ProviderRequest:   req,
			ParamsHash:        req.Hash(),
			ProviderPaymentID: "pi_123",
			FirstAttemptAt:    at(1*time.Second + 1*time.Microsecond).In(zone),
			UncertainSince:    at(2*time.Second + 999999*time.Microsecond).In(zone),
			EscalatedAt:       at(3*time.Hour + 5*time.Microsecond).In(zone),
			EscalationReason:  reconcile.EscalationUncertainTooLong,
			SettledAt:         at(4*time.Hour + 11*time.Microsecond).In(zone),
			Doubt:             "evt_9 (payment_intent.canceled, 2026-01-01T05:00:00Z) contradicts succeeded",
			CreatedAt:         at(123456 * time.Microsecond).In(zone),
			UpdatedAt:         at(time.Minute + 654321*time.Microsecond).In(zone),
		}
		insertPurchase(t, s, in)
		want := in
		for _, tm := range []*time.Time{&want.FirstAttemptAt, &want.UncertainSince, &want.EscalatedAt, &want.SettledAt, &want.CreatedAt, &want.UpdatedAt} {
			*tm = tm.UTC()
		}
		equal(t, "purchase read back", getPurchase(t, s, in.ID), want)
	})

	parallel(t, "RoundTripZeroFields", func(t *testing.T) {
		s := newStore(t)
		in := newPurchase("pur_min")
		insertPurchase(t, s, in)
		got := getPurchase(t, s, in.ID)
		equal(t, "purchase read back", got, in)
		if got.ProviderRequest != nil || !got.FirstAttemptAt.IsZero() || !got.EscalatedAt.IsZero() || got.Escalated() ||
			!got.SettledAt.IsZero() || got.Doubt != "" {
			t.Fatalf("unset fields came back set: %+v", got)
		}
		if got.CreatedAt.Location() != time.UTC {
			t.Fatalf("CreatedAt in %v, want UTC", got.CreatedAt.Location())
		}
	})

	parallel(t, "NotFound", func(t *testing.T) {
		s := newStore(t)
		err := txErr(t, s, func(tx reconcile.Tx) error {
			_, err := tx.GetPurchase(t.Context(), "pur_missing")
			return err
		})
		wantErr(t, "GetPurchase(unknown)", err, reconcile.ErrNotFound)
	})

	parallel(t, "Duplicates", func(t *testing.T) {
		s := newStore(t)
		first := newPurchase("pur_a")
		first.Reference = "ref-1"
		insertPurchase(t, s, first)

		for _, tc := range []struct {
			name    string
			p       reconcile.Purchase
			wantErr error
		}{
			{"same id", func() reconcile.Purchase { p := newPurchase("pur_a"); p.Customer = "cus_other"; return p }(), reconcile.ErrDuplicate},
			{"same customer and reference", func() reconcile.Purchase { p := newPurchase("pur_b"); p.Reference = "ref-1"; return p }(), reconcile.ErrDuplicate},
			{"other customer, same reference", func() reconcile.Purchase {
				p := newPurchase("pur_c")
				p.Customer, p.Reference = "cus_2", "ref-1"
				return p
			}(), nil},
			{"same customer, no reference", newPurchase("pur_d"), nil},
			{"same customer, no reference again", newPurchase("pur_e"), nil},
			{"same customer, other reference", func() reconcile.Purchase { p := newPurchase("pur_f"); p.Reference = "ref-2"; return p }(), nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := txErr(t, s, func(tx reconcile.Tx) error { return tx.InsertPurchase(t.Context(), tc.p) })
				if tc.wantErr == nil {
					if err != nil {
						t.Fatalf("InsertPurchase: %v", err)
					}
					return
				}
				wantErr(t, "InsertPurchase", err, tc.wantErr)
			})
		}
		if got := getPurchase(t, s, "pur_a"); got.Customer != "cus_1" {
			t.Fatalf("the refused duplicate overwrote pur_a: customer %q", got.Customer)
		}
	})

	parallel(t, "InsertOnlyInCreated", func(t *testing.T) {
		s := newStore(t)
		for _, state := range statemachine.States {
			if state == statemachine.Created {
				continue
			}
			p := newPurchase("pur_" + string(state))
			p.State = state
			err := txErr(t, s, func(tx reconcile.Tx) error { return tx.InsertPurchase(t.Context(), p) })
			wantErr(t, "InsertPurchase in state "+string(state), err, reconcile.ErrForbiddenTransition)
			err = txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetPurchase(t.Context(), p.ID); return err })
			wantErr(t, "GetPurchase of the refused insert", err, reconcile.ErrNotFound)
		}
	})
}

func testUpdatePurchase(t *testing.T, newStore func(*testing.T) *testStore) {
	parallel(t, "WritesFieldsAndBumpsVersion", func(t *testing.T) {
		s := newStore(t)
		orig := newPurchase("pur_1")
		orig.Reference, orig.Description, orig.PaymentMethod = "ref", "desc", "pm_x"
		insertPurchase(t, s, orig)

		p := getPurchase(t, s, "pur_1")
		req := &provider.CreateRequest{IdempotencyKey: reconcile.ProviderKeyFor(p.ID), PurchaseID: p.ID, Customer: p.Customer, Amount: p.Amount, Currency: p.Currency}
		p.State = statemachine.Submitted
		p.ProviderKey = req.IdempotencyKey
		p.ProviderRequest = req
		p.ParamsHash = req.Hash()
		p.ProviderPaymentID = "pi_9"
		p.FirstAttemptAt = at(time.Second)
		p.UncertainSince = at(2 * time.Second)
		p.EscalatedAt = at(3 * time.Second)
		p.EscalationReason = reconcile.EscalationContradiction
		p.SettledAt = at(3*time.Second + 500*time.Microsecond)
		p.Doubt = "a newer event contradicts it"
		p.UpdatedAt = at(4 * time.Second)
		want := p
		want.Version = p.Version + 1
		// Fields fixed at insert are not the update's to change.
		p.Amount, p.Currency, p.Customer, p.Reference, p.Description, p.PaymentMethod, p.CreatedAt = 1, "xxx", "cus_x", "ref_x", "d_x", "pm_y", at(time.Hour)

		got := update(t, s, p, statemachine.Created)
		equal(t, "purchase after update", got, want)

		// Fields can be cleared again, and a same-state write is no move.
		got.EscalatedAt, got.EscalationReason, got.UncertainSince = time.Time{}, "", time.Time{}
		got.SettledAt, got.Doubt = time.Time{}, ""
		got.UpdatedAt = at(5 * time.Second)
		want = got
		want.Version++
		equal(t, "purchase after clearing", update(t, s, got, statemachine.Submitted), want)
	})

	parallel(t, "Conditional", func(t *testing.T) {
		s := newStore(t)
		insertPurchase(t, s, newPurchase("pur_1"))
		p := walkTo(t, s, "pur_1", statemachine.Submitted) // version 2

		for _, tc := range []struct {
			name    string
			mutate  func(p *reconcile.Purchase) statemachine.State
			wantErr error
		}{
			{"stale version", func(p *reconcile.Purchase) statemachine.State {
				p.Version--
				p.State = statemachine.Uncertain
				return statemachine.Submitted
			}, reconcile.ErrConflict},
			{"future version", func(p *reconcile.Purchase) statemachine.State {
				p.Version++
				p.State = statemachine.Uncertain
				return statemachine.Submitted
			}, reconcile.ErrConflict},
			{"wrong from state", func(p *reconcile.Purchase) statemachine.State {
				p.State = statemachine.Reconciling
				return statemachine.Uncertain
			}, reconcile.ErrConflict},
			{"unknown id", func(p *reconcile.Purchase) statemachine.State {
				p.ID = "pur_missing"
				p.State = statemachine.Uncertain
				return statemachine.Submitted
			}, reconcile.ErrNotFound},
		} {
			t.Run(tc.name, func(t *testing.T) {
				q := p
				from := tc.mutate(&q)
				err := txErr(t, s, func(tx reconcile.Tx) error { return tx.UpdatePurchase(t.Context(), q, from) })
				wantErr(t, "UpdatePurchase", err, tc.wantErr)
				equal(t, "purchase after the refused update", getPurchase(t, s, "pur_1"), p)
			})
		}

		// The version the store wrote is the one the next write must use.
		p.State = statemachine.Uncertain
		if got := update(t, s, p, statemachine.Submitted); got.Version != p.Version+1 || got.State != statemachine.Uncertain {
			t.Fatalf("after update: version %d state %s, want %d uncertain", got.Version, got.State, p.Version+1)
		}
	})
}

// testTransitionGuard tries every move between two different states: the
// store must accept exactly statemachine.Transitions() and refuse every
// other with ErrForbiddenTransition, leaving the row as it was.
func testTransitionGuard(t *testing.T, s *testStore) {
	allowed := map[statemachine.Pair]bool{}
	for _, p := range statemachine.Transitions() {
		allowed[p] = true
	}
	for _, from := range statemachine.States {
		for _, to := range statemachine.States {
			if from == to {
				continue
			}
			move := statemachine.Pair{From: from, To: to}
			t.Run(string(from)+"_to_"+string(to), func(t *testing.T) {
				id := "pur_" + string(from) + "_" + string(to)
				before := createIn(t, s, id, from)
				p := before
				p.State = to
				p.UpdatedAt = at(time.Hour)
				err := txErr(t, s, func(tx reconcile.Tx) error { return tx.UpdatePurchase(t.Context(), p, from) })
				if allowed[move] {
					if err != nil {
						t.Fatalf("allowed move %s refused: %v", move, err)
					}
					if got := getPurchase(t, s, id); got.State != to || got.Version != before.Version+1 {
						t.Fatalf("after %s: state %s version %d, want %s %d", move, got.State, got.Version, to, before.Version+1)
					}
					return
				}
				wantErr(t, "forbidden move "+move.String(), err, reconcile.ErrForbiddenTransition)
				equal(t, "purchase after the refused move", getPurchase(t, s, id), before)
			})
		}
	}
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

func testTransitions(t *testing.T, s *testStore) {
	insertPurchase(t, s, newPurchase("pur_a"))
	insertPurchase(t, s, newPurchase("pur_b"))
	records := []reconcile.TransitionRecord{
		{PurchaseID: "pur_a", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, Actor: "worker-1", LeaseToken: 1, At: at(time.Second)},
		{PurchaseID: "pur_b", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, Actor: "worker-2", LeaseToken: 4, At: at(time.Second)},
		{PurchaseID: "pur_a", From: statemachine.Submitted, To: statemachine.Uncertain, Cause: reconcile.CauseSubmitResponse, Evidence: "timeout after 10s", Actor: "worker-1", LeaseToken: 1, At: at(11*time.Second + 7*time.Microsecond)},
		// Same instant as the previous one: order is insertion order.
		{PurchaseID: "pur_a", From: statemachine.Uncertain, To: statemachine.Reconciling, Cause: reconcile.CauseLeaseLost, Actor: "worker-3", LeaseToken: 2, At: at(11*time.Second + 7*time.Microsecond)},
		{PurchaseID: "pur_a", From: statemachine.Reconciling, To: statemachine.Succeeded, Cause: reconcile.CauseWebhook, Evidence: "evt_1: payment_intent.succeeded", Actor: "webhook", At: at(time.Minute).In(time.FixedZone("x", -3600))},
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, r := range records {
			if err := tx.InsertTransition(t.Context(), r); err != nil {
				return err
			}
		}
		return nil
	})
	var got []reconcile.TransitionRecord
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		got, err = tx.ListTransitions(t.Context(), "pur_a")
		return err
	})
	var want []reconcile.TransitionRecord
	for _, r := range records {
		if r.PurchaseID == "pur_a" {
			r.At = r.At.UTC()
			want = append(want, r)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("ListTransitions(pur_a): %d records, want %d: %+v", len(got), len(want), got)
	}
	for i := range got {
		if got[i].ID <= 0 || (i > 0 && got[i].ID <= got[i-1].ID) {
			t.Fatalf("record %d: id %d, want positive and increasing (ids %v)", i, got[i].ID, got)
		}
		w := want[i]
		w.ID = got[i].ID
		equal(t, fmt.Sprintf("record %d", i), got[i], w)
	}

	inTx(t, s, func(tx reconcile.Tx) error {
		none, err := tx.ListTransitions(t.Context(), "pur_missing")
		if err != nil || len(none) != 0 {
			return fmt.Errorf("ListTransitions(unknown) = %v, %v; want none, nil", none, err)
		}
		return nil
	})
	err := txErr(t, s, func(tx reconcile.Tx) error {
		return tx.InsertTransition(t.Context(), reconcile.TransitionRecord{PurchaseID: "pur_missing", From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, At: base})
	})
	wantErr(t, "InsertTransition for an unknown purchase", err, reconcile.ErrNotFound)

	// The audit records only moves of the transition table: the database
	// refuses any other pair, and the refusal leaves the transaction
	// usable.
	allowed := map[statemachine.Pair]bool{}
	for _, p := range statemachine.Transitions() {
		allowed[p] = true
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, from := range statemachine.States {
			for _, to := range statemachine.States {
				move := statemachine.Pair{From: from, To: to}
				if allowed[move] {
					continue
				}
				err := tx.InsertTransition(t.Context(), reconcile.TransitionRecord{PurchaseID: "pur_b", From: from, To: to, Cause: reconcile.CauseOperator, At: base})
				wantErr(t, "InsertTransition of "+move.String(), err, reconcile.ErrForbiddenTransition)
			}
		}
		return tx.InsertTransition(t.Context(), reconcile.TransitionRecord{PurchaseID: "pur_b", From: statemachine.Submitted, To: statemachine.Uncertain, Cause: reconcile.CauseSubmitResponse, At: at(time.Hour)})
	})
	inTx(t, s, func(tx reconcile.Tx) error {
		rs, err := tx.ListTransitions(t.Context(), "pur_b")
		if err == nil && len(rs) != 2 {
			err = fmt.Errorf("pur_b has %d transitions after the refused ones, want 2: %+v", len(rs), rs)
		}
		return err
	})
}

func testAttempts(t *testing.T, s *testStore) {
	insertPurchase(t, s, newPurchase("pur_a"))
	insertPurchase(t, s, newPurchase("pur_b"))
	attempts := []reconcile.Attempt{
		{PurchaseID: "pur_a", Op: provider.OpCreate, Key: reconcile.ProviderKeyFor("pur_a"), Outcome: provider.Unknown, Latency: 10*time.Second + 1*time.Microsecond, Error: "context deadline exceeded", Actor: "worker-1", LeaseToken: 1, Applied: true, At: at(time.Second)},
		{PurchaseID: "pur_b", Op: provider.OpCreate, Key: reconcile.ProviderKeyFor("pur_b"), Outcome: provider.Succeeded, PaymentID: "pi_b", Status: "succeeded", Latency: 250 * time.Millisecond, Actor: "worker-2", LeaseToken: 1, Applied: true, At: at(time.Second)},
		{PurchaseID: "pur_a", Op: provider.OpSearch, Outcome: provider.NotFound, Latency: 1234567 * time.Microsecond, Actor: "worker-1", LeaseToken: 1, Applied: false, Note: "search index lags", At: at(20 * time.Second)},
		{PurchaseID: "pur_a", Op: provider.OpStatus, Outcome: provider.Succeeded, PaymentID: "pi_a", Status: "succeeded", Latency: 0, Actor: "worker-3", LeaseToken: 2, Applied: true, At: at(20 * time.Second)},
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		for _, a := range attempts {
			if err := tx.InsertAttempt(t.Context(), a); err != nil {
				return err
			}
		}
		return nil
	})
	var got []reconcile.Attempt
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		got, err = tx.ListAttempts(t.Context(), "pur_a")
		return err
	})
	var want []reconcile.Attempt
	for _, a := range attempts {
		if a.PurchaseID == "pur_a" {
			want = append(want, a)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("ListAttempts(pur_a): %d attempts, want %d: %+v", len(got), len(want), got)
	}
	for i := range got {
		if got[i].ID <= 0 || (i > 0 && got[i].ID <= got[i-1].ID) {
			t.Fatalf("attempt %d: id %d, want positive and increasing", i, got[i].ID)
		}
		w := want[i]
		w.ID = got[i].ID
		equal(t, fmt.Sprintf("attempt %d", i), got[i], w)
	}
	inTx(t, s, func(tx reconcile.Tx) error {
		none, err := tx.ListAttempts(t.Context(), "pur_missing")
		if err != nil || len(none) != 0 {
			return fmt.Errorf("ListAttempts(unknown) = %v, %v; want none, nil", none, err)
		}
		return nil
	})
}

func testJobs(t *testing.T, newStore func(*testing.T) *testStore) {
	const leaseFor = 30 * time.Second

	parallel(t, "InsertGet", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", at(time.Minute+3*time.Microsecond))
		equal(t, "new job", getJob(t, s, "pur_1"), reconcile.Job{PurchaseID: "pur_1", RunAt: at(time.Minute + 3*time.Microsecond)})

		err := txErr(t, s, func(tx reconcile.Tx) error {
			return tx.InsertJob(t.Context(), reconcile.Job{PurchaseID: "pur_1", RunAt: base})
		})
		wantErr(t, "second InsertJob", err, reconcile.ErrDuplicate)
		err = txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetJob(t.Context(), "pur_missing"); return err })
		wantErr(t, "GetJob(unknown)", err, reconcile.ErrNotFound)
	})

	parallel(t, "ClaimsOnlyDueJobs", func(t *testing.T) {
		s := newStore(t)
		for i, id := range []string{"pur_1", "pur_2", "pur_3"} {
			purchaseWithJob(t, s, id, at(time.Duration(i+1)*time.Minute))
		}
		if got := claim(t, s, "w1", 10, at(59*time.Second), leaseFor); len(got) != 0 {
			t.Fatalf("claimed %v before anything was due", ids(got))
		}
		now := at(2 * time.Minute) // run_at <= now is due: pur_1 and pur_2
		got := claim(t, s, "w1", 10, now, leaseFor)
		want := []reconcile.Lease{
			{PurchaseID: "pur_1", Owner: "w1", Token: 1, ExpiresAt: now.Add(leaseFor), Checks: 1, Now: now},
			{PurchaseID: "pur_2", Owner: "w1", Token: 1, ExpiresAt: now.Add(leaseFor), Checks: 1, Now: now},
		}
		equal(t, "leases", got, want)
		equal(t, "leased job", getJob(t, s, "pur_1"), reconcile.Job{
			PurchaseID: "pur_1", RunAt: at(time.Minute), LeaseOwner: "w1", LeaseToken: 1, LeaseExpiresAt: now.Add(leaseFor), Checks: 1,
		})
		equal(t, "job not yet due", getJob(t, s, "pur_3"), reconcile.Job{PurchaseID: "pur_3", RunAt: at(3 * time.Minute)})
	})

	parallel(t, "LimitAndOrder", func(t *testing.T) {
		s := newStore(t)
		// Inserted out of run_at order.
		for _, j := range []struct {
			id  string
			run time.Duration
		}{{"pur_c", 3}, {"pur_e", 5}, {"pur_a", 1}, {"pur_d", 4}, {"pur_b", 2}} {
			purchaseWithJob(t, s, j.id, at(j.run*time.Second))
		}
		now := at(time.Minute)
		var order []string
		for _, wantN := range []int{2, 2, 1, 0} {
			got := claim(t, s, "w1", 2, now, leaseFor)
			if len(got) != wantN {
				t.Fatalf("claim with limit 2: got %v, want %d jobs", ids(got), wantN)
			}
			order = append(order, ids(got)...)
		}
		equal(t, "claim order", order, []string{"pur_a", "pur_b", "pur_c", "pur_d", "pur_e"})
	})

	parallel(t, "LeaseExpiryAndTakeover", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		first := claimOne(t, s, "w1", "pur_1", base, leaseFor)
		if first.TakenOver || first.Token != 1 {
			t.Fatalf("first claim: %+v, want token 1, not taken over", first)
		}
		if got := claim(t, s, "w2", 10, first.ExpiresAt.Add(-time.Microsecond), leaseFor); len(got) != 0 {
			t.Fatalf("claimed %v while the lease was still valid", ids(got))
		}
		now := first.ExpiresAt // lease_expires_at <= now: expired
		second := claimOne(t, s, "w2", "pur_1", now, leaseFor)
		equal(t, "takeover lease", second, reconcile.Lease{
			PurchaseID: "pur_1", Owner: "w2", Token: 2, ExpiresAt: now.Add(leaseFor), TakenOver: true, Checks: 2, Now: now,
		})
	})

	parallel(t, "TokensIncreaseOnEveryClaim", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		now := base
		var last int64
		for i := range 5 {
			l := claimOne(t, s, fmt.Sprintf("w%d", i%2), "pur_1", now, leaseFor)
			if l.Token <= last || l.Checks != i+1 || l.TakenOver {
				t.Fatalf("claim %d: %+v; want token > %d, checks %d, not taken over", i+1, l, last, i+1)
			}
			last = l.Token
			inTx(t, s, func(tx reconcile.Tx) error {
				if err := tx.CheckLease(t.Context(), l); err != nil {
					return err
				}
				return tx.RescheduleJob(t.Context(), "pur_1", now.Add(time.Second))
			})
			now = now.Add(time.Second)
		}
	})

	parallel(t, "RescheduleReleasesLease", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		l := claimOne(t, s, "w1", "pur_1", base, leaseFor)
		runAt := at(10 * time.Minute)
		inTx(t, s, func(tx reconcile.Tx) error {
			if err := tx.CheckLease(t.Context(), l); err != nil {
				return err
			}
			return tx.RescheduleJob(t.Context(), "pur_1", runAt)
		})
		equal(t, "rescheduled job", getJob(t, s, "pur_1"), reconcile.Job{PurchaseID: "pur_1", RunAt: runAt, LeaseToken: 1, Checks: 1})
		wantErr(t, "CheckLease after reschedule", checkLease(t, s, l, base), reconcile.ErrLeaseLost)
		if got := claim(t, s, "w2", 10, runAt.Add(-time.Microsecond), leaseFor); len(got) != 0 {
			t.Fatalf("claimed %v before its new run_at", ids(got))
		}
		next := claimOne(t, s, "w2", "pur_1", runAt, leaseFor)
		if next.TakenOver || next.Token != 2 {
			t.Fatalf("claim after reschedule: %+v; want token 2, not taken over (the lease was released)", next)
		}
		err := txErr(t, s, func(tx reconcile.Tx) error { return tx.RescheduleJob(t.Context(), "pur_missing", base) })
		wantErr(t, "RescheduleJob(unknown)", err, reconcile.ErrNotFound)
	})

	parallel(t, "DoneJobsNeverClaimed", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		purchaseWithJob(t, s, "pur_2", at(time.Hour))
		l := claimOne(t, s, "w1", "pur_1", base, leaseFor)
		inTx(t, s, func(tx reconcile.Tx) error {
			if err := tx.CheckLease(t.Context(), l); err != nil {
				return err
			}
			if err := tx.CompleteJob(t.Context(), "pur_1", at(time.Second)); err != nil {
				return err
			}
			return tx.CompleteJob(t.Context(), "pur_2", at(time.Second)) // never leased
		})
		equal(t, "done job", getJob(t, s, "pur_1"), reconcile.Job{PurchaseID: "pur_1", RunAt: base, LeaseToken: 1, Checks: 1, DoneAt: at(time.Second)})
		if got := claim(t, s, "w1", 10, at(1000*time.Hour), leaseFor); len(got) != 0 {
			t.Fatalf("claimed done jobs %v", ids(got))
		}
		err := txErr(t, s, func(tx reconcile.Tx) error { return tx.CompleteJob(t.Context(), "pur_missing", base) })
		wantErr(t, "CompleteJob(unknown)", err, reconcile.ErrNotFound)
	})

	parallel(t, "ReopenDoneJob", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		l := claimOne(t, s, "w1", "pur_1", base, leaseFor)
		inTx(t, s, func(tx reconcile.Tx) error {
			if err := tx.CheckLease(t.Context(), l); err != nil {
				return err
			}
			return tx.CompleteJob(t.Context(), "pur_1", at(time.Second))
		})
		runAt := at(time.Hour + 3*time.Microsecond)
		inTx(t, s, func(tx reconcile.Tx) error { return tx.ReopenJob(t.Context(), "pur_1", runAt) })
		equal(t, "reopened job", getJob(t, s, "pur_1"), reconcile.Job{PurchaseID: "pur_1", RunAt: runAt, LeaseToken: 1, Checks: 1})
		if got := claim(t, s, "w2", 10, runAt.Add(-time.Microsecond), leaseFor); len(got) != 0 {
			t.Fatalf("claimed %v before the reopened job's run_at", ids(got))
		}
		next := claimOne(t, s, "w2", "pur_1", runAt, leaseFor)
		if next.TakenOver || next.Token != 2 || next.Checks != 2 {
			t.Fatalf("claim of the reopened job: %+v; want token 2, checks 2, not taken over", next)
		}
		// ClaimJob takes a reopened job too.
		inTx(t, s, func(tx reconcile.Tx) error {
			if err := tx.CheckLease(t.Context(), next); err != nil {
				return err
			}
			return tx.CompleteJob(t.Context(), "pur_1", runAt)
		})
		inTx(t, s, func(tx reconcile.Tx) error { return tx.ReopenJob(t.Context(), "pur_1", at(24*time.Hour)) })
		if _, err := s.ClaimJob(t.Context(), "pur_1", "operator", leaseFor); err != nil {
			t.Fatalf("ClaimJob of a reopened job not yet due: %v", err)
		}
		err := txErr(t, s, func(tx reconcile.Tx) error { return tx.ReopenJob(t.Context(), "pur_missing", base) })
		wantErr(t, "ReopenJob(unknown)", err, reconcile.ErrNotFound)
	})

	parallel(t, "ReopenLeavesALiveLeaseAlone", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		l := claimOne(t, s, "w1", "pur_1", base, leaseFor)
		runAt := at(10 * time.Second)
		inTx(t, s, func(tx reconcile.Tx) error { return tx.ReopenJob(t.Context(), "pur_1", runAt) })
		equal(t, "leased job after ReopenJob", getJob(t, s, "pur_1"), reconcile.Job{
			PurchaseID: "pur_1", RunAt: runAt, LeaseOwner: "w1", LeaseToken: 1, LeaseExpiresAt: l.ExpiresAt, Checks: 1,
		})
		if err := checkLease(t, s, l, runAt); err != nil {
			t.Fatalf("the lease after ReopenJob: %v", err)
		}
		if got := claim(t, s, "w2", 10, l.ExpiresAt.Add(-time.Microsecond), leaseFor); len(got) != 0 {
			t.Fatalf("claimed %v while its lease, untouched by ReopenJob, was live", ids(got))
		}
		// The worker holding it finishes and reschedules; the job is due
		// again when that says.
		inTx(t, s, func(tx reconcile.Tx) error {
			if err := tx.CheckLease(t.Context(), l); err != nil {
				return err
			}
			return tx.RescheduleJob(t.Context(), "pur_1", runAt)
		})
		next := claimOne(t, s, "w2", "pur_1", l.ExpiresAt, leaseFor)
		if next.TakenOver || next.Token != 2 {
			t.Fatalf("claim after the holder released it: %+v; want token 2, not taken over", next)
		}
	})

	parallel(t, "CheckLease", func(t *testing.T) {
		s := newStore(t)
		purchaseWithJob(t, s, "pur_1", base)
		old := claimOne(t, s, "w1", "pur_1", base, leaseFor)

		for _, tc := range []struct {
			name    string
			lease   reconcile.Lease
			now     time.Time
			wantErr error
		}{
			{"current", old, old.ExpiresAt.Add(-time.Microsecond), nil},
			{"expired", old, old.ExpiresAt, reconcile.ErrLeaseLost},
			{"other owner", func() reconcile.Lease { l := old; l.Owner = "w2"; return l }(), base, reconcile.ErrLeaseLost},
			{"other token", func() reconcile.Lease { l := old; l.Token++; return l }(), base, reconcile.ErrLeaseLost},
			{"unknown job", func() reconcile.Lease { l := old; l.PurchaseID = "pur_missing"; return l }(), base, reconcile.ErrLeaseLost},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := checkLease(t, s, tc.lease, tc.now)
				if tc.wantErr == nil {
					if err != nil {
						t.Fatalf("CheckLease: %v", err)
					}
					return
				}
				wantErr(t, "CheckLease", err, tc.wantErr)
			})
		}

		// After a takeover the old token is stale, even at a time its own
		// expiry has not reached.
		taken := claimOne(t, s, "w1", "pur_1", old.ExpiresAt, leaseFor) // same owner, new token
		wantErr(t, "CheckLease with the stale token", checkLease(t, s, old, old.ExpiresAt.Add(-time.Second)), reconcile.ErrLeaseLost)
		if err := checkLease(t, s, taken, old.ExpiresAt); err != nil {
			t.Fatalf("CheckLease with the new lease: %v", err)
		}
	})

	parallel(t, "ReleaseLeases", func(t *testing.T) {
		s := newStore(t)
		for _, id := range []string{"pur_1", "pur_2", "pur_3", "pur_4"} {
			purchaseWithJob(t, s, id, base)
		}
		w1 := claim(t, s, "w1", 2, base, leaseFor)
		w2 := claim(t, s, "w2", 2, base, leaseFor)
		if len(w1) != 2 || len(w2) != 2 {
			t.Fatalf("claims: w1 %v, w2 %v; want 2 each", ids(w1), ids(w2))
		}
		now := at(time.Second)
		s.clock.Set(now)
		n, err := s.ReleaseLeases(t.Context(), "w1")
		if err != nil || n != 2 {
			t.Fatalf("ReleaseLeases(w1) = %d, %v; want 2, nil", n, err)
		}
		for _, l := range w1 {
			equal(t, "released job", getJob(t, s, l.PurchaseID), reconcile.Job{PurchaseID: l.PurchaseID, RunAt: now, LeaseToken: 1, Checks: 1})
			wantErr(t, "CheckLease of a released lease", checkLease(t, s, l, now), reconcile.ErrLeaseLost)
		}
		for _, l := range w2 {
			if err := checkLease(t, s, l, now); err != nil {
				t.Fatalf("w2's lease of %s after releasing w1's: %v", l.PurchaseID, err)
			}
		}
		again := claim(t, s, "w3", 10, now, leaseFor)
		equal(t, "jobs claimable after release", sorted(ids(again)), sorted(ids(w1)))
		for _, l := range again {
			if l.TakenOver || l.Token != 2 {
				t.Fatalf("claim after release: %+v; want token 2, not taken over", l)
			}
		}
		if n, err := s.ReleaseLeases(t.Context(), "w-none"); err != nil || n != 0 {
			t.Fatalf("ReleaseLeases(unknown owner) = %d, %v; want 0, nil", n, err)
		}
	})
}

// testConcurrentClaims has several claimers race over many due jobs: each
// job must be handed out exactly once.
func testConcurrentClaims(t *testing.T, s *testStore) {
	const (
		jobs     = 200
		claimers = 4
	)
	inTx(t, s, func(tx reconcile.Tx) error {
		for i := range jobs {
			id := fmt.Sprintf("pur_%03d", i)
			p := newPurchase(id)
			if err := tx.InsertPurchase(t.Context(), p); err != nil {
				return err
			}
			if err := tx.InsertJob(t.Context(), reconcile.Job{PurchaseID: id, RunAt: at(time.Duration(i) * time.Millisecond)}); err != nil {
				return err
			}
		}
		return nil
	})
	now := at(time.Hour)
	s.clock.Set(now)
	start := make(chan struct{})
	var wg sync.WaitGroup
	got := make([][]reconcile.Lease, claimers)
	errs := make([]error, claimers)
	for c := range claimers {
		wg.Go(func() {
			<-start
			owner := fmt.Sprintf("w%d", c)
			for {
				leases, err := s.ClaimJobs(t.Context(), owner, 7, time.Minute)
				if err != nil {
					errs[c] = err
					return
				}
				if len(leases) == 0 {
					return
				}
				got[c] = append(got[c], leases...)
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("ClaimJobs: %v", err)
	}
	seen := map[string]string{}
	for c, leases := range got {
		for _, l := range leases {
			owner := fmt.Sprintf("w%d", c)
			if prev, dup := seen[l.PurchaseID]; dup {
				t.Fatalf("job %s handed to %s and %s", l.PurchaseID, prev, owner)
			}
			if l.Owner != owner || l.Token != 1 {
				t.Fatalf("lease %+v: want owner %s, token 1", l, owner)
			}
			seen[l.PurchaseID] = owner
		}
	}
	if len(seen) != jobs {
		t.Fatalf("%d jobs handed out, want %d", len(seen), jobs)
	}
	for _, leases := range got {
		checkLeaseNow(t, leases, now)
	}
	if rest := claim(t, s, "w-late", jobs, now, time.Minute); len(rest) != 0 {
		t.Fatalf("%d jobs still claimable after the race", len(rest))
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

func testListEscalated(t *testing.T, s *testStore) {
	escalate := func(id string, state statemachine.State, when time.Time, reason reconcile.EscalationReason) reconcile.Purchase {
		t.Helper()
		p := createIn(t, s, id, state)
		p.EscalatedAt, p.EscalationReason = when, reason
		return update(t, s, p, state)
	}
	list := func() []reconcile.Purchase {
		t.Helper()
		var out []reconcile.Purchase
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			out, err = tx.ListEscalated(t.Context())
			return err
		})
		return out
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("ListEscalated on an empty store: %+v", got)
	}
	a := escalate("pur_a", statemachine.Uncertain, at(2*time.Hour), reconcile.EscalationUncertainTooLong)
	b := escalate("pur_b", statemachine.Declined, at(time.Hour), reconcile.EscalationContradiction) // terminal, still listed
	c := escalate("pur_c", statemachine.Submitted, at(3*time.Hour), reconcile.EscalationIdempotencyMismatch)
	createIn(t, s, "pur_d", statemachine.Succeeded)
	insertPurchase(t, s, newPurchase("pur_e"))
	equal(t, "escalated, oldest first", list(), []reconcile.Purchase{b, a, c})

	// An operator's resolution clears the escalation.
	b.EscalatedAt, b.EscalationReason = time.Time{}, ""
	update(t, s, b, statemachine.Declined)
	equal(t, "escalated after resolving pur_b", list(), []reconcile.Purchase{a, c})
}

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

func testFindByPaymentID(t *testing.T, s *testStore) {
	find := func(paymentID string) (reconcile.Purchase, error) {
		t.Helper()
		var p reconcile.Purchase
		err := txErr(t, s, func(tx reconcile.Tx) error {
			var err error
			p, err = tx.FindPurchaseByPaymentID(t.Context(), paymentID)
			return err
		})
		return p, err
	}
	insertPurchase(t, s, newPurchase("pur_other")) // no payment id
	p := createIn(t, s, "pur_1", statemachine.Submitted)
	p.ProviderPaymentID = "pi_1"
	p = update(t, s, p, statemachine.Submitted)

	got, err := find("pi_1")
	if err != nil {
		t.Fatalf("FindPurchaseByPaymentID(pi_1): %v", err)
	}
	equal(t, "found purchase", got, p)
	_, err = find("pi_unknown")
	wantErr(t, "FindPurchaseByPaymentID(unknown)", err, reconcile.ErrNotFound)

	// A provider payment id belongs to one purchase.
	q := createIn(t, s, "pur_2", statemachine.Submitted)
	q.ProviderPaymentID = "pi_1"
	err = txErr(t, s, func(tx reconcile.Tx) error { return tx.UpdatePurchase(t.Context(), q, statemachine.Submitted) })
	wantErr(t, "second purchase with the same payment id", err, reconcile.ErrDuplicate)
}
