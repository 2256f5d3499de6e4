package demo_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/payrecon/payrecon/reconcile/demo"
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
		`"expected":"succeeded, 1 charge","ok":true,"timeline":["+00:00:00  a"],"simulated_time":"02:37:15"},` +
		`{"scenario":"success after a decline","purchase_id":"pur_22","final_state":"declined","escalation":"contradiction",` +
		`"charges_at_provider":2,"create_calls":1,"expected":"declined, contradiction escalated, 1 charge","ok":false,` +
		`"problems":["2 charges at the provider, want 1","no webhook with outcome contradiction"],` +
		`"timeline":["+00:00:00  a","+00:00:15  b"],"simulated_time":"02:37:15"}],` +
		`"real_time":"4.1s","simulated_time":"02:37:15"}`
	if string(got) != want {
		t.Errorf("JSON:\n%s\nwant\n%s", got, want)
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

Some scenarios did not end as expected (FAIL above).
`
	if b.String() != want {
		t.Errorf("summary:\n%s\nwant\n%s", b.String(), want)
	}

	b.Reset()
	r.OK, r.Results = true, r.Results[:1]
	r.PrintSummary(&b)
	if got := b.String(); !strings.HasSuffix(got, "\nAll scenarios ended as expected: no purchase was charged twice, none called failed while its outcome was unknown.\n") ||
		strings.Contains(got, "FAIL") {
		t.Errorf("summary of a passing run:\n%s", got)
	}
}
