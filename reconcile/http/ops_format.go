package http

import (
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// Formatting for people (amounts, ages, times, yes/no values) and the
// choice between a page and JSON.

// opsBool parses a yes/no form or query value; "" is no.
func opsBool(v string) (value, ok bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "0", "false", "off", "no":
		return false, true
	case "1", "true", "on", "yes":
		return true, true
	}
	return false, false
}

// acceptsHTML reports whether the client asks for an HTML page.
func acceptsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// opsWantsJSON reports whether the client asks for JSON, with Accept:
// application/json or ?format=json. Everyone else, bearer clients
// included, gets the HTML page: a browser never sees raw JSON.
func opsWantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json") || r.URL.Query().Get("format") == "json"
}

// opsAge renders a duration for people: "2d 3h", "4h 12m", "5m 3s".
func opsAge(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	d = d.Round(time.Second)
	days, d := d/(24*time.Hour), d%(24*time.Hour)
	h, d := d/time.Hour, d%time.Hour
	m, s := d/time.Minute, (d%time.Minute)/time.Second
	switch {
	case days > 0:
		return fmt.Sprintf("%dd %dh", days, h)
	case h > 0:
		return fmt.Sprintf("%dh %dm", h, m)
	case m > 0:
		return fmt.Sprintf("%dm %ds", m, s)
	}
	return fmt.Sprintf("%ds", s)
}

func opsTimePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// opsMoneyAtRisk is reconcile.MoneyAtRisk, written for people
// ("12.50 EUR").
func opsMoneyAtRisk(fs []reconcile.Finding, ds []reconcile.Dispute) []string {
	out := []string{}
	for _, m := range reconcile.MoneyAtRisk(fs, ds) {
		out = append(out, m.String())
	}
	return out
}

var opsFuncs = template.FuncMap{
	"filterOf": opsFilterOf,
	"fmtTime": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"isoTime": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"orDash": func(s string) string {
		if s == "" {
			return "—"
		}
		return s
	},
	"stateLabel": func(s string) string {
		switch statemachine.State(s) {
		case statemachine.Uncertain:
			return "uncertain: outcome unknown"
		case statemachine.Reconciling:
			return "reconciling: checking"
		}
		return s
	},
	"reasonLabel": func(s string) string { return strings.ReplaceAll(s, "_", " ") },
	// stateClass is the badge class of a purchase's or a refund's state:
	// st-STATE, but a refund's failed is st-negative, coloured as a
	// declined purchase (no purchase page names a state "failed").
	"stateClass": func(s string) string {
		if statemachine.State(s) == statemachine.Failed {
			return "st-negative"
		}
		return "st-" + s
	},
}
