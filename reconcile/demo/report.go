package demo

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
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
}

// Report is the outcome of a demo run, what `payrecon demo --json` writes.
type Report struct {
	OK        bool     `json:"ok"`
	Database  string   `json:"database"`
	Results   []Result `json:"results"`
	RealTime  string   `json:"real_time"`
	Simulated string   `json:"simulated_time"`
}

// PrintSummary writes the report as a table, one row per scenario, and a
// closing verdict.
func (r Report) PrintSummary(out io.Writer) {
	fmt.Fprintf(out, "\nSummary (%s simulated in %s):\n", r.Simulated, r.RealTime)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PURCHASE\tSCENARIO\tFINAL STATE\tCHARGES\tCREATES\tEXPECTED\tRESULT")
	for _, res := range r.Results {
		state := res.FinalState
		if res.Escalation != "" {
			state += " (escalated: " + res.Escalation + ")"
		}
		verdict := "OK"
		if !res.OK {
			verdict = "FAIL: " + strings.Join(res.Problems, "; ")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", res.PurchaseID, res.Scenario, state, res.Charges, res.Creates, res.Expected, verdict)
	}
	w.Flush()
	if r.OK {
		fmt.Fprintln(out, "\nAll scenarios ended as expected: no purchase was charged twice, none called failed while its outcome was unknown.")
	} else {
		fmt.Fprintln(out, "\nSome scenarios did not end as expected (FAIL above).")
	}
}
