package storetest

import (
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The operator lists' account filter: the escalated purchases and
// refunds, the findings and the open disputes of one account, selected
// by the store's query (before any cap), and the account the reads of
// findings and disputes carry.

func testAccountLists(t *testing.T, s *testStore) {
	const a, b = "acct_1ListA", "acct_1ListB"
	// One paid purchase of each account (two of a), each escalated, with
	// an escalated refund, an open dispute and a finding.
	type row struct {
		id, account string
		escalated   time.Duration
	}
	rows := []row{{"pur_b", b, time.Hour}, {"pur_p", "", 2 * time.Hour}, {"pur_a1", a, 3 * time.Hour}, {"pur_a2", a, 4 * time.Hour}}
	for _, r := range rows {
		p := newPurchase(r.id)
		p.Account = r.account
		insertPurchase(t, s, p)
		p = walkTo(t, s, r.id, statemachine.Submitted)
		p.State, p.ProviderPaymentID = statemachine.Succeeded, "pi_"+r.id
		p = update(t, s, p, statemachine.Submitted)
		p.EscalatedAt, p.EscalationReason, p.UpdatedAt = at(r.escalated), reconcile.EscalationContradiction, at(r.escalated)
		update(t, s, p, statemachine.Succeeded)

		rf := newRefund("ref_"+r.id, r.id, "pi_"+r.id, 10)
		rf.ProviderRequest.Account = r.account
		rf.ParamsHash = rf.ProviderRequest.Hash()
		rf = refundIn(t, s, rf, statemachine.Uncertain)
		rf.EscalatedAt, rf.EscalationReason = at(r.escalated), reconcile.EscalationUncertainTooLong
		updateRefund(t, s, rf, statemachine.Uncertain)

		d := newDispute("dsp_"+r.id, r.id, "pi_"+r.id, 10)
		d.EvidenceDueBy = at(r.escalated)
		insertDispute(t, s, d)

		mustInsertFinding(t, s, newFinding("pi_"+r.id+"_dup", reconcile.FindingDuplicateCharge, r.id, at(r.escalated)))
	}
	orphan := mustInsertFinding(t, s, newFinding("pi_orphan", reconcile.FindingOrphanCharge, "", at(0)))
	if orphan.Account != "" {
		t.Errorf("a finding about no purchase reads account %q, want none", orphan.Account)
	}

	for _, tc := range []struct {
		name     string
		filter   reconcile.AccountFilter
		purchase []string // the purchases whose rows are listed, in order
		orphan   bool     // the finding about no purchase too
	}{
		{"every account", reconcile.AnyAccount, []string{"pur_b", "pur_p", "pur_a1", "pur_a2"}, true},
		{"the platform's", reconcile.PlatformOnly, []string{"pur_p"}, false},
		{"a connected account's", reconcile.OnlyAccount(a), []string{"pur_a1", "pur_a2"}, false},
		{"another connected account's", reconcile.OnlyAccount(b), []string{"pur_b"}, false},
		{"an account the books do not hold", reconcile.OnlyAccount("acct_1None"), nil, false},
	} {
		var (
			escalated []reconcile.Purchase
			refunds   []reconcile.Refund
			disputes  []reconcile.Dispute
			findings  []reconcile.Finding
			first     []reconcile.Finding
		)
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			if escalated, err = tx.ListEscalated(t.Context(), tc.filter); err != nil {
				return err
			}
			if refunds, err = tx.ListEscalatedRefunds(t.Context(), tc.filter); err != nil {
				return err
			}
			if disputes, err = tx.ListOpenDisputes(t.Context(), tc.filter); err != nil {
				return err
			}
			if findings, err = tx.ListFindings(t.Context(), "", tc.filter, true, 0); err != nil {
				return err
			}
			first, err = tx.ListFindings(t.Context(), "", tc.filter, false, 1)
			return err
		})
		var wantPurchases, wantRefunds, wantDisputes, wantFindings []string
		if tc.orphan {
			wantFindings = append(wantFindings, "pi_orphan/orphan_charge")
		}
		for _, id := range tc.purchase {
			wantPurchases = append(wantPurchases, id)
			wantRefunds = append(wantRefunds, "ref_"+id)
			wantDisputes = append(wantDisputes, "dsp_"+id)
			wantFindings = append(wantFindings, "pi_"+id+"_dup/duplicate_charge")
		}
		var gotPurchases, gotRefunds []string
		for _, p := range escalated {
			gotPurchases = append(gotPurchases, p.ID)
		}
		for _, r := range refunds {
			gotRefunds = append(gotRefunds, r.ID)
		}
		equal(t, tc.name+": escalated purchases", gotPurchases, wantPurchases)
		equal(t, tc.name+": escalated refunds", gotRefunds, wantRefunds)
		equal(t, tc.name+": open disputes", nilIfEmpty(disputeIDs(disputes)), wantDisputes)
		equal(t, tc.name+": findings", nilIfEmpty(paymentIDs(findings)), wantFindings)
		if len(wantFindings) > 0 {
			equal(t, tc.name+": the first open finding", paymentIDs(first), wantFindings[:1])
		} else if len(first) != 0 {
			t.Errorf("%s: the first open finding: %v, want none", tc.name, paymentIDs(first))
		}

		// Each row carries its account: a dispute's and a finding's are
		// their purchase's, read with them.
		account := map[string]string{}
		for _, r := range rows {
			account[r.id] = r.account
		}
		for _, p := range escalated {
			if p.Account != account[p.ID] {
				t.Errorf("%s: purchase %s of account %q, want %q", tc.name, p.ID, p.Account, account[p.ID])
			}
		}
		for _, d := range disputes {
			if d.Account != account[d.PurchaseID] {
				t.Errorf("%s: dispute %s of account %q, want %q", tc.name, d.ID, d.Account, account[d.PurchaseID])
			}
			equal(t, tc.name+": dispute "+d.ID+" as GetDispute reads it", getDispute(t, s, d.ID), d)
		}
		for _, f := range findings {
			if f.Account != account[f.PurchaseID] {
				t.Errorf("%s: finding %s of account %q, want %q", tc.name, f.PaymentID, f.Account, account[f.PurchaseID])
			}
			equal(t, tc.name+": finding "+f.PaymentID+" as GetFinding reads it", getFinding(t, s, f.ID), f)
		}
	}
}

// nilIfEmpty returns nil for an empty slice, so that an empty list
// compares equal to no list.
func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// testCountEscalatedByAccount: the operator list counted by account, the
// platform's under "", an account with none absent; a resolution takes
// a purchase off its account's count, and the counts always add up to
// the operator list's length.
func testCountEscalatedByAccount(t *testing.T, s *testStore) {
	const a, b = "acct_1CountA", "acct_1CountB"
	counts := func(when string) map[string]int {
		t.Helper()
		var (
			byAccount map[string]int
			total     int
		)
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			if byAccount, err = tx.CountEscalatedByAccount(t.Context()); err != nil {
				return err
			}
			list, err := tx.ListEscalated(t.Context(), reconcile.AnyAccount)
			total = len(list)
			return err
		})
		sum := 0
		for _, n := range byAccount {
			sum += n
		}
		if sum != total {
			t.Errorf("%s: CountEscalatedByAccount %v adds up to %d, ListEscalated lists %d", when, byAccount, sum, total)
		}
		return byAccount
	}
	equal(t, "CountEscalatedByAccount on an empty store", counts("empty"), map[string]int{})

	escalated := map[string]reconcile.Purchase{}
	for _, r := range []struct {
		id, account string
		state       statemachine.State
	}{
		{"pur_a1", a, statemachine.Uncertain}, {"pur_a2", a, statemachine.Declined}, {"pur_a3", a, statemachine.Created},
		{"pur_p1", "", statemachine.Uncertain}, {"pur_b1", b, statemachine.Submitted},
	} {
		p := newPurchase(r.id)
		p.Account = r.account
		insertPurchase(t, s, p)
		p = walkTo(t, s, r.id, r.state)
		p.EscalatedAt, p.EscalationReason, p.UpdatedAt = at(time.Hour), reconcile.EscalationContradiction, at(time.Hour)
		escalated[r.id] = update(t, s, p, r.state)
	}
	// Not on the list: they count nowhere.
	for _, id := range []string{"pur_p2", "pur_b2"} {
		p := newPurchase(id)
		if id == "pur_b2" {
			p.Account = b
		}
		insertPurchase(t, s, p)
		walkTo(t, s, id, statemachine.Uncertain)
	}
	equal(t, "CountEscalatedByAccount", counts("five escalated"), map[string]int{a: 3, "": 1, b: 1})

	// Resolved: off the list, and b, with none left, absent.
	for _, id := range []string{"pur_a2", "pur_b1"} {
		p := escalated[id]
		p.EscalatedAt, p.EscalationReason, p.UpdatedAt = time.Time{}, "", at(2*time.Hour)
		update(t, s, p, p.State)
	}
	equal(t, "CountEscalatedByAccount after two resolutions", counts("two resolved"), map[string]int{a: 2, "": 1})
}
