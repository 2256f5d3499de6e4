package demo

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// Result is one row of the report: one scenario's purchase.
type Result struct {
	Scenario    string   `json:"scenario"`
	PurchaseID  string   `json:"purchase_id"`
	FinalState  string   `json:"final_state"`
	Escalation  string   `json:"escalation,omitempty"`
	Charges     int      `json:"charges_at_provider"`
	Creates     int      `json:"create_calls"`
	Expected    string   `json:"expected"`
	OK          bool     `json:"ok"`
	Problems    []string `json:"problems,omitempty"`
	Timeline    []string `json:"timeline"`
	SimDuration string   `json:"simulated_time"`
	// Refunds are the purchase's refunds, and NetCharges how many of its
	// charges keep money at the provider once they are done.
	Refunds    []RefundResult `json:"refunds,omitempty"`
	NetCharges int            `json:"net_charges_at_provider"`
	// Disputes are the purchase's disputes as payrecon's books hold them,
	// oldest first.
	Disputes []DisputeResult `json:"disputes,omitempty"`
	// RefusedRefund is why payrecon refused the refund a client asked for
	// while the purchase was disputed; "" when none was refused.
	RefusedRefund string `json:"refused_refund,omitempty"`
}

// DisputeResult is one dispute of a scenario's purchase in the report.
type DisputeResult struct {
	ID    string `json:"id"` // the provider's, "du_…"
	State string `json:"state"`
	// Amount is the disputed money, Withdrawn and Reinstated what the
	// provider took from the merchant and gave back (minor units).
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	Withdrawn  int64  `json:"withdrawn"`
	Reinstated int64  `json:"reinstated"`
}

// RefundResult is one refund of a scenario's purchase in the report.
type RefundResult struct {
	ID         string `json:"id"`
	State      string `json:"state"`
	Escalation string `json:"escalation,omitempty"`
	// ProviderRefunds counts the refunds at the provider that returned
	// money for it.
	ProviderRefunds int `json:"refunds_at_provider"`
	// Creates counts the refund create calls sent under its key.
	Creates int `json:"refund_create_calls"`
}

// Report is the outcome of a demo run, what `payrecon demo --json` writes.
type Report struct {
	OK       bool     `json:"ok"`
	Database string   `json:"database"`
	Results  []Result `json:"results"`
	// Audit is the demo's audit from the provider's side; nil when none
	// ran.
	Audit     *Audit `json:"audit,omitempty"`
	RealTime  string `json:"real_time"`
	Simulated string `json:"simulated_time"`
}

// Audit is the audit from the provider's side that the demo runs once its
// scenarios have played out, and the money at risk it shows.
type Audit struct {
	// From and Until bound the window of provider creation times, as
	// offsets from the demo's start ("+00:00:00").
	From  string `json:"from"`
	Until string `json:"until"`
	// Payments is how many payments the provider listed in the window.
	Payments int `json:"payments_listed"`
	// New counts the Findings this run stored; the others were stored
	// earlier by the hourly audit sweep, which runs in the demo too.
	New int `json:"new_findings"`
	// Findings are the findings about the demo's purchases, oldest first.
	Findings []AuditFinding `json:"findings"`
	// Disputes are the disputes of the demo's purchases open at the
	// audit, soonest evidence due first (reconcile.Service.OpenDisputes).
	Disputes []AuditDispute `json:"open_disputes"`
	// AtRisk is the money at risk per currency (reconcile.MoneyAtRisk):
	// what the open Findings and the open Disputes put at risk.
	AtRisk []Money `json:"money_at_risk"`
}

// AuditDispute is a dispute open at the audit as the report shows it,
// with the money it puts at risk: the card network holds it until it
// decides.
type AuditDispute struct {
	ID         string `json:"id"` // the provider's, "du_…"
	PaymentID  string `json:"payment_id"`
	PurchaseID string `json:"purchase_id"`
	Scenario   string `json:"scenario"`
	State      string `json:"state"`
	// Amount (minor units) and Currency are the disputed money.
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// Opened is when payrecon stored it, as an offset from the demo's
	// start.
	Opened string `json:"opened"`
}

// AuditFinding is one finding of the audit as the report shows it, with
// the money it puts at risk.
type AuditFinding struct {
	Kind       string `json:"kind"`
	PaymentID  string `json:"payment_id"`
	PurchaseID string `json:"purchase_id,omitempty"` // "" for an orphan charge
	Scenario   string `json:"scenario,omitempty"`    // the purchase's scenario, if it has one
	// Amount (minor units) and Currency are the provider's payment's: the
	// money at risk.
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// Found is when the finding was stored, as an offset from the demo's
	// start.
	Found string `json:"found"`
}

// Money is an amount in a currency's minor units (reconcile.Money).
type Money = reconcile.Money

// NewAudit is NewAuditWithDisputes with no open dispute: the money at
// risk of the findings alone.
func NewAudit(rep reconcile.AuditReport, findings []reconcile.Finding, results []Result, start time.Time) *Audit {
	return NewAuditWithDisputes(rep, findings, nil, results, start)
}

// NewAuditWithDisputes summarises the demo's audit run rep for the
// report. findings are the store's findings, oldest first
// (reconcile.Service.Findings); it keeps those about the results'
// purchases, and the orphan charges found since start, when the demo
// began: a store the demo shares with earlier runs keeps their findings
// too. disputes are the store's open disputes
// (reconcile.Service.OpenDisputes); it keeps those of the results'
// purchases, for the same reason. The money at risk counts what it
// keeps. Offsets are from start.
func NewAuditWithDisputes(rep reconcile.AuditReport, findings []reconcile.Finding, disputes []reconcile.Dispute,
	results []Result, start time.Time) *Audit {
	scenarioOf := make(map[string]string, len(results))
	for _, r := range results {
		scenarioOf[r.PurchaseID] = r.Scenario
	}
	type key struct {
		payment string
		kind    reconcile.FindingKind
	}
	isNew := make(map[key]bool, len(rep.New))
	for _, f := range rep.New {
		isNew[key{f.PaymentID, f.Kind}] = true
	}
	a := &Audit{
		From: "+" + ClockOffset(rep.Run.From.Sub(start)), Until: "+" + ClockOffset(rep.Run.Until.Sub(start)),
		Payments: rep.Payments, Findings: []AuditFinding{}, Disputes: []AuditDispute{},
	}
	var kept []reconcile.Finding
	for _, f := range findings {
		scenario, ours := scenarioOf[f.PurchaseID]
		if !ours && (f.PurchaseID != "" || f.FoundAt.Before(start)) {
			continue
		}
		if isNew[key{f.PaymentID, f.Kind}] {
			a.New++
		}
		kept = append(kept, f)
		a.Findings = append(a.Findings, AuditFinding{
			Kind: string(f.Kind), PaymentID: f.PaymentID, PurchaseID: f.PurchaseID, Scenario: scenario,
			Amount: f.Amount, Currency: strings.ToLower(f.Currency), Found: "+" + ClockOffset(f.FoundAt.Sub(start)),
		})
	}
	var open []reconcile.Dispute
	for _, d := range disputes {
		scenario, ours := scenarioOf[d.PurchaseID]
		if !ours || !d.Open() {
			continue
		}
		open = append(open, d)
		a.Disputes = append(a.Disputes, AuditDispute{
			ID: d.ProviderDisputeID, PaymentID: d.PaymentID, PurchaseID: d.PurchaseID, Scenario: scenario, State: string(d.State),
			Amount: d.Amount, Currency: strings.ToLower(d.Currency), Opened: "+" + ClockOffset(d.CreatedAt.Sub(start)),
		})
	}
	a.AtRisk = reconcile.MoneyAtRisk(kept, open)
	return a
}

// PrintSummary writes the report as a table, one row per scenario, the
// audit's findings with the money at risk, and a closing verdict.
func (r Report) PrintSummary(out io.Writer) {
	fmt.Fprintf(out, "\nSummary (%s simulated in %s):\n", r.Simulated, r.RealTime)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PURCHASE\tSCENARIO\tFINAL STATE\tCHARGES\tCREATES\tEXPECTED\tRESULT")
	for _, res := range r.Results {
		state := res.FinalState
		if res.Escalation != "" {
			state += " (escalated: " + res.Escalation + ")"
		}
		for _, d := range res.Disputes {
			state += " (dispute " + d.State + ")"
		}
		verdict := "OK"
		if !res.OK {
			verdict = "FAIL: " + strings.Join(res.Problems, "; ")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", res.PurchaseID, res.Scenario, state, res.Charges, res.Creates, res.Expected, verdict)
	}
	w.Flush()
	if r.Audit != nil {
		r.Audit.print(out)
	}
	if r.OK {
		fmt.Fprintln(out, "\nAll scenarios ended as expected: payrecon never charged a purchase twice, never called one failed while its outcome was unknown, "+
			"and put every disagreement with the provider on the operator list.")
	} else {
		fmt.Fprintln(out, "\nSome scenarios did not end as expected (FAIL above).")
	}
}

// print writes the audit's section of the summary: the run, one row per
// finding, one per dispute open then, and the money at risk of both.
func (a *Audit) print(out io.Writer) {
	fmt.Fprintf(out, "\nAudit from the provider's side (payments created %s to %s): %d payments listed, %d findings",
		a.From, a.Until, a.Payments, len(a.Findings))
	if earlier := len(a.Findings) - a.New; earlier > 0 {
		fmt.Fprintf(out, " (%d stored by this run, %d earlier by the hourly audit sweep)", a.New, earlier)
	}
	if len(a.Findings) == 0 {
		fmt.Fprintln(out, ": every payment matches the books.")
	} else {
		fmt.Fprintln(out, ":")
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "FINDING\tPAYMENT\tPURCHASE\tSCENARIO\tAT RISK\tFOUND")
		for _, f := range a.Findings {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Kind, f.PaymentID, dash(f.PurchaseID), dash(f.Scenario),
				Money{Amount: f.Amount, Currency: f.Currency}, f.Found)
		}
		w.Flush()
	}
	if len(a.Disputes) > 0 {
		fmt.Fprintf(out, "Open disputes at the audit (%d), their money held by the card network until it decides:\n", len(a.Disputes))
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "DISPUTE\tPAYMENT\tPURCHASE\tSCENARIO\tSTATE\tAT RISK\tOPENED")
		for _, d := range a.Disputes {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.ID, d.PaymentID, d.PurchaseID, d.Scenario, d.State,
				Money{Amount: d.Amount, Currency: d.Currency}, d.Opened)
		}
		w.Flush()
	}
	if len(a.Findings) == 0 && len(a.Disputes) == 0 {
		return
	}
	total := make([]string, len(a.AtRisk))
	for i, m := range a.AtRisk {
		total[i] = m.String()
	}
	fmt.Fprintf(out, "Money at risk: %s, open disputes included. "+
		"The audit moved no money and no purchase: each finding waits on the operator list.\n", strings.Join(total, ", "))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
