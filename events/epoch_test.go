package events_test

import (
	"strings"
	"testing"

	"github.com/payrecon/payrecon/events"
)

// TestReceiverOrdersByEpochThenSequence: the order of a purchase's
// events is (epoch, sequence), compared lexicographically. Within an
// epoch it is strict; the first event of a higher epoch is accepted at
// any sequence (a recovery of payrecon's books restarts the numbering
// where the backup left it), and is no gap; an event of a lower epoch
// than the purchase's highest is stale: 200, its id kept (a repeat is a
// duplicate), the effect not run. An event without an epoch is epoch 0.
func TestReceiverOrdersByEpochThenSequence(t *testing.T) {
	const e1, e2 = 1772366400, 1772452800
	at := func(t *testing.T, id string, epoch, seq int64) events.Event {
		t.Helper()
		ev := event(t, id, events.PurchaseSucceeded, "pur_1", seq, "course-1")
		ev.Epoch = epoch
		if err := ev.SetData(map[string]string{"product": "course-1"}); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	forEachBackend(t, func(t *testing.T, s *shop) {
		steps := []struct {
			what         string
			ev           events.Event
			status       int
			want         string
			effects      int
			epoch, order int64 // the purchase's highest after the step
		}{
			{"epoch 0, sequence 1", at(t, "evt_a", 0, 1), 200, "applied", 1, 0, 1},
			{"epoch 0, sequence 2", at(t, "evt_b", 0, 2), 200, "applied", 2, 0, 2},
			{"epoch 0, sequence 3", at(t, "evt_c", 0, 3), 200, "applied", 3, 0, 3},
			// The books were restored to sequence 1 and recovered: the
			// new epoch goes on from the backup's numbering.
			{"epoch 1, sequence 2 (a number the lost period used)", at(t, "evt_d", e1, 2), 200, "applied", 4, e1, 2},
			{"epoch 1, sequence 2 under a new id", at(t, "evt_d2", e1, 2), 409, "out_of_order", 4, e1, 2},
			{"epoch 1, sequence 3", at(t, "evt_e", e1, 3), 200, "applied", 5, e1, 3},
			{"epoch 0, sequence 4: committed before the recovery", at(t, "evt_f", 0, 4), 200, "stale", 5, e1, 3},
			{"the stale event again", at(t, "evt_f", 0, 4), 200, "duplicate", 5, e1, 3},
			{"an applied event of epoch 0 again", at(t, "evt_b", 0, 2), 200, "duplicate", 5, e1, 3},
			{"epoch 2, sequence 1", at(t, "evt_g", e2, 1), 200, "applied", 6, e2, 1},
			{"epoch 1, sequence 9", at(t, "evt_h", e1, 9), 200, "stale", 6, e2, 1},
			{"epoch 2, sequence 1 under a new id", at(t, "evt_g2", e2, 1), 409, "out_of_order", 6, e2, 1},
		}
		for _, st := range steps {
			expect(t, st.what, s.deliver(st.ev, 1, none), st.status, st.want)
			if n := s.count(`SELECT count(*) FROM effects`); n != st.effects {
				t.Fatalf("%s: %d effects, want %d", st.what, n, st.effects)
			}
			if got, want := s.lastSequence("pur_1"), (events.Event{Epoch: st.epoch, Sequence: st.order}).Order(); got != want {
				t.Fatalf("%s: highest order %d, want %d (epoch %d, sequence %d)", st.what, got, want, st.epoch, st.order)
			}
		}
		if got := s.gapReports(); len(got) != 0 {
			t.Errorf("gaps reported: %v; a new epoch is no gap", got)
		}
		if !strings.Contains(s.logs.String(), "stale") {
			t.Errorf("the stale event is not logged:\n%s", s.logs.String())
		}
	})
}

// TestEventEpochOnTheWire: an event of epoch 0 marshals as it did before
// epochs existed (no epoch field); a later one carries its epoch, and an
// epoch or sequence beyond the order's bounds is invalid.
func TestEventEpochOnTheWire(t *testing.T) {
	ev := event(t, "evt_1", events.PurchaseSucceeded, "pur_1", 7, "course-1")
	b, err := events.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "epoch") {
		t.Errorf("epoch 0 on the wire: %s", b)
	}
	ev.Epoch = 1772366400
	if b, err = events.Marshal(ev); err != nil || !strings.Contains(string(b), `"sequence":7,"epoch":1772366400,`) {
		t.Fatalf("Marshal: %s, %v", b, err)
	}
	back, err := events.Unmarshal(b)
	if err != nil || back.Epoch != ev.Epoch || back.Order() != ev.Epoch<<32+7 {
		t.Fatalf("Unmarshal: %+v, %v", back, err)
	}
	if e, s := events.SplitOrder(back.Order()); e != ev.Epoch || s != 7 {
		t.Fatalf("SplitOrder: %d, %d", e, s)
	}
	for _, bad := range []events.Event{
		func() events.Event { e := ev; e.Epoch = -1; return e }(),
		func() events.Event { e := ev; e.Epoch = events.MaxEpoch + 1; return e }(),
		func() events.Event { e := ev; e.Sequence = events.MaxSequence + 1; return e }(),
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("epoch %d, sequence %d: valid, want invalid", bad.Epoch, bad.Sequence)
		}
	}
}
