package http

import (
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// opsDisputeRow is a dispute as the ops pages show it.
type opsDisputeRow struct {
	ID                string // payrecon's
	ProviderDisputeID string
	PurchaseID        string
	Account           string // its purchase's: "platform" or acct_…
	PaymentID         string
	Amount            string
	Reason            string
	State             string
	Status            string
	Inquiry           bool
	EvidenceDueBy     time.Time
	// TimeLeft is the time left to answer with evidence, "" when the
	// dispute waits for no answer; PastDue when the due date is past and
	// Soon within 48 hours, as the alert warns.
	TimeLeft    string
	PastDue     bool
	Soon        bool
	OpenedAt    time.Time
	Withdrawn   string
	Reinstated  string
	Transitions []reconcile.TransitionRecord
}

func opsDisputeRowOf(d reconcile.Dispute, now time.Time) opsDisputeRow {
	row := opsDisputeRow{
		ID: d.ID, ProviderDisputeID: d.ProviderDisputeID, PurchaseID: d.PurchaseID, Account: reconcile.AccountLabel(d.Account),
		PaymentID: d.PaymentID, Amount: provider.FormatAmount(d.Amount, d.Currency), Reason: d.Reason, State: string(d.State),
		Status: d.ProviderStatus, Inquiry: d.Inquiry, EvidenceDueBy: d.EvidenceDueBy, OpenedAt: d.CreatedAt,
	}
	if d.Withdrawn > 0 || d.Reinstated > 0 {
		row.Withdrawn = provider.FormatAmount(d.Withdrawn, d.Currency)
		row.Reinstated = provider.FormatAmount(d.Reinstated, d.Currency)
	}
	if left, ok := reconcile.EvidenceTimeLeft(d, now); ok {
		row.PastDue, row.Soon = left < 0, left >= 0 && left < 48*time.Hour
		if row.PastDue {
			row.TimeLeft = "past due by " + opsAge(-left)
		} else {
			row.TimeLeft = opsAge(left) + " left"
		}
	}
	return row
}

// opsDisputeJSON is a dispute in the ops JSON views.
type opsDisputeJSON struct {
	DisputeID         string                   `json:"dispute_id"`
	ProviderDisputeID string                   `json:"provider_dispute_id"`
	PurchaseID        string                   `json:"purchase_id"`
	Account           string                   `json:"account"` // its purchase's: "platform" or acct_…
	PaymentID         string                   `json:"payment_id"`
	Amount            int64                    `json:"amount"`
	Currency          string                   `json:"currency"`
	Reason            string                   `json:"reason,omitempty"`
	State             string                   `json:"state"`
	Status            string                   `json:"status"`
	Inquiry           bool                     `json:"inquiry"`
	EvidenceDueBy     *time.Time               `json:"evidence_due_by,omitempty"`
	SecondsLeft       *float64                 `json:"evidence_seconds_left,omitempty"`
	Withdrawn         int64                    `json:"withdrawn"`
	Reinstated        int64                    `json:"reinstated"`
	OpenedAt          time.Time                `json:"opened_at"`
	Transitions       []opsDisputeTransitionJS `json:"transitions,omitempty"`
}

// opsDisputeTransitionJS is one move of a dispute's history.
type opsDisputeTransitionJS struct {
	From     string    `json:"from"`
	To       string    `json:"to"`
	Cause    string    `json:"cause"`
	Actor    string    `json:"actor"`
	Evidence string    `json:"evidence"`
	At       time.Time `json:"at"`
}

func opsDisputeToJSON(d reconcile.Dispute, ts []reconcile.TransitionRecord, now time.Time) opsDisputeJSON {
	j := opsDisputeJSON{
		DisputeID: d.ID, ProviderDisputeID: d.ProviderDisputeID, PurchaseID: d.PurchaseID, Account: reconcile.AccountLabel(d.Account),
		PaymentID: d.PaymentID, Amount: d.Amount, Currency: d.Currency, Reason: d.Reason, State: string(d.State), Status: d.ProviderStatus,
		Inquiry: d.Inquiry, EvidenceDueBy: opsTimePtr(d.EvidenceDueBy), Withdrawn: d.Withdrawn, Reinstated: d.Reinstated,
		OpenedAt: d.CreatedAt,
	}
	if left, ok := reconcile.EvidenceTimeLeft(d, now); ok {
		secs := left.Seconds()
		j.SecondsLeft = &secs
	}
	for _, t := range ts {
		j.Transitions = append(j.Transitions, opsDisputeTransitionJS{
			From: string(t.From), To: string(t.To), Cause: string(t.Cause), Actor: t.Actor, Evidence: t.Evidence, At: t.At,
		})
	}
	return j
}

func opsOpenDisputesJSON(ds []reconcile.Dispute, now time.Time) []opsDisputeJSON {
	out := make([]opsDisputeJSON, 0, len(ds))
	for _, d := range ds {
		out = append(out, opsDisputeToJSON(d, nil, now))
	}
	return out
}
