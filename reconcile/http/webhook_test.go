package http_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
	"github.com/payrecon/payrecon/reconcile"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
	"github.com/payrecon/payrecon/statemachine"
)

const webhookSecret = "whsec_test_0123456789abcdef"

// hookFixture serves the Stripe webhook endpoint over a real store, with a
// worker driving purchases against the in-process fake provider.
type hookFixture struct {
	t     *testing.T
	store reconcile.Store
	clock *testClock
	fake  *fakeprovider.Fake
	svc   *reconcile.Service
	srv   *httptest.Server
}

func setupHooks(t *testing.T) *hookFixture {
	t.Helper()
	f := &hookFixture{t: t, clock: newTestClock()}
	f.store = newStoreAt(t, f.clock.Now)
	f.fake = fakeprovider.New(fakeprovider.Config{Now: f.clock.Now, SettleAfter: time.Minute})
	f.svc = f.service(f.fake, "worker-1")
	v, err := stripe.NewWebhookVerifier(stripe.WebhookConfig{Secret: webhookSecret, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	s := rhttp.New(f.svc, rhttp.Config{Webhooks: map[string]rhttp.WebhookVerifier{"stripe": v}, Logger: discardLogger()})
	f.srv = httptest.NewServer(s)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *hookFixture) service(p provider.Provider, id string) *reconcile.Service {
	f.t.Helper()
	svc, err := reconcile.New(f.store, p, reconcile.Config{WorkerID: id, Now: f.clock.Now, Logger: discardLogger()})
	if err != nil {
		f.t.Fatal(err)
	}
	return svc
}

// purchase creates a purchase and runs the worker once with the given
// fault on its first create.
func (f *hookFixture) purchase(fault fakeprovider.Fault) reconcile.Purchase {
	f.t.Helper()
	p, err := f.svc.CreatePurchase(context.Background(), reconcile.NewPurchase{Customer: "c", Amount: 300, Currency: "usd"})
	if err != nil {
		f.t.Fatal(err)
	}
	if fault != fakeprovider.NoFault {
		f.fake.Script(p.ID, fault)
	}
	if _, err := f.svc.RunOnce(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	return f.get(p.ID).Purchase
}

func (f *hookFixture) get(id string) reconcile.Detail {
	f.t.Helper()
	d, err := f.svc.Purchase(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

// event renders a Stripe event about a PaymentIntent.
func event(id, typ, pi, status, purchaseID string) []byte {
	meta := map[string]string{}
	if purchaseID != "" {
		meta["purchase_id"] = purchaseID
	}
	b, _ := json.Marshal(map[string]any{
		"id": id, "object": "event", "api_version": stripe.DefaultWebhookAPIVersion, "created": 1772355600,
		"type": typ, "livemode": false, "pending_webhooks": 1,
		"data": map[string]any{"object": map[string]any{
			"id": pi, "object": "payment_intent", "status": status, "amount": 300, "currency": "usd", "metadata": meta,
		}},
	})
	return b
}

// sign builds a Stripe-Signature header by hand, as Stripe does.
func sign(payload []byte, at time.Time, secret string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "%d.%s", at.Unix(), payload)
	return fmt.Sprintf("t=%d,v1=%s", at.Unix(), hex.EncodeToString(mac.Sum(nil)))
}

type hookResponse struct {
	status int
	body   string
	// applied is the event's outcome in the inbox once the applier ran
	// after a "received" answer; empty otherwise.
	applied reconcile.EventOutcome
}

func (f *hookFixture) deliver(payload []byte, header string) hookResponse {
	f.t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+"/webhooks/stripe", strings.NewReader(string(payload)))
	req.Header.Set("Content-Type", "application/json")
	if header != "" {
		req.Header.Set("Stripe-Signature", header)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatalf("deliver: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return hookResponse{status: resp.StatusCode, body: string(b)}
}

// send delivers a signed payload and, when the endpoint stored it, runs
// the applier until the inbox is empty, and reads what became of it.
func (f *hookFixture) send(payload []byte) hookResponse {
	f.t.Helper()
	r := f.deliver(payload, sign(payload, f.clock.Now(), webhookSecret))
	if r.status != http.StatusOK || !strings.Contains(r.body, `"outcome": "received"`) {
		return r
	}
	drainInbox(f.t, f.svc)
	var ev struct{ ID string }
	if err := json.Unmarshal(payload, &ev); err != nil {
		f.t.Fatal(err)
	}
	err := f.store.InTx(context.Background(), func(tx reconcile.Tx) error {
		row, err := tx.GetInboxEvent(context.Background(), "stripe", ev.ID)
		r.applied = row.Outcome
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// drainInbox applies the pending webhook events until none is left.
func drainInbox(t *testing.T, svc *reconcile.Service) {
	t.Helper()
	for {
		n, err := svc.ApplyPending(context.Background())
		if err != nil {
			t.Fatalf("apply pending events: %v", err)
		}
		if n == 0 {
			return
		}
	}
}

// wantOutcome checks the endpoint's answer: a duplicate or a conflict
// as answered, any other outcome as the applier's, after a "received".
func wantOutcome(t *testing.T, r hookResponse, status int, outcome reconcile.EventOutcome) {
	t.Helper()
	answered := outcome
	switch outcome {
	case "", reconcile.EventDuplicate, reconcile.EventConflict:
	default:
		answered = reconcile.EventReceived
		if r.applied != outcome {
			t.Fatalf("got %d %s, applied %q: want %d, applied %q", r.status, r.body, r.applied, status, outcome)
		}
	}
	if r.status != status || (answered != "" && !strings.Contains(r.body, `"outcome": "`+string(answered)+`"`)) {
		t.Fatalf("got %d %s, want %d with outcome %q", r.status, r.body, status, answered)
	}
}

func moves(d reconcile.Detail) []string {
	var out []string
	for _, t := range d.Transitions {
		out = append(out, fmt.Sprintf("%s→%s:%s", t.From, t.To, t.Cause))
	}
	return out
}

func TestWebhookDuplicateAppliesOnce(t *testing.T) {
	f := setupHooks(t)
	p := f.purchase(fakeprovider.LostReply) // uncertain, payment id unknown
	if p.State != statemachine.Uncertain {
		t.Fatalf("setup: %s", p.State)
	}
	pi := f.fake.ChargesFor(p.ID)[0].ID
	ev := event("evt_1", "payment_intent.succeeded", pi, "succeeded", p.ID)
	wantOutcome(t, f.send(ev), 200, reconcile.EventApplied)
	wantOutcome(t, f.send(ev), 200, reconcile.EventDuplicate)
	d := f.get(p.ID)
	got := fmt.Sprint(moves(d))
	want := fmt.Sprint([]string{"created→submitted:submit", "submitted→uncertain:submit_response",
		"uncertain→reconciling:webhook", "reconciling→succeeded:webhook"})
	if got != want || d.Purchase.ProviderPaymentID != pi {
		t.Fatalf("transitions %s, want %s; payment id %q", got, want, d.Purchase.ProviderPaymentID)
	}
}

func TestWebhookSameIDDifferentPayload(t *testing.T) {
	f := setupHooks(t)
	p := f.purchase(fakeprovider.LostReply)
	pi := f.fake.ChargesFor(p.ID)[0].ID
	wantOutcome(t, f.send(event("evt_2", "payment_intent.processing", pi, "processing", p.ID)), 200, reconcile.EventApplied)
	before := f.get(p.ID)
	r := f.send(event("evt_2", "payment_intent.succeeded", pi, "succeeded", p.ID))
	if r.status != http.StatusConflict || !strings.Contains(r.body, "different payload") {
		t.Fatalf("got %d %s, want 409", r.status, r.body)
	}
	after := f.get(p.ID)
	if after.Purchase.State != before.Purchase.State || after.Purchase.Version != before.Purchase.Version ||
		len(after.Transitions) != len(before.Transitions) {
		t.Fatalf("conflicting event changed the purchase: %+v", after.Purchase)
	}
}

func TestWebhookStaleProcessingAfterSuccess(t *testing.T) {
	f := setupHooks(t)
	p := f.purchase(fakeprovider.NoFault)
	if p.State != statemachine.Succeeded {
		t.Fatalf("setup: %s", p.State)
	}
	before := f.get(p.ID)
	wantOutcome(t, f.send(event("evt_3", "payment_intent.processing", p.ProviderPaymentID, "processing", p.ID)), 200, reconcile.EventStale)
	after := f.get(p.ID)
	if after.Purchase.State != statemachine.Succeeded || after.Purchase.Version != before.Purchase.Version {
		t.Fatalf("stale processing changed the purchase: %+v", after.Purchase)
	}
}

func TestWebhookSuccessAfterDeclineIsConfirmed(t *testing.T) {
	for _, approved := range []bool{false, true} {
		t.Run(fmt.Sprintf("provider approved %v", approved), func(t *testing.T) {
			f := setupHooks(t)
			p := f.purchase(fakeprovider.Decline)
			if p.State != statemachine.Declined {
				t.Fatalf("setup: %s", p.State)
			}
			if approved { // a late approval: the provider's truth is now succeeded
				if _, err := f.fake.SetStatus(p.ProviderPaymentID, fakeprovider.StatusSucceeded); err != nil {
					t.Fatal(err)
				}
			}
			wantOutcome(t, f.send(event("evt_4", "payment_intent.succeeded", p.ProviderPaymentID, "succeeded", p.ID)), 200, reconcile.EventConfirming)
			if d := f.get(p.ID); d.Purchase.State != statemachine.Declined || d.Purchase.Doubt == "" || !d.Job.DoneAt.IsZero() {
				t.Fatalf("after the event: %s doubt %q job %+v, want declined, in doubt, job reopened", d.Purchase.State, d.Purchase.Doubt, d.Job)
			}
			if _, err := f.svc.RunOnce(context.Background()); err != nil { // the status query
				t.Fatal(err)
			}
			d := f.get(p.ID)
			if d.Purchase.State != statemachine.Declined || d.Purchase.Doubt != "" || d.Job.DoneAt.IsZero() {
				t.Fatalf("after the status query: %s doubt %q job %+v", d.Purchase.State, d.Purchase.Doubt, d.Job)
			}
			cases, err := f.svc.Escalations(context.Background(), reconcile.AnyAccount)
			if err != nil {
				t.Fatal(err)
			}
			if !approved {
				if d.Purchase.Escalated() || len(cases) != 0 {
					t.Fatalf("a refuted event escalated: %q", d.Purchase.EscalationReason)
				}
				return
			}
			if d.Purchase.EscalationReason != reconcile.EscalationStateDisagreement {
				t.Fatalf("escalation %q, want state_disagreement", d.Purchase.EscalationReason)
			}
			if len(cases) != 1 || cases[0].Purchase.ID != p.ID || len(cases[0].Events) != 1 {
				t.Fatalf("operator list: %+v", cases)
			}
		})
	}
}

// TestWebhookRacesStatusQuery: a success webhook and the worker's status
// query race over 20 purchases. Each ends with exactly one transition to
// succeeded, whoever wins.
func TestWebhookRacesStatusQuery(t *testing.T) {
	f := setupHooks(t)
	var ps []reconcile.Purchase
	for range 20 {
		p := f.purchase(fakeprovider.Processing) // uncertain, payment id known
		if p.State != statemachine.Uncertain || p.ProviderPaymentID == "" {
			t.Fatalf("setup: %+v", p)
		}
		ps = append(ps, p)
	}
	f.clock.Advance(2 * time.Minute) // settled at the provider; checks due
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			n, err := f.svc.RunOnce(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			if n == 0 {
				return
			}
		}
	}()
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := f.send(event(fmt.Sprintf("evt_race_%d", i), "payment_intent.succeeded", p.ProviderPaymentID, "succeeded", p.ID))
			if r.status != 200 {
				t.Errorf("webhook %d: %d %s", i, r.status, r.body)
			}
		}()
	}
	wg.Wait()
	byWebhook := 0
	for _, p := range ps {
		d := f.get(p.ID)
		n := 0
		for _, tr := range d.Transitions {
			if tr.To == statemachine.Succeeded {
				n++
				if tr.Cause == reconcile.CauseWebhook {
					byWebhook++
				}
			}
		}
		if d.Purchase.State != statemachine.Succeeded || n != 1 {
			t.Fatalf("purchase %s: state %s, %d transitions to succeeded, want 1: %v", p.ID, d.Purchase.State, n, moves(d))
		}
		if f.fake.MoneyTaken(p.ID) != 1 {
			t.Fatalf("purchase %s: %d charges", p.ID, f.fake.MoneyTaken(p.ID))
		}
	}
	t.Logf("20 races: %d won by the webhook, %d by the status query", byWebhook, 20-byWebhook)
}

func TestWebhookBadInputStoresNothing(t *testing.T) {
	f := setupHooks(t)
	p := f.purchase(fakeprovider.LostReply)
	pi := f.fake.ChargesFor(p.ID)[0].ID
	good := func(id string) []byte { return event(id, "payment_intent.succeeded", pi, "succeeded", p.ID) }
	wrongVersion := strings.Replace(string(good("evt_v")), stripe.DefaultWebhookAPIVersion, "2020-08-27", 1)
	now := f.clock.Now()
	tests := []struct {
		name, id string
		payload  []byte
		header   string
		status   int
	}{
		{"no signature", "evt_a", good("evt_a"), "", 400},
		{"bad signature", "evt_b", good("evt_b"), sign(good("evt_b"), now, "whsec_other_secret"), 400},
		{"tampered payload", "evt_c", good("evt_c"), sign(good("evt_x"), now, webhookSecret), 400},
		{"stale timestamp", "evt_d", good("evt_d"), sign(good("evt_d"), now.Add(-6*time.Minute), webhookSecret), 400},
		{"future timestamp", "evt_e", good("evt_e"), sign(good("evt_e"), now.Add(10*time.Minute), webhookSecret), 400},
		{"malformed JSON", "evt_f", []byte(`{"id":"evt_f",`), sign([]byte(`{"id":"evt_f",`), now, webhookSecret), 400},
		{"wrong api_version", "evt_v", []byte(wrongVersion), sign([]byte(wrongVersion), now, webhookSecret), 400},
		{"oversized body", "evt_h", []byte(strings.Repeat("x", 300<<10)), "t=1,v1=00", 413},
	}
	before := f.get(p.ID)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.deliver(tt.payload, tt.header)
			if r.status != tt.status || !strings.Contains(r.body, `"message"`) {
				t.Fatalf("got %d %s, want %d with a message", r.status, r.body, tt.status)
			}
			err := f.store.InTx(context.Background(), func(tx reconcile.Tx) error {
				_, err := tx.GetInboxEvent(context.Background(), "stripe", tt.id)
				return err
			})
			if !errors.Is(err, reconcile.ErrNotFound) {
				t.Fatalf("rejected event %s stored (or lookup failed): %v", tt.id, err)
			}
		})
	}
	after := f.get(p.ID)
	if after.Purchase.Version != before.Purchase.Version || after.Purchase.State != statemachine.Uncertain {
		t.Fatalf("rejected webhooks changed the purchase: %+v", after.Purchase)
	}
}

// TestWebhookUnmatchedAppliedLater: an event for a purchase this database
// does not know yet is kept as unmatched, answered 200, and applied by the
// sweep once the purchase is there.
func TestWebhookUnmatchedAppliedLater(t *testing.T) {
	f := setupHooks(t)
	wantOutcome(t, f.send(event("evt_early", "payment_intent.succeeded", "pi_early", "succeeded", "pur_late")), 200, reconcile.EventUnmatched)

	// The purchase arrives (say, restored from a replica that lagged), in
	// flight with its outcome unknown.
	ctx := context.Background()
	now := f.clock.Now()
	err := f.store.InTx(ctx, func(tx reconcile.Tx) error {
		p := reconcile.Purchase{ID: "pur_late", Customer: "c", Amount: 300, Currency: "usd",
			State: statemachine.Created, Version: 1, CreatedAt: now, UpdatedAt: now}
		if err := tx.InsertPurchase(ctx, p); err != nil {
			return err
		}
		if err := tx.InsertJob(ctx, reconcile.Job{PurchaseID: p.ID, RunAt: now.Add(time.Hour)}); err != nil {
			return err
		}
		for _, to := range []statemachine.State{statemachine.Submitted, statemachine.Uncertain} {
			next := p
			next.State = to
			if err := tx.UpdatePurchase(ctx, next, p.State); err != nil {
				return err
			}
			next.Version++
			p = next
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n, err := f.svc.ApplyUnmatched(ctx, 100)
	if err != nil || n != 1 {
		t.Fatalf("ApplyUnmatched: %d, %v", n, err)
	}
	if d := f.get("pur_late"); d.Purchase.State != statemachine.Succeeded || d.Purchase.ProviderPaymentID != "pi_early" {
		t.Fatalf("late purchase: %+v", d.Purchase)
	}
}

func TestWebhookIgnoredType(t *testing.T) {
	f := setupHooks(t)
	payload, _ := json.Marshal(map[string]any{
		"id": "evt_cus", "object": "event", "api_version": stripe.DefaultWebhookAPIVersion, "created": 1772355600,
		"type": "customer.created", "data": map[string]any{"object": map[string]any{"id": "cus_1", "object": "customer"}},
	})
	wantOutcome(t, f.send(payload), 200, reconcile.EventIgnored)
	n, err := f.svc.ApplyUnmatched(context.Background(), 100)
	if err != nil || n != 0 {
		t.Fatalf("ignored event retried as unmatched: %d, %v", n, err)
	}
}

// TestWebhookForeignPayment: an event about a payment of another
// integration (no purchase_id in its metadata: the dashboard, another
// system on the account) is answered 200 and stored unmatched, never
// refused, so that the provider neither redelivers it for days nor
// disables the endpoint; a redelivery is a duplicate; the unmatched-event
// sweep has the audit judge the payment, which took money no purchase
// owns: an orphan_charge finding.
func TestWebhookForeignPayment(t *testing.T) {
	f := setupHooks(t)
	ctx := context.Background()
	c := f.fake.ChargeOutside(fakeprovider.OutsideCharge{Amount: 300, Currency: "usd"})
	payload := event("evt_dash", "payment_intent.succeeded", c.ID, "succeeded", "")
	wantOutcome(t, f.send(payload), 200, reconcile.EventUnmatched)
	wantOutcome(t, f.send(payload), 200, reconcile.EventDuplicate)
	err := f.store.InTx(ctx, func(tx reconcile.Tx) error {
		e, err := tx.GetInboxEvent(ctx, "stripe", "evt_dash")
		if err == nil && (e.ObjectID != c.ID || e.PurchaseID != "" || e.Outcome != reconcile.EventUnmatched) {
			t.Errorf("stored event %+v, want unmatched, about %s, naming no purchase", e, c.ID)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.svc.ApplyUnmatched(ctx, 100); err != nil || n != 1 {
		t.Fatalf("ApplyUnmatched: %d, %v", n, err)
	}
	fs, err := f.svc.Findings(ctx, reconcile.AnyAccount, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].Kind != reconcile.FindingOrphanCharge || fs[0].PaymentID != c.ID || fs[0].Amount != 300 {
		t.Fatalf("findings %+v, want one orphan_charge for %s", fs, c.ID)
	}
	// A later delivery of the same event is still a duplicate.
	wantOutcome(t, f.send(payload), 200, reconcile.EventDuplicate)
}
