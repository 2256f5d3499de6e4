package http_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
	"github.com/payrecon/payrecon/statemachine"
)

// The connected accounts the account filter's tests declare.
const (
	opsAcctA = "acct_1OpsA"
	opsAcctB = "acct_1OpsB"
)

// setupOpsAccounts is setupOps with two connected accounts declared.
func setupOpsAccounts(t *testing.T) *opsFixture {
	t.Helper()
	f := &opsFixture{t: t, clock: newTestClock(), calls: &opsCallCounter{}}
	f.store = newStoreAt(t, f.clock.Now)
	f.fake = fakeprovider.New(fakeprovider.Config{Now: f.clock.Now})
	svc, err := reconcile.New(f.store, f.fake, reconcile.Config{
		WorkerID: "worker-1", MaxAttempts: 1, Now: f.clock.Now, Logger: discardLogger(), Observer: f.calls,
		Accounts: []string{opsAcctA, opsAcctB},
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

// escalatedIn makes an escalated purchase of account, as escalated does
// for the platform's.
func (f *opsFixture) escalatedIn(account, customer string) reconcile.Purchase {
	f.t.Helper()
	p, err := f.svc.CreatePurchase(context.Background(), reconcile.NewPurchase{
		Customer: customer, Amount: 1250, Currency: "eur", Description: "annual plan", Account: account,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.fake.Account(account).Script(p.ID, fakeprovider.LostReply)
	if _, err := f.svc.RunOnce(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	p = f.record(p.ID).Purchase
	if p.State != statemachine.Uncertain || !p.Escalated() {
		f.t.Fatalf("setup: purchase %s of %q is %s, escalated %v; want uncertain and escalated", p.ID, account, p.State, p.Escalated())
	}
	return p
}

// TestOpsAccountFilter: the operator list, as JSON and as a page, shows
// the escalated purchases of the account ?account= names, each row with
// its account; without one it shows every account's. A malformed account
// is refused 400, on the list and on the findings.
func TestOpsAccountFilter(t *testing.T) {
	f := setupOpsAccounts(t)
	pp := f.escalatedIn("", "cus_platform")
	pa := f.escalatedIn(opsAcctA, "cus_a")
	pb := f.escalatedIn(opsAcctB, "cus_b")

	tests := []struct {
		account string // the query's
		want    map[string]string
	}{
		{"", map[string]string{pp.ID: "platform", pa.ID: opsAcctA, pb.ID: opsAcctB}},
		{"platform", map[string]string{pp.ID: "platform"}},
		{opsAcctA, map[string]string{pa.ID: opsAcctA}},
		{opsAcctB, map[string]string{pb.ID: opsAcctB}},
		{"acct_1NotServed", map[string]string{}},
	}
	for _, tt := range tests {
		t.Run("account="+tt.account, func(t *testing.T) {
			q := "?" + url.Values{"account": {tt.account}}.Encode()
			r := f.do("GET", "/ops/escalations"+q, nil, opsBearer)
			if r.status != http.StatusOK {
				t.Fatalf("GET /ops/escalations%s: %d %s", q, r.status, r.body)
			}
			body := r.json(t)
			cases, _ := body["cases"].([]any)
			got := map[string]string{}
			for _, c := range cases {
				m := c.(map[string]any)
				got[m["purchase_id"].(string)], _ = m["account"].(string)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("cases %v, want %v", got, tt.want)
			}
			for id, account := range tt.want {
				if got[id] != account {
					t.Errorf("case %s: account %q, want %q (cases %v)", id, got[id], account, got)
				}
			}

			page := f.do("GET", "/ops"+q, nil, map[string]string{"Authorization": "Bearer " + opsToken})
			if page.status != http.StatusOK {
				t.Fatalf("GET /ops%s: %d", q, page.status)
			}
			for _, p := range []string{pp.ID, pa.ID, pb.ID} {
				_, want := tt.want[p]
				if shown := strings.Contains(page.body, `href="/ops/purchases/`+p+`"`); shown != want {
					t.Errorf("the page of %s shows %s: %v, want %v", q, p, shown, want)
				}
			}
			for _, account := range tt.want {
				if !strings.Contains(page.body, ">"+account+"</span>") {
					t.Errorf("the page of %s does not show the account %s of its rows", q, account)
				}
			}
		})
	}

	for _, path := range []string{"/ops", "/ops/escalations", "/ops/findings"} {
		for _, bad := range []string{"acct_", "acct-1", "ACCT_1", "Platform", "acct_1 2"} {
			q := "?" + url.Values{"account": {bad}}.Encode()
			if path != "/ops" { // /ops is a page only
				r := f.do("GET", path+q, nil, opsBearer)
				if code, msg := r.errCode(t); r.status != http.StatusBadRequest || code != "invalid_request" || !strings.Contains(msg, "account") {
					t.Errorf("GET %s%s as JSON: %d %s %q, want 400 invalid_request naming the account", path, q, r.status, code, msg)
				}
			}
			page := f.do("GET", path+q, nil, map[string]string{"Authorization": "Bearer " + opsToken})
			if page.status != http.StatusBadRequest || !strings.Contains(page.body, "Not an account") {
				t.Errorf("GET %s%s: %d, want 400 with the error page", path, q, page.status)
			}
		}
	}
}
