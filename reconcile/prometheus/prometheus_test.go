package prometheus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
	"github.com/payrecon/payrecon/reconcile/postgres"
	"github.com/payrecon/payrecon/reconcile/prometheus"
	"github.com/payrecon/payrecon/statemachine"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// newStore returns a migrated store of its own whose clock is clock.
func newStore(t *testing.T, clock func() time.Time) reconcile.Store {
	t.Helper()
	ctx := context.Background()
	st, err := postgres.Open(ctx, postgres.Config{URL: pgtest.NewDatabase(t), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// scrape returns the value of a sample line on /metrics, or fails.
// scrapeAll returns m's /metrics page.
func scrapeAll(t *testing.T, m *prometheus.Metrics) []byte {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return body
}

func scrape(t *testing.T, m *prometheus.Metrics, sample string) string {
	t.Helper()
	body := scrapeAll(t, m)
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`)
	match := re.FindSubmatch(body)
	if match == nil {
		t.Fatalf("no sample %s on /metrics:\n%s", sample, body)
	}
	return string(match[1])
}

// TestOldestUncertainAge: a purchase forced into a long uncertainty shows
// its exact age on /metrics; once settled, the gauge goes back to 0.
func TestOldestUncertainAge(t *testing.T) {
	clk := testclock.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	clock := clk.Now
	st := newStore(t, clock)
	fake := fakeprovider.New(fakeprovider.Config{Now: clock})
	m := prometheus.New()
	svc, err := reconcile.New(st, fake, reconcile.Config{Now: clock, Observer: m, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := svc.CreatePurchase(ctx, reconcile.NewPurchase{Customer: "c", Amount: 300, Currency: "usd"})
	if err != nil {
		t.Fatal(err)
	}
	fake.Script(p.ID, fakeprovider.Timeout)
	if _, err := svc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(ctx, st); err != nil {
		t.Fatal(err)
	}
	if got := scrape(t, m, "payrecon_oldest_uncertain_age_seconds"); got != "0" {
		t.Fatalf("age right after the timeout: %s, want 0", got)
	}

	clk.Advance(2*time.Hour + 30*time.Second) // nobody ran the worker
	if err := m.Refresh(ctx, st); err != nil {
		t.Fatal(err)
	}
	if got := scrape(t, m, "payrecon_oldest_uncertain_age_seconds"); got != "7230" {
		t.Fatalf("age after 2h30s: %s, want 7230", got)
	}
	if got := scrape(t, m, `payrecon_purchases{state="uncertain"}`); got != "1" {
		t.Fatalf("uncertain purchases: %s", got)
	}
	if got := scrape(t, m, `payrecon_transitions_total{account="platform",cause="submit_response",from="submitted",to="uncertain"}`); got != "1" {
		t.Fatalf("transition counter: %s", got)
	}
	if got := scrape(t, m, `payrecon_provider_requests_total{account="platform",op="create",outcome="unknown"}`); got != "1" {
		t.Fatalf("provider counter: %s", got)
	}

	if _, err := svc.RunOnce(ctx); err != nil { // the replay settles it
		t.Fatal(err)
	}
	if d, _ := svc.Purchase(ctx, p.ID); d.Purchase.State != statemachine.Succeeded {
		t.Fatalf("state %s", d.Purchase.State)
	}
	if err := m.Refresh(ctx, st); err != nil {
		t.Fatal(err)
	}
	if got := scrape(t, m, "payrecon_oldest_uncertain_age_seconds"); got != "0" {
		t.Fatalf("age with nothing uncertain: %s, want 0", got)
	}
	if got := scrape(t, m, "payrecon_resolution_seconds_count"); got != "1" {
		t.Fatalf("resolution histogram count: %s", got)
	}
}

// TestAlertRules runs `promtool test rules` over the shipped alert rules
// with their firing and non-firing fixtures.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not found; CI must install Debian's prometheus package (.ci/run does)")
		}
		t.Skip("promtool not found: install Debian's prometheus package to test the alert rules")
	}
	for _, args := range [][]string{
		{"check", "rules", "../../deploy/prometheus/alerts.yml"},
		{"test", "rules", "../../deploy/prometheus/alerts_test.yml"},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestAlertRulesUseExportedMetrics: every payrecon_ metric an alert names
// is one this package exports, so a rename cannot silently blind an alert.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	rules, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	m := prometheus.New()
	m.Webhook("payment_intent.succeeded", reconcile.EventApplied)
	m.Transition(statemachine.Created, statemachine.Submitted, reconcile.CauseSubmit)
	m.Sweep("retention", "ok", time.Second, 1, time.Now())
	m.Disputes([]reconcile.Dispute{{State: statemachine.Open, ProviderStatus: "needs_response", Amount: 1, Currency: "usd",
		EvidenceDueBy: time.Now().Add(time.Hour)}}, time.Now())
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range families {
		exported[f.GetName()] = true
	}
	used := regexp.MustCompile(`payrecon_[a-z_]+`).FindAllString(string(rules), -1)
	if len(used) == 0 {
		t.Fatal("no payrecon metric in the alert rules")
	}
	for _, name := range used {
		if !exported[name] {
			t.Errorf("alerts.yml uses %s, which is not exported", name)
		}
	}
}

// TestAlertedCountersStartAtZero: the series the alerts take increase() of
// exist at 0 before the first event, so that the first contradiction or
// rejection after a restart raises the alert.
func TestAlertedCountersStartAtZero(t *testing.T) {
	m := prometheus.New()
	for _, sample := range []string{
		`payrecon_webhook_events_applied_total{outcome="contradiction",type="payment_intent.succeeded"}`,
		`payrecon_webhook_events_total{outcome="conflict",type="payment_intent.succeeded"}`,
		`payrecon_webhook_events_total{outcome="rejected",type="unverified"}`,
		`payrecon_webhook_events_applied_total{outcome="confirming",type="payment_intent.canceled"}`,
		`payrecon_webhook_events_applied_total{outcome="failed",type="payment_intent.succeeded"}`,
	} {
		if got := scrape(t, m, sample); got != "0" {
			t.Errorf("%s = %s before any event, want 0", sample, got)
		}
	}
}

// TestWebhookTypeLabelIsBounded: a verified event of a type payrecon
// does not act on is counted under type="other", so that a provider
// sending new types cannot grow the series without bound.
func TestWebhookTypeLabelIsBounded(t *testing.T) {
	m := prometheus.New()
	m.Webhook("payment_intent.succeeded", reconcile.EventReceived)
	m.Webhook("customer.created", reconcile.EventReceived)
	m.Webhook("made.up.type.1234", reconcile.EventReceived)
	m.Webhook(reconcile.UnverifiedEventType, reconcile.EventRejected)
	m.EventApplied("payment_intent.succeeded", reconcile.EventApplied, 30*time.Millisecond)
	m.EventApplied("made.up.type.1234", reconcile.EventIgnored, 2*time.Second)
	for sample, want := range map[string]string{
		`payrecon_webhook_events_total{outcome="received",type="payment_intent.succeeded"}`:        "1",
		`payrecon_webhook_events_total{outcome="received",type="other"}`:                           "2",
		`payrecon_webhook_events_total{outcome="rejected",type="unverified"}`:                      "1",
		`payrecon_webhook_events_applied_total{outcome="applied",type="payment_intent.succeeded"}`: "1",
		`payrecon_webhook_events_applied_total{outcome="ignored",type="other"}`:                    "1",
		`payrecon_webhook_apply_lag_seconds_bucket{le="0.05"}`:                                     "1",
		`payrecon_webhook_apply_lag_seconds_count`:                                                 "2",
	} {
		if got := scrape(t, m, sample); got != want {
			t.Errorf("%s = %q, want %q", sample, got, want)
		}
	}
	body := scrapeAll(t, m)
	if bytes.Contains(body, []byte("customer.created")) || bytes.Contains(body, []byte("made.up.type")) {
		t.Errorf("/metrics names an event type payrecon does not act on")
	}
}

// TestAuditFindingsOpen: payrecon_audit_findings_open has every kind from
// the start, at 0; a refresh after an audit counts its open findings by
// kind, and closing one brings its kind back to 0.
func TestAuditFindingsOpen(t *testing.T) {
	m := prometheus.New()
	for _, k := range reconcile.FindingKinds {
		sample := `payrecon_audit_findings_open{kind="` + string(k) + `"}`
		if got := scrape(t, m, sample); got != "0" {
			t.Errorf("%s = %s before any refresh, want 0", sample, got)
		}
	}

	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	st := newStore(t, clock)
	fakeNow := now.Add(-time.Hour)
	fake := fakeprovider.New(fakeprovider.Config{Now: func() time.Time { return fakeNow }})
	svc, err := reconcile.New(st, fake, reconcile.Config{Now: clock, Observer: m, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Two charges nobody made through payrecon, for no purchase.
	fake.ChargeOutside(fakeprovider.OutsideCharge{Amount: 500, Currency: "usd"})
	fake.ChargeOutside(fakeprovider.OutsideCharge{Amount: 700, Currency: "eur", PurchaseID: "pur_unknown"})
	rep, err := svc.Audit(ctx, provider.Window{From: now.Add(-2 * time.Hour), Until: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.New) != 2 {
		t.Fatalf("audit found %d, want the 2 orphan charges: %+v", len(rep.New), rep.New)
	}
	if err := m.Refresh(ctx, st); err != nil {
		t.Fatal(err)
	}
	want := map[reconcile.FindingKind]string{reconcile.FindingOrphanCharge: "2"}
	check := func(when string) {
		t.Helper()
		for _, k := range reconcile.FindingKinds {
			w := want[k]
			if w == "" {
				w = "0"
			}
			sample := `payrecon_audit_findings_open{kind="` + string(k) + `"}`
			if got := scrape(t, m, sample); got != w {
				t.Errorf("%s: %s = %s, want %s", when, sample, got, w)
			}
		}
	}
	check("after the audit")

	open, err := svc.Findings(ctx, reconcile.AnyAccount, false)
	if err != nil || len(open) != 2 {
		t.Fatalf("open findings: %d, %v", len(open), err)
	}
	if _, err := svc.CloseFinding(ctx, open[0].ID, "alice", "refunded by hand"); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(ctx, st); err != nil {
		t.Fatal(err)
	}
	want[reconcile.FindingOrphanCharge] = "1"
	check("after closing one")
}

// Metrics is what the operator pages count their login attempts with.
var _ rhttp.LoginObserver = (*prometheus.Metrics)(nil)

// TestOpsLoginAttempts: payrecon_ops_login_attempts_total has every
// outcome reconcile/http reports from the start, at 0, and counts each.
func TestOpsLoginAttempts(t *testing.T) {
	m := prometheus.New()
	outcomes := []string{rhttp.LoginSuccess, rhttp.LoginFailure, rhttp.LoginThrottled}
	for _, o := range outcomes {
		if got := scrape(t, m, `payrecon_ops_login_attempts_total{outcome="`+o+`"}`); got != "0" {
			t.Errorf("outcome %s = %s before any attempt, want 0", o, got)
		}
	}
	m.OpsLogin(rhttp.LoginFailure)
	m.OpsLogin(rhttp.LoginFailure)
	m.OpsLogin(rhttp.LoginThrottled)
	for o, want := range map[string]string{rhttp.LoginSuccess: "0", rhttp.LoginFailure: "2", rhttp.LoginThrottled: "1"} {
		if got := scrape(t, m, `payrecon_ops_login_attempts_total{outcome="`+o+`"}`); got != want {
			t.Errorf("outcome %s = %s, want %s", o, got, want)
		}
	}
}

// refundOutage is the fake provider with its refund creates failing,
// unanswered, while down is set: the refund's outcome is unknown.
type refundOutage struct {
	*fakeprovider.Fake
	down atomic.Bool
}

func (p *refundOutage) CreateRefund(ctx context.Context, req provider.RefundRequest) (provider.RefundResult, error) {
	if p.down.Load() {
		return provider.RefundResult{}, errors.New("connection reset by peer")
	}
	return p.Fake.CreateRefund(ctx, req)
}

// TestRefundGauges: payrecon_refunds has every refund state from the
// start, at 0; a refund whose create went unanswered shows as uncertain
// with its exact age in payrecon_oldest_uncertain_refund_age_seconds, its
// moves are counted in payrecon_refund_transitions_total (not in the
// purchases' counter), and once it settles the age goes back to 0.
func TestRefundGauges(t *testing.T) {
	m := prometheus.New()
	for _, s := range statemachine.Refund.States() {
		if got := scrape(t, m, `payrecon_refunds{state="`+string(s)+`"}`); got != "0" {
			t.Errorf("refunds in %s before any refresh: %s, want 0", s, got)
		}
	}
	if got := scrape(t, m, "payrecon_oldest_uncertain_refund_age_seconds"); got != "0" {
		t.Errorf("oldest uncertain refund before any refresh: %s, want 0", got)
	}

	clk := testclock.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	st := newStore(t, clk.Now)
	p := &refundOutage{Fake: fakeprovider.New(fakeprovider.Config{Now: clk.Now})}
	svc, err := reconcile.New(st, p, reconcile.Config{Now: clk.Now, Observer: m, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	refresh := func() {
		t.Helper()
		if err := m.Refresh(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	want := func(when string, samples map[string]string) {
		t.Helper()
		for sample, w := range samples {
			if got := scrape(t, m, sample); got != w {
				t.Errorf("%s: %s = %s, want %s", when, sample, got, w)
			}
		}
	}
	pur, err := svc.CreatePurchase(ctx, reconcile.NewPurchase{Customer: "c", Amount: 300, Currency: "usd"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := svc.CreateRefund(ctx, reconcile.NewRefund{PurchaseID: pur.ID, Amount: 100, Reason: "returned", RequestedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	refresh()
	want("a refund created", map[string]string{`payrecon_refunds{state="created"}`: "1", `payrecon_refunds{state="uncertain"}`: "0"})

	p.down.Store(true)
	if _, err := svc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	refresh()
	clk.Advance(2*time.Hour + 30*time.Second) // nobody ran the worker
	refresh()
	want("a refund uncertain for 2h30s", map[string]string{
		`payrecon_refunds{state="created"}`:                                                           "0",
		`payrecon_refunds{state="uncertain"}`:                                                         "1",
		"payrecon_oldest_uncertain_refund_age_seconds":                                                "7230",
		"payrecon_oldest_uncertain_age_seconds":                                                       "0",
		`payrecon_refund_transitions_total{cause="submit",from="created",to="submitted"}`:             "1",
		`payrecon_refund_transitions_total{cause="submit_response",from="submitted",to="uncertain"}`:  "1",
		`payrecon_transitions_total{account="platform",cause="submit",from="created",to="submitted"}`: "1", // the purchase's own
		`payrecon_provider_requests_total{account="platform",op="refund_create",outcome="unknown"}`:   "1",
	})

	p.down.Store(false)
	if _, err := svc.RunOnce(ctx); err != nil { // the replay under the same key settles it
		t.Fatal(err)
	}
	if d, err := svc.Refund(ctx, r.ID); err != nil || d.Refund.State != statemachine.Succeeded {
		t.Fatalf("refund after the replay: %+v %v, want succeeded", d.Refund, err)
	}
	refresh()
	want("the refund settled", map[string]string{
		`payrecon_refunds{state="uncertain"}`:          "0",
		`payrecon_refunds{state="succeeded"}`:          "1",
		"payrecon_oldest_uncertain_refund_age_seconds": "0",
	})
}

// TestDisputeGauges: the open disputes by status, their money per
// currency in major units, and the time left to the soonest chargeback's
// evidence, read from the database; the due series is absent while no
// chargeback waits for evidence, and every gauge empties once the
// disputes are decided.
func TestDisputeGauges(t *testing.T) {
	m := prometheus.New()
	if got := scrape(t, m, `payrecon_disputes_open{status="needs_response"}`); got != "0" {
		t.Errorf("open chargebacks before any refresh: %s, want 0", got)
	}
	clk := testclock.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	st := newStore(t, clk.Now)
	fake := fakeprovider.New(fakeprovider.Config{Now: clk.Now})
	svc, err := reconcile.New(st, fake, reconcile.Config{Now: clk.Now, Observer: m, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := clk.Now()
	var pays []string
	for _, c := range []struct {
		amount   int64
		currency string
	}{{1050, "usd"}, {2000, "usd"}, {500, "jpy"}} {
		p, err := svc.CreatePurchase(ctx, reconcile.NewPurchase{Customer: "c", Amount: c.amount, Currency: c.currency})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		d, err := svc.Purchase(ctx, p.ID)
		if err != nil || d.Purchase.ProviderPaymentID == "" {
			t.Fatalf("purchase %s: %+v, %v", p.ID, d.Purchase, err)
		}
		pays = append(pays, d.Purchase.ProviderPaymentID)
	}
	if _, err := fake.OpenDispute(pays[0], fakeprovider.DisputeOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if _, err := fake.OpenDispute(pays[1], fakeprovider.DisputeOptions{Inquiry: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := fake.OpenDispute(pays[2], fakeprovider.DisputeOptions{}); err != nil {
		t.Fatal(err)
	}
	apply := func() {
		t.Helper()
		clk.Advance(time.Minute)
		if _, err := svc.Audit(ctx, provider.Window{From: start, Until: clk.Now()}); err != nil {
			t.Fatal(err)
		}
		if err := m.Refresh(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	apply()
	want := map[string]string{
		`payrecon_disputes_open{status="needs_response"}`:                  "2",
		`payrecon_disputes_open{status="warning_needs_response"}`:          "1",
		`payrecon_disputes_open{status="under_review"}`:                    "0",
		`payrecon_disputes_open_amount{account="platform",currency="usd"}`: "30.5",
		`payrecon_disputes_open_amount{account="platform",currency="jpy"}`: "500",
		// The first chargeback opened an hour and a minute ago, due 7 days
		// after it opened.
		"payrecon_dispute_evidence_due_seconds": fmt.Sprint((7*24*time.Hour - time.Hour - time.Minute).Seconds()),
	}
	for sample, w := range want {
		if got := scrape(t, m, sample); got != w {
			t.Errorf("%s = %s, want %s", sample, got, w)
		}
	}
	for _, d := range fake.Disputes() {
		if _, err := fake.MoveDispute(d.ID, map[bool]string{true: provider.DisputeWarningClosed, false: provider.DisputeLost}[provider.DisputeInquiry(d.Status)]); err != nil {
			t.Fatal(err)
		}
	}
	// The audit lists disputes by their opening, and the window covers
	// them all again.
	apply()
	if got := scrape(t, m, `payrecon_disputes_open{status="needs_response"}`); got != "0" {
		t.Errorf("open chargebacks once decided: %s, want 0", got)
	}
	body := string(scrapeAll(t, m))
	for _, gone := range []string{"payrecon_dispute_evidence_due_seconds ", "payrecon_disputes_open_amount{"} {
		if strings.Contains(body, gone) {
			t.Errorf("%s still exported once every dispute is decided", gone)
		}
	}
}
