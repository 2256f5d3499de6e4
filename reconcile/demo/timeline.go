package demo

import (
	"fmt"
	"slices"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// Timeline renders a case as time-ordered lines, each stamped with its
// offset from start: transitions with their cause, provider calls, webhook
// outcomes, and the escalation. Entries at the same time keep that order,
// and within a kind, the case's.
func Timeline(c reconcile.Case, start time.Time) []string {
	type entry struct {
		at   time.Time
		seq  int
		text string
	}
	var es []entry
	for i, t := range c.Transitions {
		es = append(es, entry{t.At, i, fmt.Sprintf("%-11s → %-11s  (%s)", t.From, t.To, t.Cause)})
	}
	for i, a := range c.Attempts {
		text := fmt.Sprintf("provider %-6s → %s", a.Op, a.Outcome)
		if a.Status != "" {
			text += " [" + a.Status + "]"
		}
		if !a.Applied {
			text += " (not applied)"
		}
		es = append(es, entry{a.At, 1000 + i, text})
	}
	for i, ev := range c.Events {
		es = append(es, entry{ev.ReceivedAt, 2000 + i, fmt.Sprintf("webhook  %s → %s", ev.Type, ev.Outcome)})
	}
	if c.Purchase.Escalated() {
		es = append(es, entry{c.Purchase.EscalatedAt, 3000, "escalated to the operators: " + string(c.Purchase.EscalationReason)})
	}
	slices.SortStableFunc(es, func(a, b entry) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.seq - b.seq
	})
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
