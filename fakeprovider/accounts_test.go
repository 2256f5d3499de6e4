package fakeprovider_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/providertest"
	"github.com/payrecon/payrecon/provider"
)

// Connected accounts, in-process.

// accounts are the accounts the tests keep books in: the platform's and
// two connected accounts.
var accounts = []string{provider.PlatformAccount, "acct_1A", "acct_1B"}

// books are the records a test made in one account.
type books struct {
	payment, refund, dispute string
}

// keepBooks makes, in f, a charge of purchase pur_same under its usual
// key, a refund of part of it and a dispute of another part: the same
// requests in every account.
func keepBooks(t *testing.T, f *fakeprovider.Fake) books {
	t.Helper()
	req := request("pur_same")
	pay := mustCreate(t, f, req)
	if replay := mustCreate(t, f, req); replay.PaymentID != pay.PaymentID {
		t.Fatalf("account %q: replay of the key charged again: %s, then %s", f.AccountID(), pay.PaymentID, replay.PaymentID)
	}
	rf := mustRefund(t, f, refundRequest("ref_same", "pur_same", pay.PaymentID, 250))
	d := mustOpenDispute(t, f, pay.PaymentID, fakeprovider.DisputeOptions{Amount: 100})
	return books{payment: pay.PaymentID, refund: rf.ID, dispute: d.ID}
}

func TestAccountResolves(t *testing.T) {
	platform, _ := newFake(t, fakeprovider.Config{Instance: "plat1"})
	a := platform.Account("acct_1A")
	tests := []struct {
		name      string
		got, want *fakeprovider.Fake
	}{
		{"the platform's", platform.Account(provider.PlatformAccount), platform},
		{"an account again", platform.Account("acct_1A"), a},
		{"ForAccount", platform.ForAccount("acct_1A").(*fakeprovider.Fake), a},
		{"the platform's from an account", a.Account(provider.PlatformAccount), platform},
		{"an account from itself", a.Account("acct_1A"), a},
		{"another account from an account", a.Account("acct_1B"), platform.Account("acct_1B")},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got the fake of %q, want %q's", tc.name, tc.got.AccountID(), tc.want.AccountID())
		}
	}
	if a.AccountID() != "acct_1A" || platform.AccountID() != provider.PlatformAccount {
		t.Errorf("AccountID: %q and %q, want acct_1A and the platform's", a.AccountID(), platform.AccountID())
	}
	if a.Instance() != "plat1x1A" {
		t.Errorf("instance of acct_1A: %q, want plat1x1A", a.Instance())
	}
}

// TestAccountRefusesMalformed: an account provider.ParseAccount refuses
// is a bug in the caller, never a fake of its own.
func TestAccountRefusesMalformed(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	for _, bad := range []string{"acct_", "acct-1A", "acct_1 A", "ACCT_1A", "pi_1A", "acct_1A\n"} {
		t.Run(fmt.Sprintf("%q", bad), func(t *testing.T) {
			wantPanic(t, "Account", func() { f.Account(bad) })
			wantPanic(t, "New with AccountRateLimits", func() {
				fakeprovider.New(fakeprovider.Config{AccountRateLimits: map[string]fakeprovider.RateLimits{bad: {Create: 1}}})
			})
		})
	}
	wantPanic(t, "New with the platform's AccountRateLimits", func() {
		fakeprovider.New(fakeprovider.Config{AccountRateLimits: map[string]fakeprovider.RateLimits{provider.PlatformAccount: {}}})
	})
}

func wantPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	fn()
}

// TestAccountsKeepSeparateBooks: the same key and purchase id in the
// platform and two connected accounts make three charges, one in each,
// with three ids.
func TestAccountsKeepSeparateBooks(t *testing.T) {
	platform, _ := newFake(t, fakeprovider.Config{})
	ids := map[string]bool{}
	for _, account := range accounts {
		f := platform.Account(account)
		b := keepBooks(t, f)
		for _, id := range []string{b.payment, b.refund, b.dispute} {
			if ids[id] {
				t.Errorf("account %q: id %s is another account's too", account, id)
			}
			ids[id] = true
		}
		if n, m := len(f.ChargesFor("pur_same")), f.MoneyTaken("pur_same"); n != 1 || m != 1 {
			t.Errorf("account %q: %d charges of pur_same, %d took money; want 1 and 1", account, n, m)
		}
		if n := f.Ledger().CreateCalls["payrecon-pur_same"]; n != 2 {
			t.Errorf("account %q: %d creates under the key, want its own 2", account, n)
		}
	}
}

// TestAccountsDoNotSeeEachOther: every read through one account's view
// finds that account's records and never another's.
func TestAccountsDoNotSeeEachOther(t *testing.T) {
	platform, clk := newFake(t, fakeprovider.Config{})
	all := provider.Window{From: clk.Now().Add(-time.Hour), Until: clk.Now().Add(time.Hour)}
	kept := map[string]books{}
	for _, account := range accounts {
		kept[account] = keepBooks(t, platform.Account(account))
	}
	probes := []struct {
		name string
		sees func(ctx context.Context, p provider.Provider, b books) (bool, error)
	}{
		{"Status", func(ctx context.Context, p provider.Provider, b books) (bool, error) {
			res, err := p.Status(ctx, b.payment)
			return res.Outcome != provider.NotFound, err
		}},
		{"Search", func(ctx context.Context, p provider.Provider, b books) (bool, error) {
			res, err := p.Search(ctx, "pur_same")
			if err == nil && res.Charges != 1 {
				err = fmt.Errorf("found %d charges of pur_same, want the account's 1", res.Charges)
			}
			return res.PaymentID == b.payment, err
		}},
		{"List", func(ctx context.Context, p provider.Provider, b books) (bool, error) {
			ps, err := p.List(ctx, all, nil)
			return slices.ContainsFunc(ps, func(x provider.Payment) bool { return x.ID == b.payment }), err
		}},
		{"GetRefund", func(ctx context.Context, p provider.Provider, b books) (bool, error) {
			res, err := p.GetRefund(ctx, b.refund)
			return res.Outcome != provider.NotFound, err
		}},
		{"ListRefunds", func(ctx context.Context, p provider.Provider, b books) (bool, error) {
			rs, err := p.ListRefunds(ctx, b.payment, nil)
			if errors.Is(err, fakeprovider.ErrNoSuchPayment) {
				return false, nil // Stripe refuses to list an unknown payment's
			}
			return slices.ContainsFunc(rs, func(r provider.RefundResult) bool { return r.ID == b.refund }), err
		}},
		{"ListRefundsCreated", func(ctx context.Context, p provider.Provider, b books) (bool, error) {
			rs, err := p.ListRefundsCreated(ctx, all, nil)
			return slices.ContainsFunc(rs, func(r provider.RefundResult) bool { return r.ID == b.refund }), err
		}},
		{"ListDisputes", func(ctx context.Context, p provider.Provider, b books) (bool, error) {
			ds, err := p.ListDisputes(ctx, all, nil)
			return slices.ContainsFunc(ds, func(d provider.Dispute) bool { return d.ID == b.dispute }), err
		}},
		{"ListEvents", func(ctx context.Context, p provider.Provider, b books) (bool, error) {
			page, err := p.ListEvents(ctx, provider.EventQuery{Since: all.From})
			return slices.ContainsFunc(page.Events, func(ev provider.Event) bool { return ev.PaymentID == b.payment }), err
		}},
	}
	for _, probe := range probes {
		t.Run(probe.name, func(t *testing.T) {
			for _, viewer := range accounts {
				for _, owner := range accounts {
					sees, err := probe.sees(t.Context(), platform.ForAccount(viewer), kept[owner])
					if err != nil {
						t.Errorf("through %q, of %q's records: %v", viewer, owner, err)
					} else if want := viewer == owner; sees != want {
						t.Errorf("through %q, sees %q's records: %t, want %t", viewer, owner, sees, want)
					}
				}
			}
		})
	}
	// Nor does one account act on another's payment.
	for _, viewer := range accounts {
		for _, owner := range accounts {
			if viewer == owner {
				continue
			}
			p := platform.ForAccount(viewer)
			_, err := p.CreateRefund(t.Context(), refundRequest("ref_cross", "pur_same", kept[owner].payment, 1))
			if !errors.Is(err, fakeprovider.ErrNoSuchPayment) || !errors.Is(err, provider.ErrRejected) {
				t.Errorf("refund through %q of %q's payment: %v, want it refused as unknown", viewer, owner, err)
			}
			if _, err := platform.Account(viewer).OpenDispute(kept[owner].payment, fakeprovider.DisputeOptions{}); !errors.Is(err, fakeprovider.ErrNoSuchPayment) {
				t.Errorf("dispute in %q of %q's payment: %v, want ErrNoSuchPayment", viewer, owner, err)
			}
		}
	}
}

// TestAccountEventsNameTheAccount: every event of a connected account
// names it, in provider.Event.Account and at the top of its JSON; the
// platform's name none.
func TestAccountEventsNameTheAccount(t *testing.T) {
	platform, clk := newFake(t, fakeprovider.Config{})
	for _, account := range accounts {
		keepBooks(t, platform.Account(account))
	}
	for _, account := range accounts {
		t.Run("account="+account, func(t *testing.T) {
			page, err := platform.ForAccount(account).ListEvents(t.Context(), provider.EventQuery{Since: clk.Now().Add(-time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			// The charge, the refund's created and charge.refunded, the
			// dispute's created and funds_withdrawn.
			if len(page.Events) != 5 {
				t.Errorf("%d events, want the account's 5", len(page.Events))
			}
			for _, ev := range page.Events {
				var top map[string]json.RawMessage
				if err := json.Unmarshal([]byte(ev.Payload), &top); err != nil {
					t.Fatalf("event %s: %v", ev.ID, err)
				}
				raw, named := top["account"]
				var inJSON string
				if named {
					json.Unmarshal(raw, &inJSON)
				}
				if ev.Account != account || inJSON != account || named != (account != provider.PlatformAccount) {
					t.Errorf("event %s (%s): Account %q, JSON account %s; want %q", ev.ID, ev.Type, ev.Account, raw, account)
				}
			}
			if n := len(platform.Account(account).EventLog()); n != len(page.Events) {
				t.Errorf("event log holds %d, listed %d", n, len(page.Events))
			}
		})
	}
}

// TestAccountRateLimits: each account has its own buckets, with the
// limits Config.AccountRateLimits names, else the platform's as
// configured: one account exhausting its limit leaves the others served.
func TestAccountRateLimits(t *testing.T) {
	platform, _ := newFake(t, fakeprovider.Config{
		RateLimits:        fakeprovider.RateLimits{Create: 2},
		AccountRateLimits: map[string]fakeprovider.RateLimits{"acct_1Tight": {Create: 1}},
	})
	// The platform's alone: the accounts keep the configured default.
	platform.SetRateLimits(fakeprovider.RateLimits{Create: 3})
	// In order, on a clock that never moves: no bucket refills.
	tests := []struct {
		account  string
		admitted int
	}{
		{"acct_1A", 2},
		{"acct_1B", 2},
		{provider.PlatformAccount, 3},
		{"acct_1Tight", 1},
	}
	for _, tc := range tests {
		f := platform.Account(tc.account)
		for i := range tc.admitted + 1 {
			_, err := f.Create(t.Context(), request(fmt.Sprintf("pur_rate_%d", i)))
			var rl *fakeprovider.RateLimitError
			switch {
			case i < tc.admitted && err != nil:
				t.Errorf("account %q: create %d: %v, want it served", tc.account, i+1, err)
			case i == tc.admitted && (!errors.As(err, &rl) || !errors.Is(err, provider.ErrRateLimited)):
				t.Errorf("account %q: create %d: %v, want a RateLimitError", tc.account, i+1, err)
			}
		}
		if n, m := len(f.AdmittedTimes("create")), f.ThrottledCalls("create"); n != tc.admitted || m != 1 {
			t.Errorf("account %q: %d creates admitted, %d throttled; want %d and 1", tc.account, n, m, tc.admitted)
		}
	}
}

// TestAccountConformance: a connected account's fake is a whole
// provider, whatever the platform's books hold.
func TestAccountConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) providertest.Target {
			platform, clk := newFake(t, fakeprovider.Config{ListPageSize: 2})
			keepBooks(t, platform)
			f := platform.Account("acct_1Conformance")
			return providertest.Target{
				Provider:    platform.ForAccount("acct_1Conformance"),
				Advance:     clk.Advance,
				Charges:     func(p string) int { return len(f.ChargesFor(p)) },
				MoneyTaken:  f.MoneyTaken,
				Refunds:     func(r string) int { return len(f.RefundsFor(r)) },
				PageSize:    2,
				Requests:    f.Calls,
				OpenDispute: openDispute(f),
			}
		},
	})
}
