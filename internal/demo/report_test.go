package demo_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/demo"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

func report() demo.Report {
	return demo.Report{
		OK: false, Database: "sqlite:/tmp/d/payrecon.db", RealTime: "4.1s", Simulated: "02:37:15",
		Results: []demo.Result{
			{Scenario: "clean success", PurchaseID: "pur_1", FinalState: "succeeded", Charges: 1, Creates: 1,
				Expected: "succeeded, 1 charge", OK: true, Timeline: []string{"+00:00:00  a"}, SimDuration: "02:37:15"},
			{Scenario: "success after a decline", PurchaseID: "pur_22", FinalState: "declined", Escalation: "contradiction",
				Charges: 2, Creates: 1, Expected: "declined, contradiction escalated, 1 charge",
				Problems: []string{"2 charges at the provider, want 1", "no webhook with outcome contradiction"},
				Timeline: []string{"+00:00:00  a", "+00:00:15  b"}, SimDuration: "02:37:15"},
			{Scenario: "disputed and lost", PurchaseID: "pur_3", FinalState: "succeeded", Charges: 1, Creates: 1,
				Expected: "succeeded; charged back, the dispute lost", OK: true, Timeline: []string{"+00:00:00  c"}, SimDuration: "02:37:15",
				NetCharges: 1, Disputes: []demo.DisputeResult{{ID: "du_1", State: "lost", Amount: 1000, Currency: "usd", Withdrawn: 1000}},
				RefusedRefund: "the payment is disputed"},
		},
		Audit: &demo.Audit{
			From: "+00:00:00", Until: "+02:37:16", Payments: 3, New: 1,
			Findings: []demo.AuditFinding{
				{Kind: "state_disagreement", PaymentID: "pi_7", PurchaseID: "pur_22", Scenario: "success after a decline",
					Amount: 1200, Currency: "usd", Found: "+01:00:00"},
				{Kind: "orphan_charge", PaymentID: "pi_9", Amount: 500, Currency: "eur", Found: "+02:37:15"},
			},
			Disputes: []demo.AuditDispute{
				{ID: "du_1", PaymentID: "pi_3", PurchaseID: "pur_3", Scenario: "disputed and lost", State: "evidence_submitted",
					Amount: 1000, Currency: "usd", Opened: "+00:00:15"},
			},
			AtRisk: []demo.Money{{Amount: 500, Currency: "eur"}, {Amount: 2200, Currency: "usd"}},
		},
	}
}

// TestReportJSON pins the format `payrecon demo --json` writes.
func TestReportJSON(t *testing.T) {
	got, err := json.Marshal(report())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"ok":false,"database":"sqlite:/tmp/d/payrecon.db","results":[` +
		`{"scenario":"clean success","purchase_id":"pur_1","final_state":"succeeded","charges_at_provider":1,"create_calls":1,` +
		`"expected":"succeeded, 1 charge","ok":true,"timeline":["+00:00:00  a"],"simulated_time":"02:37:15","net_charges_at_provider":0},` +
		`{"scenario":"success after a decline","purchase_id":"pur_22","final_state":"declined","escalation":"contradiction",` +
		`"charges_at_provider":2,"create_calls":1,"expected":"declined, contradiction escalated, 1 charge","ok":false,` +
		`"problems":["2 charges at the provider, want 1","no webhook with outcome contradiction"],` +
		`"timeline":["+00:00:00  a","+00:00:15  b"],"simulated_time":"02:37:15","net_charges_at_provider":0},` +
		`{"scenario":"disputed and lost","purchase_id":"pur_3","final_state":"succeeded","charges_at_provider":1,"create_calls":1,` +
		`"expected":"succeeded; charged back, the dispute lost","ok":true,"timeline":["+00:00:00  c"],"simulated_time":"02:37:15",` +
		`"net_charges_at_provider":1,"disputes":[{"id":"du_1","state":"lost","amount":1000,"currency":"usd","withdrawn":1000,"reinstated":0}],` +
		`"refused_refund":"the payment is disputed"}],` +
		`"audit":{"from":"+00:00:00","until":"+02:37:16","payments_listed":3,"new_findings":1,"findings":[` +
		`{"kind":"state_disagreement","payment_id":"pi_7","purchase_id":"pur_22","scenario":"success after a decline",` +
		`"amount":1200,"currency":"usd","found":"+01:00:00"},` +
		`{"kind":"orphan_charge","payment_id":"pi_9","amount":500,"currency":"eur","found":"+02:37:15"}],` +
		`"open_disputes":[{"id":"du_1","payment_id":"pi_3","purchase_id":"pur_3","scenario":"disputed and lost","state":"evidence_submitted",` +
		`"amount":1000,"currency":"usd","opened":"+00:00:15"}],` +
		`"money_at_risk":[{"amount":500,"currency":"eur"},{"amount":2200,"currency":"usd"}]},` +
		`"real_time":"4.1s","simulated_time":"02:37:15"}`
	if string(got) != want {
		t.Errorf("JSON:\n%s\nwant\n%s", got, want)
	}

	// A report without an audit has no audit key.
	r := report()
	r.Audit = nil
	if got, err := json.Marshal(r); err != nil || strings.Contains(string(got), `"audit"`) {
		t.Errorf("JSON without an audit: %s, %v", got, err)
	}
}

func TestPrintSummary(t *testing.T) {
	var b strings.Builder
	r := report()
	r.PrintSummary(&b)
	want := `
Summary (02:37:15 simulated in 4.1s):
PURCHASE  SCENARIO                 FINAL STATE                          CHARGES  CREATES  EXPECTED                                     RESULT
pur_1     clean success            succeeded                            1        1        succeeded, 1 charge                          OK
pur_22    success after a decline  declined (escalated: contradiction)  2        1        declined, contradiction escalated, 1 charge  FAIL: 2 charges at the provider, want 1; no webhook with outcome contradiction
pur_3     disputed and lost        succeeded (dispute lost)             1        1        succeeded; charged back, the dispute lost    OK

Audit from the provider's side (payments created +00:00:00 to +02:37:16): 3 payments listed, 2 findings (1 stored by this run, 1 earlier by the hourly audit sweep):
FINDING             PAYMENT  PURCHASE  SCENARIO                 AT RISK    FOUND
state_disagreement  pi_7     pur_22    success after a decline  12.00 USD  +01:00:00
orphan_charge       pi_9     -         -                        5.00 EUR   +02:37:15
Open disputes at the audit (1), their money held by the card network until it decides:
DISPUTE  PAYMENT  PURCHASE  SCENARIO           STATE               AT RISK    OPENED
du_1     pi_3     pur_3     disputed and lost  evidence_submitted  10.00 USD  +00:00:15
Money at risk: 5.00 EUR, 22.00 USD, open disputes included. The audit moved no money and no purchase: each finding waits on the operator list.

Some scenarios did not end as expected (FAIL above).
`
	if b.String() != want {
		t.Errorf("summary:\n%s\nwant\n%s", b.String(), want)
	}

	b.Reset()
	r.OK, r.Results = true, r.Results[:1]
	r.Audit = &demo.Audit{From: "+00:00:00", Until: "+00:10:00", Payments: 1, Findings: []demo.AuditFinding{}, AtRisk: []demo.Money{}}
	r.PrintSummary(&b)
	got := b.String()
	for _, line := range []string{
		"\nAudit from the provider's side (payments created +00:00:00 to +00:10:00): 1 payments listed, 0 findings: every payment matches the books.\n",
		"\nAll scenarios ended as expected: payrecon never charged a purchase twice, never called one failed while its outcome was unknown, " +
			"and put every disagreement with the provider on the operator list.\n",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("summary of a passing run lacks %q:\n%s", line, got)
		}
	}
	if strings.Contains(got, "FAIL") || strings.Contains(got, "Money at risk") {
		t.Errorf("summary of a passing run with no finding:\n%s", got)
	}

	// No finding, but a dispute open at the audit: its money is at risk.
	b.Reset()
	r.Audit.Disputes = report().Audit.Disputes
	r.Audit.AtRisk = []demo.Money{{Amount: 1000, Currency: "usd"}}
	r.PrintSummary(&b)
	got = b.String()
	for _, line := range []string{
		": every payment matches the books.\nOpen disputes at the audit (1), their money held by the card network until it decides:\n",
		"\nMoney at risk: 10.00 USD, open disputes included. ",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("summary of a run with an open dispute and no finding lacks %q:\n%s", line, got)
		}
	}

	// Without an audit, no audit section.
	b.Reset()
	r.Audit = nil
	r.PrintSummary(&b)
	if strings.Contains(b.String(), "Audit") {
		t.Errorf("summary without an audit:\n%s", b.String())
	}
}

func TestNewAudit(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	results := []demo.Result{
		{Scenario: "second charge outside payrecon", PurchaseID: "pur_1"}, {Scenario: "clean success", PurchaseID: "pur_2"},
		{Scenario: "disputed and lost", PurchaseID: "pur_3"},
	}
	findings := []reconcile.Finding{
		// An earlier demo's, in a shared store: left out.
		{Kind: reconcile.FindingDuplicateCharge, PaymentID: "pi_old", PurchaseID: "pur_old", Amount: 700, Currency: "usd", FoundAt: at(-time.Hour)},
		{Kind: reconcile.FindingOrphanCharge, PaymentID: "pi_oldorphan", Amount: 100, Currency: "usd", FoundAt: at(-time.Hour)},
		// By the hourly sweep, before the demo's audit.
		{Kind: reconcile.FindingDuplicateCharge, PaymentID: "pi_2", PurchaseID: "pur_1", Amount: 1300, Currency: "usd", FoundAt: at(time.Hour)},
		// By the demo's audit.
		{Kind: reconcile.FindingOrphanCharge, PaymentID: "pi_9", Amount: 500, Currency: "EUR", FoundAt: at(2 * time.Hour)},
	}
	rep := reconcile.AuditReport{
		Run:      reconcile.AuditRun{From: start, Until: at(2*time.Hour + time.Second)},
		Payments: 4,
		New:      []reconcile.Finding{{Kind: reconcile.FindingOrphanCharge, PaymentID: "pi_9"}},
	}
	disputes := []reconcile.Dispute{
		// The demo's, open: at risk.
		{ProviderDisputeID: "du_1", PurchaseID: "pur_3", PaymentID: "pi_3", Amount: 1500, Currency: "USD",
			State: statemachine.EvidenceSubmitted, CreatedAt: at(15 * time.Second)},
		// An earlier demo's, in a shared store: left out.
		{ProviderDisputeID: "du_old", PurchaseID: "pur_old", PaymentID: "pi_old", Amount: 700, Currency: "usd", State: statemachine.Open},
		// Decided: nothing at risk.
		{ProviderDisputeID: "du_2", PurchaseID: "pur_2", PaymentID: "pi_5", Amount: 400, Currency: "usd", State: statemachine.Lost},
	}
	got := demo.NewAuditWithDisputes(rep, findings, disputes, results, start)
	want := &demo.Audit{
		From: "+00:00:00", Until: "+02:00:01", Payments: 4, New: 1,
		Findings: []demo.AuditFinding{
			{Kind: "duplicate_charge", PaymentID: "pi_2", PurchaseID: "pur_1", Scenario: "second charge outside payrecon",
				Amount: 1300, Currency: "usd", Found: "+01:00:00"},
			{Kind: "orphan_charge", PaymentID: "pi_9", Amount: 500, Currency: "eur", Found: "+02:00:00"},
		},
		Disputes: []demo.AuditDispute{
			{ID: "du_1", PaymentID: "pi_3", PurchaseID: "pur_3", Scenario: "disputed and lost", State: "evidence_submitted",
				Amount: 1500, Currency: "usd", Opened: "+00:00:15"},
		},
		AtRisk: []demo.Money{{Amount: 500, Currency: "eur"}, {Amount: 2800, Currency: "usd"}},
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("NewAudit:\n%s\nwant\n%s", gotJSON, wantJSON)
	}

	// Without disputes, the findings alone are at risk.
	if a := demo.NewAudit(rep, findings, results, start); len(a.Disputes) != 0 || len(a.AtRisk) != 2 || a.AtRisk[1] != (demo.Money{Amount: 1300, Currency: "usd"}) {
		t.Errorf("NewAudit: disputes %+v, at risk %v; want none, and 13.00 USD", a.Disputes, a.AtRisk)
	}

	// No findings: empty lists, not null, in the JSON report.
	empty := demo.NewAudit(reconcile.AuditReport{Run: rep.Run}, nil, results, start)
	b, _ := json.Marshal(empty)
	for _, key := range []string{`"findings":[]`, `"open_disputes":[]`, `"money_at_risk":[]`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("NewAudit with no findings lacks %s: %s", key, b)
		}
	}
}
