package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// newClock returns the manual clock shared by the store, the service and
// the fake provider.
func newClock() *testclock.Clock { return testclock.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)) }

// fixture is what a protocol test needs.
type fixture struct {
	t     *testing.T
	store reconcile.Store
	fake  *fakeprovider.Fake
	clock *testclock.Clock
	svc   *reconcile.Service
	// skew is how far the workers' own clocks are off the store's.
	skew time.Duration
}

// setup returns a fixture over a fresh store, a fake provider configured
// by fcfg (its clock and seed are set here), and a service with cfg.
func setup(t *testing.T, newStore stores.Factory, fcfg fakeprovider.Config, cfg reconcile.Config) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: newClock()}
	f.store = newStore(t, f.clock.Now)
	fcfg.Now = f.clock.Now
	f.fake = fakeprovider.New(fcfg)
	f.svc = f.service(f.fake, "worker-a", cfg)
	return f
}

// service builds another service (another worker) over the same store.
func (f *fixture) service(p provider.Provider, id string, cfg reconcile.Config) *reconcile.Service {
	f.t.Helper()
	cfg.WorkerID = id
	cfg.Now = func() time.Time { return f.clock.Now().Add(f.skew) }
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	svc, err := reconcile.New(f.store, p, cfg)
	if err != nil {
		f.t.Fatalf("reconcile.New: %v", err)
	}
	return svc
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (f *fixture) create(customer string) reconcile.Purchase {
	f.t.Helper()
	p, err := f.svc.CreatePurchase(context.Background(), reconcile.NewPurchase{
		Customer: customer, Amount: 300, Currency: "usd", Description: "coffee",
	})
	if err != nil {
		f.t.Fatalf("create purchase: %v", err)
	}
	return p
}

// runUntilIdle runs the service until no job is due at the current time.
func (f *fixture) runUntilIdle(svc *reconcile.Service) {
	f.t.Helper()
	for range 100 {
		n, err := svc.RunOnce(context.Background())
		if err != nil {
			f.t.Fatalf("RunOnce: %v", err)
		}
		if n == 0 {
			return
		}
	}
	f.t.Fatal("jobs still due after 100 runs")
}

func (f *fixture) detail(id string) reconcile.Detail {
	f.t.Helper()
	d, err := f.svc.Purchase(context.Background(), id)
	if err != nil {
		f.t.Fatalf("purchase %s: %v", id, err)
	}
	return d
}

func (f *fixture) wantState(id string, want statemachine.State) reconcile.Detail {
	f.t.Helper()
	d := f.detail(id)
	if d.Purchase.State != want {
		f.t.Fatalf("purchase %s: state %s, want %s\n%s", id, d.Purchase.State, want, history(d))
	}
	return d
}

func (f *fixture) wantMoneyTaken(id string, want int) {
	f.t.Helper()
	if got := f.fake.MoneyTaken(id); got != want {
		f.t.Fatalf("purchase %s: %d charges with money taken in the fake's ledger, want %d", id, got, want)
	}
}

func history(d reconcile.Detail) string {
	s := ""
	for _, t := range d.Transitions {
		s += fmt.Sprintf("  %s→%s %s token=%d %s\n", t.From, t.To, t.Cause, t.LeaseToken, t.Evidence)
	}
	for _, a := range d.Attempts {
		s += fmt.Sprintf("  call %s %s applied=%v err=%s note=%s\n", a.Op, a.Outcome, a.Applied, a.Error, a.Note)
	}
	return s
}

func path(d reconcile.Detail) []string {
	var out []string
	for _, t := range d.Transitions {
		out = append(out, fmt.Sprintf("%s→%s:%s", t.From, t.To, t.Cause))
	}
	return out
}

func wantPath(t *testing.T, d reconcile.Detail, want ...string) {
	t.Helper()
	got := path(d)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("transitions:\n got %v\nwant %v", got, want)
	}
}

func TestCleanSuccess(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("alice")
		f.runUntilIdle(f.svc)
		d := f.wantState(p.ID, statemachine.Succeeded)
		f.wantMoneyTaken(p.ID, 1)
		wantPath(t, d, "created→submitted:submit", "submitted→succeeded:submit_response")
		if d.Purchase.ProviderKey != reconcile.ProviderKeyFor(p.ID) || d.Purchase.ProviderPaymentID == "" {
			t.Fatalf("key %q payment id %q", d.Purchase.ProviderKey, d.Purchase.ProviderPaymentID)
		}
		if d.Purchase.ProviderRequest == nil || d.Purchase.ParamsHash != d.Purchase.ProviderRequest.Hash() {
			t.Fatalf("stored request %+v hash %q", d.Purchase.ProviderRequest, d.Purchase.ParamsHash)
		}
		if d.Job.DoneAt.IsZero() {
			t.Fatal("job not done")
		}
	})
}

func TestDecline(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("bob")
		f.fake.Script(p.ID, fakeprovider.Decline)
		f.runUntilIdle(f.svc)
		d := f.wantState(p.ID, statemachine.Declined)
		f.wantMoneyTaken(p.ID, 0)
		wantPath(t, d, "created→submitted:submit", "submitted→declined:submit_response")
	})
}

// TestLostReplyThenReconciliation: the provider charged but the reply was
// lost. The purchase goes uncertain, and the next check replays the same
// key: one charge, succeeded.
func TestLostReplyThenReconciliation(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("carol")
		f.fake.Script(p.ID, fakeprovider.LostReply)
		f.runUntilIdle(f.svc)
		f.wantState(p.ID, statemachine.Uncertain)
		f.wantMoneyTaken(p.ID, 1)

		f.runUntilIdle(f.svc) // not due yet: nothing happens
		f.wantState(p.ID, statemachine.Uncertain)

		f.clock.Advance(30 * time.Second)
		f.runUntilIdle(f.svc)
		d := f.wantState(p.ID, statemachine.Succeeded)
		f.wantMoneyTaken(p.ID, 1)
		wantPath(t, d,
			"created→submitted:submit",
			"submitted→uncertain:submit_response",
			"uncertain→reconciling:key_replay",
			"reconciling→succeeded:key_replay")
		for _, a := range d.Attempts {
			if a.Op == provider.OpCreate && a.Key != reconcile.ProviderKeyFor(p.ID) {
				t.Fatalf("create sent with key %q, want the stable key", a.Key)
			}
		}
		if n := f.fake.Calls(provider.OpCreate); n != 2 {
			t.Fatalf("%d creates, want 2 (the lost one and its replay)", n)
		}
	})
}

// TestTimeoutBeforeChargeThenReplay: the request timed out before the
// provider acted. The replay under the same key makes the one charge.
func TestTimeoutBeforeChargeThenReplay(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("dave")
		f.fake.Script(p.ID, fakeprovider.Timeout)
		f.runUntilIdle(f.svc)
		f.wantState(p.ID, statemachine.Uncertain)
		f.wantMoneyTaken(p.ID, 0)
		f.clock.Advance(30 * time.Second)
		f.runUntilIdle(f.svc)
		f.wantState(p.ID, statemachine.Succeeded)
		f.wantMoneyTaken(p.ID, 1)
	})
}

// TestRetryLaterStaysSubmitted: a refusal before acting is not uncertain:
// the purchase stays submitted and the same request is sent again.
func TestRetryLaterStaysSubmitted(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("erin")
		f.fake.Script(p.ID, fakeprovider.FailBefore)
		f.runUntilIdle(f.svc)
		f.wantState(p.ID, statemachine.Submitted)
		f.clock.Advance(30 * time.Second)
		f.runUntilIdle(f.svc)
		d := f.wantState(p.ID, statemachine.Succeeded)
		f.wantMoneyTaken(p.ID, 1)
		wantPath(t, d, "created→submitted:submit", "submitted→succeeded:submit_response")
	})
}

// TestProcessingSettles: an in-progress answer is uncertain with a known
// payment id; the next check queries its status.
func TestProcessingSettles(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{SettleAfter: 90 * time.Second}, reconcile.Config{})
		p := f.create("frank")
		f.fake.Script(p.ID, fakeprovider.Processing)
		f.runUntilIdle(f.svc)
		f.wantState(p.ID, statemachine.Uncertain)
		f.clock.Advance(30 * time.Second) // still processing
		f.runUntilIdle(f.svc)
		f.wantState(p.ID, statemachine.Uncertain)
		f.clock.Advance(2 * time.Minute)
		f.runUntilIdle(f.svc)
		d := f.wantState(p.ID, statemachine.Succeeded)
		f.wantMoneyTaken(p.ID, 1)
		wantPath(t, d,
			"created→submitted:submit",
			"submitted→uncertain:submit_response",
			"uncertain→reconciling:status_query",
			"reconciling→uncertain:status_query",
			"uncertain→reconciling:status_query",
			"reconciling→succeeded:status_query")
	})
}

// gate holds provider calls until released, so that a test can interleave
// two workers at the exact point of a call. It forwards every call to the
// real fake: nothing is mocked.
type gate struct {
	provider.Provider
	mu      sync.Mutex
	hold    map[provider.Op]bool // ops whose next call is held
	entered chan provider.Op
	release chan struct{}
}

func newGate(p provider.Provider, ops ...provider.Op) *gate {
	g := &gate{Provider: p, hold: map[provider.Op]bool{}, entered: make(chan provider.Op, 1), release: make(chan struct{})}
	for _, op := range ops {
		g.hold[op] = true
	}
	return g
}

func (g *gate) wait(ctx context.Context, op provider.Op) error {
	g.mu.Lock()
	held := g.hold[op]
	g.hold[op] = false
	g.mu.Unlock()
	if !held {
		return nil
	}
	g.entered <- op
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) Create(ctx context.Context, req provider.CreateRequest) (provider.Result, error) {
	if err := g.wait(ctx, provider.OpCreate); err != nil {
		return provider.Result{}, fmt.Errorf("gate: %w", err)
	}
	return g.Provider.Create(ctx, req)
}

func (g *gate) Status(ctx context.Context, id string) (provider.Result, error) {
	if err := g.wait(ctx, provider.OpStatus); err != nil {
		return provider.Result{}, fmt.Errorf("gate: %w", err)
	}
	return g.Provider.Status(ctx, id)
}

func claimOne(t *testing.T, f *fixture, owner string) reconcile.Lease {
	t.Helper()
	leases, err := f.store.ClaimJobs(context.Background(), owner, 1, 30*time.Second)
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim: %v, %d leases", err, len(leases))
	}
	return leases[0]
}

// stalled is a worker held inside a provider call.
type stalled struct {
	lease   reconcile.Lease
	gate    *gate
	process <-chan error // Process's result, once the call is released
}

// stall has worker-a claim the next due job and work it over p until its
// first call of op, which is held; it returns once the worker is inside
// that call.
func (f *fixture) stall(p provider.Provider, op provider.Op) stalled {
	f.t.Helper()
	g := newGate(p, op)
	a := f.service(g, "worker-a", reconcile.Config{})
	l := claimOne(f.t, f, "worker-a")
	done := make(chan error, 1)
	go func() { done <- a.Process(context.Background(), l) }()
	<-g.entered
	return stalled{lease: l, gate: g, process: done}
}

// TestStaleWorkerCannotCommit: worker A stalls inside the create call, its
// lease expires, worker B takes the job over and settles the purchase.
// When A's answer finally arrives, A commits nothing.
func TestStaleWorkerCannotCommit(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		b := f.service(f.fake, "worker-b", reconcile.Config{})
		p := f.create("grace")

		a := f.stall(f.fake, provider.OpCreate) // A has moved created→submitted and is inside the call
		la := a.lease

		f.clock.Advance(31 * time.Second) // A's lease expires
		f.runUntilIdle(b)
		f.wantState(p.ID, statemachine.Succeeded)

		close(a.gate.release) // A's reply arrives, too late
		<-a.process

		d := f.wantState(p.ID, statemachine.Succeeded)
		f.wantMoneyTaken(p.ID, 1)
		wantPath(t, d,
			"created→submitted:submit",
			"submitted→uncertain:lease_lost",
			"uncertain→reconciling:key_replay",
			"reconciling→succeeded:key_replay")
		for _, tr := range d.Transitions[1:] {
			if tr.LeaseToken == la.Token {
				t.Fatalf("stale lease %d wrote transition %s→%s", la.Token, tr.From, tr.To)
			}
		}
		var staleCalls int
		for _, at := range d.Attempts {
			if at.LeaseToken == la.Token {
				staleCalls++
				if at.Applied {
					t.Fatalf("stale worker's answer was applied: %+v", at)
				}
			}
		}
		if staleCalls != 1 {
			t.Fatalf("stale worker's call recorded %d times, want once (unapplied)", staleCalls)
		}
	})
}

// TestExpiredLeaseWritesNothing: a lease past its expiry, not yet taken
// over, cannot write either.
func TestExpiredLeaseWritesNothing(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		p := f.create("heidi")
		l := claimOne(t, f, "worker-a")
		f.clock.Advance(31 * time.Second)
		f.svc.Process(context.Background(), l)
		d := f.wantState(p.ID, statemachine.Created)
		if len(d.Transitions) != 0 || f.fake.Calls(provider.OpCreate) != 0 {
			t.Fatalf("expired lease acted: %v, %d creates", path(d), f.fake.Calls(provider.OpCreate))
		}
	})
}

// TestStaleProcessingAfterSuccess: a status answer of "processing" that
// arrives after the purchase succeeded is recorded and changes nothing.
func TestStaleProcessingAfterSuccess(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{SettleAfter: time.Minute}, reconcile.Config{})
		p := f.create("ivan")
		f.fake.Script(p.ID, fakeprovider.Processing)
		f.runUntilIdle(f.svc) // uncertain, payment id known
		f.wantState(p.ID, statemachine.Uncertain)

		// Worker A asks for the status while the charge is still
		// processing, and stalls before the answer is applied.
		f.clock.Advance(30 * time.Second)
		a := f.stall(staleAnswer{f.fake}, provider.OpStatus)
		la := a.lease

		// Meanwhile the charge settles and worker B, taking over the
		// expired lease, confirms the success.
		f.clock.Advance(time.Minute)
		b := f.service(f.fake, "worker-b", reconcile.Config{})
		f.runUntilIdle(b)
		f.wantState(p.ID, statemachine.Succeeded)

		close(a.gate.release) // A's stale "processing" arrives
		<-a.process
		d := f.wantState(p.ID, statemachine.Succeeded)
		f.wantMoneyTaken(p.ID, 1)
		var stale bool
		for _, at := range d.Attempts {
			if at.LeaseToken == la.Token && at.Outcome == provider.Pending && !at.Applied {
				stale = true
			}
		}
		if !stale {
			t.Fatalf("stale processing answer not recorded as unapplied:\n%s", history(d))
		}
	})
}

// staleAnswer answers every status query with the "processing" the
// provider gave before the charge settled, as a reply delayed in the
// network would.
type staleAnswer struct{ *fakeprovider.Fake }

func (s staleAnswer) Status(ctx context.Context, id string) (provider.Result, error) {
	res, err := s.Fake.Status(ctx, id)
	if err != nil {
		return res, err
	}
	res.Outcome, res.Status = provider.Pending, "processing"
	return res, nil
}

// TestKeyRetentionExpiredNeverCreatesAgain: the outcome stayed unknown
// past the provider's key retention. A replay could now create a second
// charge, so none is sent: search only, and the case is escalated.
func TestKeyRetentionExpiredNeverCreatesAgain(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{SearchLag: 72 * time.Hour}, reconcile.Config{})
		p := f.create("judy")
		f.fake.Script(p.ID, fakeprovider.LostReply)
		f.runUntilIdle(f.svc)
		f.wantState(p.ID, statemachine.Uncertain)
		creates := f.fake.Calls(provider.OpCreate)

		// Nobody ran the worker for a day: the key is gone at the provider.
		f.clock.Advance(25 * time.Hour)
		f.runUntilIdle(f.svc)
		d := f.wantState(p.ID, statemachine.Uncertain)
		if !d.Purchase.Escalated() || d.Purchase.EscalationReason != reconcile.EscalationKeyRetentionExpired {
			t.Fatalf("not escalated for key retention: %+v", d.Purchase)
		}
		// It keeps being checked slowly, by search only.
		for range 5 {
			f.clock.Advance(6 * time.Hour)
			f.runUntilIdle(f.svc)
		}
		if got := f.fake.Calls(provider.OpCreate); got != creates {
			t.Fatalf("%d creates after the key expired, want none", got-creates)
		}
		f.wantMoneyTaken(p.ID, 1)
		// The search index catches up: the late answer resolves it and it
		// leaves the operator list.
		f.clock.Advance(24 * time.Hour)
		f.runUntilIdle(f.svc)
		d = f.wantState(p.ID, statemachine.Succeeded)
		if d.Purchase.Escalated() {
			t.Fatal("resolved purchase still escalated")
		}
		if got := f.fake.Calls(provider.OpCreate); got != creates {
			t.Fatalf("%d creates after the key expired, want none", got-creates)
		}
		f.wantMoneyTaken(p.ID, 1)
	})
}

// TestEscalationAfterAttempts: a purchase that stays unknown is escalated
// after MaxAttempts runs, stays uncertain, and keeps being checked.
func TestEscalationAfterAttempts(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{MaxAttempts: 3, Backoff: []time.Duration{time.Minute}})
		p := f.create("ken")
		f.fake.Script(p.ID, fakeprovider.Timeout, fakeprovider.Timeout, fakeprovider.Timeout)
		for range 3 {
			f.runUntilIdle(f.svc)
			f.clock.Advance(time.Minute)
		}
		d := f.wantState(p.ID, statemachine.Uncertain)
		if d.Purchase.EscalationReason != reconcile.EscalationAttemptsExhausted {
			t.Fatalf("escalation %q, want %q", d.Purchase.EscalationReason, reconcile.EscalationAttemptsExhausted)
		}
		if want := f.clock.Now().Add(-time.Minute).Add(6 * time.Hour); !d.Job.RunAt.Equal(want) {
			t.Fatalf("next check %s, want the slow cadence %s", d.Job.RunAt, want)
		}
		f.clock.Advance(6 * time.Hour)
		f.runUntilIdle(f.svc)
		f.wantState(p.ID, statemachine.Succeeded)
		f.wantMoneyTaken(p.ID, 1)
	})
}

// TestBadInputChangesNothing: invalid purchases are refused with a clear
// error naming the field, and nothing is stored.
func TestBadInputChangesNothing(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		tests := []struct {
			name string
			np   reconcile.NewPurchase
			want string
		}{
			{"zero amount", reconcile.NewPurchase{Customer: "c", Amount: 0, Currency: "usd"}, "amount"},
			{"negative amount", reconcile.NewPurchase{Customer: "c", Amount: -5, Currency: "usd"}, "amount"},
			{"over max", reconcile.NewPurchase{Customer: "c", Amount: 100_000_000, Currency: "usd"}, "amount"},
			{"unknown currency", reconcile.NewPurchase{Customer: "c", Amount: 5, Currency: "xyz"}, "currency"},
			{"no currency", reconcile.NewPurchase{Customer: "c", Amount: 5}, "currency"},
			{"no customer", reconcile.NewPurchase{Amount: 5, Currency: "usd"}, "customer"},
			{"under the minimum charge", reconcile.NewPurchase{Customer: "c", PaymentMethod: "pm_card_visa", Amount: 49, Currency: "usd"}, "amount"},
			{"under the minimum charge in yen", reconcile.NewPurchase{Customer: "c", PaymentMethod: "pm_card_visa", Amount: 49, Currency: "jpy"}, "amount"},
		}
		for _, tt := range tests {
			_, err := f.svc.CreatePurchase(context.Background(), tt.np)
			var fe *reconcile.FieldError
			if !errors.Is(err, reconcile.ErrInvalid) || !errors.As(err, &fe) || fe.Field != tt.want {
				t.Errorf("%s: got %v, want a field error on %s", tt.name, err, tt.want)
			}
		}
		counts := countStates(t, f.store)
		if len(counts) != 0 {
			t.Fatalf("bad input stored purchases: %v", counts)
		}
		_, err := f.svc.Purchase(context.Background(), "pur_missing")
		if !errors.Is(err, reconcile.ErrNotFound) {
			t.Fatalf("unknown id: %v, want ErrNotFound", err)
		}
	})
}

func countStates(t *testing.T, st reconcile.Store) map[statemachine.State]int {
	t.Helper()
	var counts map[statemachine.State]int
	err := st.InTx(context.Background(), func(tx reconcile.Tx) error {
		var err error
		counts, err = tx.CountByState(context.Background())
		return err
	})
	if err != nil {
		t.Fatalf("count by state: %v", err)
	}
	for s, n := range counts {
		if n == 0 {
			delete(counts, s)
		}
	}
	return counts
}
