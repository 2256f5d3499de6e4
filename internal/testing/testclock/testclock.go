// Package testclock is the one clock that tests move by hand.
//
// payrecon's decisions all depend on time: when a job is due, when a lease
// expires, whether an idempotency key is still kept, how old an uncertain
// purchase is, whether a webhook signature is stale. A test that waited
// for real time to pass would be slow and flaky, so every component takes
// its clock as a func() time.Time (reconcile.Config.Now, the stores'
// Config.Now, fakeprovider.Config.Now, ...), and a test injects
// Clock.Now into all of them: one clock, shared by the store, the worker
// and the fake provider, that stands still until the test moves it with
// Advance or Set. Hours of backoff then pass in a line, and every
// component sees the same instant.
//
// A Clock is safe for concurrent use: stores, workers and HTTP handlers
// read it from their own goroutines while the test moves it.
//
// It is meant for tests (the package is internal and imports no testing
// code, but nothing outside tests should need a clock that stands still).
// Where a test only needs fake time for sleeps and timers in code it
// fully controls, testing/synctest may fit better; payrecon's tests mostly
// share time with a database (Postgres in another process), which a
// synctest bubble cannot fake.
package testclock

import (
	"sync"
	"time"
)

// Clock is a clock that moves only when told. Create it with New. Safe for
// concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a Clock standing at start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time. Pass the method value (c.Now) wherever a
// component takes a func() time.Time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (backward for a negative d).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
