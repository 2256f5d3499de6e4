package providertest

import (
	"context"
	"errors"
	"testing"

	"github.com/payrecon/payrecon/provider"
)

// The cases of listings of several pages: every request a listing sends
// passes its PageGate first, so that the caller's rate budget takes one
// token per request.

// gate is a PageGate that counts its passes and fails the pass numbered
// failOn (0: none).
type gate struct {
	passes, failOn int
}

var errGateShut = errors.New("providertest: the gate is shut")

func (g *gate) pass(context.Context) error {
	g.passes++
	if g.passes == g.failOn {
		return errGateShut
	}
	return nil
}

// pages is how many requests a listing of n objects reads, PageSize a
// page: a provider may tell the last page by its being short, so a full
// last page may be followed by an empty one; n is never a multiple here.
func pages(tg Target, n int) int { return n/tg.PageSize + 1 }

// listings returns the listings of 2·PageSize+1 payments, the last with
// 2·PageSize+1 refunds (each of 1 unit), created as the only payments and
// refunds of a fresh provider, and, when the provider can open disputes, a
// dispute of each payment (after the refunds, which a dispute would
// refuse): each a function of its gate returning how many objects it
// listed; and that number of objects.
func listings(t *testing.T, h Harness, tg Target) (map[provider.Op]func(provider.PageGate) (int, error), map[provider.Op]int) {
	t.Helper()
	n := 2*tg.PageSize + 1
	var req provider.CreateRequest
	var charge provider.Result
	var payments []string
	for range n {
		req, charge = paid(t, h, tg)
		payments = append(payments, charge.PaymentID)
	}
	for range n {
		createRefund(t, tg, newRefundRequest(req, charge, 1))
	}
	w := coveringWindow(tg)
	ctx := t.Context()
	run := map[provider.Op]func(provider.PageGate) (int, error){
		provider.OpList: func(g provider.PageGate) (int, error) {
			ps, err := tg.Provider.List(ctx, w, g)
			return len(ps), err
		},
		provider.OpRefundList: func(g provider.PageGate) (int, error) {
			rs, err := tg.Provider.ListRefundsCreated(ctx, w, g)
			return len(rs), err
		},
		"refund_list_of_payment": func(g provider.PageGate) (int, error) {
			rs, err := tg.Provider.ListRefunds(ctx, charge.PaymentID, g)
			return len(rs), err
		},
	}
	want := map[provider.Op]int{provider.OpList: n, provider.OpRefundList: n, "refund_list_of_payment": n}
	if tg.OpenDispute != nil {
		for _, id := range payments {
			if err := tg.OpenDispute(ctx, id); err != nil {
				t.Fatalf("open a dispute of %s: %v", id, err)
			}
		}
		run[provider.OpDisputeList] = func(g provider.PageGate) (int, error) {
			ds, err := tg.Provider.ListDisputes(ctx, w, g)
			return len(ds), err
		}
		want[provider.OpDisputeList] = n
	}
	return run, want
}

// requestOp is the op whose requests a listing counts under.
func requestOp(op provider.Op) provider.Op {
	if op == provider.OpList || op == provider.OpDisputeList {
		return op
	}
	return provider.OpRefundList
}

func testListingsGatedPerPage(t *testing.T, h Harness, tg Target) {
	if tg.PageSize <= 0 {
		t.Skip("providertest: Target.PageSize unknown")
	}
	run, want := listings(t, h, tg)
	for op, list := range run {
		before := requests(tg, op)
		g := &gate{}
		n, err := list(g.pass)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if n != want[op] {
			t.Errorf("%s: %d objects, want %d", op, n, want[op])
		}
		if p := pages(tg, n); g.passes != p {
			t.Errorf("%s of %d objects, %d a page: %d passes of the gate, want %d", op, n, tg.PageSize, g.passes, p)
		}
		if sent := requests(tg, op) - before; tg.Requests != nil && sent != g.passes {
			t.Errorf("%s: %d requests sent, %d passes of the gate: want one pass per request", op, sent, g.passes)
		}
	}
}

func testListingStopsAtGate(t *testing.T, h Harness, tg Target) {
	if tg.PageSize <= 0 {
		t.Skip("providertest: Target.PageSize unknown")
	}
	run, _ := listings(t, h, tg)
	for op, list := range run {
		before := requests(tg, op)
		g := &gate{failOn: 2}
		n, err := list(g.pass)
		if !errors.Is(err, errGateShut) || n != 0 {
			t.Errorf("%s with the gate shut before page 2: %d objects, error %v; want none and the gate's error", op, n, err)
		}
		if g.passes != 2 {
			t.Errorf("%s: %d passes of the gate, want 2 (it stops at the shut one)", op, g.passes)
		}
		if sent := requests(tg, op) - before; tg.Requests != nil && sent != 1 {
			t.Errorf("%s: %d requests sent, want 1: none after the gate shut", op, sent)
		}
	}
}

// requests returns Target.Requests of op's requests, 0 without it.
func requests(tg Target, op provider.Op) int {
	if tg.Requests == nil {
		return 0
	}
	return tg.Requests(requestOp(op))
}
