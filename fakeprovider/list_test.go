package fakeprovider_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
)

func mustList(t *testing.T, f *fakeprovider.Fake, w provider.Window) []provider.Payment {
	t.Helper()
	ps, err := f.List(t.Context(), w, nil)
	if err != nil {
		t.Fatalf("list %+v: %v", w, err)
	}
	return ps
}

func idsOf(ps []provider.Payment) []string {
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.ID)
	}
	return ids
}

func TestListWindowAndOrder(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{})
	t0 := clk.Now()
	a := mustCreate(t, f, request("pur_list_a")).PaymentID // t0
	clk.Advance(time.Second)
	b := mustCreate(t, f, request("pur_list_b")).PaymentID // t0+1s
	clk.Advance(500 * time.Millisecond)
	c := f.ChargeOutside(fakeprovider.OutsideCharge{Amount: 99, Currency: "usd"}).ID // t0+1.5s
	clk.Advance(500 * time.Millisecond)
	d := mustCreate(t, f, request("pur_list_d")).PaymentID // t0+2s
	e := mustCreate(t, f, request("pur_list_e")).PaymentID // t0+2s too: creation order decides

	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tests := []struct {
		name string
		w    provider.Window
		want []string
	}{
		{"everything, oldest first", provider.Window{From: at(-time.Hour), Until: at(time.Hour)}, []string{a, b, c, d, e}},
		{"From is inclusive", provider.Window{From: at(time.Second), Until: at(time.Hour)}, []string{b, c, d, e}},
		{"just after From", provider.Window{From: at(time.Nanosecond), Until: at(time.Hour)}, []string{b, c, d, e}},
		{"Until is exclusive", provider.Window{From: t0, Until: at(2 * time.Second)}, []string{a, b, c}},
		{"just after Until", provider.Window{From: t0, Until: at(2*time.Second + time.Nanosecond)}, []string{a, b, c, d, e}},
		{"within a second", provider.Window{From: at(1500 * time.Millisecond), Until: at(1500*time.Millisecond + 1)}, []string{c}},
		{"before everything", provider.Window{From: at(-time.Hour), Until: t0}, nil},
		{"empty", provider.Window{From: at(time.Second), Until: at(time.Second)}, nil},
		{"reversed", provider.Window{From: at(time.Hour), Until: t0}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := idsOf(mustList(t, f, tc.w)); !slices.Equal(got, tc.want) {
				t.Errorf("List(%v, %v) = %q, want %q", tc.w.From.Sub(t0), tc.w.Until.Sub(t0), got, tc.want)
			}
		})
	}
	if got := f.Calls(provider.OpList); got != len(tests) {
		t.Errorf("Calls(list) = %d, want %d", got, len(tests))
	}

	ps := mustList(t, f, provider.Window{From: t0, Until: at(time.Hour)})
	wantPayments := []provider.Payment{
		{ID: a, PurchaseID: "pur_list_a", Amount: 1250, Currency: "eur", Status: "succeeded", Outcome: provider.Succeeded, Created: t0},
		{ID: c, Amount: 99, Currency: "usd", Status: "succeeded", Outcome: provider.Succeeded, Created: at(1500 * time.Millisecond)},
	}
	for _, want := range wantPayments {
		i := slices.IndexFunc(ps, func(p provider.Payment) bool { return p.ID == want.ID })
		if i < 0 || ps[i] != want || !ps[i].MoneyTaken() {
			t.Errorf("listed %+v, want %+v among them, money taken", ps, want)
		}
	}
}

func TestListSettlesAndLags(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{ListLag: 5 * time.Second, SettleAfter: time.Minute})
	all := provider.Window{From: clk.Now().Add(-time.Hour), Until: clk.Now().Add(time.Hour)}
	slow := request("pur_list_slow")
	f.Script(slow.PurchaseID, fakeprovider.ProcessingDecline)
	id := mustCreate(t, f, slow).PaymentID
	outside := f.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: slow.PurchaseID, Amount: 5, Currency: "eur"}).ID

	if got := mustList(t, f, all); len(got) != 0 {
		t.Errorf("listed at once: %+v, want nothing within the lag", got)
	}
	clk.Advance(5*time.Second - time.Nanosecond)
	if got := mustList(t, f, all); len(got) != 0 {
		t.Errorf("listed just before the lag: %+v, want nothing", got)
	}
	// Status by id does not lag.
	wantOutcome(t, "status within the list lag", mustStatus(t, f, id), provider.Pending, fakeprovider.StatusProcessing)
	clk.Advance(time.Nanosecond)
	got := mustList(t, f, all)
	if !slices.Equal(idsOf(got), []string{id, outside}) || got[0].Outcome != provider.Pending || !got[0].MoneyTaken() {
		t.Fatalf("listed after the lag: %+v, want %s processing (pending), then %s", got, id, outside)
	}
	clk.Advance(time.Minute)
	got = mustList(t, f, all)
	if got[0].Status != fakeprovider.StatusRequiresPaymentMethod || got[0].Outcome != provider.Declined || got[0].MoneyTaken() {
		t.Errorf("listed after settling: %+v, want declined", got[0])
	}

	// A cancelled context: an error, no payments, a call counted.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	before := f.Calls(provider.OpList)
	if ps, err := f.List(ctx, all, nil); !errors.Is(err, context.Canceled) || ps != nil {
		t.Errorf("list with a cancelled context = (%+v, %v), want context.Canceled", ps, err)
	}
	if got := f.Calls(provider.OpList); got != before+1 {
		t.Errorf("Calls(list) = %d, want %d", got, before+1)
	}
}

// TestSearchCountsChargesTakingMoney: Charges counts the charges found
// for the purchase whose status now took or may take money.
func TestSearchCountsChargesTakingMoney(t *testing.T) {
	const p = "pur_counted"
	tests := []struct {
		name    string
		outside []string // statuses of outside charges for the purchase
		want    int
		double  bool // DoubleCharged names the purchase
	}{
		{name: "one charge", want: 1},
		{name: "a second success", outside: []string{fakeprovider.StatusSucceeded}, want: 2, double: true},
		{name: "default status is success", outside: []string{""}, want: 2, double: true},
		{name: "a decline", outside: []string{fakeprovider.StatusRequiresPaymentMethod}, want: 1},
		{name: "a cancellation", outside: []string{fakeprovider.StatusCanceled}, want: 1},
		{name: "processing", outside: []string{fakeprovider.StatusProcessing}, want: 2},
		{name: "requires action", outside: []string{fakeprovider.StatusRequiresAction}, want: 2},
		{name: "three", outside: []string{fakeprovider.StatusSucceeded, fakeprovider.StatusSucceeded, fakeprovider.StatusCanceled}, want: 3, double: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := newFake(t, fakeprovider.Config{})
			created := mustCreate(t, f, request(p))
			f.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: "pur_other", Amount: 1, Currency: "eur"})
			for _, st := range tc.outside {
				f.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: p, Amount: 1250, Currency: "eur", Status: st})
			}
			res := mustSearch(t, f, p)
			if res.Charges != tc.want || res.PurchaseID != p || res.PaymentID != created.PaymentID || res.Outcome != provider.Succeeded {
				t.Errorf("search = %+v, want the first success, purchase %s, %d charges taking money", res, p, tc.want)
			}
			if got := slices.Contains(f.DoubleCharged(), p); got != tc.double {
				t.Errorf("DoubleCharged() = %q, want %s in it: %v", f.DoubleCharged(), p, tc.double)
			}
		})
	}

	t.Run("processing that settles declined", func(t *testing.T) {
		f, clk := newFake(t, fakeprovider.Config{SettleAfter: time.Minute})
		f.Script(p, fakeprovider.ProcessingDecline)
		mustCreate(t, f, request(p))
		if res := mustSearch(t, f, p); res.Outcome != provider.Pending || res.Charges != 1 {
			t.Errorf("search while processing = %+v, want pending, 1 charge that may take money", res)
		}
		clk.Advance(time.Minute)
		if res := mustSearch(t, f, p); res.Outcome != provider.Declined || res.Charges != 0 || res.PurchaseID != p {
			t.Errorf("search once declined = %+v, want declined, no charge taking money", res)
		}
	})
	t.Run("no purchase id is never found", func(t *testing.T) {
		f, _ := newFake(t, fakeprovider.Config{})
		f.ChargeOutside(fakeprovider.OutsideCharge{Amount: 1, Currency: "eur"})
		wantOutcome(t, `search for ""`, mustSearch(t, f, ""), provider.NotFound, "")
		if got := f.DoubleCharged(); len(got) != 0 {
			t.Errorf("DoubleCharged() = %q, want none", got)
		}
	})
}

func TestResultsNamePurchase(t *testing.T) {
	f, _ := newFake(t, fakeprovider.Config{})
	req := request("pur_named")
	created := mustCreate(t, f, req)
	outside := f.ChargeOutside(fakeprovider.OutsideCharge{Amount: 1, Currency: "eur"})
	for what, res := range map[string]provider.Result{
		"create":          created,
		"replay":          mustCreate(t, f, req),
		"status":          mustStatus(t, f, created.PaymentID),
		"search":          mustSearch(t, f, req.PurchaseID),
		"status, outside": mustStatus(t, f, outside.ID),
	} {
		want := req.PurchaseID
		if what == "status, outside" {
			want = ""
		}
		if res.PurchaseID != want {
			t.Errorf("%s: %+v, want purchase %q", what, res, want)
		}
	}
}

func TestChargeOutside(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{})
	const p = "pur_outside"
	f.Script(p, fakeprovider.Decline)
	c := f.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: p, Customer: "cus_dash", Amount: 999, Currency: "eur"})
	want := fakeprovider.Charge{ID: c.ID, PurchaseID: p, Customer: "cus_dash", Amount: 999, Currency: "eur",
		Status: fakeprovider.StatusSucceeded, FinalStatus: fakeprovider.StatusSucceeded, CreatedAt: clk.Now(), Outside: true}
	if c != want {
		t.Errorf("ChargeOutside = %+v, want %+v", c, want)
	}
	if got := f.ChargesFor(p); len(got) != 1 || got[0] != want {
		t.Errorf("ledger %+v, want [%+v]", got, want)
	}
	for _, op := range []provider.Op{provider.OpCreate, provider.OpStatus, provider.OpSearch, provider.OpList} {
		if n := f.Calls(op); n != 0 {
			t.Errorf("Calls(%s) = %d, want 0: an outside charge is no call", op, n)
		}
	}
	// The purchase's script is still there for its first create.
	wantOutcome(t, "create after an outside charge", mustCreate(t, f, request(p)), provider.Declined, fakeprovider.StatusRequiresPaymentMethod)
	wantCharges(t, f, p, 2, 1)

	t.Run("KeepsDraws", func(t *testing.T) {
		cfg, err := fakeprovider.ParseConfig(spec)
		if err != nil {
			t.Fatal(err)
		}
		run := func(outside bool) []fakeprovider.Fault {
			f, _ := newFake(t, cfg)
			var got []fakeprovider.Fault
			for i := range 30 {
				if outside {
					f.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: "pur_x", Amount: 1250, Currency: "eur"})
				}
				req := request("pur_x")
				req.IdempotencyKey = fmt.Sprintf("pur_x-%d", i)
				_, err := f.Create(t.Context(), req)
				var fe *fakeprovider.FaultError
				switch {
				case errors.As(err, &fe):
					got = append(got, fe.Fault)
				case err != nil:
					t.Fatalf("create %d: %v", i, err)
				default:
					cs := f.ChargesFor("pur_x")
					got = append(got, cs[len(cs)-1].Fault)
				}
			}
			return got
		}
		if plain, mixed := run(false), run(true); !slices.Equal(plain, mixed) {
			t.Errorf("faults %q with outside charges between the creates, want %q as without", mixed, plain)
		}
	})

	t.Run("PanicsOnInvalid", func(t *testing.T) {
		for _, c := range []fakeprovider.OutsideCharge{
			{Amount: 0, Currency: "eur"},
			{Amount: -1, Currency: "eur"},
			{Amount: 1},
			{Amount: 1, Currency: "eur", Status: "refunded"},
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("ChargeOutside(%+v) did not panic", c)
					}
				}()
				f.ChargeOutside(c)
			}()
		}
	})
}

func TestSetStatus(t *testing.T) {
	t.Run("LateApproval", func(t *testing.T) {
		f, clk := newFake(t, fakeprovider.Config{})
		req := request("pur_late")
		req.PaymentMethod = fakeprovider.PaymentMethodDeclined
		id := mustCreate(t, f, req).PaymentID
		wantCharges(t, f, req.PurchaseID, 1, 0)
		clk.Advance(time.Hour)
		c, err := f.SetStatus(id, fakeprovider.StatusSucceeded)
		if err != nil || c.Status != fakeprovider.StatusSucceeded || c.FinalStatus != fakeprovider.StatusSucceeded || !c.MovedAt.Equal(clk.Now()) {
			t.Fatalf("SetStatus = (%+v, %v), want succeeded, moved now", c, err)
		}
		wantOutcome(t, "status", mustStatus(t, f, id), provider.Succeeded, fakeprovider.StatusSucceeded)
		if res := mustSearch(t, f, req.PurchaseID); res.Outcome != provider.Succeeded || res.Charges != 1 || res.Reason != "" {
			t.Errorf("search = %+v, want succeeded, 1 charge", res)
		}
		ps := mustList(t, f, provider.Window{From: clk.Now().Add(-2 * time.Hour), Until: clk.Now()})
		if len(ps) != 1 || ps[0].Status != fakeprovider.StatusSucceeded || ps[0].Outcome != provider.Succeeded {
			t.Errorf("list = %+v, want the charge succeeded", ps)
		}
		wantCharges(t, f, req.PurchaseID, 1, 1)
		// And back: a decline keeps its code.
		if _, err := f.SetStatus(id, fakeprovider.StatusRequiresPaymentMethod); err != nil {
			t.Fatal(err)
		}
		if res := mustStatus(t, f, id); res.Outcome != provider.Declined || res.Reason != fakeprovider.DeclineCode {
			t.Errorf("status after a second move = %+v, want declined %s", res, fakeprovider.DeclineCode)
		}
	})
	t.Run("CallsOffSettlement", func(t *testing.T) {
		f, clk := newFake(t, fakeprovider.Config{SettleAfter: time.Minute})
		req := request("pur_cancel")
		f.Script(req.PurchaseID, fakeprovider.Processing)
		id := mustCreate(t, f, req).PaymentID
		if _, err := f.SetStatus(id, fakeprovider.StatusCanceled); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour)
		wantOutcome(t, "status after the settlement time", mustStatus(t, f, id), provider.Declined, fakeprovider.StatusCanceled)
		wantCharges(t, f, req.PurchaseID, 1, 0)
	})
	t.Run("SameStatusCallsOffSettlement", func(t *testing.T) {
		f, clk := newFake(t, fakeprovider.Config{SettleAfter: time.Minute})
		req := request("pur_stay")
		f.Script(req.PurchaseID, fakeprovider.Processing)
		id := mustCreate(t, f, req).PaymentID
		c, err := f.SetStatus(id, fakeprovider.StatusProcessing)
		if err != nil || !c.MovedAt.IsZero() || c.FinalStatus != fakeprovider.StatusProcessing {
			t.Fatalf("SetStatus to its own status = (%+v, %v), want unmoved, staying processing", c, err)
		}
		clk.Advance(time.Hour)
		wantOutcome(t, "status", mustStatus(t, f, id), provider.Pending, fakeprovider.StatusProcessing)
	})
	t.Run("Errors", func(t *testing.T) {
		f, _ := newFake(t, fakeprovider.Config{})
		id := mustCreate(t, f, request("pur_err")).PaymentID
		tests := []struct {
			id, status string
			want       error
		}{
			{"pi_nope", fakeprovider.StatusSucceeded, fakeprovider.ErrNoSuchPayment},
			{id, "refunded", fakeprovider.ErrUnknownStatus},
			{id, "", fakeprovider.ErrUnknownStatus},
		}
		for _, tc := range tests {
			if c, err := f.SetStatus(tc.id, tc.status); !errors.Is(err, tc.want) {
				t.Errorf("SetStatus(%q, %q) = (%+v, %v), want %v", tc.id, tc.status, c, err, tc.want)
			}
		}
		wantOutcome(t, "status", mustStatus(t, f, id), provider.Succeeded, fakeprovider.StatusSucceeded)
	})
}

func TestLedger(t *testing.T) {
	f, clk := newFake(t, fakeprovider.Config{SettleAfter: time.Minute})
	req := request("pur_l")
	f.Script(req.PurchaseID, fakeprovider.FailBefore, fakeprovider.Processing)
	_, _ = f.Create(t.Context(), req) // refused, counted
	id := mustCreate(t, f, req).PaymentID
	mustCreate(t, f, req) // a replay
	keyless := request("pur_keyless")
	keyless.IdempotencyKey = ""
	mustCreate(t, f, keyless)
	out := f.ChargeOutside(fakeprovider.OutsideCharge{PurchaseID: req.PurchaseID, Amount: 7, Currency: "usd"})
	mustStatus(t, f, id)
	mustSearch(t, f, req.PurchaseID)
	mustList(t, f, provider.Window{From: clk.Now(), Until: clk.Now().Add(time.Second)})
	clk.Advance(time.Minute)

	l := f.Ledger()
	want := fakeprovider.Ledger{
		Charges: []fakeprovider.LedgerCharge{
			{PaymentID: id, PurchaseID: "pur_l", Amount: 1250, Currency: "eur", Status: "succeeded", FinalStatus: "succeeded",
				Created: clk.Now().Add(-time.Minute), IdempotencyKey: "payrecon-pur_l", OffSession: true},
			{PaymentID: l.Charges[1].PaymentID, PurchaseID: "pur_keyless", Amount: 1250, Currency: "eur", Status: "succeeded", FinalStatus: "succeeded",
				Created: clk.Now().Add(-time.Minute), OffSession: true},
			{PaymentID: out.ID, PurchaseID: "pur_l", Amount: 7, Currency: "usd", Status: "succeeded", FinalStatus: "succeeded",
				Created: clk.Now().Add(-time.Minute), Outside: true},
		},
		Refunds:           []fakeprovider.LedgerRefund{},
		Disputes:          []fakeprovider.LedgerDispute{},
		CreateCalls:       map[string]int{"payrecon-pur_l": 3, "": 1},
		RefundCreateCalls: map[string]int{},
		Calls:             fakeprovider.LedgerCalls{Create: 4, Status: 1, Search: 1, List: 1},
	}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("Ledger() =\n%+v\nwant\n%+v", l, want)
	}
}
