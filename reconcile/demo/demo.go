// Package demo is `payrecon demo`'s tour: the scenarios it plays, one
// purchase for each failure of the seed lesson, the checks that each
// purchase ended as the lesson demands, the timeline it prints for each,
// and the report and summary it ends with.
//
// The package does no I/O of its own: cmd/payrecon runs the in-process
// stack (the fake Stripe server, the worker, the webhook endpoint), moves
// the simulated clock, and hands this package what it observed.
package demo

import (
	"fmt"
	"slices"

	"github.com/payrecon/payrecon/fakeprovider"
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
	Expect  string // the expected outcome, in words
}

// Scenarios returns the failures of the seed lesson, one purchase each,
// in the order the demo plays and reports them.
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
		{Name: "success after a decline", Faults: []fakeprovider.Fault{fakeprovider.DeclineThenSucceed},
			Want: statemachine.Declined, Escalation: reconcile.EscalationContradiction, Charges: 1,
			Webhook: reconcile.EventContradiction, Expect: "declined, contradiction escalated, 1 charge"},
	}
}

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
}

// Check returns what is wrong with the scenario's purchase as observed,
// or nothing when it ended as expected: the state, the escalation, the
// charges and the webhook outcome the scenario wants, and never a create
// with a key other than the purchase's own.
func (sc Scenario) Check(o Observed) []string {
	var problems []string
	c := o.Case
	p := c.Purchase
	if p.State != sc.Want {
		problems = append(problems, fmt.Sprintf("state %s, want %s", p.State, sc.Want))
	}
	if p.EscalationReason != sc.Escalation {
		problems = append(problems, fmt.Sprintf("escalation %q, want %q", p.EscalationReason, sc.Escalation))
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
	// Never a second key: every create carried the purchase's own key.
	for _, a := range c.Attempts {
		if a.Op == "create" && a.Key != reconcile.ProviderKeyFor(p.ID) {
			problems = append(problems, "a create was sent with another key: "+a.Key)
		}
	}
	return problems
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
