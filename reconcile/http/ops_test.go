package http_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
	"github.com/payrecon/payrecon/statemachine"
)

const opsToken = "ops-token-0123456789abcdef"

// opsFixture serves the operator pages over a real store, with a worker
// that escalates a purchase after its first unresolved attempt.
type opsFixture struct {
	t     *testing.T
	store reconcile.Store
	clock *testClock
	fake  *fakeprovider.Fake
	svc   *reconcile.Service
	srv   *httptest.Server
	http  *http.Client // does not follow redirects
}

func setupOps(t *testing.T) *opsFixture {
	t.Helper()
	f := &opsFixture{t: t, store: newStore(t), clock: newTestClock()}
	f.fake = fakeprovider.New(fakeprovider.Config{Now: f.clock.Now})
	svc, err := reconcile.New(f.store, f.fake, reconcile.Config{
		WorkerID: "worker-1", MaxAttempts: 1, Now: f.clock.Now, Logger: discardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	ops, err := rhttp.NewOps(svc, rhttp.OpsConfig{Token: opsToken, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	s := rhttp.New(svc, rhttp.Config{Logger: discardLogger()})
	ops.Register(s)
	f.srv = httptest.NewServer(s)
	t.Cleanup(f.srv.Close)
	f.http = &http.Client{
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return f
}

// create stores a purchase without working it.
func (f *opsFixture) create(customer string) reconcile.Purchase {
	f.t.Helper()
	p, err := f.svc.CreatePurchase(context.Background(), reconcile.NewPurchase{
		Customer: customer, Amount: 1250, Currency: "eur", Description: "annual plan",
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// run creates a purchase, scripts faults for its creates and runs the
// worker once.
func (f *opsFixture) run(customer string, faults ...fakeprovider.Fault) reconcile.Purchase {
	f.t.Helper()
	p := f.create(customer)
	if len(faults) > 0 {
		f.fake.Script(p.ID, faults...)
	}
	if _, err := f.svc.RunOnce(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	return f.record(p.ID).Purchase
}

// escalated makes a purchase whose create was charged but whose reply was
// lost: uncertain, and (MaxAttempts 1) on the operator list. Further
// scripted faults apply to later replays of its create.
func (f *opsFixture) escalated(customer string, later ...fakeprovider.Fault) reconcile.Purchase {
	f.t.Helper()
	p := f.run(customer, append([]fakeprovider.Fault{fakeprovider.LostReply}, later...)...)
	if p.State != statemachine.Uncertain || !p.Escalated() {
		f.t.Fatalf("setup: purchase %s is %s, escalated %v; want uncertain and escalated", p.ID, p.State, p.Escalated())
	}
	return p
}

// record reads a purchase with its whole audit from the database.
func (f *opsFixture) record(id string) reconcile.Case {
	f.t.Helper()
	c, err := f.svc.Case(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	c.Age = 0
	return c
}

type opsResp struct {
	status int
	body   string
	header http.Header
}

func (r opsResp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatalf("response is not JSON (%v): %d %s", err, r.status, r.body)
	}
	return m
}

// errCode returns the "error.code" of a JSON error body.
func (r opsResp) errCode(t *testing.T) (string, string) {
	t.Helper()
	e, _ := r.json(t)["error"].(map[string]any)
	code, _ := e["code"].(string)
	msg, _ := e["message"].(string)
	return code, msg
}

// do sends a request; form, if set, is the urlencoded body; header
// values are set as given.
func (f *opsFixture) do(method, path string, form url.Values, header map[string]string, cookies ...*http.Cookie) opsResp {
	f.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, f.srv.URL+path, body)
	if err != nil {
		f.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := f.http.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return opsResp{resp.StatusCode, string(b), resp.Header}
}

var opsBearer = map[string]string{"Authorization": "Bearer " + opsToken}

var opsCSRFField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func opsFormToken(t *testing.T, body string) string {
	t.Helper()
	m := opsCSRFField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no csrf field in the page:\n%s", body)
	}
	return m[1]
}

func opsCookie(t *testing.T, r opsResp, name string) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s cookie in the response (%d)", name, r.status)
	return nil
}

// login signs in through the form and returns the session cookie and the
// CSRF token of its forms.
func (f *opsFixture) login(name string) (*http.Cookie, string) {
	f.t.Helper()
	form := f.do("GET", "/ops/login", nil, nil)
	if form.status != http.StatusOK {
		f.t.Fatalf("GET /ops/login: %d", form.status)
	}
	pre := opsCookie(f.t, form, "payrecon_ops_login")
	r := f.do("POST", "/ops/login", url.Values{
		"operator": {name}, "token": {opsToken}, "csrf": {opsFormToken(f.t, form.body)}, "next": {"/ops"},
	}, nil, pre)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ops" {
		f.t.Fatalf("POST /ops/login: %d %s\n%s", r.status, r.header.Get("Location"), r.body)
	}
	session := opsCookie(f.t, r, "payrecon_ops_session")
	if !session.HttpOnly || !session.Secure || session.SameSite != http.SameSiteStrictMode || session.Path != "/ops" {
		f.t.Fatalf("session cookie attributes: %+v", session)
	}
	list := f.do("GET", "/ops", nil, nil, session)
	if list.status != http.StatusOK {
		f.t.Fatalf("GET /ops with the session: %d", list.status)
	}
	return session, opsFormToken(f.t, list.body)
}

// opsSnapshot is everything an operator action could change.
type opsSnapshot struct {
	P           reconcile.Purchase
	Transitions []reconcile.TransitionRecord
	Actions     []reconcile.OperatorAction
	Job         reconcile.Job
}

func (f *opsFixture) snapshot(id string) opsSnapshot {
	c := f.record(id)
	return opsSnapshot{c.Purchase, c.Transitions, c.Actions, c.Job}
}

func (f *opsFixture) unchanged(before opsSnapshot, what string) {
	f.t.Helper()
	if after := f.snapshot(before.P.ID); !reflect.DeepEqual(before, after) {
		f.t.Fatalf("%s changed the purchase:\nbefore %+v\nafter  %+v", what, before, after)
	}
}

func TestOpsRefusesWeakToken(t *testing.T) {
	for _, tok := range []string{"", "short-token"} {
		if _, err := rhttp.NewOps(&reconcile.Service{}, rhttp.OpsConfig{Token: tok}); err == nil {
			t.Errorf("NewOps(token %q) = nil error, want a refusal", tok)
		}
	}
}

func TestOpsRequiresToken(t *testing.T) {
	f := setupOps(t)
	p := f.escalated("cus-auth")
	before := f.snapshot(p.ID)
	wrong := map[string]string{"Authorization": "Bearer not-the-ops-token-0123456789"}
	malformed := map[string]string{"Authorization": "Basic " + opsToken}

	// An expired session, and a session whose signature was tampered with.
	session, _ := f.login("alice")
	raw, err := base64.RawURLEncoding.DecodeString(session.Value)
	if err != nil || !strings.HasPrefix(string(raw), "alice|") {
		t.Fatalf("session cookie %q is not base64(name|expiry|mac): %v", raw, err)
	}
	forged := *session
	forged.Value = base64.RawURLEncoding.EncodeToString([]byte("admin|" + strings.TrimPrefix(string(raw), "alice|")))

	for _, path := range []string{"/ops", "/ops/purchases/" + p.ID} {
		for name, hdr := range map[string]map[string]string{"no token": nil, "wrong token": wrong, "basic auth": malformed} {
			r := f.do("GET", path, nil, hdr)
			if r.status != http.StatusUnauthorized {
				t.Errorf("GET %s with %s: %d, want 401", path, name, r.status)
			}
			// A browser user sees the login form.
			if !strings.Contains(r.body, `action="/ops/login"`) || !strings.Contains(r.body, `name="token"`) {
				t.Errorf("GET %s with %s: the 401 body is not the login page:\n%s", path, name, r.body)
			}
			if strings.Contains(r.body, p.ID) && path == "/ops" {
				t.Errorf("GET %s with %s: the 401 page shows a case", path, name)
			}
		}
		if r := f.do("GET", path, nil, nil, &forged); r.status != http.StatusUnauthorized {
			t.Errorf("GET %s with a forged session: %d, want 401", path, r.status)
		}
		// A valid session cookie does not rescue a wrong bearer token.
		if r := f.do("GET", path, nil, wrong, session); r.status != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token and a session: %d, want 401", path, r.status)
		}
	}
	for name, hdr := range map[string]map[string]string{"no token": nil, "wrong token": wrong, "basic auth": malformed} {
		r := f.do("GET", "/ops/escalations", nil, hdr)
		if code, _ := r.errCode(t); r.status != http.StatusUnauthorized || code != "unauthorized" {
			t.Errorf("GET /ops/escalations with %s: %d %s, want 401 unauthorized JSON", name, r.status, r.body)
		}
		if strings.Contains(r.body, p.ID) {
			t.Errorf("GET /ops/escalations with %s leaks the case", name)
		}
		form := url.Values{"operator": {"mallory"}, "to": {"declined"}, "evidence": {"x"}, "saw": {"x"}, "version": {fmt.Sprint(p.Version)}}
		for _, action := range []string{"resolve", "recheck", "note"} {
			if r := f.do("POST", "/ops/purchases/"+p.ID+"/"+action, form, hdr); r.status != http.StatusUnauthorized {
				t.Errorf("POST %s with %s: %d, want 401", action, name, r.status)
			}
		}
	}
	if r := f.do("GET", "/ops/escalations", nil, opsBearer); r.status != http.StatusOK {
		t.Errorf("GET /ops/escalations with the ops token: %d", r.status)
	}

	f.clock.Advance(12*time.Hour + time.Second) // past the default session TTL
	if r := f.do("GET", "/ops", nil, nil, session); r.status != http.StatusUnauthorized || !strings.Contains(r.body, "expired") {
		t.Errorf("GET /ops with an expired session: %d, want 401 saying it expired", r.status)
	}
	f.unchanged(before, "unauthenticated requests")
}

func TestOpsResolveRefusedChangesNothing(t *testing.T) {
	f := setupOps(t)
	p := f.escalated("cus-refuse")
	created := f.create("cus-created") // never submitted: no charge to settle
	before, beforeCreated := f.snapshot(p.ID), f.snapshot(created.ID)
	v := fmt.Sprint(p.Version)
	saw := "outcome=succeeded status=succeeded"

	cases := []struct {
		name   string
		id     string
		form   url.Values
		status int
		code   string
		says   string
	}{
		{"no evidence", p.ID, url.Values{"to": {"succeeded"}, "saw": {saw}, "version": {v}}, 400, "invalid_request", "evidence"},
		{"blank evidence", p.ID, url.Values{"to": {"succeeded"}, "evidence": {"  \n "}, "saw": {saw}, "version": {v}}, 400, "invalid_request", "evidence"},
		{"to uncertain", p.ID, url.Values{"to": {"uncertain"}, "evidence": {"x"}, "saw": {saw}, "version": {v}}, 400, "invalid_request", "succeeded or declined"},
		{"to reconciling", p.ID, url.Values{"to": {"reconciling"}, "evidence": {"x"}, "saw": {saw}, "version": {v}}, 400, "invalid_request", "succeeded or declined"},
		{"no target", p.ID, url.Values{"evidence": {"x"}, "saw": {saw}, "version": {v}}, 400, "invalid_request", "to"},
		{"live view not shown", p.ID, url.Values{"to": {"succeeded"}, "evidence": {"x"}, "version": {v}}, 400, "invalid_request", "saw"},
		{"no version", p.ID, url.Values{"to": {"succeeded"}, "evidence": {"x"}, "saw": {saw}}, 400, "invalid_request", "version"},
		{"no operator", p.ID, url.Values{"operator": {" "}, "to": {"succeeded"}, "evidence": {"x"}, "saw": {saw}, "version": {v}}, 400, "invalid_request", "operator"},
		{"stale version", p.ID, url.Values{"to": {"succeeded"}, "evidence": {"x"}, "saw": {saw}, "version": {fmt.Sprint(p.Version - 1)}}, 409, "stale", "changed since"},
		{"never submitted", created.ID, url.Values{"to": {"succeeded"}, "evidence": {"x"}, "saw": {saw}, "version": {fmt.Sprint(created.Version)}}, 409, "forbidden_transition", "created"},
		{"unknown purchase", "pur_nope", url.Values{"to": {"succeeded"}, "evidence": {"x"}, "saw": {saw}, "version": {"1"}}, 404, "not_found", "pur_nope"},
	}
	for _, c := range cases {
		if !c.form.Has("operator") {
			c.form.Set("operator", "bob")
		}
		r := f.do("POST", "/ops/purchases/"+c.id+"/resolve", c.form, opsBearer)
		code, msg := r.errCode(t)
		if r.status != c.status || code != c.code || !strings.Contains(msg, c.says) {
			t.Errorf("%s: %d %s %q, want %d %s mentioning %q", c.name, r.status, code, msg, c.status, c.code, c.says)
		}
	}

	// A browser gets the case page again with the message, the status and
	// what was typed.
	session, csrf := f.login("carol")
	r := f.do("POST", "/ops/purchases/"+p.ID+"/resolve", url.Values{
		"csrf": {csrf}, "to": {"uncertain"}, "evidence": {"typed <b>evidence</b>"}, "saw": {saw}, "version": {v},
	}, nil, session)
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, `id="flash"`) ||
		!strings.Contains(r.body, "succeeded or declined") || !strings.Contains(r.body, "typed &lt;b&gt;evidence&lt;/b&gt;") {
		t.Errorf("browser resolve to uncertain: %d, want 400 with the message and the typed evidence escaped:\n%s", r.status, r.body)
	}
	// Closing a case that is not final with a note is refused too.
	r = f.do("POST", "/ops/purchases/"+p.ID+"/note", url.Values{"operator": {"bob"}, "text": {"done"}, "close": {"1"}}, opsBearer)
	if code, _ := r.errCode(t); r.status != http.StatusBadRequest || code != "invalid_request" {
		t.Errorf("close a non-final case: %d %s, want 400", r.status, r.body)
	}

	f.unchanged(before, "refused resolves")
	f.unchanged(beforeCreated, "refused resolve of a created purchase")
	if page := f.do("GET", "/ops/purchases/"+created.ID, nil, nil, session); strings.Contains(page.body, `id="resolve-form"`) {
		t.Errorf("the page of a created purchase offers the resolve form")
	}
}

func TestOpsResolveFinalRefused(t *testing.T) {
	f := setupOps(t)
	p := f.run("cus-final") // no fault: succeeds
	if p.State != statemachine.Succeeded {
		t.Fatalf("setup: %s", p.State)
	}
	before := f.snapshot(p.ID)
	form := url.Values{"operator": {"bob"}, "to": {"declined"}, "evidence": {"customer says no"}, "saw": {"x"}, "version": {fmt.Sprint(p.Version)}}
	r := f.do("POST", "/ops/purchases/"+p.ID+"/resolve", form, opsBearer)
	code, msg := r.errCode(t)
	if r.status != http.StatusConflict || code != "already_final" || !strings.Contains(msg, "already final") || !strings.Contains(msg, "succeeded") {
		t.Errorf("resolve a succeeded purchase: %d %s %q, want 409 already_final naming the state", r.status, code, msg)
	}
	r = f.do("POST", "/ops/purchases/"+p.ID+"/recheck", url.Values{"operator": {"bob"}}, opsBearer)
	if code, _ := r.errCode(t); r.status != http.StatusConflict || code != "already_final" {
		t.Errorf("recheck a succeeded purchase: %d %s, want 409 already_final", r.status, r.body)
	}

	session, _ := f.login("carol")
	page := f.do("GET", "/ops/purchases/"+p.ID, nil, nil, session)
	if page.status != http.StatusOK || strings.Contains(page.body, `id="resolve-form"`) || !strings.Contains(page.body, `id="no-resolve"`) ||
		!strings.Contains(page.body, "cannot change a final state") {
		t.Errorf("the page of a final purchase: %d; want no resolve form and the reason:\n%s", page.status, page.body)
	}
	csrf := opsFormToken(t, page.body)
	form.Del("operator")
	form.Set("csrf", csrf)
	r = f.do("POST", "/ops/purchases/"+p.ID+"/resolve", form, nil, session)
	if r.status != http.StatusConflict || !strings.Contains(r.body, "already final") {
		t.Errorf("browser resolve of a final purchase: %d, want 409 saying it is already final:\n%s", r.status, r.body)
	}
	f.unchanged(before, "resolving a final purchase")
}

func TestOpsCSRF(t *testing.T) {
	f := setupOps(t)
	p := f.escalated("cus-csrf")
	before := f.snapshot(p.ID)
	session, csrf := f.login("dave")
	path := "/ops/purchases/" + p.ID + "/note"

	refused := []struct {
		name   string
		form   url.Values
		header map[string]string
	}{
		{"no csrf token", url.Values{"text": {"hello"}}, nil},
		{"wrong csrf token", url.Values{"text": {"hello"}, "csrf": {"AAAA" + csrf[4:]}}, nil},
		{"csrf token in the query only", url.Values{"text": {"hello"}}, nil},
		{"cross-site Origin", url.Values{"text": {"hello"}, "csrf": {csrf}}, map[string]string{"Origin": "https://evil.example"}},
		{"Sec-Fetch-Site cross-site", url.Values{"text": {"hello"}, "csrf": {csrf}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"Sec-Fetch-Site same-site", url.Values{"text": {"hello"}, "csrf": {csrf}}, map[string]string{"Sec-Fetch-Site": "same-site"}},
	}
	for _, c := range refused {
		target := path
		if c.name == "csrf token in the query only" {
			target += "?csrf=" + url.QueryEscape(csrf)
		}
		for _, action := range []string{target, "/ops/purchases/" + p.ID + "/recheck", "/ops/purchases/" + p.ID + "/resolve"} {
			if c.name == "csrf token in the query only" && action != target {
				continue
			}
			r := f.do("POST", action, c.form, c.header, session)
			if r.status != http.StatusForbidden {
				t.Errorf("%s: POST %s: %d, want 403", c.name, action, r.status)
			}
		}
	}
	// Bearer clients are also subject to the cross-origin check.
	if r := f.do("POST", path, url.Values{"operator": {"dave"}, "text": {"x"}},
		map[string]string{"Authorization": "Bearer " + opsToken, "Sec-Fetch-Site": "cross-site"}); r.status != http.StatusForbidden {
		t.Errorf("cross-site bearer POST: %d, want 403", r.status)
	}
	// Logging in and out from another site, or without the form's token.
	form := f.do("GET", "/ops/login", nil, nil)
	pre := opsCookie(t, form, "payrecon_ops_login")
	loginForm := url.Values{"operator": {"eve"}, "token": {opsToken}, "csrf": {opsFormToken(t, form.body)}}
	if r := f.do("POST", "/ops/login", loginForm, map[string]string{"Origin": "https://evil.example"}, pre); r.status != http.StatusForbidden {
		t.Errorf("cross-site login: %d, want 403", r.status)
	}
	if r := f.do("POST", "/ops/login", loginForm, nil); r.status != http.StatusForbidden {
		t.Errorf("login without the pre-session cookie: %d, want 403", r.status)
	}
	wrongTok := url.Values{"operator": {"eve"}, "token": {"wrong-token-0123456789"}, "csrf": loginForm["csrf"]}
	if r := f.do("POST", "/ops/login", wrongTok, nil, pre); r.status != http.StatusUnauthorized || strings.Contains(r.header.Get("Set-Cookie"), "payrecon_ops_session=") {
		t.Errorf("login with a wrong token: %d, want 401 and no session", r.status)
	}
	if r := f.do("POST", "/ops/logout", url.Values{}, nil, session); r.status != http.StatusForbidden {
		t.Errorf("logout without the csrf token: %d, want 403", r.status)
	}
	f.unchanged(before, "forged POSTs")

	// The same note from the page itself goes through.
	r := f.do("POST", path, url.Values{"text": {"hello"}, "csrf": {csrf}},
		map[string]string{"Origin": f.srv.URL, "Sec-Fetch-Site": "same-origin"}, session)
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/ops/purchases/"+p.ID+"?") {
		t.Fatalf("same-origin note with the token: %d %s, want 303 to the case", r.status, r.header.Get("Location"))
	}
	if page := f.do("GET", r.header.Get("Location"), nil, nil, session); !strings.Contains(page.body, "Note added.") {
		t.Errorf("the flash message is not shown after the redirect:\n%s", page.body)
	}
	// A flash message that the server did not sign is not shown.
	if page := f.do("GET", "/ops/purchases/"+p.ID+"?flash=Charge+the+customer+now", nil, nil, session); strings.Contains(page.body, "Charge the customer") {
		t.Errorf("an unsigned flash message is shown")
	}
	acts := f.record(p.ID).Actions
	if len(acts) != 1 || acts[0].Operator != "dave" || acts[0].Action != "note" || acts[0].Evidence != "hello" {
		t.Errorf("operator actions: %+v, want dave's note", acts)
	}
	if r := f.do("POST", "/ops/logout", url.Values{"csrf": {csrf}}, nil, session); r.status != http.StatusSeeOther ||
		!strings.Contains(r.header.Get("Set-Cookie"), "payrecon_ops_session=;") {
		t.Errorf("logout: %d %q, want 303 clearing the cookie", r.status, r.header.Get("Set-Cookie"))
	}
}

func TestOpsBearerJSONFlow(t *testing.T) {
	f := setupOps(t)
	// Charged, reply lost; the recheck's replay of the create times out, so
	// the purchase stays uncertain for the operator to resolve.
	p := f.escalated("cus-<script>alert(1)</script>", fakeprovider.Timeout)
	other := f.run("cus-fine")
	ctx := context.Background()
	if _, err := f.svc.ApplyEvent(ctx, reconcile.Event{
		Provider: "stripe", ID: "evt_ops_1", Type: "charge.updated", PurchaseID: p.ID,
		PayloadHash: "0f", Payload: []byte(`{"id":"evt_ops_1"}`),
	}); err != nil {
		t.Fatal(err)
	}

	// List.
	r := f.do("GET", "/ops/escalations", nil, opsBearer)
	if r.status != http.StatusOK {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	var list struct {
		Count int `json:"count"`
		Cases []struct {
			PurchaseID        string  `json:"purchase_id"`
			ProviderPaymentID string  `json:"provider_payment_id"`
			Amount            int64   `json:"amount"`
			Currency          string  `json:"currency"`
			Customer          string  `json:"customer"`
			State             string  `json:"state"`
			AgeSeconds        int64   `json:"age_seconds"`
			Age               string  `json:"age"`
			EscalationReason  string  `json:"escalation_reason"`
			EscalatedAt       *string `json:"escalated_at"`
			Attempts          []struct {
				Op, Outcome, Error string
			} `json:"attempts"`
			Transitions []struct{ From, To, Cause string } `json:"transitions"`
			Webhooks    []struct {
				EventID    string `json:"event_id"`
				Type       string `json:"type"`
				Outcome    string `json:"outcome"`
				ReceivedAt string `json:"received_at"`
			} `json:"webhooks"`
			OperatorActions []any `json:"operator_actions"`
		} `json:"cases"`
	}
	if err := json.Unmarshal([]byte(r.body), &list); err != nil {
		t.Fatal(err)
	}
	if list.Count != 1 || len(list.Cases) != 1 {
		t.Fatalf("list: %d cases, want only %s (not %s):\n%s", list.Count, p.ID, other.ID, r.body)
	}
	c := list.Cases[0]
	if c.PurchaseID != p.ID || c.Amount != 1250 || c.Currency != "eur" || c.Customer != p.Customer || c.State != "uncertain" ||
		c.EscalationReason != "attempts_exhausted" || c.EscalatedAt == nil || c.Age == "" ||
		len(c.Attempts) != 1 || c.Attempts[0].Op != "create" || c.Attempts[0].Outcome != "unknown" || c.Attempts[0].Error == "" ||
		len(c.Transitions) != 2 || c.Transitions[1].To != "uncertain" ||
		len(c.Webhooks) != 1 || c.Webhooks[0].EventID != "evt_ops_1" || c.Webhooks[0].Outcome != "ignored" || c.Webhooks[0].ReceivedAt == "" ||
		c.OperatorActions == nil {
		t.Errorf("list case: %+v", c)
	}
	f.clock.Advance(90 * time.Minute)
	if r := f.do("GET", "/ops/escalations", nil, opsBearer); !strings.Contains(r.body, `"age_seconds": 5400`) || !strings.Contains(r.body, `"age": "1h 30m"`) {
		t.Errorf("age after 90 minutes:\n%s", r.body)
	}

	// Show: the provider's live view is asked now.
	show := func() (int64, string) {
		t.Helper()
		r := f.do("GET", "/ops/purchases/"+p.ID, nil, opsBearer)
		if r.status != http.StatusOK {
			t.Fatalf("show: %d %s", r.status, r.body)
		}
		var one struct {
			Version  int64 `json:"version"`
			LiveView struct {
				Outcome, PaymentID, Text string
			} `json:"live_view"`
		}
		if err := json.Unmarshal([]byte(r.body), &one); err != nil {
			t.Fatal(err)
		}
		if one.LiveView.Outcome != "succeeded" || !strings.Contains(one.LiveView.Text, "outcome=succeeded") {
			t.Fatalf("live view: %+v", one.LiveView)
		}
		return one.Version, one.LiveView.Text
	}
	version, _ := show()

	// Recheck: the replay under the same key times out; still uncertain.
	r = f.do("POST", "/ops/purchases/"+p.ID+"/recheck", url.Values{"operator": {"ops-script"}}, opsBearer)
	if r.status != http.StatusOK || !strings.Contains(r.body, "uncertain → uncertain") {
		t.Fatalf("recheck: %d %s", r.status, r.body)
	}
	if n := len(f.fake.ChargesFor(p.ID)); n != 1 {
		t.Fatalf("the provider holds %d charges for the purchase, want 1", n)
	}
	// The page shown before the recheck is stale now.
	stale := url.Values{"operator": {"ops-script"}, "to": {"succeeded"}, "evidence": {"dashboard"}, "saw": {"x"}, "version": {fmt.Sprint(version)}}
	if r := f.do("POST", "/ops/purchases/"+p.ID+"/resolve", stale, opsBearer); r.status != http.StatusConflict {
		t.Fatalf("resolve with the version from before the recheck: %d %s, want 409", r.status, r.body)
	}

	version, saw := show()
	evidence := "Stripe dashboard shows the charge succeeded; receipt sent to the customer"
	r = f.do("POST", "/ops/purchases/"+p.ID+"/resolve", url.Values{
		"operator": {"ops-script"}, "to": {"succeeded"}, "evidence": {evidence}, "saw": {saw}, "version": {fmt.Sprint(version)},
	}, opsBearer)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"state": "succeeded"`) {
		t.Fatalf("resolve: %d %s", r.status, r.body)
	}

	// The database.
	rec := f.record(p.ID)
	if rec.Purchase.State != statemachine.Succeeded || rec.Purchase.Escalated() || rec.Job.DoneAt.IsZero() {
		t.Errorf("after resolve: state %s, escalated %v, job done %v", rec.Purchase.State, rec.Purchase.Escalated(), rec.Job.DoneAt)
	}
	tr := rec.Transitions
	if len(tr) < 2 {
		t.Fatalf("transitions: %+v", tr)
	}
	for i, want := range [][2]statemachine.State{{statemachine.Uncertain, statemachine.Reconciling}, {statemachine.Reconciling, statemachine.Succeeded}} {
		got := tr[len(tr)-2+i]
		if got.From != want[0] || got.To != want[1] || got.Cause != reconcile.CauseOperator ||
			got.Actor != "operator:ops-script" || !strings.Contains(got.Evidence, evidence) {
			t.Errorf("transition %d: %+v, want %s→%s by the operator with the evidence", i, got, want[0], want[1])
		}
	}
	if len(rec.Actions) != 2 {
		t.Fatalf("operator actions: %+v", rec.Actions)
	}
	if a := rec.Actions[0]; a.Action != "recheck" || a.Operator != "ops-script" || !strings.Contains(a.Did, "uncertain → uncertain") {
		t.Errorf("recheck action: %+v", a)
	}
	if a := rec.Actions[1]; a.Action != "resolve" || a.Operator != "ops-script" || a.Saw != saw ||
		a.Did != "uncertain→reconciling→succeeded" || a.Evidence != evidence {
		t.Errorf("resolve action: %+v", a)
	}
	if r := f.do("GET", "/ops/escalations", nil, opsBearer); !strings.Contains(r.body, `"count": 0`) {
		t.Errorf("the resolved case is still listed:\n%s", r.body)
	}

	// The case page escapes what it shows.
	session, _ := f.login("carol")
	page := f.do("GET", "/ops/purchases/"+p.ID, nil, nil, session)
	if strings.Contains(page.body, "<script>alert(1)</script>") || !strings.Contains(page.body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the customer is not escaped on the case page")
	}
	if ct := page.header.Get("Content-Security-Policy"); !strings.Contains(ct, "default-src 'none'") || page.header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("page security headers: CSP %q, X-Frame-Options %q", ct, page.header.Get("X-Frame-Options"))
	}
}

func TestOpsFormFlow(t *testing.T) {
	f := setupOps(t)
	p := f.escalated("cus-form")
	session, _ := f.login("frank")

	list := f.do("GET", "/ops", nil, nil, session)
	if list.status != http.StatusOK || !strings.Contains(list.body, `href="/ops/purchases/`+p.ID+`"`) ||
		!strings.Contains(list.body, "12.50 EUR") || !strings.Contains(list.body, "attempts exhausted") {
		t.Fatalf("list page: %d\n%s", list.status, list.body)
	}
	page := f.do("GET", "/ops/purchases/"+p.ID, nil, nil, session)
	if page.status != http.StatusOK || !strings.Contains(page.body, `id="live-view"`) || !strings.Contains(page.body, "outcome=succeeded") {
		t.Fatalf("case page: %d\n%s", page.status, page.body)
	}
	for _, bad := range []string{"charge again", "Charge again", "failed"} {
		if strings.Contains(page.body, bad) {
			t.Errorf("the case page says %q", bad)
		}
	}
	saw := regexp.MustCompile(`name="saw" value="([^"]*)"`).FindStringSubmatch(page.body)
	ver := regexp.MustCompile(`name="version" value="([^"]*)"`).FindStringSubmatch(page.body)
	if saw == nil || ver == nil || ver[1] != fmt.Sprint(p.Version) {
		t.Fatalf("resolve form without saw/version (%v %v)", saw, ver)
	}
	r := f.do("POST", "/ops/purchases/"+p.ID+"/resolve", url.Values{
		"csrf": {opsFormToken(t, page.body)}, "to": {"declined"}, "evidence": {"bank statement: no debit"},
		"saw": {saw[1]}, "version": {ver[1]},
	}, map[string]string{"Origin": f.srv.URL}, session)
	if r.status != http.StatusSeeOther {
		t.Fatalf("resolve from the form: %d\n%s", r.status, r.body)
	}
	if got := f.do("GET", r.header.Get("Location"), nil, nil, session); !strings.Contains(got.body, "Resolved as declined by frank.") {
		t.Errorf("no flash after resolving:\n%s", got.body)
	}
	rec := f.record(p.ID)
	if rec.Purchase.State != statemachine.Declined || len(rec.Actions) != 1 || rec.Actions[0].Operator != "frank" ||
		rec.Actions[0].Saw != "outcome=succeeded status=succeeded payment="+f.fake.ChargesFor(p.ID)[0].ID+" amount=1250 eur" {
		t.Errorf("after the form resolve: %s %+v", rec.Purchase.State, rec.Actions)
	}
}

func TestOpsCloseContradictionWithNote(t *testing.T) {
	f := setupOps(t)
	p := f.run("cus-contra", fakeprovider.Decline)
	if p.State != statemachine.Declined {
		t.Fatalf("setup: %s", p.State)
	}
	pi := f.fake.ChargesFor(p.ID)[0].ID
	out, err := f.svc.ApplyEvent(context.Background(), reconcile.Event{
		Provider: "stripe", ID: "evt_contra", Type: "payment_intent.succeeded", Outcome: provider.Succeeded,
		PaymentID: pi, PurchaseID: p.ID, PayloadHash: "aa", Payload: []byte(`{}`),
	})
	if err != nil || out != reconcile.EventContradiction {
		t.Fatalf("setup: %s %v", out, err)
	}
	session, _ := f.login("gina")
	page := f.do("GET", "/ops/purchases/"+p.ID, nil, nil, session)
	if strings.Contains(page.body, `id="resolve-form"`) || !strings.Contains(page.body, `id="note-close"`) {
		t.Fatalf("contradiction page: want no resolve form and a close checkbox:\n%s", page.body)
	}
	r := f.do("POST", "/ops/purchases/"+p.ID+"/note", url.Values{
		"csrf": {opsFormToken(t, page.body)}, "text": {"refund REF-77 started"}, "close": {"1"},
	}, nil, session)
	if r.status != http.StatusSeeOther {
		t.Fatalf("note: %d\n%s", r.status, r.body)
	}
	rec := f.record(p.ID)
	if rec.Purchase.Escalated() || rec.Purchase.State != statemachine.Declined || len(rec.Actions) != 1 ||
		!strings.Contains(rec.Actions[0].Did, "closed escalation contradiction") {
		t.Errorf("after closing: escalated %v, %s, %+v", rec.Purchase.Escalated(), rec.Purchase.State, rec.Actions)
	}
}
