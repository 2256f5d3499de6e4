package statemachine_test

import (
	"errors"
	"os"
	"slices"
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

// TestRefundTransitionsAreExactlyTheTable pins the refund machine to the
// list in the design: created → submitted → {succeeded |
// failed | uncertain}, uncertain → reconciling → {succeeded | failed |
// uncertain}.
func TestRefundTransitionsAreExactlyTheTable(t *testing.T) {
	want := []string{
		"created→submitted",
		"submitted→succeeded",
		"submitted→failed",
		"submitted→uncertain",
		"uncertain→reconciling",
		"reconciling→succeeded",
		"reconciling→failed",
		"reconciling→uncertain",
	}
	var got []string
	for _, p := range statemachine.Refund.Transitions() {
		got = append(got, p.String())
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("refund transitions:\n got %v\nwant %v", got, want)
	}
	if got, want := statemachine.Refund.States(), []statemachine.State{
		statemachine.Created, statemachine.Submitted, statemachine.Uncertain,
		statemachine.Reconciling, statemachine.Succeeded, statemachine.Failed,
	}; !slices.Equal(got, want) {
		t.Fatalf("refund states: got %v, want %v", got, want)
	}
	if statemachine.Refund.Name() != "refund" || statemachine.Purchase.Name() != "purchase" {
		t.Fatalf("machine names: %q and %q", statemachine.Purchase.Name(), statemachine.Refund.Name())
	}
}

// TestRefundTransition checks every pair of the refund machine's states,
// self-moves and the purchase's declined included, against its table: an
// allowed move is nil, any other a *TransitionError naming both states
// and the refund machine.
func TestRefundTransition(t *testing.T) {
	allowed := map[statemachine.Pair]bool{}
	for _, p := range statemachine.Refund.Transitions() {
		allowed[p] = true
	}
	states := append(statemachine.Refund.States(), statemachine.Declined)
	for _, from := range states {
		for _, to := range states {
			t.Run(string(from)+"_to_"+string(to), func(t *testing.T) {
				err := statemachine.Refund.Transition(from, to)
				if allowed[statemachine.Pair{From: from, To: to}] {
					if err != nil {
						t.Fatalf("%s→%s: unexpected error %v", from, to, err)
					}
					return
				}
				var te *statemachine.TransitionError
				if !errors.As(err, &te) {
					t.Fatalf("%s→%s: got %v, want *TransitionError", from, to, err)
				}
				if te.Machine != "refund" || te.From != from || te.To != to {
					t.Fatalf("%s→%s: error %+v, want the refund machine's, naming the move", from, to, te)
				}
				msg := err.Error()
				if !strings.Contains(msg, string(from)) || !strings.Contains(msg, string(to)) || !strings.Contains(msg, "refund transition") {
					t.Fatalf("%s→%s: error %q does not name both states and the refund machine", from, to, msg)
				}
			})
		}
	}
}

// TestRefundTransitionReasons: a refund's error says why, judged by the
// refund machine: declined is no refund state, failed is terminal there
// (and unknown to a purchase).
func TestRefundTransitionReasons(t *testing.T) {
	for _, tt := range []struct {
		m        statemachine.Machine
		from, to statemachine.State
		want     string
	}{
		{statemachine.Refund, statemachine.Submitted, statemachine.Declined, `unknown state "declined"`},
		{statemachine.Refund, statemachine.Declined, statemachine.Failed, `unknown state "declined"`},
		{statemachine.Refund, statemachine.Failed, statemachine.Submitted, "failed is terminal"},
		{statemachine.Refund, statemachine.Succeeded, statemachine.Failed, "succeeded is terminal"},
		{statemachine.Refund, statemachine.Created, statemachine.Failed, "not in the table"},
		{statemachine.Purchase, statemachine.Submitted, statemachine.Failed, `unknown state "failed"`},
	} {
		err := tt.m.Transition(tt.from, tt.to)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s.Transition(%q, %q) = %v, want error containing %q", tt.m.Name(), tt.from, tt.to, err, tt.want)
		}
	}
	for _, tt := range []struct {
		s    statemachine.State
		want bool
	}{
		{statemachine.Created, false}, {statemachine.Uncertain, false},
		{statemachine.Succeeded, true}, {statemachine.Failed, true}, {statemachine.Declined, false},
	} {
		if got := statemachine.Refund.Terminal(tt.s); got != tt.want {
			t.Errorf("Refund.Terminal(%s) = %v, want %v", tt.s, got, tt.want)
		}
	}
	if _, err := statemachine.Refund.Parse("declined"); err == nil || !strings.Contains(err.Error(), "refund") {
		t.Errorf(`Refund.Parse("declined") = %v, want an error naming the refund machine`, err)
	}
	if got, err := statemachine.Refund.Parse("failed"); err != nil || got != statemachine.Failed {
		t.Errorf(`Refund.Parse("failed") = %q, %v`, got, err)
	}
}

// TestProtocolRefundDiagramIsCurrent fails when the diagram of the refund
// machine in docs/protocol.md drifts from its table. Regenerate it with
// `go run ./cmd/payrecon statemachine --mermaid --refund`.
func TestProtocolRefundDiagramIsCurrent(t *testing.T) {
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatalf("read docs/protocol.md: %v", err)
	}
	block := "```mermaid\n" + statemachine.Refund.Mermaid() + "```"
	if !strings.Contains(string(doc), block) {
		t.Fatalf("docs/protocol.md does not contain the refund machine's current diagram; regenerate it with\n"+
			"  go run ./cmd/payrecon statemachine --mermaid --refund\nwant:\n%s", block)
	}
	if statemachine.Refund.Mermaid() == statemachine.Mermaid() {
		t.Fatal("the refund machine's diagram is the purchase's")
	}
}

// TestDisputeMachine pins the dispute machine's table: every pair of its
// states, self-moves included, is allowed exactly when listed here.
func TestDisputeMachine(t *testing.T) {
	allowed := map[string]bool{
		"open→evidence_submitted": true, "open→won": true, "open→lost": true, "open→closed": true,
		"evidence_submitted→open": true, "evidence_submitted→won": true,
		"evidence_submitted→lost": true, "evidence_submitted→closed": true,
	}
	m := statemachine.Dispute
	if m.Name() != "dispute" || m.Start() != statemachine.Open {
		t.Fatalf("dispute machine: name %q, start %q", m.Name(), m.Start())
	}
	for _, from := range m.States() {
		for _, to := range m.States() {
			pair := statemachine.Pair{From: from, To: to}.String()
			err := m.Transition(from, to)
			if allowed[pair] != (err == nil) {
				t.Errorf("Dispute.Transition(%s): err %v, allowed %v", pair, err, allowed[pair])
			}
			if err != nil && !strings.Contains(err.Error(), "dispute transition") {
				t.Errorf("Dispute.Transition(%s): %q does not name the dispute machine", pair, err)
			}
		}
	}
	if got := len(m.Transitions()); got != len(allowed) {
		t.Errorf("%d dispute transitions, want %d", got, len(allowed))
	}
	for _, s := range []statemachine.State{statemachine.Won, statemachine.Lost, statemachine.Closed} {
		if !m.Terminal(s) {
			t.Errorf("%s is not terminal", s)
		}
	}
	if m.Terminal(statemachine.Open) || m.Terminal(statemachine.EvidenceSubmitted) {
		t.Error("an undecided dispute state is terminal")
	}
	if !strings.HasPrefix(m.Mermaid(), "stateDiagram-v2\n    [*] --> open\n") {
		t.Errorf("the dispute diagram does not start at open:\n%s", m.Mermaid())
	}
}

// TestProtocolDisputeDiagramIsCurrent checks docs/protocol.md carries the
// dispute machine's diagram as
// `go run ./cmd/payrecon statemachine --mermaid --dispute` prints it.
func TestProtocolDisputeDiagramIsCurrent(t *testing.T) {
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatalf("read docs/protocol.md: %v", err)
	}
	block := "```mermaid\n" + statemachine.Dispute.Mermaid() + "```"
	if !strings.Contains(string(doc), block) {
		t.Fatalf("docs/protocol.md does not contain the dispute machine's current diagram; regenerate it with\n"+
			"  go run ./cmd/payrecon statemachine --mermaid --dispute\nwant:\n%s", block)
	}
}
