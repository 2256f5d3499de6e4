package statemachine_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/payrecon/payrecon/statemachine"
)

// TestTransitionsAreExactlyTheTable pins the table to the list in the
// design: any change to the allowed moves must change this test too.
func TestTransitionsAreExactlyTheTable(t *testing.T) {
	want := []string{
		"created→submitted",
		"submitted→succeeded",
		"submitted→declined",
		"submitted→uncertain",
		"uncertain→reconciling",
		"reconciling→succeeded",
		"reconciling→declined",
		"reconciling→uncertain",
	}
	var got []string
	for _, p := range statemachine.Transitions() {
		got = append(got, p.String())
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("transitions:\n got %v\nwant %v", got, want)
	}
}

func TestTransition(t *testing.T) {
	allowed := map[statemachine.Pair]bool{}
	for _, p := range statemachine.Transitions() {
		allowed[p] = true
	}
	// Every pair of states, including self-moves, is checked against the table.
	for _, from := range statemachine.States {
		for _, to := range statemachine.States {
			err := statemachine.Transition(from, to)
			if allowed[statemachine.Pair{From: from, To: to}] {
				if err != nil {
					t.Errorf("%s→%s: unexpected error %v", from, to, err)
				}
				continue
			}
			var te *statemachine.TransitionError
			if !errors.As(err, &te) {
				t.Fatalf("%s→%s: got %v, want *TransitionError", from, to, err)
			}
			if msg := err.Error(); !strings.Contains(msg, string(from)) || !strings.Contains(msg, string(to)) {
				t.Errorf("%s→%s: error %q does not name both states", from, to, msg)
			}
		}
	}
}

func TestTransitionUnknownStates(t *testing.T) {
	tests := []struct {
		from, to statemachine.State
		want     string
	}{
		{"paid", statemachine.Succeeded, `unknown state "paid"`},
		{statemachine.Created, "charged", `unknown state "charged"`},
		{statemachine.Succeeded, statemachine.Uncertain, "succeeded is terminal"},
		{statemachine.Created, statemachine.Succeeded, "not in the table"},
	}
	for _, tt := range tests {
		err := statemachine.Transition(tt.from, tt.to)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Transition(%q, %q) = %v, want error containing %q", tt.from, tt.to, err, tt.want)
		}
	}
}

func TestTerminal(t *testing.T) {
	tests := []struct {
		state statemachine.State
		want  bool
	}{
		{statemachine.Created, false},
		{statemachine.Submitted, false},
		{statemachine.Uncertain, false},
		{statemachine.Reconciling, false},
		{statemachine.Succeeded, true},
		{statemachine.Declined, true},
		{"bogus", false},
	}
	for _, tt := range tests {
		if got := tt.state.Terminal(); got != tt.want {
			t.Errorf("%s.Terminal() = %v, want %v", tt.state, got, tt.want)
		}
	}
}

func TestParse(t *testing.T) {
	for _, s := range statemachine.States {
		got, err := statemachine.Parse(string(s))
		if err != nil || got != s {
			t.Errorf("Parse(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := statemachine.Parse("failed"); err == nil {
		t.Error(`Parse("failed") succeeded; "failed" is not a state`)
	}
}

// TestReadmeDiagramIsCurrent fails when the README's diagram drifts from
// the table. Regenerate it with `go run ./cmd/payrecon statemachine --mermaid`.
func TestReadmeDiagramIsCurrent(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatalf("read README: %v", err)
	}
	block := "```mermaid\n" + statemachine.Mermaid() + "```"
	if !strings.Contains(string(readme), block) {
		t.Fatalf("README.md does not contain the current diagram; regenerate it with\n"+
			"  go run ./cmd/payrecon statemachine --mermaid\nwant:\n%s", block)
	}
}
