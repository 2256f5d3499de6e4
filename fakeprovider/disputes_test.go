package fakeprovider_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
)

// mustOpenDispute opens a dispute of paymentID on o's terms.
func mustOpenDispute(t *testing.T, f *fakeprovider.Fake, paymentID string, o fakeprovider.DisputeOptions) provider.Dispute {
	t.Helper()
	d, err := f.OpenDispute(paymentID, o)
	if err != nil {
		t.Fatalf("open dispute of %s (%+v): %v", paymentID, o, err)
	}
	return d
}

// mustMoveDispute moves the dispute id to each status in turn and
// returns it as the last move left it.
func mustMoveDispute(t *testing.T, f *fakeprovider.Fake, id string, statuses ...string) provider.Dispute {
	t.Helper()
	var d provider.Dispute
	for _, status := range statuses {
		var err error
		if d, err = f.MoveDispute(id, status); err != nil {
			t.Fatalf("move dispute %s to %s: %v", id, status, err)
		}
	}
	return d
}

// TestOpenDispute: a dispute of a succeeded payment holds its terms and
// the payment's; one Stripe would not open is refused and opens nothing.
func TestOpenDispute(t *testing.T) {
	tests := []struct {
		name     string
		refunded int64 // refunded before the dispute
		o        fakeprovider.DisputeOptions
		want     provider.Dispute // ID, PaymentID, ChargeID, PurchaseID, Currency, times filled by the test
	}{
		{"chargeback of all", 0, fakeprovider.DisputeOptions{},
			provider.Dispute{Amount: 1250, Reason: "fraudulent", Status: provider.DisputeNeedsResponse, Withdrawn: 1250}},
		{"chargeback of part, a reason", 0, fakeprovider.DisputeOptions{Amount: 400, Reason: "product_not_received"},
			provider.Dispute{Amount: 400, Reason: "product_not_received", Status: provider.DisputeNeedsResponse, Withdrawn: 400}},
		{"chargeback of what the refunds left", 250, fakeprovider.DisputeOptions{},
			provider.Dispute{Amount: 1000, Reason: "fraudulent", Status: provider.DisputeNeedsResponse, Withdrawn: 1000}},
		{"inquiry", 0, fakeprovider.DisputeOptions{Inquiry: true, Reason: "duplicate"},
			provider.Dispute{Amount: 1250, Reason: "duplicate", Status: provider.DisputeWarningNeedsResponse, ChargeRefundable: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, clk := newFake(t, fakeprovider.Config{Instance: "D1"})
			pi := charged(t, f, "pur_1")
			if tc.refunded > 0 {
				mustRefund(t, f, refundRequest("ref_1", "pur_1", pi, tc.refunded))
			}
			clk.Advance(1500 * time.Millisecond)
			got := mustOpenDispute(t, f, pi, tc.o)
			want := tc.want
			want.ID, want.PaymentID, want.ChargeID, want.PurchaseID, want.Currency = got.ID, pi, "ch_"+strings.TrimPrefix(pi, "pi_"), "pur_1", "eur"
			want.Created, want.EvidenceDueBy = clk.Now(), clk.Now().Add(fakeprovider.DisputeEvidenceWindow)
			if got != want || got.ID != "du_fakeD1_00000000000000000001" {
				t.Errorf("dispute = %+v, want %+v", got, want)
			}
			if all, of := f.Disputes(), f.DisputesOf(pi); len(all) != 1 || len(of) != 1 || of[0] != got {
				t.Errorf("Disputes = %+v, DisputesOf = %+v, want the one dispute", all, of)
			}
			if n := len(f.DisputesOf("pi_other")); n != 0 {
				t.Errorf("DisputesOf(another payment) = %d disputes", n)
			}
		})
	}
}

func TestOpenDisputeRefused(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{SettleAfter: time.Minute})
	pi := charged(t, f, "pur_1")
	declinedReq := request("pur_declined")
	declinedReq.PaymentMethod = fakeprovider.PaymentMethodDeclined
	declined := mustCreate(t, f, declinedReq).PaymentID
	f.Script("pur_slow", fakeprovider.Processing)
	slow := charged(t, f, "pur_slow")
	refunded := charged(t, f, "pur_refunded")
	mustRefund(t, f, refundRequest("ref_all", "pur_refunded", refunded, 1250))
	tests := []struct {
		name      string
		paymentID string
		o         fakeprovider.DisputeOptions
		want      error
	}{
		{"unknown payment", "pi_nope", fakeprovider.DisputeOptions{}, fakeprovider.ErrNoSuchPayment},
		{"declined payment", declined, fakeprovider.DisputeOptions{}, fakeprovider.ErrNotDisputable},
		{"processing payment", slow, fakeprovider.DisputeOptions{}, fakeprovider.ErrNotDisputable},
		{"refunded in full", refunded, fakeprovider.DisputeOptions{}, fakeprovider.ErrNotDisputable},
		{"amount over the payment", pi, fakeprovider.DisputeOptions{Amount: 1251}, fakeprovider.ErrInvalidRequest},
		{"negative amount", pi, fakeprovider.DisputeOptions{Amount: -1}, fakeprovider.ErrInvalidRequest},
		{"unknown reason", pi, fakeprovider.DisputeOptions{Reason: "because"}, fakeprovider.ErrInvalidRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := f.OpenDispute(tc.paymentID, tc.o)
			if !errors.Is(err, tc.want) {
				t.Errorf("OpenDispute = (%+v, %v), want an error wrapping %v", d, err, tc.want)
			}
		})
	}
	if n := len(f.Disputes()); n != 0 {
		t.Errorf("%d disputes opened by refused calls", n)
	}
	for _, ev := range f.EventLog() {
		if ev.DisputeID != "" || slices.Contains(provider.DisputeEventTypes, ev.Type) {
			t.Errorf("event %s (%s) logged by a refused call", ev.ID, ev.Type)
		}
	}
}

// TestMoveDisputeForwardOnly: a dispute moves only as Stripe's do, and
// every move refused leaves it as it was.
func TestMoveDisputeForwardOnly(t *testing.T) {
	const (
		wnr = provider.DisputeWarningNeedsResponse
		wur = provider.DisputeWarningUnderReview
		wcl = provider.DisputeWarningClosed
		nr  = provider.DisputeNeedsResponse
		ur  = provider.DisputeUnderReview
		won = provider.DisputeWon
		los = provider.DisputeLost
		pre = provider.DisputePrevented
	)
	allowed := map[[2]string]bool{
		{wnr, wur}: true, {wnr, wcl}: true, {wnr, nr}: true, {wnr, pre}: true,
		{wur, wcl}: true, {wur, nr}: true, {wur, pre}: true,
		{nr, ur}: true, {nr, won}: true, {nr, los}: true, {nr, pre}: true,
		{ur, won}: true, {ur, los}: true, {ur, pre}: true,
	}
	// paths reach each status from an opening.
	paths := map[string]struct {
		inquiry bool
		moves   []string
	}{
		wnr: {true, nil}, wur: {true, []string{wur}}, wcl: {true, []string{wcl}},
		nr: {false, nil}, ur: {false, []string{ur}}, won: {false, []string{won}}, los: {false, []string{los}}, pre: {false, []string{pre}},
	}
	f, _ := newFake(t, fakeprovider.Config{})
	n := 0
	for _, from := range provider.DisputeStatuses {
		for _, to := range provider.DisputeStatuses {
			n++
			pi := charged(t, f, fmt.Sprintf("pur_%d", n))
			p := paths[from]
			d := mustOpenDispute(t, f, pi, fakeprovider.DisputeOptions{Inquiry: p.inquiry})
			if len(p.moves) > 0 {
				d = mustMoveDispute(t, f, d.ID, p.moves...)
			}
			got, err := f.MoveDispute(d.ID, to)
			switch {
			case allowed[[2]string{from, to}] && (err != nil || got.Status != to):
				t.Errorf("%s → %s: (%+v, %v), want the move", from, to, got, err)
			case !allowed[[2]string{from, to}] && !errors.Is(err, fakeprovider.ErrDisputeMove):
				t.Errorf("%s → %s: (%+v, %v), want an error wrapping ErrDisputeMove", from, to, got, err)
			case !allowed[[2]string{from, to}]:
				if now := f.DisputesOf(pi)[0]; now != d {
					t.Errorf("%s → %s refused, yet the dispute is %+v, was %+v", from, to, now, d)
				}
			}
		}
	}
	pi := charged(t, f, "pur_errors")
	d := mustOpenDispute(t, f, pi, fakeprovider.DisputeOptions{})
	if _, err := f.MoveDispute(d.ID, "charge_refunded"); !errors.Is(err, fakeprovider.ErrUnknownStatus) {
		t.Errorf("move to an unknown status: %v, want ErrUnknownStatus", err)
	}
	if _, err := f.MoveDispute("du_nope", provider.DisputeWon); !errors.Is(err, fakeprovider.ErrNoSuchDispute) {
		t.Errorf("move of an unknown dispute: %v, want ErrNoSuchDispute", err)
	}
}

// TestMoveDisputeMovesMoney: an escalation withdraws the amount and sets
// the evidence's due date anew, a win reinstates it, a loss keeps it.
func TestMoveDisputeMovesMoney(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{})
	pi := charged(t, f, "pur_1")
	inq := mustOpenDispute(t, f, pi, fakeprovider.DisputeOptions{Inquiry: true, Amount: 600})
	clk.Advance(time.Hour)
	esc := mustMoveDispute(t, f, inq.ID, provider.DisputeWarningUnderReview, provider.DisputeNeedsResponse)
	if esc.Withdrawn != 600 || esc.ChargeRefundable || !esc.EvidenceDueBy.Equal(clk.Now().Add(fakeprovider.DisputeEvidenceWindow)) || !esc.Created.Equal(inq.Created) {
		t.Errorf("escalated inquiry %+v, want 600 withdrawn, not refundable, due a window from now", esc)
	}
	if won := mustMoveDispute(t, f, inq.ID, provider.DisputeUnderReview, provider.DisputeWon); won.Withdrawn != 600 || won.Reinstated != 600 {
		t.Errorf("won dispute %+v, want 600 withdrawn and reinstated", won)
	}
	other := charged(t, f, "pur_2")
	lost := mustMoveDispute(t, f, mustOpenDispute(t, f, other, fakeprovider.DisputeOptions{Amount: 500}).ID, provider.DisputeLost)
	if lost.Withdrawn != 500 || lost.Reinstated != 0 {
		t.Errorf("lost dispute %+v, want 500 withdrawn, nothing reinstated", lost)
	}
	// A lost dispute's amount is gone from the payment: a second dispute
	// takes at most what remains.
	if second := mustOpenDispute(t, f, other, fakeprovider.DisputeOptions{}); second.Amount != 750 {
		t.Errorf("second dispute of a payment with one lost of 500: amount %d, want 750", second.Amount)
	}
}

// disputeEvents returns the events of the log about disputes, oldest
// first, as ListEvents translates them.
func disputeEvents(t *testing.T, f *fakeprovider.Fake) []provider.Event {
	t.Helper()
	evs, _ := listAll(t, f, provider.EventQuery{Since: time.Unix(1, 0), Types: provider.DisputeEventTypes})
	slices.Reverse(evs)
	return evs
}

// TestDisputeEventsListed: every change of a dispute logs Stripe's
// events, each carrying the dispute as the change left it, created in
// strictly increasing seconds.
func TestDisputeEventsListed(t *testing.T) {
	type step struct {
		move  string // "" opens
		types []string
	}
	tests := []struct {
		name    string
		inquiry bool
		steps   []step
	}{
		{"chargeback won", false, []step{
			{"", []string{provider.EventDisputeCreated, provider.EventDisputeFundsWithdrawn}},
			{provider.DisputeUnderReview, []string{provider.EventDisputeUpdated}},
			{provider.DisputeWon, []string{provider.EventDisputeClosed, provider.EventDisputeFundsReinstated}},
		}},
		{"chargeback lost", false, []step{
			{"", []string{provider.EventDisputeCreated, provider.EventDisputeFundsWithdrawn}},
			{provider.DisputeLost, []string{provider.EventDisputeClosed}},
		}},
		{"inquiry escalates", true, []step{
			{"", []string{provider.EventDisputeCreated}},
			{provider.DisputeWarningUnderReview, []string{provider.EventDisputeUpdated}},
			{provider.DisputeNeedsResponse, []string{provider.EventDisputeUpdated, provider.EventDisputeFundsWithdrawn}},
			{provider.DisputePrevented, []string{provider.EventDisputeClosed}},
		}},
		{"inquiry closed", true, []step{
			{"", []string{provider.EventDisputeCreated}},
			{provider.DisputeWarningClosed, []string{provider.EventDisputeClosed}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := newFake(t, fakeprovider.Config{})
			pi := charged(t, f, "pur_1")
			var id string
			var wantTypes []string
			var after []provider.Dispute // the dispute after each event's change
			for _, s := range tc.steps {
				var d provider.Dispute
				if s.move == "" {
					d = mustOpenDispute(t, f, pi, fakeprovider.DisputeOptions{Inquiry: tc.inquiry})
					id = d.ID
				} else {
					d = mustMoveDispute(t, f, id, s.move)
				}
				for _, typ := range s.types {
					wantTypes = append(wantTypes, typ)
					after = append(after, d)
				}
			}
			evs := disputeEvents(t, f)
			var types []string
			for _, ev := range evs {
				types = append(types, ev.Type)
			}
			if !slices.Equal(types, wantTypes) {
				t.Fatalf("events %q, want %q", types, wantTypes)
			}
			for i, ev := range evs {
				d := after[i]
				// As the adapter translates it: times in UTC seconds, no
				// purchase id (the event's PaymentIntent is an id).
				d.PurchaseID, d.Created, d.EvidenceDueBy = "", d.Created.UTC().Truncate(time.Second), d.EvidenceDueBy.UTC().Truncate(time.Second)
				if ev.Dispute == nil || *ev.Dispute != d {
					t.Errorf("event %d (%s) carries %+v, want %+v", i, ev.Type, ev.Dispute, d)
				}
				if ev.Outcome != provider.Pending || ev.PaymentID != pi || ev.PurchaseID != "" || ev.Amount != d.Amount ||
					ev.Currency != "eur" || ev.Refund != nil || len(ev.Digest) != 64 || ev.Payload == "" {
					t.Errorf("event %d = %+v, want a pending event about %s's dispute", i, ev, pi)
				}
				if i > 0 && !ev.Created.After(evs[i-1].Created) {
					t.Errorf("event %d (%s) created %v, not after event %d (%v)", i, ev.Type, ev.Created, i-1, evs[i-1].Created)
				}
			}
		})
	}
}

// TestRefundOfDisputedPayment: a dispute that charged the payment back
// (open and not refundable, or lost) refuses its refunds, made or outside,
// and saves no key; an inquiry, a win or a closed inquiry does not.
func TestRefundOfDisputedPayment(t *testing.T) {
	tests := []struct {
		name    string
		inquiry bool
		moves   []string
		refused bool
	}{
		{"chargeback open", false, nil, true},
		{"chargeback under review", false, []string{provider.DisputeUnderReview}, true},
		{"chargeback lost", false, []string{provider.DisputeLost}, true},
		{"chargeback won", false, []string{provider.DisputeWon}, false},
		{"chargeback prevented", false, []string{provider.DisputePrevented}, false},
		{"inquiry open", true, nil, false},
		{"inquiry under review", true, []string{provider.DisputeWarningUnderReview}, false},
		{"inquiry escalated", true, []string{provider.DisputeNeedsResponse}, true},
		{"inquiry closed", true, []string{provider.DisputeWarningClosed}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := newFake(t, fakeprovider.Config{})
			pi := charged(t, f, "pur_1")
			d := mustOpenDispute(t, f, pi, fakeprovider.DisputeOptions{Inquiry: tc.inquiry, Amount: 1000})
			mustMoveDispute(t, f, d.ID, tc.moves...)
			req := refundRequest("ref_1", "pur_1", pi, 100)
			res, err := f.CreateRefund(t.Context(), req)
			_, outsideErr := f.RefundOutside(fakeprovider.OutsideRefund{PaymentID: pi, Amount: 100})
			if !tc.refused {
				if err != nil || outsideErr != nil || res.Outcome != provider.Succeeded {
					t.Fatalf("refund = (%+v, %v), outside %v, want both made", res, err, outsideErr)
				}
				wantRefunds(t, f, pi, 2, 200)
				return
			}
			if !errors.Is(err, fakeprovider.ErrChargeDisputed) || !errors.Is(err, provider.ErrRefundRefused) ||
				provider.RefundOutcomeOf(res, err) != provider.Failed {
				t.Errorf("refund = (%+v, %v), want refused as ErrChargeDisputed (Failed)", res, err)
			}
			if !errors.Is(outsideErr, fakeprovider.ErrChargeDisputed) {
				t.Errorf("outside refund: %v, want ErrChargeDisputed", outsideErr)
			}
			wantRefunds(t, f, pi, 0, 0)
			// Refused, the key was not saved: once won, it refunds.
			if d := f.DisputesOf(pi)[0]; d.Status == provider.DisputeNeedsResponse || d.Status == provider.DisputeUnderReview {
				mustMoveDispute(t, f, d.ID, provider.DisputeWon)
				wantRefundOutcome(t, "refund after the win", mustRefund(t, f, req), provider.Succeeded, "succeeded")
				wantRefunds(t, f, pi, 1, 100)
			}
		})
	}
}

// TestDisputeTestCards: the dispute test cards' payments succeed, then
// are disputed at once (a chargeback, an inquiry), once: not by a
// replay, not before a processing payment settles, never if declined.
func TestDisputeTestCards(t *testing.T) {
	tests := []struct {
		name    string
		method  string
		fault   fakeprovider.Fault
		status  string // the dispute's; "" for none
		settled bool   // opened when the payment settles, not at once
	}{
		{"chargeback", fakeprovider.PaymentMethodDispute, fakeprovider.NoFault, provider.DisputeNeedsResponse, false},
		{"inquiry", fakeprovider.PaymentMethodDisputeInquiry, fakeprovider.NoFault, provider.DisputeWarningNeedsResponse, false},
		{"chargeback after processing", fakeprovider.PaymentMethodDispute, fakeprovider.Processing, provider.DisputeNeedsResponse, true},
		{"declined", fakeprovider.PaymentMethodDispute, fakeprovider.Decline, "", false},
		{"visa", fakeprovider.PaymentMethodVisa, fakeprovider.NoFault, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, clk := newFake(t, fakeprovider.Config{SettleAfter: time.Minute})
			req := request("pur_1")
			req.PaymentMethod = tc.method
			f.Script(req.PurchaseID, tc.fault)
			res := mustCreate(t, f, req)
			mustCreate(t, f, req) // a replay: no second dispute
			created := clk.Now()
			if tc.settled {
				if n := len(f.DisputesOf(res.PaymentID)); n != 0 {
					t.Fatalf("%d disputes of a processing payment", n)
				}
				clk.Advance(2 * time.Minute)
				created = created.Add(time.Minute) // when it settled
			}
			ds := f.DisputesOf(res.PaymentID)
			if tc.status == "" {
				if len(ds) != 0 {
					t.Errorf("disputes %+v, want none", ds)
				}
				return
			}
			if len(ds) != 1 {
				t.Fatalf("disputes %+v, want one", ds)
			}
			d := ds[0]
			inquiry := tc.status == provider.DisputeWarningNeedsResponse
			if d.Status != tc.status || d.Reason != "fraudulent" || d.Amount != 1250 || d.PurchaseID != "pur_1" ||
				d.ChargeRefundable != inquiry || (d.Withdrawn == 0) == !inquiry || !d.Created.Equal(created) {
				t.Errorf("dispute %+v, want %s of 1250 opened at %v", d, tc.status, created)
			}
		})
	}
}

// TestListDisputes: the disputes opened in a window, oldest first, as
// they are now, those opened less than ListLag ago apart, each page one
// call.
func TestListDisputes(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{ListLag: 10 * time.Second, ListPageSize: 2})
	start := clk.Now()
	var ids []string
	for i := range 5 {
		pi := charged(t, f, fmt.Sprintf("pur_%d", i))
		ids = append(ids, mustOpenDispute(t, f, pi, fakeprovider.DisputeOptions{}).ID)
		clk.Advance(time.Minute)
	}
	mustMoveDispute(t, f, ids[1], provider.DisputeWon)
	fresh := charged(t, f, "pur_fresh")
	mustOpenDispute(t, f, fresh, fakeprovider.DisputeOptions{}) // within ListLag
	list := func(w provider.Window) []string {
		t.Helper()
		ds, err := f.ListDisputes(t.Context(), w, nil)
		if err != nil {
			t.Fatalf("ListDisputes: %v", err)
		}
		var out []string
		for _, d := range ds {
			out = append(out, d.ID)
			if d.ID == ids[1] && (d.Status != provider.DisputeWon || d.PurchaseID != "pur_1") {
				t.Errorf("listed %+v, want it won, of pur_1", d)
			}
		}
		return out
	}
	calls := f.Calls(provider.OpDisputeList)
	if got := list(provider.Window{From: start, Until: clk.Now().Add(time.Hour)}); !slices.Equal(got, ids) {
		t.Errorf("disputes of all time = %q, want %q (not the one within ListLag)", got, ids)
	}
	if n := f.Calls(provider.OpDisputeList) - calls; n != 3 {
		t.Errorf("a listing of 5 disputes, 2 a page, made %d calls, want 3", n)
	}
	if got := list(provider.Window{From: start.Add(time.Minute), Until: start.Add(3 * time.Minute)}); !slices.Equal(got, ids[1:3]) {
		t.Errorf("disputes of minutes 1 and 2 = %q, want %q", got, ids[1:3])
	}
	if got := list(provider.Window{From: start, Until: start}); len(got) != 0 {
		t.Errorf("disputes of an empty window = %q", got)
	}
	clk.Advance(10 * time.Second)
	if got := list(provider.Window{From: start, Until: clk.Now().Add(time.Hour)}); len(got) != 6 {
		t.Errorf("disputes once ListLag passed = %q, want 6", got)
	}
}

// TestListDisputesRateLimited: a listing of disputes takes from the list
// rate limit, a call a page.
func TestListDisputesRateLimited(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{RateLimits: fakeprovider.RateLimits{List: 1}})
	w := provider.Window{From: time.Unix(1, 0), Until: time.Now().Add(100 * 365 * 24 * time.Hour)}
	if _, err := f.ListDisputes(t.Context(), w, nil); err != nil {
		t.Fatalf("first listing: %v", err)
	}
	if _, err := f.ListDisputes(t.Context(), w, nil); !errors.Is(err, provider.ErrRateLimited) {
		t.Errorf("second listing in the same second: %v, want provider.ErrRateLimited", err)
	}
	if got := f.ThrottledCalls("list"); got != 1 {
		t.Errorf("ThrottledCalls(list) = %d, want 1", got)
	}
}

func TestLedgerShowsDisputes(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{})
	pi := charged(t, f, "pur_1")
	d := mustOpenDispute(t, f, pi, fakeprovider.DisputeOptions{Amount: 700, Reason: "duplicate"})
	d = mustMoveDispute(t, f, d.ID, provider.DisputeWon)
	l := f.Ledger()
	want := fakeprovider.LedgerDispute{
		ID: d.ID, PaymentID: pi, ChargeID: d.ChargeID, PurchaseID: "pur_1", Amount: 700, Currency: "eur", Reason: "duplicate",
		Status: provider.DisputeWon, EvidenceDueBy: clk.Now().Add(fakeprovider.DisputeEvidenceWindow), Withdrawn: 700, Reinstated: 700,
		Created: clk.Now(),
	}
	if len(l.Disputes) != 1 || l.Disputes[0] != want {
		t.Errorf("ledger disputes %+v, want %+v", l.Disputes, want)
	}
}
