package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// sweepEvents runs the event sweep and fails the test on an error.
func (f *fixture) sweepEvents(svc *reconcile.Service) reconcile.EventSweepReport {
	f.t.Helper()
	rep, err := svc.SweepEvents(context.Background())
	if err != nil {
		f.t.Fatalf("SweepEvents: %v", err)
	}
	return rep
}

// sweepInterval is the event sweep's default schedule, "@every 5m".
const sweepInterval = 5 * time.Minute

// TestEventSweepLateApprovalWithoutWebhooks: a purchase declined, then
// approved by the provider hours or days later, with every webhook lost
// (the fake here sends none). The worker never looks again and the
// audit's window has long passed the payment's creation; the next event
// sweep reads the approval from the provider's event log and judges it as
// its webhook: a success newer than the decline that settled the
// purchase is confirmed by a status query, which flags the purchase
// (escalated, state disagreement). The books never flip a final state by
// themselves.
func TestEventSweepLateApprovalWithoutWebhooks(t *testing.T) {
	for _, late := range []time.Duration{3 * time.Hour, 72 * time.Hour} {
		t.Run(late.String(), func(t *testing.T) {
			stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
				f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
				p := f.create("ann")
				f.fake.Script(p.ID, fakeprovider.Decline)
				f.runUntilIdle(f.svc)
				d := f.wantState(p.ID, statemachine.Declined)

				// The sweeps run on their schedule meanwhile; the decline
				// itself is read once, and stale.
				f.clock.Advance(sweepInterval)
				rep := f.sweepEvents(f.svc)
				if rep.Read != 1 || rep.Outcomes[reconcile.EventStale] != 1 {
					t.Fatalf("first sweep %+v, want the decline, stale", rep)
				}
				for step := time.Duration(0); step < late; step += 6 * time.Hour {
					f.clock.Advance(min(6*time.Hour, late-step))
					if rep := f.sweepEvents(f.svc); rep.New() != 0 {
						t.Fatalf("a sweep with nothing new applied %+v", rep)
					}
				}
				if _, err := f.fake.SetStatus(d.Purchase.ProviderPaymentID, fakeprovider.StatusSucceeded); err != nil {
					t.Fatal(err)
				}
				f.clock.Advance(sweepInterval)
				rep = f.sweepEvents(f.svc)
				if rep.Outcomes[reconcile.EventConfirming] != 1 || rep.New() != 1 {
					t.Fatalf("sweep after the approval: %+v, want one event, confirming", rep)
				}
				f.runUntilIdle(f.svc)
				f.wantEscalated(p.ID, reconcile.EscalationStateDisagreement)
				f.wantState(p.ID, statemachine.Declined)
				if w, err := f.svc.EventWatermark(context.Background()); err != nil || !w.Equal(f.clock.Now().Truncate(time.Second)) {
					t.Fatalf("watermark %v, %v; want the last sweep's start %v", w, err, f.clock.Now())
				}
			})
		})
	}
}

// TestEventSweepLateCancelWithoutWebhooks: a succeeded purchase whose
// payment the provider cancels three hours later, no webhook: the next
// sweep judges the cancel as its webhook (confirming), and the status
// query that follows flags the purchase.
func TestEventSweepLateCancelWithoutWebhooks(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("bob")
		f.runUntilIdle(f.svc)
		d := f.wantState(p.ID, statemachine.Succeeded)
		f.sweepEvents(f.svc)
		f.clock.Advance(3 * time.Hour)
		f.sweepEvents(f.svc)
		if _, err := f.fake.SetStatus(d.Purchase.ProviderPaymentID, fakeprovider.StatusCanceled); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(sweepInterval)
		rep := f.sweepEvents(f.svc)
		if rep.Outcomes[reconcile.EventConfirming] != 1 || rep.New() != 1 {
			t.Fatalf("sweep after the cancel: %+v, want one event, confirming", rep)
		}
		f.runUntilIdle(f.svc)
		f.wantEscalated(p.ID, reconcile.EscalationStateDisagreement)
		f.wantState(p.ID, statemachine.Succeeded)
		f.wantMoneyTaken(p.ID, 0)
	})
}

// TestEventSweepSettlesLostWebhooks: purchases left uncertain by a lost
// reply, whose success webhooks are lost too, are settled by the sweep
// through the inbox, as their webhooks would have settled them, and a
// stale processing event never overwrites a success.
func TestEventSweepSettlesLostWebhooks(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{SettleAfter: time.Minute}, reconcile.Config{})
		p := f.create("cy")
		f.fake.Script(p.ID, fakeprovider.Processing)
		f.runUntilIdle(f.svc) // uncertain: processing at the provider
		f.wantState(p.ID, statemachine.Uncertain)
		f.clock.Advance(2 * time.Minute) // settled at the provider
		rep := f.sweepEvents(f.svc)
		if rep.Read != 2 || rep.Outcomes[reconcile.EventApplied] != 2 {
			t.Fatalf("sweep %+v, want processing then succeeded, both applied", rep)
		}
		d := f.wantState(p.ID, statemachine.Succeeded)
		for _, tr := range d.Transitions[len(d.Transitions)-1:] {
			if tr.Cause != reconcile.CauseWebhook {
				t.Fatalf("settled by %s, want the webhook's cause\n%s", tr.Cause, history(d))
			}
		}
		f.wantMoneyTaken(p.ID, 1)

		// Settled by the worker first: the sweep's processing event, and
		// its success, change nothing.
		q := f.create("cy-2")
		f.fake.Script(q.ID, fakeprovider.Processing)
		f.runUntilIdle(f.svc)
		f.clock.Advance(2 * time.Minute)
		f.runUntilIdle(f.svc)
		before := f.wantState(q.ID, statemachine.Succeeded)
		rep = f.sweepEvents(f.svc)
		if rep.New() != 2 || rep.Outcomes[reconcile.EventApplied] != 0 {
			t.Fatalf("sweep %+v, want 2 new events, neither moving anything", rep)
		}
		after := f.wantState(q.ID, statemachine.Succeeded)
		if len(after.Transitions) != len(before.Transitions) {
			t.Fatalf("the sweep moved a settled purchase:\n%s", history(after))
		}
	})
}

// hookedProvider is a fake provider behind its Server, the Stripe adapter
// talking to it, and a webhook endpoint applying the Server's signed
// webhooks as payrecon's does (verified by provider/stripe, through
// Service.ApplyEvent).
type hookedProvider struct {
	srv     *fakeprovider.Server
	adapter *stripe.Provider
	mu      sync.Mutex
	hooks   map[string]reconcile.EventOutcome // by event id
}

const hookSecret = "whsec_reconcile_event_sweep_0123456789"

func (f *fixture) hooked(svc func() *reconcile.Service) *hookedProvider {
	f.t.Helper()
	t := f.t
	v, err := stripe.NewWebhookVerifier(stripe.WebhookConfig{Secret: hookSecret, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	h := &hookedProvider{hooks: map[string]reconcile.EventOutcome{}}
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ev, err := v.Verify(body, r.Header.Get(v.SignatureHeader()))
		if err != nil {
			t.Errorf("webhook refused: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		outcome, err := svc().ApplyEvent(r.Context(), reconcile.EventFromProvider("stripe", ev, "", body))
		if err != nil {
			t.Errorf("webhook %s: %v", ev.ID, err)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		h.mu.Lock()
		h.hooks[ev.ID] = outcome
		h.mu.Unlock()
	}))
	t.Cleanup(endpoint.Close)
	h.srv = fakeprovider.NewServer(f.fake, fakeprovider.ServerConfig{Logger: discardLogger(),
		WebhookURL: endpoint.URL, WebhookSecret: hookSecret, SyncDelivery: true, WebhookBackoff: time.Microsecond})
	api := httptest.NewServer(h.srv)
	t.Cleanup(api.Close)
	t.Cleanup(h.srv.Close)
	h.adapter, err = stripe.New(stripe.Config{SecretKey: "sk_test_reconcile", APIBase: api.URL,
		HTTPClient: &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestEventSweepSkipsWhatWebhooksApplied: over the real wire (the Stripe
// adapter listing the fake's GET /v1/events, webhooks verified by
// provider/stripe), the events webhooks applied are duplicates to the
// sweep, by event id and digest, and change nothing; the one webhook
// dropped is applied by the sweep, once.
func TestEventSweepSkipsWhatWebhooksApplied(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{Instance: "Dedup"}, reconcile.Config{})
		var svc *reconcile.Service
		h := f.hooked(func() *reconcile.Service { return svc })
		svc = f.service(h.adapter, "worker-w", reconcile.Config{})
		f.svc = svc

		var ids []string
		for i := range 3 {
			p := f.create(fmt.Sprintf("dee-%d", i))
			ids = append(ids, p.ID)
		}
		f.fake.Script(ids[2], fakeprovider.LostReply) // uncertain, until a webhook or a replay
		h.srv.ScriptWebhooks(ids[2], fakeprovider.WebhookDrop)
		f.runUntilIdle(svc)
		h.srv.Tick()
		f.wantState(ids[0], statemachine.Succeeded)
		f.wantState(ids[1], statemachine.Succeeded)
		for _, id := range ids {
			f.wantMoneyTaken(id, 1)
		}
		before := f.detail(ids[0])

		rep := f.sweepEvents(svc)
		if rep.Read != 3 || rep.Outcomes[reconcile.EventDuplicate] != 2 || rep.Outcomes[reconcile.EventConflict] != 0 {
			t.Fatalf("sweep %+v, want 3 events, the 2 delivered duplicates", rep)
		}
		if len(h.hooks) != 2 {
			t.Fatalf("webhooks applied %v, want 2", h.hooks)
		}
		after := f.detail(ids[0])
		if len(after.Transitions) != len(before.Transitions) {
			t.Fatalf("a duplicate moved the purchase:\n%s", history(after))
		}
		f.runUntilIdle(svc)
		f.wantState(ids[2], statemachine.Succeeded)
		for _, id := range ids {
			f.wantMoneyTaken(id, 1)
		}
		// Again: all duplicates.
		f.clock.Advance(sweepInterval)
		if rep := f.sweepEvents(svc); rep.New() != 0 || rep.Outcomes[reconcile.EventDuplicate] != 3 {
			t.Fatalf("second sweep %+v, want 3 duplicates", rep)
		}
	})
}

// failingStore fails the n-th save of the event sweep's watermark, as a
// process dying mid-run: that chunk's transaction rolls back.
type failingStore struct {
	reconcile.Store
	mu    sync.Mutex
	saves int
	failN int
}

var errKilled = errors.New("killed mid-run")

func (s *failingStore) InTx(ctx context.Context, fn func(reconcile.Tx) error) error {
	return s.Store.InTx(ctx, func(tx reconcile.Tx) error { return fn(failingTx{tx, s}) })
}

type failingTx struct {
	reconcile.Tx
	s *failingStore
}

func (t failingTx) SaveAuditRun(ctx context.Context, r reconcile.AuditRun) error {
	t.s.mu.Lock()
	t.s.saves++
	n := t.s.saves
	t.s.mu.Unlock()
	if n == t.s.failN {
		return errKilled
	}
	return t.Tx.SaveAuditRun(ctx, r)
}

// TestEventSweepResumesWithoutGaps: a sweep killed in its second chunk
// keeps its first, and its watermark there; the next run lists from that
// watermark minus the overlap and applies the rest, each event once, so
// that every event of the log is in the inbox.
func TestEventSweepResumesWithoutGaps(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		cfg := reconcile.Config{EventSweepChunk: 2}
		var ids []string
		for i := range 5 {
			p := f.create(fmt.Sprintf("eve-%d", i))
			f.fake.Script(p.ID, fakeprovider.Decline)
			ids = append(ids, p.ID)
			f.runUntilIdle(f.svc)
			f.clock.Advance(time.Second)
		}
		f.clock.Advance(time.Hour)
		for _, id := range ids { // five late approvals, a second apart
			if _, err := f.fake.SetStatus(f.detail(id).Purchase.ProviderPaymentID, fakeprovider.StatusSucceeded); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(time.Second)
		}
		fs := &failingStore{Store: f.store, failN: 2}
		dying := reconcileService(t, f, fs, cfg)
		rep, err := dying.SweepEvents(context.Background())
		if !errors.Is(err, errKilled) {
			t.Fatalf("SweepEvents: %v, want the kill", err)
		}
		if rep.Read != 10 || rep.New() != 2 {
			t.Fatalf("killed run %+v, want 10 read, its first chunk of 2 applied", rep)
		}
		log := f.fake.EventLog()
		w, err := f.svc.EventWatermark(context.Background())
		if err != nil || !w.Equal(log[1].Created.Truncate(time.Second)) {
			t.Fatalf("watermark %v, %v; want the first chunk's newest event, %v", w, err, log[1].Created)
		}

		rep = f.sweepEvents(reconcileService(t, f, f.store, cfg))
		if rep.Outcomes[reconcile.EventDuplicate] != 2 || rep.New() != 8 {
			t.Fatalf("resumed run %+v, want the 2 of the first chunk duplicates, 8 new", rep)
		}
		err = f.store.InTx(context.Background(), func(tx reconcile.Tx) error {
			for _, ev := range log {
				if _, err := tx.GetInboxEvent(context.Background(), "stripe", ev.ID); err != nil {
					return fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("a gap in the inbox: %v", err)
		}
		f.runUntilIdle(f.svc)
		for _, id := range ids {
			f.wantEscalated(id, reconcile.EscalationStateDisagreement)
		}
	})
}

// reconcileService is a service over st with f's clock and fake.
func reconcileService(t *testing.T, f *fixture, st reconcile.Store, cfg reconcile.Config) *reconcile.Service {
	t.Helper()
	cfg.Now = f.clock.Now
	cfg.Logger = discardLogger()
	svc, err := reconcile.New(st, f.fake, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// countingBudget counts the tokens taken, by class.
type countingBudget struct {
	mu    sync.Mutex
	taken map[reconcile.BudgetClass]int
}

func (b *countingBudget) Wait(ctx context.Context, class reconcile.BudgetClass, _ reconcile.Priority) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.taken[class]++
	return ctx.Err()
}

func (b *countingBudget) Throttled(context.Context, reconcile.BudgetClass, time.Duration) error {
	return nil
}

// TestEventSweepTakesATokenPerPage: N pages of the provider's event log
// are N provider calls and N tokens of the list budget.
func TestEventSweepTakesATokenPerPage(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		for i := range 7 {
			f.create(fmt.Sprintf("fay-%d", i))
		}
		f.runUntilIdle(f.svc) // 7 events
		for _, tc := range []struct{ page, pages int }{{2, 4}, {7, 1}, {100, 1}, {3, 3}} {
			b := &countingBudget{taken: map[reconcile.BudgetClass]int{}}
			calls := f.fake.Calls(provider.OpEventList)
			svc := reconcileService(t, f, f.store, reconcile.Config{EventSweepPage: tc.page, EventSweepFirstWindow: time.Hour, Budget: b})
			// A fresh watermark each time: every run lists all 7.
			if err := f.store.InTx(context.Background(), func(tx reconcile.Tx) error {
				return tx.SaveAuditRun(context.Background(), reconcile.AuditRun{Name: "stripe/events", Done: f.clock.Now().Add(-time.Hour)})
			}); err != nil {
				t.Fatal(err)
			}
			rep := f.sweepEvents(svc)
			if rep.Read != 7 || rep.Pages != tc.pages || b.taken[reconcile.ClassList] != tc.pages ||
				f.fake.Calls(provider.OpEventList)-calls != tc.pages {
				t.Errorf("pages of %d: read %d, %d pages, %d list tokens, %d calls; want 7 and %d of each",
					tc.page, rep.Read, rep.Pages, b.taken[reconcile.ClassList], f.fake.Calls(provider.OpEventList)-calls, tc.pages)
			}
		}
	})
}
