package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	payprom "github.com/payrecon/payrecon/reconcile/prometheus"
	"github.com/payrecon/payrecon/statemachine"
)

// What payrecon exports.

type family struct {
	typ    string // COUNTER, GAUGE, HISTOGRAM, ...
	labels map[string]bool
}

// exportedFamilies builds payrecon's metrics as serve and worker do,
// records one of everything, and gathers them.
func exportedFamilies(t *testing.T) map[string]family {
	t.Helper()
	m := payprom.New()
	// Vectors without preset children export nothing until used.
	m.Transition(statemachine.Created, statemachine.Submitted, reconcile.CauseSubmit)
	m.RefundTransition(statemachine.Created, statemachine.Submitted, reconcile.CauseSubmit)
	m.ProviderCall(provider.OpCreate, provider.Succeeded, 20*time.Millisecond)
	m.JobsClaimed(1)
	m.LeaseLost()
	m.Resolved(time.Minute)
	m.Webhook("payment_intent.succeeded", reconcile.EventApplied)
	m.WorkerRunning(true)
	m.Sweep("retention", "ok", time.Second, 1, time.Now())
	m.BudgetRate(reconcile.ClassCreate, 23.75)
	m.BudgetThrottled(reconcile.ClassCreate)
	m.BudgetWait(reconcile.ClassCreate, 40*time.Millisecond)
	m.EventsSwept(reconcile.EventSweepReport{Outcomes: map[reconcile.EventOutcome]int{reconcile.EventDuplicate: 2}, Watermark: time.Now()})
	m.Disputes([]reconcile.Dispute{{
		ProviderDisputeID: "du_1", Amount: 1000, Currency: "usd", State: statemachine.Open,
		ProviderStatus: provider.DisputeNeedsResponse, EvidenceDueBy: time.Now().Add(72 * time.Hour),
	}}, time.Now())

	gathered, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]family{}
	for _, f := range gathered {
		fam := family{typ: f.GetType().String(), labels: map[string]bool{}}
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				fam.labels[l.GetName()] = true
			}
		}
		fams[f.GetName()] = fam
	}

	// Every payrecon metric registered must have been exported above, or
	// a query on it would be refused as unknown.
	descs := make(chan *prometheus.Desc)
	go func() { m.Registry().Describe(descs); close(descs) }()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		if n := fqName.FindStringSubmatch(d.String()); n != nil && strings.HasPrefix(n[1], "payrecon_") {
			if _, ok := fams[n[1]]; !ok {
				t.Errorf("%s is registered but exported no series here: record one in exportedFamilies", n[1])
			}
		}
	}
	return fams
}

// targetLabels are added by Prometheus to every scraped series.
var targetLabels = set("job", "instance")

// scrapeSeries are the series Prometheus writes for every target.
var scrapeSeries = set("up", "scrape_duration_seconds", "scrape_samples_scraped",
	"scrape_samples_post_metric_relabeling", "scrape_series_added")

// series describes a series name as scraped from payrecon: its labels
// (besides the target's) and whether it only grows.
func series(fams map[string]family, name string) (labels map[string]bool, counter, ok bool) {
	if scrapeSeries[name] {
		return map[string]bool{}, false, true
	}
	if f, ok := fams[name]; ok {
		switch f.typ {
		case "COUNTER":
			return f.labels, true, true
		case "GAUGE", "UNTYPED":
			return f.labels, false, true
		case "SUMMARY":
			return union(f.labels, set("quantile")), false, true
		}
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(name, suffix)
		if !found {
			continue
		}
		f, ok := fams[base]
		switch {
		case !ok:
		case f.typ == "HISTOGRAM" && suffix == "_bucket":
			return union(f.labels, set("le")), true, true
		case f.typ == "HISTOGRAM" || f.typ == "SUMMARY":
			return f.labels, true, true
		}
	}
	return nil, false, false
}

func union(a, b map[string]bool) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// knownValues are the complete value sets of the labels of metric whose
// values are fixed by payrecon's own tables: a refund's states are the
// refund machine's, every other state a purchase's.
func knownValues(metric string) map[string]map[string]bool {
	states, kinds := map[string]bool{}, map[string]bool{}
	machine := statemachine.Purchase
	if strings.Contains(metric, "refund") {
		machine = statemachine.Refund
	}
	for _, s := range machine.States() {
		states[string(s)] = true
	}
	for _, k := range reconcile.FindingKinds {
		kinds[string(k)] = true
	}
	return map[string]map[string]bool{"state": states, "kind": kinds, "from": states, "to": states}
}

var plainAlternatives = regexp.MustCompile(`^[a-z_]+(\|[a-z_]+)*$`)

// checkQuery checks one PromQL expression against what payrecon exports.
func checkQuery(t *testing.T, where, expr string, fams map[string]family) query {
	t.Helper()
	q, err := parseQuery(expr)
	if err != nil {
		t.Errorf("%s: %v\n\t%s", where, err, expr)
		return q
	}
	if len(q.selectors) == 0 {
		t.Errorf("%s: no metric in %s", where, expr)
	}
	available := map[string]bool{}
	for k := range targetLabels {
		available[k] = true
	}
	hasBucket := false
	for _, sel := range q.selectors {
		labels, counter, ok := series(fams, sel.metric)
		if !ok {
			t.Errorf("%s: payrecon exports no %s\n\t%s", where, sel.metric, expr)
			continue
		}
		hasBucket = hasBucket || strings.HasSuffix(sel.metric, "_bucket")
		values := knownValues(sel.metric)
		for l := range labels {
			available[l] = true
		}
		for _, m := range sel.matchers {
			if m.label != "__name__" && !labels[m.label] && !targetLabels[m.label] {
				t.Errorf("%s: %s has no label %q (it has %v, plus job and instance)\n\t%s", where, sel.metric, m.label, keys(labels), expr)
			}
			known := values[m.label]
			if known == nil || strings.Contains(m.value, "$") {
				continue
			}
			var vals []string
			switch {
			case m.op == "=" || m.op == "!=":
				vals = []string{m.value}
			case plainAlternatives.MatchString(m.value):
				vals = strings.Split(m.value, "|")
			}
			for _, v := range vals {
				if !known[v] {
					t.Errorf("%s: %s=%q is not a value payrecon uses (%v)\n\t%s", where, m.label, v, keys(known), expr)
				}
			}
		}
		switch {
		case counterFunctions[sel.rangeFunc] && !counter:
			t.Errorf("%s: %s of %s, which is not a counter\n\t%s", where, sel.rangeFunc, sel.metric, expr)
		case counter && !counterFunctions[sel.rangeFunc]:
			t.Errorf("%s: counter %s read without rate() or increase(): it restarts at 0 with every process\n\t%s", where, sel.metric, expr)
		}
	}
	for _, l := range q.grouping {
		if !available[l] {
			t.Errorf("%s: groups by %q, a label of none of its metrics\n\t%s", where, l, expr)
		}
	}
	if slices.Contains(q.functions, "histogram_quantile") && (!hasBucket || !slices.Contains(q.grouping, "le")) {
		t.Errorf("%s: histogram_quantile needs the _bucket series aggregated by le\n\t%s", where, expr)
	}
	return q
}

// ---------------------------------------------------------------------
// The alert rules.

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// TestAlertRulesUseExportedMetrics: every metric and label an alert rule
// reads is exported by payrecon, and every alert has its runbook section.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	fams := exportedFamilies(t)
	var rules ruleFile
	decodeYAML(t, "prometheus/alerts.yml", &rules, true)
	runbook := string(readFile(t, "../docs/runbook.md"))
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			checkQuery(t, "alerts.yml: "+r.Alert+r.Record, r.Expr, fams)
			if r.Alert == "" {
				continue
			}
			want := "docs/runbook.md#" + strings.ToLower(r.Alert)
			if r.Annotations["runbook_url"] != want {
				t.Errorf("alerts.yml: %s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !strings.Contains(runbook, "\n## "+r.Alert+"\n") {
				t.Errorf("docs/runbook.md has no section ## %s", r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatal("no rules read from alerts.yml")
	}
}
