package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The tests of disputes: their writes and guard, and the list of those
// not decided. dispute_limits.go has their rows of the audit and the
// refunds they forbid, dispute_inbox.go the inbox's disputes.

// newDispute returns a valid dispute in state open (a chargeback waiting
// for evidence) of amount from payment paymentID of purchase purchaseID.
func newDispute(id, purchaseID, paymentID string, amount int64) reconcile.Dispute {
	return reconcile.Dispute{
		ID:                id,
		ProviderDisputeID: "du_" + strings.TrimPrefix(id, "dsp_"),
		PurchaseID:        purchaseID,
		PaymentID:         paymentID,
		Amount:            amount,
		Currency:          "eur",
		Reason:            "fraudulent",
		State:             statemachine.Open,
		Version:           1,
		ProviderStatus:    "needs_response",
		CreatedAt:         base,
		UpdatedAt:         base,
	}
}

func insertDispute(t *testing.T, s reconcile.Store, d reconcile.Dispute) {
	t.Helper()
	inTx(t, s, func(tx reconcile.Tx) error { return tx.InsertDispute(t.Context(), d) })
}

// disputeErr inserts d and returns the store's error.
func disputeErr(t *testing.T, s reconcile.Store, d reconcile.Dispute) error {
	t.Helper()
	return txErr(t, s, func(tx reconcile.Tx) error { return tx.InsertDispute(t.Context(), d) })
}

func getDispute(t *testing.T, s reconcile.Store, id string) reconcile.Dispute {
	t.Helper()
	var d reconcile.Dispute
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		d, err = tx.GetDispute(t.Context(), id)
		return err
	})
	return d
}

func findDispute(t *testing.T, s reconcile.Store, providerDisputeID string) reconcile.Dispute {
	t.Helper()
	var d reconcile.Dispute
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		d, err = tx.FindDispute(t.Context(), providerDisputeID)
		return err
	})
	return d
}

// wantNoDispute fails unless there is no dispute id.
func wantNoDispute(t *testing.T, s reconcile.Store, id string) {
	t.Helper()
	err := txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetDispute(t.Context(), id); return err })
	wantErr(t, "GetDispute of the refused dispute "+id, err, reconcile.ErrNotFound)
}

// updateDispute writes d (moving it from state from to d.State) and
// returns it as stored afterwards.
func updateDispute(t *testing.T, s reconcile.Store, d reconcile.Dispute, from statemachine.State) reconcile.Dispute {
	t.Helper()
	inTx(t, s, func(tx reconcile.Tx) error { return tx.UpdateDispute(t.Context(), d, from) })
	return getDispute(t, s, d.ID)
}

// updateDisputeErr writes d and returns the store's error.
func updateDisputeErr(t *testing.T, s reconcile.Store, d reconcile.Dispute, from statemachine.State) error {
	t.Helper()
	return txErr(t, s, func(tx reconcile.Tx) error { return tx.UpdateDispute(t.Context(), d, from) })
}

// walkDisputeTo moves the stored dispute id, from the state it is in,
// along the dispute machine's allowed moves to target and returns it as
// stored.
func walkDisputeTo(t *testing.T, s reconcile.Store, id string, target statemachine.State) reconcile.Dispute {
	t.Helper()
	d := getDispute(t, s, id)
	for _, move := range pathFrom(statemachine.Dispute, d.State, target) {
		d.State = move.To
		d = updateDispute(t, s, d, move.From)
	}
	return d
}

// disputeIn inserts d and walks it to state.
func disputeIn(t *testing.T, s reconcile.Store, d reconcile.Dispute, state statemachine.State) reconcile.Dispute {
	t.Helper()
	insertDispute(t, s, d)
	return walkDisputeTo(t, s, d.ID, state)
}

func listDisputes(t *testing.T, s reconcile.Store, purchaseID string) []reconcile.Dispute {
	t.Helper()
	var out []reconcile.Dispute
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		out, err = tx.ListDisputes(t.Context(), purchaseID)
		return err
	})
	return out
}

func listOpenDisputes(t *testing.T, s reconcile.Store) []reconcile.Dispute {
	t.Helper()
	var out []reconcile.Dispute
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		out, err = tx.ListOpenDisputes(t.Context(), reconcile.AnyAccount)
		return err
	})
	return out
}

func disputeIDs(ds []reconcile.Dispute) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

// inUTC returns d with its times in UTC, as a store reads them back.
func inUTC(d reconcile.Dispute) reconcile.Dispute {
	for _, tm := range []*time.Time{&d.EvidenceDueBy, &d.ProviderUpdatedAt, &d.CreatedAt, &d.UpdatedAt, &d.ClosedAt} {
		*tm = tm.UTC()
	}
	return d
}

func testDispute(t *testing.T, newStore func(*testing.T) *testStore) {
	// Every field is written and read back as it was: by id, by the
	// provider's id and in its purchase's list.
	parallel(t, "RoundTripEveryField", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		zone := time.FixedZone("UTC-3", -3*3600)
		in := newDispute("dsp_full", "pur_1", "pi_1", 1250)
		in.ProviderDisputeID = "du_full"
		in.Currency = "usd"
		in.Reason = "product_not_received — \"never\" ✓"
		in.Version = 4
		in.ProviderStatus = "warning_needs_response"
		in.Inquiry = true
		in.EvidenceDueBy = at(7*24*time.Hour + 999999*time.Microsecond).In(zone)
		in.ChargeRefundable = true
		in.Withdrawn = 1200
		in.Reinstated = 700
		in.ProviderUpdatedAt = at(time.Second + time.Microsecond).In(zone)
		in.CreatedAt = at(123456 * time.Microsecond).In(zone)
		in.UpdatedAt = at(time.Minute + 654321*time.Microsecond).In(zone)
		insertDispute(t, s, in)
		want := inUTC(in)
		equal(t, "GetDispute", getDispute(t, s, in.ID), want)
		equal(t, "FindDispute", findDispute(t, s, "du_full"), want)
		equal(t, "ListDisputes", listDisputes(t, s, "pur_1"), []reconcile.Dispute{want})
	})

	parallel(t, "RoundTripZeroFields", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		in := newDispute("dsp_min", "pur_1", "pi_1", 1)
		in.Reason, in.ProviderStatus = "", ""
		insertDispute(t, s, in)
		got := getDispute(t, s, in.ID)
		equal(t, "dispute read back", got, in)
		if got.Inquiry || got.ChargeRefundable || got.Withdrawn != 0 || got.Reinstated != 0 || !got.EvidenceDueBy.IsZero() ||
			!got.ProviderUpdatedAt.IsZero() || !got.ClosedAt.IsZero() || got.CreatedAt.Location() != time.UTC {
			t.Fatalf("unset fields came back set: %+v", got)
		}
	})

	parallel(t, "NotFound", func(t *testing.T) {
		s := newStore(t)
		wantNoDispute(t, s, "dsp_missing")
		err := txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.FindDispute(t.Context(), "du_missing"); return err })
		wantErr(t, "FindDispute(unknown)", err, reconcile.ErrNotFound)
		err = txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.FindDispute(t.Context(), ""); return err })
		wantErr(t, "FindDispute(empty)", err, reconcile.ErrNotFound)
	})

	// A refused insert leaves the transaction usable: the caller reads
	// on and commits what else it wrote.
	parallel(t, "Duplicates", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		first := newDispute("dsp_1", "pur_1", "pi_1", 100)
		insertDispute(t, s, first)
		sameProviderID := newDispute("dsp_2", "pur_1", "pi_1", 100)
		sameProviderID.ProviderDisputeID = first.ProviderDisputeID
		inTx(t, s, func(tx reconcile.Tx) error {
			ctx := t.Context()
			again := newDispute("dsp_1", "pur_1", "pi_1", 5)
			again.ProviderDisputeID = "du_other"
			wantErr(t, "a second dispute dsp_1", tx.InsertDispute(ctx, again), reconcile.ErrDuplicate)
			wantErr(t, "a dispute with dsp_1's provider id", tx.InsertDispute(ctx, sameProviderID), reconcile.ErrDuplicate)
			if _, err := tx.GetDispute(ctx, "dsp_1"); err != nil {
				return fmt.Errorf("read after the refused inserts: %w", err)
			}
			return tx.InsertDispute(ctx, newDispute("dsp_3", "pur_1", "pi_1", 100))
		})
		equal(t, "disputes of pur_1", disputeIDs(listDisputes(t, s, "pur_1")), []string{"dsp_1", "dsp_3"})
		equal(t, "dsp_1 after the refused duplicates", getDispute(t, s, "dsp_1"), first)
		wantNoDispute(t, s, "dsp_2")
	})

	parallel(t, "InsertOnlyInOpen", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		for _, state := range append(statemachine.Dispute.States(), statemachine.Created) {
			if state == statemachine.Dispute.Start() {
				continue
			}
			d := newDispute("dsp_"+string(state), "pur_1", "pi_1", 1)
			d.State = state
			wantErr(t, "InsertDispute in state "+string(state), disputeErr(t, s, d), reconcile.ErrForbiddenTransition)
			wantNoDispute(t, s, d.ID)
		}
	})

	parallel(t, "Invalid", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		for _, tc := range []struct {
			name    string
			mutate  func(d *reconcile.Dispute)
			wantErr error
		}{
			{"no provider dispute id", func(d *reconcile.Dispute) { d.ProviderDisputeID = "" }, reconcile.ErrInvalid},
			{"no payment", func(d *reconcile.Dispute) { d.PaymentID = "" }, reconcile.ErrInvalid},
			{"no currency", func(d *reconcile.Dispute) { d.Currency = "" }, reconcile.ErrInvalid},
			{"zero amount", func(d *reconcile.Dispute) { d.Amount = 0 }, reconcile.ErrInvalid},
			{"negative amount", func(d *reconcile.Dispute) { d.Amount = -5 }, reconcile.ErrInvalid},
			{"no created time", func(d *reconcile.Dispute) { d.CreatedAt = time.Time{} }, reconcile.ErrInvalid},
			{"no updated time", func(d *reconcile.Dispute) { d.UpdatedAt = time.Time{} }, reconcile.ErrInvalid},
			{"unknown purchase", func(d *reconcile.Dispute) { d.PurchaseID = "pur_missing" }, reconcile.ErrNotFound},
		} {
			t.Run(tc.name, func(t *testing.T) {
				d := newDispute("dsp_bad", "pur_1", "pi_1", 10)
				tc.mutate(&d)
				wantErr(t, "InsertDispute with "+tc.name, disputeErr(t, s, d), tc.wantErr)
				wantNoDispute(t, s, d.ID)
			})
		}
	})

	parallel(t, "List", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		paidPurchase(t, s, "pur_2", "pi_2", 1250)
		later := newDispute("dsp_a", "pur_1", "pi_1", 10)
		later.CreatedAt = at(time.Hour)
		insertDispute(t, s, later)
		earlier := newDispute("dsp_b", "pur_1", "pi_1", 10)
		earlier.CreatedAt = at(time.Minute)
		insertDispute(t, s, earlier)
		tied := newDispute("dsp_c", "pur_1", "pi_1", 10) // same instant as dsp_a: by id
		tied.CreatedAt = at(time.Hour)
		insertDispute(t, s, tied)
		other := newDispute("dsp_d", "pur_2", "pi_2", 10)
		insertDispute(t, s, other)

		equal(t, "disputes of pur_1, oldest first", disputeIDs(listDisputes(t, s, "pur_1")), []string{"dsp_b", "dsp_a", "dsp_c"})
		equal(t, "disputes of pur_2", listDisputes(t, s, "pur_2"), []reconcile.Dispute{other})
		if got := listDisputes(t, s, "pur_missing"); len(got) != 0 {
			t.Fatalf("ListDisputes(unknown purchase): %+v", got)
		}
	})
}

func testUpdateDispute(t *testing.T, newStore func(*testing.T) *testStore) {
	// UpdateDispute writes what the provider says of the dispute and
	// leaves what was disputed alone.
	parallel(t, "WritesFieldsAndBumpsVersion", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		insertDispute(t, s, newDispute("dsp_1", "pur_1", "pi_1", 300))
		zone := time.FixedZone("UTC+2", 2*3600)

		d := getDispute(t, s, "dsp_1")
		d.State = statemachine.EvidenceSubmitted
		d.ProviderStatus = "under_review"
		d.Inquiry = true
		d.EvidenceDueBy = at(48*time.Hour + 3*time.Microsecond).In(zone)
		d.ChargeRefundable = true
		d.Withdrawn, d.Reinstated = 300, 0
		d.Reason = "duplicate"
		d.ProviderUpdatedAt = at(time.Second + 7*time.Microsecond).In(zone)
		d.ClosedAt = at(3 * time.Second)
		d.UpdatedAt = at(4*time.Second + 11*time.Microsecond).In(zone)
		want := inUTC(d)
		want.Version = d.Version + 1
		// Fields fixed at insert are not the update's to change.
		d.PurchaseID, d.PaymentID, d.ProviderDisputeID, d.Amount, d.Currency = "pur_other", "pi_other", "du_other", 1, "usd"
		d.CreatedAt = at(time.Hour)

		got := updateDispute(t, s, d, statemachine.Open)
		equal(t, "dispute after update", got, want)
		equal(t, "FindDispute by the provider id of the insert", findDispute(t, s, "du_1"), want)

		// Fields can be cleared again, and a same-state write is no move.
		got.EvidenceDueBy, got.ProviderUpdatedAt, got.ClosedAt = time.Time{}, time.Time{}, time.Time{}
		got.Inquiry, got.ChargeRefundable, got.Withdrawn, got.Reinstated = false, false, 0, 300
		got.ProviderStatus, got.Reason = "", ""
		got.UpdatedAt = at(5 * time.Second)
		want = got
		want.Version++
		equal(t, "dispute after clearing", updateDispute(t, s, got, statemachine.EvidenceSubmitted), want)
	})

	parallel(t, "Conditional", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		d := disputeIn(t, s, newDispute("dsp_1", "pur_1", "pi_1", 100), statemachine.EvidenceSubmitted) // version 2

		for _, tc := range []struct {
			name       string
			mutate     func(d *reconcile.Dispute) statemachine.State
			wantErr    error
			wantDetail string
		}{
			{"stale version", func(d *reconcile.Dispute) statemachine.State {
				d.Version--
				d.State = statemachine.Won
				return statemachine.EvidenceSubmitted
			}, reconcile.ErrConflict, "it is evidence_submitted at version 2, the write expected evidence_submitted at version 1"},
			{"future version", func(d *reconcile.Dispute) statemachine.State {
				d.Version++
				d.State = statemachine.Won
				return statemachine.EvidenceSubmitted
			}, reconcile.ErrConflict, "it is evidence_submitted at version 2, the write expected evidence_submitted at version 3"},
			{"wrong from state", func(d *reconcile.Dispute) statemachine.State {
				d.State = statemachine.EvidenceSubmitted
				return statemachine.Open
			}, reconcile.ErrConflict, "it is evidence_submitted at version 2, the write expected open at version 2"},
			{"unknown id", func(d *reconcile.Dispute) statemachine.State {
				d.ID = "dsp_missing"
				d.State = statemachine.Won
				return statemachine.EvidenceSubmitted
			}, reconcile.ErrNotFound, ""},
			{"negative withdrawal", func(d *reconcile.Dispute) statemachine.State {
				d.Withdrawn = -1
				return statemachine.EvidenceSubmitted
			}, reconcile.ErrInvalid, ""},
			{"no updated time", func(d *reconcile.Dispute) statemachine.State {
				d.UpdatedAt = time.Time{}
				return statemachine.EvidenceSubmitted
			}, reconcile.ErrInvalid, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				q := d
				from := tc.mutate(&q)
				err := updateDisputeErr(t, s, q, from)
				wantErr(t, "UpdateDispute", err, tc.wantErr)
				if tc.wantDetail != "" && reconcile.DetailOf(err) != tc.wantDetail {
					t.Fatalf("UpdateDispute's detail = %q, want %q", reconcile.DetailOf(err), tc.wantDetail)
				}
				equal(t, "dispute after the refused update", getDispute(t, s, "dsp_1"), d)
			})
		}

		// The version the store wrote is the one the next write must use.
		d.State = statemachine.Lost
		if got := updateDispute(t, s, d, statemachine.EvidenceSubmitted); got.Version != d.Version+1 || got.State != statemachine.Lost {
			t.Fatalf("after update: version %d state %s, want %d lost", got.Version, got.State, d.Version+1)
		}
	})

	// An inquiry answered, escalated to a chargeback, answered again and
	// lost; a decided dispute never moves again.
	parallel(t, "Moves", func(t *testing.T) {
		s := newStore(t)
		paidPurchase(t, s, "pur_1", "pi_1", 1250)
		d := newDispute("dsp_1", "pur_1", "pi_1", 100)
		insertDispute(t, s, d)
		for i, to := range []statemachine.State{statemachine.EvidenceSubmitted, statemachine.Open, statemachine.Lost} {
			from := d.State
			d.State = to
			d = updateDispute(t, s, d, from)
			if d.State != to || d.Version != int64(i+2) {
				t.Fatalf("after %s -> %s: state %s version %d", from, to, d.State, d.Version)
			}
		}
		won := disputeIn(t, s, newDispute("dsp_2", "pur_1", "pi_1", 100), statemachine.Won)
		back := won
		back.State = statemachine.Open
		wantErr(t, "won -> open", updateDisputeErr(t, s, back, statemachine.Won), reconcile.ErrForbiddenTransition)
		equal(t, "dsp_2 after the refused move", getDispute(t, s, "dsp_2"), won)
	})
}

// testDisputeTransitionGuard tries every move between two different
// states of a dispute, and to a refund's created: the store must accept
// exactly statemachine.Dispute.Transitions() and refuse every other with
// ErrForbiddenTransition, leaving the row as it was.
func testDisputeTransitionGuard(t *testing.T, s *testStore) {
	paidPurchase(t, s, "pur_1", "pi_1", 1250)
	allowed := map[statemachine.Pair]bool{}
	for _, p := range statemachine.Dispute.Transitions() {
		allowed[p] = true
	}
	for _, from := range statemachine.Dispute.States() {
		for _, to := range append(statemachine.Dispute.States(), statemachine.Created) {
			if from == to {
				continue
			}
			move := statemachine.Pair{From: from, To: to}
			t.Run(string(from)+"_to_"+string(to), func(t *testing.T) {
				id := "dsp_" + string(from) + "_" + string(to)
				before := disputeIn(t, s, newDispute(id, "pur_1", "pi_1", 1), from)
				d := before
				d.State = to
				d.UpdatedAt = at(time.Hour)
				err := updateDisputeErr(t, s, d, from)
				if allowed[move] {
					if err != nil {
						t.Fatalf("allowed move %s refused: %v", move, err)
					}
					if got := getDispute(t, s, id); got.State != to || got.Version != before.Version+1 {
						t.Fatalf("after %s: state %s version %d, want %s %d", move, got.State, got.Version, to, before.Version+1)
					}
					return
				}
				wantErr(t, "forbidden dispute move "+move.String(), err, reconcile.ErrForbiddenTransition)
				equal(t, "dispute after the refused move", getDispute(t, s, id), before)
			})
		}
	}
}

// testListOpenDisputes: the disputes not decided, soonest evidence due
// first, those with no due date last, ties by id; decided ones are not
// listed, and one that is decided leaves the list.
func testListOpenDisputes(t *testing.T, s *testStore) {
	paidPurchase(t, s, "pur_1", "pi_1", 1250)
	paidPurchase(t, s, "pur_2", "pi_2", 1250)
	for _, tc := range []struct {
		id, purchaseID string
		due            time.Duration // 0: none
		state          statemachine.State
	}{
		{"dsp_late", "pur_1", 72 * time.Hour, statemachine.Open},
		{"dsp_none_b", "pur_2", 0, statemachine.Open},
		{"dsp_soon", "pur_2", 24 * time.Hour, statemachine.EvidenceSubmitted},
		{"dsp_none_a", "pur_1", 0, statemachine.EvidenceSubmitted},
		{"dsp_tie_b", "pur_1", 48 * time.Hour, statemachine.Open},
		{"dsp_tie_a", "pur_2", 48 * time.Hour, statemachine.Open},
		{"dsp_won", "pur_1", time.Hour, statemachine.Won},
		{"dsp_lost", "pur_1", time.Hour, statemachine.Lost},
		{"dsp_closed", "pur_2", 0, statemachine.Closed},
	} {
		d := newDispute(tc.id, tc.purchaseID, "pi_"+strings.TrimPrefix(tc.purchaseID, "pur_"), 10)
		if tc.due != 0 {
			d.EvidenceDueBy = at(tc.due)
		}
		disputeIn(t, s, d, tc.state)
	}
	want := []string{"dsp_soon", "dsp_tie_a", "dsp_tie_b", "dsp_late", "dsp_none_a", "dsp_none_b"}
	open := listOpenDisputes(t, s)
	equal(t, "open disputes", disputeIDs(open), want)
	for _, d := range open {
		equal(t, "open dispute "+d.ID, d, getDispute(t, s, d.ID))
	}

	walkDisputeTo(t, s, "dsp_soon", statemachine.Won)
	walkDisputeTo(t, s, "dsp_none_b", statemachine.Closed)
	equal(t, "open disputes after two were decided", disputeIDs(listOpenDisputes(t, s)),
		[]string{"dsp_tie_a", "dsp_tie_b", "dsp_late", "dsp_none_a"})
}
