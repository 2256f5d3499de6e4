package fakeprovider_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
)

// TestOutageRefusesEveryCall: POST /_fake/outage makes every call of the
// API a 503 that does nothing, until the duration has passed by the
// server's clock; the simulator's own endpoints keep answering.
func TestOutageRefusesEveryCall(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	form := legacyForm(request("pur_1"))
	create := func(key string) int {
		t.Helper()
		code, _, _ := postCreate(t, s, key, form)
		return code
	}
	if code, b := call(t, "POST", s.http.URL+"/_fake/outage", "", formType, "duration=30s"); code != http.StatusOK {
		t.Fatalf("POST /_fake/outage: %d %s", code, b)
	}
	if code := create("k1"); code != http.StatusServiceUnavailable {
		t.Errorf("create in an outage: %d, want 503", code)
	}
	if code, _ := call(t, "GET", s.http.URL+"/v1/payment_intents/pi_x", testSecretKey, "", ""); code != http.StatusServiceUnavailable {
		t.Errorf("retrieve in an outage: %d, want 503", code)
	}
	if code, b := call(t, "GET", s.http.URL+"/_fake/ledger", "", "", ""); code != http.StatusOK {
		t.Errorf("ledger in an outage: %d %s", code, b)
	}
	if n := len(s.fake.Ledger().Charges); n != 0 {
		t.Errorf("%d charges made in an outage, want none", n)
	}
	s.clk.Advance(30 * time.Second)
	if code := create("k1"); code != http.StatusOK {
		t.Errorf("create after the outage: %d, want 200", code)
	}
	for _, body := range []string{"", "duration=-1s", "duration=soon", "duration=1s&x=1"} {
		if code, b := call(t, "POST", s.http.URL+"/_fake/outage", "", formType, body); code != http.StatusBadRequest {
			t.Errorf("POST /_fake/outage %q: %d %s, want 400", body, code, b)
		}
	}
}

// TestWebhookView: GET /_fake/webhooks shows the events and deliveries.
func TestWebhookView(t *testing.T) {
	s, _ := serveWebhooks(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	form := legacyForm(request("pur_1"))
	if code, _, _ := postCreate(t, s, "k1", form); code != http.StatusOK {
		t.Fatalf("create: %d", code)
	}
	s.srv.Tick()
	code, b := call(t, "GET", s.http.URL+"/_fake/webhooks", "", "", "")
	if code != http.StatusOK {
		t.Fatalf("GET /_fake/webhooks: %d %s", code, b)
	}
	v := decode[fakeprovider.WebhookView](t, b)
	if len(v.Events) == 0 || len(v.Deliveries) == 0 || v.Stats.Acked == 0 {
		t.Errorf("view %+v: want events, deliveries and acks", v)
	}
	for _, ev := range v.Events {
		if ev.Payload != nil {
			t.Errorf("event %s carries its payload", ev.ID)
		}
	}
}
