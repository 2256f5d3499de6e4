package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// disputeJSON is the scripted view of a dispute.
type disputeJSON struct {
	DisputeID         string     `json:"dispute_id"`
	ProviderDisputeID string     `json:"provider_dispute_id"`
	PurchaseID        string     `json:"purchase_id"`
	Account           string     `json:"account"` // its purchase's: "platform" or acct_…
	PaymentID         string     `json:"payment_id"`
	Amount            int64      `json:"amount"`
	Currency          string     `json:"currency"`
	Reason            string     `json:"reason,omitempty"`
	State             string     `json:"state"`
	Status            string     `json:"status"`
	Inquiry           bool       `json:"inquiry"`
	EvidenceDueBy     *time.Time `json:"evidence_due_by,omitempty"`
	SecondsLeft       *float64   `json:"evidence_seconds_left,omitempty"`
	Withdrawn         int64      `json:"withdrawn"`
	Reinstated        int64      `json:"reinstated"`
	OpenedAt          time.Time  `json:"opened_at"`
}

func toDisputesJSON(ds []reconcile.Dispute, now time.Time) []disputeJSON {
	out := make([]disputeJSON, 0, len(ds))
	for _, d := range ds {
		j := disputeJSON{
			DisputeID: d.ID, ProviderDisputeID: d.ProviderDisputeID, PurchaseID: d.PurchaseID, Account: reconcile.AccountLabel(d.Account),
			PaymentID: d.PaymentID, Amount: d.Amount, Currency: d.Currency, Reason: d.Reason, State: string(d.State), Status: d.ProviderStatus,
			Inquiry: d.Inquiry, Withdrawn: d.Withdrawn, Reinstated: d.Reinstated, OpenedAt: d.CreatedAt,
		}
		if !d.EvidenceDueBy.IsZero() {
			due := d.EvidenceDueBy
			j.EvidenceDueBy = &due
		}
		if left, ok := reconcile.EvidenceTimeLeft(d, now); ok {
			secs := left.Seconds()
			j.SecondsLeft = &secs
		}
		out = append(out, j)
	}
	return out
}

// evidenceLeft writes the time left to answer d at now for people: "2d
// 03h left", "past due by 5h", or what the dispute waits for instead.
func evidenceLeft(d reconcile.Dispute, now time.Time) string {
	left, ok := reconcile.EvidenceTimeLeft(d, now)
	switch {
	case !ok && d.Open():
		return "waiting for the issuer"
	case !ok:
		return "decided"
	case left < 0:
		return "past due by " + roundedSpan(-left)
	}
	return roundedSpan(left) + " left"
}

// roundedSpan writes a span in days and hours, or hours and minutes
// under a day.
func roundedSpan(d time.Duration) string {
	if d >= 24*time.Hour {
		return fmt.Sprintf("%dd %02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
	}
	return fmt.Sprintf("%dh %02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

// printOpenDisputes prints the open disputes, soonest due first.
func printOpenDisputes(w io.Writer, ds []reconcile.Dispute, now time.Time) error {
	if len(ds) == 0 {
		fmt.Fprintln(w, "no open disputes")
		return nil
	}
	fmt.Fprintf(w, "open disputes (%d, soonest evidence due first; answer each in the provider's dashboard before its due date: payrecon submits no evidence):\n", len(ds))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DISPUTE\tPURCHASE\tACCOUNT\tAMOUNT\tREASON\tSTATUS\tDUE\tTIME LEFT")
	for _, d := range ds {
		due := "-"
		if !d.EvidenceDueBy.IsZero() {
			due = stamp(d.EvidenceDueBy)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.ProviderDisputeID, d.PurchaseID, reconcile.AccountLabel(d.Account), provider.FormatAmount(d.Amount, d.Currency),
			dash(d.Reason), d.ProviderStatus, due, evidenceLeft(d, now))
	}
	return tw.Flush()
}

// printDisputeRecords prints a purchase's disputes with their histories.
func printDisputeRecords(w io.Writer, rs []reconcile.DisputeRecord, now time.Time) {
	fmt.Fprintln(w, "\ndisputes:")
	for _, r := range rs {
		d := r.Dispute
		fmt.Fprintf(w, "  %s (%s)  %s  payment %s  %s  %s (%s)  reason %s  %s",
			d.ProviderDisputeID, d.ID, stamp(d.CreatedAt), d.PaymentID, provider.FormatAmount(d.Amount, d.Currency),
			d.State, d.ProviderStatus, dash(d.Reason), evidenceLeft(d, now))
		if d.Withdrawn > 0 || d.Reinstated > 0 {
			fmt.Fprintf(w, "  withdrawn %s, reinstated %s", provider.FormatAmount(d.Withdrawn, d.Currency), provider.FormatAmount(d.Reinstated, d.Currency))
		}
		fmt.Fprintln(w)
		for _, t := range r.Transitions {
			fmt.Fprintf(w, "    %s  %s → %s  %s by %s  %s\n", stamp(t.At), t.From, t.To, t.Cause, t.Actor, t.Evidence)
		}
	}
}
