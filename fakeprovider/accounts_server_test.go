package fakeprovider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/providertest"
	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
)

// Connected accounts over HTTP: the Stripe-Account header.

// connectSecret is the Connect endpoint's signing secret.
const connectSecret = "whsec_fakeprovider_connect"

// callAs sends one request to base+path with the test key, form (if not
// empty) as its body, and the Stripe-Account header account (none when
// ""). It returns the status code, the headers and the answer's body.
func callAs(t *testing.T, base, method, path, account, form string) (int, http.Header, []byte) {
	t.Helper()
	var body io.Reader
	if form != "" {
		body = strings.NewReader(form)
	}
	r, err := http.NewRequestWithContext(t.Context(), method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+testSecretKey)
	if form != "" {
		r.Header.Set("Content-Type", formType)
	}
	if account != "" {
		r.Header.Set("Stripe-Account", account)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatalf("%s %s as %q: %v", method, path, account, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s as %q: read answer: %v", method, path, account, err)
	}
	return resp.StatusCode, resp.Header, b
}

// idsIn returns the ids an answer holds: its data's for a list, else its
// own.
func idsIn(t *testing.T, b []byte) []string {
	t.Helper()
	var v struct {
		ID   string `json:"id"`
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("answer %s: %v", b, err)
	}
	if v.ID != "" {
		return []string{v.ID}
	}
	var out []string
	for _, d := range v.Data {
		out = append(out, d.ID)
	}
	return out
}

// servedBooks serves a fake in which the platform and each connected
// account of accounts charged pur_same through the adapter, under one
// key, and returns the payment ids by account.
func servedBooks(t *testing.T, cfg fakeprovider.Config) (*served, map[string]string) {
	t.Helper()
	s := serve(t, cfg, fakeprovider.ServerConfig{}, nil)
	pay := map[string]string{}
	for _, account := range accounts {
		pay[account] = adapterCreate(t, s.adapter.ForAccount(account), request("pur_same")).PaymentID
	}
	return s, pay
}

func TestServerRoutesByAccount(t *testing.T) {
	s, pay := servedBooks(t, fakeprovider.Config{})
	pi := func(account string) string { return "/v1/payment_intents/" + pay[account] }
	search := "/v1/payment_intents/search?query=" + url.QueryEscape("metadata['purchase_id']:'pur_same'")
	tests := []struct {
		name, path, account string
		code                int
		ids                 []string // listed or retrieved, when 200
	}{
		{"retrieve an account's", pi("acct_1A"), "acct_1A", http.StatusOK, []string{pay["acct_1A"]}},
		{"retrieve another account's", pi("acct_1A"), "acct_1B", http.StatusNotFound, nil},
		{"retrieve an account's as the platform", pi("acct_1A"), "", http.StatusNotFound, nil},
		{"retrieve the platform's as an account", pi(""), "acct_1A", http.StatusNotFound, nil},
		{"search in an account", search, "acct_1B", http.StatusOK, []string{pay["acct_1B"]}},
		{"search in the platform", search, "", http.StatusOK, []string{pay[""]}},
		{"list an account's", "/v1/payment_intents", "acct_1A", http.StatusOK, []string{pay["acct_1A"]}},
		{"list the platform's", "/v1/payment_intents", "", http.StatusOK, []string{pay[""]}},
		{"list a new account's", "/v1/payment_intents", "acct_1New", http.StatusOK, nil},
	}
	requestIDs := map[string]bool{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, h, b := callAs(t, s.http.URL, http.MethodGet, tc.path, tc.account, "")
			if code != tc.code {
				t.Fatalf("%d %s, want %d", code, b, tc.code)
			}
			if got := idsIn(t, b); code == http.StatusOK && !slices.Equal(got, tc.ids) {
				t.Errorf("answered %q, want %q", got, tc.ids)
			}
			if id := h.Get("Request-Id"); requestIDs[id] {
				t.Errorf("Request-Id %s answered another request too", id)
			} else {
				requestIDs[id] = true
			}
		})
	}
}

// TestServerRefusesMalformedAccount: a Stripe-Account header that names
// no account is a Stripe error, on every path, and nothing is done.
func TestServerRefusesMalformedAccount(t *testing.T) {
	s, _ := servedBooks(t, fakeprovider.Config{})
	create := url.Values{"amount": {"1250"}, "currency": {"eur"}, "confirm": {"true"}, "payment_method": {fakeprovider.PaymentMethodVisa},
		"metadata[purchase_id]": {"pur_same"}}.Encode()
	requests := []struct{ method, path, form string }{
		{http.MethodPost, "/v1/payment_intents", create},
		{http.MethodGet, "/v1/events", ""},
		{http.MethodGet, "/_fake/ledger", ""},
		{http.MethodPost, "/_fake/charges", "amount=500&currency=eur"},
	}
	for _, bad := range []string{"acct_", "acct-1A", "acct_1 A", "ACCT_1A", "pi_1A"} {
		for _, r := range requests {
			t.Run(fmt.Sprintf("%s %s as %q", r.method, r.path, bad), func(t *testing.T) {
				code, _, b := callAs(t, s.http.URL, r.method, r.path, bad, r.form)
				var e struct {
					Error struct{ Type, Code, Message string } `json:"error"`
				}
				json.Unmarshal(b, &e)
				if code != http.StatusBadRequest || e.Error.Type != "invalid_request_error" || e.Error.Code != "account_invalid" || !strings.Contains(e.Error.Message, fmt.Sprintf("%q", bad)) {
					t.Errorf("%d %s, want a 400 invalid_request_error account_invalid quoting the header", code, b)
				}
			})
		}
	}
	for _, account := range accounts {
		if n := len(s.fake.Account(account).Charges()); n != 1 {
			t.Errorf("account %q: %d charges, want its 1 alone", account, n)
		}
	}
}

// TestServerListsAccountEvents: GET /v1/events with the header lists
// that account's events alone, each naming it.
func TestServerListsAccountEvents(t *testing.T) {
	s, pay := servedBooks(t, fakeprovider.Config{})
	for _, account := range accounts {
		t.Run("account="+account, func(t *testing.T) {
			code, _, b := callAs(t, s.http.URL, http.MethodGet, "/v1/events", account, "")
			var list struct {
				Data []map[string]json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal(b, &list); code != http.StatusOK || err != nil || len(list.Data) != 1 {
				t.Fatalf("%d %s, want the account's one event", code, b)
			}
			ev := list.Data[0]
			var obj struct {
				Object struct {
					ID string `json:"id"`
				} `json:"object"`
			}
			json.Unmarshal(ev["data"], &obj)
			want := ""
			if account != provider.PlatformAccount {
				want = fmt.Sprintf("%q", account)
			}
			if got := string(ev["account"]); got != want || obj.Object.ID != pay[account] {
				t.Errorf("event of %s naming account %s, want of %s naming %s", obj.Object.ID, got, pay[account], want)
			}
		})
	}
}

// TestServerAccountControl: the simulator's endpoints act on the account
// the header names.
func TestServerAccountControl(t *testing.T) {
	s, pay := servedBooks(t, fakeprovider.Config{})
	post := func(t *testing.T, path, account, form string, want int) {
		t.Helper()
		if code, _, b := callAs(t, s.http.URL, http.MethodPost, path, account, form); code != want {
			t.Fatalf("POST %s as %q: %d %s, want %d", path, account, code, b, want)
		}
	}
	t.Run("ledger", func(t *testing.T) {
		for _, account := range accounts {
			code, _, b := callAs(t, s.http.URL, http.MethodGet, "/_fake/ledger", account, "")
			l := decode[fakeprovider.Ledger](t, b)
			if code != http.StatusOK || l.Account != account || len(l.Charges) != 1 || l.Charges[0].PaymentID != pay[account] {
				t.Errorf("ledger of %q: %d %s, want its one charge %s", account, code, b, pay[account])
			}
			if _, named := decode[map[string]any](t, b)["account"]; named != (account != provider.PlatformAccount) {
				t.Errorf("ledger of %q names an account: %t", account, named)
			}
		}
	})
	t.Run("charges and disputes", func(t *testing.T) {
		post(t, "/_fake/charges", "acct_1B", "purchase_id=pur_outside&amount=500&currency=eur", http.StatusOK)
		post(t, "/_fake/disputes", "acct_1A", "payment="+pay["acct_1A"], http.StatusOK)
		post(t, "/_fake/disputes", "acct_1B", "payment="+pay["acct_1A"], http.StatusBadRequest) // resource_missing
		for _, tc := range []struct {
			account           string
			outside, disputes int
		}{{provider.PlatformAccount, 0, 0}, {"acct_1A", 0, 1}, {"acct_1B", 1, 0}} {
			f := s.fake.Account(tc.account)
			if n, m := len(f.ChargesFor("pur_outside")), len(f.Disputes()); n != tc.outside || m != tc.disputes {
				t.Errorf("account %q: %d outside charges, %d disputes; want %d and %d", tc.account, n, m, tc.outside, tc.disputes)
			}
		}
	})
	t.Run("outage", func(t *testing.T) {
		steps := []struct {
			name    string
			account string // whose outage
			d       string
			want    map[string]int // GET of its own payment, by account
		}{
			{"an account's", "acct_1A", "1m", map[string]int{"": 200, "acct_1A": 503, "acct_1B": 200}},
			{"the platform's, every account's", "", "1m", map[string]int{"": 503, "acct_1A": 503, "acct_1B": 503}},
			{"the platform's ended", "", "0s", map[string]int{"": 200, "acct_1A": 503, "acct_1B": 200}},
			{"the account's ended", "acct_1A", "0s", map[string]int{"": 200, "acct_1A": 200, "acct_1B": 200}},
		}
		for _, st := range steps {
			post(t, "/_fake/outage", st.account, "duration="+st.d, http.StatusOK)
			for account, want := range st.want {
				if code, _, b := callAs(t, s.http.URL, http.MethodGet, "/v1/payment_intents/"+pay[account], account, ""); code != want {
					t.Errorf("%s: GET as %q: %d %s, want %d", st.name, account, code, b, want)
				}
			}
		}
	})
}

// TestServerAccountRateLimits: each account is limited apart, with its
// own limits: one answered 429 leaves the others served.
func TestServerAccountRateLimits(t *testing.T) {
	s := serve(t, fakeprovider.Config{
		RateLimits:        fakeprovider.RateLimits{Retrieve: 1},
		AccountRateLimits: map[string]fakeprovider.RateLimits{"acct_1Wide": {Retrieve: 2}},
	}, fakeprovider.ServerConfig{}, nil)
	// In order, on a clock that never moves: no bucket refills.
	steps := []struct {
		account string
		code    int
	}{
		{"acct_1A", http.StatusNotFound},
		{"acct_1A", http.StatusTooManyRequests},
		{"acct_1B", http.StatusNotFound},
		{provider.PlatformAccount, http.StatusNotFound},
		{provider.PlatformAccount, http.StatusTooManyRequests},
		{"acct_1B", http.StatusTooManyRequests},
		{"acct_1Wide", http.StatusNotFound},
		{"acct_1Wide", http.StatusNotFound},
		{"acct_1Wide", http.StatusTooManyRequests},
	}
	for i, st := range steps {
		code, h, b := callAs(t, s.http.URL, http.MethodGet, "/v1/payment_intents/pi_missing", st.account, "")
		if code != st.code {
			t.Errorf("step %d, as %q: %d %s, want %d", i+1, st.account, code, b, st.code)
		}
		if code == http.StatusTooManyRequests && h.Get("Stripe-Should-Retry") != "true" {
			t.Errorf("step %d: 429 without Stripe-Should-Retry: true", i+1)
		}
	}
	for account, want := range map[string]int{"acct_1A": 1, "acct_1B": 1, "": 1, "acct_1Wide": 1} {
		if n := s.fake.Account(account).ThrottledCalls("retrieve"); n != want {
			t.Errorf("account %q: %d retrieves throttled, want %d", account, n, want)
		}
	}
}

// connectEvent is what a test reads of a webhook received.
type connectEvent struct {
	account, typ, purchase string
}

func TestConnectWebhooks(t *testing.T) {
	for _, connect := range []bool{true, false} {
		t.Run(fmt.Sprintf("connect=%t", connect), func(t *testing.T) {
			var clk *testclock.Clock
			now := func() time.Time { return clk.Now() }
			platformRC := newReceiver(t, now, nil)
			connectRC := newReceiverFor(t, connectSecret, now, nil)
			scfg := fakeprovider.ServerConfig{WebhookURL: platformRC.URL, WebhookSecret: whSecret, SyncDelivery: true, WebhookBackoff: time.Microsecond}
			if connect {
				scfg.ConnectWebhookURL, scfg.ConnectWebhookSecret = connectRC.URL, connectSecret
			}
			s := serve(t, fakeprovider.Config{SettleAfter: time.Minute}, scfg, nil)
			clk = s.clk

			adapterCreate(t, s.adapter, request("pur_platform"))
			adapterCreate(t, s.adapter.ForAccount("acct_1A"), request("pur_a"))
			// Made in-process: announced at the next Tick, as the
			// platform's are.
			b := s.fake.Account("acct_1B")
			b.Script("pur_b", fakeprovider.Processing)
			mustCreate(t, b, request("pur_b"))
			s.srv.Tick()
			s.clk.Advance(time.Minute)
			s.srv.Tick()

			all := []connectEvent{
				{"acct_1A", "payment_intent.succeeded", "pur_a"},
				{"acct_1B", "payment_intent.processing", "pur_b"},
				{"acct_1B", "payment_intent.succeeded", "pur_b"},
			}
			var wantConnect []connectEvent
			if connect {
				wantConnect = all
			}
			checkReceived(t, "platform endpoint", platformRC, []connectEvent{{"", "payment_intent.succeeded", "pur_platform"}})
			checkReceived(t, "Connect endpoint", connectRC, wantConnect)
			// The Connect endpoint's secret signs them, not the
			// platform's.
			platformVerifier, err := stripe.NewWebhookVerifier(stripe.WebhookConfig{Secret: whSecret, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range connectRC.received() {
				if _, err := platformVerifier.Verify(r.body, r.header.Get("Stripe-Signature")); err == nil {
					t.Errorf("event %s verifies with the platform's secret", r.event.ID)
				}
			}
			// Each Server's own view; the event logs hold them all.
			for _, account := range []string{"acct_1A", "acct_1B"} {
				var sent []connectEvent
				for _, ev := range s.srv.Account(account).Events() {
					sent = append(sent, connectEvent{ev.Account, ev.Type, ev.PurchaseID})
				}
				var want []connectEvent
				for _, ev := range wantConnect {
					if ev.account == account {
						want = append(want, ev)
					}
				}
				if !slices.Equal(sent, want) {
					t.Errorf("events of %s's Server: %v, want %v", account, sent, want)
				}
				code, _, body := callAs(t, s.http.URL, http.MethodGet, "/_fake/webhooks", account, "")
				if v := decode[fakeprovider.WebhookView](t, body); code != http.StatusOK || len(v.Events) != len(want) || v.Stats.Acked != len(want) {
					t.Errorf("GET /_fake/webhooks as %s: %d, %d events, %d acked; want %d", account, code, len(v.Events), v.Stats.Acked, len(want))
				}
			}
			if n := len(s.srv.Events()); n != 1 {
				t.Errorf("the platform's Server emitted %d events, want its 1", n)
			}
			b.Charges() // settles what is due: logged, sent or not
			if n := len(b.EventLog()); n != 2 {
				t.Errorf("acct_1B's event log holds %d events, want 2", n)
			}
		})
	}
}

// checkReceived checks what rc received, in order: each event verified
// with rc's secret, naming its account in provider.Event.Account and at
// the top of its JSON.
func checkReceived(t *testing.T, what string, rc *receiver, want []connectEvent) {
	t.Helper()
	var got []connectEvent
	for _, r := range rc.received() {
		if r.err != nil {
			t.Errorf("%s: event failed to verify: %v", what, r.err)
			continue
		}
		var top struct {
			Account *string `json:"account"`
		}
		if err := json.Unmarshal(r.body, &top); err != nil {
			t.Fatalf("%s: %s: %v", what, r.body, err)
		}
		if (top.Account == nil) != (r.event.Account == provider.PlatformAccount) || top.Account != nil && *top.Account != r.event.Account {
			t.Errorf("%s: event %s: JSON account %v, Event.Account %q", what, r.event.ID, top.Account, r.event.Account)
		}
		got = append(got, connectEvent{r.event.Account, r.event.Type, r.event.PurchaseID})
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s received %v, want %v", what, got, want)
	}
}

// TestConnectWebhooksInBackground: without SyncDelivery, the accounts'
// Servers deliver in the background, Drain waits for them, and Close
// stops them, even one made after it.
func TestConnectWebhooksInBackground(t *testing.T) {
	rc := newReceiverFor(t, connectSecret, time.Now, nil)
	f := fakeprovider.New(fakeprovider.Config{})
	srv := fakeprovider.NewServer(f, fakeprovider.ServerConfig{ConnectWebhookURL: rc.URL, ConnectWebhookSecret: connectSecret, Logger: quiet})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close)

	adapterCreate(t, newAdapter(t, ts.URL).ForAccount("acct_1A"), request("pur_a"))
	mustCreate(t, f.Account("acct_1B"), request("pur_b"))
	srv.Tick()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	var got []connectEvent
	for _, r := range rc.received() {
		got = append(got, connectEvent{r.event.Account, r.event.Type, r.event.PurchaseID})
	}
	slices.SortFunc(got, func(a, b connectEvent) int { return strings.Compare(a.account, b.account) })
	want := []connectEvent{{"acct_1A", "payment_intent.succeeded", "pur_a"}, {"acct_1B", "payment_intent.succeeded", "pur_b"}}
	if !slices.Equal(got, want) {
		t.Errorf("received %v, want %v", got, want)
	}

	srv.Close()
	if code, _, b := callAs(t, ts.URL, http.MethodGet, "/v1/payment_intents/pi_missing", "acct_1Late", ""); code != http.StatusNotFound {
		t.Errorf("after Close, a new account's request: %d %s, want 404", code, b)
	}
}

// TestServerAccountConformance: the Stripe adapter's view of a connected
// account, through the server, is a whole provider, whatever the
// platform's books hold.
func TestServerAccountConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) providertest.Target {
			s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
			keepBooks(t, s.fake)
			f := s.fake.Account("acct_1Conformance")
			return providertest.Target{
				Provider:    newAdapterPaged(t, s.http.URL, 2).ForAccount("acct_1Conformance"),
				Advance:     s.clk.Advance,
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

// TestServerCreateNamesAccount: the request a Server hands its fakes
// names the account of its Stripe-Account header (Config.OnAccept).
func TestServerCreateNamesAccount(t *testing.T) {
	var (
		mu  sync.Mutex
		got []string
	)
	servedBooks(t, fakeprovider.Config{OnAccept: func(req provider.CreateRequest) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, req.Account)
	}})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, accounts) {
		t.Errorf("creates accepted in %q, want %q", got, accounts)
	}
}

func TestServerConfigConnectEndpoint(t *testing.T) {
	tests := []struct {
		name        string
		url, secret string
	}{
		{"URL without secret", "http://127.0.0.1:1/connect", ""},
		{"secret without URL", "", connectSecret},
		{"relative URL", "/connect", connectSecret},
		{"not http", "ftp://127.0.0.1/connect", connectSecret},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantPanic(t, "NewServer", func() {
				fakeprovider.NewServer(fakeprovider.New(fakeprovider.Config{}),
					fakeprovider.ServerConfig{ConnectWebhookURL: tc.url, ConnectWebhookSecret: tc.secret, Logger: quiet}).Close()
			})
		})
	}
}
