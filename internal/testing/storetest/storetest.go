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
// goroutine, inserting the same inbox event or idempotency key, taking
// the same sweep lock, or inserting refunds of one payment that together
// exceed it. The store must make them wait for each other (or retry them
// inside InTx), not fail them: exactly one must report success, the
// others must see its row (or, for the refunds, be refused with
// reconcile.ErrRefundExceeds).
//
// Checks that need raw SQL (the audit tables refusing UPDATE and DELETE,
// audit findings refusing any change but their closing, the transition
// table refusing changes, the transition guard holding for statements the
// store does not write) belong in each store's own tests.
//
// The suite is split by concept, as the stores are, and its files come
// in the same order as theirs: storetest.go (Run and the helpers every
// test uses), clock.go, store.go (Ready, InTx, Savepoint), purchases.go,
// accounts.go (a purchase's and an inbox event's provider account),
// audit_trail.go (transitions and provider attempts), jobs.go (claims and
// leases), inbox.go, idempotency_keys.go, operator_actions.go,
// sweep_locks.go, findings.go (audit findings, links and runs),
// refunds.go (refunds: their writes, guard and limits, their jobs beside
// the purchases', their rows of the audit, their periodic reads) and
// disputes.go (disputes: their writes and guard, the open ones, their
// rows of the audit, the refunds they forbid, the inbox's disputes). Run
// lists the tests in that order.
package storetest

import (
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
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
		// clock.go
		{"StoreClock", testStoreClock},
		{"DefaultClock", func(t *testing.T, _ func(*testing.T) *testStore) { testDefaultClock(t, newStore(t, nil)) }},
		// store.go
		{"Ready", withStore(testReady)},
		{"InTx", testInTx},
		{"TxUsableAfterRefusal", withStore(testTxUsableAfterRefusal)},
		{"Savepoint", testSavepoint},
		// purchases.go
		{"Purchase", testPurchase},
		{"UpdatePurchase", testUpdatePurchase},
		{"TransitionGuard", withStore(testTransitionGuard)},
		{"FindPurchaseByPaymentID", withStore(testFindByPaymentID)},
		{"FindPurchaseByReference", withStore(testFindByReference)},
		{"ListEscalated", withStore(testListEscalated)},
		// accounts.go
		{"Accounts", withStore(testAccounts)},
		// account_lists.go
		{"AccountLists", withStore(testAccountLists)},
		{"AccountClaims", withStore(testAccountClaims)},
		{"CountEscalatedByAccount", withStore(testCountEscalatedByAccount)},
		// purchase_counts.go
		{"CountByState", withStore(testCountByState)},
		{"CountByStateFollowsWrites", withStore(testCountByStateFollowsWrites)},
		{"CountByStateConcurrentWriters", withStore(testCountByStateConcurrentWriters)},
		// purchases.go
		{"CountEscalated", withStore(testCountEscalated)},
		{"OldestUncertainSince", withStore(testOldestUncertainSince)},
		{"ListOverdueUncertain", withStore(testListOverdueUncertain)},
		{"ListSubmittedBetween", withStore(testListSubmittedBetween)},
		{"ListSucceededWithoutPayment", withStore(testListSucceededWithoutPayment)},
		// audit_trail.go
		{"Transitions", withStore(testTransitions)},
		{"Attempts", withStore(testAttempts)},
		// jobs.go
		{"Jobs", testJobs},
		{"ConcurrentClaims", withStore(testConcurrentClaims)},
		{"ClaimExpiredJobs", withStore(testClaimExpiredJobs)},
		{"ClaimJob", withStore(testClaimJob)},
		// moves.go
		{"ApplyMoves", testApplyMoves},
		// inbox.go, inbox_pending.go, idempotency_keys.go, keyed_purchases.go, operator_actions.go, sweep_locks.go
		{"Inbox", testInbox},
		{"PendingInbox", testPendingInbox},
		{"IdempotencyKeys", testIdempotencyKeys},
		{"KeyedPurchases", testKeyedPurchases},
		{"OperatorActions", withStore(testOperatorActions)},
		{"SweepLocks", testSweepLocks},
		// findings.go
		{"Findings", testFindings},
		{"AuditRuns", withStore(testAuditRuns)},
		// refunds.go
		{"Refund", testRefund},
		{"UpdateRefund", testUpdateRefund},
		{"RefundTransitionGuard", withStore(testRefundTransitionGuard)},
		{"RefundLimits", testRefundLimits},
		{"ConcurrentRefunds", withStore(testConcurrentRefunds)},
		{"RefundJobs", testRefundJobs},
		{"RefundAuditTrail", withStore(testRefundAuditTrail)},
		{"RefundReads", testRefundReads},
		// disputes.go, dispute_limits.go, dispute_inbox.go
		{"Dispute", testDispute},
		{"UpdateDispute", testUpdateDispute},
		{"DisputeTransitionGuard", withStore(testDisputeTransitionGuard)},
		{"ListOpenDisputes", withStore(testListOpenDisputes)},
		{"DisputeAuditTrail", withStore(testDisputeAuditTrail)},
		{"DisputedRefunds", testDisputedRefunds},
		{"InboxDisputes", withStore(testInboxDisputes)},
		// recovery.go
		{"Recoveries", withStore(testRecoveries)},
		{"SendHorizon", withStore(testSendHorizon)},
		// outbox.go
		{"Outbox", testOutbox},
		{"OutboxEpoch", withStore(testOutboxEpoch)},
		// budget.go
		{"BudgetBuckets", testBudgetBuckets},
		{"SharedBudget", testSharedBudget},
		{"ClaimsNewFirst", withStore(testClaimsNewFirst)},
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

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %+v\n want %+v", what, got, want)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// racers is how many goroutines race for one key in the concurrency
// tests.
const racers = 8

// race runs fn(i) for i in [0, n) in n goroutines released at the same
// instant, each fn in its own transaction, and returns what each
// reported. fn may run more than once (InTx retries), so it reports by
// returning, not by counting.
func race[T any](t *testing.T, s reconcile.Store, n int, fn func(tx reconcile.Tx, i int) (T, error)) []T {
	t.Helper()
	got := make([]T, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = s.InTx(t.Context(), func(tx reconcile.Tx) error {
				v, err := fn(tx, i)
				got[i] = v
				return err
			})
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("racing transactions: %v", err)
	}
	return got
}

// winners returns the indexes whose result is true.
func winners(results []bool) []int {
	var out []int
	for i, ok := range results {
		if ok {
			out = append(out, i)
		}
	}
	return out
}

// sameBytes treats nil and empty alike: a store may read an empty byte
// string back either way.
func sameBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
