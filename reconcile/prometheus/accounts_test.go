package prometheus_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/budget"
	"github.com/payrecon/payrecon/reconcile/prometheus"
	"github.com/payrecon/payrecon/statemachine"
)

// The account label: the platform's own account, each declared connected
// account by its id, and every other account under one value.

const (
	declaredA   = "acct_A" // declared
	undeclaredZ = "acct_Z" // accepted, not declared
)

// TestAccountLabel: the platform's account is platform, a declared
// account its id, and any other connected account other, whether the
// deployment declares others or none.
func TestAccountLabel(t *testing.T) {
	declared, err := prometheus.NewWithAccounts([]string{declaredA, "acct_1B", declaredA})
	if err != nil {
		t.Fatal(err)
	}
	none := prometheus.New()
	for _, tc := range []struct {
		name      string
		m         *prometheus.Metrics
		account   string
		wantLabel string
	}{
		{"the platform's", declared, provider.PlatformAccount, "platform"},
		{"a declared account", declared, declaredA, declaredA},
		{"another declared account", declared, "acct_1B", "acct_1B"},
		{"an undeclared account", declared, undeclaredZ, prometheus.OtherAccount},
		{"an account named like a declared one's prefix", declared, "acct_AB", prometheus.OtherAccount},
		{"the platform's, none declared", none, provider.PlatformAccount, "platform"},
		{"a connected account, none declared", none, declaredA, prometheus.OtherAccount},
	} {
		if got := tc.m.AccountLabel(tc.account); got != tc.wantLabel {
			t.Errorf("%s: AccountLabel(%q) = %q, want %q", tc.name, tc.account, got, tc.wantLabel)
		}
	}
	for _, bad := range [][]string{{"acct-1"}, {""}, {declaredA, "ACCT_1"}} {
		if _, err := prometheus.NewWithAccounts(bad); err == nil {
			t.Errorf("NewWithAccounts(%q): no error, want one for the account that is not a connected account", bad)
		}
	}
}

// TestMetricsByAccount: a deployment declaring acct_A and accepting
// undeclared accounts. Provider calls, transitions, escalations, open
// disputes' money and 429s of acct_A, of the platform and of the
// undeclared acct_Z are counted under account="acct_A", "platform" and
// "other"; no series names acct_Z. The escalations and throttling series
// of every label are there, at 0, before anything happened.
func TestMetricsByAccount(t *testing.T) {
	m, err := prometheus.NewWithAccounts([]string{declaredA})
	if err != nil {
		t.Fatal(err)
	}
	want := func(when string, samples map[string]string) {
		t.Helper()
		for sample, w := range samples {
			if got := scrape(t, m, sample); got != w {
				t.Errorf("%s: %s = %s, want %s", when, sample, got, w)
			}
		}
	}
	want("before anything", map[string]string{
		`payrecon_escalations_open{account="acct_A"}`:                        "0",
		`payrecon_escalations_open{account="platform"}`:                      "0",
		`payrecon_escalations_open{account="other"}`:                         "0",
		`payrecon_provider_throttled_total{account="acct_A",class="create"}`: "0",
		`payrecon_provider_throttled_total{account="other",class="list"}`:    "0",
	})

	clk := testclock.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	st := newStore(t, clk.Now)
	fake := fakeprovider.New(fakeprovider.Config{Now: clk.Now})
	svc, err := reconcile.New(st, fake, reconcile.Config{
		Accounts: []string{declaredA}, UndeclaredAccounts: reconcile.AccountsAccept,
		Now: clk.Now, Observer: m, Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := clk.Now()
	create := func(account string) reconcile.Purchase {
		t.Helper()
		p, err := svc.CreatePurchase(ctx, reconcile.NewPurchase{Customer: "c", Amount: 300, Currency: "usd", Account: account})
		if err != nil {
			t.Fatalf("create a purchase of %q: %v", account, err)
		}
		return p
	}
	// Two creates of acct_A time out, one of the platform and one of
	// acct_Z; one purchase of acct_A and one of acct_Z are paid.
	for _, account := range []string{declaredA, declaredA, provider.PlatformAccount, undeclaredZ} {
		p := create(account)
		fake.Account(account).Script(p.ID, fakeprovider.Timeout)
	}
	paid := map[string]reconcile.Purchase{declaredA: create(declaredA), undeclaredZ: create(undeclaredZ)}
	if _, err := svc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	for account, p := range paid {
		d, err := svc.Purchase(ctx, p.ID)
		if err != nil || d.Purchase.State != statemachine.Succeeded {
			t.Fatalf("the paid purchase of %s: %+v, %v", account, d.Purchase, err)
		}
		if _, err := fake.Account(account).OpenDispute(d.Purchase.ProviderPaymentID, fakeprovider.DisputeOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Nobody ran the worker for a day: the uncertain purchases are
	// escalated, and the audit brings the disputes into the books.
	clk.Advance(25 * time.Hour)
	if n, err := svc.EscalateOverdue(ctx); err != nil || n != 4 {
		t.Fatalf("EscalateOverdue: %d, %v; want the 4 uncertain purchases", n, err)
	}
	if _, err := svc.Audit(ctx, provider.Window{From: start, Until: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	// One 429 in each account's budget.
	bstore := st.(budget.Store)
	platformBudget, err := budget.New(bstore, budget.Config{Observer: m, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	accountBudgets, err := budget.NewAccounts(bstore, budget.Config{Observer: m, Now: clk.Now}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []reconcile.Budget{platformBudget, accountBudgets.For(declaredA), accountBudgets.For(undeclaredZ)} {
		if err := b.Throttled(ctx, reconcile.ClassCreate, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Refresh(ctx, st); err != nil {
		t.Fatal(err)
	}

	want("after the day", map[string]string{
		`payrecon_escalations_open{account="acct_A"}`:   "2",
		`payrecon_escalations_open{account="platform"}`: "1",
		`payrecon_escalations_open{account="other"}`:    "1",

		`payrecon_provider_requests_total{account="acct_A",op="create",outcome="unknown"}`:   "2",
		`payrecon_provider_requests_total{account="platform",op="create",outcome="unknown"}`: "1",
		`payrecon_provider_requests_total{account="other",op="create",outcome="unknown"}`:    "1",
		`payrecon_provider_requests_total{account="acct_A",op="create",outcome="succeeded"}`: "1",
		`payrecon_provider_requests_total{account="other",op="create",outcome="succeeded"}`:  "1",
		`payrecon_provider_request_duration_seconds_count{account="acct_A",op="create"}`:     "3",
		`payrecon_provider_request_duration_seconds_count{account="platform",op="create"}`:   "1",
		`payrecon_provider_request_duration_seconds_count{account="other",op="create"}`:      "2",

		`payrecon_transitions_total{account="acct_A",cause="submit_response",from="submitted",to="uncertain"}`:   "2",
		`payrecon_transitions_total{account="platform",cause="submit_response",from="submitted",to="uncertain"}`: "1",
		`payrecon_transitions_total{account="other",cause="submit_response",from="submitted",to="uncertain"}`:    "1",
		`payrecon_transitions_total{account="acct_A",cause="submit_response",from="submitted",to="succeeded"}`:   "1",
		`payrecon_transitions_total{account="other",cause="submit_response",from="submitted",to="succeeded"}`:    "1",

		`payrecon_disputes_open_amount{account="acct_A",currency="usd"}`: "3",
		`payrecon_disputes_open_amount{account="other",currency="usd"}`:  "3",

		`payrecon_provider_throttled_total{account="acct_A",class="create"}`:   "1",
		`payrecon_provider_throttled_total{account="platform",class="create"}`: "1",
		`payrecon_provider_throttled_total{account="other",class="create"}`:    "1",
	})
	// The audit lists each account's disputes, chunk by chunk, in that
	// account: as many listings in each.
	lists := map[string]string{}
	for _, a := range []string{"acct_A", "platform", "other"} {
		lists[a] = scrape(t, m, `payrecon_provider_requests_total{account="`+a+`",op="dispute_list",outcome="succeeded"}`)
	}
	if lists["acct_A"] == "0" || lists["acct_A"] != lists["platform"] || lists["acct_A"] != lists["other"] {
		t.Errorf("the audit's dispute listings by account: %v, want as many in each, not none", lists)
	}
	body := scrapeAll(t, m)
	if bytes.Contains(body, []byte(undeclaredZ)) {
		t.Errorf("/metrics names the undeclared account %s:\n%s", undeclaredZ, body)
	}
	if bytes.Contains(body, []byte(`payrecon_disputes_open_amount{account="platform"`)) {
		t.Errorf("/metrics has disputed money of the platform's, which has no dispute")
	}
}
