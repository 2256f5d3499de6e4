package http_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
)

// fixedVerifier accepts any signature and returns its event: the
// endpoints' account rule, apart from any provider's verification.
type fixedVerifier struct{ ev provider.Event }

func (v fixedVerifier) Verify([]byte, string) (provider.Event, error) { return v.ev, nil }
func (fixedVerifier) SignatureHeader() string                         { return "Stripe-Signature" }

// TestConnectEndpoint: an event of a connected account is received at the
// Connect endpoint and stored with its account; at the platform's
// endpoint it is refused, as is an event of the platform's at the
// Connect endpoint, nothing stored either way.
func TestConnectEndpoint(t *testing.T) {
	clock := newTestClock()
	st := newStoreAt(t, clock.Now)
	svc, err := reconcile.New(st, fakeprovider.New(fakeprovider.Config{Now: clock.Now}), reconcile.Config{Now: clock.Now, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	event := func(id, account string) provider.Event {
		return provider.Event{ID: id, Account: account, Type: "payment_intent.succeeded", Outcome: provider.Succeeded,
			PaymentID: "pi_" + id, PurchaseID: "pur_x", Amount: 300, Currency: "usd", Created: clock.Now().Add(-time.Second)}
	}
	for _, tc := range []struct {
		name, path string
		ev         provider.Event
		status     int
	}{
		{"connected account at the Connect endpoint", "/webhooks/stripe/connect", event("evt_connected", "acct_1Shop"), http.StatusOK},
		{"platform's event at the Connect endpoint", "/webhooks/stripe/connect", event("evt_platform_at_connect", ""), http.StatusBadRequest},
		{"connected account at the platform's endpoint", "/webhooks/stripe", event("evt_connected_at_platform", "acct_1Shop"), http.StatusBadRequest},
		{"platform's event at the platform's endpoint", "/webhooks/stripe", event("evt_platform", ""), http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := rhttp.New(svc, rhttp.Config{
				Webhooks:        map[string]rhttp.WebhookVerifier{"stripe": fixedVerifier{tc.ev}},
				ConnectWebhooks: map[string]rhttp.WebhookVerifier{"stripe": fixedVerifier{tc.ev}},
				Logger:          discardLogger(),
			})
			srv := httptest.NewServer(s)
			defer srv.Close()
			resp, err := srv.Client().Post(srv.URL+tc.path, "application/json", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("POST %s: %d %s, want %d", tc.path, resp.StatusCode, body, tc.status)
			}
			var row reconcile.InboxEvent
			err = st.InTx(context.Background(), func(tx reconcile.Tx) error {
				var err error
				row, err = tx.GetInboxEvent(context.Background(), "stripe", tc.ev.ID)
				return err
			})
			switch {
			case tc.status != http.StatusOK && !errors.Is(err, reconcile.ErrNotFound):
				t.Fatalf("a refused event was stored: %+v, %v", row, err)
			case tc.status == http.StatusOK && (err != nil || row.Account != tc.ev.Account):
				t.Fatalf("stored event: account %q, %v; want %q", row.Account, err, tc.ev.Account)
			}
		})
	}
}
