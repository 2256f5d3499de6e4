package fakeprovider_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
)

// TestAccountsAreSeparateBooks: one key and one purchase id in two
// connected accounts and the platform make three charges, each found
// only in its own account, whose events name it.
func TestAccountsAreSeparateBooks(t *testing.T) {
	ctx := context.Background()
	platform := fakeprovider.New(fakeprovider.Config{})
	req := provider.CreateRequest{IdempotencyKey: "payrecon-pur_1", PurchaseID: "pur_1", Customer: "c", Amount: 300, Currency: "usd", PaymentMethod: "pm_card_visa"}
	ids := map[string]string{}
	for _, account := range []string{"", "acct_1A", "acct_1B"} {
		res, err := platform.ForAccount(account).Create(ctx, req)
		if err != nil || res.Outcome != provider.Succeeded {
			t.Fatalf("create in %q: %+v, %v", account, res, err)
		}
		ids[account] = res.PaymentID
	}
	for account, id := range ids {
		for other := range ids {
			res, err := platform.ForAccount(other).Status(ctx, id)
			want := provider.NotFound
			if other == account {
				want = provider.Succeeded
			}
			if err != nil || res.Outcome != want {
				t.Errorf("status of %q's payment %s in %q: %s, %v; want %s", account, id, other, res.Outcome, err, want)
			}
		}
		if n := platform.Account(account).MoneyTaken("pur_1"); n != 1 {
			t.Errorf("account %q: %d charges of pur_1, want 1", account, n)
		}
		found, err := platform.ForAccount(account).Search(ctx, "pur_1")
		if err != nil || found.PaymentID != id || found.Charges != 1 {
			t.Errorf("search in %q: %+v, %v; want its own %s alone", account, found, err, id)
		}
		page, err := platform.ForAccount(account).ListEvents(ctx, provider.EventQuery{Since: platform.Account(account).Charges()[0].CreatedAt})
		if err != nil || len(page.Events) != 1 {
			t.Fatalf("events of %q: %+v, %v; want its one", account, page.Events, err)
		}
		ev := page.Events[0]
		var body struct {
			Account string `json:"account"`
		}
		if err := json.Unmarshal([]byte(ev.Payload), &body); err != nil || ev.Account != account || body.Account != account || ev.PaymentID != id {
			t.Errorf("event of %q: account %q (payload %q), payment %s; want %q and %s", account, ev.Account, body.Account, ev.PaymentID, account, id)
		}
	}
}
