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
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
	"github.com/payrecon/payrecon/reconcile/postgres"
	"github.com/payrecon/payrecon/statemachine"
)

const opsToken = "ops-token-0123456789abcdef"

// newStoreAt returns a migrated store over a fresh database whose clock
// is clock, so that the store's times (due times, ages, findings) follow
// the test's clock.
func newStoreAt(t testing.TB, clock func() time.Time) reconcile.Store {
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

// opsFixture serves the operator pages over a real store, with a worker
// that escalates a purchase after its first unresolved attempt. The
// store, the worker, the fake provider and the sessions share one clock.
type opsFixture struct {
	t     *testing.T
	store reconcile.Store
	clock *testClock
	fake  *fakeprovider.Fake
	svc   *reconcile.Service
	srv   *httptest.Server
	http  *http.Client // does not follow redirects
	calls *opsCallCounter
}

// opsCallCounter counts the service's provider calls.
type opsCallCounter struct{ n atomic.Int64 }

func (c *opsCallCounter) ProviderCall(provider.Op, provider.Outcome, time.Duration)        { c.n.Add(1) }
func (*opsCallCounter) Transition(statemachine.State, statemachine.State, reconcile.Cause) {}
func (*opsCallCounter) JobsClaimed(int)                                                    {}
func (*opsCallCounter) LeaseLost()                                                         {}
func (*opsCallCounter) Resolved(time.Duration)                                             {}
func (*opsCallCounter) RefundTransition(statemachine.State, statemachine.State, reconcile.Cause) {
}
func (*opsCallCounter) EventApplied(string, reconcile.EventOutcome, time.Duration) {}

func setupOps(t *testing.T) *opsFixture {
	t.Helper()
	return setupOpsOn(t, newStoreAt)
}

// setupOpsOn is setupOps over the store newStore opens.
func setupOpsOn(t *testing.T, newStore func(testing.TB, func() time.Time) reconcile.Store) *opsFixture {
	t.Helper()
	f := &opsFixture{t: t, clock: newTestClock(), calls: &opsCallCounter{}}
	f.store = newStore(t, f.clock.Now)
	f.fake = fakeprovider.New(fakeprovider.Config{Now: f.clock.Now})
	svc, err := reconcile.New(f.store, f.fake, reconcile.Config{
		WorkerID: "worker-1", MaxAttempts: 1, Now: f.clock.Now, Logger: discardLogger(), Observer: f.calls,
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

var opsBearer = map[string]string{"Authorization": "Bearer " + opsToken, "Accept": "application/json"}

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
		r := f.do("GET", "/ops/escalations?format=json", nil, hdr)
		if code, _ := r.errCode(t); r.status != http.StatusUnauthorized || code != "unauthorized" {
			t.Errorf("GET /ops/escalations with %s: %d %s, want 401 unauthorized JSON", name, r.status, r.body)
		}
		if strings.Contains(r.body, p.ID) {
			t.Errorf("GET /ops/escalations with %s leaks the case", name)
		}
		form := url.Values{"operator": {"mallory"}, "to": {"declined"}, "evidence": {"x"}, "version": {fmt.Sprint(p.Version)}}
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

	cases := []struct {
		name   string
		id     string
		form   url.Values
		status int
		code   string
		says   string
	}{
		{"no evidence", p.ID, url.Values{"to": {"succeeded"}, "version": {v}}, 400, "invalid_request", "evidence"},
		{"blank evidence", p.ID, url.Values{"to": {"succeeded"}, "evidence": {"  \n "}, "version": {v}}, 400, "invalid_request", "evidence"},
		{"to uncertain", p.ID, url.Values{"to": {"uncertain"}, "evidence": {"x"}, "version": {v}}, 400, "invalid_request", "succeeded or declined"},
		{"to reconciling", p.ID, url.Values{"to": {"reconciling"}, "evidence": {"x"}, "version": {v}}, 400, "invalid_request", "succeeded or declined"},
		{"no target", p.ID, url.Values{"evidence": {"x"}, "version": {v}}, 400, "invalid_request", "to"},
		{"override with control characters", p.ID, url.Values{"to": {"declined"}, "evidence": {"x"}, "override_provider": {"a\x00b"}, "version": {v}}, 400, "invalid_request", "override_provider"},
		{"no version", p.ID, url.Values{"to": {"succeeded"}, "evidence": {"x"}}, 400, "invalid_request", "version"},
		{"no operator", p.ID, url.Values{"operator": {" "}, "to": {"succeeded"}, "evidence": {"x"}, "version": {v}}, 400, "invalid_request", "operator"},
		{"stale version", p.ID, url.Values{"to": {"succeeded"}, "evidence": {"x"}, "version": {fmt.Sprint(p.Version - 1)}}, 409, "stale", "changed since"},
		{"never submitted", created.ID, url.Values{"to": {"succeeded"}, "evidence": {"x"}, "version": {fmt.Sprint(created.Version)}}, 409, "forbidden_transition", "created"},
		{"unknown purchase", "pur_nope", url.Values{"to": {"succeeded"}, "evidence": {"x"}, "version": {"1"}}, 404, "not_found", "pur_nope"},
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
		"csrf": {csrf}, "to": {"uncertain"}, "evidence": {"typed <b>evidence</b>"}, "version": {v},
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
	form := url.Values{"operator": {"bob"}, "to": {"declined"}, "evidence": {"customer says no"}, "version": {fmt.Sprint(p.Version)}}
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

	// Show: the provider's live view, once a script asked for it.
	show := func() (int64, string) {
		t.Helper()
		if r := f.do("POST", "/ops/purchases/"+p.ID+"/live", url.Values{"operator": {"ops-script"}}, opsBearer); r.status != http.StatusOK ||
			!strings.Contains(r.body, "Asked the provider: outcome=succeeded") {
			t.Fatalf("ask the provider: %d %s", r.status, r.body)
		}
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
	stale := url.Values{"operator": {"ops-script"}, "to": {"succeeded"}, "evidence": {"dashboard"}, "version": {fmt.Sprint(version)}}
	if r := f.do("POST", "/ops/purchases/"+p.ID+"/resolve", stale, opsBearer); r.status != http.StatusConflict {
		t.Fatalf("resolve with the version from before the recheck: %d %s, want 409", r.status, r.body)
	}

	version, saw := show()
	evidence := "Stripe dashboard shows the charge succeeded; receipt sent to the customer"
	r = f.do("POST", "/ops/purchases/"+p.ID+"/resolve", url.Values{
		"operator": {"ops-script"}, "to": {"succeeded"}, "evidence": {evidence}, "version": {fmt.Sprint(version)},
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
	// The stored live view keeps outcome, status and payment; the
	// resolution's own view says more.
	if a := rec.Actions[1]; a.Action != "resolve" || a.Operator != "ops-script" || !strings.HasPrefix(a.Saw, saw) ||
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

// TestOpsFormFlow: from the list to the case page, a resolution the
// provider contradicts is refused with 409 and the provider's answer,
// changing nothing; the same resolution with an override reason goes
// through, and the override is recorded beside the provider's answer.
func TestOpsFormFlow(t *testing.T) {
	f := setupOps(t)
	p := f.escalated("cus-form") // charged at the provider, reply lost
	charge := f.fake.ChargesFor(p.ID)[0].ID
	session, _ := f.login("frank")

	list := f.do("GET", "/ops", nil, nil, session)
	if list.status != http.StatusOK || !strings.Contains(list.body, `href="/ops/purchases/`+p.ID+`"`) ||
		!strings.Contains(list.body, "12.50 EUR") || !strings.Contains(list.body, "attempts exhausted") ||
		!strings.Contains(list.body, `id="findings-empty"`) {
		t.Fatalf("list page: %d\n%s", list.status, list.body)
	}
	page := f.do("GET", "/ops/purchases/"+p.ID, nil, nil, session)
	if page.status != http.StatusOK || !strings.Contains(page.body, `id="live-none"`) || !strings.Contains(page.body, `id="live-form"`) {
		t.Fatalf("case page before asking the provider: %d\n%s", page.status, page.body)
	}
	ask := f.do("POST", "/ops/purchases/"+p.ID+"/live", url.Values{"csrf": {opsFormToken(t, page.body)}}, map[string]string{"Origin": f.srv.URL}, session)
	if ask.status != http.StatusSeeOther {
		t.Fatalf("ask the provider: %d\n%s", ask.status, ask.body)
	}
	page = f.do("GET", ask.header.Get("Location"), nil, nil, session)
	if page.status != http.StatusOK || !strings.Contains(page.body, `id="live-view"`) || !strings.Contains(page.body, "outcome=succeeded") ||
		!strings.Contains(page.body, "Asked the provider: outcome=succeeded") {
		t.Fatalf("case page: %d\n%s", page.status, page.body)
	}
	for _, bad := range []string{"charge again", "Charge again", "failed", `name="saw"`} {
		if strings.Contains(page.body, bad) {
			t.Errorf("the case page says %q", bad)
		}
	}
	if !strings.Contains(page.body, `name="override_provider"`) || strings.Contains(page.body, `<details class="override" id="override" open>`) {
		t.Errorf("the resolve form has no override field, or shows it open before any refusal")
	}
	ver := regexp.MustCompile(`name="version" value="([^"]*)"`).FindStringSubmatch(page.body)
	if ver == nil || ver[1] != fmt.Sprint(p.Version) {
		t.Fatalf("resolve form without the version (%v)", ver)
	}
	csrf := opsFormToken(t, page.body)
	before := f.snapshot(p.ID)

	// Declined, while the provider holds a successful charge: refused.
	form := url.Values{"csrf": {csrf}, "to": {"declined"}, "evidence": {"bank statement: no debit"}, "version": {ver[1]}}
	r := f.do("POST", "/ops/purchases/"+p.ID+"/resolve", form, map[string]string{"Origin": f.srv.URL}, session)
	if r.status != http.StatusConflict {
		t.Fatalf("resolve declined against the provider: %d, want 409\n%s", r.status, r.body)
	}
	flash := regexp.MustCompile(`(?s)<div class="flash error" id="flash" role="alert">(.*?)</div>`).FindStringSubmatch(r.body)
	if flash == nil || !strings.Contains(flash[1], "contradicts this resolution") || !strings.Contains(flash[1], charge) ||
		!strings.Contains(flash[1], "succeeded") || !strings.Contains(flash[1], "Override the provider") {
		t.Errorf("the refusal does not say what the provider answered and how to override:\n%s", r.body)
	}
	if !strings.Contains(r.body, `<details class="override" id="override" open>`) || !strings.Contains(r.body, `id="override-warn"`) ||
		!strings.Contains(r.body, "bank statement: no debit") {
		t.Errorf("after the refusal the override field is not open, or the typed evidence is lost:\n%s", r.body)
	}
	f.unchangedBooks(before, "a resolution the provider contradicts")

	// The same, with a reason to go against the provider.
	reason := "charge " + charge + " refunded by hand in the dashboard, ticket OPS-12"
	form.Set("override_provider", reason)
	r = f.do("POST", "/ops/purchases/"+p.ID+"/resolve", form, map[string]string{"Origin": f.srv.URL}, session)
	if r.status != http.StatusSeeOther {
		t.Fatalf("resolve with an override: %d\n%s", r.status, r.body)
	}
	if got := f.do("GET", r.header.Get("Location"), nil, nil, session); !strings.Contains(got.body, "Resolved as declined by frank, with an override reason recorded") {
		t.Errorf("no flash after resolving:\n%s", got.body)
	}
	rec := f.record(p.ID)
	if rec.Purchase.State != statemachine.Declined || rec.Purchase.Escalated() || len(rec.Actions) != 1 {
		t.Fatalf("after the override: %s escalated %v, actions %+v", rec.Purchase.State, rec.Purchase.Escalated(), rec.Actions)
	}
	a := rec.Actions[0]
	if a.Operator != "frank" || a.Action != "resolve" || !strings.Contains(a.Did, "override: "+reason) ||
		!strings.Contains(a.Saw, "outcome=succeeded") || !strings.Contains(a.Saw, "payment="+charge) {
		t.Errorf("operator action: %+v, want frank's resolve with the override and the provider's answer", a)
	}
	last := rec.Transitions[len(rec.Transitions)-1]
	if last.To != statemachine.Declined || last.Cause != reconcile.CauseOperator ||
		!strings.Contains(last.Evidence, "overriding the provider") || !strings.Contains(last.Evidence, reason) {
		t.Errorf("last transition: %+v, want the override in its evidence", last)
	}
}

// TestOpsResolveAgainstProvider: for scripts, a resolution the provider's
// live view contradicts is 409 provider_disagrees with the provider's
// answer; with override_provider it is accepted and recorded.
func TestOpsResolveAgainstProvider(t *testing.T) {
	f := setupOps(t)
	p := f.escalated("cus-json-override")
	charge := f.fake.ChargesFor(p.ID)[0].ID
	before := f.snapshot(p.ID)
	form := url.Values{"operator": {"ops-script"}, "to": {"declined"}, "evidence": {"customer says no"}, "version": {fmt.Sprint(p.Version)}}
	r := f.do("POST", "/ops/purchases/"+p.ID+"/resolve", form, opsBearer)
	code, msg := r.errCode(t)
	if r.status != http.StatusConflict || code != "provider_disagrees" || !strings.Contains(msg, "override_provider") {
		t.Fatalf("resolve declined against a succeeded charge: %d %s %q, want 409 provider_disagrees naming override_provider", r.status, code, msg)
	}
	e, _ := r.json(t)["error"].(map[string]any)
	answer, _ := e["provider_answer"].(string)
	reason, _ := e["reason"].(string)
	if !strings.Contains(answer, "succeeded") || !strings.Contains(answer, charge) || !strings.Contains(reason, "succeeded") {
		t.Errorf("provider_answer %q, reason %q: want the provider's succeeded charge %s", answer, reason, charge)
	}
	f.unchangedBooks(before, "a refused resolution")
	if n := len(f.fake.ChargesFor(p.ID)); n != 1 {
		t.Errorf("the provider holds %d charges, want 1", n)
	}

	// The purchase's version is unchanged: the same form with an override
	// goes through.
	form.Set("override_provider", "the customer's bank reversed it: chargeback CB-9")
	r = f.do("POST", "/ops/purchases/"+p.ID+"/resolve", form, opsBearer)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"state": "declined"`) || !strings.Contains(r.body, "override") {
		t.Fatalf("resolve with override_provider: %d %s", r.status, r.body)
	}
	rec := f.record(p.ID)
	if rec.Purchase.State != statemachine.Declined || len(rec.Actions) != 1 ||
		!strings.Contains(rec.Actions[0].Did, "override: the customer's bank reversed it: chargeback CB-9") ||
		!strings.Contains(rec.Actions[0].Saw, "payment="+charge) {
		t.Errorf("after the override: %s, actions %+v", rec.Purchase.State, rec.Actions)
	}
	// The live view of each resolution is in the purchase's audit.
	views := 0
	for _, a := range rec.Attempts {
		if a.Actor == "operator:ops-script" {
			views++
		}
	}
	if views != 2 {
		t.Errorf("%d provider calls recorded for the operator's resolutions, want 2 (the refused one and the override)", views)
	}

	// Agreeing with the provider needs no override: another purchase,
	// resolved as succeeded.
	q := f.escalated("cus-json-agree")
	r = f.do("POST", "/ops/purchases/"+q.ID+"/resolve", url.Values{
		"operator": {"ops-script"}, "to": {"succeeded"}, "evidence": {"dashboard"}, "version": {fmt.Sprint(q.Version)},
	}, opsBearer)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"state": "succeeded"`) {
		t.Fatalf("resolve succeeded with the provider: %d %s", r.status, r.body)
	}
}

// unchangedBooks fails if the purchase, its transitions or its operator
// actions changed. A refused resolution took the job and gave it back, and
// recorded the provider call it made, so the job and the attempts are not
// compared.
func (f *opsFixture) unchangedBooks(before opsSnapshot, what string) {
	f.t.Helper()
	after := f.snapshot(before.P.ID)
	after.Job, before.Job = reconcile.Job{}, reconcile.Job{}
	if !reflect.DeepEqual(before, after) {
		f.t.Fatalf("%s changed the purchase:\nbefore %+v\nafter  %+v", what, before, after)
	}
}

// auditFindings makes the provider hold a second charge for a succeeded
// purchase and a charge for no purchase, and runs the audit over the last
// hour: two findings, and the purchase on the operator list.
func (f *opsFixture) auditFindings() (reconcile.Purchase, []reconcile.Finding) {
	f.t.Helper()
	ctx := context.Background()
	p := f.run("cus-audit")
	if p.State != statemachine.Succeeded {
		f.t.Fatalf("setup: %s", p.State)
	}
	f.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: p.ID, Customer: p.Customer, Amount: p.Amount, Currency: p.Currency})
	f.fake.ChargeOutside(fakeprovider.OutsideCharge{Amount: 999, Currency: "usd"})
	f.clock.Advance(time.Minute)
	now := f.clock.Now()
	rep, err := f.svc.Audit(ctx, provider.Window{From: now.Add(-time.Hour), Until: now})
	if err != nil {
		f.t.Fatal(err)
	}
	if len(rep.New) != 2 {
		f.t.Fatalf("setup: the audit found %+v, want a duplicate and an orphan", rep.New)
	}
	open, err := f.svc.Findings(ctx, reconcile.AnyAccount, false)
	if err != nil || len(open) != 2 {
		f.t.Fatalf("setup: open findings %+v, %v", open, err)
	}
	return f.record(p.ID).Purchase, open
}

// TestOpsFindingsListed: open audit findings are on the operator list
// beside the escalated purchases, in JSON and HTML, with their kind,
// payment, purchase, money at risk and evidence; the case page shows the
// purchase's own.
func TestOpsFindingsListed(t *testing.T) {
	f := setupOps(t)
	p, findings := f.auditFindings()
	byKind := map[reconcile.FindingKind]reconcile.Finding{}
	for _, fd := range findings {
		byKind[fd.Kind] = fd
	}
	dup, orphan := byKind[reconcile.FindingDuplicateCharge], byKind[reconcile.FindingOrphanCharge]
	if dup.ID == 0 || orphan.ID == 0 || dup.PurchaseID != p.ID || orphan.PurchaseID != "" {
		t.Fatalf("setup: findings %+v", findings)
	}

	type findingJSON struct {
		ID            int64   `json:"id"`
		Kind          string  `json:"kind"`
		PaymentID     string  `json:"payment_id"`
		PurchaseID    string  `json:"purchase_id"`
		Amount        int64   `json:"amount"`
		Currency      string  `json:"currency"`
		AmountDisplay string  `json:"amount_display"`
		Evidence      string  `json:"evidence"`
		FoundAt       string  `json:"found_at"`
		Open          bool    `json:"open"`
		ClosedAt      *string `json:"closed_at"`
	}
	r := f.do("GET", "/ops/escalations", nil, opsBearer)
	var list struct {
		Count         int           `json:"count"`
		FindingsCount int           `json:"findings_count"`
		Findings      []findingJSON `json:"findings"`
		MoneyAtRisk   []string      `json:"money_at_risk"`
		Cases         []struct {
			PurchaseID       string        `json:"purchase_id"`
			EscalationReason string        `json:"escalation_reason"`
			Findings         []findingJSON `json:"findings"`
		} `json:"cases"`
	}
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /ops/escalations: %d %v\n%s", r.status, err, r.body)
	}
	if list.FindingsCount != 2 || len(list.Findings) != 2 {
		t.Fatalf("findings on the list: %d %+v, want 2", list.FindingsCount, list.Findings)
	}
	for _, fj := range list.Findings {
		want := byKind[reconcile.FindingKind(fj.Kind)]
		if fj.ID != want.ID || fj.PaymentID != want.PaymentID || fj.PurchaseID != want.PurchaseID || fj.Amount != want.Amount ||
			fj.Currency != want.Currency || fj.Evidence == "" || fj.FoundAt == "" || !fj.Open || fj.ClosedAt != nil {
			t.Errorf("finding %+v, want %+v", fj, want)
		}
	}
	if !reflect.DeepEqual(list.MoneyAtRisk, []string{"12.50 EUR", "9.99 USD"}) {
		t.Errorf("money at risk %q, want 12.50 EUR and 9.99 USD", list.MoneyAtRisk)
	}
	if list.Count != 1 || list.Cases[0].PurchaseID != p.ID || list.Cases[0].EscalationReason != "duplicate_charge" ||
		len(list.Cases[0].Findings) != 1 || list.Cases[0].Findings[0].ID != dup.ID {
		t.Errorf("the escalated case: %+v, want %s escalated for its duplicate charge, with the finding", list.Cases, p.ID)
	}

	// GET /ops/findings, and one finding.
	r = f.do("GET", "/ops/findings", nil, opsBearer)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"count": 2`) || !strings.Contains(r.body, orphan.PaymentID) {
		t.Errorf("GET /ops/findings: %d %s", r.status, r.body)
	}
	if r := f.do("GET", "/ops/findings?all=maybe", nil, opsBearer); r.status != http.StatusBadRequest {
		t.Errorf("GET /ops/findings?all=maybe: %d, want 400", r.status)
	}
	r = f.do("GET", fmt.Sprintf("/ops/findings/%d", orphan.ID), nil, opsBearer)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"kind": "orphan_charge"`) || !strings.Contains(r.body, `"amount_display": "9.99 USD"`) {
		t.Errorf("GET one finding: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/ops/findings/999999", "/ops/findings/abc"} {
		if r := f.do("GET", path, nil, opsBearer); r.status != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, r.status)
		}
	}
	if r := f.do("GET", "/ops/findings", nil, nil); r.status != http.StatusUnauthorized {
		t.Errorf("GET /ops/findings without the token: %d, want 401", r.status)
	}
	if r := f.do("GET", fmt.Sprintf("/ops/findings/%d", orphan.ID), nil, nil); r.status != http.StatusUnauthorized || strings.Contains(r.body, orphan.PaymentID) {
		t.Errorf("GET a finding without the token: %d, want 401 without the finding", r.status)
	}

	// HTML: the list, the case page and the finding page.
	session, _ := f.login("hana")
	page := f.do("GET", "/ops", nil, nil, session)
	table := regexp.MustCompile(`(?s)<table id="findings">.*?</table>`).FindString(page.body)
	for _, want := range []string{
		dup.PaymentID, orphan.PaymentID, `href="/ops/purchases/` + p.ID + `"`, "12.50 EUR", "9.99 USD",
		"duplicate charge", "orphan charge", fmt.Sprintf(`href="/ops/findings/%d"`, orphan.ID), "names no purchase",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the findings table does not show %q:\n%s", want, page.body)
		}
	}
	if !strings.Contains(page.body, `id="money-at-risk"`) || !strings.Contains(page.body, `id="cases"`) {
		t.Errorf("the list page lacks the money at risk or the cases:\n%s", page.body)
	}
	c := f.do("GET", "/ops/purchases/"+p.ID, nil, nil, session)
	caseTable := regexp.MustCompile(`(?s)<table id="case-findings">.*?</table>`).FindString(c.body)
	if !strings.Contains(caseTable, dup.PaymentID) || strings.Contains(caseTable, orphan.PaymentID) || !strings.Contains(caseTable, "open") {
		t.Errorf("the case page's findings:\n%s", c.body)
	}
	fp := f.do("GET", fmt.Sprintf("/ops/findings/%d", dup.ID), nil, nil, session)
	if fp.status != http.StatusOK || !strings.Contains(fp.body, `id="close-form"`) || !strings.Contains(fp.body, "a second charge for purchase "+p.ID) ||
		!strings.Contains(fp.body, `href="/ops/purchases/`+p.ID+`"`) {
		t.Errorf("finding page: %d\n%s", fp.status, fp.body)
	}
}

// TestOpsCloseFinding: an operator closes a finding with a note, from the
// finding page (CSRF token and same-origin enforced) or as a script; the
// note is required, a closed finding cannot be closed again, and closing
// moves no purchase.
func TestOpsCloseFinding(t *testing.T) {
	f := setupOps(t)
	p, findings := f.auditFindings()
	dup, orphan := findings[0], findings[1]
	if dup.Kind != reconcile.FindingDuplicateCharge {
		dup, orphan = orphan, dup
	}
	beforePurchase := f.snapshot(p.ID)
	session, csrf := f.login("ivan")
	path := fmt.Sprintf("/ops/findings/%d/close", orphan.ID)
	stillOpen := func(what string) {
		t.Helper()
		got, err := f.svc.Finding(context.Background(), orphan.ID)
		if err != nil || !got.Open() {
			t.Fatalf("%s closed the finding: %+v %v", what, got, err)
		}
	}

	for _, c := range []struct {
		name   string
		form   url.Values
		header map[string]string
	}{
		{"no csrf token", url.Values{"note": {"refunded"}}, nil},
		{"wrong csrf token", url.Values{"note": {"refunded"}, "csrf": {"AAAA" + csrf[4:]}}, nil},
		{"cross-site Origin", url.Values{"note": {"refunded"}, "csrf": {csrf}}, map[string]string{"Origin": "https://evil.example"}},
		{"Sec-Fetch-Site cross-site", url.Values{"note": {"refunded"}, "csrf": {csrf}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
	} {
		if r := f.do("POST", path, c.form, c.header, session); r.status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", c.name, r.status)
		}
	}
	if r := f.do("POST", path, url.Values{"operator": {"mallory"}, "note": {"x"}}, nil); r.status != http.StatusUnauthorized {
		t.Errorf("close without a token or session: %d, want 401", r.status)
	}
	stillOpen("forged POSTs")

	// A browser without a note gets the page again with the message.
	r := f.do("POST", path, url.Values{"csrf": {csrf}, "note": {"  "}}, nil, session)
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, `id="flash"`) || !strings.Contains(r.body, "note: is required") ||
		!strings.Contains(r.body, `id="close-form"`) {
		t.Errorf("close without a note: %d\n%s", r.status, r.body)
	}
	stillOpen("a close without a note")

	note := "refunded re_123 in the dashboard: a test charge <by support>"
	r = f.do("POST", path, url.Values{"csrf": {csrf}, "note": {note}}, map[string]string{"Origin": f.srv.URL, "Sec-Fetch-Site": "same-origin"}, session)
	if r.status != http.StatusSeeOther || r.header.Get("Location") == "" {
		t.Fatalf("close from the page: %d %s\n%s", r.status, r.header.Get("Location"), r.body)
	}
	page := f.do("GET", r.header.Get("Location"), nil, nil, session)
	if !strings.Contains(page.body, fmt.Sprintf("Finding %d closed by ivan.", orphan.ID)) || !strings.Contains(page.body, `id="closed-by"`) ||
		!strings.Contains(page.body, "&lt;by support&gt;") || strings.Contains(page.body, `id="close-form"`) {
		t.Errorf("the finding page after closing:\n%s", page.body)
	}
	got, err := f.svc.Finding(context.Background(), orphan.ID)
	if err != nil || got.Open() || got.ClosedBy != "ivan" || got.CloseNote != note {
		t.Errorf("closed finding: %+v %v", got, err)
	}
	// An unsigned flash is not shown on a finding page.
	if page := f.do("GET", fmt.Sprintf("/ops/findings/%d?flash=Refund+twice", orphan.ID), nil, nil, session); strings.Contains(page.body, "Refund twice") {
		t.Errorf("an unsigned flash message is shown on the finding page")
	}
	// Off the open list; still listed with ?all=1.
	if r := f.do("GET", "/ops/escalations", nil, opsBearer); !strings.Contains(r.body, `"findings_count": 1`) || strings.Contains(r.body, orphan.PaymentID) {
		t.Errorf("the closed finding is still on the list:\n%s", r.body)
	}
	if r := f.do("GET", "/ops/findings?all=1", nil, opsBearer); !strings.Contains(r.body, `"count": 2`) || !strings.Contains(r.body, `"closed_by": "ivan"`) {
		t.Errorf("GET /ops/findings?all=1:\n%s", r.body)
	}

	// Scripts: operator and note are required; closing twice is a conflict.
	dupPath := fmt.Sprintf("/ops/findings/%d/close", dup.ID)
	for _, c := range []struct {
		name   string
		path   string
		form   url.Values
		status int
		code   string
	}{
		{"no operator", dupPath, url.Values{"note": {"x"}}, 400, "invalid_request"},
		{"no note", dupPath, url.Values{"operator": {"ops-script"}}, 400, "invalid_request"},
		{"already closed", path, url.Values{"operator": {"ops-script"}, "note": {"again"}}, 409, "already_closed"},
		{"unknown finding", "/ops/findings/999999/close", url.Values{"operator": {"ops-script"}, "note": {"x"}}, 404, "not_found"},
		{"not a finding id", "/ops/findings/pur_1/close", url.Values{"operator": {"ops-script"}, "note": {"x"}}, 404, "not_found"},
	} {
		r := f.do("POST", c.path, c.form, opsBearer)
		if code, msg := r.errCode(t); r.status != c.status || code != c.code {
			t.Errorf("%s: %d %s %q, want %d %s", c.name, r.status, code, msg, c.status, c.code)
		}
	}
	r = f.do("POST", dupPath, url.Values{"operator": {"ops-script"}, "note": {"extra charge refunded: re_456"}}, opsBearer)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"closed_by": "ops-script"`) || !strings.Contains(r.body, `"open": false`) {
		t.Fatalf("close as a script: %d %s", r.status, r.body)
	}
	if r := f.do("GET", "/ops/escalations", nil, opsBearer); !strings.Contains(r.body, `"findings_count": 0`) {
		t.Errorf("findings left open:\n%s", r.body)
	}

	// Closing findings moved no purchase: the duplicate's purchase is
	// still succeeded and on the operator list.
	f.unchanged(beforePurchase, "closing its findings")
	if after := f.record(p.ID).Purchase; !after.Escalated() || after.State != statemachine.Succeeded {
		t.Errorf("the purchase after closing its finding: %s escalated %v", after.State, after.Escalated())
	}
}

// TestOpsCloseContradictionWithNote: a late approval after a decline,
// confirmed by the worker's status query, leaves the purchase declined on
// the operator list (state_disagreement); it has no resolve form, and a
// note closes it.
func TestOpsCloseContradictionWithNote(t *testing.T) {
	f := setupOps(t)
	p := f.run("cus-contra", fakeprovider.Decline)
	if p.State != statemachine.Declined {
		t.Fatalf("setup: %s", p.State)
	}
	pi := f.fake.ChargesFor(p.ID)[0].ID
	f.clock.Advance(time.Minute)
	if _, err := f.fake.SetStatus(pi, fakeprovider.StatusSucceeded); err != nil { // a late approval
		t.Fatal(err)
	}
	out, err := f.svc.ApplyEvent(context.Background(), reconcile.Event{
		Provider: "stripe", ID: "evt_contra", Type: "payment_intent.succeeded", Outcome: provider.Succeeded,
		PaymentID: pi, PurchaseID: p.ID, Amount: p.Amount, Currency: p.Currency, Created: f.clock.Now(),
		PayloadHash: "aa", Payload: []byte(`{}`),
	})
	if err != nil || out != reconcile.EventConfirming {
		t.Fatalf("setup: %s %v, want the event confirmed with a status query", out, err)
	}
	if _, err := f.svc.RunOnce(context.Background()); err != nil { // the status query confirms it
		t.Fatal(err)
	}
	if c := f.record(p.ID).Purchase; c.State != statemachine.Declined || c.EscalationReason != reconcile.EscalationStateDisagreement {
		t.Fatalf("setup: %s escalated for %q, want declined and state_disagreement", c.State, c.EscalationReason)
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
		!strings.Contains(rec.Actions[0].Did, "closed escalation state_disagreement") {
		t.Errorf("after closing: escalated %v, %s, %+v", rec.Purchase.Escalated(), rec.Purchase.State, rec.Actions)
	}
}

// TestOpsResolveSucceededWithoutCharge: calling succeeded a purchase the
// provider holds no charge for is 409 provider_disagrees, naming the
// override (the form's field for a browser, override_provider for a
// script), and changes nothing; with a reason it is accepted and
// recorded, and the audit then reports the purchase as missing at the
// provider.
func TestOpsResolveSucceededWithoutCharge(t *testing.T) {
	f := setupOps(t)
	start := f.clock.Now()
	p := f.run("cus-nocharge", fakeprovider.Timeout) // the create never reached the provider
	if p.State != statemachine.Uncertain || !p.Escalated() || f.fake.MoneyTaken(p.ID) != 0 {
		t.Fatalf("setup: purchase %s is %s, escalated %v, %d charges", p.ID, p.State, p.Escalated(), f.fake.MoneyTaken(p.ID))
	}
	before := f.snapshot(p.ID)

	// A browser: refused, with the override field open.
	session, _ := f.login("frank")
	page := f.do("GET", "/ops/purchases/"+p.ID, nil, nil, session)
	form := url.Values{"csrf": {opsFormToken(t, page.body)}, "to": {"succeeded"}, "evidence": {"the customer says they paid"}, "version": {fmt.Sprint(p.Version)}}
	r := f.do("POST", "/ops/purchases/"+p.ID+"/resolve", form, map[string]string{"Origin": f.srv.URL}, session)
	flash := regexp.MustCompile(`(?s)<div class="flash error" id="flash" role="alert">(.*?)</div>`).FindStringSubmatch(r.body)
	if r.status != http.StatusConflict || flash == nil || !strings.Contains(flash[1], "no payment") || !strings.Contains(flash[1], "Override the provider") ||
		!strings.Contains(r.body, `<details class="override" id="override" open>`) {
		t.Fatalf("browser resolve succeeded with no charge: %d, want 409 saying no payment and how to override\n%s", r.status, r.body)
	}
	f.unchangedBooks(before, "a resolution to succeeded with no charge")

	// A script: refused, naming override_provider.
	js := url.Values{"operator": {"ops-script"}, "to": {"succeeded"}, "evidence": {"the customer says they paid"}, "version": {fmt.Sprint(p.Version)}}
	r = f.do("POST", "/ops/purchases/"+p.ID+"/resolve", js, opsBearer)
	if code, msg := r.errCode(t); r.status != http.StatusConflict || code != "provider_disagrees" || !strings.Contains(msg, "override_provider") ||
		!strings.Contains(msg, "no payment") {
		t.Fatalf("resolve succeeded with no charge: %d %s %q, want 409 provider_disagrees naming override_provider", r.status, code, msg)
	}
	f.unchangedBooks(before, "a resolution to succeeded with no charge")

	const reason = "paid by bank transfer outside Stripe, ticket OPS-31"
	js.Set("override_provider", reason)
	r = f.do("POST", "/ops/purchases/"+p.ID+"/resolve", js, opsBearer)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"state": "succeeded"`) {
		t.Fatalf("resolve with override_provider: %d %s", r.status, r.body)
	}
	rec := f.record(p.ID)
	if rec.Purchase.State != statemachine.Succeeded || len(rec.Actions) != 1 || !strings.Contains(rec.Actions[0].Did, "override: "+reason) ||
		!strings.Contains(rec.Actions[0].Saw, "outcome=not_found") {
		t.Fatalf("after the override: %s, actions %+v", rec.Purchase.State, rec.Actions)
	}
	if last := rec.Transitions[len(rec.Transitions)-1]; last.To != statemachine.Succeeded || !strings.Contains(last.Evidence, reason) {
		t.Errorf("last transition: %+v, want the override in its evidence", last)
	}

	f.clock.Advance(10 * time.Minute)
	rep, err := f.svc.Audit(context.Background(), provider.Window{From: start.Add(-time.Minute), Until: f.clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.New) != 1 || rep.New[0].Kind != reconcile.FindingMissingAtProvider || rep.New[0].PurchaseID != p.ID ||
		rep.New[0].Amount != p.Amount {
		t.Fatalf("findings %+v, want one missing_at_provider for %s", rep.New, p.ID)
	}
	list := f.do("GET", "/ops", nil, nil, session)
	if !strings.Contains(list.body, "missing_at_provider") && !strings.Contains(list.body, "missing at provider") {
		t.Errorf("the operator list does not show the finding:\n%s", list.body)
	}
}

// TestOpsLiveViewOnRequest: showing a case never calls the provider nor
// records anything, in HTML or JSON; only "Ask the provider now" does,
// once per ask, and the page then shows that answer with its time.
func TestOpsLiveViewOnRequest(t *testing.T) {
	f := setupOps(t)
	p := f.escalated("cus-live")
	session, _ := f.login("grace")
	calls, attempts := f.calls.n.Load(), len(f.record(p.ID).Attempts)

	var page opsResp
	for _, hdr := range []map[string]string{nil, nil, opsBearer, {"Accept": "text/html"}} {
		page = f.do("GET", "/ops/purchases/"+p.ID, nil, hdr, session)
		if page.status != http.StatusOK {
			t.Fatalf("show: %d\n%s", page.status, page.body)
		}
	}
	if got := f.do("GET", "/ops/purchases/"+p.ID+"?format=json", nil, nil, session); strings.Contains(got.body, `"live_view"`) {
		t.Errorf("a live view before anyone asked:\n%s", got.body)
	}
	if n, a := f.calls.n.Load()-calls, len(f.record(p.ID).Attempts)-attempts; n != 0 || a != 0 {
		t.Fatalf("showing the case 5 times made %d provider calls and recorded %d attempts, want 0 and 0", n, a)
	}

	r := f.do("POST", "/ops/purchases/"+p.ID+"/live", url.Values{"csrf": {opsFormToken(t, page.body)}},
		map[string]string{"Origin": f.srv.URL}, session)
	if r.status != http.StatusSeeOther {
		t.Fatalf("ask the provider: %d\n%s", r.status, r.body)
	}
	rec := f.record(p.ID)
	if n, a := f.calls.n.Load()-calls, len(rec.Attempts)-attempts; n != 1 || a != 1 {
		t.Fatalf("one ask made %d provider calls and recorded %d attempts, want 1 and 1", n, a)
	}
	last := rec.Attempts[len(rec.Attempts)-1]
	for range 3 {
		page = f.do("GET", "/ops/purchases/"+p.ID, nil, nil, session)
	}
	if !strings.Contains(page.body, `id="live-view"`) || !strings.Contains(page.body, "outcome=succeeded") ||
		!strings.Contains(page.body, `datetime="`+last.At.UTC().Format(time.RFC3339)) {
		t.Errorf("the page does not show the stored live view with its time (%s):\n%s", last.At, page.body)
	}
	if n := f.calls.n.Load() - calls; n != 1 {
		t.Errorf("%d provider calls after showing the asked case again, want 1", n)
	}
	var one struct {
		LiveView struct {
			Outcome string    `json:"outcome"`
			AskedAt time.Time `json:"asked_at"`
		} `json:"live_view"`
	}
	if err := json.Unmarshal([]byte(f.do("GET", "/ops/purchases/"+p.ID, nil, opsBearer).body), &one); err != nil {
		t.Fatal(err)
	}
	if one.LiveView.Outcome != "succeeded" || !one.LiveView.AskedAt.Equal(last.At) {
		t.Errorf("JSON live view %+v, want succeeded asked at %s", one.LiveView, last.At)
	}
}

// TestOpsPagesAreHTMLUnlessAsked: every ops URL answers a browser, and a
// bearer client that does not ask for JSON, with a page; Accept:
// application/json or ?format=json with JSON.
func TestOpsPagesAreHTMLUnlessAsked(t *testing.T) {
	f := setupOps(t)
	p := f.escalated("cus-html")
	bearerOnly := map[string]string{"Authorization": "Bearer " + opsToken}
	browser := map[string]string{"Authorization": "Bearer " + opsToken, "Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
	for _, path := range []string{"/ops", "/ops/escalations", "/ops/findings", "/ops/findings?all=1", "/ops/outbox", "/ops/purchases/" + p.ID} {
		for name, hdr := range map[string]map[string]string{"browser": browser, "bearer": bearerOnly} {
			r := f.do("GET", path, nil, hdr)
			if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") || !strings.Contains(r.body, "<!doctype html>") {
				t.Errorf("GET %s as %s: %d %s, want an HTML page", path, name, r.status, r.header.Get("Content-Type"))
			}
		}
	}
	for _, path := range []string{"/ops/escalations", "/ops/findings", "/ops/purchases/" + p.ID} {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		for name, r := range map[string]opsResp{
			"Accept":      f.do("GET", path, nil, opsBearer),
			"format=json": f.do("GET", path+sep+"format=json", nil, browser),
		} {
			if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") || !json.Valid([]byte(r.body)) {
				t.Errorf("GET %s with %s: %d %s, want JSON", path, name, r.status, r.header.Get("Content-Type"))
			}
		}
	}
	if r := f.do("GET", "/ops/findings?all=maybe", nil, browser); r.status != http.StatusBadRequest || !strings.Contains(r.body, "<!doctype html>") {
		t.Errorf("GET /ops/findings?all=maybe in a browser: %d, want 400 with a page", r.status)
	}
}
