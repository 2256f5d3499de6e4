package fakeprovider_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/providertest"
	"github.com/payrecon/payrecon/internal/testing/testclock"
	"github.com/payrecon/payrecon/provider"
)

// newFake returns a Fake with cfg on a manual clock.
func newFake(t *testing.T, cfg fakeprovider.Config) (*fakeprovider.Fake, *testclock.Clock) {
	t.Helper()
	clk := testclock.New(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg.Now = clk.Now
	return fakeprovider.New(cfg), clk
}

// request returns a create request for purchaseID of the current version,
// as the worker stores it.
func request(purchaseID string) provider.CreateRequest {
	return provider.CreateRequest{
		IdempotencyKey: "payrecon-" + purchaseID,
		PurchaseID:     purchaseID,
		Customer:       "cus_1",
		Amount:         1250,
		Currency:       "eur",
		Description:    "order " + purchaseID,
		PaymentMethod:  fakeprovider.PaymentMethodVisa,
		Version:        provider.CurrentRequestVersion,
	}
}

func mustCreate(t *testing.T, f *fakeprovider.Fake, req provider.CreateRequest) provider.Result {
	t.Helper()
	res, err := f.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("create for %s: %v", req.PurchaseID, err)
	}
	return res
}

func mustStatus(t *testing.T, f *fakeprovider.Fake, id string) provider.Result {
	t.Helper()
	res, err := f.Status(t.Context(), id)
	if err != nil {
		t.Fatalf("status of %s: %v", id, err)
	}
	return res
}

func mustSearch(t *testing.T, f *fakeprovider.Fake, purchaseID string) provider.Result {
	t.Helper()
	res, err := f.Search(t.Context(), purchaseID)
	if err != nil {
		t.Fatalf("search for %s: %v", purchaseID, err)
	}
	return res
}

// wantCharges checks the ledger for purchaseID: how many charges, and how
// many of them took money.
func wantCharges(t *testing.T, f *fakeprovider.Fake, purchaseID string, charges, moneyTaken int) {
	t.Helper()
	if got := len(f.ChargesFor(purchaseID)); got != charges {
		t.Errorf("%s: %d charges in the ledger, want %d", purchaseID, got, charges)
	}
	if got := f.MoneyTaken(purchaseID); got != moneyTaken {
		t.Errorf("%s: MoneyTaken = %d, want %d", purchaseID, got, moneyTaken)
	}
}

func wantOutcome(t *testing.T, what string, res provider.Result, outcome provider.Outcome, status string) {
	t.Helper()
	if res.Outcome != outcome || res.Status != status {
		t.Errorf("%s: %+v, want outcome %q status %q", what, res, outcome, status)
	}
}

func wantFault(t *testing.T, err error, fault fakeprovider.Fault) {
	t.Helper()
	var fe *fakeprovider.FaultError
	if !errors.As(err, &fe) || fe.Fault != fault {
		t.Fatalf("error %v, want a FaultError for %s", err, fault)
	}
}

// openDispute is the conformance suite's hook that opens a chargeback of
// a payment of f, as a card network would.
func openDispute(f *fakeprovider.Fake) func(context.Context, string) error {
	return func(_ context.Context, paymentID string) error {
		_, err := f.OpenDispute(paymentID, fakeprovider.DisputeOptions{})
		return err
	}
}

func TestConformance(t *testing.T) {
	configs := []struct {
		name      string
		cfg       fakeprovider.Config
		realClock bool
	}{
		{name: "Defaults"},
		{name: "Lagging", cfg: fakeprovider.Config{SearchLag: 30 * time.Second, SettleAfter: 10 * time.Second, KeyRetention: time.Hour}},
		{name: "RealClock", realClock: true},
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			providertest.Run(t, providertest.Harness{
				New: func(t *testing.T) providertest.Target {
					cfg := c.cfg
					cfg.ListPageSize = 2 // listings of several pages
					if c.realClock {
						f := fakeprovider.New(cfg)
						return providertest.Target{Provider: f, PageSize: 2, Requests: f.Calls, OpenDispute: openDispute(f)}
					}
					f, clk := newFake(t, cfg)
					return providertest.Target{
						Provider:    f,
						Advance:     clk.Advance,
						Charges:     func(p string) int { return len(f.ChargesFor(p)) },
						MoneyTaken:  f.MoneyTaken,
						Refunds:     func(r string) int { return len(f.RefundsFor(r)) },
						PageSize:    2,
						Requests:    f.Calls,
						OpenDispute: openDispute(f),
					}
				},
			})
		})
	}
}

func TestCreateRecordsCharge(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{})
	req := request("pur_1")
	res := mustCreate(t, f, req)
	want := fakeprovider.Charge{
		ID: res.PaymentID, PurchaseID: "pur_1", Customer: "cus_1", Amount: 1250, Currency: "eur",
		Description: "order pur_1", PaymentMethod: fakeprovider.PaymentMethodVisa, IdempotencyKey: "payrecon-pur_1", OffSession: true,
		Status: fakeprovider.StatusSucceeded, FinalStatus: fakeprovider.StatusSucceeded, CreatedAt: clk.Now(),
	}
	if got := f.Charges(); len(got) != 1 || got[0] != want {
		t.Fatalf("Charges() = %+v, want [%+v]", got, want)
	}
	if want := (provider.Result{Outcome: provider.Succeeded, PaymentID: res.PaymentID, Status: "succeeded", Amount: 1250, Currency: "eur",
		PurchaseID: "pur_1"}); res != want {
		t.Errorf("create = %+v, want %+v", res, want)
	}
	if got := f.CountSucceeded("pur_1"); got != 1 {
		t.Errorf("CountSucceeded = %d, want 1", got)
	}
	if got := f.ChargesFor("pur_other"); len(got) != 0 {
		t.Errorf("ChargesFor(pur_other) = %+v, want none", got)
	}
}

func TestLostReplyChargesOnceAndReplaySavedResult(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	req := request("pur_lost")
	f.Script(req.PurchaseID, fakeprovider.LostReply, fakeprovider.NoFault, fakeprovider.LostReply)

	res, err := f.Create(t.Context(), req)
	wantFault(t, err, fakeprovider.LostReply)
	if got := provider.OutcomeOf(res, err); got != provider.Unknown {
		t.Fatalf("OutcomeOf(lost reply) = %q, want %q", got, provider.Unknown)
	}
	wantCharges(t, f, req.PurchaseID, 1, 1)

	replay := mustCreate(t, f, req)
	charge := f.ChargesFor(req.PurchaseID)[0]
	if replay.PaymentID != charge.ID || replay.Outcome != provider.Succeeded {
		t.Errorf("replay = %+v, want the saved success of %s", replay, charge.ID)
	}
	// A lost reply on a replay loses the saved response, charging nothing.
	_, err = f.Create(t.Context(), req)
	wantFault(t, err, fakeprovider.LostReply)
	wantCharges(t, f, req.PurchaseID, 1, 1)
	if got := f.CreateCalls(req.IdempotencyKey); got != 3 {
		t.Errorf("CreateCalls = %d, want 3", got)
	}
}

func TestKeyRetentionExpiredReplayChargesAgain(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{})
	req := request("pur_old")
	first := mustCreate(t, f, req)

	clk.Advance(24 * time.Hour) // exactly the retention: still remembered
	if res := mustCreate(t, f, req); res.PaymentID != first.PaymentID {
		t.Fatalf("replay at 24h = %+v, want the saved %s", res, first.PaymentID)
	}
	wantCharges(t, f, req.PurchaseID, 1, 1)

	clk.Advance(time.Second)
	second := mustCreate(t, f, req)
	if second.PaymentID == first.PaymentID || second.Outcome != provider.Succeeded {
		t.Fatalf("replay after retention = %+v, want a new charge", second)
	}
	wantCharges(t, f, req.PurchaseID, 2, 2)
	if got := f.DoubleCharged(); !slices.Equal(got, []string{req.PurchaseID}) {
		t.Errorf("DoubleCharged = %v, want [%s]", got, req.PurchaseID)
	}
	found := mustSearch(t, f, req.PurchaseID)
	if want := "2 charges for purchase pur_old"; found.Outcome != provider.Succeeded || found.Reason != want {
		t.Errorf("search = %+v, want a success with reason %q", found, want)
	}
	// The new charge saved the key again, from now.
	if res := mustCreate(t, f, req); res.PaymentID != second.PaymentID {
		t.Errorf("replay = %+v, want the new %s", res, second.PaymentID)
	}
}

func TestKeyRetentionConfigured(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{KeyRetention: time.Hour})
	req := request("pur_hour")
	mustCreate(t, f, req)
	clk.Advance(time.Hour + time.Nanosecond)
	mustCreate(t, f, req)
	wantCharges(t, f, req.PurchaseID, 2, 2)
}

func TestTimeoutMakesNoCharge(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	req := request("pur_timeout")
	f.Script(req.PurchaseID, fakeprovider.Timeout)

	res, err := f.Create(t.Context(), req)
	wantFault(t, err, fakeprovider.Timeout)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, provider.ErrRetryLater) {
		t.Errorf("timeout error %v: want context.DeadlineExceeded and not ErrRetryLater", err)
	}
	if got := provider.OutcomeOf(res, err); got != provider.Unknown {
		t.Errorf("OutcomeOf(timeout) = %q, want %q", got, provider.Unknown)
	}
	wantCharges(t, f, req.PurchaseID, 0, 0)
	// Nothing was saved under the key: a replay charges, once.
	mustCreate(t, f, req)
	mustCreate(t, f, req)
	wantCharges(t, f, req.PurchaseID, 1, 1)
}

func TestFailBeforeMakesNoChargeAndIsRetryable(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	req := request("pur_refused")
	f.Script(req.PurchaseID, fakeprovider.FailBefore, fakeprovider.FailBefore)

	for range 2 {
		res, err := f.Create(t.Context(), req)
		wantFault(t, err, fakeprovider.FailBefore)
		if got := provider.OutcomeOf(res, err); got != provider.RetryLater {
			t.Errorf("OutcomeOf(fail_before) = %q, want %q", got, provider.RetryLater)
		}
	}
	wantCharges(t, f, req.PurchaseID, 0, 0)
	wantOutcome(t, "retry", mustCreate(t, f, req), provider.Succeeded, "succeeded")
	wantCharges(t, f, req.PurchaseID, 1, 1)
}

func TestProcessingSettlesAfterSettleAfter(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{SettleAfter: 5 * time.Minute})
	req := request("pur_slow")
	f.Script(req.PurchaseID, fakeprovider.Processing)

	created := mustCreate(t, f, req)
	wantOutcome(t, "create", created, provider.Pending, "processing")
	// Money is taken before the charge settles; it is just not final yet.
	wantCharges(t, f, req.PurchaseID, 1, 1)
	if got := f.CountSucceeded(req.PurchaseID); got != 0 {
		t.Errorf("CountSucceeded while processing = %d, want 0", got)
	}

	clk.Advance(5*time.Minute - time.Nanosecond)
	wantOutcome(t, "status before settling", mustStatus(t, f, created.PaymentID), provider.Pending, "processing")
	clk.Advance(time.Nanosecond)
	wantOutcome(t, "status after settling", mustStatus(t, f, created.PaymentID), provider.Succeeded, "succeeded")
	wantOutcome(t, "search after settling", mustSearch(t, f, req.PurchaseID), provider.Succeeded, "succeeded")
	if got := f.CountSucceeded(req.PurchaseID); got != 1 {
		t.Errorf("CountSucceeded after settling = %d, want 1", got)
	}
	// As in Stripe, a replay returns the response as first sent.
	if res := mustCreate(t, f, req); res != created {
		t.Errorf("replay = %+v, want the saved %+v", res, created)
	}
}

func TestProcessingDeclineSettlesToDeclined(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{})
	req := request("pur_debit")
	f.Script(req.PurchaseID, fakeprovider.ProcessingDecline)

	created := mustCreate(t, f, req)
	wantOutcome(t, "create", created, provider.Pending, "processing")
	if created.Reason != "" {
		t.Errorf("processing charge has reason %q before declining", created.Reason)
	}
	wantCharges(t, f, req.PurchaseID, 1, 0)
	clk.Advance(time.Minute) // the default SettleAfter
	res := mustStatus(t, f, created.PaymentID)
	wantOutcome(t, "status after settling", res, provider.Declined, "requires_payment_method")
	if res.Reason != fakeprovider.DeclineCode {
		t.Errorf("reason %q, want %q", res.Reason, fakeprovider.DeclineCode)
	}
}

func TestStaleProcessingAnswersProcessingOnce(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	req := request("pur_stale")
	f.Script(req.PurchaseID, fakeprovider.StaleProcessing)

	created := mustCreate(t, f, req)
	wantOutcome(t, "create", created, provider.Succeeded, "succeeded")
	wantOutcome(t, "search", mustSearch(t, f, req.PurchaseID), provider.Succeeded, "succeeded")
	stale := mustStatus(t, f, created.PaymentID)
	wantOutcome(t, "first status", stale, provider.Pending, "processing")
	if stale.PaymentID != created.PaymentID {
		t.Errorf("stale status is for %q, want %q", stale.PaymentID, created.PaymentID)
	}
	for i := range 2 {
		wantOutcome(t, fmt.Sprintf("status %d", i+2), mustStatus(t, f, created.PaymentID), provider.Succeeded, "succeeded")
	}
	wantCharges(t, f, req.PurchaseID, 1, 1)
}

func TestSearchLag(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{SearchLag: 30 * time.Second})
	req := request("pur_lag")
	created := mustCreate(t, f, req)

	wantOutcome(t, "search at once", mustSearch(t, f, req.PurchaseID), provider.NotFound, "")
	clk.Advance(30*time.Second - time.Nanosecond)
	wantOutcome(t, "search before the lag", mustSearch(t, f, req.PurchaseID), provider.NotFound, "")
	// Status by id does not lag.
	wantOutcome(t, "status", mustStatus(t, f, created.PaymentID), provider.Succeeded, "succeeded")
	clk.Advance(time.Nanosecond)
	want := created
	want.Charges = 1 // one charge that took money
	if res := mustSearch(t, f, req.PurchaseID); res != want {
		t.Errorf("search after the lag = %+v, want %+v", res, want)
	}
}

func TestSearchPrefersSuccessAndCountsCharges(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	declined := request("pur_two")
	declined.PaymentMethod = fakeprovider.PaymentMethodDeclined
	mustCreate(t, f, declined)
	wantOutcome(t, "search with one decline", mustSearch(t, f, "pur_two"), provider.Declined, "requires_payment_method")

	ok := request("pur_two")
	ok.IdempotencyKey = "another-key"
	created := mustCreate(t, f, ok)
	res := mustSearch(t, f, "pur_two")
	if res.PaymentID != created.PaymentID || res.Reason != "2 charges for purchase pur_two" {
		t.Errorf("search = %+v, want %s with the count in the reason", res, created.PaymentID)
	}
	wantCharges(t, f, "pur_two", 2, 1)
	if got := f.DoubleCharged(); len(got) != 0 {
		t.Errorf("DoubleCharged = %v, want none: a decline took no money", got)
	}
}

func TestDecline(t *testing.T) {
	byCard := request("pur_card")
	byCard.PaymentMethod = fakeprovider.PaymentMethodDeclined
	byFault := request("pur_fault")
	for _, req := range []provider.CreateRequest{byCard, byFault} {
		f, _ := newFake(t, fakeprovider.Config{})
		f.Script(byFault.PurchaseID, fakeprovider.Decline)
		res := mustCreate(t, f, req)
		wantOutcome(t, req.PurchaseID, res, provider.Declined, "requires_payment_method")
		if res.Reason != "card_declined" || res.PaymentID == "" {
			t.Errorf("%s: %+v, want a payment id and reason card_declined", req.PurchaseID, res)
		}
		// Stripe records the declined PaymentIntent, but no money moved.
		wantCharges(t, f, req.PurchaseID, 1, 0)
		if c := f.ChargesFor(req.PurchaseID)[0]; c.Status != "requires_payment_method" || c.DeclineCode != "card_declined" {
			t.Errorf("%s: ledger has %+v", req.PurchaseID, c)
		}
	}
}

func TestInvalidRequestMakesNoChargeAndSavesNoKey(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	for _, mutate := range []func(*provider.CreateRequest){
		func(r *provider.CreateRequest) { r.Amount = 0 },
		func(r *provider.CreateRequest) { r.Currency = "" },
	} {
		req := request("pur_bad")
		mutate(&req)
		res, err := f.Create(t.Context(), req)
		if !errors.Is(err, fakeprovider.ErrInvalidRequest) || errors.Is(err, provider.ErrRetryLater) {
			t.Errorf("create %+v: (%+v, %v), want ErrInvalidRequest", req, res, err)
		}
	}
	wantCharges(t, f, "pur_bad", 0, 0)
	mustCreate(t, f, request("pur_bad")) // the key was not saved by the invalid requests
	wantCharges(t, f, "pur_bad", 1, 1)
}

func TestCreateWithoutKeyIsNotIdempotent(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	req := request("pur_nokey")
	req.IdempotencyKey = ""
	a, b := mustCreate(t, f, req), mustCreate(t, f, req)
	if a.PaymentID == b.PaymentID {
		t.Errorf("two keyless creates gave one payment %s", a.PaymentID)
	}
	wantCharges(t, f, req.PurchaseID, 2, 2)
}

func TestCalls(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	req := request("pur_calls")
	f.Script(req.PurchaseID, fakeprovider.FailBefore)
	_, _ = f.Create(t.Context(), req) // refused, but counted
	res := mustCreate(t, f, req)
	mustCreate(t, f, request("pur_other"))
	mustStatus(t, f, res.PaymentID)
	mustSearch(t, f, req.PurchaseID)
	mustSearch(t, f, req.PurchaseID)
	for op, want := range map[provider.Op]int{provider.OpCreate: 3, provider.OpStatus: 1, provider.OpSearch: 2} {
		if got := f.Calls(op); got != want {
			t.Errorf("Calls(%s) = %d, want %d", op, got, want)
		}
	}
	if got := f.CreateCalls(req.IdempotencyKey); got != 2 {
		t.Errorf("CreateCalls(%s) = %d, want 2", req.IdempotencyKey, got)
	}
}

func TestCanceledContext(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req := request("pur_cancel")
	if _, err := f.Create(ctx, req); !errors.Is(err, context.Canceled) {
		t.Errorf("create with a canceled context: %v, want context.Canceled", err)
	}
	if _, err := f.Status(ctx, "pi_x"); !errors.Is(err, context.Canceled) {
		t.Errorf("status with a canceled context: %v, want context.Canceled", err)
	}
	if _, err := f.Search(ctx, req.PurchaseID); !errors.Is(err, context.Canceled) {
		t.Errorf("search with a canceled context: %v, want context.Canceled", err)
	}
	wantCharges(t, f, req.PurchaseID, 0, 0)
}

// The caller giving up mid-call does not stop the provider: the charge is
// made and the outcome is unknown to the caller.
func TestCanceledWhileInFlightStillCharges(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	f, _ := newFake(t, fakeprovider.Config{OnAccept: func(provider.CreateRequest) { cancel() }})
	req := request("pur_midcall")
	res, err := f.Create(ctx, req)
	if !errors.Is(err, context.Canceled) || provider.OutcomeOf(res, err) != provider.Unknown {
		t.Fatalf("create canceled mid-call: (%+v, %v), want an unknown outcome", res, err)
	}
	wantCharges(t, f, req.PurchaseID, 1, 1)
	if replay := mustCreate(t, f, req); replay.PaymentID != f.ChargesFor(req.PurchaseID)[0].ID {
		t.Errorf("replay = %+v, want the charge made mid-call", replay)
	}
}

func TestKeyInUseWhileInFlight(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	f, _ := newFake(t, fakeprovider.Config{OnAccept: func(provider.CreateRequest) {
		if held.CompareAndSwap(false, true) { // hold the first create only
			close(entered)
			<-release
		}
	}})
	req := request("pur_inflight")
	type reply struct {
		res provider.Result
		err error
	}
	done := make(chan reply, 1)
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // never leave the held create behind on failure
	go func() {
		res, err := f.Create(context.Background(), req)
		done <- reply{res, err}
	}()
	<-entered

	busy := mustCreate(t, f, req)
	want := provider.Result{Outcome: provider.Pending, Reason: fakeprovider.ReasonKeyInUse}
	if busy != want {
		t.Errorf("create while in flight = %+v, want %+v", busy, want)
	}
	// Other parameters are refused as in use too: the key is busy.
	other := req
	other.Amount++
	if res := mustCreate(t, f, other); res != want {
		t.Errorf("create with other params while in flight = %+v, want %+v", res, want)
	}
	wantCharges(t, f, req.PurchaseID, 0, 0)

	unblock()
	first := <-done
	if first.err != nil || first.res.Outcome != provider.Succeeded {
		t.Fatalf("held create = (%+v, %v), want success", first.res, first.err)
	}
	if res := mustCreate(t, f, req); res != first.res {
		t.Errorf("replay = %+v, want %+v", res, first.res)
	}
	wantCharges(t, f, req.PurchaseID, 1, 1)
}

func TestConcurrentSameKeyChargesOnce(t *testing.T) {
	// Yielding in flight widens the window in which the others arrive.
	f, _ := newFake(t, fakeprovider.Config{OnAccept: func(provider.CreateRequest) { runtime.Gosched() }})
	req := request("pur_race")
	const n = 64
	results := make([]provider.Result, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = f.Create(context.Background(), req)
		})
	}
	close(start)
	wg.Wait()

	wantCharges(t, f, req.PurchaseID, 1, 1)
	id := f.ChargesFor(req.PurchaseID)[0].ID
	for i, res := range results {
		switch {
		case errs[i] != nil:
			t.Errorf("create %d: %v", i, errs[i])
		case res.Outcome == provider.Succeeded && res.PaymentID == id:
		case res.Outcome == provider.Pending && res.Reason == fakeprovider.ReasonKeyInUse:
		default:
			t.Errorf("create %d = %+v, want the charge %s or key in use", i, res, id)
		}
	}
	if got := f.CreateCalls(req.IdempotencyKey); got != n {
		t.Errorf("CreateCalls = %d, want %d", got, n)
	}
}

func TestScriptRunsInOrderThenNoFaults(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	script := []fakeprovider.Fault{fakeprovider.FailBefore, fakeprovider.Timeout, fakeprovider.LostReply}
	f.Script("pur_a", script[:2]...)
	f.Script("pur_a", script[2:]...) // appends
	f.Script("pur_b", fakeprovider.Decline)

	got := faultsOf(t, f, "pur_a", 5)
	want := append(script, fakeprovider.NoFault, fakeprovider.NoFault)
	if !slices.Equal(got, want) {
		t.Errorf("faults for pur_a = %q, want %q", got, want)
	}
	if got := faultsOf(t, f, "pur_b", 2); !slices.Equal(got, []fakeprovider.Fault{fakeprovider.Decline, fakeprovider.NoFault}) {
		t.Errorf("faults for pur_b = %q, want [decline none]", got)
	}
}

// Scripts are per purchase, so interleaving purchases does not change what
// each gets.
func TestScriptsAreDeterministicUnderConcurrency(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	scripts := map[string][]fakeprovider.Fault{}
	all := []fakeprovider.Fault{fakeprovider.FailBefore, fakeprovider.Timeout, fakeprovider.LostReply,
		fakeprovider.Processing, fakeprovider.ProcessingDecline, fakeprovider.StaleProcessing, fakeprovider.Decline, fakeprovider.NoFault}
	for i := range 16 {
		p := fmt.Sprintf("pur_%02d", i)
		for j := range 12 {
			scripts[p] = append(scripts[p], all[(i+j*j)%len(all)])
		}
		f.Script(p, scripts[p]...)
	}
	got := runConcurrently(t, f, slices.Sorted(maps.Keys(scripts)), 12)
	for p, want := range scripts {
		if !slices.Equal(got[p], want) {
			t.Errorf("faults for %s = %q, want %q", p, got[p], want)
		}
	}
}

const spec = "lost_reply=0.2,timeout=0.1,stale_processing=0.1,search_lag=30s,seed=7"

func TestSameSeedSameFaults(t *testing.T) {
	cfg, err := fakeprovider.ParseConfig(spec)
	if err != nil {
		t.Fatal(err)
	}
	const purchases, calls = 20, 50
	var ids []string
	for i := range purchases {
		ids = append(ids, fmt.Sprintf("pur_seed_%02d", i))
	}

	a, _ := newFake(t, cfg)
	sequential := map[string][]fakeprovider.Fault{}
	for _, p := range ids {
		sequential[p] = faultsOf(t, a, p, calls)
	}
	b, _ := newFake(t, cfg)
	concurrent := runConcurrently(t, b, ids, calls)
	for _, p := range ids {
		if !slices.Equal(sequential[p], concurrent[p]) {
			t.Errorf("%s: seed 7 gave %q, then %q", p, sequential[p], concurrent[p])
		}
	}

	// The faults follow the probabilities (the draws are fixed by the
	// seed, so this cannot flake).
	count := map[fakeprovider.Fault]int{}
	for _, seq := range sequential {
		for _, fault := range seq {
			count[fault]++
		}
	}
	const total = purchases * calls
	for fault, p := range map[fakeprovider.Fault]float64{
		fakeprovider.LostReply: 0.2, fakeprovider.Timeout: 0.1, fakeprovider.StaleProcessing: 0.1, fakeprovider.NoFault: 0.6,
	} {
		if want := p * total; float64(count[fault]) < want*0.75 || float64(count[fault]) > want*1.25 {
			t.Errorf("%s: %d of %d calls, want about %v", fault, count[fault], total, want)
		}
	}
	if len(count) != 4 {
		t.Errorf("faults seen: %v, want only lost_reply, timeout, stale_processing and none", count)
	}

	cfg.Seed = 8
	c, _ := newFake(t, cfg)
	if other := faultsOf(t, c, ids[0], calls); slices.Equal(other, sequential[ids[0]]) {
		t.Errorf("seeds 7 and 8 gave the same faults %q", other)
	}
}

// A script overrides the draw but consumes it, so the calls after the
// script get the same faults as without it.
func TestScriptConsumesDraws(t *testing.T) {
	cfg, err := fakeprovider.ParseConfig(spec)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := newFake(t, cfg)
	want := faultsOf(t, plain, "pur_x", 30)

	scripted, _ := newFake(t, cfg)
	scripted.Script("pur_x", fakeprovider.Decline, fakeprovider.Decline)
	got := faultsOf(t, scripted, "pur_x", 30)
	if !slices.Equal(got[:2], []fakeprovider.Fault{fakeprovider.Decline, fakeprovider.Decline}) || !slices.Equal(got[2:], want[2:]) {
		t.Errorf("with a script: %q, want [decline decline] then %q", got, want[2:])
	}
}

// faultsOf makes calls creates for purchaseID, each under a fresh key so
// that each makes a charge unless its fault prevents it, and returns the
// fault each call got. It may run outside the test's goroutine, so it
// reports failures with Errorf.
func faultsOf(t *testing.T, f *fakeprovider.Fake, purchaseID string, calls int) []fakeprovider.Fault {
	t.Helper()
	var out []fakeprovider.Fault
	for i := range calls {
		req := request(purchaseID)
		req.IdempotencyKey = fmt.Sprintf("%s-%d", purchaseID, i)
		_, err := f.Create(context.Background(), req)
		var fe *fakeprovider.FaultError
		switch {
		case errors.As(err, &fe):
			out = append(out, fe.Fault)
		case err != nil:
			t.Errorf("create %d for %s: %v", i, purchaseID, err)
			return out
		default:
			cs := f.ChargesFor(purchaseID)
			out = append(out, cs[len(cs)-1].Fault)
		}
	}
	return out
}

// runConcurrently runs faultsOf for every purchase at once, one goroutine
// each.
func runConcurrently(t *testing.T, f *fakeprovider.Fake, purchaseIDs []string, calls int) map[string][]fakeprovider.Fault {
	t.Helper()
	out := make([][]fakeprovider.Fault, len(purchaseIDs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, p := range purchaseIDs {
		wg.Go(func() {
			<-start
			out[i] = faultsOf(t, f, p, calls)
		})
	}
	close(start)
	wg.Wait()
	m := make(map[string][]fakeprovider.Fault, len(purchaseIDs))
	for i, p := range purchaseIDs {
		m[p] = out[i]
	}
	return m
}

// TestPaymentIDs: a fake's payment ids count from 1 and carry its
// instance, random by default, so that fakes in several processes
// writing to one database never give the same id; a set instance gives
// the same ids on every run.
func TestPaymentIDs(t *testing.T) {
	shape := regexp.MustCompile(`^pi_fake[0-9a-f]{8}_[0-9]{20}$`)
	a, _ := newFake(t, fakeprovider.Config{})
	b, _ := newFake(t, fakeprovider.Config{})
	if a.Instance() == b.Instance() {
		t.Fatalf("two fakes drew the same instance %q", a.Instance())
	}
	seen := map[string]bool{}
	for _, f := range []*fakeprovider.Fake{a, b} {
		// The same calls on each, as two processes would make them.
		for i, p := range []string{"pur_1", "pur_2", "pur_3"} {
			id := mustCreate(t, f, request(p)).PaymentID
			if want := fmt.Sprintf("pi_fake%s_%020d", f.Instance(), i+1); id != want || !shape.MatchString(id) {
				t.Errorf("payment %d of fake %s: %q, want %q", i+1, f.Instance(), id, want)
			}
			if seen[id] {
				t.Errorf("payment id %s given twice", id)
			}
			seen[id] = true
		}
	}

	for range 2 {
		f, _ := newFake(t, fakeprovider.Config{Instance: "Run7"})
		if id := mustCreate(t, f, request("pur_1")).PaymentID; id != "pi_fakeRun7_00000000000000000001" {
			t.Errorf("payment of a fake with instance Run7: %q", id)
		}
	}
}
