package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/payrecon/payrecon/events"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The tests of the outbox: its events and their numbering, the
// subscriptions, and the deliveries' claims, outcomes and replays.

// newEvent returns an event of purchaseID of type typ at at, with a fresh
// id and a small payload.
func newEvent(t *testing.T, purchaseID string, typ events.Type, at time.Time) events.Event {
	t.Helper()
	e := events.Event{ID: events.NewID(), Type: typ, PurchaseID: purchaseID, CreatedAt: at}
	if err := e.SetData(map[string]string{"state": "succeeded"}); err != nil {
		t.Fatal(err)
	}
	return e
}

// appendEvent writes e in a transaction of its own and returns it stored.
func appendEvent(t *testing.T, s reconcile.Store, e events.Event) reconcile.OutboxEvent {
	t.Helper()
	var out reconcile.OutboxEvent
	inTx(t, s, func(tx reconcile.Tx) error {
		stored, err := tx.AppendOutbox(t.Context(), e)
		if err == nil {
			out = stored[0]
		}
		return err
	})
	return out
}

func listOutbox(t *testing.T, s reconcile.Store, purchaseID string) []reconcile.OutboxEvent {
	t.Helper()
	var out []reconcile.OutboxEvent
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		out, err = tx.ListOutbox(t.Context(), purchaseID)
		return err
	})
	return out
}

func sequences(es []reconcile.OutboxEvent) []int64 {
	var out []int64
	for _, e := range es {
		out = append(out, e.Sequence)
	}
	return out
}

func addSubscription(t *testing.T, s reconcile.Store, name string, types ...events.Type) {
	t.Helper()
	inTx(t, s, func(tx reconcile.Tx) error {
		return tx.InsertSubscription(t.Context(), reconcile.Subscription{Name: name, URL: "http://shop.test/" + name, Secret: "whsec_" + name, Types: types})
	})
}

func claimDeliveries(t *testing.T, s reconcile.Store, owner string, limit int, leaseFor time.Duration) []reconcile.Delivery {
	t.Helper()
	var out []reconcile.Delivery
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		out, err = tx.ClaimDeliveries(t.Context(), owner, limit, leaseFor)
		return err
	})
	return out
}

func finish(t *testing.T, s reconcile.Store, d reconcile.Delivery, state reconcile.DeliveryState, next time.Time) error {
	t.Helper()
	return txErr(t, s, func(tx reconcile.Tx) error { return tx.FinishDelivery(t.Context(), d, state, next, "test") })
}

func deliveryKeys(ds []reconcile.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s/%s#%d", d.Subscription.Name, d.PurchaseID, d.Sequence))
	}
	return out
}

func testOutbox(t *testing.T, newStore func(*testing.T) *testStore) {
	parallel(t, "Append", func(t *testing.T) {
		s := newStore(t)
		var want []reconcile.OutboxEvent
		for i, id := range []string{"pur_a", "pur_b", "pur_a", "pur_a", "pur_b"} {
			e := newEvent(t, id, events.PurchaseSucceeded, at(time.Duration(i)*time.Second+1234*time.Nanosecond))
			got := appendEvent(t, s, e)
			e.Sequence, e.SchemaVersion, e.CreatedAt = got.Sequence, events.SchemaVersion, e.CreatedAt.Truncate(time.Microsecond)
			body, err := events.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Payload, body) || got.Digest != e.Digest {
				t.Fatalf("AppendOutbox stored %s with digest %s, want events.Marshal's %s with %s", got.Payload, got.Digest, body, e.Digest)
			}
			if id == "pur_a" {
				want = append(want, got)
			}
		}
		equal(t, "pur_a's sequences", sequences(listOutbox(t, s, "pur_a")), []int64{1, 2, 3})
		equal(t, "pur_b's sequences", sequences(listOutbox(t, s, "pur_b")), []int64{1, 2})
		equal(t, "ListOutbox(pur_a)", listOutbox(t, s, "pur_a"), want)
	})

	parallel(t, "AppendSeveral", func(t *testing.T) {
		s := newStore(t)
		appendEvent(t, s, newEvent(t, "pur_b", events.PurchaseEscalated, base))
		in := []events.Event{
			newEvent(t, "pur_b", events.PurchaseSucceeded, base),
			newEvent(t, "pur_a", events.PurchaseEscalated, base),
			newEvent(t, "pur_b", events.PurchaseResolved, base),
			newEvent(t, "pur_a", events.PurchaseSucceeded, base),
		}
		var got []reconcile.OutboxEvent
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			got, err = tx.AppendOutbox(t.Context(), in...)
			return err
		})
		for i, e := range got {
			if e.ID != in[i].ID {
				t.Fatalf("AppendOutbox returned %s at %d, want %s: the order of its arguments", e.ID, i, in[i].ID)
			}
		}
		// One call numbers each purchase's events in their order, after
		// the ones it had.
		equal(t, "sequences returned", sequences(got), []int64{2, 1, 3, 2})
		equal(t, "pur_a's sequences", sequences(listOutbox(t, s, "pur_a")), []int64{1, 2})
		equal(t, "pur_b's sequences", sequences(listOutbox(t, s, "pur_b")), []int64{1, 2, 3})
		equal(t, "pur_b's events", listOutbox(t, s, "pur_b")[1:], []reconcile.OutboxEvent{got[0], got[2]})
	})

	parallel(t, "NoGapAfterRollbackOrRefusal", func(t *testing.T) {
		s := newStore(t)
		first := appendEvent(t, s, newEvent(t, "pur_1", events.PurchaseSucceeded, base))
		// A transaction that rolls back gives its number back.
		boom := errors.New("boom")
		err := txErr(t, s, func(tx reconcile.Tx) error {
			if _, err := tx.AppendOutbox(t.Context(), newEvent(t, "pur_1", events.PurchaseEscalated, base)); err != nil {
				return err
			}
			return boom
		})
		wantErr(t, "rolled-back append", err, boom)
		// A refused event (its id exists) takes no number, and the
		// transaction goes on.
		inTx(t, s, func(tx reconcile.Tx) error {
			dup := newEvent(t, "pur_1", events.PurchaseResolved, base)
			dup.ID = first.ID
			_, err := tx.AppendOutbox(t.Context(), dup)
			wantErr(t, "append of an existing id", err, reconcile.ErrDuplicate)
			// Nor does a call of several whose last is refused: none of
			// them is written.
			_, err = tx.AppendOutbox(t.Context(), newEvent(t, "pur_1", events.PurchaseResolved, base),
				newEvent(t, "pur_2", events.PurchaseResolved, base), dup)
			wantErr(t, "append of several, one with an existing id", err, reconcile.ErrDuplicate)
			_, err = tx.AppendOutbox(t.Context(), newEvent(t, "pur_1", events.PurchaseResolved, base))
			return err
		})
		equal(t, "sequences", sequences(listOutbox(t, s, "pur_1")), []int64{1, 2})
		equal(t, "pur_2's sequences", sequences(listOutbox(t, s, "pur_2")), []int64(nil))
		// An invalid event is refused.
		bad := newEvent(t, "pur_1", events.PurchaseResolved, base)
		bad.Digest = "x"
		err = txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.AppendOutbox(t.Context(), bad); return err })
		wantErr(t, "append of an invalid event", err, reconcile.ErrInvalid)
	})

	parallel(t, "CommitsWithItsChange", func(t *testing.T) {
		s := newStore(t)
		insertPurchase(t, s, newPurchase("pur_1"))
		p := getPurchase(t, s, "pur_1")
		next := p
		next.State, next.UpdatedAt = statemachine.Submitted, at(time.Second)
		boom := errors.New("crash before commit")
		for _, commit := range []bool{false, true} {
			err := txErr(t, s, func(tx reconcile.Tx) error {
				if err := tx.UpdatePurchase(t.Context(), next, p.State); err != nil {
					return err
				}
				if _, err := tx.AppendOutbox(t.Context(), newEvent(t, "pur_1", events.PurchaseEscalated, next.UpdatedAt)); err != nil {
					return err
				}
				if !commit {
					return boom
				}
				return nil
			})
			got, events := getPurchase(t, s, "pur_1"), listOutbox(t, s, "pur_1")
			if !commit {
				wantErr(t, "InTx", err, boom)
				if got.State != p.State || len(events) != 0 {
					t.Fatalf("after a rollback: purchase %s, %d events; want %s and none", got.State, len(events), p.State)
				}
				continue
			}
			if err != nil || got.State != next.State || len(events) != 1 {
				t.Fatalf("after a commit: %v, purchase %s, %d events; want %s and one", err, got.State, len(events), next.State)
			}
		}
	})

	parallel(t, "Subscriptions", func(t *testing.T) {
		s := newStore(t)
		addSubscription(t, s, "b", events.PurchaseSucceeded, events.RefundSucceeded)
		addSubscription(t, s, "a")
		err := txErr(t, s, func(tx reconcile.Tx) error {
			return tx.InsertSubscription(t.Context(), reconcile.Subscription{Name: "a", URL: "http://x", Secret: "s"})
		})
		wantErr(t, "insert of an existing name", err, reconcile.ErrDuplicate)
		for _, bad := range []reconcile.Subscription{
			{URL: "http://x", Secret: "s"}, {Name: "c", Secret: "s"}, {Name: "c", URL: "http://x"},
			{Name: "c", URL: "http://x", Secret: "s", Types: []events.Type{"a,b"}},
		} {
			err := txErr(t, s, func(tx reconcile.Tx) error { return tx.InsertSubscription(t.Context(), bad) })
			wantErr(t, fmt.Sprintf("insert of %+v", bad), err, reconcile.ErrInvalid)
		}
		var subs []reconcile.Subscription
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			subs, err = tx.ListSubscriptions(t.Context())
			return err
		})
		equal(t, "subscriptions", subs, []reconcile.Subscription{
			{Name: "a", URL: "http://shop.test/a", Secret: "whsec_a", CreatedAt: base},
			{Name: "b", URL: "http://shop.test/b", Secret: "whsec_b", Types: []events.Type{events.PurchaseSucceeded, events.RefundSucceeded}, CreatedAt: base},
		})
		// Fan-out: each event to the subscriptions that want its type.
		appendEvent(t, s, newEvent(t, "pur_1", events.PurchaseSucceeded, base))
		appendEvent(t, s, newEvent(t, "pur_2", events.FindingOpened, base))
		got := deliveryKeys(claimDeliveries(t, s, "r", 10, time.Minute))
		slices.Sort(got)
		equal(t, "deliveries", got, []string{"a/pur_1#1", "a/pur_2#1", "b/pur_1#1"})
		inTx(t, s, func(tx reconcile.Tx) error { return tx.DeleteSubscription(t.Context(), "a") })
		err = txErr(t, s, func(tx reconcile.Tx) error { return tx.DeleteSubscription(t.Context(), "a") })
		wantErr(t, "delete of a removed subscription", err, reconcile.ErrNotFound)
		var dead []reconcile.Delivery
		inTx(t, s, func(tx reconcile.Tx) error {
			st, err := tx.OutboxStats(t.Context())
			if err == nil && st.Pending != 1 {
				err = fmt.Errorf("pending %d after a's removal, want b's one", st.Pending)
			}
			dead, _ = tx.ListDeliveries(t.Context(), reconcile.DeliveryDead, 0)
			return err
		})
		equal(t, "dead", len(dead), 0)
	})

	parallel(t, "OrderPerPurchase", func(t *testing.T) {
		s := newStore(t)
		addSubscription(t, s, "shop")
		for i := range 3 {
			appendEvent(t, s, newEvent(t, "pur_1", events.PurchaseSucceeded, at(time.Duration(i)*time.Millisecond)))
		}
		appendEvent(t, s, newEvent(t, "pur_2", events.PurchaseSucceeded, base))
		first := claimDeliveries(t, s, "r1", 10, time.Minute)
		equal(t, "first claim", deliveryKeys(first), []string{"shop/pur_1#1", "shop/pur_2#1"})
		if first[0].Attempts != 1 || first[0].LeaseToken == 0 || first[0].LeaseOwner != "r1" || !first[0].LeaseExpiresAt.Equal(at(time.Minute)) {
			t.Fatalf("claimed %+v: want attempt 1, a token, owner r1, lease until +1m", first[0])
		}
		// While #1 is leased, #2 waits; and another relay gets nothing.
		equal(t, "second relay's claim", len(claimDeliveries(t, s, "r2", 10, time.Minute)), 0)
		// A failure keeps #2 waiting behind #1 until #1's next attempt.
		if err := finish(t, s, first[0], reconcile.DeliveryPending, at(10*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := finish(t, s, first[0], reconcile.DeliveryDone, time.Time{}); !errors.Is(err, reconcile.ErrLeaseLost) {
			t.Fatalf("finishing a finished claim: %v, want ErrLeaseLost", err)
		}
		equal(t, "claim before the retry is due", len(claimDeliveries(t, s, "r2", 10, time.Minute)), 0)
		s.clock.Set(at(10 * time.Second))
		retry := claimDeliveries(t, s, "r2", 10, time.Minute)
		equal(t, "retry", deliveryKeys(retry), []string{"shop/pur_1#1"})
		if retry[0].Attempts != 2 || retry[0].LeaseToken <= first[1].LeaseToken {
			t.Fatalf("retry %+v: want attempt 2 and a token above %d", retry[0], first[1].LeaseToken)
		}
		if err := finish(t, s, retry[0], reconcile.DeliveryDone, time.Time{}); err != nil {
			t.Fatal(err)
		}
		equal(t, "after #1 is done", deliveryKeys(claimDeliveries(t, s, "r2", 10, time.Minute)), []string{"shop/pur_1#2"})
	})

	parallel(t, "ExpiredLeaseIsFenced", func(t *testing.T) {
		s := newStore(t)
		addSubscription(t, s, "shop")
		appendEvent(t, s, newEvent(t, "pur_1", events.PurchaseSucceeded, base))
		old := claimDeliveries(t, s, "r1", 1, time.Minute)
		s.clock.Set(at(time.Minute))
		taken := claimDeliveries(t, s, "r2", 1, time.Minute)
		equal(t, "claim after expiry", deliveryKeys(taken), []string{"shop/pur_1#1"})
		if err := finish(t, s, old[0], reconcile.DeliveryDone, time.Time{}); !errors.Is(err, reconcile.ErrLeaseLost) {
			t.Fatalf("the expired lease's outcome: %v, want ErrLeaseLost", err)
		}
		if err := finish(t, s, taken[0], reconcile.DeliveryDone, time.Time{}); err != nil {
			t.Fatal(err)
		}
	})

	parallel(t, "OutboxBySubscription", func(t *testing.T) {
		s := newStore(t)
		for _, name := range []string{"c", "a", "b"} {
			addSubscription(t, s, name)
		}
		addSubscription(t, s, "idle", events.RefundSucceeded)
		appendEvent(t, s, newEvent(t, "pur_1", events.PurchaseSucceeded, at(0)))
		appendEvent(t, s, newEvent(t, "pur_1", events.PurchaseSucceeded, at(time.Second)))
		s.clock.Set(at(3 * time.Second))
		for _, d := range claimDeliveries(t, s, "r", 10, time.Minute) {
			state, next := map[string]reconcile.DeliveryState{"a": reconcile.DeliveryDone, "b": reconcile.DeliveryPending, "c": reconcile.DeliveryDead}[d.Subscription.Name], at(time.Minute)
			if err := finish(t, s, d, state, next); err != nil {
				t.Fatal(err)
			}
		}
		var got []reconcile.SubscriptionOutbox
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			got, err = tx.OutboxBySubscription(t.Context())
			return err
		})
		equal(t, "by subscription", got, []reconcile.SubscriptionOutbox{
			{Name: "a", URL: "http://shop.test/a", Pending: 1, Oldest: at(time.Second), NextAttempt: at(time.Second)},
			{Name: "b", URL: "http://shop.test/b", Pending: 2, Oldest: at(0), NextAttempt: at(time.Second), LastError: "test"},
			{Name: "c", URL: "http://shop.test/c", Dead: 2, LastError: "test"},
			{Name: "idle", URL: "http://shop.test/idle"},
		})
		equal(t, "healths", []reconcile.SubscriptionHealth{got[0].Health(), got[1].Health(), got[2].Health(), got[3].Health()},
			[]reconcile.SubscriptionHealth{reconcile.SubscriptionHealthy, reconcile.SubscriptionFailing, reconcile.SubscriptionDead, reconcile.SubscriptionHealthy})
	})

	parallel(t, "DeadLettersAndReplay", func(t *testing.T) {
		s := newStore(t)
		addSubscription(t, s, "shop")
		ids := []string{}
		for i := range 3 {
			e := appendEvent(t, s, newEvent(t, "pur_1", events.PurchaseSucceeded, at(time.Duration(i)*time.Second)))
			ids = append(ids, e.ID)
		}
		s.clock.Set(at(3 * time.Second))
		d := claimDeliveries(t, s, "r", 10, time.Minute)
		if err := finish(t, s, d[0], reconcile.DeliveryDone, time.Time{}); err != nil {
			t.Fatal(err)
		}
		d = claimDeliveries(t, s, "r", 10, time.Minute)
		if err := finish(t, s, d[0], reconcile.DeliveryDead, time.Time{}); err != nil {
			t.Fatal(err)
		}
		var dead []reconcile.Delivery
		var st reconcile.OutboxStats
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			if dead, err = tx.ListDeliveries(t.Context(), reconcile.DeliveryDead, 0); err != nil {
				return err
			}
			st, err = tx.OutboxStats(t.Context())
			return err
		})
		equal(t, "dead", deliveryKeys(dead), []string{"shop/pur_1#2", "shop/pur_1#3"})
		equal(t, "stats", st, reconcile.OutboxStats{Dead: 2})
		equal(t, "claim with #2 dead", len(claimDeliveries(t, s, "r", 10, time.Minute)), 0)

		s.clock.Set(at(time.Hour))
		var n int
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			n, err = tx.ReplayDeliveries(t.Context(), "shop", base, true)
			return err
		})
		equal(t, "replayed dead", n, 2)
		d = claimDeliveries(t, s, "r", 10, time.Minute)
		equal(t, "claim after replay", deliveryKeys(d), []string{"shop/pur_1#2"})
		if !d[0].WindowFrom.Equal(at(time.Hour)) || !bytes.Equal(d[0].Payload, listOutbox(t, s, "pur_1")[1].Payload) || d[0].EventID != ids[1] {
			t.Fatalf("replayed %+v: want a window from +1h, the same id and bytes", d[0])
		}
		if err := finish(t, s, d[0], reconcile.DeliveryDone, time.Time{}); err != nil {
			t.Fatal(err)
		}
		d = claimDeliveries(t, s, "r", 10, time.Minute)
		if err := finish(t, s, d[0], reconcile.DeliveryDone, time.Time{}); err != nil {
			t.Fatal(err)
		}
		// Replaying everything since +1s sends #2 and #3 again; a
		// subscription added since gets them too.
		addSubscription(t, s, "late")
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			n, err = tx.ReplayDeliveries(t.Context(), "", at(time.Second), false)
			return err
		})
		equal(t, "replayed", n, 4)
		got := deliveryKeys(claimDeliveries(t, s, "r", 10, time.Minute))
		slices.Sort(got)
		equal(t, "claim after the full replay", got, []string{"late/pur_1#2", "shop/pur_1#2"})
	})

	parallel(t, "Retention", func(t *testing.T) {
		s := newStore(t)
		addSubscription(t, s, "shop")
		appendEvent(t, s, newEvent(t, "pur_1", events.PurchaseSucceeded, base))
		appendEvent(t, s, newEvent(t, "pur_2", events.PurchaseSucceeded, base))
		d := claimDeliveries(t, s, "r", 10, time.Minute)
		if err := finish(t, s, d[0], reconcile.DeliveryDone, time.Time{}); err != nil {
			t.Fatal(err)
		}
		var n int
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			n, err = tx.DeleteDeliveredOutboxBefore(t.Context(), at(time.Second), 10)
			return err
		})
		equal(t, "deleted", n, 1)
		left := len(listOutbox(t, s, "pur_1")) + len(listOutbox(t, s, "pur_2"))
		equal(t, "events left", left, 1)
		// The numbering goes on after a deletion.
		deleted := d[0].PurchaseID
		equal(t, "next sequence", appendEvent(t, s, newEvent(t, deleted, events.PurchaseResolved, base)).Sequence, int64(2))
	})

	parallel(t, "ConcurrentClaims", func(t *testing.T) {
		s := newStore(t)
		addSubscription(t, s, "shop")
		for i := range 20 {
			appendEvent(t, s, newEvent(t, fmt.Sprintf("pur_%d", i), events.PurchaseSucceeded, base))
		}
		got := race(t, s, racers, func(tx reconcile.Tx, i int) ([]reconcile.Delivery, error) {
			return tx.ClaimDeliveries(t.Context(), fmt.Sprintf("r%d", i), 5, time.Minute)
		})
		seen := map[string]bool{}
		for _, ds := range got {
			for _, d := range ds {
				if seen[d.EventID] {
					t.Fatalf("event %s claimed twice", d.EventID)
				}
				seen[d.EventID] = true
			}
		}
		equal(t, "claimed", len(seen), 20)
	})
}

// testOutboxEpoch: AppendOutbox stamps each event with the epoch of the
// latest recovery recorded (reconcile.EventEpochOf its RecordedAt, 0
// before any), open or completed, in the stored bytes too; numbering
// goes on across epochs.
func testOutboxEpoch(t *testing.T, s *testStore) {
	ctx := t.Context()
	first := appendEvent(t, s, newEvent(t, "pur_1", events.PurchaseEscalated, at(0)))
	if first.Epoch != 0 || bytes.Contains(first.Payload, []byte(`"epoch"`)) {
		t.Fatalf("before any recovery: epoch %d, payload %s; want 0, and no epoch on the wire", first.Epoch, first.Payload)
	}
	rec := reconcile.Recovery{RestoredAt: at(time.Hour), RecordedAt: at(2 * time.Hour), AuditFrom: at(-23 * time.Hour), AuditUntil: at(2 * time.Hour)}
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		rec.ID, err = tx.InsertRecovery(ctx, rec)
		return err
	})
	open := appendEvent(t, s, newEvent(t, "pur_1", events.PurchaseSucceeded, at(3*time.Hour)))
	inTx(t, s, func(tx reconcile.Tx) error { return tx.CompleteRecovery(ctx, rec.ID, 0, 0, at(4*time.Hour)) })
	later := newEvent(t, "pur_2", events.PurchaseSucceeded, at(5*time.Hour))
	var stored []reconcile.OutboxEvent
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		stored, err = tx.AppendOutbox(ctx, later, newEvent(t, "pur_1", events.PurchaseResolved, at(5*time.Hour)))
		return err
	})
	want := rec.EventEpoch()
	if want != at(2*time.Hour).Unix() {
		t.Fatalf("EventEpoch %d, want the recording's Unix time %d", want, at(2*time.Hour).Unix())
	}
	for _, e := range append([]reconcile.OutboxEvent{open}, stored...) {
		ev, err := events.Unmarshal(e.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if e.Epoch != want || ev.Epoch != want {
			t.Errorf("event %s after the recovery: epoch %d, on the wire %d; want %d", e.ID, e.Epoch, ev.Epoch, want)
		}
	}
	got := listOutbox(t, s, "pur_1")
	if !slices.Equal(sequences(got), []int64{1, 2, 3}) {
		t.Errorf("pur_1's sequences %v, want 1, 2, 3: numbering goes on across epochs", sequences(got))
	}
	for i, wantEpoch := range []int64{0, want, want} {
		if got[i].Epoch != wantEpoch {
			t.Errorf("ListOutbox: pur_1's event %d has epoch %d, want %d", got[i].Sequence, got[i].Epoch, wantEpoch)
		}
	}
}
