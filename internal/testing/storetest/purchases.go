package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The tests of purchases: their writes, the transition guard, and the
// reads of the operator list, the metrics and the audit.

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

// pathTo returns the purchase's allowed moves from created to target,
// shortest first found.
func pathTo(target statemachine.State) []statemachine.Pair {
	return pathIn(statemachine.Purchase, target)
}

// pathIn returns machine m's allowed moves from created to target,
// shortest first found.
func pathIn(m statemachine.Machine, target statemachine.State) []statemachine.Pair {
	return pathFrom(m, statemachine.Created, target)
}

// pathFrom returns machine m's allowed moves from from to target,
// shortest first found.
func pathFrom(m statemachine.Machine, from, target statemachine.State) []statemachine.Pair {
	prev := map[statemachine.State]statemachine.Pair{}
	seen := map[statemachine.State]bool{from: true}
	queue := []statemachine.State{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, p := range m.Transitions() {
			if p.From == cur && !seen[p.To] {
				seen[p.To] = true
				prev[p.To] = p
				queue = append(queue, p.To)
			}
		}
	}
	var path []statemachine.Pair
	for s := target; s != from; s = prev[s].From {
		if _, ok := prev[s]; !ok {
			panic(fmt.Sprintf("storetest: %s state %s is unreachable from %s", m.Name(), target, from))
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
			Client:            "shop — \"eu\" ✓",
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
			!got.SettledAt.IsZero() || got.Doubt != "" || got.Client != "" {
			t.Fatalf("unset fields came back set: %+v", got)
		}
		if got.CreatedAt.Location() != time.UTC {
			t.Fatalf("CreatedAt in %v, want UTC", got.CreatedAt.Location())
		}
	})

	// Client: the API client that created a purchase is stored with it,
	// read back by every read of purchases, and none stays none.
	parallel(t, "Client", func(t *testing.T) {
		s := newStore(t)
		shop := newPurchase("pur_shop")
		shop.Client, shop.Reference = "shop", "ref-shop"
		billing := newPurchase("pur_billing")
		billing.Client = "billing"
		cli := newPurchase("pur_cli")
		cli.Reference = "ref-cli"
		for _, p := range []reconcile.Purchase{shop, billing, cli} {
			insertPurchase(t, s, p)
		}
		for _, want := range []reconcile.Purchase{shop, billing, cli} {
			if got := getPurchase(t, s, want.ID); got.Client != want.Client {
				t.Errorf("GetPurchase(%s).Client = %q, want %q", want.ID, got.Client, want.Client)
			}
		}
		inTx(t, s, func(tx reconcile.Tx) error {
			for _, want := range []reconcile.Purchase{shop, cli} {
				got, err := tx.FindPurchaseByReference(t.Context(), want.Customer, want.Reference)
				if err != nil {
					return err
				}
				if got.Client != want.Client {
					t.Errorf("FindPurchaseByReference(%s).Client = %q, want %q", want.Reference, got.Client, want.Client)
				}
			}
			return nil
		})
		// A move keeps the client: it is fixed at insert.
		p := getPurchase(t, s, shop.ID)
		p.State, p.UpdatedAt = statemachine.Submitted, at(time.Second)
		p.Client = ""
		if got := update(t, s, p, statemachine.Created); got.Client != "shop" {
			t.Errorf("after an update that cleared it, Client = %q, want shop", got.Client)
		}
		esc := walkTo(t, s, billing.ID, statemachine.Uncertain)
		esc.EscalatedAt, esc.EscalationReason, esc.UpdatedAt = at(time.Minute), reconcile.EscalationUncertainTooLong, at(time.Minute)
		update(t, s, esc, statemachine.Uncertain)
		inTx(t, s, func(tx reconcile.Tx) error {
			list, err := tx.ListEscalated(t.Context(), reconcile.AnyAccount)
			if err != nil {
				return err
			}
			if len(list) != 1 || list[0].Client != "billing" {
				t.Errorf("ListEscalated: %+v, want pur_billing with client billing", list)
			}
			return nil
		})
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
		p.Client = "another-client"

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

func testFindByReference(t *testing.T, s *testStore) {
	find := func(customer, reference string) (reconcile.Purchase, error) {
		t.Helper()
		var p reconcile.Purchase
		err := txErr(t, s, func(tx reconcile.Tx) error {
			var err error
			p, err = tx.FindPurchaseByReference(t.Context(), customer, reference)
			return err
		})
		return p, err
	}
	mine := newPurchase("pur_mine")
	mine.Customer, mine.Reference = "cus_1", "order-7"
	theirs := newPurchase("pur_theirs")
	theirs.Customer, theirs.Reference = "cus_2", "order-7"
	insertPurchase(t, s, mine)
	insertPurchase(t, s, theirs)
	insertPurchase(t, s, newPurchase("pur_noref")) // cus_1, no reference

	for _, want := range []reconcile.Purchase{mine, theirs} {
		got, err := find(want.Customer, want.Reference)
		if err != nil {
			t.Fatalf("FindPurchaseByReference(%s, %s): %v", want.Customer, want.Reference, err)
		}
		equal(t, "found purchase", got, want)
	}
	for _, c := range [][2]string{{"cus_1", "order-8"}, {"cus_3", "order-7"}, {"cus_1", ""}} {
		_, err := find(c[0], c[1])
		wantErr(t, fmt.Sprintf("FindPurchaseByReference(%q, %q)", c[0], c[1]), err, reconcile.ErrNotFound)
	}
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
			out, err = tx.ListEscalated(t.Context(), reconcile.AnyAccount)
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

func testCountEscalated(t *testing.T, s *testStore) {
	count := func() int {
		t.Helper()
		var n int
		inTx(t, s, func(tx reconcile.Tx) error {
			byAccount, err := tx.CountEscalatedByAccount(t.Context())
			for _, k := range byAccount {
				n += k
			}
			return err
		})
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("CountEscalated on an empty store: %d", n)
	}
	escalated := map[string]reconcile.Purchase{}
	for _, e := range []struct {
		id    string
		state statemachine.State
	}{{"pur_a", statemachine.Uncertain}, {"pur_b", statemachine.Declined}, {"pur_c", statemachine.Created}} {
		p := createIn(t, s, e.id, e.state)
		p.EscalatedAt, p.EscalationReason = at(time.Hour), reconcile.EscalationContradiction
		escalated[e.id] = update(t, s, p, e.state)
	}
	createIn(t, s, "pur_d", statemachine.Reconciling)
	createIn(t, s, "pur_e", statemachine.Succeeded)
	if n := count(); n != 3 {
		t.Fatalf("CountEscalated: %d, want 3", n)
	}
	b := escalated["pur_b"]
	b.EscalatedAt, b.EscalationReason = time.Time{}, ""
	update(t, s, b, statemachine.Declined)
	if n := count(); n != 2 {
		t.Fatalf("CountEscalated after resolving pur_b: %d, want 2", n)
	}
}

func testOldestUncertainSince(t *testing.T, s *testStore) {
	oldest := func() time.Time {
		t.Helper()
		var got time.Time
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			got, err = tx.OldestUncertainSince(t.Context())
			return err
		})
		return got
	}
	if got := oldest(); !got.IsZero() {
		t.Fatalf("OldestUncertainSince on an empty store: %s, want the zero time", got)
	}
	// withSince moves a purchase to state, then sets its UncertainSince.
	withSince := func(id string, state statemachine.State, since time.Time) reconcile.Purchase {
		t.Helper()
		p := createIn(t, s, id, state)
		p.UncertainSince = since
		return update(t, s, p, state)
	}
	// Earlier times on purchases that do not count.
	withSince("pur_created", statemachine.Created, at(time.Second))
	withSince("pur_submitted", statemachine.Submitted, at(2*time.Second))
	withSince("pur_succeeded", statemachine.Succeeded, at(3*time.Second))
	withSince("pur_declined", statemachine.Declined, at(4*time.Second))
	if got := oldest(); !got.IsZero() {
		t.Fatalf("OldestUncertainSince with no purchase uncertain or reconciling: %s, want the zero time", got)
	}

	withSince("pur_u1", statemachine.Uncertain, at(10*time.Minute))
	rec := withSince("pur_r1", statemachine.Reconciling, at(5*time.Minute+7*time.Microsecond))
	withSince("pur_u2", statemachine.Uncertain, at(7*time.Minute))
	got := oldest()
	equal(t, "OldestUncertainSince", got, at(5*time.Minute+7*time.Microsecond))
	if got.Location() != time.UTC {
		t.Fatalf("OldestUncertainSince in %v, want UTC", got.Location())
	}

	// Once the oldest is settled, the next one counts.
	rec.State = statemachine.Succeeded
	update(t, s, rec, statemachine.Reconciling)
	equal(t, "OldestUncertainSince after pur_r1 succeeded", oldest(), at(7*time.Minute))
}

func testListOverdueUncertain(t *testing.T, s *testStore) {
	list := func(before time.Time, limit int) []reconcile.Purchase {
		t.Helper()
		var out []reconcile.Purchase
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			out, err = tx.ListOverdueUncertain(t.Context(), before, limit)
			return err
		})
		return out
	}
	before := at(5 * time.Minute)
	if got := list(before, 10); len(got) != 0 {
		t.Fatalf("ListOverdueUncertain on an empty store: %+v", got)
	}
	// set moves a purchase to state, then sets its UncertainSince and
	// maybe an escalation.
	set := func(id string, state statemachine.State, since time.Duration, escalated bool) reconcile.Purchase {
		t.Helper()
		p := createIn(t, s, id, state)
		p.UncertainSince = at(since)
		if escalated {
			p.EscalatedAt, p.EscalationReason = at(time.Hour), reconcile.EscalationAttemptsExhausted
		}
		return update(t, s, p, state)
	}
	u3 := set("pur_u3", statemachine.Uncertain, 3*time.Minute, false)
	set("pur_escalated", statemachine.Uncertain, 2*time.Minute, true) // already on the operator list
	u1 := set("pur_u1", statemachine.Uncertain, time.Minute+time.Microsecond, false)
	set("pur_reconciling", statemachine.Reconciling, 0, false) // being reconciled
	set("pur_created", statemachine.Created, 0, false)
	set("pur_succeeded", statemachine.Succeeded, 0, false)
	set("pur_at", statemachine.Uncertain, 5*time.Minute, false) // uncertain at the cut-off, not before it
	set("pur_late", statemachine.Uncertain, 10*time.Minute, false)
	u4 := set("pur_u4", statemachine.Uncertain, 4*time.Minute, false)

	equal(t, "overdue, oldest first", list(before, 10), []reconcile.Purchase{u1, u3, u4})
	equal(t, "overdue, limit 2", list(before, 2), []reconcile.Purchase{u1, u3})
}

func testListSubmittedBetween(t *testing.T, s *testStore) {
	list := func(from, until time.Time, state statemachine.State, listed ...string) []reconcile.Purchase {
		t.Helper()
		var out []reconcile.Purchase
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			out, err = tx.ListSubmittedBetween(t.Context(), from, until, state, listed)
			return err
		})
		return out
	}
	// set moves a purchase to state and sets its first attempt.
	set := func(id string, state statemachine.State, first time.Duration) reconcile.Purchase {
		t.Helper()
		p := createIn(t, s, id, state)
		p.FirstAttemptAt = at(first)
		return update(t, s, p, state)
	}
	from, until := at(time.Hour), at(2*time.Hour)
	if got := list(from, until, statemachine.Succeeded); len(got) != 0 {
		t.Fatalf("ListSubmittedBetween on an empty store: %+v", got)
	}
	late := set("pur_late", statemachine.Succeeded, 90*time.Minute)
	set("pur_until", statemachine.Succeeded, 2*time.Hour) // at the end: outside [from, until)
	atFrom := set("pur_from", statemachine.Succeeded, time.Hour)
	set("pur_before", statemachine.Succeeded, time.Hour-time.Microsecond)
	set("pur_declined", statemachine.Declined, 80*time.Minute)
	set("pur_created", statemachine.Created, 80*time.Minute)
	mid := set("pur_mid", statemachine.Succeeded, 80*time.Minute)
	insertPurchase(t, s, newPurchase("pur_never")) // never submitted
	walkTo(t, s, "pur_never", statemachine.Succeeded)

	equal(t, "succeeded, first submitted in [1h, 2h), oldest first", list(from, until, statemachine.Succeeded), []reconcile.Purchase{atFrom, mid, late})
	equal(t, "declined in [1h, 2h)", len(list(from, until, statemachine.Declined)), 1)

	// The payments the provider listed are left out; a purchase without a
	// payment id never is.
	paid := func(p reconcile.Purchase, payment string) reconcile.Purchase {
		t.Helper()
		p.ProviderPaymentID = payment
		return update(t, s, p, p.State)
	}
	mid, late = paid(mid, "pi_mid"), paid(late, "pi_late")
	equal(t, "succeeded in [1h, 2h), pi_mid and another listed", list(from, until, statemachine.Succeeded, "pi_other", "pi_mid"),
		[]reconcile.Purchase{atFrom, late})
	equal(t, "succeeded in [1h, 2h), both payments listed", list(from, until, statemachine.Succeeded, "pi_late", "pi_mid"),
		[]reconcile.Purchase{atFrom})
	equal(t, "succeeded in [1h, 2h), pi_late listed", list(from, until, statemachine.Succeeded, "pi_late"),
		[]reconcile.Purchase{atFrom, mid})
}

func testListSucceededWithoutPayment(t *testing.T, s *testStore) {
	list := func(from, until time.Time) []reconcile.Purchase {
		t.Helper()
		var out []reconcile.Purchase
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			out, err = tx.ListSucceededWithoutPayment(t.Context(), from, until)
			return err
		})
		return out
	}
	// set moves a purchase to state, settled at settled, with payment.
	set := func(id string, state statemachine.State, settled time.Duration, payment string) reconcile.Purchase {
		t.Helper()
		p := createIn(t, s, id, state)
		p.SettledAt, p.ProviderPaymentID = at(settled), payment
		return update(t, s, p, state)
	}
	from, until := at(time.Hour), at(2*time.Hour)
	if got := list(from, until); len(got) != 0 {
		t.Fatalf("ListSucceededWithoutPayment on an empty store: %+v", got)
	}
	late := set("pur_late", statemachine.Succeeded, 90*time.Minute, "")
	set("pur_until", statemachine.Succeeded, 2*time.Hour, "") // at the end: outside [from, until)
	atFrom := set("pur_from", statemachine.Succeeded, time.Hour, "")
	set("pur_before", statemachine.Succeeded, time.Hour-time.Microsecond, "")
	set("pur_paid", statemachine.Succeeded, 80*time.Minute, "pi_paid") // holds a payment id
	set("pur_declined", statemachine.Declined, 80*time.Minute, "")
	mid := set("pur_mid", statemachine.Succeeded, 80*time.Minute, "")
	createIn(t, s, "pur_open", statemachine.Uncertain) // never settled

	equal(t, "succeeded without payment, settled in [1h, 2h), oldest first", list(from, until), []reconcile.Purchase{atFrom, mid, late})
	equal(t, "an empty window", len(list(from, from)), 0)
}
