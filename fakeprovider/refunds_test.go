package fakeprovider_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
)

// refundRequest returns a refund request of amount of payment paymentID,
// for refund refundID of purchaseID, as the worker stores it.
func refundRequest(refundID, purchaseID, paymentID string, amount int64) provider.RefundRequest {
	return provider.RefundRequest{
		IdempotencyKey: "payrecon-" + refundID,
		RefundID:       refundID,
		PurchaseID:     purchaseID,
		PaymentID:      paymentID,
		Amount:         amount,
		Currency:       "eur",
		Reason:         "requested_by_customer",
	}
}

// charged charges purchaseID (1250 eur) and returns its payment id.
func charged(t *testing.T, f *fakeprovider.Fake, purchaseID string) string {
	t.Helper()
	return mustCreate(t, f, request(purchaseID)).PaymentID
}

func mustRefund(t *testing.T, f *fakeprovider.Fake, req provider.RefundRequest) provider.RefundResult {
	t.Helper()
	res, err := f.CreateRefund(t.Context(), req)
	if err != nil {
		t.Fatalf("refund %s of %s: %v", req.RefundID, req.PaymentID, err)
	}
	return res
}

func mustGetRefund(t *testing.T, f *fakeprovider.Fake, id string) provider.RefundResult {
	t.Helper()
	res, err := f.GetRefund(t.Context(), id)
	if err != nil {
		t.Fatalf("get refund %s: %v", id, err)
	}
	return res
}

// wantRefunds checks the ledger for payment paymentID: how many refunds,
// and how much they returned.
func wantRefunds(t *testing.T, f *fakeprovider.Fake, paymentID string, refunds int, refunded int64) {
	t.Helper()
	if got := len(f.RefundsOf(paymentID)); got != refunds {
		t.Errorf("%s: %d refunds in the ledger, want %d", paymentID, got, refunds)
	}
	if got := f.Refunded(paymentID); got != refunded {
		t.Errorf("%s: Refunded = %d, want %d", paymentID, got, refunded)
	}
}

func wantRefundOutcome(t *testing.T, what string, res provider.RefundResult, outcome provider.Outcome, status string) {
	t.Helper()
	if res.Outcome != outcome || res.Status != status {
		t.Errorf("%s: %+v, want outcome %q status %q", what, res, outcome, status)
	}
}

func TestRefundRecordsRefund(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{})
	pi := charged(t, f, "pur_1")
	clk.Advance(time.Second)
	req := refundRequest("ref_1", "pur_1", pi, 500)
	res := mustRefund(t, f, req)
	if !strings.HasPrefix(res.ID, "re_fake") {
		t.Errorf("refund id %q, want re_fake…", res.ID)
	}
	want := provider.RefundResult{Outcome: provider.Succeeded, ID: res.ID, PaymentID: pi, RefundID: "ref_1", PurchaseID: "pur_1",
		Amount: 500, Currency: "eur", Status: fakeprovider.RefundStatusSucceeded, Created: clk.Now()}
	if res != want {
		t.Errorf("refund = %+v, want %+v", res, want)
	}
	if got := mustGetRefund(t, f, res.ID); got != want {
		t.Errorf("GetRefund = %+v, want %+v", got, want)
	}
	wantRefund := fakeprovider.Refund{ID: res.ID, PaymentID: pi, RefundID: "ref_1", PurchaseID: "pur_1", Amount: 500, Currency: "eur",
		Reason: "requested_by_customer", IdempotencyKey: "payrecon-ref_1", Status: "succeeded", FinalStatus: "succeeded", CreatedAt: clk.Now()}
	if got := f.Refunds(); len(got) != 1 || got[0] != wantRefund {
		t.Errorf("Refunds() = %+v, want [%+v]", got, wantRefund)
	}
	if got := f.RefundsFor("ref_1"); len(got) != 1 || got[0] != wantRefund {
		t.Errorf("RefundsFor(ref_1) = %+v, want [%+v]", got, wantRefund)
	}
	wantRefunds(t, f, pi, 1, 500)
	if got := f.NetAmount(pi); got != 750 {
		t.Errorf("NetAmount = %d, want 750", got)
	}
	if got, want := f.Calls(provider.OpRefundCreate), 1; got != want {
		t.Errorf("Calls(refund_create) = %d, want %d", got, want)
	}
	if got := f.Calls(provider.OpRefundGet); got != 1 {
		t.Errorf("Calls(refund_get) = %d, want 1", got)
	}
	if got := f.RefundCreateCalls("payrecon-ref_1"); got != 1 {
		t.Errorf("RefundCreateCalls = %d, want 1", got)
	}
	// The charge is untouched: still one charge that took money.
	wantCharges(t, f, "pur_1", 1, 1)
}

func TestRefundReplaySameKeyRefundsOnce(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	pi := charged(t, f, "pur_1")
	req := refundRequest("ref_1", "pur_1", pi, 500)
	first := mustRefund(t, f, req)
	again := mustRefund(t, f, req)
	if again != first {
		t.Errorf("replay = %+v, want the saved %+v", again, first)
	}
	wantRefunds(t, f, pi, 1, 500)
	if got := f.RefundCreateCalls(req.IdempotencyKey); got != 2 {
		t.Errorf("RefundCreateCalls = %d, want 2", got)
	}
}

func TestRefundKeyMismatch(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	pi := charged(t, f, "pur_1")
	req := refundRequest("ref_1", "pur_1", pi, 500)
	first := mustRefund(t, f, req)

	other := req
	other.Amount = 400
	res, err := f.CreateRefund(t.Context(), other)
	if !errors.Is(err, provider.ErrIdempotencyMismatch) || provider.RefundOutcomeOf(res, err) != provider.IdempotencyMismatch {
		t.Errorf("same key, other amount = (%+v, %v), want an idempotency mismatch", res, err)
	}
	// A charge's key at the refunds, and a refund's at the creates: keys
	// are shared by the endpoints, as Stripe's.
	charge := request("pur_1")
	byChargeKey := refundRequest("ref_2", "pur_1", pi, 100)
	byChargeKey.IdempotencyKey = charge.IdempotencyKey
	if _, err := f.CreateRefund(t.Context(), byChargeKey); !errors.Is(err, provider.ErrIdempotencyMismatch) {
		t.Errorf("refund under a create's key: %v, want an idempotency mismatch", err)
	}
	byRefundKey := request("pur_2")
	byRefundKey.IdempotencyKey = req.IdempotencyKey
	if _, err := f.Create(t.Context(), byRefundKey); !errors.Is(err, provider.ErrIdempotencyMismatch) {
		t.Errorf("create under a refund's key: %v, want an idempotency mismatch", err)
	}
	if again := mustRefund(t, f, req); again != first {
		t.Errorf("replay after the mismatches = %+v, want %+v", again, first)
	}
	wantRefunds(t, f, pi, 1, 500)
	wantCharges(t, f, "pur_2", 0, 0)
}

// TestRefundRules: Stripe's rules, each refusal an ErrRejected that makes
// no refund and saves no key.
func TestRefundRules(t *testing.T) {
	tests := []struct {
		name string
		// setup makes the payment and what refunds it already has, and
		// returns the refund to try.
		setup func(t *testing.T, f *fakeprovider.Fake) provider.RefundRequest
		want  error
	}{
		{"unknown payment", func(t *testing.T, f *fakeprovider.Fake) provider.RefundRequest {
			return refundRequest("ref_x", "pur_1", "pi_nope", 100)
		}, fakeprovider.ErrNoSuchPayment},
		{"declined payment", func(t *testing.T, f *fakeprovider.Fake) provider.RefundRequest {
			req := request("pur_1")
			req.PaymentMethod = fakeprovider.PaymentMethodDeclined
			return refundRequest("ref_x", "pur_1", mustCreate(t, f, req).PaymentID, 100)
		}, fakeprovider.ErrNotRefundable},
		{"processing payment", func(t *testing.T, f *fakeprovider.Fake) provider.RefundRequest {
			f.Script("pur_1", fakeprovider.Processing)
			return refundRequest("ref_x", "pur_1", charged(t, f, "pur_1"), 100)
		}, fakeprovider.ErrNotRefundable},
		{"more than the payment", func(t *testing.T, f *fakeprovider.Fake) provider.RefundRequest {
			return refundRequest("ref_x", "pur_1", charged(t, f, "pur_1"), 1251)
		}, fakeprovider.ErrRefundTooLarge},
		{"more than remains after a refund", func(t *testing.T, f *fakeprovider.Fake) provider.RefundRequest {
			pi := charged(t, f, "pur_1")
			mustRefund(t, f, refundRequest("ref_0", "pur_1", pi, 1000))
			return refundRequest("ref_x", "pur_1", pi, 251)
		}, fakeprovider.ErrRefundTooLarge},
		{"more than remains after a pending refund", func(t *testing.T, f *fakeprovider.Fake) provider.RefundRequest {
			pi := charged(t, f, "pur_1")
			f.ScriptRefund("ref_0", fakeprovider.Processing)
			mustRefund(t, f, refundRequest("ref_0", "pur_1", pi, 1000))
			return refundRequest("ref_x", "pur_1", pi, 251)
		}, fakeprovider.ErrRefundTooLarge},
		{"already refunded in full", func(t *testing.T, f *fakeprovider.Fake) provider.RefundRequest {
			pi := charged(t, f, "pur_1")
			mustRefund(t, f, refundRequest("ref_0", "pur_1", pi, 1250))
			return refundRequest("ref_x", "pur_1", pi, 1)
		}, fakeprovider.ErrAlreadyRefunded},
		{"zero amount", func(t *testing.T, f *fakeprovider.Fake) provider.RefundRequest {
			return refundRequest("ref_x", "pur_1", charged(t, f, "pur_1"), 0)
		}, fakeprovider.ErrInvalidRequest},
		{"no payment", func(t *testing.T, f *fakeprovider.Fake) provider.RefundRequest {
			return refundRequest("ref_x", "pur_1", "", 100)
		}, fakeprovider.ErrInvalidRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := newFake(t, fakeprovider.Config{})
			req := tc.setup(t, f)
			before := len(f.Refunds())
			res, err := f.CreateRefund(t.Context(), req)
			// A refusal for a reason of the payment is a failed refund;
			// one of a wrong request stays rejected.
			outcome := provider.Rejected
			if errors.Is(err, provider.ErrRefundRefused) {
				outcome = provider.Failed
			}
			if !errors.Is(err, tc.want) || !errors.Is(err, provider.ErrRejected) || provider.RefundOutcomeOf(res, err) != outcome {
				t.Fatalf("refund = (%+v, %v), want an error wrapping %v and provider.ErrRejected", res, err, tc.want)
			}
			if got := len(f.Refunds()); got != before {
				t.Errorf("%d refunds after the refusal, want %d: nothing made", got, before)
			}
			if len(f.RefundsFor("ref_x")) != 0 {
				t.Errorf("refused ref_x is in the ledger")
			}
		})
	}
}

// TestRefusedRefundSavesNoKey: after a refusal, the same key with other
// parameters is a new request, not a mismatch, as Stripe saves no result
// for a request it refused.
func TestRefusedRefundSavesNoKey(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	pi := charged(t, f, "pur_1")
	req := refundRequest("ref_1", "pur_1", pi, 2000)
	if _, err := f.CreateRefund(t.Context(), req); !errors.Is(err, fakeprovider.ErrRefundTooLarge) {
		t.Fatalf("refund of 2000: %v, want ErrRefundTooLarge", err)
	}
	req.Amount = 1250
	wantRefundOutcome(t, "refund of 1250 under the same key", mustRefund(t, f, req), provider.Succeeded, "succeeded")
	wantRefunds(t, f, pi, 1, 1250)
}

// TestFailedRefundFreesItsAmount: a failed refund returned nothing, so its
// amount may be refunded again.
func TestFailedRefundFreesItsAmount(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	pi := charged(t, f, "pur_1")
	f.ScriptRefund("ref_1", fakeprovider.Decline)
	wantRefundOutcome(t, "declined refund", mustRefund(t, f, refundRequest("ref_1", "pur_1", pi, 1250)), provider.Failed, "failed")
	wantRefundOutcome(t, "second refund", mustRefund(t, f, refundRequest("ref_2", "pur_1", pi, 1250)), provider.Succeeded, "succeeded")
	wantRefunds(t, f, pi, 2, 1250)
	if got := f.NetAmount(pi); got != 0 {
		t.Errorf("NetAmount = %d, want 0", got)
	}
}

// TestRefundFaults acts out each fault on a refund create, as a test
// injects it: Fake.ScriptRefund with the refund's id.
func TestRefundFaults(t *testing.T) {
	const settle = time.Minute
	tests := []struct {
		fault fakeprovider.Fault
		// wantErr: the error must wrap it; nil for an answer.
		wantErr error
		outcome provider.Outcome // RefundOutcomeOf of the create
		status  string           // of the answer, when there is one
		// refunds is how many refunds the ledger holds after the create;
		// later the statuses GetRefund answers now, then after settle.
		refunds     int
		now, later  string
		finalAmount int64 // Refunded once settled
		reason      string
	}{
		{fault: fakeprovider.FailBefore, wantErr: provider.ErrRetryLater, outcome: provider.RetryLater},
		{fault: fakeprovider.Timeout, wantErr: context.DeadlineExceeded, outcome: provider.Unknown},
		{fault: fakeprovider.Reject, wantErr: provider.ErrRejected, outcome: provider.Rejected},
		{fault: fakeprovider.LostReply, wantErr: io.ErrUnexpectedEOF, outcome: provider.Unknown,
			refunds: 1, now: "succeeded", later: "succeeded", finalAmount: 500},
		{fault: fakeprovider.Processing, outcome: provider.Pending, status: "pending",
			refunds: 1, now: "pending", later: "succeeded", finalAmount: 500},
		{fault: fakeprovider.ProcessingDecline, outcome: provider.Pending, status: "pending",
			refunds: 1, now: "pending", later: "failed", reason: fakeprovider.RefundFailureReason},
		{fault: fakeprovider.StaleProcessing, outcome: provider.Succeeded, status: "succeeded",
			refunds: 1, now: "pending" /* stale, once */, later: "succeeded", finalAmount: 500},
		{fault: fakeprovider.Decline, outcome: provider.Failed, status: "failed",
			refunds: 1, now: "failed", later: "failed", reason: fakeprovider.RefundFailureReason},
		{fault: fakeprovider.DeclineThenSucceed, outcome: provider.Failed, status: "failed",
			refunds: 1, now: "failed", later: "succeeded", finalAmount: 500},
	}
	for _, tc := range tests {
		t.Run(string(tc.fault), func(t *testing.T) {
			f, clk := newFake(t, fakeprovider.Config{SettleAfter: settle})
			pi := charged(t, f, "pur_1")
			req := refundRequest("ref_1", "pur_1", pi, 500)
			f.ScriptRefund(req.RefundID, tc.fault)
			res, err := f.CreateRefund(t.Context(), req)
			if got := provider.RefundOutcomeOf(res, err); got != tc.outcome {
				t.Fatalf("create with %s = (%+v, %v): outcome %q, want %q", tc.fault, res, err, got, tc.outcome)
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("error %v, want one wrapping %v", err, tc.wantErr)
				}
				var fe *fakeprovider.FaultError
				if tc.fault != fakeprovider.Reject && (!errors.As(err, &fe) || fe.Fault != tc.fault || fe.RefundID != req.RefundID) {
					t.Errorf("error %v, want a FaultError for %s of %s", err, tc.fault, req.RefundID)
				}
			} else if res.Status != tc.status {
				t.Errorf("create with %s: status %q, want %q", tc.fault, res.Status, tc.status)
			}
			refunds := f.RefundsFor(req.RefundID)
			if len(refunds) != tc.refunds {
				t.Fatalf("%d refunds in the ledger, want %d", len(refunds), tc.refunds)
			}
			if tc.refunds == 0 {
				// Nothing saved under the key: the retry refunds, once.
				wantRefundOutcome(t, "retry", mustRefund(t, f, req), provider.Succeeded, "succeeded")
				wantRefunds(t, f, pi, 1, 500)
				return
			}
			id := refunds[0].ID
			if refunds[0].Fault != tc.fault {
				t.Errorf("refund's Fault %q, want %q", refunds[0].Fault, tc.fault)
			}
			if got := mustGetRefund(t, f, id); got.Status != tc.now || got.Outcome != refundOutcome(tc.now) {
				t.Errorf("GetRefund now = %+v, want status %q", got, tc.now)
			}
			clk.Advance(settle)
			got := mustGetRefund(t, f, id)
			if got.Status != tc.later || got.Outcome != refundOutcome(tc.later) || got.Reason != tc.reason {
				t.Errorf("GetRefund after %v = %+v, want status %q reason %q", settle, got, tc.later, tc.reason)
			}
			// A replay answers the saved response, and refunds nothing more.
			replay, err := f.CreateRefund(t.Context(), req)
			if err != nil || replay.ID != id {
				t.Errorf("replay = (%+v, %v), want the saved answer about %s", replay, err, id)
			}
			wantRefunds(t, f, pi, 1, tc.finalAmount)
		})
	}
}

// refundOutcome is the outcome of a refund in status.
func refundOutcome(status string) provider.Outcome {
	switch status {
	case "succeeded":
		return provider.Succeeded
	case "pending", "requires_action":
		return provider.Pending
	case "failed", "canceled":
		return provider.Failed
	}
	return provider.Unknown
}

// TestRefundFaultDrawsAreDeterministic: with RefundFaults, the n-th
// refund create of a refund gets the same fault for a seed whatever the
// order of the refunds, and the purchases' create draws are not moved by
// refunds.
func TestRefundFaultDrawsAreDeterministic(t *testing.T) {
	cfg := fakeprovider.Config{
		Seed:         7,
		Faults:       fakeprovider.Faults{Timeout: 0.3, FailBefore: 0.3},
		RefundFaults: fakeprovider.Faults{FailBefore: 0.25, Timeout: 0.25, LostReply: 0.25},
	}
	refundIDs := []string{"ref_a", "ref_b", "ref_c", "ref_d", "ref_e"}
	// run refunds each refund calls times, in order, and returns each
	// refund's faults and the faults of the creates of pur_probe made
	// between the refunds.
	run := func(order []string, withProbe bool) (map[string][]fakeprovider.Fault, []fakeprovider.Fault) {
		f, _ := newFake(t, fakeprovider.Config{Seed: cfg.Seed, RefundFaults: cfg.RefundFaults, Faults: cfg.Faults})
		f.Script("pur_1", fakeprovider.NoFault)
		pi := charged(t, f, "pur_1")
		faults := make(map[string][]fakeprovider.Fault)
		var probe []fakeprovider.Fault
		for range 4 {
			for _, id := range order {
				_, err := f.CreateRefund(t.Context(), refundRequest(id, "pur_1", pi, 1))
				var fe *fakeprovider.FaultError
				switch {
				case errors.As(err, &fe):
					faults[id] = append(faults[id], fe.Fault)
				case err != nil:
					t.Fatalf("refund %s: %v", id, err)
				default:
					faults[id] = append(faults[id], fakeprovider.NoFault)
				}
				if withProbe {
					_, err := f.Create(t.Context(), request("pur_probe"))
					var pe *fakeprovider.FaultError
					if errors.As(err, &pe) {
						probe = append(probe, pe.Fault)
					} else {
						probe = append(probe, fakeprovider.NoFault)
					}
				}
			}
		}
		return faults, probe
	}
	a, probeA := run(refundIDs, true)
	reversed := slices.Clone(refundIDs)
	slices.Reverse(reversed)
	b, _ := run(reversed, false)
	drawn := 0
	for _, id := range refundIDs {
		if !slices.Equal(a[id], b[id]) {
			t.Errorf("%s: faults %v in one order, %v in the other", id, a[id], b[id])
		}
		for _, fault := range a[id] {
			if fault != fakeprovider.NoFault {
				drawn++
			}
		}
	}
	if drawn == 0 {
		t.Errorf("no refund fault drawn in %d calls: the probabilities are not applied", 4*len(refundIDs))
	}
	// The probe's creates draw as they would with no refund at all.
	f, _ := newFake(t, cfg)
	var alone []fakeprovider.Fault
	for range len(probeA) {
		_, err := f.Create(t.Context(), request("pur_probe"))
		var pe *fakeprovider.FaultError
		if errors.As(err, &pe) {
			alone = append(alone, pe.Fault)
		} else {
			alone = append(alone, fakeprovider.NoFault)
		}
	}
	if !slices.Equal(probeA, alone) {
		t.Errorf("creates of pur_probe between refunds drew %v, alone %v: refunds moved the purchase's draws", probeA, alone)
	}
}

// TestRefundKeyInUse: a refund create arriving while another with its key
// is in flight answers Pending, key in use, and refunds nothing.
func TestRefundKeyInUse(t *testing.T) {
	accepted := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	f, _ := newFake(t, fakeprovider.Config{OnAcceptRefund: func(provider.RefundRequest) {
		once.Do(func() {
			close(accepted)
			<-release
		})
	}})
	pi := charged(t, f, "pur_1")
	req := refundRequest("ref_1", "pur_1", pi, 500)
	done := make(chan provider.RefundResult, 1)
	go func() {
		res, err := f.CreateRefund(context.Background(), req)
		if err != nil {
			t.Errorf("first refund: %v", err)
		}
		done <- res
	}()
	<-accepted
	busy := mustRefund(t, f, req)
	if busy.Outcome != provider.Pending || busy.Reason != fakeprovider.ReasonKeyInUse || busy.ID != "" {
		t.Errorf("refund while in flight = %+v, want Pending %s", busy, fakeprovider.ReasonKeyInUse)
	}
	close(release)
	first := <-done
	wantRefundOutcome(t, "first refund", first, provider.Succeeded, "succeeded")
	if again := mustRefund(t, f, req); again != first {
		t.Errorf("replay = %+v, want %+v", again, first)
	}
	wantRefunds(t, f, pi, 1, 500)
}

// TestConcurrentRefundsNeverExceedThePayment: refunds of one payment
// under many keys at once: those that fit succeed, the others are
// refused, and together they never exceed it.
func TestConcurrentRefundsNeverExceedThePayment(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	pi := charged(t, f, "pur_1")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok, refused int
	for i := range 20 {
		wg.Go(func() {
			_, err := f.CreateRefund(context.Background(), refundRequest(fmt.Sprintf("ref_%02d", i), "pur_1", pi, 300))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, fakeprovider.ErrRefundTooLarge):
				refused++
			default:
				t.Errorf("refund %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if ok != 4 || refused != 16 {
		t.Errorf("%d refunds succeeded and %d were refused, want 4 (1200 of 1250) and 16", ok, refused)
	}
	wantRefunds(t, f, pi, 4, 1200)
}

// TestRefundKeyRetention: once a refund's key is forgotten, its replay is
// a new refund, if the payment has room for it, as in Stripe.
func TestRefundKeyRetention(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{KeyRetention: time.Hour})
	pi := charged(t, f, "pur_1")
	req := refundRequest("ref_1", "pur_1", pi, 500)
	first := mustRefund(t, f, req)
	clk.Advance(time.Hour + time.Second)
	second := mustRefund(t, f, req)
	if second.ID == first.ID {
		t.Errorf("replay after retention = %+v, want a second refund", second)
	}
	wantRefunds(t, f, pi, 2, 1000)
	if got := len(f.RefundsFor("ref_1")); got != 2 {
		t.Errorf("RefundsFor(ref_1) = %d refunds, want 2: the refund made twice", got)
	}
	clk.Advance(time.Hour + time.Second)
	if _, err := f.CreateRefund(t.Context(), req); !errors.Is(err, fakeprovider.ErrRefundTooLarge) {
		t.Errorf("third replay, 250 left: %v, want ErrRefundTooLarge", err)
	}
	wantRefunds(t, f, pi, 2, 1000)
}

func TestGetRefundOfUnknownIDIsNotFound(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	res := mustGetRefund(t, f, "re_nope")
	if res != (provider.RefundResult{Outcome: provider.NotFound, Reason: fakeprovider.ReasonNotFound}) {
		t.Errorf("GetRefund(unknown) = %+v, want NotFound", res)
	}
}

func TestListRefunds(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{ListLag: 2 * time.Second})
	start := clk.Now()
	pi1, pi2 := charged(t, f, "pur_1"), charged(t, f, "pur_2")
	var ids []string
	for i, pi := range []string{pi1, pi2, pi1, pi1} {
		clk.Advance(time.Second)
		ids = append(ids, mustRefund(t, f, refundRequest(fmt.Sprintf("ref_%d", i), "pur", pi, 100)).ID)
	}
	idsOf := func(rs []provider.RefundResult) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	list := func(pi string) []string {
		t.Helper()
		rs, err := f.ListRefunds(t.Context(), pi, nil)
		if err != nil {
			t.Fatalf("ListRefunds(%s): %v", pi, err)
		}
		return idsOf(rs)
	}
	// The refunds of the last two seconds are within the list lag.
	if got, want := list(pi1), []string{ids[0]}; !slices.Equal(got, want) {
		t.Errorf("ListRefunds(pi1) = %v, want %v (the newest lagging)", got, want)
	}
	clk.Advance(2 * time.Second)
	if got, want := list(pi1), []string{ids[0], ids[2], ids[3]}; !slices.Equal(got, want) {
		t.Errorf("ListRefunds(pi1) = %v, want %v", got, want)
	}
	if got := list(charged(t, f, "pur_3")); len(got) != 0 {
		t.Errorf("ListRefunds of a payment without refunds = %v, want none", got)
	}
	if _, err := f.ListRefunds(t.Context(), "pi_nope", nil); !errors.Is(err, fakeprovider.ErrNoSuchPayment) || !errors.Is(err, provider.ErrRejected) {
		t.Errorf("ListRefunds(unknown) error %v, want ErrNoSuchPayment and provider.ErrRejected", err)
	}
	w := provider.Window{From: start.Add(2 * time.Second), Until: start.Add(4 * time.Second)}
	rs, err := f.ListRefundsCreated(t.Context(), w, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := idsOf(rs), []string{ids[1], ids[2]}; !slices.Equal(got, want) {
		t.Errorf("ListRefundsCreated([+2s, +4s)) = %v, want %v", got, want)
	}
	if got := f.Calls(provider.OpRefundList); got != 5 {
		t.Errorf("Calls(refund_list) = %d, want 5", got)
	}
}

func TestRefundOutsideAndSetRefundStatus(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{})
	pi := charged(t, f, "pur_1")
	out, err := f.RefundOutside(fakeprovider.OutsideRefund{PaymentID: pi, Amount: 250})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Outside || out.IdempotencyKey != "" || out.RefundID != "" || out.Status != "succeeded" || out.Currency != "eur" {
		t.Errorf("outside refund = %+v", out)
	}
	// The rest of the payment, by an amount of 0.
	rest, err := f.RefundOutside(fakeprovider.OutsideRefund{PaymentID: pi, PurchaseID: "pur_1", Status: fakeprovider.RefundStatusPending})
	if err != nil {
		t.Fatal(err)
	}
	if rest.Amount != 1000 || rest.Status != "pending" {
		t.Errorf("outside refund of the rest = %+v, want 1000 pending", rest)
	}
	if _, err := f.RefundOutside(fakeprovider.OutsideRefund{PaymentID: pi, Amount: 1}); !errors.Is(err, fakeprovider.ErrAlreadyRefunded) {
		t.Errorf("outside refund of a refunded payment: %v, want ErrAlreadyRefunded", err)
	}
	for _, bad := range []fakeprovider.OutsideRefund{{PaymentID: "pi_nope"}, {PaymentID: pi, Status: "lost"}, {PaymentID: pi, Amount: -1}} {
		if _, err := f.RefundOutside(bad); err == nil {
			t.Errorf("RefundOutside(%+v) succeeded", bad)
		}
	}
	wantRefunds(t, f, pi, 2, 250) // the pending one returns nothing (its final status is pending)
	if got := f.Calls(provider.OpRefundCreate); got != 0 {
		t.Errorf("Calls(refund_create) = %d, want 0: outside refunds are not calls", got)
	}

	clk.Advance(time.Second)
	moved, err := f.SetRefundStatus(rest.ID, fakeprovider.RefundStatusFailed)
	if err != nil {
		t.Fatal(err)
	}
	if moved.Status != "failed" || moved.FinalStatus != "failed" || moved.FailureReason != fakeprovider.RefundFailureReason || !moved.MovedAt.Equal(clk.Now()) {
		t.Errorf("moved refund = %+v", moved)
	}
	if got := mustGetRefund(t, f, rest.ID); got.Outcome != provider.Failed || got.Reason != fakeprovider.RefundFailureReason {
		t.Errorf("GetRefund of the failed = %+v", got)
	}
	if _, err := f.SetRefundStatus(out.ID, fakeprovider.RefundStatusCanceled); err != nil {
		t.Fatal(err)
	}
	wantRefunds(t, f, pi, 2, 0)
	if got := f.NetAmount(pi); got != 1250 {
		t.Errorf("NetAmount = %d, want 1250: both refunds came to nothing", got)
	}
	if _, err := f.SetRefundStatus("re_nope", "failed"); !errors.Is(err, fakeprovider.ErrNoSuchRefund) {
		t.Errorf("SetRefundStatus(unknown): %v, want ErrNoSuchRefund", err)
	}
	if _, err := f.SetRefundStatus(out.ID, "lost"); !errors.Is(err, fakeprovider.ErrUnknownStatus) {
		t.Errorf("SetRefundStatus(lost): %v, want ErrUnknownStatus", err)
	}
}

// TestNetCharges: a purchase charged twice, one charge refunded in full,
// holds one net charge.
func TestNetCharges(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	pi := charged(t, f, "pur_1")
	dup := f.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: "pur_1", Amount: 1250, Currency: "eur"})
	if got := f.NetCharges("pur_1"); got != 2 {
		t.Fatalf("NetCharges = %d, want 2 before the refund", got)
	}
	mustRefund(t, f, refundRequest("ref_dup", "pur_1", dup.ID, 1000))
	if got := f.NetCharges("pur_1"); got != 2 {
		t.Errorf("NetCharges = %d, want 2 after a partial refund", got)
	}
	mustRefund(t, f, refundRequest("ref_dup2", "pur_1", dup.ID, 250))
	if got := f.NetCharges("pur_1"); got != 1 {
		t.Errorf("NetCharges = %d, want 1 once the duplicate is refunded in full", got)
	}
	if got := f.NetAmount(pi); got != 1250 {
		t.Errorf("NetAmount of the kept charge = %d, want 1250", got)
	}
	if got := f.NetAmount("pi_nope"); got != 0 {
		t.Errorf("NetAmount(unknown) = %d, want 0", got)
	}
}

func TestRefundCallsWithCanceledContext(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	pi := charged(t, f, "pur_1")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req := refundRequest("ref_1", "pur_1", pi, 500)
	if res, err := f.CreateRefund(ctx, req); !errors.Is(err, context.Canceled) || provider.RefundOutcomeOf(res, err) != provider.Unknown {
		t.Errorf("CreateRefund = (%+v, %v), want context.Canceled", res, err)
	}
	if _, err := f.GetRefund(ctx, "re_1"); !errors.Is(err, context.Canceled) {
		t.Errorf("GetRefund: %v, want context.Canceled", err)
	}
	if _, err := f.ListRefunds(ctx, pi, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("ListRefunds: %v, want context.Canceled", err)
	}
	if _, err := f.ListRefundsCreated(ctx, provider.Window{}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("ListRefundsCreated: %v, want context.Canceled", err)
	}
	wantRefunds(t, f, pi, 0, 0)
	if got := f.RefundCreateCalls(req.IdempotencyKey); got != 1 {
		t.Errorf("RefundCreateCalls = %d, want 1: counted, not sent", got)
	}
}

func TestLedgerShowsRefunds(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{})
	pi := charged(t, f, "pur_1")
	f.ScriptRefund("ref_1", fakeprovider.ProcessingDecline)
	r1 := mustRefund(t, f, refundRequest("ref_1", "pur_1", pi, 500))
	mustRefund(t, f, refundRequest("ref_1", "pur_1", pi, 500)) // a replay
	out, err := f.RefundOutside(fakeprovider.OutsideRefund{PaymentID: pi, Amount: 100, Reason: "duplicate"})
	if err != nil {
		t.Fatal(err)
	}
	mustGetRefund(t, f, r1.ID)
	l := f.Ledger()
	want := []fakeprovider.LedgerRefund{
		{ID: r1.ID, PaymentID: pi, RefundID: "ref_1", PurchaseID: "pur_1", Amount: 500, Currency: "eur", Status: "pending", FinalStatus: "failed",
			Reason: "requested_by_customer", FailureReason: fakeprovider.RefundFailureReason, Created: clk.Now(), IdempotencyKey: "payrecon-ref_1"},
		{ID: out.ID, PaymentID: pi, Amount: 100, Currency: "eur", Status: "succeeded", FinalStatus: "succeeded", Reason: "duplicate",
			Created: clk.Now(), Outside: true},
	}
	if !slices.Equal(l.Refunds, want) {
		t.Errorf("Ledger().Refunds =\n%+v\nwant\n%+v", l.Refunds, want)
	}
	if !l.Refunds[1].MoneyReturned() || l.Refunds[0].MoneyReturned() {
		t.Errorf("MoneyReturned: %v %v, want false true", l.Refunds[0].MoneyReturned(), l.Refunds[1].MoneyReturned())
	}
	if l.RefundCreateCalls["payrecon-ref_1"] != 2 || l.Calls.RefundCreate != 2 || l.Calls.RefundGet != 1 || l.Calls.RefundList != 0 {
		t.Errorf("ledger calls %+v, refund create calls %v", l.Calls, l.RefundCreateCalls)
	}
}
