package demo

import (
	"fmt"
	"slices"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// Timeline renders a case as time-ordered lines, each stamped with its
// offset from start: transitions with their cause, provider calls, webhook
// outcomes, the audit's findings with the money they put at risk, and the
// escalation. Entries at the same time keep that order, and within a
// kind, the case's.
func Timeline(c reconcile.Case, start time.Time) []string {
	// The kinds of entries, in their order at equal times.
	const (
		transition = iota
		attempt
		event
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
