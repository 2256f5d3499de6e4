package stripe_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
)

// listWindow is the window of the List tables: 2023-11-14T22:13:20Z
// (1700000000) to 22:30:00Z (1700001000).
var listWindow = provider.Window{From: time.Unix(1700000000, 0), Until: time.Unix(1700001000, 0)}

// listPrefix starts every error of List(listWindow).
const listPrefix = "stripe: list payment intents created in [2023-11-14T22:13:20Z, 2023-11-14T22:30:00Z): "

// listAsResult returns a call listing w, for the row tables: it reports
// List's error with a zero Result, and fails the test if a failed listing
// returns payments.
func listAsResult(t *testing.T, w provider.Window) func(ctx context.Context, p *stripe.Provider) (provider.Result, error) {
	return func(ctx context.Context, p *stripe.Provider) (provider.Result, error) {
		payments, err := p.List(ctx, w, nil)
		if err != nil && payments != nil {
			t.Errorf("List failed (%v) and returned %d payments, want none", err, len(payments))
		}
		return provider.Result{}, err
	}
}

// stripeList serves GET /v1/payment_intents as Stripe does, from pis in
// creation order: the PaymentIntents whose "created" passes the created[…]
// filters, newest first (of those created in the same second, the later
// in pis first), at most limit (default 10) a page after starting_after,
// with has_more. An unknown starting_after is a 400, as in Stripe.
func stripeList(t *testing.T, pis []map[string]any) reply {
	return stripeListOf(t, "/v1/payment_intents", "payment_intent", pis)
}

// stripeListOf is stripeList for the objects (named object in errors)
// served at path. A payment_intent parameter keeps the objects whose
// payment_intent it names, as the refunds' list does.
func stripeListOf(t *testing.T, path, object string, pis []map[string]any) reply {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != path {
			respond(404, `{"error":{"type":"invalid_request_error","message":"Unrecognized request URL"}}`)(w, r)
			return
		}
		q := r.URL.Query()
		bound := func(key string) (int64, bool) {
			v := q.Get("created[" + key + "]")
			if v == "" {
				return 0, false
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Errorf("created[%s] = %q: %v", key, v, err)
			}
			return n, true
		}
		type item struct {
			seq int
			pi  map[string]any
		}
		var match []item
		for i, pi := range pis {
			c := int64(pi["created"].(int))
			if n, ok := bound("gte"); ok && c < n {
				continue
			}
			if n, ok := bound("gt"); ok && c <= n {
				continue
			}
			if n, ok := bound("lt"); ok && c >= n {
				continue
			}
			if n, ok := bound("lte"); ok && c > n {
				continue
			}
			if q.Has("payment_intent") && pi["payment_intent"] != q.Get("payment_intent") {
				continue
			}
			match = append(match, item{i, pi})
		}
		slices.SortFunc(match, func(a, b item) int {
			return cmp.Or(cmp.Compare(b.pi["created"].(int), a.pi["created"].(int)), cmp.Compare(b.seq, a.seq))
		})
		if after := q.Get("starting_after"); after != "" {
			i := slices.IndexFunc(match, func(it item) bool { return it.pi["id"] == after })
			if i < 0 {
				respond(400, fmt.Sprintf(`{"error":{"type":"invalid_request_error","code":"resource_missing","param":"starting_after","message":"No such %s: '%s'"}}`, object, after))(w, r)
				return
			}
			match = match[i+1:]
		}
		limit := 10
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 100 {
				respond(400, `{"error":{"type":"invalid_request_error","code":"parameter_invalid_integer","param":"limit"}}`)(w, r)
				return
			}
			limit = n
		}
		more := len(match) > limit
		if more {
			match = match[:limit]
		}
		data := make([]map[string]any, len(match))
		for i, it := range match {
			data[i] = it.pi
		}
		respond(200, jsonOf(t, map[string]any{"object": "list", "url": path, "has_more": more, "data": data}))(w, r)
	}
}

// TestListReadsEveryPageOldestFirst lists 250 PaymentIntents, two a
// second, between others outside the window: three pages of 100, each
// request well formed, all payments, oldest first.
func TestListReadsEveryPageOldestFirst(t *testing.T) {
	const base = 1700000000
	var pis []map[string]any
	for i := range 5 {
		pis = append(pis, paymentIntent(fmt.Sprintf("pi_before%d", i), "succeeded", map[string]any{"created": base - 1000 + i}))
	}
	var want []string
	for i := range 250 {
		id := fmt.Sprintf("pi_%03d", i)
		want = append(want, id)
		pis = append(pis, paymentIntent(id, "succeeded", map[string]any{"created": base + i/2}))
	}
	for i := range 5 {
		pis = append(pis, paymentIntent(fmt.Sprintf("pi_after%d", i), "succeeded", map[string]any{"created": base + 125 + i}))
	}
	srv := newFakeStripe(t, stripeList(t, pis))
	p := newProvider(t, srv.URL, stripe.Config{})

	// Bounds within seconds: widened to the seconds that cover them.
	w := provider.Window{From: time.Unix(base, 400_000_000), Until: time.Unix(base+124, 1)}
	payments, err := p.List(t.Context(), w, nil)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var got []string
	for i, pay := range payments {
		got = append(got, pay.ID)
		if i > 0 && pay.Created.Before(payments[i-1].Created) {
			t.Errorf("payment %d (%s, %v) created before payment %d (%v): want oldest first", i, pay.ID, pay.Created, i-1, payments[i-1].Created)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("listed %d payments\n got %v\nwant %v", len(got), got, want)
	}

	reqs := srv.requests()
	wantAfter := []string{"", "pi_150", "pi_050"} // the last (oldest) of the page before
	if len(reqs) != len(wantAfter) {
		t.Fatalf("server got %d requests, want %d pages", len(reqs), len(wantAfter))
	}
	for i, r := range reqs {
		if r.Method != http.MethodGet || r.Path != "/v1/payment_intents" {
			t.Errorf("request %d: %s %s, want GET /v1/payment_intents", i, r.Method, r.Path)
		}
		wantForm := map[string]string{
			"created[gte]": strconv.Itoa(base),
			"created[lt]":  strconv.Itoa(base + 125),
			"limit":        "100",
		}
		if wantAfter[i] != "" {
			wantForm["starting_after"] = wantAfter[i]
		}
		for k, v := range wantForm {
			if got := r.Form.Get(k); got != v {
				t.Errorf("request %d: %s = %q, want %q", i, k, got, v)
			}
		}
		for k := range r.Form {
			if _, ok := wantForm[k]; !ok {
				t.Errorf("request %d: unexpected parameter %s = %q", i, k, r.Form.Get(k))
			}
		}
		if k := r.Header.Get("Idempotency-Key"); k != "" {
			t.Errorf("request %d: GET carries Idempotency-Key %q", i, k)
		}
	}
}

// TestListWindowSeconds checks how a window becomes Stripe's created
// filter: whole seconds unchanged, other bounds widened to the seconds
// that cover them.
func TestListWindowSeconds(t *testing.T) {
	at := func(sec, nsec int64) time.Time { return time.Unix(sec, nsec) }
	tests := []struct {
		name    string
		w       provider.Window
		gte, lt string // "" for absent
	}{
		{"whole seconds", provider.Window{From: at(1700000000, 0), Until: at(1700000060, 0)}, "1700000000", "1700000060"},
		{"fractions widen", provider.Window{From: at(1700000000, 999_999_999), Until: at(1700000060, 1)}, "1700000000", "1700000061"},
		{"within one second", provider.Window{From: at(1700000000, 100), Until: at(1700000000, 200)}, "1700000000", "1700000001"},
		{"other time zone, same instants", provider.Window{From: at(1700000000, 0).In(time.FixedZone("X", 3600)), Until: at(1700000060, 0).In(time.FixedZone("Y", -7200))}, "1700000000", "1700000060"},
		{"from the epoch: no lower bound is needed", provider.Window{From: at(0, 0), Until: at(1700000060, 0)}, "", "1700000060"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newFakeStripe(t, stripeList(t, nil))
			p := newProvider(t, srv.URL, stripe.Config{})
			payments, err := p.List(t.Context(), tc.w, nil)
			if err != nil || len(payments) != 0 {
				t.Fatalf("List = (%v, %v), want no payments", payments, err)
			}
			reqs := srv.requests()
			if len(reqs) != 1 {
				t.Fatalf("server got %d requests, want 1", len(reqs))
			}
			form := reqs[0].Form
			for k, v := range map[string]string{"created[gte]": tc.gte, "created[lt]": tc.lt} {
				if form.Has(k) != (v != "") || form.Get(k) != v {
					t.Errorf("%s = %q (present %v), want %q", k, form.Get(k), form.Has(k), v)
				}
			}
		})
	}
}

// TestListTranslatesPayments checks each listed PaymentIntent's
// translation: the status table, an unknown status as Outcome Unknown
// without failing the listing, the metadata as stored.
func TestListTranslatesPayments(t *testing.T) {
	const base = 1700000000
	pi := func(id, status string, created int, extra map[string]any) map[string]any {
		if extra == nil {
			extra = map[string]any{}
		}
		extra["created"] = created
		return paymentIntent(id, status, extra)
	}
	pis := []map[string]any{
		pi("pi_1", "succeeded", base, nil),
		pi("pi_2", "processing", base+1, nil),
		pi("pi_3", "requires_action", base+2, nil),
		pi("pi_4", "requires_confirmation", base+3, nil),
		pi("pi_5", "requires_capture", base+4, nil),
		pi("pi_6", "requires_payment_method", base+5, map[string]any{"last_payment_error": cardDeclined}),
		pi("pi_7", "canceled", base+6, map[string]any{"cancellation_reason": "abandoned"}),
		pi("pi_8", "requires_magic", base+7, nil),
		pi("pi_9", "succeeded", base+8, map[string]any{"metadata": map[string]any{}, "amount": 500, "currency": "eur"}),
		pi("pi_10", "succeeded", base+9, map[string]any{"metadata": map[string]any{"purchase_id": " pur_1"}}),
	}
	srv := newFakeStripe(t, stripeList(t, pis))
	p := newProvider(t, srv.URL, stripe.Config{})
	got, err := p.List(t.Context(), listWindow, nil)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	payment := func(id, purchase, status string, outcome provider.Outcome, created int) provider.Payment {
		return provider.Payment{ID: id, PurchaseID: purchase, Amount: 1999, Currency: "usd", Status: status, Outcome: outcome,
			Created: time.Unix(int64(created), 0).UTC()}
	}
	want := []provider.Payment{
		payment("pi_1", "pur_1", "succeeded", provider.Succeeded, base),
		payment("pi_2", "pur_1", "processing", provider.Pending, base+1),
		payment("pi_3", "pur_1", "requires_action", provider.Pending, base+2),
		payment("pi_4", "pur_1", "requires_confirmation", provider.Pending, base+3),
		payment("pi_5", "pur_1", "requires_capture", provider.Pending, base+4),
		payment("pi_6", "pur_1", "requires_payment_method", provider.Declined, base+5),
		payment("pi_7", "pur_1", "canceled", provider.Declined, base+6),
		payment("pi_8", "pur_1", "requires_magic", provider.Unknown, base+7),
		{ID: "pi_9", Amount: 500, Currency: "eur", Status: "succeeded", Outcome: provider.Succeeded, Created: time.Unix(base+8, 0).UTC()},
		payment("pi_10", " pur_1", "succeeded", provider.Succeeded, base+9),
	}
	if len(got) != len(want) {
		t.Fatalf("listed %d payments, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("payment %d\n got %+v\nwant %+v", i, got[i], want[i])
		}
		if got[i].Created.Location() != time.UTC {
			t.Errorf("payment %d: Created %v not in UTC", i, got[i].Created)
		}
	}
	if !got[7].MoneyTaken() {
		t.Errorf("a payment in an unknown status must count as money that may be taken")
	}
}

// TestListErrors checks that a failed listing returns its translated
// error and no payments, wherever it fails.
func TestListErrors(t *testing.T) {
	rows := []row{
		{name: "404: a misconfigured base, not an empty listing",
			reply: respond(404, `{"error":{"type":"invalid_request_error","message":"Unrecognized request URL (GET: /v1/payment_intent)."}}`),
			want:  want{err: stripe.ErrRejected, outcome: provider.Rejected}},
		{name: "400 invalid parameter", reply: respond(400, `{"error":{"type":"invalid_request_error","code":"parameter_invalid_integer","param":"created[gte]","message":"Invalid integer"}}`),
			want: want{err: stripe.ErrRejected, outcome: provider.Rejected}},
		{name: "402 card_error cannot answer a listing",
			reply: respond(402, `{"error":{"type":"card_error","code":"card_declined","message":"Your card was declined."}}`),
			want:  want{err: errUnknown, outcome: provider.Unknown}},
		{name: "409 idempotency_key_in_use cannot answer a listing",
			reply: respond(409, `{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use","message":"in use"}}`),
			want:  want{err: errUnknown, outcome: provider.Unknown}},
	}
	for _, r := range transportRows(t) {
		r.want.res = provider.Result{} // List returns no Result, only the error
		rows = append(rows, r)
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			r.run(t, listPrefix, listAsResult(t, listWindow))
		})
	}
}

// TestListFailsOnALaterPage checks that a failure after the first page
// returns no payments: a partial listing would pass for a complete one.
func TestListFailsOnALaterPage(t *testing.T) {
	var pis []map[string]any
	for i := range 150 {
		pis = append(pis, paymentIntent(fmt.Sprintf("pi_%03d", i), "succeeded", map[string]any{"created": 1700000000 + i}))
	}
	tests := []struct {
		name string
		fail reply
		want want
	}{
		{"500", respond(500, `{"error":{"type":"api_error","message":"An unknown error occurred"}}`),
			want{err: errUnknown, outcome: provider.Unknown}},
		{"429", respond(429, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`),
			want{err: provider.ErrRetryLater, outcome: provider.RetryLater}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			list := stripeList(t, pis)
			srv := newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Has("starting_after") {
					tc.fail(w, r)
					return
				}
				list(w, r)
			})
			p := newProvider(t, srv.URL, stripe.Config{})
			res, err := listAsResult(t, listWindow)(t.Context(), p)
			tc.want.check(t, listPrefix, res, err)
			if n := len(srv.requests()); n != 2 {
				t.Errorf("server got %d requests, want 2 pages", n)
			}
		})
	}
}

// TestListRefusesBadWindows checks the windows List refuses without a
// request: a listing of nothing is a caller's bug, not an empty audit.
func TestListRefusesBadWindows(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	tests := []struct {
		name string
		w    provider.Window
	}{
		{"zero window", provider.Window{}},
		{"zero From", provider.Window{Until: t0}},
		{"zero Until", provider.Window{From: t0}},
		{"empty", provider.Window{From: t0, Until: t0}},
		{"inverted", provider.Window{From: t0, Until: t0.Add(-time.Second)}},
		{"before the Unix epoch", provider.Window{From: time.Unix(-1, 0), Until: t0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
				t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
			})
			p := newProvider(t, srv.URL, stripe.Config{})
			res, err := listAsResult(t, tc.w)(t.Context(), p)
			want{err: stripe.ErrRejected, outcome: provider.Rejected}.check(t, "stripe: list payment intents created in [", res, err)
		})
	}
}
