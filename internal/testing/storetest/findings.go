package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// The tests of the audit from the provider's side: its findings, the
// payments it links and its runs.

// newFinding returns an open finding of kind about a stripe payment.
func newFinding(paymentID string, kind reconcile.FindingKind, purchaseID string, found time.Time) reconcile.Finding {
	return reconcile.Finding{
		Provider:   "stripe",
		PaymentID:  paymentID,
		Kind:       kind,
		PurchaseID: purchaseID,
		Amount:     1250,
		Currency:   "eur",
		Status:     "succeeded",
		Evidence:   "provider lists " + paymentID,
		FoundAt:    found,
	}
}

func insertFinding(t *testing.T, s reconcile.Store, f reconcile.Finding) bool {
	t.Helper()
	var inserted bool
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		inserted, err = tx.InsertFinding(t.Context(), f)
		return err
	})
	return inserted
}

// mustInsertFinding inserts f, which must be new, and returns it as
// stored.
func mustInsertFinding(t *testing.T, s reconcile.Store, f reconcile.Finding) reconcile.Finding {
	t.Helper()
	if !insertFinding(t, s, f) {
		t.Fatalf("InsertFinding(%s %s) reported not inserted", f.PaymentID, f.Kind)
	}
	for _, got := range listFindings(t, s, f.PurchaseID, true, 0) {
		if got.Provider == f.Provider && got.PaymentID == f.PaymentID && got.Kind == f.Kind {
			return got
		}
	}
	t.Fatalf("InsertFinding(%s %s) reported inserted, but it is not listed", f.PaymentID, f.Kind)
	return reconcile.Finding{}
}

func getFinding(t *testing.T, s reconcile.Store, id int64) reconcile.Finding {
	t.Helper()
	var f reconcile.Finding
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		f, err = tx.GetFinding(t.Context(), id)
		return err
	})
	return f
}

func listFindings(t *testing.T, s reconcile.Store, purchaseID string, includeClosed bool, limit int) []reconcile.Finding {
	t.Helper()
	var out []reconcile.Finding
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		out, err = tx.ListFindings(t.Context(), purchaseID, reconcile.AnyAccount, includeClosed, limit)
		return err
	})
	return out
}

func closeFinding(t *testing.T, s reconcile.Store, id int64, operator, note string, now time.Time) error {
	t.Helper()
	return txErr(t, s, func(tx reconcile.Tx) error { return tx.CloseFinding(t.Context(), id, operator, note, now) })
}

func paymentIDs(fs []reconcile.Finding) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.PaymentID + "/" + string(f.Kind)
	}
	return out
}

func testFindings(t *testing.T, newStore func(*testing.T) *testStore) {
	parallel(t, "RoundTrip", func(t *testing.T) {
		s := newStore(t)
		zone := time.FixedZone("UTC+2", 2*3600)
		insertPurchase(t, s, newPurchase("pur_1"))
		for _, f := range []reconcile.Finding{
			newFinding("pi_full", reconcile.FindingAmountMismatch, "pur_1", at(time.Minute+7*time.Microsecond).In(zone)),
			// An orphan names a purchase the books do not know, or none.
			newFinding("pi_orphan", reconcile.FindingOrphanCharge, "pur_unknown", at(time.Minute)),
			{Provider: "stripe", PaymentID: "pi_min", Kind: reconcile.FindingOrphanCharge, FoundAt: base},
		} {
			got := mustInsertFinding(t, s, f)
			if got.ID <= 0 {
				t.Fatalf("finding %s: id %d, want positive", f.PaymentID, got.ID)
			}
			want := f
			want.ID, want.FoundAt = got.ID, f.FoundAt.UTC()
			equal(t, "finding read back", getFinding(t, s, got.ID), want)
			if !got.Open() || got.FoundAt.Location() != time.UTC {
				t.Fatalf("new finding %+v: want open, FoundAt in UTC", got)
			}
		}
		err := txErr(t, s, func(tx reconcile.Tx) error { _, err := tx.GetFinding(t.Context(), 1<<40); return err })
		wantErr(t, "GetFinding(unknown)", err, reconcile.ErrNotFound)
	})

	parallel(t, "InsertIsIdempotent", func(t *testing.T) {
		s := newStore(t)
		first := mustInsertFinding(t, s, newFinding("pi_1", reconcile.FindingDuplicateCharge, "pur_1", base))
		again := newFinding("pi_1", reconcile.FindingDuplicateCharge, "pur_2", at(time.Hour))
		again.Amount, again.Evidence = 1, "another run"
		inTx(t, s, func(tx reconcile.Tx) error {
			ctx := t.Context()
			inserted, err := tx.InsertFinding(ctx, again)
			if err != nil || inserted {
				return fmt.Errorf("InsertFinding of a stored (provider, payment, kind) = %v, %v; want false, nil", inserted, err)
			}
			// The transaction goes on: another kind for the same payment,
			// or the same payment id at another provider, is another
			// finding.
			for _, f := range []reconcile.Finding{
				newFinding("pi_1", reconcile.FindingAmountMismatch, "pur_1", base),
				func() reconcile.Finding {
					f := newFinding("pi_1", reconcile.FindingDuplicateCharge, "pur_1", base)
					f.Provider = "adyen"
					return f
				}(),
			} {
				inserted, err := tx.InsertFinding(ctx, f)
				if err != nil || !inserted {
					return fmt.Errorf("InsertFinding(%s %s %s) = %v, %v; want true, nil", f.Provider, f.PaymentID, f.Kind, inserted, err)
				}
			}
			return nil
		})
		equal(t, "finding after the second insert", getFinding(t, s, first.ID), first)
		equal(t, "findings", len(listFindings(t, s, "", true, 0)), 3)

		// Closed, it is still the one finding of its key.
		if err := closeFinding(t, s, first.ID, "alice", "refunded", at(2*time.Hour)); err != nil {
			t.Fatalf("CloseFinding: %v", err)
		}
		if insertFinding(t, s, again) {
			t.Fatal("InsertFinding of the key of a closed finding reported inserted")
		}
		if got := getFinding(t, s, first.ID); got.Open() || got.Amount != first.Amount {
			t.Fatalf("closed finding after a second insert of its key: %+v", got)
		}
	})

	parallel(t, "ConcurrentInsert", func(t *testing.T) {
		s := newStore(t)
		results := race(t, s, racers, func(tx reconcile.Tx, i int) (bool, error) {
			f := newFinding("pi_race", reconcile.FindingOrphanCharge, "", base)
			f.Evidence = fmt.Sprintf("run %d", i)
			return tx.InsertFinding(t.Context(), f)
		})
		won := winners(results)
		if len(won) != 1 {
			t.Fatalf("%d concurrent inserts of one finding: %d reported inserted (%v), want exactly 1", racers, len(won), results)
		}
		got := listFindings(t, s, "", true, 0)
		if len(got) != 1 || got[0].Evidence != fmt.Sprintf("run %d", won[0]) {
			t.Fatalf("stored findings %+v, but insert %d reported inserting it", got, won[0])
		}
	})

	parallel(t, "List", func(t *testing.T) {
		s := newStore(t)
		// Inserted out of FoundAt order; pi_b and pi_c at the same
		// instant come in insertion (id) order.
		for _, f := range []struct {
			payment, purchase string
			found             time.Duration
		}{
			{"pi_d", "pur_2", 4}, {"pi_b", "pur_1", 2}, {"pi_c", "", 2}, {"pi_a", "pur_1", 1}, {"pi_e", "pur_1", 5},
		} {
			mustInsertFinding(t, s, newFinding(f.payment, reconcile.FindingOrphanCharge, f.purchase, at(f.found*time.Minute)))
		}
		for _, tc := range []struct {
			name          string
			purchase      string
			includeClosed bool
			limit         int
			want          []string
		}{
			{"open", "", false, 0, []string{"pi_a", "pi_b", "pi_c", "pi_d", "pi_e"}},
			{"open, limit 2", "", false, 2, []string{"pi_a", "pi_b"}},
			{"of pur_1", "pur_1", false, 0, []string{"pi_a", "pi_b", "pi_e"}},
			{"of an unknown purchase", "pur_unknown", true, 0, []string{}},
		} {
			got := listFindings(t, s, tc.purchase, tc.includeClosed, tc.limit)
			want := make([]string, len(tc.want))
			for i, p := range tc.want {
				want[i] = p + "/" + string(reconcile.FindingOrphanCharge)
			}
			equal(t, "findings, "+tc.name, paymentIDs(got), want)
		}

		byPayment := map[string]reconcile.Finding{}
		for _, f := range listFindings(t, s, "", true, 0) {
			byPayment[f.PaymentID] = f
		}
		for _, p := range []string{"pi_b", "pi_d"} {
			if err := closeFinding(t, s, byPayment[p].ID, "bob", "explained", at(time.Hour)); err != nil {
				t.Fatalf("CloseFinding(%s): %v", p, err)
			}
		}
		for _, tc := range []struct {
			name          string
			purchase      string
			includeClosed bool
			limit         int
			want          []string
		}{
			{"open after closing pi_b and pi_d", "", false, 0, []string{"pi_a", "pi_c", "pi_e"}},
			{"all", "", true, 0, []string{"pi_a", "pi_b", "pi_c", "pi_d", "pi_e"}},
			{"all, limit 3", "", true, 3, []string{"pi_a", "pi_b", "pi_c"}},
			{"open of pur_1", "pur_1", false, 0, []string{"pi_a", "pi_e"}},
			{"open of pur_1, limit 1", "pur_1", false, 1, []string{"pi_a"}},
			{"all of pur_1", "pur_1", true, 0, []string{"pi_a", "pi_b", "pi_e"}},
			{"open of pur_2", "pur_2", false, 0, []string{}},
			{"all of pur_2", "pur_2", true, 0, []string{"pi_d"}},
		} {
			got := listFindings(t, s, tc.purchase, tc.includeClosed, tc.limit)
			want := make([]string, len(tc.want))
			for i, p := range tc.want {
				want[i] = p + "/" + string(reconcile.FindingOrphanCharge)
			}
			equal(t, "findings, "+tc.name, paymentIDs(got), want)
		}
		equal(t, "pi_b as listed", listFindings(t, s, "pur_1", true, 0)[1], getFinding(t, s, byPayment["pi_b"].ID))
	})

	parallel(t, "Close", func(t *testing.T) {
		s := newStore(t)
		f := mustInsertFinding(t, s, newFinding("pi_1", reconcile.FindingStateDisagreement, "pur_1", base))
		closedAt := at(time.Hour + 9*time.Microsecond)
		if err := closeFinding(t, s, f.ID, "alice", "late approval refunded", closedAt.In(time.FixedZone("x", 3600))); err != nil {
			t.Fatalf("CloseFinding: %v", err)
		}
		want := f
		want.ClosedAt, want.ClosedBy, want.CloseNote = closedAt, "alice", "late approval refunded"
		got := getFinding(t, s, f.ID)
		equal(t, "closed finding", got, want)
		if got.Open() {
			t.Fatal("closed finding reports Open")
		}
		// Closed once, by its first closer.
		wantErr(t, "CloseFinding of a closed finding", closeFinding(t, s, f.ID, "bob", "me too", at(2*time.Hour)), reconcile.ErrConflict)
		equal(t, "finding after a second close", getFinding(t, s, f.ID), want)
		wantErr(t, "CloseFinding(unknown)", closeFinding(t, s, f.ID+1000, "bob", "x", at(2*time.Hour)), reconcile.ErrNotFound)

		open := mustInsertFinding(t, s, newFinding("pi_2", reconcile.FindingStateDisagreement, "pur_1", base))
		for _, tc := range []struct{ name, operator, note string }{
			{"no operator", "", "note"},
			{"no note", "alice", ""},
		} {
			wantErr(t, "CloseFinding with "+tc.name, closeFinding(t, s, open.ID, tc.operator, tc.note, at(time.Hour)), reconcile.ErrInvalid)
		}
		equal(t, "finding after refused closes", getFinding(t, s, open.ID), open)
	})

	parallel(t, "CountOpen", func(t *testing.T) {
		s := newStore(t)
		count := func() map[reconcile.FindingKind]int {
			t.Helper()
			var m map[reconcile.FindingKind]int
			inTx(t, s, func(tx reconcile.Tx) error {
				var err error
				m, err = tx.CountOpenFindings(t.Context())
				return err
			})
			return m
		}
		want := map[reconcile.FindingKind]int{}
		for _, k := range reconcile.FindingKinds {
			want[k] = 0
		}
		equal(t, "CountOpenFindings on an empty store", count(), want)

		var ids []int64
		for i, k := range []reconcile.FindingKind{
			reconcile.FindingOrphanCharge, reconcile.FindingOrphanCharge, reconcile.FindingAmountMismatch,
			reconcile.FindingMissingAtProvider, reconcile.FindingOrphanCharge,
		} {
			ids = append(ids, mustInsertFinding(t, s, newFinding(fmt.Sprintf("pi_%d", i), k, "", base)).ID)
			want[k]++
		}
		equal(t, "CountOpenFindings", count(), want)
		if err := closeFinding(t, s, ids[0], "alice", "known test charge", at(time.Hour)); err != nil {
			t.Fatal(err)
		}
		want[reconcile.FindingOrphanCharge]--
		equal(t, "CountOpenFindings after closing one", count(), want)
	})

	parallel(t, "Invalid", func(t *testing.T) {
		s := newStore(t)
		closed := newFinding("pi_closed", reconcile.FindingOrphanCharge, "", base)
		closed.ClosedAt, closed.ClosedBy, closed.CloseNote = base, "alice", "x"
		inTx(t, s, func(tx reconcile.Tx) error {
			for _, tc := range []struct {
				name string
				f    reconcile.Finding
			}{
				{"unknown kind", newFinding("pi_1", "bogus", "", base)},
				{"no provider", func() reconcile.Finding {
					f := newFinding("pi_1", reconcile.FindingOrphanCharge, "", base)
					f.Provider = ""
					return f
				}()},
				{"no payment id", newFinding("", reconcile.FindingOrphanCharge, "", base)},
				{"no FoundAt", newFinding("pi_1", reconcile.FindingOrphanCharge, "", time.Time{})},
				{"already closed", closed},
			} {
				_, err := tx.InsertFinding(t.Context(), tc.f)
				wantErr(t, "InsertFinding with "+tc.name, err, reconcile.ErrInvalid)
			}
			_, err := tx.ListFindings(t.Context(), "", reconcile.AnyAccount, false, -1)
			wantErr(t, "ListFindings with a negative limit", err, reconcile.ErrInvalid)
			// The transaction is still usable.
			_, err = tx.InsertFinding(t.Context(), newFinding("pi_1", reconcile.FindingOrphanCharge, "", base))
			return err
		})
		equal(t, "findings after the refused inserts", len(listFindings(t, s, "", true, 0)), 1)
	})
}

func testAuditRuns(t *testing.T, s *testStore) {
	get := func(name string) (reconcile.AuditRun, error) {
		t.Helper()
		var r reconcile.AuditRun
		err := txErr(t, s, func(tx reconcile.Tx) error {
			var err error
			r, err = tx.GetAuditRun(t.Context(), name)
			return err
		})
		return r, err
	}
	save := func(r reconcile.AuditRun) {
		t.Helper()
		inTx(t, s, func(tx reconcile.Tx) error { return tx.SaveAuditRun(t.Context(), r) })
	}
	_, err := get("stripe")
	wantErr(t, "GetAuditRun before any run", err, reconcile.ErrNotFound)

	zone := time.FixedZone("UTC+1", 3600)
	run := reconcile.AuditRun{
		Name: "stripe", From: at(-24 * time.Hour).In(zone), Until: base, Done: at(-24 * time.Hour),
		StartedAt: at(time.Minute + 3*time.Microsecond), UpdatedAt: at(time.Minute + 3*time.Microsecond),
	}
	save(run)
	want := run
	want.From = want.From.UTC()
	got, err := get("stripe")
	if err != nil {
		t.Fatalf("GetAuditRun: %v", err)
	}
	equal(t, "audit run read back", got, want)

	// Saving again replaces it: the watermark moves on.
	run.Done, run.UpdatedAt, run.Findings = at(-12*time.Hour), at(2*time.Minute), 3
	save(run)
	want = run
	want.From = want.From.UTC()
	got, _ = get("stripe")
	equal(t, "audit run after saving it again", got, want)
	if got.Complete() {
		t.Fatal("a run halfway through its window reports Complete")
	}

	other := reconcile.AuditRun{Name: "adyen", From: base, Until: at(time.Hour), Done: at(time.Hour), StartedAt: base, UpdatedAt: base, Findings: 1}
	save(other)
	got, _ = get("adyen")
	equal(t, "another audit's run", got, other)
	got, _ = get("stripe")
	equal(t, "stripe's run after saving adyen's", got, want)
}
