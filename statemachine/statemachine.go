// Package statemachine defines the states of a purchase and the only moves
// allowed between them.
//
// It is pure: no I/O, no clock, standard library only. The same table is
// loaded into the database (see package migrations), so that no SQL path can
// write a move this package refuses.
package statemachine

import (
	"fmt"
	"strings"
)

// State is the state of one purchase.
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

// States lists every state in lifecycle order.
var States = []State{Created, Submitted, Uncertain, Reconciling, Succeeded, Declined}

// Pair is one move from a state to another.
type Pair struct {
	From, To State
}

func (p Pair) String() string { return string(p.From) + "→" + string(p.To) }

// table is the single source of truth for allowed moves.
var table = map[State][]State{
	Created:     {Submitted},
	Submitted:   {Succeeded, Declined, Uncertain},
	Uncertain:   {Reconciling},
	Reconciling: {Succeeded, Declined, Uncertain},
	Succeeded:   nil,
	Declined:    nil,
}

// Transitions returns every allowed move, grouped by source state in
// lifecycle order, targets in table order. The slice is a fresh copy.
func Transitions() []Pair {
	var out []Pair
	for _, from := range States {
		for _, to := range table[from] {
			out = append(out, Pair{from, to})
		}
	}
	return out
}

// Valid reports whether s is one of the known states.
func (s State) Valid() bool {
	_, ok := table[s]
	return ok
}

// Terminal reports whether no move leaves s. Succeeded and declined are
// terminal.
func (s State) Terminal() bool { return s.Valid() && len(table[s]) == 0 }

// Parse returns the state named by s, or an error naming s if it is unknown.
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
	From, To State
}

func (e *TransitionError) Error() string {
	switch {
	case !e.From.Valid():
		return fmt.Sprintf("statemachine: transition %s → %s refused: unknown state %q", e.From, e.To, e.From)
	case !e.To.Valid():
		return fmt.Sprintf("statemachine: transition %s → %s refused: unknown state %q", e.From, e.To, e.To)
	case e.From.Terminal():
		return fmt.Sprintf("statemachine: transition %s → %s refused: %s is terminal", e.From, e.To, e.From)
	default:
		return fmt.Sprintf("statemachine: transition %s → %s refused: not in the table", e.From, e.To)
	}
}

// Transition returns nil if the move from → to is allowed, and a
// *TransitionError naming both states otherwise. Staying in the same state
// is not a transition and is refused too.
func Transition(from, to State) error {
	for _, t := range table[from] {
		if t == to {
			return nil
		}
	}
	return &TransitionError{From: from, To: to}
}

// Mermaid renders the table as a Mermaid state diagram. The README carries
// a copy; a test fails when the copy drifts.
func Mermaid() string {
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	fmt.Fprintf(&b, "    [*] --> %s\n", Created)
	for _, p := range Transitions() {
		fmt.Fprintf(&b, "    %s --> %s\n", p.From, p.To)
	}
	for _, s := range States {
		if s.Terminal() {
			fmt.Fprintf(&b, "    %s --> [*]\n", s)
		}
	}
	return b.String()
}
