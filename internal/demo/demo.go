// Package demo is `payrecon demo`'s tour: the scenarios it plays, one
// purchase for each failure of the seed lesson, for each disagreement
// with the provider that only the judge or the audit from the provider's
// side can catch, for refunds and for a chargeback, the checks that each
// purchase ended as the lesson demands, the timeline it prints for each,
// and the report and summary it ends with, money at risk included.
//
// Run is the demo's driver: it runs every scenario through the
// in-process stack (the fake Stripe server, the worker, the webhook
// endpoint) that the command hands it, moves the simulated clock, makes
// the scenarios' changes outside payrecon through Outside.Do and the card
// network's disputes (DisputePlan), runs the audit, and checks what it
// observed. cmd/payrecon parses the command line and wires the store and
// the stack (demo.go, stack.go); it is this package's only importer.
//
// Why it imports fakeprovider: the tour is written in the simulator's
// terms, because only a simulator makes each failure happen on purpose: a
// scenario names the fake's faults (fakeprovider.Fault,
// fakeprovider.WebhookFault) and its changes outside payrecon (a charge
// made elsewhere, a late approval, a chargeback). So this package depends
// on the fake, as a test would, and nothing in reconcile or its adapters
// imports it: reconcile itself imports no adapter (internal/architecture's
// test holds that). Its scenarios, checks and report state what the
// protocol promises, and are tested on their own (demo_test.go,
// report_test.go) without the command's wiring.
package demo

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// Scenario is one purchase of the demo: the fault it meets and the outcome
// payrecon must reach despite it.
type Scenario struct {
	Name   string
	Faults []fakeprovider.Fault        // the purchase's create calls, in order
	Hooks  []fakeprovider.WebhookFault // its webhook events, in order
	Want   statemachine.State
	// Escalation is the reason it must end on the operator list with, or
	// "" for a purchase that must end off it.
	Escalation reconcile.EscalationReason
	Charges    int // charges with money taken at the provider
	// Webhook, if set, is an event outcome that must be seen for it.
	Webhook reconcile.EventOutcome
	// Outside, if set, is what the provider does for the purchase outside
	// payrecon once it reaches Outside.When.
	Outside *Outside
	// Finding is the kind of audit finding the demo's audit must store
	// about the purchase (about the payment Outside made or moved, if
	// any), or "" for a purchase the audit must find nothing wrong with.
	Finding reconcile.FindingKind
	// AuditOnly: payrecon cannot see the scenario's trouble on its own
	// (no webhook, no check left to run): the purchase must stay off the
	// operator list until the audit stores its finding, and then carry
	// Escalation.
	AuditOnly bool
	// Refund, if set, is a refund the scenario asks for and how it must
	// end.
	Refund *RefundPlan
	// Dispute, if set, is a chargeback the card network opens on the
	// purchase once it reaches Want, and how it is decided.
	Dispute *DisputePlan
	Expect  string // the expected outcome, in words
}

// RefundPlan is a refund of a scenario's purchase: asked for by a client
// once the purchase has reached its wanted state, or by the operator's
// "refund this charge" on the duplicate charge the audit found.
type RefundPlan struct {
	// Faults are the refund's create calls, in order.
	Faults []fakeprovider.Fault
	// OfFinding: the operator refunds the payment of the purchase's
	// duplicate_charge finding, once the audit has stored it; otherwise a
	// client refunds the purchase's own payment in full.
	OfFinding bool
	// Want is the state the refund must end in.
	Want statemachine.State
	// Refunds is how many refunds at the provider must have returned
	// money for it.
	Refunds int
	// NetCharges is how many of the purchase's charges must keep money at
	// the provider once the refund is done.
	NetCharges int
}

// OutsideKind names a change the provider makes outside payrecon.
type OutsideKind string

// The changes a scenario can make outside payrecon.
const (
	// OutsideCharge: a new charge for the purchase (its id in the
	// metadata), succeeded at once, made outside payrecon: from the
	// provider's dashboard or another system, without idempotency key.
	OutsideCharge OutsideKind = "charge"
	// OutsideApproval: the provider approves the purchase's own declined
	// payment late (a bank's late approval): requires_payment_method →
	// succeeded.
	OutsideApproval OutsideKind = "approval"
)

// Outside is a change the provider makes for a scenario's purchase
// outside payrecon, due once the purchase reaches When.
type Outside struct {
	Kind OutsideKind
	When statemachine.State
	// Amount is an outside charge's amount in minor units, 0 for the
	// purchase's own; its currency is always the purchase's.
	Amount int64
	// Webhooks: the provider announces the change by webhook. Without,
	// payrecon hears nothing of it (a dashboard charge for an account whose
	// webhook endpoint was never configured).
	Webhooks bool
}

// Provider is what Outside.Do needs of the fake Stripe server
// (*fakeprovider.Server).
type Provider interface {
	ChargeOutside(c fakeprovider.OutsideCharge, webhooks bool) fakeprovider.Charge
	SetStatus(paymentID, status string, webhooks bool) (fakeprovider.Charge, error)
}

// ErrNotDue: Outside.Do was called for a purchase the change is not due
// for.
var ErrNotDue = errors.New("not due")

// Due reports whether the change is due for p: p is in state When, and,
// for an approval, knows its own payment, the one to approve.
func (o Outside) Due(p reconcile.Purchase) bool {
	return p.State == o.When && (o.Kind != OutsideApproval || p.ProviderPaymentID != "")
}

// Do makes the change at prov for p and returns the charge it made or
// moved. Returns an error wrapping ErrNotDue if it is not due for p, and
// the provider's error if it refuses the change.
func (o Outside) Do(prov Provider, p reconcile.Purchase) (fakeprovider.Charge, error) {
	if !o.Due(p) {
		return fakeprovider.Charge{}, fmt.Errorf("demo: %s outside payrecon for purchase %s (%s): %w", o.Kind, p.ID, p.State, ErrNotDue)
	}
	switch o.Kind {
	case OutsideCharge:
		amount := o.Amount
		if amount == 0 {
			amount = p.Amount
		}
		return prov.ChargeOutside(fakeprovider.OutsideCharge{
			PurchaseID: p.ID, Customer: p.Customer, Amount: amount, Currency: p.Currency, Status: fakeprovider.StatusSucceeded,
		}, o.Webhooks), nil
	case OutsideApproval:
		ch, err := prov.SetStatus(p.ProviderPaymentID, fakeprovider.StatusSucceeded, o.Webhooks)
		if err != nil {
			return fakeprovider.Charge{}, fmt.Errorf("demo: approve payment %s of purchase %s: %w", p.ProviderPaymentID, p.ID, err)
		}
		return ch, nil
	default:
		return fakeprovider.Charge{}, fmt.Errorf("demo: unknown change outside payrecon %q", o.Kind)
	}
}

// String says what the change is, in words.
func (o Outside) String() string {
	s := "a late approval of the declined payment"
	if o.Kind == OutsideCharge {
		s = "a charge made outside payrecon"
	}
	if o.Webhooks {
		return s + ", announced by webhook"
	}
	return s + ", no webhook"
}

// Line renders the change Do made, ch, as a timeline line stamped with its
// offset from start, in Timeline's format.
func (o Outside) Line(ch fakeprovider.Charge, start time.Time) string {
	at, what := ch.CreatedAt, fmt.Sprintf("a charge %s of %s", ch.ID, Money{Currency: ch.Currency, Amount: ch.Amount})
	if o.Kind == OutsideApproval {
		at, what = ch.MovedAt, fmt.Sprintf("the provider approves %s late", ch.ID)
	}
	hook := "no webhook"
	if o.Webhooks {
		hook = "announced by webhook"
	}
	return "+" + ClockOffset(at.Sub(start)) + "  outside payrecon: " + what + " (" + ch.Status + "), " + hook
}

// Scenarios returns the failures of the seed lesson, one purchase each,
// then the disagreements the judge and the audit catch, the refunds and
// the dispute, in the order the demo plays and reports them.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "clean success", Want: statemachine.Succeeded, Charges: 1,
			Expect: "succeeded, 1 charge"},
		{Name: "decline", Faults: []fakeprovider.Fault{fakeprovider.Decline}, Want: statemachine.Declined,
			Expect: "declined, no charge"},
		{Name: "reply lost after the charge", Faults: []fakeprovider.Fault{fakeprovider.LostReply},
			Hooks: []fakeprovider.WebhookFault{fakeprovider.WebhookDrop}, Want: statemachine.Succeeded, Charges: 1,
			Expect: "succeeded by replaying the same key, 1 charge"},
		{Name: "timeout before the charge", Faults: []fakeprovider.Fault{fakeprovider.Timeout},
			Want: statemachine.Succeeded, Charges: 1, Expect: "succeeded by replaying the same key, 1 charge"},
		{Name: "delayed webhook", Faults: []fakeprovider.Fault{fakeprovider.LostReply},
			Hooks: []fakeprovider.WebhookFault{fakeprovider.WebhookDelay}, Want: statemachine.Succeeded, Charges: 1,
			Expect: "succeeded (webhook or replay, whichever first), 1 charge"},
		{Name: "duplicated webhook", Faults: []fakeprovider.Fault{fakeprovider.LostReply},
			Hooks: []fakeprovider.WebhookFault{fakeprovider.WebhookDuplicate}, Want: statemachine.Succeeded, Charges: 1,
			Webhook: reconcile.EventDuplicate, Expect: "succeeded, the duplicate changes nothing, 1 charge"},
		{Name: "stale processing after success",
			Hooks: []fakeprovider.WebhookFault{fakeprovider.WebhookStaleProcessing}, Want: statemachine.Succeeded, Charges: 1,
			Webhook: reconcile.EventStale, Expect: "succeeded, the stale processing changes nothing, 1 charge"},
		{Name: "search not-found lag",
			Faults: []fakeprovider.Fault{fakeprovider.LostReply, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout},
			Hooks:  []fakeprovider.WebhookFault{fakeprovider.WebhookDrop}, Want: statemachine.Succeeded, Charges: 1,
			Expect: "succeeded once search catches up, never a second create, 1 charge"},
		{Name: "key retention expired, outcome unknown",
			Faults: []fakeprovider.Fault{fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout},
			Want:   statemachine.Uncertain, Escalation: reconcile.EscalationKeyRetentionExpired,
			Expect: "uncertain on the operator list, no charge, never a new key"},
		// The success event contradicts the decline but is no current read:
		// the judge confirms it with a status query, which escalates.
		{Name: "success after a decline", Faults: []fakeprovider.Fault{fakeprovider.DeclineThenSucceed},
			Want: statemachine.Declined, Escalation: reconcile.EscalationStateDisagreement, Charges: 1,
			Webhook: reconcile.EventConfirming, Finding: reconcile.FindingStateDisagreement,
			Expect: "declined, the status query confirms the late success: state_disagreement, 1 charge"},
		{Name: "second charge outside payrecon",
			Outside: &Outside{Kind: OutsideCharge, When: statemachine.Succeeded},
			Want:    statemachine.Succeeded, Escalation: reconcile.EscalationDuplicateCharge, Charges: 2,
			Finding: reconcile.FindingDuplicateCharge, AuditOnly: true,
			Expect: "succeeded; the audit finds the second charge: duplicate_charge, 2 charges"},
		{Name: "late approval, no webhook", Faults: []fakeprovider.Fault{fakeprovider.Decline},
			Outside: &Outside{Kind: OutsideApproval, When: statemachine.Declined},
			Want:    statemachine.Declined, Escalation: reconcile.EscalationStateDisagreement, Charges: 1,
			Finding: reconcile.FindingStateDisagreement, AuditOnly: true,
			Expect: "declined; the audit finds the approval: state_disagreement, 1 charge"},
		{Name: "refund with a lost reply", Want: statemachine.Succeeded, Charges: 1,
			Refund: &RefundPlan{Faults: []fakeprovider.Fault{fakeprovider.LostReply}, Want: statemachine.Succeeded, Refunds: 1, NetCharges: 0},
			Expect: "succeeded, then refunded: the refund's reply lost, its key replayed: 1 refund, no net charge"},
		{Name: "duplicate charge refunded by the operator",
			Outside: &Outside{Kind: OutsideCharge, When: statemachine.Succeeded},
			Want:    statemachine.Succeeded, Escalation: reconcile.EscalationDuplicateCharge, Charges: 2,
			Finding: reconcile.FindingDuplicateCharge, AuditOnly: true,
			Refund: &RefundPlan{OfFinding: true, Want: statemachine.Succeeded, Refunds: 1, NetCharges: 1},
			Expect: "succeeded; the audit finds the second charge and the operator refunds it: 1 net charge"},
		{Name: "webhook with a wrong amount", Faults: []fakeprovider.Fault{fakeprovider.Timeout},
			Outside: &Outside{Kind: OutsideCharge, When: statemachine.Uncertain, Amount: WrongAmount, Webhooks: true},
			Want:    statemachine.Uncertain, Escalation: reconcile.EscalationAmountMismatch, Charges: 1,
			Webhook: reconcile.EventContradiction, Finding: reconcile.FindingAmountMismatch,
			Expect: "uncertain, the charge not applied: amount_mismatch, 1 charge"},
		// The dispute is decided after the audit, which counts it at risk
		// while it is open.
		{Name: "disputed and lost", Want: statemachine.Succeeded, Charges: 1,
			Dispute: &DisputePlan{Reason: "fraudulent", RefundWhileOpen: true,
				Before: []string{provider.DisputeUnderReview}, After: []string{provider.DisputeLost}},
			Expect: "succeeded; charged back, the refund refused while disputed, the dispute lost: 1 charge, no refund"},
	}
}

// WrongAmount is the amount of the charge the "webhook with a wrong
// amount" scenario makes outside payrecon: no purchase of the demo costs
// it.
const WrongAmount = 9900

// Observed is what a check looks at: the purchase's case as the store
// holds it, and the facts only the provider knows.
type Observed struct {
	Case reconcile.Case
	// Charges counts the purchase's charges that took money at the
	// provider (fakeprovider.Fake.MoneyTaken).
	Charges int
	// Deliveries are the webhook POSTs the provider made so far, for any
	// purchase (fakeprovider.Server.Deliveries); Check picks the
	// purchase's own by its provider payment id.
	Deliveries []fakeprovider.Delivery
	// Outside is the charge the scenario's Outside change made or moved,
	// nil until it is made.
	Outside *fakeprovider.Charge
	// Audited: the demo's audit from the provider's side has run. The
	// finding a scenario wants is demanded only then; findings it does
	// not want are problems at any time (Case.Findings holds them).
	Audited bool
	// Refunds are the purchase's refunds with their audit trails.
	Refunds []reconcile.RefundDetail
	// ProviderRefunds counts, per refund id, the refunds at the provider
	// that returned money for it.
	ProviderRefunds map[string]int
	// NetCharges counts the purchase's charges that keep money at the
	// provider, refunds taken off (fakeprovider.Fake.NetCharges).
	NetCharges int

	// The facts of a scenario with a Dispute plan, unset for the others.
	// Dispute is the chargeback the network opened, as opened, nil until
	// it is.
	Dispute *provider.Dispute
	// RefundAsked: the client asked for a refund while it was open;
	// RefusedRefund is the error that refused it, nil if none did.
	RefundAsked   bool
	RefusedRefund error
	// Outbox lists the types of the purchase's outbox events, in
	// sequence order.
	Outbox []string
	// PaymentRefunds counts the refunds at the provider of the purchase's
	// own payment (fakeprovider.Fake.RefundsOf), failed ones included.
	PaymentRefunds int
}

// Check returns what is wrong with the scenario's purchase as observed,
// or nothing when it ended as expected: the state, the escalation, the
// charges and the webhook outcome the scenario wants, its change outside
// payrecon made, the audit finding it wants (once audited) and no other,
// and never a create with a key other than the purchase's own; its
// refund and its dispute as planned (checkRefund, checkDispute) and no
// other. An AuditOnly scenario must be off the operator list until its
// finding is stored.
func (sc Scenario) Check(o Observed) []string {
	var problems []string
	c := o.Case
	p := c.Purchase
	if p.State != sc.Want {
		problems = append(problems, fmt.Sprintf("state %s, want %s", p.State, sc.Want))
	}
	found := slices.ContainsFunc(c.Findings, func(f reconcile.Finding) bool { return sc.wants(f, o) })
	wantEscalation := sc.Escalation
	if sc.AuditOnly && !found {
		wantEscalation = "" // nothing but the audit can tell
	}
	if p.EscalationReason != wantEscalation {
		problems = append(problems, fmt.Sprintf("escalation %q, want %q", p.EscalationReason, wantEscalation))
	}
	if o.Charges != sc.Charges {
		problems = append(problems, fmt.Sprintf("%d charges at the provider, want %d", o.Charges, sc.Charges))
	}
	switch sc.Webhook {
	case "":
	case reconcile.EventDuplicate:
		// The inbox keeps one row per event: a duplicate shows as a second
		// copy the endpoint acknowledged, with one move to the final state.
		if !slices.ContainsFunc(o.Deliveries, func(d fakeprovider.Delivery) bool {
			return d.PaymentID == p.ProviderPaymentID && d.Copy == 2 && d.Acked
		}) {
			problems = append(problems, "no duplicate delivery acknowledged")
		}
		if n := countTo(c, sc.Want); n != 1 {
			problems = append(problems, fmt.Sprintf("%d moves to %s, want 1", n, sc.Want))
		}
	default:
		if !slices.ContainsFunc(c.Events, func(ev reconcile.InboxEvent) bool { return ev.Outcome == sc.Webhook }) {
			problems = append(problems, fmt.Sprintf("no webhook with outcome %s", sc.Webhook))
		}
	}
	if sc.Outside != nil && o.Outside == nil {
		problems = append(problems, "not made yet: "+sc.Outside.String())
	}
	if o.Audited && sc.Finding != "" && !found {
		about := ""
		if o.Outside != nil {
			about = " about payment " + o.Outside.ID
		}
		problems = append(problems, fmt.Sprintf("no audit finding %s%s", sc.Finding, about))
	}
	for _, f := range c.Findings {
		if !sc.wants(f, o) {
			problems = append(problems, fmt.Sprintf("unexpected audit finding %s about payment %s", f.Kind, f.PaymentID))
		}
	}
	// Never a second key: every create carried the purchase's own key.
	for _, a := range c.Attempts {
		if a.Op == "create" && a.Key != reconcile.ProviderKeyFor(p.ID) {
			problems = append(problems, "a create was sent with another key: "+a.Key)
		}
	}
	problems = append(problems, sc.checkRefund(o)...)
	return append(problems, sc.checkDispute(o)...)
}

// checkRefund returns what is wrong with the scenario's refund: it must
// be there (once the audit ran, for a refund of a finding), in the state
// the plan wants, with as many refunds at the provider and net charges,
// every refund create sent under the refund's own key; and no other
// refund.
func (sc Scenario) checkRefund(o Observed) []string {
	rp := sc.Refund
	if rp == nil {
		if len(o.Refunds) > 0 {
			return []string{fmt.Sprintf("%d unexpected refunds", len(o.Refunds))}
		}
		return nil
	}
	if len(o.Refunds) == 0 {
		if rp.OfFinding && !o.Audited {
			return nil // the operator refunds it once the audit found it
		}
		return []string{"no refund"}
	}
	var problems []string
	if len(o.Refunds) > 1 {
		problems = append(problems, fmt.Sprintf("%d refunds, want 1", len(o.Refunds)))
	}
	d := o.Refunds[0]
	r := d.Refund
	if r.State != rp.Want {
		problems = append(problems, fmt.Sprintf("refund %s %s, want %s", r.ID, r.State, rp.Want))
	}
	if n := o.ProviderRefunds[r.ID]; n != rp.Refunds {
		problems = append(problems, fmt.Sprintf("%d refunds at the provider for %s, want %d", n, r.ID, rp.Refunds))
	}
	if o.NetCharges != rp.NetCharges {
		problems = append(problems, fmt.Sprintf("%d net charges at the provider, want %d", o.NetCharges, rp.NetCharges))
	}
	if rp.OfFinding && r.FindingID == 0 {
		problems = append(problems, "the refund names no finding")
	}
	for _, a := range d.Attempts {
		if a.Op == "refund_create" && a.Key != reconcile.RefundKeyFor(r.ID) {
			problems = append(problems, "a refund create was sent with another key: "+a.Key)
		}
	}
	return problems
}

// wants reports whether f is the finding the scenario wants: its kind,
// about the payment its Outside change made or moved, if any.
func (sc Scenario) wants(f reconcile.Finding, o Observed) bool {
	return sc.Finding != "" && f.Kind == sc.Finding && (o.Outside == nil || f.PaymentID == o.Outside.ID)
}

// countTo counts the case's moves to state s.
func countTo(c reconcile.Case, s statemachine.State) int {
	n := 0
	for _, t := range c.Transitions {
		if t.To == s {
			n++
		}
	}
	return n
}
