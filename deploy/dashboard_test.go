package deploy

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The Grafana dashboard.

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	Datasource  *datasourceRef `json:"datasource"`
	GridPos     struct {
		X int `json:"x"`
		Y int `json:"y"`
		W int `json:"w"`
		H int `json:"h"`
	} `json:"gridPos"`
	Targets []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type dashboardFile struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Datasource *datasourceRef  `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

const dashboardPath = "grafana/dashboards/payrecon.json"

func loadDashboard(t *testing.T) dashboardFile {
	t.Helper()
	var d dashboardFile
	if err := json.Unmarshal(readFile(t, dashboardPath), &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d
}

var labelValues = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)
var grafanaVar = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)

// TestDashboardQueriesUseExportedMetrics is the dashboard's contract with
// reconcile/prometheus: every metric a panel or a variable queries is
// exported, with the labels the query uses.
func TestDashboardQueriesUseExportedMetrics(t *testing.T) {
	fams := exportedFamilies(t)
	d := loadDashboard(t)
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type != "query" {
			continue
		}
		var q string
		var obj struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Errorf("variable %s: query %s", v.Name, v.Query)
			}
			q = obj.Query
		}
		if v.Definition != "" && v.Definition != q {
			t.Errorf("variable %s: definition %q differs from its query %q", v.Name, v.Definition, q)
		}
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(metric, label), which this test checks", v.Name, q)
			continue
		}
		if labels, _, ok := series(fams, m[1]); !ok {
			t.Errorf("variable %s: payrecon exports no %s", v.Name, m[1])
		} else if !labels[m[2]] && !targetLabels[m[2]] {
			t.Errorf("variable %s: %s has no label %s", v.Name, m[1], m[2])
		}
	}

	used := map[string]bool{}
	grouped := map[string]map[string]bool{}
	forEachPanel(d.Panels, func(p panel) {
		for _, tg := range p.Targets {
			where := fmt.Sprintf("panel %q (%s)", p.Title, tg.RefID)
			q := checkQuery(t, where, tg.Expr, fams)
			for _, sel := range q.selectors {
				used[sel.metric] = true
				if grouped[sel.metric] == nil {
					grouped[sel.metric] = map[string]bool{}
				}
				for _, g := range q.grouping {
					grouped[sel.metric][g] = true
				}
				// Every query follows the dashboard's job selector.
				if strings.HasPrefix(sel.metric, "payrecon_") &&
					!slices.Contains(sel.matchers, matcher{"job", "=~", "$job"}) {
					t.Errorf("%s: %s lacks job=~\"$job\"\n\t%s", where, sel.metric, tg.Expr)
				}
			}
			for _, m := range grafanaVar.FindAllStringSubmatch(tg.Expr, -1) {
				if !strings.HasPrefix(m[1], "__") && !vars[m[1]] {
					t.Errorf("%s: variable $%s is not defined", where, m[1])
				}
			}
		}
	})

	// What the dashboard must show: states over time, the oldest
	// uncertain age, escalations, audit findings by kind, provider latency
	// and outcomes, webhook outcomes at receipt and at application, the
	// inbox's backlog, failed events and lag, claims and lease losses, refunds by
	// state and the oldest uncertain refund, and the outbox the
	// PayreconOutboxStuck alert pages on: pending, dead, the oldest
	// pending age and deliveries by outcome.
	for metric, by := range map[string]string{
		"payrecon_purchases":                                "state",
		"payrecon_oldest_uncertain_age_seconds":             "",
		"payrecon_refunds":                                  "state",
		"payrecon_oldest_uncertain_refund_age_seconds":      "",
		"payrecon_escalations_open":                         "",
		"payrecon_audit_findings_open":                      "kind",
		"payrecon_provider_request_duration_seconds_bucket": "op",
		"payrecon_provider_requests_total":                  "outcome",
		"payrecon_webhook_events_total":                     "outcome",
		"payrecon_webhook_events_applied_total":             "outcome",
		"payrecon_webhook_inbox_pending":                    "",
		"payrecon_webhook_inbox_oldest_pending_seconds":     "",
		"payrecon_webhook_inbox_failed":                     "",
		"payrecon_webhook_apply_lag_seconds_bucket":         "",
		"payrecon_jobs_claimed_total":                       "",
		"payrecon_lease_lost_total":                         "",
		"payrecon_outbox_pending":                           "",
		"payrecon_outbox_dead":                              "",
		"payrecon_outbox_oldest_age_seconds":                "",
		"payrecon_outbox_deliveries_total":                  "outcome",
	} {
		if !used[metric] {
			t.Errorf("the dashboard does not show %s", metric)
		} else if by != "" && !grouped[metric][by] {
			t.Errorf("the dashboard never shows %s by %s", metric, by)
		}
	}
}

func forEachPanel(ps []panel, fn func(panel)) {
	for _, p := range ps {
		fn(p)
		forEachPanel(p.Panels, fn)
	}
}

// TestDashboardShape: the dashboard is one Grafana provisions and shows
// as meant: a fixed uid, unique panel ids, every query on the datasource
// variable, panels that fit the grid without overlapping.
func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	if d.UID != "payrecon" || d.Title == "" {
		t.Errorf("uid %q title %q", d.UID, d.Title)
	}
	hasDatasourceVar := false
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && string(v.Query) == `"prometheus"` {
			hasDatasourceVar = true
		}
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
			t.Errorf("variable %s: datasource %+v, want ${datasource}", v.Name, v.Datasource)
		}
	}
	if !hasDatasourceVar {
		t.Error("no datasource variable (type datasource, query prometheus)")
	}
	ids := map[int]string{}
	type rect struct {
		title      string
		x, y, w, h int
	}
	var rects []rect
	n := 0
	forEachPanel(d.Panels, func(p panel) {
		if p.ID <= 0 || ids[p.ID] != "" {
			t.Errorf("panel %q: id %d missing or taken by %q", p.Title, p.ID, ids[p.ID])
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		for _, r := range rects {
			if g.X < r.x+r.w && r.x < g.X+g.W && g.Y < r.y+r.h && r.y < g.Y+g.H {
				t.Errorf("panels %q and %q overlap", p.Title, r.title)
			}
		}
		rects = append(rects, rect{p.Title, g.X, g.Y, g.W, g.H})
		if p.Type == "row" {
			return
		}
		n++
		if p.Title == "" || p.Description == "" {
			t.Errorf("panel %d: a title and a description, please", p.ID)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: target %q: empty or duplicate", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: target %s: datasource %+v", p.Title, tg.RefID, tg.Datasource)
			}
		}
	})
	if n < 9 {
		t.Errorf("only %d panels", n)
	}
}
