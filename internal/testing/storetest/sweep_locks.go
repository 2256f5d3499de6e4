package storetest

import (
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// The tests of the sweep locks.

// acquire sets the store's clock to now and takes the lock.
func acquire(t *testing.T, s *testStore, name, owner string, now time.Time, ttl time.Duration) bool {
	t.Helper()
	s.clock.Set(now)
	var ok bool
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		ok, err = tx.AcquireSweepLock(t.Context(), name, owner, ttl)
		return err
	})
	return ok
}

func release(t *testing.T, s reconcile.Store, name, owner string) {
	t.Helper()
	inTx(t, s, func(tx reconcile.Tx) error { return tx.ReleaseSweepLock(t.Context(), name, owner) })
}

func testSweepLocks(t *testing.T, newStore func(*testing.T) *testStore) {
	const ttl = time.Minute

	parallel(t, "Lifecycle", func(t *testing.T) {
		s := newStore(t)
		for _, step := range []struct {
			what  string
			owner string
			now   time.Duration
			want  bool
		}{
			{"free lock", "a", 0, true},
			{"held by another, unexpired", "b", 30 * time.Second, false},
			{"same owner re-acquires, extending it to 90s", "a", 30 * time.Second, true},
			{"past the first expiry, within the extension", "b", 61 * time.Second, false},
			{"expired", "b", 91 * time.Second, true},
			{"the old owner, now that b holds it", "a", 92 * time.Second, false},
		} {
			if got := acquire(t, s, "retention", step.owner, at(step.now), ttl); got != step.want {
				t.Fatalf("%s: AcquireSweepLock(retention, %s, +%s) = %v, want %v", step.what, step.owner, step.now, got, step.want)
			}
		}
		// Locks are independent by name.
		if !acquire(t, s, "rescue", "a", at(92*time.Second), ttl) {
			t.Fatal("AcquireSweepLock(rescue, a) refused while only retention is held (by b)")
		}

		now := at(100 * time.Second) // b holds retention until 151s
		release(t, s, "retention", "a")
		if acquire(t, s, "retention", "c", now, ttl) {
			t.Fatal("a released b's lock: c acquired it")
		}
		release(t, s, "retention", "b")
		if !acquire(t, s, "retention", "c", now, ttl) {
			t.Fatal("after b released it, c could not acquire the lock")
		}
		release(t, s, "never-taken", "c") // releasing a lock nobody holds is no error
	})

	parallel(t, "Race", func(t *testing.T) {
		s := newStore(t)
		owners := []string{"replica-1", "replica-2"}
		s.clock.Set(base)
		results := race(t, s, len(owners), func(tx reconcile.Tx, i int) (bool, error) {
			return tx.AcquireSweepLock(t.Context(), "rescue", owners[i], ttl)
		})
		won := winners(results)
		if len(won) != 1 {
			t.Fatalf("two replicas racing for one lock: %v acquired it, want exactly one", results)
		}
		loser := owners[1-won[0]]
		if acquire(t, s, "rescue", loser, at(time.Second), ttl) {
			t.Fatalf("%s acquired the lock %s won", loser, owners[won[0]])
		}
		if !acquire(t, s, "rescue", owners[won[0]], at(time.Second), ttl) {
			t.Fatalf("%s, the winner, could not re-acquire its lock", owners[won[0]])
		}
	})
}
