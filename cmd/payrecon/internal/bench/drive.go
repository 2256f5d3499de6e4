package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// benchProgressEvery is how often a phase prints its progress.
const benchProgressEvery = time.Second

// progress prints "label: done/total unit, rate/s" every
// benchProgressEvery while a phase runs, and once at its end.
type progress struct {
	w      io.Writer
	label  string
	unit   string
	total  int
	count  func() int64
	start  time.Time
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once
}

// startProgress starts printing the progress of a phase whose count of
// finished items count returns.
func startProgress(w io.Writer, label, unit string, total int, count func() int64) *progress {
	p := &progress{w: w, label: label, unit: unit, total: total, count: count, start: time.Now(),
		stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(benchProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.print()
			}
		}
	}()
	return p
}

func (p *progress) print() {
	n := p.count()
	rate := float64(n) / time.Since(p.start).Seconds()
	fmt.Fprintf(p.w, "bench: %s: %d/%d %s, %.0f/s\n", p.label, n, p.total, p.unit, rate)
}

// end stops the progress lines, with a last one.
func (p *progress) end() {
	p.closed.Do(func() {
		close(p.stop)
		<-p.done
		p.print()
	})
}

// runEach calls fn(ctx, i) for every i in [0, n), workers at a time, and
// returns the first error (the other calls are then cancelled). count
// reports how many calls have returned nil.
func runEach(ctx context.Context, n, workers int, done *atomic.Int64, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}

// driven is what a driver run measured.
type driven struct {
	latencies []time.Duration // of the requests that succeeded
	outcomes  map[string]int
	failures  []string // the first few failed requests, for the report
	failed    int
	// Open loop: the sends that left more than 1ms after their time,
	// late because every client was busy then (late), or because the
	// client woke late from its wait (lateWake: the machine's scheduler,
	// not the bench's clients).
	late, lateWake int
	took           time.Duration
}

// maxFailuresShown caps the failed requests a report lists.
const maxFailuresShown = 5

// drive sends n requests through send, clients at a time.
//
// Closed loop (rate 0): each client sends its next request when its last
// one is answered; the latency is the request's own time.
//
// Open loop (rate > 0): request i is due at start + i/rate, on a fixed
// clock whatever the answers do, and is sent by the first free client,
// which waits for its time. It leaves late when every client was busy at
// its time, or when its client woke late from that wait (the machine's
// scheduler); driven counts the two apart. Its latency runs from the time
// it was due, not from when it left, so that a stalled server is not
// hidden by the load it stopped receiving (coordinated omission).
//
// send returns the request's outcome, for the report's counts, or an
// error for a request that failed. done counts the requests answered.
func drive(ctx context.Context, n, clients int, rate float64, done *atomic.Int64, send func(ctx context.Context, i int) (string, error)) driven {
	return driveWith(ctx, n, clients, rate, done, send, sleepUntil)
}

// driveWith is drive with the open loop's wait for a request's time,
// sleep, given: sleepUntil, or a test's.
func driveWith(ctx context.Context, n, clients int, rate float64, done *atomic.Int64, send func(ctx context.Context, i int) (string, error), sleep func(context.Context, time.Time) bool) driven {
	var (
		mu   sync.Mutex
		d    = driven{outcomes: map[string]int{}, latencies: make([]time.Duration, 0, n)}
		next atomic.Int64
		wg   sync.WaitGroup
	)
	start := time.Now()
	for range min(clients, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				from := time.Now()
				late, lateWake := false, false
				if rate > 0 {
					from = start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
					// A request taken after its time found every client
					// busy until then: a free one takes the next at once
					// and waits for its time. One that waited and left
					// late was woken late.
					behind := time.Since(from)
					late = behind > time.Millisecond
					if !sleep(ctx, from) {
						return
					}
					lateWake = behind < 0 && time.Since(from) > time.Millisecond
				}
				outcome, err := send(ctx, i)
				took := time.Since(from)
				done.Add(1)
				mu.Lock()
				if late {
					d.late++
				}
				if lateWake {
					d.lateWake++
				}
				if err != nil {
					d.failed++
					d.outcomes["failed"]++
					if len(d.failures) < maxFailuresShown {
						d.failures = append(d.failures, fmt.Sprintf("request %d: %v", i, err))
					}
				} else {
					d.outcomes[outcome]++
					d.latencies = append(d.latencies, took)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	d.took = time.Since(start)
	return d
}

// sleepUntil waits until t, or ctx ends (then it returns false).
func sleepUntil(ctx context.Context, t time.Time) bool {
	wait := time.Until(t)
	if wait <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
