package demo_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/demo"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// scenario returns the demo's scenario called name.
func scenario(t *testing.T, name string) demo.Scenario {
	t.Helper()
	for _, sc := range demo.Scenarios() {
		if sc.Name == name {
			return sc
		}
	}
	t.Fatalf("no scenario %q", name)
	return demo.Scenario{}
}

// settled returns what the demo observes of a purchase that reached state
// after a lost reply and a replay under its own key, with one charge and
// each webhook event delivered once.
func settled(state statemachine.State) demo.Observed {
	const id, pay = "pur_1", "pi_1"
	key := reconcile.ProviderKeyFor(id)
	var c reconcile.Case
	c.Purchase = reconcile.Purchase{ID: id, State: state, ProviderKey: key, ProviderPaymentID: pay}
	c.Transitions = []reconcile.TransitionRecord{
		{From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit},
		{From: statemachine.Submitted, To: statemachine.Uncertain, Cause: reconcile.CauseSubmitResponse},
		{From: statemachine.Uncertain, To: state, Cause: reconcile.CauseKeyReplay},
	}
	c.Attempts = []reconcile.Attempt{
		{Op: "create", Key: key, Outcome: "unknown", Applied: true},
		{Op: "create", Key: key, Outcome: "succeeded", Applied: true},
		{Op: "status", Outcome: "succeeded", Applied: false},
	}
	c.Events = []reconcile.InboxEvent{{Type: "payment_intent.succeeded", Outcome: reconcile.EventApplied}}
	return demo.Observed{Case: c, Charges: 1, Deliveries: []fakeprovider.Delivery{
		{PaymentID: pay, Copy: 1, Attempt: 1, Acked: true},
	}}
}

// outsideCharge is the charge "second charge outside payrecon" makes
// after settled's charge pi_1.
var outsideCharge = fakeprovider.Charge{ID: "pi_2", PurchaseID: "pur_1", Amount: 1300, Currency: "usd", Status: "succeeded", Outside: true}

// errRefusedAsDisputed is CreateRefund's refusal of a refund of settled's
// payment while it has an open chargeback.
var errRefusedAsDisputed = fmt.Errorf("reconcile: refund of pur_1: %w",
	reconcile.E(reconcile.KindDisputed, "payment pi_1 has open dispute du_1 (needs_response, 13.00 USD)", nil))

// disputed returns what the demo observes of "disputed and lost" once
// settled's payment pi_1 was charged back as chargeback du_1, now in
// state st, with the audit run or not: the refund asked for while it was
// open refused as disputed, nothing refunded, and the outbox st means.
func disputed(st statemachine.State, audited bool) demo.Observed {
	o := settled(statemachine.Succeeded)
	o.Audited = audited
	d := reconcile.Dispute{
		ID: "dsp_1", ProviderDisputeID: "du_1", PurchaseID: "pur_1", PaymentID: "pi_1", Amount: 1300, Currency: "usd",
		Reason: "fraudulent", State: st, Withdrawn: 1300,
	}
	o.Case.Disputes = []reconcile.DisputeRecord{{Dispute: d}}
	o.Dispute = &provider.Dispute{ID: "du_1", PaymentID: "pi_1", Amount: 1300, Currency: "usd", Reason: "fraudulent", Status: provider.DisputeNeedsResponse}
	o.RefundAsked, o.RefusedRefund = true, errRefusedAsDisputed
	o.Outbox = []string{"purchase.succeeded", "dispute.opened"}
	if st == statemachine.Lost {
		o.Outbox = append(o.Outbox, "dispute.lost")
	}
	return o
}

// audited returns a finding of kind about payment, as the audit stores it.
func audited(kind reconcile.FindingKind, payment string) reconcile.Finding {
	return reconcile.Finding{Kind: kind, PaymentID: payment, PurchaseID: "pur_1", Amount: 1300, Currency: "usd"}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name     string
		scenario string
		observe  func(o *demo.Observed)
		want     []string
	}{
		{name: "clean success as expected", scenario: "clean success"},
		{
			name: "decline as expected", scenario: "decline",
			observe: func(o *demo.Observed) {
				*o = settled(statemachine.Declined)
				o.Charges = 0
			},
		},
		{
			name: "duplicate as expected", scenario: "duplicated webhook",
			observe: func(o *demo.Observed) {
				o.Deliveries = append(o.Deliveries, fakeprovider.Delivery{PaymentID: "pi_1", Copy: 2, Attempt: 1, Acked: true})
			},
		},
		{
			name: "stale event as expected", scenario: "stale processing after success",
			observe: func(o *demo.Observed) {
				o.Case.Events = append(o.Case.Events, reconcile.InboxEvent{Type: "payment_intent.processing", Outcome: reconcile.EventStale})
			},
		},
		{
			name: "late success confirmed as expected", scenario: "success after a decline",
			observe: func(o *demo.Observed) {
				*o = settled(statemachine.Declined)
				o.Case.Purchase.EscalationReason = reconcile.EscalationStateDisagreement
				o.Case.Events = append(o.Case.Events, reconcile.InboxEvent{Outcome: reconcile.EventConfirming})
				o.Case.Findings = []reconcile.Finding{audited(reconcile.FindingStateDisagreement, "pi_1")}
				o.Audited = true
			},
		},
		{
			name: "late success confirmed, audit not run yet", scenario: "success after a decline",
			observe: func(o *demo.Observed) {
				*o = settled(statemachine.Declined)
				o.Case.Purchase.EscalationReason = reconcile.EscalationStateDisagreement
				o.Case.Events = append(o.Case.Events, reconcile.InboxEvent{Outcome: reconcile.EventConfirming})
			},
		},
		{
			name: "late success the audit missed", scenario: "success after a decline",
			observe: func(o *demo.Observed) {
				*o = settled(statemachine.Declined)
				o.Case.Purchase.EscalationReason = reconcile.EscalationStateDisagreement
				o.Case.Events = append(o.Case.Events, reconcile.InboxEvent{Outcome: reconcile.EventConfirming})
				o.Audited = true
			},
			want: []string{"no audit finding state_disagreement"},
		},
		{
			name: "second charge made, before the audit", scenario: "second charge outside payrecon",
			observe: func(o *demo.Observed) {
				o.Charges, o.Outside = 2, &outsideCharge
			},
		},
		{
			name: "second charge found by the audit", scenario: "second charge outside payrecon",
			observe: func(o *demo.Observed) {
				o.Charges, o.Outside, o.Audited = 2, &outsideCharge, true
				o.Case.Findings = []reconcile.Finding{audited(reconcile.FindingDuplicateCharge, "pi_2")}
				o.Case.Purchase.EscalationReason = reconcile.EscalationDuplicateCharge
			},
		},
		{
			// The hourly audit sweep runs in the demo too.
			name: "second charge found by the hourly sweep before the demo's audit", scenario: "second charge outside payrecon",
			observe: func(o *demo.Observed) {
				o.Charges, o.Outside = 2, &outsideCharge
				o.Case.Findings = []reconcile.Finding{audited(reconcile.FindingDuplicateCharge, "pi_2")}
				o.Case.Purchase.EscalationReason = reconcile.EscalationDuplicateCharge
			},
		},
		{
			name: "second charge not made yet", scenario: "second charge outside payrecon",
			want: []string{"1 charges at the provider, want 2", "not made yet: a charge made outside payrecon, no webhook"},
		},
		{
			name: "second charge escalated without a finding", scenario: "second charge outside payrecon",
			observe: func(o *demo.Observed) {
				o.Charges, o.Outside = 2, &outsideCharge
				o.Case.Purchase.EscalationReason = reconcile.EscalationDuplicateCharge
			},
			want: []string{`escalation "duplicate_charge", want ""`},
		},
		{
			name: "second charge the audit missed", scenario: "second charge outside payrecon",
			observe: func(o *demo.Observed) {
				o.Charges, o.Outside, o.Audited = 2, &outsideCharge, true
			},
			want: []string{"no audit finding duplicate_charge about payment pi_2"},
		},
		{
			name: "duplicate found about the purchase's own payment", scenario: "second charge outside payrecon",
			observe: func(o *demo.Observed) {
				o.Charges, o.Outside, o.Audited = 2, &outsideCharge, true
				o.Case.Findings = []reconcile.Finding{audited(reconcile.FindingDuplicateCharge, "pi_1")}
				o.Case.Purchase.EscalationReason = reconcile.EscalationDuplicateCharge
			},
			want: []string{
				`escalation "duplicate_charge", want ""`,
				"no audit finding duplicate_charge about payment pi_2",
				"unexpected audit finding duplicate_charge about payment pi_1",
			},
		},
		{
			name: "late approval found by the audit", scenario: "late approval, no webhook",
			observe: func(o *demo.Observed) {
				*o = settled(statemachine.Declined)
				approved := fakeprovider.Charge{ID: "pi_1", PurchaseID: "pur_1", Status: "succeeded"}
				o.Outside, o.Audited = &approved, true
				o.Case.Findings = []reconcile.Finding{audited(reconcile.FindingStateDisagreement, "pi_1")}
				o.Case.Purchase.EscalationReason = reconcile.EscalationStateDisagreement
			},
		},
		{
			name: "late approval applied instead of escalated", scenario: "late approval, no webhook",
			observe: func(o *demo.Observed) {
				approved := fakeprovider.Charge{ID: "pi_1", PurchaseID: "pur_1", Status: "succeeded"}
				o.Outside, o.Audited = &approved, true
			},
			want: []string{"state succeeded, want declined", "no audit finding state_disagreement about payment pi_1"},
		},
		{
			name: "wrong amount judged as expected", scenario: "webhook with a wrong amount",
			observe: func(o *demo.Observed) {
				*o = settled(statemachine.Uncertain)
				wrong := fakeprovider.Charge{ID: "pi_2", PurchaseID: "pur_1", Amount: demo.WrongAmount, Currency: "usd", Status: "succeeded", Outside: true}
				o.Outside, o.Audited = &wrong, true
				o.Case.Events = append(o.Case.Events, reconcile.InboxEvent{Outcome: reconcile.EventContradiction})
				o.Case.Findings = []reconcile.Finding{audited(reconcile.FindingAmountMismatch, "pi_2")}
				o.Case.Purchase.EscalationReason = reconcile.EscalationAmountMismatch
			},
		},
		{
			name: "wrong amount applied", scenario: "webhook with a wrong amount",
			observe: func(o *demo.Observed) {
				wrong := fakeprovider.Charge{ID: "pi_2", PurchaseID: "pur_1", Amount: demo.WrongAmount, Currency: "usd", Status: "succeeded", Outside: true}
				o.Outside = &wrong
			},
			want: []string{
				"state succeeded, want uncertain",
				`escalation "", want "amount_mismatch"`,
				"no webhook with outcome contradiction",
			},
		},
		{
			name: "a finding about a clean purchase", scenario: "clean success",
			observe: func(o *demo.Observed) {
				o.Case.Findings = []reconcile.Finding{audited(reconcile.FindingStateDisagreement, "pi_1")}
			},
			want: []string{"unexpected audit finding state_disagreement about payment pi_1"},
		},
		{
			name: "key retention expired as expected", scenario: "key retention expired, outcome unknown",
			observe: func(o *demo.Observed) {
				*o = settled(statemachine.Uncertain)
				o.Case.Purchase.EscalationReason = reconcile.EscalationKeyRetentionExpired
				o.Charges = 0
			},
		},
		{
			name: "wrong state", scenario: "clean success",
			observe: func(o *demo.Observed) { o.Case.Purchase.State = statemachine.Reconciling },
			want:    []string{"state reconciling, want succeeded"},
		},
		{
			name: "escalated though it must not be", scenario: "clean success",
			observe: func(o *demo.Observed) { o.Case.Purchase.EscalationReason = reconcile.EscalationUncertainTooLong },
			want:    []string{`escalation "uncertain_too_long", want ""`},
		},
		{
			name: "not escalated though it must be", scenario: "key retention expired, outcome unknown",
			observe: func(o *demo.Observed) {
				*o = settled(statemachine.Uncertain)
				o.Charges = 0
			},
			want: []string{`escalation "", want "key_retention_expired"`},
		},
		{
			name: "charged twice", scenario: "reply lost after the charge",
			observe: func(o *demo.Observed) { o.Charges = 2 },
			want:    []string{"2 charges at the provider, want 1"},
		},
		{
			name: "never charged", scenario: "timeout before the charge",
			observe: func(o *demo.Observed) { o.Charges = 0 },
			want:    []string{"0 charges at the provider, want 1"},
		},
		{
			name: "webhook outcome missing", scenario: "stale processing after success",
			want: []string{"no webhook with outcome stale"},
		},
		{
			name: "duplicate never sent", scenario: "duplicated webhook",
			want: []string{"no duplicate delivery acknowledged"},
		},
		{
			name: "duplicate not acknowledged", scenario: "duplicated webhook",
			observe: func(o *demo.Observed) {
				o.Deliveries = append(o.Deliveries, fakeprovider.Delivery{PaymentID: "pi_1", Copy: 2, Attempt: 1, StatusCode: 500})
			},
			want: []string{"no duplicate delivery acknowledged"},
		},
		{
			name: "duplicate acknowledged for another payment", scenario: "duplicated webhook",
			observe: func(o *demo.Observed) {
				o.Deliveries = append(o.Deliveries, fakeprovider.Delivery{PaymentID: "pi_2", Copy: 2, Attempt: 1, Acked: true})
			},
			want: []string{"no duplicate delivery acknowledged"},
		},
		{
			name: "duplicate moved the purchase twice", scenario: "duplicated webhook",
			observe: func(o *demo.Observed) {
				o.Deliveries = append(o.Deliveries, fakeprovider.Delivery{PaymentID: "pi_1", Copy: 2, Attempt: 1, Acked: true})
				o.Case.Transitions = append(o.Case.Transitions,
					reconcile.TransitionRecord{From: statemachine.Succeeded, To: statemachine.Succeeded, Cause: reconcile.CauseWebhook})
			},
			want: []string{"2 moves to succeeded, want 1"},
		},
		{
			name: "a create with another key", scenario: "search not-found lag",
			observe: func(o *demo.Observed) {
				o.Case.Attempts = append(o.Case.Attempts, reconcile.Attempt{Op: "create", Key: "payrecon-pur_2", Outcome: "succeeded"})
			},
			want: []string{"a create was sent with another key: payrecon-pur_2"},
		},
		{
			name: "a create with no key", scenario: "search not-found lag",
			observe: func(o *demo.Observed) {
				o.Case.Attempts = append(o.Case.Attempts, reconcile.Attempt{Op: "create", Outcome: "unknown"})
			},
			want: []string{"a create was sent with another key: "},
		},
		{
			name: "dispute lost as expected", scenario: "disputed and lost",
			observe: func(o *demo.Observed) { *o = disputed(statemachine.Lost, true) },
		},
		{
			// Before the audit the network has moved it to under_review
			// only: the audit counts it at risk while it is open.
			name: "dispute under review before the audit", scenario: "disputed and lost",
			observe: func(o *demo.Observed) { *o = disputed(statemachine.EvidenceSubmitted, false) },
		},
		{
			name: "dispute still open before the audit", scenario: "disputed and lost",
			observe: func(o *demo.Observed) { *o = disputed(statemachine.Open, false) },
			want:    []string{"dispute du_1 open, want evidence_submitted"},
		},
		{
			name: "dispute not decided after the audit", scenario: "disputed and lost",
			observe: func(o *demo.Observed) { *o = disputed(statemachine.EvidenceSubmitted, true) },
			want: []string{
				"dispute du_1 evidence_submitted, want lost",
				`outbox ["purchase.succeeded" "dispute.opened"], want ["purchase.succeeded" "dispute.opened" "dispute.lost"]`,
			},
		},
		{
			name: "chargeback not opened yet", scenario: "disputed and lost",
			want: []string{"not opened yet: a chargeback (fraudulent), announced by webhook"},
		},
		{
			name: "chargeback opened, payrecon not told", scenario: "disputed and lost",
			observe: func(o *demo.Observed) {
				*o = disputed(statemachine.Open, false)
				o.Case.Disputes = nil
			},
			want: []string{"0 disputes in the books, want 1: du_1"},
		},
		{
			name: "chargeback opened, refund not asked yet", scenario: "disputed and lost",
			observe: func(o *demo.Observed) {
				*o = disputed(statemachine.EvidenceSubmitted, false)
				o.RefundAsked, o.RefusedRefund = false, nil
			},
			want: []string{"no refund asked for while disputed"},
		},
		{
			name: "refund of a disputed payment stored and sent", scenario: "disputed and lost",
			observe: func(o *demo.Observed) {
				*o = disputed(statemachine.Lost, true)
				o.RefusedRefund, o.PaymentRefunds = nil, 1
				o.Refunds = []reconcile.RefundDetail{{Refund: reconcile.Refund{ID: "ref_1", State: statemachine.Succeeded}}}
			},
			want: []string{
				"1 unexpected refunds",
				"the refund asked for while disputed was accepted",
				"1 refunds at the provider of payment pi_1, want none",
			},
		},
		{
			name: "refund refused for another reason", scenario: "disputed and lost",
			observe: func(o *demo.Observed) {
				*o = disputed(statemachine.Lost, true)
				o.RefusedRefund = reconcile.ErrNotRefundable
			},
			want: []string{`the refund asked for while disputed was refused with "nothing to refund: the purchase is not succeeded", want it refused as disputed`},
		},
		{
			name: "the shop told out of order, the purchase moved", scenario: "disputed and lost",
			observe: func(o *demo.Observed) {
				*o = disputed(statemachine.Lost, true)
				o.Case.Purchase.State = statemachine.Declined
				o.Outbox = []string{"dispute.opened", "purchase.succeeded", "dispute.lost", "dispute.lost"}
			},
			want: []string{
				"state declined, want succeeded",
				`outbox ["dispute.opened" "purchase.succeeded" "dispute.lost" "dispute.lost"], want ["purchase.succeeded" "dispute.opened" "dispute.lost"]`,
			},
		},
		{
			name: "dispute of another payment, money reinstated", scenario: "disputed and lost",
			observe: func(o *demo.Observed) {
				*o = disputed(statemachine.Lost, true)
				o.Case.Disputes[0].Dispute.PaymentID = "pi_2"
				o.Case.Disputes[0].Dispute.Reinstated = 1300
			},
			want: []string{
				"dispute du_1 of payment pi_2 in the books, want du_1 of pi_1",
				"dispute du_1 withdrew 13.00 USD and reinstated 13.00 USD of 13.00 USD, want a chargeback that withdrew it all and reinstated 0.00 USD",
			},
		},
		{
			name: "a dispute of a purchase not disputed", scenario: "clean success",
			observe: func(o *demo.Observed) {
				o.Case.Disputes = disputed(statemachine.Open, false).Case.Disputes
			},
			want: []string{"1 unexpected disputes"},
		},
		{
			name: "every problem, in order", scenario: "success after a decline",
			observe: func(o *demo.Observed) {
				o.Charges = 3
				o.Case.Attempts[1].Key = "payrecon-other"
			},
			want: []string{
				"state succeeded, want declined",
				`escalation "", want "state_disagreement"`,
				"3 charges at the provider, want 1",
				"no webhook with outcome confirming",
				"a create was sent with another key: payrecon-other",
			},
		},
		{
			name: "every problem of the new checks, in order", scenario: "webhook with a wrong amount",
			observe: func(o *demo.Observed) {
				o.Audited = true
				o.Case.Findings = []reconcile.Finding{audited(reconcile.FindingOrphanCharge, "pi_9")}
				o.Case.Attempts[0].Key = "payrecon-other"
			},
			want: []string{
				"state succeeded, want uncertain",
				`escalation "", want "amount_mismatch"`,
				"no webhook with outcome contradiction",
				"not made yet: a charge made outside payrecon, announced by webhook",
				"no audit finding amount_mismatch",
				"unexpected audit finding orphan_charge about payment pi_9",
				"a create was sent with another key: payrecon-other",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := settled(statemachine.Succeeded)
			if tt.observe != nil {
				tt.observe(&o)
			}
			got := scenario(t, tt.scenario).Check(o)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Check = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestScenarios(t *testing.T) {
	names := map[string]bool{}
	for _, sc := range demo.Scenarios() {
		if sc.Name == "" || sc.Expect == "" || sc.Want == "" {
			t.Errorf("scenario %+v lacks a name, an expected outcome or a state", sc)
		}
		if names[sc.Name] {
			t.Errorf("two scenarios called %q", sc.Name)
		}
		names[sc.Name] = true
		// A finding escalates its purchase; only a change payrecon does not
		// hear of is for the audit alone to find.
		if sc.Finding != "" && sc.Escalation == "" {
			t.Errorf("%s: audit finding %s but no escalation", sc.Name, sc.Finding)
		}
		if sc.AuditOnly && (sc.Finding == "" || sc.Outside == nil || sc.Outside.Webhooks) {
			t.Errorf("%s: audit only, but no finding, or no change outside payrecon, or one announced by webhook", sc.Name)
		}
		if sc.Outside != nil && sc.Outside.Webhooks && sc.Webhook == "" {
			t.Errorf("%s: a change announced by webhook, but no webhook outcome to check", sc.Name)
		}
		// The operator refunds only a charge the audit found: the one
		// action that moves money needs a finding to act on.
		if rp := sc.Refund; rp != nil && rp.OfFinding && sc.Finding != reconcile.FindingDuplicateCharge {
			t.Errorf("%s: the operator refunds a finding's charge, but the scenario wants no duplicate_charge finding", sc.Name)
		}
		if dp := sc.Dispute; dp != nil {
			checkDisputePlan(t, sc)
		}
	}
	if len(names) != 16 {
		t.Errorf("%d scenarios, want the 10 of the seed lesson, the 3 the judge and the audit catch, the 2 refunds and the dispute", len(names))
	}
}

// checkDisputePlan fails unless sc's dispute plan can play: only a
// succeeded payment is disputed, a chargeback refuses every refund, the
// reason is Stripe's, and the statuses move forward as the fake allows,
// to a decision after the audit, which counts the dispute at risk while
// it is open.
func checkDisputePlan(t *testing.T, sc demo.Scenario) {
	t.Helper()
	dp := sc.Dispute
	if sc.Want != statemachine.Succeeded || sc.Charges != 1 || sc.Refund != nil || sc.Outside != nil {
		t.Errorf("%s: a dispute of a purchase that does not end succeeded with 1 charge, or with a refund or a change outside payrecon", sc.Name)
	}
	if dp.Reason == "" || len(dp.After) == 0 {
		t.Errorf("%s: a dispute with no reason or not decided after the audit", sc.Name)
	}
	f := fakeprovider.New(fakeprovider.Config{})
	pay, err := f.Create(t.Context(), provider.CreateRequest{IdempotencyKey: "k", PurchaseID: "pur_1", Amount: 1300, Currency: "usd"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.OpenDispute(pay.PaymentID, fakeprovider.DisputeOptions{Reason: dp.Reason})
	if err != nil {
		t.Fatalf("%s: %v", sc.Name, err)
	}
	for i, status := range append(slices.Clone(dp.Before), dp.After...) {
		if _, err := f.MoveDispute(d.ID, status); err != nil {
			t.Errorf("%s: move %d: %v", sc.Name, i+1, err)
		}
		st, ok := reconcile.DisputeStateOf(status)
		decided := statemachine.Dispute.Terminal(st)
		if !ok || decided != (i == len(dp.Before)+len(dp.After)-1) {
			t.Errorf("%s: move %d to %s: want the last move, and only it, to decide", sc.Name, i+1, status)
		}
	}
}

// stubProvider records the changes Outside.Do asks for.
type stubProvider struct {
	charges  []fakeprovider.OutsideCharge
	statuses []string // "paymentID status"
	webhooks []bool
	err      error // SetStatus's
}

func (p *stubProvider) ChargeOutside(c fakeprovider.OutsideCharge, webhooks bool) fakeprovider.Charge {
	p.charges, p.webhooks = append(p.charges, c), append(p.webhooks, webhooks)
	return fakeprovider.Charge{ID: "pi_out", PurchaseID: c.PurchaseID, Amount: c.Amount, Currency: c.Currency, Status: c.Status, Outside: true}
}

func (p *stubProvider) SetStatus(paymentID, status string, webhooks bool) (fakeprovider.Charge, error) {
	if p.err != nil {
		return fakeprovider.Charge{}, p.err
	}
	p.statuses, p.webhooks = append(p.statuses, paymentID+" "+status), append(p.webhooks, webhooks)
	return fakeprovider.Charge{ID: paymentID, Status: status}, nil
}

// The demo hands Outside.Do the fake Stripe server itself.
var _ demo.Provider = (*fakeprovider.Server)(nil)

func TestOutsideDo(t *testing.T) {
	purchase := func(state statemachine.State, payment string) reconcile.Purchase {
		return reconcile.Purchase{ID: "pur_1", Customer: "c", Amount: 1300, Currency: "usd", State: state, ProviderPaymentID: payment}
	}
	charge := demo.Outside{Kind: demo.OutsideCharge, When: statemachine.Succeeded}
	approval := demo.Outside{Kind: demo.OutsideApproval, When: statemachine.Declined}
	tests := []struct {
		name         string
		outside      demo.Outside
		purchase     reconcile.Purchase
		setStatusErr error
		wantCharges  []fakeprovider.OutsideCharge
		wantStatuses []string
		wantWebhooks []bool
		wantErr      error
	}{
		{
			name: "a second charge of the purchase's amount", outside: charge, purchase: purchase(statemachine.Succeeded, "pi_1"),
			wantCharges:  []fakeprovider.OutsideCharge{{PurchaseID: "pur_1", Customer: "c", Amount: 1300, Currency: "usd", Status: "succeeded"}},
			wantWebhooks: []bool{false},
		},
		{
			name:     "a charge of another amount, announced",
			outside:  demo.Outside{Kind: demo.OutsideCharge, When: statemachine.Uncertain, Amount: demo.WrongAmount, Webhooks: true},
			purchase: purchase(statemachine.Uncertain, ""),
			wantCharges: []fakeprovider.OutsideCharge{
				{PurchaseID: "pur_1", Customer: "c", Amount: demo.WrongAmount, Currency: "usd", Status: "succeeded"},
			},
			wantWebhooks: []bool{true},
		},
		{
			name: "a late approval of the purchase's own payment", outside: approval, purchase: purchase(statemachine.Declined, "pi_1"),
			wantStatuses: []string{"pi_1 succeeded"}, wantWebhooks: []bool{false},
		},
		{name: "not due in another state", outside: charge, purchase: purchase(statemachine.Submitted, ""), wantErr: demo.ErrNotDue},
		{name: "an approval not due without a payment", outside: approval, purchase: purchase(statemachine.Declined, ""), wantErr: demo.ErrNotDue},
		{
			name: "the provider refuses", outside: approval, purchase: purchase(statemachine.Declined, "pi_1"),
			setStatusErr: fakeprovider.ErrNoSuchPayment, wantErr: fakeprovider.ErrNoSuchPayment,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prov := &stubProvider{err: tt.setStatusErr}
			if due := tt.outside.Due(tt.purchase); due != !errors.Is(tt.wantErr, demo.ErrNotDue) {
				t.Errorf("Due = %v", due)
			}
			_, err := tt.outside.Do(prov, tt.purchase)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Do: error %v, want %v", err, tt.wantErr)
			}
			if !slices.Equal(prov.charges, tt.wantCharges) || !slices.Equal(prov.statuses, tt.wantStatuses) || !slices.Equal(prov.webhooks, tt.wantWebhooks) {
				t.Errorf("Do asked for charges %+v, statuses %q, webhooks %v; want %+v, %q, %v",
					prov.charges, prov.statuses, prov.webhooks, tt.wantCharges, tt.wantStatuses, tt.wantWebhooks)
			}
		})
	}
}

func TestOutsideLine(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		outside demo.Outside
		charge  fakeprovider.Charge
		want    string
	}{
		{
			name: "a charge, no webhook", outside: demo.Outside{Kind: demo.OutsideCharge},
			charge: fakeprovider.Charge{ID: "pi_2", Amount: 1300, Currency: "usd", Status: "succeeded", CreatedAt: start.Add(90 * time.Second)},
			want:   "+00:01:30  outside payrecon: a charge pi_2 of 13.00 USD (succeeded), no webhook",
		},
		{
			name: "a charge, announced", outside: demo.Outside{Kind: demo.OutsideCharge, Webhooks: true},
			charge: fakeprovider.Charge{ID: "pi_2", Amount: 500, Currency: "jpy", Status: "succeeded", CreatedAt: start},
			want:   "+00:00:00  outside payrecon: a charge pi_2 of 500 JPY (succeeded), announced by webhook",
		},
		{
			// An approval happens when the charge moves, not when it was made.
			name: "an approval", outside: demo.Outside{Kind: demo.OutsideApproval},
			charge: fakeprovider.Charge{ID: "pi_1", Status: "succeeded", CreatedAt: start, MovedAt: start.Add(time.Hour)},
			want:   "+01:00:00  outside payrecon: the provider approves pi_1 late (succeeded), no webhook",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.outside.Line(tt.charge, start); got != tt.want {
				t.Errorf("Line = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTimeline(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	var c reconcile.Case
	c.Purchase = reconcile.Purchase{ID: "pur_1", EscalatedAt: at(3 * time.Hour), EscalationReason: reconcile.EscalationContradiction}
	c.Transitions = []reconcile.TransitionRecord{
		{From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit, At: at(0)},
		{From: statemachine.Submitted, To: statemachine.Declined, Cause: reconcile.CauseSubmitResponse, At: at(2 * time.Second)},
	}
	c.Attempts = []reconcile.Attempt{
		// At the time of the first transition: after it.
		{Op: "create", Outcome: "declined", Status: "requires_payment_method", Applied: true, At: at(0)},
		// Two at one time: in the case's order.
		{Op: "status", Outcome: "succeeded", Applied: false, At: at(time.Hour)},
		{Op: "search", Outcome: "not_found", Applied: true, At: at(time.Hour)},
	}
	c.Events = []reconcile.InboxEvent{
		// Before the second attempt, though listed after it.
		{Type: "payment_intent.payment_failed", Outcome: reconcile.EventApplied, ReceivedAt: at(time.Second)},
		// At the time of the escalation: before it.
		{Type: "payment_intent.succeeded", Outcome: reconcile.EventContradiction, ReceivedAt: at(3 * time.Hour)},
	}
	c.Findings = []reconcile.Finding{
		// At the time of the escalation it caused: after the events, before it.
		{Kind: reconcile.FindingStateDisagreement, PaymentID: "pi_1", Amount: 1250, Currency: "eur", FoundAt: at(3 * time.Hour)},
		{Kind: reconcile.FindingDuplicateCharge, PaymentID: "pi_2", Amount: 300, Currency: "eur", FoundAt: at(2 * time.Hour)},
	}
	want := []string{
		"+00:00:00  created     → submitted    (submit)",
		"+00:00:00  provider create → declined [requires_payment_method]",
		"+00:00:01  webhook  payment_intent.payment_failed → applied",
		"+00:00:02  submitted   → declined     (submit_response)",
		"+01:00:00  provider status → succeeded (not applied)",
		"+01:00:00  provider search → not_found",
		"+02:00:00  audit    duplicate_charge: payment pi_2, 3.00 EUR at risk",
		"+03:00:00  webhook  payment_intent.succeeded → contradiction",
		"+03:00:00  audit    state_disagreement: payment pi_1, 12.50 EUR at risk",
		"+03:00:00  escalated to the operators: contradiction",
	}
	if got := demo.Timeline(c, start); !slices.Equal(got, want) {
		t.Errorf("Timeline:\n%q\nwant\n%q", got, want)
	}

	// Off the operator list: no escalation line.
	c.Purchase = reconcile.Purchase{ID: "pur_1"}
	if got := demo.Timeline(c, start); !slices.Equal(got, want[:len(want)-1]) {
		t.Errorf("Timeline, not escalated:\n%q\nwant\n%q", got, want[:len(want)-1])
	}
	if got := demo.Timeline(reconcile.Case{}, start); len(got) != 0 {
		t.Errorf("Timeline of an empty case = %q, want none", got)
	}
}

func TestTimelineDispute(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	var c reconcile.Case
	c.Transitions = []reconcile.TransitionRecord{
		{From: statemachine.Submitted, To: statemachine.Succeeded, Cause: reconcile.CauseWebhook, At: at(0)},
	}
	c.Events = []reconcile.InboxEvent{
		{Type: "charge.dispute.created", Outcome: reconcile.EventApplied, ReceivedAt: at(time.Minute)},
		{Type: "charge.dispute.closed", Outcome: reconcile.EventApplied, ReceivedAt: at(2 * time.Hour)},
	}
	lost := reconcile.Dispute{
		ProviderDisputeID: "du_1", PaymentID: "pi_1", Amount: 1000, Currency: "usd", Reason: "fraudulent",
		State: statemachine.Lost, EvidenceDueBy: at(7*24*time.Hour + time.Minute), Withdrawn: 1000, CreatedAt: at(time.Minute),
	}
	won := reconcile.Dispute{
		ProviderDisputeID: "du_2", PaymentID: "pi_1", Amount: 250, Currency: "eur", Inquiry: true,
		State: statemachine.Won, Withdrawn: 250, Reinstated: 250, CreatedAt: at(3 * time.Hour),
	}
	c.Disputes = []reconcile.DisputeRecord{
		{Dispute: lost, Transitions: []reconcile.TransitionRecord{
			{DisputeID: "dsp_1", From: statemachine.Open, To: statemachine.EvidenceSubmitted, Cause: reconcile.CauseWebhook, At: at(time.Hour)},
			// At the time of its event: after it.
			{DisputeID: "dsp_1", From: statemachine.EvidenceSubmitted, To: statemachine.Lost, Cause: reconcile.CauseWebhook, At: at(2 * time.Hour)},
		}},
		{Dispute: won, Transitions: []reconcile.TransitionRecord{
			{DisputeID: "dsp_2", From: statemachine.Open, To: statemachine.Won, Cause: reconcile.CauseAudit, At: at(4 * time.Hour)},
		}},
	}
	want := []string{
		"+00:00:00  submitted   → succeeded    (webhook)",
		"+00:01:00  webhook  charge.dispute.created → applied",
		"+00:01:00  dispute  du_1 opened (chargeback, fraudulent, 10.00 USD, evidence due +168:01:00)",
		"+01:00:00  dispute  du_1 open → evidence_submitted (webhook)",
		"+02:00:00  webhook  charge.dispute.closed → applied",
		"+02:00:00  dispute  du_1 lost (webhook): 10.00 USD withdrawn for good",
		"+03:00:00  dispute  du_2 opened (inquiry, 2.50 EUR)",
		"+04:00:00  dispute  du_2 won (audit): 2.50 EUR reinstated",
	}
	if got := demo.Timeline(c, start); !slices.Equal(got, want) {
		t.Errorf("Timeline:\n%q\nwant\n%q", got, want)
	}
}

func TestDisputeLines(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	dp := scenario(t, "disputed and lost").Dispute
	d := provider.Dispute{ID: "du_1", PaymentID: "pi_1", Amount: 1000, Currency: "usd", Reason: "fraudulent", Status: "needs_response", Created: start.Add(15 * time.Second)}
	if got, want := dp.OpenLine(d, start), "+00:00:15  card network: chargeback du_1 on payment pi_1 (fraudulent, 10.00 USD), announced by webhook"; got != want {
		t.Errorf("OpenLine = %q, want %q", got, want)
	}
	d.Status = "lost"
	if got, want := dp.MoveLine(d, 2*time.Hour), "+02:00:00  card network: dispute du_1 → lost, announced by webhook"; got != want {
		t.Errorf("MoveLine = %q, want %q", got, want)
	}
	amount := demo.Money{Amount: 1000, Currency: "usd"}
	for _, tt := range []struct {
		rf   reconcile.Refund
		err  error
		want string
	}{
		{err: errRefusedAsDisputed,
			want: "+00:00:30  refund refused: payment disputed: the client asked for 10.00 USD back; payment pi_1 has open dispute du_1 (needs_response, 13.00 USD)"},
		{err: reconcile.ErrNotRefundable, want: "+00:00:30  refund refused: nothing to refund: the purchase is not succeeded"},
		{rf: reconcile.Refund{ID: "ref_1"}, want: "+00:00:30  the client asks for refund ref_1 of 10.00 USD: accepted while disputed"},
	} {
		if got := dp.RefundLine(30*time.Second, amount, tt.rf, tt.err); got != tt.want {
			t.Errorf("RefundLine(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestTimelineStableForEqualTimes(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var c reconcile.Case
	c.Purchase = reconcile.Purchase{EscalatedAt: start, EscalationReason: reconcile.EscalationAttemptsExhausted}
	c.Events = []reconcile.InboxEvent{{Type: "e1", Outcome: reconcile.EventApplied, ReceivedAt: start}, {Type: "e2", Outcome: reconcile.EventDuplicate, ReceivedAt: start}}
	c.Attempts = []reconcile.Attempt{{Op: "create", Outcome: "unknown", At: start, Applied: true}, {Op: "status", Outcome: "pending", At: start, Applied: true}}
	c.Transitions = []reconcile.TransitionRecord{
		{From: statemachine.Uncertain, To: statemachine.Reconciling, Cause: reconcile.CauseStatusQuery, At: start},
		{From: statemachine.Reconciling, To: statemachine.Uncertain, Cause: reconcile.CauseStatusQuery, At: start},
	}
	want := []string{
		"+00:00:00  uncertain   → reconciling  (status_query)",
		"+00:00:00  reconciling → uncertain    (status_query)",
		"+00:00:00  provider create → unknown",
		"+00:00:00  provider status → pending",
		"+00:00:00  webhook  e1 → applied",
		"+00:00:00  webhook  e2 → duplicate",
		"+00:00:00  escalated to the operators: attempts_exhausted",
	}
	for range 3 { // the same every time
		if got := demo.Timeline(c, start); !slices.Equal(got, want) {
			t.Fatalf("Timeline:\n%q\nwant\n%q", got, want)
		}
	}
}

func TestClockOffset(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "00:00:00"},
		{-5 * time.Second, "00:00:00"},
		{1499 * time.Millisecond, "00:00:01"},
		{1500 * time.Millisecond, "00:00:02"},
		{59*time.Minute + 59*time.Second + 600*time.Millisecond, "01:00:00"},
		{2*time.Hour + 37*time.Minute + 15*time.Second, "02:37:15"},
		{25*time.Hour + 1*time.Second, "25:00:01"},
	}
	for _, tt := range tests {
		if got := demo.ClockOffset(tt.d); got != tt.want {
			t.Errorf("ClockOffset(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
