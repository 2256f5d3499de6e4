package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/payrecon/payrecon/reconcile/budget"
)

func TestParseAccounts(t *testing.T) {
	for _, tc := range []struct {
		in       string
		accounts []string
		limits   map[string]float64
		err      string
	}{
		{in: ""},
		{in: "acct_1A", accounts: []string{"acct_1A"}},
		{in: " acct_1A , acct_1B=100 ,acct_1C = 2.5", accounts: []string{"acct_1A", "acct_1B", "acct_1C"},
			limits: map[string]float64{"acct_1B": 100, "acct_1C": 2.5}},
		{in: "acct_1A,acct-1B", accounts: []string{"acct_1A"}, err: `"acct-1B" is not a connected account`},
		{in: "acct_1A=0", accounts: []string{"acct_1A"}, err: "acct_1A=0: the account's limit must be a positive number"},
		{in: "acct_1A=-3", accounts: []string{"acct_1A"}, err: "must be a positive number"},
		{in: "acct_1A=fast", accounts: []string{"acct_1A"}, err: "must be a positive number"},
		{in: "acct_1A=+Inf", accounts: []string{"acct_1A"}, err: "must be a positive number"},
		{in: "=5", err: `"" is not a connected account`},
	} {
		accounts, limits, err := parseAccounts(tc.in)
		if !reflect.DeepEqual(accounts, tc.accounts) || !reflect.DeepEqual(limits, tc.limits) {
			t.Errorf("parseAccounts(%q) = %v, %v; want %v, %v", tc.in, accounts, limits, tc.accounts, tc.limits)
		}
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("parseAccounts(%q): %v", tc.in, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parseAccounts(%q): error %v, want one saying %q", tc.in, err, tc.err)
		}
		if got := checkAccounts(tc.in); (got == nil) != (tc.err == "") {
			t.Errorf("checkAccounts(%q) = %v, want an error: %v", tc.in, got, tc.err != "")
		}
	}
}

func TestAccountLimitsSetting(t *testing.T) {
	s := defaultSettings(t)
	s.set("accounts", "acct_1A,acct_1B=100")
	if got, want := s.accountLimits(), map[string]budget.Limits{"acct_1B": {Global: 100}}; !reflect.DeepEqual(got, want) {
		t.Errorf("accountLimits() = %v, want %v", got, want)
	}
	cfg, err := s.reconcileConfig()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"acct_1A", "acct_1B"}; !reflect.DeepEqual(cfg.Accounts, want) {
		t.Errorf("reconcile.Config.Accounts = %v, want %v", cfg.Accounts, want)
	}
}
