package fakeprovider_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
)

// TestAuthenticationRequired: the test card that demands authentication is
// declined off-session with authentication_required, a definite decline,
// and waits in requires_action on-session, for ever, as in Stripe test mode.
func TestAuthenticationRequired(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{})

	off := request("pur_3ds_off")
	off.PaymentMethod = fakeprovider.PaymentMethodAuthenticationRequired
	res := mustCreate(t, f, off)
	want := provider.Result{Outcome: provider.Declined, PaymentID: res.PaymentID, Status: fakeprovider.StatusRequiresPaymentMethod,
		Reason: fakeprovider.DeclineAuthenticationRequired, Amount: off.Amount, Currency: off.Currency, PurchaseID: off.PurchaseID}
	if res != want {
		t.Errorf("off-session create = %+v, want %+v", res, want)
	}
	if st := mustStatus(t, f, res.PaymentID); st != want {
		t.Errorf("status = %+v, want %+v", st, want)
	}
	if c := f.ChargesFor(off.PurchaseID)[0]; !c.OffSession || c.FinalStatus != fakeprovider.StatusRequiresPaymentMethod ||
		c.DeclineCode != fakeprovider.DeclineAuthenticationRequired {
		t.Errorf("charge %+v, want off-session, declined for authentication_required", c)
	}
	wantCharges(t, f, off.PurchaseID, 1, 0)

	on := request("pur_3ds_on")
	on.PaymentMethod = fakeprovider.PaymentMethodAuthenticationRequired
	on.Version = provider.RequestOnSession
	res = mustCreate(t, f, on)
	wantOutcome(t, "on-session create", res, provider.Pending, fakeprovider.StatusRequiresAction)
	clk.Advance(48 * time.Hour)
	wantOutcome(t, "status two days later", mustStatus(t, f, res.PaymentID), provider.Pending, fakeprovider.StatusRequiresAction)
	if c := f.ChargesFor(on.PurchaseID)[0]; c.OffSession {
		t.Errorf("on-session charge %+v recorded as off-session", c)
	}
	wantCharges(t, f, on.PurchaseID, 1, 0)

	// Another card is not affected by the session.
	visa := request("pur_visa_on")
	visa.Version = provider.RequestOnSession
	wantOutcome(t, "on-session visa", mustCreate(t, f, visa), provider.Succeeded, fakeprovider.StatusSucceeded)
}

// TestUnknownRequestVersionIsRejected: a version the fake does not know is
// refused before anything is charged or saved under the key.
func TestUnknownRequestVersionIsRejected(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	req := request("pur_future")
	req.Version = provider.CurrentRequestVersion + 1
	res, err := f.Create(t.Context(), req)
	if !errors.Is(err, fakeprovider.ErrInvalidRequest) || provider.OutcomeOf(res, err) != provider.Rejected {
		t.Fatalf("create of version %d = (%+v, %v), want an error wrapping ErrInvalidRequest (rejected)", req.Version, res, err)
	}
	wantCharges(t, f, req.PurchaseID, 0, 0)
	req.Version = provider.CurrentRequestVersion
	wantOutcome(t, "the same key at a known version", mustCreate(t, f, req), provider.Succeeded, fakeprovider.StatusSucceeded)
}

// legacyForm is what the Stripe adapter sent for req before requests had
// versions: every parameter but off_session.
func legacyForm(req provider.CreateRequest) url.Values {
	return url.Values{
		"amount":                  {"1250"},
		"currency":                {req.Currency},
		"payment_method":          {req.PaymentMethod},
		"confirm":                 {"true"},
		"payment_method_types[0]": {"card"},
		"description":             {req.Description},
		"metadata[purchase_id]":   {req.PurchaseID},
		"metadata[customer_ref]":  {req.Customer},
	}
}

// postCreate POSTs form to the server's create with key, and returns the
// status, headers and decoded JSON answer.
func postCreate(t *testing.T, s *served, key string, form url.Values) (int, http.Header, map[string]any) {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.http.URL+"/v1/payment_intents", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+testSecretKey)
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatalf("POST /v1/payment_intents: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("answer %s is not JSON: %v", b, err)
	}
	return resp.StatusCode, resp.Header, v
}

// TestServerOffSession: the server takes off_session, compares it as
// Stripe compares every parameter under a key, and charges accordingly.
func TestServerOffSession(t *testing.T) {
	s := serve(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	errOf := func(v map[string]any) map[string]any {
		e, _ := v["error"].(map[string]any)
		return e
	}

	t.Run("ComparedUnderTheKey", func(t *testing.T) {
		req := request("pur_off_cmp")
		key := req.IdempotencyKey
		code, h, first := postCreate(t, s, key, legacyForm(req))
		if code != 200 || first["status"] != "succeeded" || h.Get("Idempotent-Replayed") != "" {
			t.Fatalf("create without off_session: %d %v", code, first)
		}
		for _, v := range []string{"true", "false"} {
			f := legacyForm(req)
			f.Set("off_session", v)
			code, _, ans := postCreate(t, s, key, f)
			if e := errOf(ans); code != 400 || e["type"] != "idempotency_error" {
				t.Errorf("the key again with off_session=%s: %d %v, want 400 idempotency_error", v, code, ans)
			}
		}
		code, h, again := postCreate(t, s, key, legacyForm(req))
		if code != 200 || again["id"] != first["id"] || h.Get("Idempotent-Replayed") != "true" {
			t.Errorf("the key again without off_session: %d %v %v, want the saved answer", code, h, again)
		}
		wantCharges(t, s.fake, req.PurchaseID, 1, 1)
		if c := s.fake.ChargesFor(req.PurchaseID)[0]; c.OffSession {
			t.Errorf("charge %+v made off-session, want on-session", c)
		}

		// And the other way round: a key first used off-session.
		off := request("pur_off_cmp2")
		f := legacyForm(off)
		f.Set("off_session", "true")
		if code, _, ans := postCreate(t, s, off.IdempotencyKey, f); code != 200 {
			t.Fatalf("create with off_session=true: %d %v", code, ans)
		}
		if code, _, ans := postCreate(t, s, off.IdempotencyKey, legacyForm(off)); code != 400 || errOf(ans)["type"] != "idempotency_error" {
			t.Errorf("the key again without off_session: %d %v, want 400 idempotency_error", code, ans)
		}
		if c := s.fake.ChargesFor(off.PurchaseID)[0]; !c.OffSession {
			t.Errorf("charge %+v made on-session, want off-session", c)
		}
	})

	t.Run("InvalidValue", func(t *testing.T) {
		req := request("pur_off_bad")
		f := legacyForm(req)
		f.Set("off_session", "recurring")
		code, _, ans := postCreate(t, s, req.IdempotencyKey, f)
		if e := errOf(ans); code != 400 || e["param"] != "off_session" {
			t.Errorf("off_session=recurring: %d %v, want 400 on off_session", code, ans)
		}
		wantCharges(t, s.fake, req.PurchaseID, 0, 0)
	})

	t.Run("AdapterSendsItForNewRequests", func(t *testing.T) {
		req := request("pur_off_new")
		wantOutcome(t, "create", adapterCreate(t, s.adapter, req), provider.Succeeded, fakeprovider.StatusSucceeded)
		if c := s.fake.ChargesFor(req.PurchaseID)[0]; !c.OffSession {
			t.Errorf("charge %+v of a request of version %d made on-session", c, req.Version)
		}
	})

	// A purchase stored before off-session charges: its first call went
	// out without off_session (sent here by hand, as the adapter of the
	// time sent it); its stored request, of version RequestOnSession,
	// replays through today's adapter as the same request.
	t.Run("StoredRequestReplaysThroughTheAdapter", func(t *testing.T) {
		old := request("pur_off_legacy")
		old.Version = provider.RequestOnSession
		code, _, first := postCreate(t, s, old.IdempotencyKey, legacyForm(old))
		if code != 200 {
			t.Fatalf("first call as sent before: %d %v", code, first)
		}
		res := adapterCreate(t, s.adapter, old)
		if res.Outcome != provider.Succeeded || res.PaymentID != first["id"] {
			t.Errorf("replay = %+v, want the saved success of %v", res, first["id"])
		}
		upgraded := old
		upgraded.Version = provider.CurrentRequestVersion
		if res, err := s.adapter.Create(t.Context(), upgraded); !errors.Is(err, provider.ErrIdempotencyMismatch) {
			t.Errorf("the stored request sent at version %d = (%+v, %v), want an idempotency mismatch", upgraded.Version, res, err)
		}
		wantCharges(t, s.fake, old.PurchaseID, 1, 1)
		if got := s.fake.CreateCalls(old.IdempotencyKey); got != 3 {
			t.Errorf("CreateCalls = %d, want 3", got)
		}
	})

	t.Run("AuthenticationRequired", func(t *testing.T) {
		off := request("pur_off_3ds")
		off.PaymentMethod = fakeprovider.PaymentMethodAuthenticationRequired
		f := legacyForm(off)
		f.Set("off_session", "true")
		code, _, ans := postCreate(t, s, off.IdempotencyKey, f)
		e := errOf(ans)
		pi, _ := e["payment_intent"].(map[string]any)
		lpe, _ := pi["last_payment_error"].(map[string]any)
		if code != 402 || e["type"] != "card_error" || e["code"] != "authentication_required" || e["decline_code"] != "authentication_required" ||
			pi["status"] != "requires_payment_method" || lpe["code"] != "authentication_required" {
			t.Errorf("off-session create on %s: %d %v, want a 402 card_error authentication_required embedding the PaymentIntent",
				fakeprovider.PaymentMethodAuthenticationRequired, code, ans)
		}

		// Through the adapter: a definite decline, by create and status.
		byAdapter := request("pur_off_3ds_adapter")
		byAdapter.PaymentMethod = fakeprovider.PaymentMethodAuthenticationRequired
		res := adapterCreate(t, s.adapter, byAdapter)
		want := provider.Result{Outcome: provider.Declined, PaymentID: res.PaymentID, Status: fakeprovider.StatusRequiresPaymentMethod,
			Reason: fakeprovider.DeclineAuthenticationRequired, Amount: byAdapter.Amount, Currency: byAdapter.Currency, PurchaseID: byAdapter.PurchaseID}
		if res != want {
			t.Errorf("create through the adapter = %+v, want %+v", res, want)
		}
		if st, err := s.adapter.Status(t.Context(), res.PaymentID); err != nil || st != want {
			t.Errorf("status through the adapter = (%+v, %v), want %+v", st, err, want)
		}

		// On-session (a request stored before): requires_action, with
		// the customer's next action.
		on := request("pur_on_3ds")
		on.PaymentMethod = fakeprovider.PaymentMethodAuthenticationRequired
		on.Version = provider.RequestOnSession
		code, _, ans = postCreate(t, s, on.IdempotencyKey, legacyForm(on))
		next, _ := ans["next_action"].(map[string]any)
		if code != 200 || ans["status"] != "requires_action" || next["type"] != "use_stripe_sdk" {
			t.Errorf("on-session create on %s: %d %v, want 200 requires_action with next_action use_stripe_sdk",
				fakeprovider.PaymentMethodAuthenticationRequired, code, ans)
		}
		wantOutcome(t, "on-session replay through the adapter", adapterCreate(t, s.adapter, on), provider.Pending, fakeprovider.StatusRequiresAction)
	})
}

// TestWebhookOfAuthenticationRequired: the decline's event is a
// payment_failed whose PaymentIntent says why, and the adapter's verifier
// reads it as a decline.
func TestWebhookOfAuthenticationRequired(t *testing.T) {
	s, rc := serveWebhooks(t, fakeprovider.Config{}, fakeprovider.ServerConfig{}, nil)
	req := request("pur_wh_3ds")
	req.PaymentMethod = fakeprovider.PaymentMethodAuthenticationRequired
	adapterCreate(t, s.adapter, req)
	got := rc.received()
	if len(got) != 1 {
		t.Fatalf("received %q, want one event", rc.types())
	}
	r := got[0]
	if r.err != nil || r.event.Type != "payment_intent.payment_failed" || r.event.Outcome != provider.Declined || r.event.PurchaseID != req.PurchaseID {
		t.Errorf("event = %+v (%v), want payment_intent.payment_failed, declined, for %s", r.event, r.err, req.PurchaseID)
	}
	var body struct {
		Data struct {
			Object struct {
				LastPaymentError struct {
					Code        string `json:"code"`
					DeclineCode string `json:"decline_code"`
				} `json:"last_payment_error"`
			} `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	if e := body.Data.Object.LastPaymentError; e.Code != "authentication_required" || e.DeclineCode != "authentication_required" {
		t.Errorf("last_payment_error %+v, want authentication_required", e)
	}
}
