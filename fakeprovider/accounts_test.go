package fakeprovider_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
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

// TestServerRoutesByAccount: over HTTP, a request with the Stripe-Account
// header is served from that account's books, its webhooks go to the
// Connect endpoint signed with its secret and naming the account; a
// malformed header is refused 400, nothing made.
func TestServerRoutesByAccount(t *testing.T) {
	var (
		mu       sync.Mutex
		received []string
	)
	connect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		received = append(received, r.Header.Get("Stripe-Signature")+" "+string(body))
		mu.Unlock()
	}))
	defer connect.Close()
	platform := fakeprovider.New(fakeprovider.Config{})
	srv := fakeprovider.NewServer(platform, fakeprovider.ServerConfig{
		ConnectWebhookURL: connect.URL, ConnectWebhookSecret: "whsec_connect", SyncDelivery: true,
	})
	defer srv.Close()
	ts := httptest.NewServer(srv)
	defer ts.Close()
	post := func(account string) int {
		t.Helper()
		form := url.Values{"amount": {"300"}, "currency": {"usd"}, "confirm": {"true"}, "payment_method": {"pm_card_visa"},
			"metadata[purchase_id]": {"pur_1"}}
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/payment_intents", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer sk_test_fake")
		req.Header.Set("Idempotency-Key", "payrecon-pur_1")
		if account != "" {
			req.Header.Set("Stripe-Account", account)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("acct_1Http"); code != http.StatusOK {
		t.Fatalf("create on behalf of acct_1Http: %d", code)
	}
	if code := post("acct-bad"); code != http.StatusBadRequest {
		t.Fatalf("create with a malformed Stripe-Account: %d, want 400", code)
	}
	if n, m := platform.Account("acct_1Http").MoneyTaken("pur_1"), platform.MoneyTaken("pur_1"); n != 1 || m != 0 {
		t.Fatalf("charges of pur_1: %d in acct_1Http, %d on the platform; want 1 and 0", n, m)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(received) == 0 || !strings.Contains(received[0], `"account":"acct_1Http"`) {
		t.Fatalf("Connect endpoint received %q, want the account's event naming it", received)
	}
}
