package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
)

// Group commit: concurrent requests (webhooks, purchase API calls) share
// one transaction, so that they share its commit (on a durable database,
// the WAL flush that dominates a small transaction's cost).
//
// A request queues a function over a Tx. A leader takes whatever is
// queued (up to GroupCommitMax), runs every function in one
// transaction, each under a savepoint of its own (Tx.Savepoint), commits,
// and only then answers each request. Up to GroupCommitLeaders groups are
// in flight at once. Requests of one kind may instead be run together
// (setRunner): the purchase API's creates are inserted in one statement
// for the whole group (groupcreate.go). There is no timer: a request
// that finds a leader free is taken at once, alone if it is alone, and
// groups form from the requests that arrive while the groups in flight
// run.
//
// Failures stay with the member that caused them:
//
//   - A function that fails with an error of a known kind (KindOf is not
//     KindInternal: a duplicate, a conflict, a refused key, ...) is
//     rolled back to its savepoint, the others commit, and its error is
//     its answer.
//   - A function that fails otherwise (a driver error, a deadlock
//     between this group and another transaction: possibly its
//     neighbours' doing) is rolled back to its savepoint, and runs again
//     alone, in a transaction of its own, after the group commits.
//   - When the group's transaction fails as a whole (its commit, a
//     savepoint that cannot be rolled back, a lost connection), every
//     member runs again alone. (A COMMIT whose reply was lost may have
//     committed: the second runs then find their own writes, as any
//     retry does: a duplicate event, a replayed key.)
//   - A function that panics is rolled back to its savepoint, the others
//     commit, and the panic goes on in its own request's goroutine.
//
// A request whose context ends while it is queued leaves the queue; once
// taken, it waits for its group, whose statements run on a context of the
// group's own, which ends only when every member's has, so that one
// request's cancellation never cuts its neighbours' statements.
//
// So a function may run more than once, and must have no side effects
// outside its Tx (as for Store.InTx); it reads its results out of
// variables it sets, reset at its start.
//
// groupCommitter queues requests and runs them in group transactions.
// Safe for concurrent use.
type groupCommitter struct {
	store Store
	log   *slog.Logger
	leaderQueue[*member]
}

// leaderQueue is group commit's queue and leaders: requests queue, and up
// to leaders goroutines each take up to max of them at a time and run
// them with run, until the queue is empty. Safe for concurrent use.
type leaderQueue[M comparable] struct {
	max     int // GroupCommitMax
	leaders int // GroupCommitLeaders
	run     func(group []M)

	mu     sync.Mutex
	queue  []M
	active int // leaders running

	// queued, when set (tests), is called with the queue's length after
	// every request queued, under mu.
	queued func(n int)
}

// member is one request of a group.
type member struct {
	ctx context.Context // the request's: whether it still waits
	fn  func(context.Context, Tx) error
	// set, when not nil, runs this member together with the group's
	// other members that name it (see setRunner), and arg is what it
	// needs of this one; fn remains the member's path alone.
	set  setRunner
	arg  any
	done chan answer // buffered: the leader never waits for the request
}

// setRunner runs together, in a group's transaction, the members of the
// group that name it, so that a group of like requests costs a handful of
// set-based statements instead of a few per request.
type setRunner interface {
	// runSet runs members (in queue order, each still waited for) in tx
	// and returns their answers, one per member, with the meaning
	// runMember gives them: a failure of a known kind stays its member's,
	// and an internal one makes it run again alone. Each member's writes
	// must commit with the group, or not at all, exactly as its fn's
	// would. An error means tx is unusable, and every member of the group
	// runs again alone.
	runSet(ctx context.Context, tx Tx, members []*member) ([]answer, error)
}

// answer is what a leader tells a member, after its group ended.
type answer struct {
	err error
	// alone: run fn again in a transaction of its own.
	alone bool
	// panicked is what fn panicked with: the panic goes on in the
	// request's goroutine, as it would without grouping.
	panicked any
}

func newGroupCommitter(store Store, maxGroup, leaders int, log *slog.Logger) *groupCommitter {
	c := &groupCommitter{store: store, log: log}
	c.max, c.leaders, c.run = maxGroup, leaders, c.commit
	return c
}

// do runs fn in a group transaction and returns nil once that
// transaction has committed, or fn's error. fn gets the context to use
// for its statements: the group's, which ends only when every member's
// context has ended, so that one request's cancellation never cuts the
// statements of the others.
//
// When ctx ends while the request is still queued, do withdraws it and
// returns ctx's cause; once a leader has taken it, do waits for the
// group's outcome (at most the group's transaction), and returns it:
// what fn wrote may have committed.
func (c *groupCommitter) do(ctx context.Context, fn func(context.Context, Tx) error) error {
	return c.await(&member{ctx: ctx, fn: fn, done: make(chan answer, 1)})
}

// doSet is do for a member that set runs with its like neighbours (see
// setRunner), arg being what set needs of it. fn is its path alone: when
// its group's transaction fails, and wherever set chooses to run it so.
// It returns as do does, once the member's transaction has committed.
func (c *groupCommitter) doSet(ctx context.Context, fn func(context.Context, Tx) error, set setRunner, arg any) error {
	return c.await(&member{ctx: ctx, fn: fn, set: set, arg: arg, done: make(chan answer, 1)})
}

// await queues m and waits for its answer (see do).
func (c *groupCommitter) await(m *member) error {
	ctx, fn := m.ctx, m.fn
	c.submit(m)
	var a answer
	select {
	case a = <-m.done:
	case <-ctx.Done():
		if c.withdraw(m) {
			return context.Cause(ctx)
		}
		a = <-m.done
	}
	switch {
	case a.panicked != nil:
		panic(a.panicked)
	case a.alone:
		return c.store.InTx(ctx, func(tx Tx) error { return fn(ctx, tx) })
	}
	return a.err
}

// submit queues m and starts a leader if fewer than q.leaders run.
func (q *leaderQueue[M]) submit(m M) {
	q.mu.Lock()
	q.queue = append(q.queue, m)
	if q.queued != nil {
		q.queued(len(q.queue))
	}
	start := q.active < q.leaders
	if start {
		q.active++
	}
	q.mu.Unlock()
	if start {
		go q.lead()
	}
}

// withdraw takes m out of the queue and reports whether it was still
// there (no leader took it).
func (q *leaderQueue[M]) withdraw(m M) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, w := range q.queue {
		if w == m {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			return true
		}
	}
	return false
}

// lead runs groups until the queue is empty.
func (q *leaderQueue[M]) lead() {
	for {
		q.mu.Lock()
		n := min(len(q.queue), q.max)
		if n == 0 {
			q.active--
			q.mu.Unlock()
			return
		}
		group := make([]M, n)
		copy(group, q.queue)
		// A fresh slice when the queue empties, so that the array does not
		// keep answered members alive.
		q.queue = append(q.queue[:0:0], q.queue[n:]...)
		q.mu.Unlock()
		q.run(group)
	}
}

// errBroken marks a group transaction that became unusable.
var errBroken = errors.New("reconcile: group transaction unusable")

// commit runs group in one transaction and answers every member.
func (c *groupCommitter) commit(group []*member) {
	ctx, release := groupContext(group)
	defer release()
	answers := make([]answer, len(group))
	err := c.store.InTx(ctx, func(tx Tx) error {
		clear(answers) // InTx may run this again
		// The members a setRunner takes, by runner, in order of first
		// appearance so that a group runs the same way every time.
		type setOf struct {
			runner  setRunner
			at      []int
			members []*member
		}
		var sets []*setOf
		for i, m := range group {
			if m.ctx.Err() != nil {
				// Its request left before its turn: nothing of it runs.
				answers[i] = answer{err: context.Cause(m.ctx)}
				continue
			}
			if m.set != nil {
				j := slices.IndexFunc(sets, func(s *setOf) bool { return s.runner == m.set })
				if j < 0 {
					j = len(sets)
					sets = append(sets, &setOf{runner: m.set})
				}
				sets[j].at = append(sets[j].at, i)
				sets[j].members = append(sets[j].members, m)
				continue
			}
			a, err := runMember(ctx, tx, m)
			if err != nil {
				return fmt.Errorf("%w: member %d of %d: %w", errBroken, i+1, len(group), err)
			}
			answers[i] = a
		}
		for _, s := range sets {
			as, err := s.runner.runSet(ctx, tx, s.members)
			if err != nil {
				return fmt.Errorf("%w: %d members together: %w", errBroken, len(s.members), err)
			}
			for j, i := range s.at {
				answers[i] = as[j]
			}
		}
		return nil
	})
	if err != nil {
		c.log.Warn("group transaction failed; its requests run again, each alone", "requests", len(group), "err", err)
	}
	for i, m := range group {
		a := answers[i]
		switch {
		case err != nil:
			// Nothing committed: each runs alone, so that whatever failed
			// the group fails only its own member.
			a = answer{alone: true}
		case a.err != nil && a.panicked == nil && KindOf(a.err) == KindInternal && m.ctx.Err() == nil:
			c.log.Debug("group member failed; it runs again alone", "err", a.err)
			a = answer{alone: true}
		}
		m.done <- a
	}
}

// runMember runs m's function under a savepoint of tx. It returns the
// member's answer, or an error when the savepoint itself failed and the
// transaction is unusable.
func runMember(ctx context.Context, tx Tx, m *member) (answer, error) {
	var failed *memberFailure
	err := tx.Savepoint(ctx, func(tx Tx) (err error) {
		defer func() {
			if p := recover(); p != nil {
				failed = &memberFailure{err: fmt.Errorf("reconcile: group member panicked: %v", p), panicked: p}
				err = failed
			}
		}()
		if ferr := m.fn(ctx, tx); ferr != nil {
			failed = &memberFailure{err: ferr}
			return failed
		}
		return nil
	})
	switch {
	case err == nil:
		return answer{}, nil
	case failed != nil && err == error(failed):
		return answer{err: failed.err, panicked: failed.panicked}, nil
	}
	return answer{}, err
}

// memberFailure is a member function's error, as its savepoint returns
// it: Savepoint returns fn's error unchanged when it rolled back, so
// identity tells a member's failure from the savepoint's own.
type memberFailure struct {
	err      error
	panicked any
}

func (f *memberFailure) Error() string { return f.err.Error() }
func (f *memberFailure) Unwrap() error { return f.err }

// groupContext returns the context of a group's transaction: it ends when
// the context of every member has ended (nobody waits for the group any
// more), and with release.
func groupContext(group []*member) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int64
	left.Store(int64(len(group)))
	stops := make([]func() bool, len(group))
	for i, m := range group {
		stops[i] = context.AfterFunc(m.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
