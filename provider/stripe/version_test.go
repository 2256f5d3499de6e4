package stripe_test

import (
	"encoding/json"
	"maps"
	"net/url"
	"testing"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
)

// legacyJSON is a create request exactly as payrecon stored it (the
// purchase's provider_request) before requests had versions, and
// legacyHash its params_hash, as the code of that time computed it (the
// SHA-256 of that JSON). Both were produced by that code and must never be
// edited: they are what the databases hold.
const (
	legacyJSON = `{"idempotency_key":"payrecon-pur_legacy1","purchase_id":"pur_legacy1","customer":"cust-42","amount":1999,"currency":"usd","description":"2 shirts \u0026 a hat — size \"M\"","payment_method":"pm_card_visa"}`
	legacyHash = "335bd5b40b8acea443f4eab45efe111537cdff13c03a5952e3e112800e820ad4"
)

// legacyForm is what the adapter sent for legacyJSON before requests had
// versions, and must send for it for ever: no off_session.
var legacyForm = url.Values{
	"amount":                  {"1999"},
	"currency":                {"usd"},
	"payment_method":          {"pm_card_visa"},
	"confirm":                 {"true"},
	"payment_method_types[0]": {"card"},
	"description":             {`2 shirts & a hat — size "M"`},
	"metadata[purchase_id]":   {"pur_legacy1"},
	"metadata[customer_ref]":  {"cust-42"},
}

// legacyRequest decodes legacyJSON as the stores do.
func legacyRequest(t *testing.T) provider.CreateRequest {
	t.Helper()
	var req provider.CreateRequest
	if err := json.Unmarshal([]byte(legacyJSON), &req); err != nil {
		t.Fatalf("decode the stored request: %v", err)
	}
	return req
}

// TestLegacyRequestKeepsItsHash: a request stored before versions decodes
// as version RequestOnSession, encodes back byte for byte (a store writes
// back what it read), and hashes to the params_hash stored with it. A
// request of the current version differs in JSON and hash only by its
// version.
func TestLegacyRequestKeepsItsHash(t *testing.T) {
	req := legacyRequest(t)
	if req.Version != provider.RequestOnSession || req.OffSession() {
		t.Fatalf("stored request decoded as version %d (off-session %v), want %d, on-session", req.Version, req.OffSession(), provider.RequestOnSession)
	}
	if got := req.Hash(); got != legacyHash {
		t.Errorf("Hash of the stored request = %s, want the stored params_hash %s", got, legacyHash)
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != legacyJSON {
		t.Errorf("stored request re-encodes as\n%s\nwant\n%s", b, legacyJSON)
	}

	cur := req
	cur.Version = provider.CurrentRequestVersion
	b, err = json.Marshal(cur)
	if err != nil {
		t.Fatal(err)
	}
	if want := legacyJSON[:len(legacyJSON)-1] + `,"version":1}`; string(b) != want {
		t.Errorf("current request encodes as\n%s\nwant\n%s", b, want)
	}
	if cur.Hash() == legacyHash {
		t.Error("a request of the current version hashes as the stored one: a replay could not tell them apart")
	}
	if !cur.OffSession() {
		t.Errorf("version %d is not off-session", cur.Version)
	}
}

// TestCreateParamsByVersion plays each version through real HTTP: the
// stored legacy request sends exactly what it sent when it was stored (no
// off_session), on every call; a request of the current version sends
// the same and off_session=true. What is sent depends on the request
// alone.
func TestCreateParamsByVersion(t *testing.T) {
	srv := newFakeStripe(t, respond(200, jsonOf(t, paymentIntent("pi_1", "succeeded", nil))))
	p := newProvider(t, srv.URL, stripe.Config{})
	legacy := legacyRequest(t)
	cur := legacy
	cur.Version = provider.CurrentRequestVersion
	for _, req := range []provider.CreateRequest{legacy, legacy, cur, legacy} {
		if _, err := p.Create(t.Context(), req); err != nil {
			t.Fatalf("Create (version %d): %v", req.Version, err)
		}
	}
	offSession := maps.Clone(legacyForm)
	offSession.Set("off_session", "true")
	reqs := srv.requests()
	if len(reqs) != 4 {
		t.Fatalf("server got %d requests, want 4", len(reqs))
	}
	for i, want := range []url.Values{legacyForm, legacyForm, offSession, legacyForm} {
		got := reqs[i]
		if k := got.Header.Get("Idempotency-Key"); k != legacy.IdempotencyKey {
			t.Errorf("request %d: Idempotency-Key %q, want the stored %q", i, k, legacy.IdempotencyKey)
		}
		if !maps.EqualFunc(got.Form, want, func(a, b []string) bool { return len(a) == 1 && len(b) == 1 && a[0] == b[0] }) {
			t.Errorf("request %d: form\n%v\nwant\n%v", i, got.Form, want)
		}
	}
}
