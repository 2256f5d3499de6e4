package reconcile_test

import (
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// TestJudgeDispute covers every rule of the dispute judge: findings that
// apply nothing, stale answers that change nothing, and the state each
// applied answer moves the dispute to.
func TestJudgeDispute(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	owner := &reconcile.Purchase{ID: "pur_a", ProviderPaymentID: "pi_a", Amount: 1000, Currency: "usd", State: statemachine.Succeeded}
	declined := &reconcile.Purchase{ID: "pur_d", ProviderPaymentID: "pi_a", Amount: 1000, Currency: "usd", State: statemachine.Declined}
	connected := &reconcile.Purchase{ID: "pur_a", ProviderPaymentID: "pi_a", Amount: 1000, Currency: "usd", State: statemachine.Succeeded, Account: "acct_1A"}
	answer := func(status string, mod ...func(*provider.Dispute)) provider.Dispute {
		d := provider.Dispute{ID: "du_1", PaymentID: "pi_a", Amount: 1000, Currency: "usd", Status: status, Reason: "fraudulent"}
		for _, m := range mod {
			m(&d)
		}
		return d
	}
	held := func(state statemachine.State, status string, mod ...func(*reconcile.Dispute)) *reconcile.Dispute {
		d := &reconcile.Dispute{
			ID: "dsp_1", ProviderDisputeID: "du_1", PurchaseID: "pur_a", PaymentID: "pi_a", Amount: 1000, Currency: "usd", Reason: "fraudulent",
			State: state, ProviderStatus: status, ProviderUpdatedAt: t0,
		}
		for _, m := range mod {
			m(d)
		}
		return d
	}
	later := t0.Add(time.Hour)
	tests := []struct {
		name    string
		cur     *reconcile.Dispute
		books   reconcile.DisputeBooks
		d       provider.Dispute
		account string // the answer's; "" for the platform's
		at      time.Time
		kind    reconcile.DisputeVerdictKind
		to      statemachine.State
		finding reconcile.FindingKind
	}{
		{name: "a payment no purchase owns", d: answer("needs_response"), at: t0,
			kind: reconcile.DisputeReject, finding: reconcile.FindingForeignDispute},
		{name: "another account's dispute of the platform's payment", books: reconcile.DisputeBooks{Owner: owner},
			d: answer("needs_response"), account: "acct_1B", at: t0,
			kind: reconcile.DisputeReject, finding: reconcile.FindingForeignDispute},
		{name: "the platform's dispute of a connected account's payment", books: reconcile.DisputeBooks{Owner: connected},
			d: answer("needs_response"), at: t0,
			kind: reconcile.DisputeReject, finding: reconcile.FindingForeignDispute},
		{name: "another connected account's dispute, metadata naming the purchase", books: reconcile.DisputeBooks{Owner: connected},
			d: answer("needs_response", func(d *provider.Dispute) { d.PurchaseID = "pur_a" }), account: "acct_1B", at: t0,
			kind: reconcile.DisputeReject, finding: reconcile.FindingForeignDispute},
		{name: "another account's answer about a held dispute", cur: held(statemachine.Open, "needs_response"),
			books: reconcile.DisputeBooks{Owner: connected}, d: answer("lost"), at: later,
			kind: reconcile.DisputeReject, finding: reconcile.FindingForeignDispute},
		{name: "a connected account's own dispute", books: reconcile.DisputeBooks{Owner: connected},
			d: answer("needs_response"), account: "acct_1A", at: t0, kind: reconcile.DisputeApply, to: statemachine.Open},
		{name: "a connected account's held dispute lost", cur: held(statemachine.Open, "needs_response"),
			books: reconcile.DisputeBooks{Owner: connected}, d: answer("lost"), account: "acct_1A", at: later,
			kind: reconcile.DisputeApply, to: statemachine.Lost},
		{name: "a held dispute whose payment no purchase owns now", cur: held(statemachine.Open, "needs_response"),
			d: answer("lost", func(d *provider.Dispute) { d.PaymentID = "pi_z" }), at: later,
			kind: reconcile.DisputeReject, finding: reconcile.FindingDisputeMismatch},
		{name: "a held dispute now naming another purchase's payment",
			cur:   held(statemachine.Open, "needs_response", func(d *reconcile.Dispute) { d.PurchaseID = "pur_b" }),
			books: reconcile.DisputeBooks{Owner: owner}, d: answer("lost"), at: later,
			kind: reconcile.DisputeReject, finding: reconcile.FindingDisputeMismatch},
		{name: "metadata naming another purchase", books: reconcile.DisputeBooks{Owner: owner},
			d: answer("needs_response", func(d *provider.Dispute) { d.PurchaseID = "pur_b" }), at: t0,
			kind: reconcile.DisputeReject, finding: reconcile.FindingDisputeMismatch},
		{name: "another currency", books: reconcile.DisputeBooks{Owner: owner},
			d: answer("needs_response", func(d *provider.Dispute) { d.Currency = "eur" }), at: t0,
			kind: reconcile.DisputeReject, finding: reconcile.FindingDisputeMismatch},
		{name: "a payment the books hold declined", books: reconcile.DisputeBooks{Owner: declined},
			d: answer("needs_response"), at: t0, kind: reconcile.DisputeReject, finding: reconcile.FindingDisputeMismatch},
		{name: "more than the payment kept after refunds", books: reconcile.DisputeBooks{Owner: owner, Refunded: 500},
			d: answer("needs_response", func(d *provider.Dispute) { d.Amount = 600 }), at: t0,
			kind: reconcile.DisputeReject, finding: reconcile.FindingDisputeExceeds},
		{name: "more than the payment kept after a lost dispute", books: reconcile.DisputeBooks{Owner: owner, OtherLost: 700},
			d: answer("needs_response", func(d *provider.Dispute) { d.Amount = 400 }), at: t0,
			kind: reconcile.DisputeReject, finding: reconcile.FindingDisputeExceeds},
		{name: "a pending refund does not make it too large", books: reconcile.DisputeBooks{Owner: owner, Pending: 500},
			d: answer("needs_response"), at: t0, kind: reconcile.DisputeApply, to: statemachine.Open},
		{name: "exactly what the payment kept", books: reconcile.DisputeBooks{Owner: owner, Refunded: 400},
			d: answer("needs_response", func(d *provider.Dispute) { d.Amount = 600 }), at: t0,
			kind: reconcile.DisputeApply, to: statemachine.Open},
		{name: "a new chargeback", books: reconcile.DisputeBooks{Owner: owner}, d: answer("needs_response"), at: t0,
			kind: reconcile.DisputeApply, to: statemachine.Open},
		{name: "a new inquiry", books: reconcile.DisputeBooks{Owner: owner}, d: answer("warning_needs_response"), at: t0,
			kind: reconcile.DisputeApply, to: statemachine.Open},
		{name: "a dispute first seen decided", books: reconcile.DisputeBooks{Owner: owner}, d: answer("won"), at: t0,
			kind: reconcile.DisputeApply, to: statemachine.Won},
		{name: "a prevented dispute", books: reconcile.DisputeBooks{Owner: owner}, d: answer("prevented"), at: t0,
			kind: reconcile.DisputeApply, to: statemachine.Closed},
		{name: "evidence submitted", cur: held(statemachine.Open, "needs_response"), books: reconcile.DisputeBooks{Owner: owner},
			d: answer("under_review"), at: later, kind: reconcile.DisputeApply, to: statemachine.EvidenceSubmitted},
		{name: "an answered inquiry escalated to a chargeback", cur: held(statemachine.EvidenceSubmitted, "warning_under_review"),
			books: reconcile.DisputeBooks{Owner: owner}, d: answer("needs_response"), at: later,
			kind: reconcile.DisputeApply, to: statemachine.Open},
		{name: "a stale needs_response after won", cur: held(statemachine.Won, "won"), books: reconcile.DisputeBooks{Owner: owner},
			d: answer("needs_response"), at: later, kind: reconcile.DisputeStale},
		{name: "an inquiry's review after the chargeback's", cur: held(statemachine.EvidenceSubmitted, "under_review"),
			books: reconcile.DisputeBooks{Owner: owner}, d: answer("warning_under_review"), at: later, kind: reconcile.DisputeStale},
		{name: "lost after won", cur: held(statemachine.Won, "won"), books: reconcile.DisputeBooks{Owner: owner},
			d: answer("lost"), at: later, kind: reconcile.DisputeStale},
		{name: "the same status again, nothing new", cur: held(statemachine.Open, "needs_response"),
			books: reconcile.DisputeBooks{Owner: owner}, d: answer("needs_response"), at: later, kind: reconcile.DisputeStale},
		{name: "the same status, older, with another due date",
			cur:   held(statemachine.Open, "needs_response", func(d *reconcile.Dispute) { d.EvidenceDueBy = t0.Add(48 * time.Hour) }),
			books: reconcile.DisputeBooks{Owner: owner},
			d:     answer("needs_response", func(d *provider.Dispute) { d.EvidenceDueBy = t0.Add(24 * time.Hour) }),
			at:    t0.Add(-time.Minute), kind: reconcile.DisputeStale},
		{name: "the same status, newer, with a new due date",
			cur:   held(statemachine.Open, "needs_response", func(d *reconcile.Dispute) { d.EvidenceDueBy = t0.Add(48 * time.Hour) }),
			books: reconcile.DisputeBooks{Owner: owner},
			d:     answer("needs_response", func(d *provider.Dispute) { d.EvidenceDueBy = t0.Add(72 * time.Hour) }),
			at:    later, kind: reconcile.DisputeApply, to: statemachine.Open},
		{name: "funds reinstated after won",
			cur:   held(statemachine.Won, "won", func(d *reconcile.Dispute) { d.Withdrawn = 1000 }),
			books: reconcile.DisputeBooks{Owner: owner},
			d:     answer("won", func(d *provider.Dispute) { d.Withdrawn, d.Reinstated = 1000, 1000 }),
			at:    later, kind: reconcile.DisputeApply, to: statemachine.Won},
		{name: "the same status in the same second, with a new due date",
			cur:   held(statemachine.Open, "needs_response", func(d *reconcile.Dispute) { d.EvidenceDueBy = t0.Add(48 * time.Hour) }),
			books: reconcile.DisputeBooks{Owner: owner},
			d:     answer("needs_response", func(d *provider.Dispute) { d.EvidenceDueBy = t0.Add(72 * time.Hour) }),
			at:    t0, kind: reconcile.DisputeApply, to: statemachine.Open},
		{name: "lost with a pending refund, more than the payment took",
			cur:   held(statemachine.Open, "needs_response"),
			books: reconcile.DisputeBooks{Owner: owner, Pending: 100},
			d:     answer("lost"), at: later,
			kind: reconcile.DisputeApply, to: statemachine.Lost, finding: reconcile.FindingDisputeExceeds},
		{name: "lost while the refunds and it return more than the payment took",
			cur:   held(statemachine.Open, "warning_needs_response", func(d *reconcile.Dispute) { d.Amount = 600 }),
			books: reconcile.DisputeBooks{Owner: owner, Refunded: 500},
			d:     answer("lost", func(d *provider.Dispute) { d.Amount = 600 }), at: later,
			kind: reconcile.DisputeApply, to: statemachine.Lost, finding: reconcile.FindingDisputeExceeds},
		{name: "an unknown status", cur: held(statemachine.Open, "needs_response"), books: reconcile.DisputeBooks{Owner: owner},
			d: answer("teleported"), at: later, kind: reconcile.DisputeStale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := reconcile.JudgeDispute(tt.cur, tt.books, tt.d, tt.account, tt.at)
			if v.Kind != tt.kind || v.Finding != tt.finding || (tt.kind == reconcile.DisputeApply && v.To != tt.to) {
				t.Fatalf("verdict %s (to %q), want kind %d to %q finding %q", v, v.To, tt.kind, tt.to, tt.finding)
			}
			if v.Reason == "" || !strings.Contains(v.Reason, "du_1") {
				t.Errorf("reason %q does not name the dispute", v.Reason)
			}
		})
	}
}

// TestDisputeStateOf maps every provider status to a dispute state.
func TestDisputeStateOf(t *testing.T) {
	want := map[string]statemachine.State{
		"warning_needs_response": statemachine.Open, "needs_response": statemachine.Open,
		"warning_under_review": statemachine.EvidenceSubmitted, "under_review": statemachine.EvidenceSubmitted,
		"won": statemachine.Won, "lost": statemachine.Lost, "warning_closed": statemachine.Closed, "prevented": statemachine.Closed,
	}
	for _, status := range provider.DisputeStatuses {
		got, ok := reconcile.DisputeStateOf(status)
		if !ok || got != want[status] {
			t.Errorf("DisputeStateOf(%q) = %q, %v; want %q", status, got, ok, want[status])
		}
	}
	if _, ok := reconcile.DisputeStateOf("teleported"); ok {
		t.Error("an unknown status maps to a state")
	}
}
