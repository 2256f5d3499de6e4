package events_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/events"
)

// fault is what goes wrong with one delivery, on the shop's side. The
// test sender asks for it in the faultHeader (only the body is signed).
type fault string

const (
	none fault = ""
	// failEffect: the effect returns an error: rolled back, 500.
	failEffect fault = "fail-effect"
	// crashInEffect: the shop's process dies inside the transaction,
	// before the commit: rolled back, and no answer reaches the sender.
	crashInEffect fault = "crash-in-effect"
	// dropReply: the shop's process dies after the commit, before its 2xx
	// reaches the sender: applied, but the sender does not know.
	dropReply fault = "drop-reply"
)

const faultHeader = "Test-Fault"

type faultKey struct{}

// faultOf returns the fault the delivery being handled asked for.
func faultOf(ctx context.Context) fault {
	f, _ := ctx.Value(faultKey{}).(fault)
	return f
}

// faults wraps the receiver with the faults of faultHeader.
type faults struct{ next http.Handler }

func (f faults) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ft := fault(req.Header.Get(faultHeader))
	req = req.WithContext(context.WithValue(req.Context(), faultKey{}, ft))
	if ft != dropReply {
		f.next.ServeHTTP(w, req)
		return
	}
	rec := httptest.NewRecorder()
	f.next.ServeHTTP(rec, req)
	if rec.Code/100 == 2 {
		panic(http.ErrAbortHandler) // committed; the connection drops without an answer
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func TestCrashBetweenCommitAndReply(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *shop) {
		ev := event(t, "evt_a", events.PurchaseSucceeded, "pur_1", 1, "course-1")
		if r := s.deliver(ev, 1, dropReply); r.status != 0 {
			t.Fatalf("attempt 1: %v, want no answer", r)
		}
		if n := s.count(`SELECT count(*) FROM grants`); n != 1 {
			t.Fatalf("%d grants after the commit, want 1", n)
		}
		// The sender saw no 2xx, so it delivers again: acknowledged, not applied.
		expect(t, "attempt 2", s.deliver(ev, 2, dropReply), 0, "")
		expect(t, "attempt 3", s.deliver(ev, 3, none), 200, "duplicate")
		if n := s.count(`SELECT count(*) FROM effects`); n != 1 {
			t.Errorf("the effect committed %d times", n)
		}
		if n := s.count(`SELECT count(*) FROM grants`); n != 1 {
			t.Errorf("%d grants", n)
		}
	})
}

func TestCrashBeforeCommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *shop) {
		ev := event(t, "evt_a", events.PurchaseSucceeded, "pur_1", 1, "course-1")
		expect(t, "attempt 1", s.deliver(ev, 1, crashInEffect), 0, "")
		if n := s.count(`SELECT count(*) FROM payrecon_event_inbox`) + s.count(`SELECT count(*) FROM effects`) + s.count(`SELECT count(*) FROM grants`); n != 0 {
			t.Fatalf("%d rows left by a crash before the commit", n)
		}
		expect(t, "attempt 2", s.deliver(ev, 2, none), 200, "applied")
		if n := s.count(`SELECT count(*) FROM grants`); n != 1 {
			t.Errorf("%d grants", n)
		}
	})
}

func TestDelayedDeliveries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *shop) {
		first := event(t, "evt_1", events.PurchaseSucceeded, "pur_1", 1, "course-1")
		second := event(t, "evt_2", events.RefundSucceeded, "pur_1", 2, "course-1")
		second.RefundID = "ref_1"
		sentAt := s.clock.Now()
		held, err := events.NewRequest(t.Context(), s.server.URL, secret, first, 1, sentAt)
		if err != nil {
			t.Fatal(err)
		}
		// The first attempt is held by a proxy for ten minutes: stale.
		s.clock.Advance(10 * time.Minute)
		expect(t, "held 10 minutes", s.send(held), 401, "timestamp_outside_tolerance")
		if n := s.count(`SELECT count(*) FROM payrecon_event_inbox`); n != 0 {
			t.Fatalf("a stale delivery stored %d rows", n)
		}
		// The sender's retry, signed afresh, goes through.
		expect(t, "retry", s.deliver(first, 2, none), 200, "applied")
		// Another copy of the first event, sent now but delayed past the
		// second event (within the tolerance): reordered, acknowledged.
		late, err := events.NewRequest(t.Context(), s.server.URL, secret, first, 3, s.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		expect(t, "second event", s.deliver(second, 1, none), 200, "applied")
		s.clock.Advance(time.Minute)
		expect(t, "late copy of the first", s.send(late), 200, "duplicate")
		if n := s.count(`SELECT count(*) FROM grants`); n != 1 {
			t.Errorf("%d grants", n)
		}
		if got := s.lastSequence("pur_1"); got != 2 {
			t.Errorf("last sequence %d, want 2", got)
		}
	})
}

// story is one purchase's events, as payrecon's outbox holds them for a
// subscription, and what the shop should end with.
type story struct {
	purchase string
	events   []events.Event
	grants   int  // access grants the shop should have for it
	gap      bool // the subscription filters an event out: one gap
}

// stories returns n purchases' event streams, six kinds in turn.
func stories(t *testing.T, n int) []story {
	t.Helper()
	var out []story
	for i := range n {
		p := fmt.Sprintf("pur_%03d", i)
		product := fmt.Sprintf("course-%d", i%3)
		ev := func(seq int64, typ events.Type, extra ...string) events.Event {
			return event(t, fmt.Sprintf("evt_%03d_%d", i, seq), typ, p, seq, product, extra...)
		}
		st := story{purchase: p}
		switch i % 6 {
		case 0: // settled at once
			st.events, st.grants = []events.Event{ev(1, events.PurchaseSucceeded)}, 1
		case 1: // declined
			st.events = []events.Event{ev(1, events.PurchaseDeclined)}
		case 2: // escalated, then an operator found the charge
			st.events, st.grants = []events.Event{ev(1, events.PurchaseEscalated), ev(2, events.PurchaseResolved, "outcome", "succeeded")}, 1
		case 3: // escalated, then an operator found no charge
			st.events = []events.Event{ev(1, events.PurchaseEscalated), ev(2, events.PurchaseResolved, "outcome", "declined")}
		case 4: // succeeded; the audit doubted it and an operator confirmed it: two
			// events that grant, one grant (the business key)
			st.events, st.grants = []events.Event{
				ev(1, events.PurchaseSucceeded), ev(2, events.FindingOpened),
				ev(3, events.PurchaseResolved, "outcome", "succeeded"), ev(4, events.FindingClosed),
			}, 1
		case 5: // a subscription without findings: sequence 2 never comes
			refund := ev(3, events.RefundSucceeded)
			refund.RefundID = "ref_" + p
			st.events, st.grants, st.gap = []events.Event{ev(1, events.PurchaseSucceeded), refund}, 1, true
		}
		out = append(out, st)
	}
	return out
}

// held is a delivery a network path held back: the event and the time it
// was signed.
type held struct {
	ev       events.Event
	attempt  int
	signedAt time.Time
}

// TestDeliveryUnderFaults plays payrecon's sender against the receiver:
// purchases in parallel, each purchase's events in order, each event
// retried until a 2xx, and on the way duplicated deliveries (a concurrent
// copy), delayed ones (copies held back and delivered after the
// purchase's later events, some past the signature's tolerance), effects
// that fail, crashes before the commit and crashes between the commit and
// the 2xx. Every event's effect commits exactly once, every purchase
// grants access exactly once (or never, if it did not succeed), and the
// receiver ends at each purchase's last sequence.
func TestDeliveryUnderFaults(t *testing.T) {
	const (
		purchases = 60
		senders   = 4
		seed      = 16
	)
	forEachBackend(t, func(t *testing.T, s *shop) {
		all := stories(t, purchases)
		var (
			mu      sync.Mutex
			late    []held
			counts  = map[string]*atomic.Int64{}
			kinds   = []string{string(failEffect), string(crashInEffect), string(dropReply), "duplicate", "delayed"}
			deliver = func(ev events.Event, attempt int, f fault) reply { return s.deliver(ev, attempt, f) }
		)
		for _, k := range kinds {
			counts[k] = &atomic.Int64{}
		}
		// sendStory is the relay's loop for one purchase: event n+1 waits
		// until event n is acknowledged.
		sendStory := func(i int, st story) {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for _, ev := range st.events {
				for attempt := 1; ; attempt++ {
					if attempt > 30 {
						t.Errorf("%s: no 2xx after 30 attempts", ev.ID)
						return
					}
					f := none
					switch x := rng.IntN(20); {
					case x < 3:
						f = dropReply
					case x < 5:
						f = crashInEffect
					case x < 7:
						f = failEffect
					}
					if f != none {
						counts[string(f)].Add(1)
					}
					if rng.IntN(6) == 0 {
						counts["delayed"].Add(1)
						mu.Lock()
						late = append(late, held{ev, attempt, s.clock.Now()})
						mu.Unlock()
					}
					var copyReply reply
					var wg sync.WaitGroup
					if rng.IntN(5) == 0 {
						counts["duplicate"].Add(1)
						wg.Go(func() { copyReply = deliver(ev, attempt, none) })
					}
					r := deliver(ev, attempt, f)
					wg.Wait()
					for _, r := range []reply{r, copyReply} {
						if r.status/100 == 4 {
							t.Errorf("%s attempt %d: %v", ev.ID, attempt, r)
							return
						}
					}
					if r.status/100 == 2 || copyReply.status/100 == 2 {
						break
					}
				}
			}
		}
		work := make(chan int)
		var wg sync.WaitGroup
		for range senders {
			wg.Go(func() {
				for i := range work {
					sendStory(i, all[i])
				}
			})
		}
		for i := range all {
			work <- i
		}
		close(work)
		wg.Wait()
		if t.Failed() {
			return
		}

		// The held copies arrive now, after their purchases' later events:
		// within the tolerance they are acknowledged as duplicates...
		for _, h := range late {
			req, err := events.NewRequest(t.Context(), s.server.URL, secret, h.ev, h.attempt, h.signedAt)
			if err != nil {
				t.Fatal(err)
			}
			expect(t, "a delayed copy of "+h.ev.ID, s.send(req), 200, "duplicate")
		}
		// ...held past it they are refused, and the sender's fresh retry
		// is acknowledged.
		s.clock.Advance(events.DefaultTolerance + time.Minute)
		for _, h := range late {
			req, err := events.NewRequest(t.Context(), s.server.URL, secret, h.ev, h.attempt, h.signedAt)
			if err != nil {
				t.Fatal(err)
			}
			expect(t, "a stale copy of "+h.ev.ID, s.send(req), 401, "timestamp_outside_tolerance")
			expect(t, "a fresh retry of "+h.ev.ID, s.deliver(h.ev, h.attempt+1, none), 200, "duplicate")
		}

		for _, k := range kinds {
			if counts[k].Load() == 0 {
				t.Errorf("no %s happened: the test proves less than it says", k)
			}
		}
		t.Logf("faults: %s %d, %s %d, %s %d, duplicates %d, delayed %d",
			failEffect, counts[string(failEffect)].Load(), crashInEffect, counts[string(crashInEffect)].Load(),
			dropReply, counts[string(dropReply)].Load(), counts["duplicate"].Load(), counts["delayed"].Load())

		total, gaps := 0, 0
		for _, st := range all {
			total += len(st.events)
			if st.gap {
				gaps++
			}
			if n := s.count(`SELECT count(*) FROM grants WHERE purchase_id = ?`, st.purchase); n != st.grants {
				t.Errorf("%s: %d grants, want %d", st.purchase, n, st.grants)
			}
			if got, want := s.lastSequence(st.purchase), st.events[len(st.events)-1].Sequence; got != want {
				t.Errorf("%s: last sequence %d, want %d", st.purchase, got, want)
			}
		}
		if n := s.count(`SELECT count(*) FROM (SELECT event_id FROM effects GROUP BY event_id HAVING count(*) <> 1) AS twice`); n != 0 {
			t.Errorf("%d events whose effect committed more than once", n)
		}
		if n := s.count(`SELECT count(DISTINCT event_id) FROM effects`); n != total {
			t.Errorf("%d events applied, want %d", n, total)
		}
		if n := s.count(`SELECT count(*) FROM payrecon_event_inbox`); n != total {
			t.Errorf("%d inbox rows, want %d", n, total)
		}
		if got := s.gapReports(); len(got) != gaps {
			t.Errorf("%d gaps reported, want %d: %v", len(got), gaps, got)
		}
	})
}
