package stripe_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
)

// TestListEventsSendsOnePageAndTranslatesAsVerify checks the request of
// ListEvents (created[gte], types[], limit, starting_after) and that a
// listed event, a payment's or a dispute's, is the event Verify makes of
// the same event delivered as a webhook, digest included, while an event
// Verify refuses is reported in Refused and the page goes on.
func TestListEventsSendsOnePageAndTranslatesAsVerify(t *testing.T) {
	succeeded := whEvent(t, "payment_intent.succeeded", "", whPI("pi_3SAbCdEfGhIjKlMn", "succeeded", whPurchase, nil))
	// Another delivery renders the envelope differently: the digest
	// covers only what the event says.
	var env map[string]any
	if err := json.Unmarshal(succeeded, &env); err != nil {
		t.Fatal(err)
	}
	env["pending_webhooks"] = 0
	listed, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	foreign := whEvent(t, "payment_intent.succeeded", "", whPI("pi_3Foreign", "succeeded", nil, nil))
	foreign = []byte(string(foreign[:len(foreign)-1]) + `,"id":"evt_foreign"}`) // a later duplicate key wins
	old := whEvent(t, "payment_intent.succeeded", "2019-02-19", whPI("pi_3Old", "succeeded", whPurchase, nil))
	old = []byte(string(old[:len(old)-1]) + `,"id":"evt_old"}`)
	dispute := []byte(strings.TrimSpace(string(readTestdata(t, "disputes/funds_withdrawn.json"))))
	page := `{"object":"list","url":"/v1/events","has_more":true,"data":[` + string(listed) + `,` + string(foreign) + `,` +
		string(dispute) + `,` + string(old) + `]}`
	fs := newFakeStripe(t, respond(http.StatusOK, page))
	p := newProvider(t, fs.URL, stripe.Config{})

	since := time.Unix(1_760_000_000, 500_000_000)
	got, err := p.ListEvents(t.Context(), provider.EventQuery{Since: since, After: "evt_prev", Limit: 2})
	if err != nil {
		t.Fatalf("ListEvents: %v", err)
	}
	reqs := fs.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1: a page is one call", len(reqs))
	}
	r := reqs[0]
	if r.Method != http.MethodGet || r.Path != "/v1/events" {
		t.Errorf("request %s %s, want GET /v1/events", r.Method, r.Path)
	}
	for param, want := range map[string]string{"created[gte]": "1760000000", "limit": "2", "starting_after": "evt_prev"} {
		if g := r.Form.Get(param); g != want {
			t.Errorf("%s = %q, want %q", param, g, want)
		}
	}
	var types []string
	for i := range len(provider.EventTypes) {
		types = append(types, r.Form.Get(fmt.Sprintf("types[%d]", i)))
	}
	if !slices.Equal(types, provider.EventTypes) {
		t.Errorf("types = %q, want provider.EventTypes %q", types, provider.EventTypes)
	}

	want, err := whVerifier(t, stripe.WebhookConfig{}).Verify(succeeded, whSign(whSecret, whNow, succeeded))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if len(got.Events) != 3 {
		t.Fatalf("events %d, want 3: %+v", len(got.Events), got)
	}
	// A payment of another integration on the account is listed, with no
	// purchase, for the inbox to store unmatched and the audit to judge.
	if f := got.Events[1]; f.ID != "evt_foreign" || f.PaymentID != "pi_3Foreign" || f.PurchaseID != "" {
		t.Errorf("second event %+v, want evt_foreign of pi_3Foreign with no purchase", f)
	}
	ev := got.Events[0]
	if ev.Payload != string(listed) {
		t.Errorf("Payload %q, want the listed event's JSON", ev.Payload)
	}
	ev.Payload = ""
	if ev != want {
		t.Errorf("listed event\n%+v\nwant Verify's of its webhook\n%+v", ev, want)
	}
	wantDispute, err := whVerifier(t, stripe.WebhookConfig{}).Verify(dispute, whSign(whSecret, whNow, dispute))
	if err != nil {
		t.Fatalf("Verify of the dispute's event: %v", err)
	}
	if d := got.Events[2]; d.Payload != string(dispute) {
		t.Errorf("dispute's Payload %q, want the listed event's JSON", d.Payload)
	} else if d.Payload = ""; wantDispute.Dispute == nil || !sameEvent(d, wantDispute) {
		t.Errorf("listed dispute event\n%s\nwant Verify's of its webhook, with its dispute\n%s", showEvent(d), showEvent(wantDispute))
	}
	if len(got.Refused) != 1 || got.Refused[0].ID != "evt_old" {
		t.Fatalf("refused %+v, want evt_old (another API version)", got.Refused)
	}
	if !errors.Is(got.Refused[0].Err, stripe.ErrAPIVersion) {
		t.Errorf("refused for %v, want ErrAPIVersion", got.Refused[0].Err)
	}
	if !got.HasMore || got.Next != "evt_old" {
		t.Errorf("HasMore %v Next %q, want true and the page's oldest event, refused or not", got.HasMore, got.Next)
	}
}

// TestListEventsRefusesBeforeSending checks the queries refused without
// a request.
func TestListEventsRefusesBeforeSending(t *testing.T) {
	fs := newFakeStripe(t, respond(http.StatusOK, `{"object":"list","data":[],"has_more":false}`))
	p := newProvider(t, fs.URL, stripe.Config{})
	many := make([]string, 21)
	for i := range many {
		many[i] = "refund.updated"
	}
	for name, q := range map[string]provider.EventQuery{
		"no since":     {},
		"before epoch": {Since: time.Unix(-1, 0)},
		"limit":        {Since: time.Unix(1, 0), Limit: provider.MaxEventPage + 1},
		"types":        {Since: time.Unix(1, 0), Types: many},
	} {
		_, err := p.ListEvents(t.Context(), q)
		if !errors.Is(err, provider.ErrRejected) {
			t.Errorf("%s: %v, want ErrRejected", name, err)
		}
	}
	if n := len(fs.requests()); n != 0 {
		t.Errorf("%d requests sent, want none", n)
	}
	// One type goes as type, not types[].
	if _, err := p.ListEvents(t.Context(), provider.EventQuery{Since: time.Unix(1, 0), Types: []string{"refund.failed"}}); err != nil {
		t.Fatalf("ListEvents: %v", err)
	}
	if r := fs.requests()[0]; r.Form.Get("type") != "refund.failed" || r.Form.Get("limit") != "100" {
		t.Errorf("type %q limit %q, want refund.failed and 100", r.Form.Get("type"), r.Form.Get("limit"))
	}
}
