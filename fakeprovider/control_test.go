package fakeprovider_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
)

// Content types of call.
const (
	formType = "application/x-www-form-urlencoded"
	jsonType = "application/json"
)

// call sends one request with plain net/http, as a test in another
// process would: body, if not empty, with contentType; key, if not empty,
// as Bearer auth. It returns the status code and the answer's body.
func call(t *testing.T, method, url, key, contentType, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		r.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read answer: %v", method, url, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, url, ct)
	}
	return resp.StatusCode, b
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("answer %s: %v", b, err)
	}
	return v
}

// wirePI is the part of a PaymentIntent the tests read.
type wirePI struct {
	ID         string            `json:"id"`
	Object     string            `json:"object"`
	Amount     int64             `json:"amount"`
	Currency   string            `json:"currency"`
	Status     string            `json:"status"`
	Created    int64             `json:"created"`
	Metadata   map[string]string `json:"metadata"`
	CanceledAt *int64            `json:"canceled_at"`
}

type wireList struct {
	Object  string   `json:"object"`
	URL     string   `json:"url"`
	HasMore bool     `json:"has_more"`
	Data    []wirePI `json:"data"`
}

type wireError struct {
	Error struct {
		Type  string `json:"type"`
		Code  string `json:"code"`
		Param string `json:"param"`
	} `json:"error"`
}

func TestServerList(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	t0 := s.clk.Now()
	sec := t0.Unix()
	// c[0..2] in one second, c[3..4] in the next, c[5..6] in the one after.
	var c []string
	for i := range 7 {
		switch i {
		case 3, 5:
			s.clk.Advance(time.Second)
		}
		if i == 5 {
			c = append(c, s.fake.ChargeOutside(fakeprovider.OutsideCharge{Amount: 1, Currency: "usd"}).ID)
			continue
		}
		c = append(c, mustCreate(t, s.fake, request(fmt.Sprintf("pur_page_%d", i))).PaymentID)
	}
	newest := slices.Clone(c)
	slices.Reverse(newest)
	list := func(t *testing.T, q string) wireList {
		t.Helper()
		code, b := call(t, "GET", s.http.URL+"/v1/payment_intents?"+q, testSecretKey, "", "")
		if code != http.StatusOK {
			t.Fatalf("list ?%s: %d %s", q, code, b)
		}
		l := decode[wireList](t, b)
		if l.Object != "list" || l.URL != "/v1/payment_intents" || l.Data == nil {
			t.Errorf("list ?%s: %s, want a list object", q, b)
		}
		return l
	}
	ids := func(l wireList) []string {
		var out []string
		for _, pi := range l.Data {
			out = append(out, pi.ID)
		}
		return out
	}

	t.Run("NewestFirstDefaultLimit", func(t *testing.T) {
		l := list(t, "")
		if got := ids(l); !slices.Equal(got, newest) || l.HasMore {
			t.Errorf("list = %q (has_more %v), want %q, no more", got, l.HasMore, newest)
		}
		if pi := l.Data[1]; pi.Object != "payment_intent" || pi.Created != sec+2 || pi.Status != "succeeded" || pi.Amount != 1 || len(pi.Metadata) != 0 {
			t.Errorf("outside charge listed as %+v", pi)
		}
		if pi := l.Data[6]; pi.Metadata["purchase_id"] != "pur_page_0" || pi.Created != sec {
			t.Errorf("oldest charge listed as %+v", pi)
		}
	})
	t.Run("StartingAfter", func(t *testing.T) {
		var got []string
		var more []bool
		for q := (url.Values{"limit": {"3"}}); ; {
			l := list(t, q.Encode())
			got, more = append(got, ids(l)...), append(more, l.HasMore)
			if !l.HasMore || len(more) > 5 {
				break
			}
			q.Set("starting_after", l.Data[len(l.Data)-1].ID)
		}
		if !slices.Equal(got, newest) || !slices.Equal(more, []bool{true, true, false}) {
			t.Errorf("pages gave %q (has_more %v), want %q in 3 pages", got, more, newest)
		}
	})
	t.Run("EndingBefore", func(t *testing.T) {
		// stripe-go pages backwards from the first page's first id.
		l := list(t, "limit=3&ending_before="+c[0])
		if got := ids(l); !slices.Equal(got, []string{c[3], c[2], c[1]}) || !l.HasMore {
			t.Errorf("page before c0 = %q (has_more %v), want c3 c2 c1, more", got, l.HasMore)
		}
		l = list(t, "limit=3&ending_before="+c[3])
		if got := ids(l); !slices.Equal(got, []string{c[6], c[5], c[4]}) || l.HasMore {
			t.Errorf("page before c3 = %q (has_more %v), want c6 c5 c4, no more", got, l.HasMore)
		}
		if l := list(t, "ending_before="+c[6]); len(l.Data) != 0 || l.HasMore {
			t.Errorf("page before the newest = %q, want none", ids(l))
		}
	})
	t.Run("Created", func(t *testing.T) {
		n := func(v int64) string { return fmt.Sprint(v) }
		tests := []struct {
			q    string
			want []string
		}{
			{"created[gte]=" + n(sec+1), []string{c[6], c[5], c[4], c[3]}},
			{"created[gt]=" + n(sec), []string{c[6], c[5], c[4], c[3]}},
			{"created[lt]=" + n(sec+1), []string{c[2], c[1], c[0]}},
			{"created[lte]=" + n(sec+1), []string{c[4], c[3], c[2], c[1], c[0]}},
			{"created=" + n(sec+1), []string{c[4], c[3]}},
			{"created[gte]=" + n(sec) + "&created[lt]=" + n(sec+2), []string{c[4], c[3], c[2], c[1], c[0]}},
			{"created[gt]=" + n(sec+2), nil},
			{"created[gte]=" + n(sec+1) + "&limit=1&starting_after=" + c[4], []string{c[3]}},
			// A cursor need not match the filters.
			{"created[lt]=" + n(sec+1) + "&starting_after=" + c[5], []string{c[2], c[1], c[0]}},
			{"created[gte]=" + n(sec) + "&starting_after=" + c[1], []string{c[0]}},
		}
		for _, tc := range tests {
			if got := ids(list(t, tc.q)); !slices.Equal(got, tc.want) {
				t.Errorf("list ?%s = %q, want %q", tc.q, got, tc.want)
			}
		}
	})
	t.Run("BadParameters", func(t *testing.T) {
		before := s.fake.Calls(provider.OpList)
		tests := []struct {
			q                 string
			code, param, want string
		}{
			{"limit=0", "parameter_invalid_integer", "limit", ""},
			{"limit=101", "parameter_invalid_integer", "limit", ""},
			{"limit=ten", "parameter_invalid_integer", "limit", ""},
			{"created[gte]=soon", "parameter_invalid_integer", "created[gte]", ""},
			{"created[lt]=", "parameter_invalid_integer", "created[lt]", ""},
			{"created[after]=1", "parameter_unknown", "created[after]", ""},
			{"customer=cus_1", "parameter_unknown", "customer", ""},
			{"expand[]=data.customer", "parameter_unknown", "expand[]", ""},
			{"starting_after=pi_nope", "resource_missing", "starting_after", ""},
			{"ending_before=pi_nope", "resource_missing", "ending_before", ""},
			{"starting_after=" + c[1] + "&ending_before=" + c[2], "parameter_invalid_string", "ending_before", ""},
		}
		for _, tc := range tests {
			code, b := call(t, "GET", s.http.URL+"/v1/payment_intents?"+tc.q, testSecretKey, "", "")
			e := decode[wireError](t, b).Error
			if code != http.StatusBadRequest || e.Type != "invalid_request_error" || e.Code != tc.code || e.Param != tc.param {
				t.Errorf("list ?%s: %d %s, want 400 %s on %s", tc.q, code, b, tc.code, tc.param)
			}
		}
		if code, b := call(t, "GET", s.http.URL+"/v1/payment_intents", "", "", ""); code != http.StatusUnauthorized {
			t.Errorf("list without a key: %d %s, want 401", code, b)
		}
		if got := s.fake.Calls(provider.OpList); got != before {
			t.Errorf("Calls(list) went from %d to %d: refused lists must not count", before, got)
		}
	})
	t.Run("CountsPages", func(t *testing.T) {
		before := s.fake.Calls(provider.OpList)
		list(t, "limit=2")
		list(t, "limit=2&starting_after="+c[5])
		if got := s.fake.Calls(provider.OpList); got != before+2 {
			t.Errorf("Calls(list) = %d, want %d: one per page", got, before+2)
		}
	})
	t.Run("Adapter", func(t *testing.T) {
		// The Stripe adapter pages through the server (its page size
		// is its own) and agrees with the in-process List.
		w := provider.Window{From: t0, Until: t0.Add(3 * time.Second)}
		got, err := s.adapter.List(t.Context(), w, nil)
		if err != nil {
			t.Fatalf("adapter list: %v", err)
		}
		if want := mustList(t, s.fake, w); !slices.Equal(idsOf(got), idsOf(want)) || !slices.Equal(idsOf(got), c) {
			t.Errorf("adapter list = %q, want %q", idsOf(got), c)
		}
	})
}

func TestServerListLagAndSettle(t *testing.T) {
	s := serve(t, fakeprovider.Config{ListLag: 10 * time.Second, SettleAfter: time.Minute}, fakeprovider.ServerConfig{}, nil)
	req := request("pur_list_lag")
	s.fake.Script(req.PurchaseID, fakeprovider.Processing)
	id := adapterCreate(t, s.adapter, req).PaymentID
	get := func() wireList {
		t.Helper()
		code, b := call(t, "GET", s.http.URL+"/v1/payment_intents", testSecretKey, "", "")
		if code != http.StatusOK {
			t.Fatalf("list: %d %s", code, b)
		}
		return decode[wireList](t, b)
	}
	if l := get(); len(l.Data) != 0 {
		t.Errorf("list at once = %+v, want nothing within the lag", l)
	}
	s.clk.Advance(10 * time.Second)
	if l := get(); len(l.Data) != 1 || l.Data[0].ID != id || l.Data[0].Status != "processing" {
		t.Errorf("list after the lag = %+v, want %s processing", l, id)
	}
	s.clk.Advance(time.Minute)
	if l := get(); len(l.Data) != 1 || l.Data[0].Status != "succeeded" {
		t.Errorf("list after settling = %+v, want %s succeeded", l, id)
	}
}

func TestServerLedgerEndpoint(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	req := request("pur_ledger")
	created := adapterCreate(t, s.adapter, req)
	adapterCreate(t, s.adapter, req) // a replay: a call, no charge
	declined := request("pur_ledger_declined")
	declined.PaymentMethod = fakeprovider.PaymentMethodDeclined
	adapterCreate(t, s.adapter, declined)
	if _, err := s.adapter.Status(t.Context(), created.PaymentID); err != nil {
		t.Fatal(err)
	}
	s.clk.Advance(time.Second)
	code, _ := call(t, "POST", s.http.URL+"/_fake/charges", "", formType, "purchase_id=pur_ledger&amount=1250&currency=eur")
	if code != http.StatusOK {
		t.Fatalf("outside charge: %d", code)
	}

	code, b := call(t, "GET", s.http.URL+"/_fake/ledger", "", "", "") // no key needed
	if code != http.StatusOK {
		t.Fatalf("GET /_fake/ledger: %d %s", code, b)
	}
	// The wire names, as an outside test reads them.
	raw := decode[map[string]any](t, b)
	charges, _ := raw["charges"].([]any)
	if len(charges) != 3 {
		t.Fatalf("ledger %s, want 3 charges", b)
	}
	first, _ := charges[0].(map[string]any)
	for _, k := range []string{"payment_id", "purchase_id", "amount", "currency", "status", "final_status", "created", "idempotency_key", "off_session", "outside"} {
		if _, ok := first[k]; !ok {
			t.Errorf("charge %v has no %q", first, k)
		}
	}
	if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(first["created"])); err != nil || !at.Equal(s.clk.Now().Add(-time.Second)) {
		t.Errorf("created %v (%v), want RFC 3339 of the creation", first["created"], err)
	}
	if calls, _ := raw["calls"].(map[string]any); !reflect.DeepEqual(calls, map[string]any{"create": 3.0, "status": 1.0, "search": 0.0, "list": 0.0,
		"refund_create": 0.0, "refund_get": 0.0, "refund_list": 0.0, "dispute_list": 0.0, "dispute_get": 0.0}) {
		t.Errorf("calls %v, want 3 creates and a status", calls)
	}
	if keys, _ := raw["create_calls"].(map[string]any); !reflect.DeepEqual(keys, map[string]any{"payrecon-pur_ledger": 2.0, "payrecon-pur_ledger_declined": 1.0}) {
		t.Errorf("create_calls %v, want 2 for payrecon-pur_ledger, 1 for the declined", keys)
	}

	l := decode[fakeprovider.Ledger](t, b)
	if want := s.fake.Ledger(); !reflect.DeepEqual(l, want) {
		t.Errorf("GET /_fake/ledger = %+v, want Fake.Ledger() %+v", l, want)
	}
	// What an outside test counts: two charges took pur_ledger's money,
	// one from outside.
	var taken, outside int
	for _, c := range l.Charges {
		if c.PurchaseID == req.PurchaseID && c.MoneyTaken() {
			taken++
		}
		if c.Outside {
			outside++
			if c.IdempotencyKey != "" {
				t.Errorf("outside charge %+v has a key", c)
			}
		}
	}
	if taken != 2 || outside != 1 {
		t.Errorf("ledger %+v: %d charges took pur_ledger's money (want 2), %d outside (want 1)", l, taken, outside)
	}
	if code, b := call(t, "POST", s.http.URL+"/_fake/ledger", "", formType, "x=1"); code != http.StatusNotFound {
		t.Errorf("POST /_fake/ledger: %d %s, want 404", code, b)
	}
}

func TestServerOutsideCharge(t *testing.T) {
	tests := []struct {
		name, contentType, body string
		status                  string // of the charge
		events                  []string
	}{
		{"form, webhooks by default", formType, "purchase_id=pur_out&amount=500&currency=EUR", "succeeded", []string{"payment_intent.succeeded"}},
		{"query, webhooks by default", formType, "?purchase_id=pur_out&amount=500&currency=eur", "succeeded", []string{"payment_intent.succeeded"}},
		{"json, webhooks", jsonType, `{"purchase_id":"pur_out","amount":500,"currency":"eur","webhooks":true}`, "succeeded", []string{"payment_intent.succeeded"}},
		{"form, declined", formType, "purchase_id=pur_out&amount=500&currency=eur&status=requires_payment_method&webhooks=true", "requires_payment_method", []string{"payment_intent.payment_failed"}},
		{"json, processing", jsonType, `{"purchase_id":"pur_out","customer":"cus_x","amount":500,"currency":"eur","status":"processing"}`, "processing", []string{"payment_intent.processing"}},
		{"form, without webhooks", formType, "purchase_id=pur_out&amount=500&currency=eur&webhooks=false", "succeeded", nil},
		{"json, without webhooks", jsonType, `{"purchase_id":"pur_out","amount":500,"currency":"eur","webhooks":false}`, "succeeded", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, rc := serveWebhooks(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
			path, body := "/_fake/charges", tc.body
			if q, ok := strings.CutPrefix(body, "?"); ok {
				path, body = path+"?"+q, ""
			}
			code, b := call(t, "POST", s.http.URL+path, "", tc.contentType, body)
			pi := decode[wirePI](t, b)
			if code != http.StatusOK || pi.Object != "payment_intent" || pi.Amount != 500 || pi.Currency != "eur" || pi.Status != tc.status ||
				pi.Metadata["purchase_id"] != "pur_out" || pi.Created != s.clk.Now().Unix() {
				t.Fatalf("POST %s: %d %s, want a %s payment intent for pur_out", path, code, b, tc.status)
			}
			// Announced at once (SyncDelivery), or never: not at a Tick.
			check := func(when string) {
				t.Helper()
				if got := rc.types(); !slices.Equal(got, tc.events) {
					t.Errorf("%s: received %q, want %q", when, got, tc.events)
				}
			}
			check("after the answer")
			s.srv.Tick()
			check("after a Tick")
			for _, r := range rc.received() {
				if r.err != nil || r.event.PaymentID != pi.ID || r.event.PurchaseID != "pur_out" {
					t.Errorf("event %+v (%v), want one for %s", r.event, r.err, pi.ID)
				}
			}
			cs := s.fake.ChargesFor("pur_out")
			if len(cs) != 1 || !cs[0].Outside || cs[0].ID != pi.ID || cs[0].IdempotencyKey != "" {
				t.Errorf("ledger %+v, want one outside charge %s", cs, pi.ID)
			}
			// Search and status see it; no provider call was counted for it.
			if st, err := s.adapter.Status(t.Context(), pi.ID); err != nil || st.PaymentID != pi.ID {
				t.Errorf("status = (%+v, %v)", st, err)
			}
			if n := s.fake.Calls(provider.OpCreate); n != 0 {
				t.Errorf("Calls(create) = %d, want 0", n)
			}
		})
	}
}

func TestServerSetStatus(t *testing.T) {
	tests := []struct {
		name, contentType, body string
		events                  []string // after the decline's own
	}{
		{"form, webhooks by default", formType, "status=succeeded", []string{"payment_intent.succeeded"}},
		{"json, webhooks", jsonType, `{"status":"succeeded","webhooks":true}`, []string{"payment_intent.succeeded"}},
		{"form, without webhooks", formType, "status=succeeded&webhooks=false", nil},
		{"json, without webhooks", jsonType, `{"status":"succeeded","webhooks":false}`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, rc := serveWebhooks(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
			req := request("pur_late_http")
			req.PaymentMethod = fakeprovider.PaymentMethodDeclined
			id := adapterCreate(t, s.adapter, req).PaymentID
			s.clk.Advance(time.Minute)

			code, b := call(t, "POST", s.http.URL+"/_fake/payment_intents/"+id+"/status", "", tc.contentType, tc.body)
			if pi := decode[wirePI](t, b); code != http.StatusOK || pi.ID != id || pi.Status != "succeeded" {
				t.Fatalf("set status: %d %s, want %s succeeded", code, b, id)
			}
			want := append([]string{"payment_intent.payment_failed"}, tc.events...)
			s.srv.Tick()
			if got := rc.types(); !slices.Equal(got, want) {
				t.Errorf("received %q, want %q", got, want)
			}
			// The late approval is the provider's truth, webhooks or not.
			st, err := s.adapter.Status(t.Context(), id)
			if err != nil || st.Outcome != provider.Succeeded || st.PurchaseID != req.PurchaseID {
				t.Errorf("status = (%+v, %v), want succeeded", st, err)
			}
			if res := mustSearch(t, s.fake, req.PurchaseID); res.Outcome != provider.Succeeded || res.Charges != 1 {
				t.Errorf("search = %+v, want succeeded, 1 charge", res)
			}
			ps := mustList(t, s.fake, provider.Window{From: s.clk.Now().Add(-time.Hour), Until: s.clk.Now()})
			if len(ps) != 1 || ps[0].ID != id || ps[0].Outcome != provider.Succeeded {
				t.Errorf("list = %+v, want %s succeeded", ps, id)
			}
			wantCharges(t, s.fake, req.PurchaseID, 1, 1)
		})
	}
	t.Run("Canceled", func(t *testing.T) {
		s, _ := serveWebhooks(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
		id := adapterCreate(t, s.adapter, request("pur_canceled_http")).PaymentID
		s.clk.Advance(time.Minute)
		code, b := call(t, "POST", s.http.URL+"/_fake/payment_intents/"+id+"/status", "", formType, "status=canceled")
		pi := decode[wirePI](t, b)
		if code != http.StatusOK || pi.Status != "canceled" || pi.CanceledAt == nil || *pi.CanceledAt != s.clk.Now().Unix() {
			t.Errorf("cancel: %d %s, want canceled now", code, b)
		}
		code, b = call(t, "GET", s.http.URL+"/v1/payment_intents/"+id, testSecretKey, "", "")
		if pi := decode[wirePI](t, b); code != http.StatusOK || pi.Status != "canceled" {
			t.Errorf("retrieve after cancel: %d %s", code, b)
		}
	})
}

func TestServerControlErrors(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	id := mustCreate(t, s.fake, request("pur_ctl")).PaymentID
	status := "/_fake/payment_intents/" + id + "/status"
	tests := []struct {
		method, path, contentType, body string
		code                            int
		errCode, param                  string
	}{
		{"POST", "/_fake/charges", formType, "currency=eur", 400, "parameter_missing", "amount"},
		{"POST", "/_fake/charges", formType, "amount=ten&currency=eur", 400, "parameter_invalid_integer", "amount"},
		{"POST", "/_fake/charges", formType, "amount=0&currency=eur", 400, "amount_too_small", "amount"},
		{"POST", "/_fake/charges", formType, "amount=5", 400, "parameter_missing", "currency"},
		{"POST", "/_fake/charges", formType, "amount=5&currency=eur&status=refunded", 400, "parameter_invalid_string", "status"},
		{"POST", "/_fake/charges", formType, "amount=5&currency=eur&webhooks=maybe", 400, "parameter_invalid_boolean", "webhooks"},
		{"POST", "/_fake/charges", formType, "amount=5&currency=eur&metadata[x]=y", 400, "parameter_unknown", "metadata[x]"},
		{"POST", "/_fake/charges", jsonType, `{"amount":5,"currency":"eur","key":"k"}`, 400, "parameter_unknown", "key"},
		{"POST", "/_fake/charges", jsonType, `{"amount":5,"currency":["eur"]}`, 400, "parameter_invalid_string", "currency"},
		{"POST", "/_fake/charges", jsonType, `{"amount":5.5,"currency":"eur"}`, 400, "parameter_invalid_integer", "amount"},
		{"POST", "/_fake/charges", jsonType, `{"amount":5,`, 400, "", ""},
		{"POST", "/_fake/charges", jsonType, `{"amount":5,"currency":"eur"} {}`, 400, "", ""},
		{"POST", "/_fake/payment_intents/pi_nope/status", formType, "status=succeeded", 404, "resource_missing", "intent"},
		{"POST", status, formType, "status=refunded", 400, "parameter_invalid_string", "status"},
		{"POST", status, formType, "webhooks=false", 400, "parameter_missing", "status"},
		{"POST", status, formType, "status=canceled&amount=3", 400, "parameter_unknown", "amount"},
		{"GET", "/_fake/charges", "", "", 404, "", ""},
		{"GET", status, "", "", 404, "", ""},
		{"POST", "/_fake/payment_intents//status", formType, "status=succeeded", 404, "", ""},
		{"GET", "/_fake/ledger?x=1", "", "", 400, "parameter_unknown", "x"},
		{"GET", "/_fake/", "", "", 404, "", ""},
	}
	for _, tc := range tests {
		code, b := call(t, tc.method, s.http.URL+tc.path, "", tc.contentType, tc.body)
		e := decode[wireError](t, b).Error
		if code != tc.code || e.Type != "invalid_request_error" || e.Code != tc.errCode || e.Param != tc.param {
			t.Errorf("%s %s %s: %d %s, want %d %q on %q", tc.method, tc.path, tc.body, code, b, tc.code, tc.errCode, tc.param)
		}
	}
	// Nothing was charged or moved.
	l := s.fake.Ledger()
	if len(l.Charges) != 1 || l.Charges[0].Status != fakeprovider.StatusSucceeded {
		t.Errorf("ledger %+v, want the one charge, unchanged", l.Charges)
	}
}

// TestWebhooksAnnounceLedgerChanges: changes made by direct Fake calls
// (ChargeOutside, SetStatus, a settlement) are announced at the next
// look, in the order they were made; the Server's methods announce at
// once, or never.
func TestWebhooksAnnounceLedgerChanges(t *testing.T) {
	s, rc := serveWebhooks(t, fakeprovider.Config{SettleAfter: time.Minute}, fakeprovider.ServerConfig{}, nil)
	slow := request("pur_moved")
	s.fake.Script(slow.PurchaseID, fakeprovider.Processing)
	id := mustCreate(t, s.fake, slow).PaymentID
	out := s.fake.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: slow.PurchaseID, Amount: 1250, Currency: "eur"})
	s.clk.Advance(time.Minute) // slow's settlement is due, not yet read
	if _, err := s.fake.SetStatus(id, fakeprovider.StatusCanceled); err != nil {
		t.Fatal(err)
	}
	if _, err := s.fake.SetStatus(out.ID, fakeprovider.StatusRequiresPaymentMethod); err != nil {
		t.Fatal(err)
	}
	if got := rc.types(); len(got) != 0 {
		t.Fatalf("received %q before the server looked", got)
	}
	s.srv.Tick()
	type ev struct{ typ, pi string }
	want := []ev{
		{"payment_intent.processing", id},
		{"payment_intent.succeeded", out.ID},
		{"payment_intent.succeeded", id}, // it settled before it was moved
		{"payment_intent.canceled", id},
		{"payment_intent.payment_failed", out.ID},
	}
	var got []ev
	for _, r := range rc.received() {
		if r.err != nil {
			t.Errorf("verify: %v", r.err)
		}
		got = append(got, ev{r.event.Type, r.event.PaymentID})
	}
	if !slices.Equal(got, want) {
		t.Errorf("received %v, want %v", got, want)
	}

	n := len(rc.received())
	silent := s.srv.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: "pur_silent", Amount: 1, Currency: "eur"}, false)
	if _, err := s.srv.SetStatus(silent.ID, fakeprovider.StatusCanceled, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.srv.SetStatus(id, fakeprovider.StatusSucceeded, false); err != nil {
		t.Fatal(err)
	}
	s.srv.Tick()
	if got := rc.types()[n:]; len(got) != 0 {
		t.Errorf("received %q for changes without webhooks", got)
	}
	loud := s.srv.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: "pur_loud", Amount: 1, Currency: "eur"}, true)
	if _, err := s.srv.SetStatus(loud.ID, fakeprovider.StatusCanceled, true); err != nil {
		t.Fatal(err)
	}
	if got, want := rc.types()[n:], []string{"payment_intent.succeeded", "payment_intent.canceled"}; !slices.Equal(got, want) {
		t.Errorf("received %q with webhooks, before any Tick, want %q", got, want)
	}
	if _, err := s.srv.SetStatus("pi_nope", fakeprovider.StatusCanceled, true); err == nil {
		t.Error("Server.SetStatus of an unknown id: no error")
	}
}

// TestOutsideChargesKeepPurchaseWebhookFaults: an outside charge's events
// take none of its purchase's webhook draws or scripted faults.
func TestOutsideChargesKeepPurchaseWebhookFaults(t *testing.T) {
	run := func(outside bool) []string {
		s, _ := serveWebhooks(t, fakeprovider.Config{Seed: 5},
			fakeprovider.ServerConfig{WebhookFaults: fakeprovider.WebhookFaults{Drop: 0.3, Duplicate: 0.3, Delay: 0.3}}, nil)
		s.srv.ScriptWebhooks("pur_draws", fakeprovider.WebhookDrop)
		var outsideIDs []string
		for i := range 20 {
			if outside {
				outsideIDs = append(outsideIDs, s.srv.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: "pur_draws", Amount: 1, Currency: "eur"}, true).ID)
			}
			req := request("pur_draws")
			req.IdempotencyKey = fmt.Sprintf("k%d", i)
			mustCreate(t, s.fake, req)
			s.srv.Tick()
		}
		var faults []string
		for _, ev := range s.srv.Events() {
			if !slices.Contains(outsideIDs, ev.PaymentID) {
				faults = append(faults, fmt.Sprint(ev.Faults))
			}
		}
		return faults
	}
	plain, mixed := run(false), run(true)
	if !slices.Equal(plain, mixed) {
		t.Errorf("purchase's event faults %q with outside charges, want %q as without", mixed, plain)
	}
	if len(plain) == 0 || plain[0] != "[webhook_drop]" {
		t.Errorf("faults %q, want the script's drop first", plain)
	}
}
