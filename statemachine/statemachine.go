// Package statemachine defines the states of payrecon's processes, a
// purchase (a charge), a refund and a dispute, and the only moves allowed
// between them.
//
// It is pure: no I/O, no clock, standard library only. The same tables are
// loaded into the database (see package migrations), so that no SQL path can
// write a move this package refuses.
package statemachine

import (
	"fmt"
	"strings"
)

// State is the state of one purchase or one refund.
type State string

// The states of a purchase. Submitted means an attempt was sent, not that
// money moved; uncertain means the outcome is unknown and must be
// reconciled, never that the charge failed.
const (
	Created     State = "created"
	Submitted   State = "submitted"
	Uncertain   State = "uncertain"
	Reconciling State = "reconciling"
	Succeeded   State = "succeeded"
	Declined    State = "declined"
)

// Failed is the refund's final negative state: the provider refused or
// canceled the refund, and no money went back. A refund shares every other
// state with a purchase.
const Failed State = "failed"

// The states of a dispute: a cardholder's challenge of a succeeded
// payment, opened by the card network, never by payrecon. Open means the
// merchant may still answer it (an inquiry, or a chargeback whose money
// may be withdrawn); evidence submitted means it waits for the issuer's
// decision; won, lost and closed (an inquiry closed with no chargeback, or
// a dispute prevented) are final. A dispute never moves its purchase.
const (
	Open              State = "open"
	EvidenceSubmitted State = "evidence_submitted"
	Won               State = "won"
	Lost              State = "lost"
	Closed            State = "closed"
)

// States lists every state of a purchase in lifecycle order.
var States = []State{Created, Submitted, Uncertain, Reconciling, Succeeded, Declined}

// Pair is one move from a state to another.
type Pair struct {
	From, To State
}

func (p Pair) String() string { return string(p.From) + "→" + string(p.To) }

// Machine is one process's table of allowed moves. Its zero value allows
// nothing; use Purchase or Refund.
type Machine struct {
	name   string
	start  State
	states []State
	table  map[State][]State
}

// Purchase is the machine of a purchase (a charge):
// created → submitted → {succeeded | declined | uncertain},
// uncertain → reconciling → {succeeded | declined | uncertain}.
var Purchase = Machine{
	name:   "purchase",
	start:  Created,
	states: States,
	table: map[State][]State{
		Created:     {Submitted},
		Submitted:   {Succeeded, Declined, Uncertain},
		Uncertain:   {Reconciling},
		Reconciling: {Succeeded, Declined, Uncertain},
		Succeeded:   nil,
		Declined:    nil,
	},
}

// Refund is the machine of a refund, its own process with the same
// shape as a purchase's: created → submitted → {succeeded | failed |
// uncertain}, uncertain → reconciling → {succeeded | failed | uncertain}.
var Refund = Machine{
	name:   "refund",
	start:  Created,
	states: []State{Created, Submitted, Uncertain, Reconciling, Succeeded, Failed},
	table: map[State][]State{
		Created:     {Submitted},
		Submitted:   {Succeeded, Failed, Uncertain},
		Uncertain:   {Reconciling},
		Reconciling: {Succeeded, Failed, Uncertain},
		Succeeded:   nil,
		Failed:      nil,
	},
}

// Dispute is the machine of a dispute: open → evidence submitted →
// {won | lost | closed}, and open → {won | lost | closed} directly (the
// merchant may not answer, or the provider may decide at once). Evidence
// submitted → open is an inquiry, answered, that the issuer escalated to
// a chargeback, which needs an answer of its own.
var Dispute = Machine{
	name:   "dispute",
	start:  Open,
	states: []State{Open, EvidenceSubmitted, Won, Lost, Closed},
	table: map[State][]State{
		Open:              {EvidenceSubmitted, Won, Lost, Closed},
		EvidenceSubmitted: {Open, Won, Lost, Closed},
		Won:               nil,
		Lost:              nil,
		Closed:            nil,
	},
}

// Name is the machine's name: "purchase", "refund" or "dispute".
func (m Machine) Name() string { return m.name }

// Start is the state every process of the machine begins in: created for
// a purchase or a refund, open for a dispute.
func (m Machine) Start() State { return m.start }

// States lists the machine's states in lifecycle order. The slice is a
// fresh copy.
func (m Machine) States() []State { return append([]State(nil), m.states...) }

// Transitions returns every allowed move, grouped by source state in
// lifecycle order, targets in table order. The slice is a fresh copy.
func (m Machine) Transitions() []Pair {
	var out []Pair
	for _, from := range m.states {
		for _, to := range m.table[from] {
			out = append(out, Pair{from, to})
		}
	}
	return out
}

// Valid reports whether s is one of the machine's states.
func (m Machine) Valid(s State) bool {
	_, ok := m.table[s]
	return ok
}

// Terminal reports whether s is the machine's and no move leaves it.
func (m Machine) Terminal(s State) bool { return m.Valid(s) && len(m.table[s]) == 0 }

// Parse returns the machine's state named by s, or an error naming s if
// the machine does not know it.
func (m Machine) Parse(s string) (State, error) {
	st := State(s)
	if !m.Valid(st) {
		return "", fmt.Errorf("statemachine: unknown %s state %q", m.name, s)
	}
	return st, nil
}

// Transition returns nil if the move from → to is allowed, and a
// *TransitionError naming both states otherwise. Staying in the same state
// is not a transition and is refused too.
func (m Machine) Transition(from, to State) error {
	for _, t := range m.table[from] {
		if t == to {
			return nil
		}
	}
	return &TransitionError{Machine: m.name, From: from, To: to, fromValid: m.Valid(from), toValid: m.Valid(to), fromTerminal: m.Terminal(from)}
}

// Mermaid renders the table as a Mermaid state diagram. The README carries
// a copy of the purchase's, docs/protocol.md of the refund's; a test fails
// when a copy drifts.
func (m Machine) Mermaid() string {
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	fmt.Fprintf(&b, "    [*] --> %s\n", m.start)
	for _, p := range m.Transitions() {
		fmt.Fprintf(&b, "    %s --> %s\n", p.From, p.To)
	}
	for _, s := range m.states {
		if m.Terminal(s) {
			fmt.Fprintf(&b, "    %s --> [*]\n", s)
		}
	}
	return b.String()
}

// Transitions returns every move the purchase machine allows (see
// Machine.Transitions).
func Transitions() []Pair { return Purchase.Transitions() }

// Valid reports whether s is one of a purchase's states.
func (s State) Valid() bool { return Purchase.Valid(s) }

// Terminal reports whether no move leaves s in a purchase's machine.
// Succeeded and declined are terminal.
func (s State) Terminal() bool { return Purchase.Terminal(s) }

// Parse returns the purchase state named by s, or an error naming s if it
// is unknown.
func Parse(s string) (State, error) {
	st := State(s)
	if !st.Valid() {
		return "", fmt.Errorf("statemachine: unknown state %q", s)
	}
	return st, nil
}

// TransitionError reports a move the table does not allow. It names both
// states.
type TransitionError struct {
	// Machine is the machine that refused the move: "purchase", "refund"
	// or "dispute"; empty means purchase.
	Machine  string
	From, To State

	fromValid, toValid, fromTerminal bool
}

func (e *TransitionError) Error() string {
	fromValid, toValid, fromTerminal := e.fromValid, e.toValid, e.fromTerminal
	if e.Machine == "" || e.Machine == Purchase.name {
		// Built by hand (or by the purchase machine): judge it by the
		// purchase table.
		fromValid, toValid, fromTerminal = Purchase.Valid(e.From), Purchase.Valid(e.To), Purchase.Terminal(e.From)
	}
	what := "transition"
	if e.Machine == Refund.name || e.Machine == Dispute.name {
		what = e.Machine + " transition"
	}
	switch {
	case !fromValid:
		return fmt.Sprintf("statemachine: %s %s → %s refused: unknown state %q", what, e.From, e.To, e.From)
	case !toValid:
		return fmt.Sprintf("statemachine: %s %s → %s refused: unknown state %q", what, e.From, e.To, e.To)
	case fromTerminal:
		return fmt.Sprintf("statemachine: %s %s → %s refused: %s is terminal", what, e.From, e.To, e.From)
	default:
		return fmt.Sprintf("statemachine: %s %s → %s refused: not in the table", what, e.From, e.To)
	}
}

// Transition returns nil if the purchase machine allows from → to, and a
// *TransitionError naming both states otherwise.
func Transition(from, to State) error { return Purchase.Transition(from, to) }

// Mermaid renders the purchase machine as a Mermaid state diagram (see
// Machine.Mermaid).
func Mermaid() string { return Purchase.Mermaid() }
