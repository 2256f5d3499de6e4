package reconcile_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// wire is the fixture's fake served over HTTP in Stripe's wire format,
// with the real Stripe adapter pointed at it, recording the form of every
// create the server receives.
type wire struct {
	adapter *stripe.Provider
	url     string
	mu      sync.Mutex
	creates []url.Values
}

// serveFake serves f.fake over HTTP for the real Stripe adapter.
func serveFake(t *testing.T, f *fixture) *wire {
	t.Helper()
	srv := fakeprovider.NewServer(f.fake, fakeprovider.ServerConfig{Logger: discardLogger()})
	w := &wire{}
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents" {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("read a create: %v", err)
			}
			form, err := url.ParseQuery(string(body))
			if err != nil {
				t.Errorf("parse a create: %v", err)
			}
			w.mu.Lock()
			w.creates = append(w.creates, form)
			w.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		srv.ServeHTTP(rw, r)
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close) // first: it releases held requests
	w.url = ts.URL
	p, err := stripe.New(stripe.Config{
		SecretKey: "sk_test_reconcile",
		APIBase:   ts.URL,
		// A new connection per request: net/http never resends a create
		// whose reply was lost on a reused connection.
		HTTPClient: &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}},
		Logger:     discardLogger(),
	})
	if err != nil {
		t.Fatalf("stripe.New: %v", err)
	}
	w.adapter = p
	return w
}

// createForms returns the forms of the creates received so far.
func (w *wire) createForms() []url.Values {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]url.Values(nil), w.creates...)
}

// post sends form as a create with key, as a Stripe client does, and
// returns the HTTP status.
func (w *wire) post(t *testing.T, key string, form url.Values) int {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, w.url+"/v1/payment_intents", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer sk_test_reconcile")
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(r)
	if err != nil {
		t.Fatalf("POST a create: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// sameForm reports whether two forms hold the same single values.
func sameForm(a, b url.Values) bool {
	return maps.EqualFunc(a, b, func(x, y []string) bool { return len(x) == 1 && len(y) == 1 && x[0] == y[0] })
}

// legacyForm is what the Stripe adapter sent for p's create before
// requests had versions (and sends for such a request still): no
// off_session.
func legacyForm(p reconcile.Purchase) url.Values {
	return url.Values{
		"amount":                  {fmt.Sprint(p.Amount)},
		"currency":                {p.Currency},
		"payment_method":          {p.PaymentMethod},
		"confirm":                 {"true"},
		"payment_method_types[0]": {"card"},
		"description":             {p.Description},
		"metadata[purchase_id]":   {p.ID},
		"metadata[customer_ref]":  {p.Customer},
	}
}

// legacyStored returns p's provider_request exactly as payrecon stored it
// before requests had versions, and its params_hash as computed then: the
// SHA-256 of that JSON. (The purchase's fields are plain ASCII, so %q
// quotes them as JSON does.)
func legacyStored(p reconcile.Purchase) (string, string) {
	js := fmt.Sprintf(`{"idempotency_key":%q,"purchase_id":%q,"customer":%q,"amount":%d,"currency":%q,"description":%q,"payment_method":%q}`,
		reconcile.ProviderKeyFor(p.ID), p.ID, p.Customer, p.Amount, p.Currency, p.Description, p.PaymentMethod)
	sum := sha256.Sum256([]byte(js))
	return js, hex.EncodeToString(sum[:])
}

// submitAsBefore does what a worker of the time before request versions
// did for p up to its create call: under a lease, it stores the request
// (the old JSON, decoded as the stores decode it) with its old hash and
// moves p to submitted. It returns the lease and the stored hash.
func submitAsBefore(t *testing.T, f *fixture, p reconcile.Purchase) (reconcile.Lease, string) {
	t.Helper()
	l := claimOne(t, f, "worker-before")
	js, hash := legacyStored(p)
	req, err := sqlstore.UnmarshalRequest(p.ID, []byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if req.Version != provider.RequestOnSession {
		t.Fatalf("the stored JSON decodes as version %d, want %d", req.Version, provider.RequestOnSession)
	}
	err = f.store.InTx(context.Background(), func(tx reconcile.Tx) error {
		if err := tx.CheckLease(context.Background(), l); err != nil {
			return err
		}
		cur, err := tx.GetPurchase(context.Background(), p.ID)
		if err != nil {
			return err
		}
		now := f.clock.Now()
		next := cur
		next.State = statemachine.Submitted
		next.ProviderKey = req.IdempotencyKey
		next.ProviderRequest = req
		next.ParamsHash = hash
		next.FirstAttemptAt, next.UpdatedAt = now, now
		if err := tx.UpdatePurchase(context.Background(), next, statemachine.Created); err != nil {
			return err
		}
		return tx.InsertTransition(context.Background(), reconcile.TransitionRecord{
			PurchaseID: p.ID, From: statemachine.Created, To: statemachine.Submitted, Cause: reconcile.CauseSubmit,
			Evidence: "stored request " + hash[:12] + " under key " + req.IdempotencyKey, Actor: "worker-before", LeaseToken: l.Token, At: now,
		})
	})
	if err != nil {
		t.Fatalf("store the request as before: %v", err)
	}
	return l, hash
}

// wantLegacyKept checks that p still holds the request stored before
// versions, unchanged, with its old hash.
func wantLegacyKept(t *testing.T, d reconcile.Detail, hash string) {
	t.Helper()
	p := d.Purchase
	switch {
	case p.ProviderRequest == nil:
		t.Fatal("stored request gone")
	case p.ProviderRequest.Version != provider.RequestOnSession:
		t.Errorf("stored request now of version %d, want %d: it must never change", p.ProviderRequest.Version, provider.RequestOnSession)
	case p.ParamsHash != hash || p.ProviderRequest.Hash() != hash:
		t.Errorf("params hash %s (request hashes to %s), want the stored %s", p.ParamsHash, p.ProviderRequest.Hash(), hash)
	}
}

// wantNoMismatch checks that no call of p met an idempotency mismatch and
// that p is not on the operator list.
func wantNoMismatch(t *testing.T, d reconcile.Detail) {
	t.Helper()
	for _, a := range d.Attempts {
		if a.Outcome == provider.IdempotencyMismatch || a.Outcome == provider.Rejected {
			t.Errorf("call %s answered %s: %s\n%s", a.Op, a.Outcome, a.Error, history(d))
		}
	}
	if d.Purchase.Escalated() {
		t.Errorf("purchase escalated (%s)\n%s", d.Purchase.EscalationReason, history(d))
	}
}

// TestPurchaseStoredBeforeVersionsReplaysItsOwnRequest: a purchase whose
// request was stored before requests had versions (no off_session, the
// old JSON and hash) is finished by today's worker through the real
// adapter and the fake's HTTP server, which compares every parameter under
// the key as Stripe does: the worker sends exactly the stored request,
// without off_session, and meets no idempotency mismatch.
func TestPurchaseStoredBeforeVersionsReplaysItsOwnRequest(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		// The old worker sent its create, which charged, and died before
		// recording the answer. Today's worker takes the job over and
		// replays the stored create under its key.
		t.Run("CrashedMidCall", func(t *testing.T) {
			f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
			w := serveFake(t, f)
			svc := f.service(w.adapter, "worker-now", reconcile.Config{})
			p := f.create("legacy-crash")
			_, hash := submitAsBefore(t, f, p)
			if code := w.post(t, reconcile.ProviderKeyFor(p.ID), legacyForm(p)); code != http.StatusOK {
				t.Fatalf("the old worker's create: HTTP %d", code)
			}
			f.wantMoneyTaken(p.ID, 1)

			f.clock.Advance(time.Minute) // the old worker's lease expires
			for range 10 {
				f.runUntilIdle(svc)
				if d := f.detail(p.ID); d.Purchase.State.Terminal() || d.Purchase.Escalated() {
					break
				}
				f.clock.Advance(time.Minute)
			}
			d := f.wantState(p.ID, statemachine.Succeeded)
			wantPath(t, d,
				"created→submitted:submit",
				"submitted→uncertain:lease_lost",
				"uncertain→reconciling:key_replay",
				"reconciling→succeeded:key_replay")
			wantNoMismatch(t, d)
			wantLegacyKept(t, d, hash)
			f.wantMoneyTaken(p.ID, 1)
			if n := f.fake.CreateCalls(reconcile.ProviderKeyFor(p.ID)); n != 2 {
				t.Errorf("%d creates under the key, want 2 (the old worker's and the replay)", n)
			}
			forms := w.createForms()
			if len(forms) != 2 || !sameForm(forms[1], legacyForm(p)) {
				t.Errorf("creates sent %v, want the replay to send exactly\n%v", forms, legacyForm(p))
			}
		})

		// The old worker's create was refused before the provider acted
		// (a 429): the purchase stayed submitted. Today's worker resends
		// the stored request, on-session as it was stored.
		t.Run("RefusedBeforeActing", func(t *testing.T) {
			f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
			w := serveFake(t, f)
			svc := f.service(w.adapter, "worker-now", reconcile.Config{})
			p := f.create("legacy-429")
			l, hash := submitAsBefore(t, f, p)
			err := f.store.InTx(context.Background(), func(tx reconcile.Tx) error {
				if err := tx.CheckLease(context.Background(), l); err != nil {
					return err
				}
				return tx.RescheduleJob(context.Background(), p.ID, f.clock.Now().Add(30*time.Second))
			})
			if err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(30 * time.Second)
			f.runUntilIdle(svc)
			d := f.wantState(p.ID, statemachine.Succeeded)
			wantPath(t, d, "created→submitted:submit", "submitted→succeeded:submit_response")
			wantNoMismatch(t, d)
			wantLegacyKept(t, d, hash)
			f.wantMoneyTaken(p.ID, 1)
			if c := f.fake.ChargesFor(p.ID)[0]; c.OffSession {
				t.Errorf("charge %+v made off-session: the stored request was on-session", c)
			}
			if forms := w.createForms(); len(forms) != 1 || !sameForm(forms[0], legacyForm(p)) {
				t.Errorf("creates sent %v, want exactly\n%v", forms, legacyForm(p))
			}
		})
	})
}

// TestNewPurchaseChargesOffSession: a purchase submitted now stores a
// request of the current version and is charged off-session
// (off_session=true on the wire), and its replay after a lost reply sends
// the same request again.
func TestNewPurchaseChargesOffSession(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		w := serveFake(t, f)
		svc := f.service(w.adapter, "worker-now", reconcile.Config{})
		p := f.create("merchant-initiated")
		f.fake.Script(p.ID, fakeprovider.LostReply)
		f.runUntilIdle(svc)
		f.wantState(p.ID, statemachine.Uncertain)
		f.clock.Advance(30 * time.Second)
		f.runUntilIdle(svc)
		d := f.wantState(p.ID, statemachine.Succeeded)
		wantPath(t, d,
			"created→submitted:submit",
			"submitted→uncertain:submit_response",
			"uncertain→reconciling:key_replay",
			"reconciling→succeeded:key_replay")
		wantNoMismatch(t, d)
		f.wantMoneyTaken(p.ID, 1)

		req := d.Purchase.ProviderRequest
		if req == nil || req.Version != provider.CurrentRequestVersion || !req.OffSession() {
			t.Fatalf("stored request %+v, want one of version %d, off-session", req, provider.CurrentRequestVersion)
		}
		if d.Purchase.ParamsHash != req.Hash() {
			t.Errorf("params hash %s, want the request's %s", d.Purchase.ParamsHash, req.Hash())
		}
		if _, legacyHash := legacyStored(d.Purchase); d.Purchase.ParamsHash == legacyHash {
			t.Error("a new request hashes as one stored before versions")
		}
		want := legacyForm(d.Purchase)
		want.Set("off_session", "true")
		forms := w.createForms()
		if len(forms) != 2 {
			t.Fatalf("%d creates sent, want 2 (the lost one and its replay)", len(forms))
		}
		for i, form := range forms {
			if !sameForm(form, want) {
				t.Errorf("create %d sent\n%v\nwant\n%v", i, form, want)
			}
		}
		if c := f.fake.ChargesFor(p.ID)[0]; !c.OffSession {
			t.Errorf("charge %+v made on-session", c)
		}
	})
}

// TestAuthenticationRequiredIsADecline: a card that demands
// authentication, charged off-session as every new purchase is, is
// declined at once with authentication_required: a definite decline, not
// a pending charge left for escalation, through the fake in process and
// through the real adapter and the fake's HTTP server.
func TestAuthenticationRequiredIsADecline(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		for _, over := range []string{"InProcess", "HTTP"} {
			t.Run(over, func(t *testing.T) {
				f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
				svc := f.svc
				if over == "HTTP" {
					svc = f.service(serveFake(t, f).adapter, "worker-http", reconcile.Config{})
				}
				p, err := svc.CreatePurchase(context.Background(), reconcile.NewPurchase{
					Customer: "sca", Amount: 300, Currency: "usd", Description: "coffee",
					PaymentMethod: fakeprovider.PaymentMethodAuthenticationRequired,
				})
				if err != nil {
					t.Fatal(err)
				}
				f.runUntilIdle(svc)
				d := f.wantState(p.ID, statemachine.Declined)
				wantPath(t, d, "created→submitted:submit", "submitted→declined:submit_response")
				wantNoMismatch(t, d)
				if d.Job.DoneAt.IsZero() {
					t.Errorf("job %+v not done", d.Job)
				}
				if n := len(d.Attempts); n != 1 || d.Attempts[0].Outcome != provider.Declined ||
					d.Attempts[0].Note != fakeprovider.DeclineAuthenticationRequired {
					t.Errorf("calls\n%s\nwant one create declined for %s", history(d), fakeprovider.DeclineAuthenticationRequired)
				}
				f.wantMoneyTaken(p.ID, 0)

				// Nothing is left to do, however long one waits.
				f.clock.Advance(48 * time.Hour)
				f.runUntilIdle(svc)
				d = f.wantState(p.ID, statemachine.Declined)
				if len(d.Attempts) != 1 || d.Purchase.Escalated() {
					t.Errorf("after two days\n%s\nwant nothing more", history(d))
				}
			})
		}
	})
}
