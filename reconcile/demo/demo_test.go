package demo_test

import (
	"slices"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/demo"
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
			name: "contradiction as expected", scenario: "success after a decline",
			observe: func(o *demo.Observed) {
				*o = settled(statemachine.Declined)
				o.Case.Purchase.EscalationReason = reconcile.EscalationContradiction
				o.Case.Events = append(o.Case.Events, reconcile.InboxEvent{Outcome: reconcile.EventContradiction})
			},
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
			name: "every problem, in order", scenario: "success after a decline",
			observe: func(o *demo.Observed) {
				o.Charges = 3
				o.Case.Attempts[1].Key = "payrecon-other"
			},
			want: []string{
				"state succeeded, want declined",
				`escalation "", want "contradiction"`,
				"3 charges at the provider, want 1",
				"no webhook with outcome contradiction",
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
	}
	if len(names) != 10 {
		t.Errorf("%d scenarios, want the 10 of the seed lesson", len(names))
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
	want := []string{
		"+00:00:00  created     → submitted    (submit)",
		"+00:00:00  provider create → declined [requires_payment_method]",
		"+00:00:01  webhook  payment_intent.payment_failed → applied",
		"+00:00:02  submitted   → declined     (submit_response)",
		"+01:00:00  provider status → succeeded (not applied)",
		"+01:00:00  provider search → not_found",
		"+03:00:00  webhook  payment_intent.succeeded → contradiction",
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
