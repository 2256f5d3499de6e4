package stripe_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
)

// row is one line of the translation table, played through real HTTP.
type row struct {
	name  string
	reply reply
	// closed closes the server before the call: the connection is refused.
	closed bool
	// timeout, when set, is the call's context deadline.
	timeout time.Duration
	want    want
	// wantErrIs, when set, must also be wrapped by the error.
	wantErrIs error
}

// run plays r against a fresh fake Stripe server with call and checks the
// answer and that exactly one request (none if closed) was sent: with the
// default MaxNetworkRetries stripe-go must not retry anything.
func (r row) run(t *testing.T, prefix string, call func(ctx context.Context, p *stripe.Provider) (provider.Result, error)) []recorded {
	t.Helper()
	var (
		res provider.Result
		err error
	)
	reqs := r.send(t, func(ctx context.Context, p *stripe.Provider) { res, err = call(ctx, p) })
	r.want.check(t, prefix, res, err)
	if r.wantErrIs != nil && !errors.Is(err, r.wantErrIs) {
		t.Errorf("error %v, want one wrapping %v", err, r.wantErrIs)
	}
	return reqs
}

// send plays r's server side against a fresh fake Stripe server while
// call runs, and checks that exactly one request (none if closed) was
// sent. It returns the requests.
func (r row) send(t *testing.T, call func(ctx context.Context, p *stripe.Provider)) []recorded {
	t.Helper()
	answer := r.reply
	if answer == nil {
		answer = func(w http.ResponseWriter, _ *http.Request) { t.Error("request reached a closed server") }
	}
	var ctx context.Context = t.Context()
	if r.timeout > 0 {
		// The deadline runs from the request's arrival, not from the
		// call, so that a slow machine cannot expire it before the server
		// has the request (which would make it a different row).
		expiring := newArrivalDeadline(ctx, r.timeout)
		ctx = expiring
		next := answer
		answer = func(w http.ResponseWriter, req *http.Request) {
			expiring.start()
			next(w, req)
		}
	}
	srv := newFakeStripe(t, answer)
	p := newProvider(t, srv.URL, stripe.Config{HTTPClient: srv.Client()})
	if r.closed {
		srv.Close()
	}
	call(ctx, p)
	reqs := srv.requests()
	wantN := 1
	if r.closed {
		wantN = 0
	}
	if len(reqs) != wantN {
		t.Errorf("server got %d requests, want %d (stripe-go must not retry)", len(reqs), wantN)
	}
	return reqs
}

// Results shared by the tables.
var (
	succeeded = provider.Result{Outcome: provider.Succeeded, PaymentID: "pi_1", PurchaseID: "pur_1", Status: "succeeded", Amount: 1999, Currency: "usd"}
	declined  = provider.Result{Outcome: provider.Declined, PaymentID: "pi_1", PurchaseID: "pur_1", Status: "requires_payment_method", Reason: "insufficient_funds", Amount: 1999, Currency: "usd"}
	// authDeclined is the decline of an off-session charge on a card that
	// demands authentication: definite, not pending.
	authDeclined = provider.Result{Outcome: provider.Declined, PaymentID: "pi_1", PurchaseID: "pur_1", Status: "requires_payment_method",
		Reason: stripe.ReasonAuthenticationRequired, Amount: 1999, Currency: "usd"}
)

// pending returns the Pending result of pi_1 in status.
func pending(status string) provider.Result {
	return provider.Result{Outcome: provider.Pending, PaymentID: "pi_1", PurchaseID: "pur_1", Status: status, Amount: 1999, Currency: "usd"}
}

// transportRows are the failures below Stripe's answers, for every call.
func transportRows(t *testing.T) []row {
	return []row{
		{name: "connection reset after the request was sent", reply: resetConnection(t),
			want: want{err: errUnknown, outcome: provider.Unknown}},
		{name: "timeout: no answer before the context deadline", reply: hang, timeout: 50 * time.Millisecond,
			want: want{err: errUnknown, outcome: provider.Unknown}, wantErrIs: context.DeadlineExceeded},
		{name: "connection refused: nothing sent", closed: true,
			want: want{err: provider.ErrRetryLater, outcome: provider.RetryLater}},
		{name: "500 api_error", reply: respond(500, `{"error":{"type":"api_error","message":"An unknown error occurred"}}`),
			want: want{res: provider.Result{Reason: "api_error"}, err: errUnknown, outcome: provider.Unknown}},
		{name: "503 api_error", reply: respond(503, `{"error":{"type":"api_error","message":"Service unavailable"}}`),
			want: want{res: provider.Result{Reason: "api_error"}, err: errUnknown, outcome: provider.Unknown}},
		{name: "502 with an HTML body from a proxy", reply: respondHTML(502),
			want: want{err: errUnknown, outcome: provider.Unknown}},
		{name: "429 rate_limit", reply: respond(429, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests hit the API too quickly."}}`),
			want: want{res: provider.Result{Reason: "rate_limit"}, err: provider.ErrRetryLater, outcome: provider.RetryLater}},
		{name: "429 lock_timeout", reply: respond(429, `{"error":{"type":"invalid_request_error","code":"lock_timeout","message":"This object cannot be accessed right now."}}`),
			want: want{res: provider.Result{Reason: "lock_timeout"}, err: provider.ErrRetryLater, outcome: provider.RetryLater}},
		{name: "401 invalid API key", reply: respond(401, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided: sk_test_****load"}}`),
			want: want{res: provider.Result{Reason: "invalid_request_error"}, err: stripe.ErrRejected, outcome: provider.Rejected}},
		{name: "403 key lacks permission", reply: respond(403, `{"error":{"type":"invalid_request_error","code":"secret_key_required","message":"This API call cannot be made with a publishable API key."}}`),
			want: want{res: provider.Result{Reason: "secret_key_required"}, err: stripe.ErrRejected, outcome: provider.Rejected}},
		{name: "424 external dependency failed", reply: respond(424, `{"error":{"type":"api_error","message":"External dependency failed"}}`),
			want: want{res: provider.Result{Reason: "api_error"}, err: errUnknown, outcome: provider.Unknown}},
		{name: "200 whose body is not JSON", reply: func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("{truncated")) },
			want: want{err: errUnknown, outcome: provider.Unknown}},
		{name: "200 cut short after the client secret", reply: respond(200, `{"id":"pi_1","object":"payment_intent","client_secret":"pi_1_secret_DoNotLeakMe","status":`),
			want: want{err: errUnknown, outcome: provider.Unknown}},
	}
}

func TestCreateTranslation(t *testing.T) {
	ok := func(pi map[string]any) reply { return respond(200, jsonOf(t, pi)) }
	rows := []row{
		{name: "succeeded", reply: ok(paymentIntent("pi_1", "succeeded", nil)),
			want: want{res: succeeded, outcome: provider.Succeeded}},
		{name: "processing", reply: ok(paymentIntent("pi_1", "processing", nil)),
			want: want{res: pending("processing"), outcome: provider.Pending}},
		{name: "requires_action (3-D Secure)", reply: ok(paymentIntent("pi_1", "requires_action", map[string]any{"next_action": map[string]any{"type": "use_stripe_sdk"}})),
			want: want{res: pending("requires_action"), outcome: provider.Pending}},
		{name: "requires_confirmation", reply: ok(paymentIntent("pi_1", "requires_confirmation", nil)),
			want: want{res: pending("requires_confirmation"), outcome: provider.Pending}},
		{name: "requires_capture: authorised, not captured", reply: ok(paymentIntent("pi_1", "requires_capture", nil)),
			want: want{res: pending("requires_capture"), outcome: provider.Pending}},
		{name: "requires_payment_method after a failed attempt", reply: ok(paymentIntent("pi_1", "requires_payment_method", map[string]any{"last_payment_error": cardDeclined})),
			want: want{res: declined, outcome: provider.Declined}},
		{name: "canceled", reply: ok(paymentIntent("pi_1", "canceled", map[string]any{"cancellation_reason": "automatic"})),
			want: want{res: provider.Result{Outcome: provider.Declined, PaymentID: "pi_1", PurchaseID: "pur_1", Status: "canceled", Reason: "automatic", Amount: 1999, Currency: "usd"}, outcome: provider.Declined}},
		{name: "a status Stripe may add", reply: ok(paymentIntent("pi_1", "requires_magic", nil)),
			want: want{res: provider.Result{PaymentID: "pi_1", PurchaseID: "pur_1", Status: "requires_magic", Amount: 1999, Currency: "usd"}, err: errUnknown, outcome: provider.Unknown}},
		{name: "402 card_error with the payment intent",
			reply: respond(402, stripeError(t, map[string]any{
				"type": "card_error", "code": "card_declined", "decline_code": "generic_decline",
				"message": "Your card was declined.", "doc_url": "https://stripe.com/docs/error-codes/card-declined",
				"payment_intent": paymentIntent("pi_1", "requires_payment_method", map[string]any{"last_payment_error": map[string]any{
					"type": "card_error", "code": "card_declined", "decline_code": "generic_decline"}}),
			})),
			want: want{res: provider.Result{Outcome: provider.Declined, PaymentID: "pi_1", PurchaseID: "pur_1", Status: "requires_payment_method", Reason: "generic_decline", Amount: 1999, Currency: "usd"}, outcome: provider.Declined}},
		{name: "402 card_error without decline code",
			reply: respond(402, stripeError(t, map[string]any{
				"type": "card_error", "code": "expired_card", "message": "Your card has expired.",
				"payment_intent": paymentIntent("pi_1", "requires_payment_method", nil),
			})),
			want: want{res: provider.Result{Outcome: provider.Declined, PaymentID: "pi_1", PurchaseID: "pur_1", Status: "requires_payment_method", Reason: "expired_card", Amount: 1999, Currency: "usd"}, outcome: provider.Declined}},
		// Off-session (every request stored now), Stripe declines a card
		// that demands authentication instead of leaving it in
		// requires_action: nobody is there to authenticate.
		{name: "402 card_error authentication_required: off-session, a card that demands 3-D Secure",
			reply: respond(402, stripeError(t, map[string]any{
				"type": "card_error", "code": "authentication_required", "decline_code": "authentication_required",
				"message": "Your card was declined. This transaction requires authentication.", "doc_url": "https://stripe.com/docs/error-codes/authentication-required",
				"payment_intent": paymentIntent("pi_1", "requires_payment_method", map[string]any{"last_payment_error": authenticationRequired}),
			})),
			want: want{res: authDeclined, outcome: provider.Declined}},
		{name: "402 card_error authentication_required as code only",
			reply: respond(402, stripeError(t, map[string]any{
				"type": "card_error", "code": "authentication_required",
				"message": "Your card was declined. This transaction requires authentication.",
				"payment_intent": paymentIntent("pi_1", "requires_payment_method", map[string]any{"last_payment_error": map[string]any{
					"type": "card_error", "code": "authentication_required"}}),
			})),
			want: want{res: authDeclined, outcome: provider.Declined}},
		{name: "402 card_error authentication_required without the payment intent",
			reply: respond(402, stripeError(t, map[string]any{
				"type": "card_error", "code": "authentication_required", "decline_code": "authentication_required",
				"message": "Your card was declined. This transaction requires authentication.",
			})),
			want: want{res: provider.Result{Outcome: provider.Declined, Reason: stripe.ReasonAuthenticationRequired}, outcome: provider.Declined}},
		{name: "200 requires_payment_method after authentication_required",
			reply: ok(paymentIntent("pi_1", "requires_payment_method", map[string]any{"last_payment_error": authenticationRequired})),
			want:  want{res: authDeclined, outcome: provider.Declined}},
		{name: "409 idempotency_key_in_use",
			reply: respond(409, `{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use","doc_url":"https://stripe.com/docs/error-codes/idempotency-key-in-use","message":"There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): payrecon-pur_1. Please try again later."}}`),
			want:  want{res: provider.Result{Outcome: provider.Pending, Reason: "idempotency_key_in_use"}, outcome: provider.Pending}},
		{name: "400 idempotency_error: same key, other parameters",
			reply: respond(400, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than 'payrecon-pur_1' if you meant to execute a different request."}}`),
			want:  want{res: provider.Result{Reason: "idempotency_error"}, err: provider.ErrIdempotencyMismatch, outcome: provider.IdempotencyMismatch}},
		{name: "409 conflict other than a key in use", reply: respond(409, `{"error":{"type":"invalid_request_error","message":"Conflict"}}`),
			want: want{res: provider.Result{Reason: "invalid_request_error"}, err: errUnknown, outcome: provider.Unknown}},
		{name: "400 invalid parameters", reply: respond(400, `{"error":{"type":"invalid_request_error","code":"parameter_invalid_integer","param":"amount","message":"Invalid integer: -1"}}`),
			want: want{res: provider.Result{Reason: "parameter_invalid_integer"}, err: stripe.ErrRejected, outcome: provider.Rejected}},
		{name: "400 resource_missing: no such payment method", reply: respond(400, `{"error":{"type":"invalid_request_error","code":"resource_missing","param":"payment_method","message":"No such PaymentMethod: 'pm_nope'"}}`),
			want: want{res: provider.Result{Reason: "resource_missing"}, err: stripe.ErrRejected, outcome: provider.Rejected}},
	}
	rows = append(rows, transportRows(t)...)
	req := testRequest()
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			reqs := r.run(t, "stripe: create payment intent (key payrecon-pur_1): ", func(ctx context.Context, p *stripe.Provider) (provider.Result, error) {
				return p.Create(ctx, req)
			})
			for _, got := range reqs {
				checkCreateRequest(t, got, req)
			}
		})
	}
}

// checkCreateRequest checks that got is the Stripe request for req.
func checkCreateRequest(t *testing.T, got recorded, req provider.CreateRequest) {
	t.Helper()
	if got.Method != http.MethodPost || got.Path != "/v1/payment_intents" {
		t.Errorf("request %s %s, want POST /v1/payment_intents", got.Method, got.Path)
	}
	if k := got.Header.Get("Idempotency-Key"); k != req.IdempotencyKey {
		t.Errorf("Idempotency-Key %q, want %q", k, req.IdempotencyKey)
	}
	if a := got.Header.Get("Authorization"); a != "Bearer "+testKey {
		t.Errorf("Authorization %q, want the configured key", a)
	}
	wantForm := map[string]string{
		"amount":                  "1999",
		"currency":                req.Currency,
		"payment_method":          req.PaymentMethod,
		"confirm":                 "true",
		"payment_method_types[0]": "card",
		"description":             req.Description,
		"metadata[purchase_id]":   req.PurchaseID,
		"metadata[customer_ref]":  req.Customer,
	}
	if req.OffSession() {
		wantForm["off_session"] = "true"
	}
	for k, v := range wantForm {
		if got.Form.Get(k) != v {
			t.Errorf("form %s = %q, want %q", k, got.Form.Get(k), v)
		}
	}
	for k := range got.Form {
		if _, ok := wantForm[k]; !ok {
			t.Errorf("unexpected form parameter %s = %q", k, got.Form.Get(k))
		}
	}
}

func TestStatusTranslation(t *testing.T) {
	ok := func(pi map[string]any) reply { return respond(200, jsonOf(t, pi)) }
	rows := []row{
		{name: "succeeded", reply: ok(paymentIntent("pi_1", "succeeded", nil)),
			want: want{res: succeeded, outcome: provider.Succeeded}},
		{name: "processing", reply: ok(paymentIntent("pi_1", "processing", nil)),
			want: want{res: pending("processing"), outcome: provider.Pending}},
		{name: "requires_payment_method after a failed attempt", reply: ok(paymentIntent("pi_1", "requires_payment_method", map[string]any{"last_payment_error": cardDeclined})),
			want: want{res: declined, outcome: provider.Declined}},
		{name: "canceled", reply: ok(paymentIntent("pi_1", "canceled", map[string]any{"cancellation_reason": "abandoned"})),
			want: want{res: provider.Result{Outcome: provider.Declined, PaymentID: "pi_1", PurchaseID: "pur_1", Status: "canceled", Reason: "abandoned", Amount: 1999, Currency: "usd"}, outcome: provider.Declined}},
		{name: "requires_payment_method after an off-session authentication_required",
			reply: ok(paymentIntent("pi_1", "requires_payment_method", map[string]any{"last_payment_error": authenticationRequired})),
			want:  want{res: authDeclined, outcome: provider.Declined}},
		{name: "requires_action: an on-session request waiting for 3-D Secure", reply: ok(paymentIntent("pi_1", "requires_action", map[string]any{"next_action": map[string]any{"type": "use_stripe_sdk"}})),
			want: want{res: pending("requires_action"), outcome: provider.Pending}},
		{name: "metadata naming no purchase: PurchaseID empty", reply: ok(paymentIntent("pi_1", "succeeded", map[string]any{"metadata": map[string]any{}})),
			want: want{res: provider.Result{Outcome: provider.Succeeded, PaymentID: "pi_1", Status: "succeeded", Amount: 1999, Currency: "usd"}, outcome: provider.Succeeded}},
		{name: "metadata naming another purchase: PurchaseID exactly as stored", reply: ok(paymentIntent("pi_1", "succeeded", map[string]any{"metadata": map[string]any{"purchase_id": "pur_1 "}})),
			want: want{res: provider.Result{Outcome: provider.Succeeded, PaymentID: "pi_1", PurchaseID: "pur_1 ", Status: "succeeded", Amount: 1999, Currency: "usd"}, outcome: provider.Succeeded}},
		{name: "404 resource_missing", reply: respond(404, `{"error":{"type":"invalid_request_error","code":"resource_missing","param":"intent","message":"No such payment_intent: 'pi_1'"}}`),
			want: want{res: provider.Result{Outcome: provider.NotFound, Reason: "resource_missing"}, outcome: provider.NotFound}},
		{name: "404 unrecognised URL: a misconfigured base, not a missing charge", reply: respond(404, `{"error":{"type":"invalid_request_error","message":"Unrecognized request URL (GET: /v1/payment_intent/pi_1)."}}`),
			want: want{res: provider.Result{Reason: "invalid_request_error"}, err: stripe.ErrRejected, outcome: provider.Rejected}},
	}
	rows = append(rows, transportRows(t)...)
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			reqs := r.run(t, "stripe: retrieve payment intent pi_1: ", func(ctx context.Context, p *stripe.Provider) (provider.Result, error) {
				return p.Status(ctx, "pi_1")
			})
			for _, got := range reqs {
				if got.Method != http.MethodGet || got.Path != "/v1/payment_intents/pi_1" {
					t.Errorf("request %s %s, want GET /v1/payment_intents/pi_1", got.Method, got.Path)
				}
				if k := got.Header.Get("Idempotency-Key"); k != "" {
					t.Errorf("GET carries Idempotency-Key %q", k)
				}
			}
		})
	}
}

func TestSearchTranslation(t *testing.T) {
	found := func(pis ...map[string]any) reply {
		return respond(200, jsonOf(t, map[string]any{
			"object": "search_result", "url": "/v1/payment_intents/search", "has_more": false, "next_page": nil, "data": pis,
		}))
	}
	older := map[string]any{"created": 1600000000}
	// charge returns res as the one charge a search found.
	charge := func(res provider.Result) provider.Result {
		res.Charges = 1
		return res
	}
	// naming returns metadata naming purchase (none when "").
	naming := func(purchase string) map[string]any {
		md := map[string]any{"customer_ref": "cust-42"}
		if purchase != "" {
			md["purchase_id"] = purchase
		}
		return md
	}
	rows := []row{
		{name: "no match yet", reply: found(),
			want: want{res: provider.Result{Outcome: provider.NotFound}, outcome: provider.NotFound}},
		{name: "one succeeded", reply: found(paymentIntent("pi_1", "succeeded", nil)),
			want: want{res: charge(succeeded), outcome: provider.Succeeded}},
		{name: "one processing", reply: found(paymentIntent("pi_1", "processing", nil)),
			want: want{res: charge(pending("processing")), outcome: provider.Pending}},
		{name: "one declined: no charge", reply: found(paymentIntent("pi_1", "requires_payment_method", map[string]any{"last_payment_error": cardDeclined})),
			want: want{res: declined, outcome: provider.Declined}},
		{name: "one declined for authentication_required: no charge",
			reply: found(paymentIntent("pi_1", "requires_payment_method", map[string]any{"last_payment_error": authenticationRequired})),
			want:  want{res: authDeclined, outcome: provider.Declined}},
		{name: "several: the oldest succeeded one, and the count",
			reply: found(
				paymentIntent("pi_0", "requires_payment_method", map[string]any{"last_payment_error": cardDeclined, "created": 1500000000}),
				paymentIntent("pi_2", "succeeded", nil),
				paymentIntent("pi_1", "succeeded", older),
				paymentIntent("pi_3", "processing", nil),
			),
			want: want{res: provider.Result{Outcome: provider.Succeeded, PaymentID: "pi_1", PurchaseID: "pur_1", Status: "succeeded", Reason: "4 charges for purchase pur_1", Amount: 1999, Currency: "usd", Charges: 3}, outcome: provider.Succeeded}},
		{name: "two succeeded: a double charge",
			reply: found(
				paymentIntent("pi_2", "succeeded", nil),
				paymentIntent("pi_1", "succeeded", older),
			),
			want: want{res: provider.Result{Outcome: provider.Succeeded, PaymentID: "pi_1", PurchaseID: "pur_1", Status: "succeeded", Reason: "2 charges for purchase pur_1", Amount: 1999, Currency: "usd", Charges: 2}, outcome: provider.Succeeded}},
		{name: "several: pending before declined",
			reply: found(
				paymentIntent("pi_0", "requires_payment_method", map[string]any{"last_payment_error": cardDeclined, "created": 1500000000}),
				paymentIntent("pi_1", "processing", nil),
			),
			want: want{res: provider.Result{Outcome: provider.Pending, PaymentID: "pi_1", PurchaseID: "pur_1", Status: "processing", Reason: "2 charges for purchase pur_1", Amount: 1999, Currency: "usd", Charges: 1}, outcome: provider.Pending}},
		{name: "several declined: decline code and count",
			reply: found(
				paymentIntent("pi_2", "canceled", nil),
				paymentIntent("pi_1", "requires_payment_method", map[string]any{"last_payment_error": cardDeclined, "created": 1500000000}),
			),
			want: want{res: provider.Result{Outcome: provider.Declined, PaymentID: "pi_1", PurchaseID: "pur_1", Status: "requires_payment_method", Reason: "insufficient_funds; 2 charges for purchase pur_1", Amount: 1999, Currency: "usd"}, outcome: provider.Declined}},

		// Metadata that does not name the purchase exactly.
		{name: "a declined match beats an older success naming another purchase",
			reply: found(
				paymentIntent("pi_9", "succeeded", map[string]any{"metadata": naming("pur_10"), "created": 1500000000}),
				paymentIntent("pi_1", "requires_payment_method", map[string]any{"last_payment_error": cardDeclined}),
			),
			want: want{res: provider.Result{Outcome: provider.Declined, PaymentID: "pi_1", PurchaseID: "pur_1", Status: "requires_payment_method", Reason: "insufficient_funds; 1 result not naming purchase pur_1", Amount: 1999, Currency: "usd"}, outcome: provider.Declined}},
		{name: "successes naming no purchase or another case do not count as charges",
			reply: found(
				paymentIntent("pi_8", "succeeded", map[string]any{"metadata": naming(""), "created": 1500000000}),
				paymentIntent("pi_9", "processing", map[string]any{"metadata": naming("PUR_1")}),
				paymentIntent("pi_1", "succeeded", nil),
			),
			want: want{res: provider.Result{Outcome: provider.Succeeded, PaymentID: "pi_1", PurchaseID: "pur_1", Status: "succeeded", Reason: "2 results not naming purchase pur_1", Amount: 1999, Currency: "usd", Charges: 1}, outcome: provider.Succeeded}},
		{name: "none names the purchase: the best reported as found, naming none",
			reply: found(paymentIntent("pi_8", "succeeded", map[string]any{"metadata": map[string]any{}})),
			want:  want{res: provider.Result{Outcome: provider.Succeeded, PaymentID: "pi_8", Status: "succeeded", Reason: "1 result not naming purchase pur_1", Amount: 1999, Currency: "usd"}, outcome: provider.Succeeded}},
		{name: "none names the purchase: the best reported as found, naming another",
			reply: found(
				paymentIntent("pi_7", "requires_payment_method", map[string]any{"metadata": naming("pur_1 "), "last_payment_error": cardDeclined}),
				paymentIntent("pi_8", "processing", map[string]any{"metadata": naming("pur_2"), "created": 1600000000}),
				paymentIntent("pi_9", "processing", map[string]any{"metadata": naming("pur_3")}),
			),
			want: want{res: provider.Result{Outcome: provider.Pending, PaymentID: "pi_8", PurchaseID: "pur_2", Status: "processing", Reason: "3 results not naming purchase pur_1", Amount: 1999, Currency: "usd"}, outcome: provider.Pending}},
		{name: "a match in a status Stripe may add", reply: found(paymentIntent("pi_1", "requires_magic", nil)),
			want: want{res: provider.Result{PaymentID: "pi_1", PurchaseID: "pur_1", Status: "requires_magic", Amount: 1999, Currency: "usd"}, err: errUnknown, outcome: provider.Unknown}},
		{name: "a result naming another purchase in a status Stripe may add",
			reply: found(paymentIntent("pi_1", "succeeded", nil), paymentIntent("pi_9", "requires_magic", map[string]any{"metadata": naming("pur_9")})),
			want:  want{res: provider.Result{PaymentID: "pi_9", PurchaseID: "pur_9", Status: "requires_magic", Amount: 1999, Currency: "usd"}, err: errUnknown, outcome: provider.Unknown}},
		{name: "400 invalid query", reply: respond(400, `{"error":{"type":"invalid_request_error","code":"parameter_invalid_string","param":"query","message":"Invalid query"}}`),
			want: want{res: provider.Result{Reason: "parameter_invalid_string"}, err: stripe.ErrRejected, outcome: provider.Rejected}},
	}
	rows = append(rows, transportRows(t)...)
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			reqs := r.run(t, "stripe: search payment intents (purchase pur_1): ", func(ctx context.Context, p *stripe.Provider) (provider.Result, error) {
				return p.Search(ctx, "pur_1")
			})
			for _, got := range reqs {
				if got.Method != http.MethodGet || got.Path != "/v1/payment_intents/search" {
					t.Errorf("request %s %s, want GET /v1/payment_intents/search", got.Method, got.Path)
				}
				if q := got.Form.Get("query"); q != "metadata['purchase_id']:'pur_1'" {
					t.Errorf("query %q", q)
				}
			}
		})
	}
}

// TestSearchReadsOnePage checks that Search reads at most one page of
// 100 results and reports its counts and Charges as lower bounds.
func TestSearchReadsOnePage(t *testing.T) {
	var pis []map[string]any
	for i := range 100 {
		extra := map[string]any{"created": 1700000000 + i}
		if i%4 == 0 {
			extra["metadata"] = map[string]any{"purchase_id": "pur_other"}
		}
		pis = append(pis, paymentIntent(fmt.Sprintf("pi_%03d", i), "succeeded", extra))
	}
	srv := newFakeStripe(t, respond(200, jsonOf(t, map[string]any{
		"object": "search_result", "url": "/v1/payment_intents/search", "has_more": true, "next_page": "page_2", "data": pis,
	})))
	p := newProvider(t, srv.URL, stripe.Config{})
	res, err := p.Search(t.Context(), "pur_1")
	if err != nil {
		t.Fatalf("Search: %v", err)
	}
	want := provider.Result{Outcome: provider.Succeeded, PaymentID: "pi_001", PurchaseID: "pur_1", Status: "succeeded",
		Reason: "75+ charges for purchase pur_1; 25+ results not naming purchase pur_1", Amount: 1999, Currency: "usd", Charges: 75}
	if res != want {
		t.Errorf("result\n got %+v\nwant %+v", res, want)
	}
	if n := len(srv.requests()); n != 1 {
		t.Errorf("server got %d requests, want 1 page", n)
	}
}

func TestSearchQueryEscapesQuotes(t *testing.T) {
	tests := []struct{ purchaseID, query string }{
		{"pur_1", `metadata['purchase_id']:'pur_1'`},
		{"pur_' OR status:'succeeded", `metadata['purchase_id']:'pur_\' OR status:\'succeeded'`},
		{`pur_\`, `metadata['purchase_id']:'pur_\\'`},
		{`pur_\'`, `metadata['purchase_id']:'pur_\\\''`},
	}
	for _, tc := range tests {
		t.Run(tc.purchaseID, func(t *testing.T) {
			t.Parallel()
			srv := newFakeStripe(t, respond(200, `{"object":"search_result","data":[],"has_more":false}`))
			p := newProvider(t, srv.URL, stripe.Config{})
			res, err := p.Search(t.Context(), tc.purchaseID)
			if err != nil || res.Outcome != provider.NotFound {
				t.Fatalf("Search = (%+v, %v), want NotFound", res, err)
			}
			reqs := srv.requests()
			if len(reqs) != 1 {
				t.Fatalf("server got %d requests, want 1", len(reqs))
			}
			if got := reqs[0].Form.Get("query"); got != tc.query {
				t.Errorf("query %s, want %s", got, tc.query)
			}
		})
	}
}

// TestCreateOmitsEmptyOptionalParameters checks that an empty customer or
// description is not sent, and that the customer never goes to Stripe's
// customer parameter.
func TestCreateOmitsEmptyOptionalParameters(t *testing.T) {
	srv := newFakeStripe(t, respond(200, jsonOf(t, paymentIntent("pi_1", "succeeded", nil))))
	p := newProvider(t, srv.URL, stripe.Config{})
	req := testRequest()
	req.Customer, req.Description = "", ""
	if _, err := p.Create(t.Context(), req); err != nil {
		t.Fatalf("Create: %v", err)
	}
	for _, k := range []string{"customer", "description", "metadata[customer_ref]"} {
		if form := srv.requests()[0].Form; form.Has(k) {
			t.Errorf("sent %s = %q, want it omitted", k, form.Get(k))
		}
	}
}

// TestRefusedBeforeSending checks the arguments the adapter refuses without
// a request: a create without a usable key (stripe-go would invent one, and
// a replay could charge twice), and empty ids.
func TestRefusedBeforeSending(t *testing.T) {
	withKey := func(key string) provider.CreateRequest {
		req := testRequest()
		req.IdempotencyKey = key
		return req
	}
	tests := []struct {
		name string
		call func(ctx context.Context, p *stripe.Provider) (provider.Result, error)
	}{
		{"create without key", func(ctx context.Context, p *stripe.Provider) (provider.Result, error) {
			return p.Create(ctx, withKey(""))
		}},
		{"create with a padded key", func(ctx context.Context, p *stripe.Provider) (provider.Result, error) {
			return p.Create(ctx, withKey(" payrecon-pur_1"))
		}},
		{"create with a key over 255 bytes", func(ctx context.Context, p *stripe.Provider) (provider.Result, error) {
			return p.Create(ctx, withKey(strings.Repeat("k", 256)))
		}},
		{"create of a request version newer than this build", func(ctx context.Context, p *stripe.Provider) (provider.Result, error) {
			req := testRequest()
			req.Version = provider.CurrentRequestVersion + 1
			return p.Create(ctx, req)
		}},
		{"create of a negative request version", func(ctx context.Context, p *stripe.Provider) (provider.Result, error) {
			req := testRequest()
			req.Version = -1
			return p.Create(ctx, req)
		}},
		{"status of empty id", func(ctx context.Context, p *stripe.Provider) (provider.Result, error) {
			return p.Status(ctx, "")
		}},
		{"search for empty purchase id", func(ctx context.Context, p *stripe.Provider) (provider.Result, error) {
			return p.Search(ctx, "")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
				t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
			})
			p := newProvider(t, srv.URL, stripe.Config{})
			res, err := tc.call(t.Context(), p)
			if !errors.Is(err, stripe.ErrRejected) {
				t.Errorf("error %v, want one wrapping stripe.ErrRejected", err)
			}
			if got := provider.OutcomeOf(res, err); got != provider.Rejected {
				t.Errorf("OutcomeOf = %q, want %q", got, provider.Rejected)
			}
		})
	}
}

// TestMaxNetworkRetries pins down what stripe-go v82 retries when allowed
// to, which is why the default is 0: connection failures and non-JSON
// answers are resent (with the same Idempotency-Key), Stripe's JSON 5xx
// and 409 answers are not.
func TestMaxNetworkRetries(t *testing.T) {
	tests := []struct {
		name     string
		reply    func(t *testing.T) reply
		requests int
	}{
		{"connection reset is resent", resetConnection, 2},
		{"HTML 502 is resent", func(*testing.T) reply { return respondHTML(502) }, 2},
		{"JSON 500 is not resent", func(*testing.T) reply {
			return respond(500, `{"error":{"type":"api_error","message":"An unknown error occurred"}}`)
		}, 1},
		{"JSON 409 idempotency_key_in_use is not resent", func(*testing.T) reply {
			return respond(409, `{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use","message":"in use"}}`)
		}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newFakeStripe(t, tc.reply(t))
			p := newProvider(t, srv.URL, stripe.Config{MaxNetworkRetries: 1})
			req := testRequest()
			p.Create(t.Context(), req)
			reqs := srv.requests()
			if len(reqs) != tc.requests {
				t.Fatalf("server got %d requests, want %d", len(reqs), tc.requests)
			}
			for _, got := range reqs {
				checkCreateRequest(t, got, req)
			}
		})
	}
}

func TestNewValidatesConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     stripe.Config
		wantErr string
	}{
		{"defaults", stripe.Config{SecretKey: testKey}, ""},
		{"local base", stripe.Config{SecretKey: testKey, APIBase: "http://127.0.0.1:12111/v1/"}, ""},
		{"no key", stripe.Config{}, "SecretKey is required"},
		{"key with white space", stripe.Config{SecretKey: testKey + "\n"}, "white space"},
		{"relative base", stripe.Config{SecretKey: testKey, APIBase: "localhost:12111"}, "absolute http or https URL"},
		{"base of another scheme", stripe.Config{SecretKey: testKey, APIBase: "ftp://example.test"}, "absolute http or https URL"},
		{"negative retries", stripe.Config{SecretKey: testKey, MaxNetworkRetries: -1}, "negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := stripe.New(tc.cfg)
			switch {
			case tc.wantErr == "" && (err != nil || p == nil):
				t.Errorf("New = (%v, %v), want a provider", p, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("New error %v, want one containing %q", err, tc.wantErr)
			case err != nil && strings.Contains(err.Error(), testKey):
				t.Errorf("error %q shows the secret key", err)
			}
		})
	}
}

// TestDoneContextSendsNothing checks that a call whose context is already
// done sends nothing and reports the context's error, outcome Unknown.
func TestDoneContextSendsNothing(t *testing.T) {
	calls := []struct {
		name string
		call func(ctx context.Context, p *stripe.Provider) (provider.Result, error)
	}{
		{"create", func(ctx context.Context, p *stripe.Provider) (provider.Result, error) {
			return p.Create(ctx, testRequest())
		}},
		{"status", func(ctx context.Context, p *stripe.Provider) (provider.Result, error) { return p.Status(ctx, "pi_1") }},
		{"search", func(ctx context.Context, p *stripe.Provider) (provider.Result, error) { return p.Search(ctx, "pur_1") }},
		{"list", listAsResult(t, listWindow)},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
				t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
			})
			p := newProvider(t, srv.URL, stripe.Config{})
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			res, err := tc.call(ctx, p)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("error %v, want one wrapping context.Canceled", err)
			}
			if got := provider.OutcomeOf(res, err); got != provider.Unknown {
				t.Errorf("OutcomeOf = %q, want %q", got, provider.Unknown)
			}
		})
	}
}
