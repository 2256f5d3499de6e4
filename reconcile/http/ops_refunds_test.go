package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// refundsOf reads a purchase's refunds from the database.
func (f *opsFixture) refundsOf(purchaseID string) []reconcile.Refund {
	f.t.Helper()
	rs, err := f.svc.PurchaseRefunds(context.Background(), purchaseID)
	if err != nil {
		f.t.Fatal(err)
	}
	return rs
}

// duplicateFinding runs auditFindings and returns the purchase and its
// duplicate-charge finding, and the orphan charge's finding.
func (f *opsFixture) duplicateFinding() (p reconcile.Purchase, dup, orphan reconcile.Finding) {
	f.t.Helper()
	p, findings := f.auditFindings()
	for _, fd := range findings {
		switch fd.Kind {
		case reconcile.FindingDuplicateCharge:
			dup = fd
		case reconcile.FindingOrphanCharge:
			orphan = fd
		}
	}
	if dup.ID == 0 || orphan.ID == 0 {
		f.t.Fatalf("setup: findings %+v", findings)
	}
	return p, dup, orphan
}

// TestOpsRefundThisCharge: the page of an open duplicate-charge finding
// offers "Refund this charge", with the finding's amount as the default;
// the POST needs the session's CSRF token and the same origin, and
// evidence; it starts a refund of the duplicate's payment through the
// refund process, records the operator's action, and shows the refund. A
// second refund beyond the charge is refused; the worker then refunds
// the duplicate at the provider, which ends with one net charge. Nothing
// on the pages charges.
func TestOpsRefundThisCharge(t *testing.T) {
	f := setupOps(t)
	p, dup, orphan := f.duplicateFinding()
	session, csrf := f.login("ivan")
	path := fmt.Sprintf("/ops/findings/%d/refund", dup.ID)
	none := func(what string) {
		t.Helper()
		if rs := f.refundsOf(p.ID); len(rs) != 0 {
			t.Fatalf("%s made refunds: %+v", what, rs)
		}
	}

	page := f.do("GET", fmt.Sprintf("/ops/findings/%d", dup.ID), nil, nil, session)
	if page.status != http.StatusOK || !strings.Contains(page.body, `id="refund-form"`) ||
		!strings.Contains(page.body, `action="`+path+`"`) || !strings.Contains(page.body, `name="amount" min="1" step="1" required value="1250"`) {
		t.Fatalf("the duplicate charge's page: %d, want the refund form with 1250 as the amount:\n%s", page.status, page.body)
	}
	if strings.Contains(strings.ToLower(page.body), "charge again") {
		t.Error("the finding's page offers to charge again")
	}
	if op := f.do("GET", fmt.Sprintf("/ops/findings/%d", orphan.ID), nil, nil, session); strings.Contains(op.body, `id="refund-form"`) {
		t.Error("an orphan charge's page offers the refund form: it names no purchase")
	}
	if c := f.do("GET", "/ops/purchases/"+p.ID, nil, nil, session); !strings.Contains(c.body, fmt.Sprintf(`href="/ops/findings/%d#refund"`, dup.ID)) ||
		!strings.Contains(c.body, `id="no-refunds"`) {
		t.Errorf("the case page does not link the refund of its duplicate charge, or lists refunds:\n%s", c.body)
	}

	// Forged and unauthenticated POSTs are refused.
	evidence := "two charges pi_… for one order in the dashboard <ticket 7>"
	for _, c := range []struct {
		name   string
		form   url.Values
		header map[string]string
		status int
	}{
		{"no csrf token", url.Values{"evidence": {evidence}}, nil, 403},
		{"wrong csrf token", url.Values{"evidence": {evidence}, "csrf": {"AAAA" + csrf[4:]}}, nil, 403},
		{"cross-site Origin", url.Values{"evidence": {evidence}, "csrf": {csrf}}, map[string]string{"Origin": "https://evil.example"}, 403},
		{"Sec-Fetch-Site cross-site", url.Values{"evidence": {evidence}, "csrf": {csrf}}, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
	} {
		if r := f.do("POST", path, c.form, c.header, session); r.status != c.status {
			t.Errorf("%s: %d, want %d", c.name, r.status, c.status)
		}
	}
	if r := f.do("POST", path, url.Values{"operator": {"mallory"}, "evidence": {"x"}}, nil); r.status != http.StatusUnauthorized {
		t.Errorf("no token or session: %d, want 401", r.status)
	}
	none("forged POSTs")

	// Without evidence, or with a bad amount, the page comes back with the
	// message and what was typed.
	for _, c := range []struct {
		name, amount, evidence, says string
	}{
		{"no evidence", "1250", " ", "evidence: is required"},
		{"a fractional amount", "12.50", evidence, "not a positive whole number"},
		{"a negative amount", "-5", evidence, "not a positive whole number"},
	} {
		r := f.do("POST", path, url.Values{"csrf": {csrf}, "amount": {c.amount}, "evidence": {c.evidence}}, nil, session)
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, `id="flash"`) || !strings.Contains(r.body, c.says) ||
			!strings.Contains(r.body, `value="`+c.amount+`"`) || !strings.Contains(r.body, `id="refund-form"`) {
			t.Errorf("%s: %d, want 400 with the message and the form as typed:\n%s", c.name, r.status, r.body)
		}
	}
	none("refused refunds")

	// The refund: amount left empty is the whole charge.
	r := f.do("POST", path, url.Values{"csrf": {csrf}, "amount": {""}, "evidence": {evidence}},
		map[string]string{"Origin": f.srv.URL, "Sec-Fetch-Site": "same-origin"}, session)
	loc := r.header.Get("Location")
	if r.status != http.StatusSeeOther || !strings.HasPrefix(loc, "/ops/refunds/ref_") {
		t.Fatalf("refund this charge: %d %q\n%s", r.status, loc, r.body)
	}
	rs := f.refundsOf(p.ID)
	if len(rs) != 1 {
		t.Fatalf("refunds after the action: %+v, want 1", rs)
	}
	ref := rs[0]
	if ref.PaymentID != dup.PaymentID || ref.PaymentID == p.ProviderPaymentID || ref.FindingID != dup.ID || ref.Amount != 1250 ||
		ref.RequestedBy != "ivan" || ref.State != statemachine.Created || strings.Contains(ref.Reason, evidence) {
		t.Errorf("the refund: %+v, want 1250 of the duplicate %s, for finding %d, requested by ivan, without the operator's evidence (the API client reads the reason)", ref, dup.PaymentID, dup.ID)
	}
	if !strings.HasPrefix(loc, "/ops/refunds/"+ref.ID+"?") {
		t.Errorf("redirected to %q, want the refund's page", loc)
	}
	acts := f.record(p.ID).Actions
	if len(acts) == 0 || acts[len(acts)-1].Action != "refund" || acts[len(acts)-1].Operator != "ivan" ||
		acts[len(acts)-1].RefundID != ref.ID || acts[len(acts)-1].Evidence != evidence {
		t.Errorf("operator actions: %+v, want the refund by ivan", acts)
	}
	shown := f.do("GET", loc, nil, nil, session)
	for _, want := range []string{"Refund " + ref.ID + " of 12.50 EUR from payment " + dup.PaymentID + " started by ivan", `id="flash"`,
		dup.PaymentID, fmt.Sprintf(`href="/ops/findings/%d"`, dup.ID), "st-created", "refund by ivan", "&lt;ticket 7&gt;"} {
		if !strings.Contains(shown.body, want) {
			t.Errorf("the refund's page lacks %q:\n%s", want, shown.body)
		}
	}
	if page := f.do("GET", "/ops/refunds/"+ref.ID+"?flash=Refunded+twice", nil, nil, session); strings.Contains(page.body, "Refunded twice") {
		t.Error("an unsigned flash message is shown on a refund's page")
	}

	// The finding's page lists the refund; a second one is refused: the
	// first, pending, takes the whole charge.
	page = f.do("GET", fmt.Sprintf("/ops/findings/%d", dup.ID), nil, nil, session)
	if !strings.Contains(regexp.MustCompile(`(?s)<table id="finding-refunds">.*?</table>`).FindString(page.body), ref.ID) {
		t.Errorf("the finding's page does not list its refund:\n%s", page.body)
	}
	r = f.do("POST", path, url.Values{"operator": {"ops-script"}, "amount": {"1"}, "evidence": {"again"}}, opsBearer)
	if code, msg := r.errCode(t); r.status != http.StatusConflict || code != "refund_exceeds_payment" || !strings.Contains(msg, "would exceed") {
		t.Errorf("a second refund of the charge: %d %s %q, want 409 refund_exceeds_payment", r.status, code, msg)
	}
	if n := len(f.refundsOf(p.ID)); n != 1 {
		t.Errorf("%d refunds after the refused second one, want 1", n)
	}

	// Scripts: the errors of the action.
	for _, c := range []struct {
		name, path string
		form       url.Values
		status     int
		code       string
	}{
		{"no operator", path, url.Values{"evidence": {"x"}}, 400, "invalid_request"},
		{"an orphan charge", fmt.Sprintf("/ops/findings/%d/refund", orphan.ID), url.Values{"operator": {"s"}, "evidence": {"x"}}, 400, "invalid_request"},
		{"an unknown finding", "/ops/findings/999999/refund", url.Values{"operator": {"s"}, "evidence": {"x"}}, 404, "not_found"},
		{"not a finding id", "/ops/findings/pur_1/refund", url.Values{"operator": {"s"}, "evidence": {"x"}}, 404, "not_found"},
	} {
		r := f.do("POST", c.path, c.form, opsBearer)
		if code, msg := r.errCode(t); r.status != c.status || code != c.code {
			t.Errorf("%s: %d %s %q, want %d %s", c.name, r.status, code, msg, c.status, c.code)
		}
	}

	// The worker refunds the duplicate at the provider: one net charge.
	if n := f.fake.NetCharges(p.ID); n != 2 {
		t.Fatalf("setup: %d net charges at the provider before the refund, want 2", n)
	}
	if _, err := f.svc.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.refundsOf(p.ID)[0]; got.State != statemachine.Succeeded {
		t.Fatalf("the refund after the worker: %s", got.State)
	}
	if n := f.fake.NetCharges(p.ID); n != 1 {
		t.Errorf("%d net charges at the provider after the refund, want 1", n)
	}
	if c := f.do("GET", "/ops/purchases/"+p.ID, nil, nil, session); !strings.Contains(
		regexp.MustCompile(`(?s)<table id="case-refunds">.*?</table>`).FindString(c.body), ref.ID) {
		t.Errorf("the case page does not list the refund:\n%s", c.body)
	}

	// Once the finding is closed, its charge is not refunded from it.
	if _, err := f.svc.CloseFinding(context.Background(), dup.ID, "ivan", "refunded "+ref.ID); err != nil {
		t.Fatal(err)
	}
	r = f.do("POST", path, url.Values{"operator": {"ops-script"}, "amount": {"1"}, "evidence": {"x"}}, opsBearer)
	if code, _ := r.errCode(t); r.status != http.StatusConflict || code != "already_closed" {
		t.Errorf("refund from a closed finding: %d %s, want 409 already_closed", r.status, r.body)
	}
	if page := f.do("GET", fmt.Sprintf("/ops/findings/%d", dup.ID), nil, nil, session); strings.Contains(page.body, `id="refund-form"`) {
		t.Error("a closed finding's page still offers the refund form")
	}
}

// TestOpsEscalatedRefunds: a refund whose create went unanswered and ran
// out of attempts is on the operator list beside the purchases, in HTML
// and JSON; its page shows its record and warns against refunding it
// again; the purchase's case lists it.
func TestOpsEscalatedRefunds(t *testing.T) {
	f := setupOps(t)
	p := f.run("cus-refund")
	if p.State != statemachine.Succeeded {
		t.Fatalf("setup: %s", p.State)
	}
	ctx := context.Background()
	ref, err := f.svc.CreateRefund(ctx, reconcile.NewRefund{PurchaseID: p.ID, Amount: 500, Reason: "late delivery", RequestedBy: "cli"})
	if err != nil {
		t.Fatal(err)
	}
	f.fake.ScriptRefund(ref.ID, fakeprovider.LostReply)
	if _, err := f.svc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	got := f.refundsOf(p.ID)[0]
	if got.State != statemachine.Uncertain || !got.Escalated() {
		t.Fatalf("setup: the refund is %s, escalated %v; want uncertain and escalated", got.State, got.Escalated())
	}

	session, _ := f.login("judy")
	list := f.do("GET", "/ops", nil, nil, session)
	table := regexp.MustCompile(`(?s)<table id="refunds">.*?</table>`).FindString(list.body)
	for _, want := range []string{`href="/ops/refunds/` + ref.ID + `"`, `href="/ops/purchases/` + p.ID + `"`, "5.00 EUR",
		reasonText(got.EscalationReason), "st-uncertain"} {
		if !strings.Contains(table, want) {
			t.Errorf("the escalated refunds lack %q:\n%s", want, list.body)
		}
	}

	var esc struct {
		RefundsCount int `json:"refunds_count"`
		Refunds      []struct {
			RefundID         string `json:"refund_id"`
			PurchaseID       string `json:"purchase_id"`
			State            string `json:"state"`
			EscalationReason string `json:"escalation_reason"`
			Attempts         []any  `json:"attempts"`
		} `json:"refunds"`
	}
	r := f.do("GET", "/ops/escalations", nil, opsBearer)
	if err := json.Unmarshal([]byte(r.body), &esc); err != nil || esc.RefundsCount != 1 || len(esc.Refunds) != 1 ||
		esc.Refunds[0].RefundID != ref.ID || esc.Refunds[0].PurchaseID != p.ID || esc.Refunds[0].State != "uncertain" ||
		esc.Refunds[0].EscalationReason != string(got.EscalationReason) || len(esc.Refunds[0].Attempts) != 1 {
		t.Errorf("GET /ops/escalations: %v\n%s", err, r.body)
	}

	page := f.do("GET", "/ops/refunds/"+ref.ID, nil, nil, session)
	for _, want := range []string{ref.ID, "st-uncertain", `id="never-again"`, "payrecon-" + ref.ID, "refund_create", "late delivery",
		`href="/ops/purchases/` + p.ID + `"`} {
		if !strings.Contains(page.body, want) {
			t.Errorf("the refund's page lacks %q:\n%s", want, page.body)
		}
	}
	if strings.Contains(page.body, "<form method=\"post\" action=\"/ops/refunds") {
		t.Error("the refund's page offers an action")
	}
	var rj struct {
		RefundID    string `json:"refund_id"`
		State       string `json:"state"`
		ProviderKey string `json:"provider_key"`
		Transitions []any  `json:"transitions"`
		Attempts    []any  `json:"attempts"`
	}
	r = f.do("GET", "/ops/refunds/"+ref.ID, nil, opsBearer)
	if err := json.Unmarshal([]byte(r.body), &rj); err != nil || rj.RefundID != ref.ID || rj.State != "uncertain" ||
		rj.ProviderKey != ref.ProviderKey || len(rj.Transitions) != 2 || len(rj.Attempts) != 1 {
		t.Errorf("GET /ops/refunds/%s as JSON: %v\n%s", ref.ID, err, r.body)
	}
	for _, c := range []struct {
		name   string
		header map[string]string
		status int
	}{
		{"unknown refund", opsBearer, 404},
		{"no token", nil, 401},
	} {
		id := ref.ID
		if c.status == 404 {
			id = "ref_nope"
		}
		if r := f.do("GET", "/ops/refunds/"+id, nil, c.header); r.status != c.status || strings.Contains(r.body, "late delivery") {
			t.Errorf("%s: %d, want %d", c.name, r.status, c.status)
		}
	}

	c := f.do("GET", "/ops/purchases/"+p.ID, nil, nil, session)
	if !strings.Contains(regexp.MustCompile(`(?s)<table id="case-refunds">.*?</table>`).FindString(c.body), ref.ID) {
		t.Errorf("the case page does not list the refund:\n%s", c.body)
	}
	var cj struct {
		Refunds []struct {
			RefundID string `json:"refund_id"`
		} `json:"refunds"`
	}
	r = f.do("GET", "/ops/purchases/"+p.ID, nil, opsBearer)
	if err := json.Unmarshal([]byte(r.body), &cj); err != nil || len(cj.Refunds) != 1 || cj.Refunds[0].RefundID != ref.ID {
		t.Errorf("the case's JSON: %v\n%s", err, r.body)
	}
}

// reasonText is an escalation reason as the pages show it.
func reasonText(r reconcile.EscalationReason) string { return strings.ReplaceAll(string(r), "_", " ") }
