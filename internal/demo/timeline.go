package demo

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// Timeline renders a case as time-ordered lines, each stamped with its
// offset from start: transitions with their cause, provider calls, webhook
// outcomes, its disputes (opened, moved, decided), the audit's findings with the
// money they put at risk, and the escalation. Entries at the same time
// keep that order, and within a kind, the case's.
func Timeline(c reconcile.Case, start time.Time) []string {
	// The kinds of entries, in their order at equal times.
	const (
		transition = iota
		attempt
		event
		dispute
		finding
		escalation
	)
	type entry struct {
		at   time.Time
		kind int
		text string
	}
	var es []entry
	for _, t := range c.Transitions {
		es = append(es, entry{t.At, transition, fmt.Sprintf("%-11s → %-11s  (%s)", t.From, t.To, t.Cause)})
	}
	for _, a := range c.Attempts {
		text := fmt.Sprintf("provider %-6s → %s", a.Op, a.Outcome)
		if a.Status != "" {
			text += " [" + a.Status + "]"
		}
		if !a.Applied {
			text += " (not applied)"
		}
		es = append(es, entry{a.At, attempt, text})
	}
	for _, ev := range c.Events {
		es = append(es, entry{ev.ReceivedAt, event, fmt.Sprintf("webhook  %s → %s", ev.Type, ev.OutcomeText())})
	}
	for _, d := range c.Disputes {
		for _, en := range disputeEntries(d, start) {
			es = append(es, entry{en.at, dispute, en.text})
		}
	}
	for _, f := range c.Findings {
		es = append(es, entry{f.FoundAt, finding, fmt.Sprintf("audit    %s: payment %s, %s at risk",
			f.Kind, f.PaymentID, Money{Amount: f.Amount, Currency: f.Currency})})
	}
	if c.Purchase.Escalated() {
		es = append(es, entry{c.Purchase.EscalatedAt, escalation, "escalated to the operators: " + string(c.Purchase.EscalationReason)})
	}
	// Stable: entries of one kind at one time keep the case's order.
	slices.SortStableFunc(es, func(a, b entry) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.kind - b.kind
	})
	lines := make([]string, len(es))
	for i, en := range es {
		lines[i] = "+" + ClockOffset(en.at.Sub(start)) + "  " + en.text
	}
	return lines
}

// timed is a line of a timeline and its time.
type timed struct {
	at   time.Time
	text string
}

// disputeEntries renders dispute record r: its opening, when payrecon
// stored it, with its kind, reason, money and evidence due date (an
// offset from start), then each move with its cause, a decision with
// the money it withdrew for good or reinstated.
func disputeEntries(r reconcile.DisputeRecord, start time.Time) []timed {
	d := r.Dispute
	kind := "chargeback"
	if d.Inquiry {
		kind = "inquiry"
	}
	what := []string{kind}
	if d.Reason != "" {
		what = append(what, d.Reason)
	}
	what = append(what, provider.FormatAmount(d.Amount, d.Currency))
	if !d.EvidenceDueBy.IsZero() {
		what = append(what, "evidence due +"+ClockOffset(d.EvidenceDueBy.Sub(start)))
	}
	out := []timed{{d.CreatedAt, fmt.Sprintf("dispute  %s opened (%s)", d.ProviderDisputeID, strings.Join(what, ", "))}}
	for _, t := range r.Transitions {
		text := fmt.Sprintf("dispute  %s %s → %s (%s)", d.ProviderDisputeID, t.From, t.To, t.Cause)
		switch t.To {
		case statemachine.Lost:
			text = fmt.Sprintf("dispute  %s lost (%s): %s withdrawn for good", d.ProviderDisputeID, t.Cause,
				provider.FormatAmount(d.Withdrawn-d.Reinstated, d.Currency))
		case statemachine.Won:
			text = fmt.Sprintf("dispute  %s won (%s): %s reinstated", d.ProviderDisputeID, t.Cause, provider.FormatAmount(d.Reinstated, d.Currency))
		case statemachine.Closed:
			text = fmt.Sprintf("dispute  %s closed (%s)", d.ProviderDisputeID, t.Cause)
		}
		out = append(out, timed{t.At, text})
	}
	return out
}

// RefundTimeline renders a purchase's refunds as time-ordered lines, as
// Timeline renders its case: each refund's transitions and provider
// calls, and its escalation.
func RefundTimeline(refunds []reconcile.RefundDetail, start time.Time) []string {
	type entry struct {
		at   time.Time
		text string
	}
	var es []entry
	for _, d := range refunds {
		r := d.Refund
		for _, t := range d.Transitions {
			es = append(es, entry{t.At, fmt.Sprintf("refund %s  %-11s → %-11s  (%s)", r.ID, t.From, t.To, t.Cause)})
		}
		for _, a := range d.Attempts {
			text := fmt.Sprintf("refund %s  provider %s → %s", r.ID, a.Op, a.Outcome)
			if a.Status != "" {
				text += " [" + a.Status + "]"
			}
			if !a.Applied {
				text += " (not applied)"
			}
			es = append(es, entry{a.At, text})
		}
		if r.Escalated() {
			es = append(es, entry{r.EscalatedAt, fmt.Sprintf("refund %s  escalated to the operators: %s", r.ID, r.EscalationReason)})
		}
	}
	slices.SortStableFunc(es, func(a, b entry) int { return a.at.Compare(b.at) })
	lines := make([]string, len(es))
	for i, en := range es {
		lines[i] = "+" + ClockOffset(en.at.Sub(start)) + "  " + en.text
	}
	return lines
}

// ClockOffset formats d as hh:mm:ss, rounded to the second; hours go past
// 24, and a negative d reads as 00:00:00.
func ClockOffset(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("%02d:%02d:%02d", int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60)
}
