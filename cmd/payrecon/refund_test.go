package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// refundID returns the refund id `refund create` printed, with its state.
func refundID(t *testing.T, out string) (id, state string) {
	t.Helper()
	fields := strings.Fields(out)
	if len(fields) != 2 || !strings.HasPrefix(fields[0], "ref_") {
		t.Fatalf("refund create printed %q, want the refund's id and state", out)
	}
	return fields[0], fields[1]
}

// TestRefundCreateShow: `refund create` stores a refund of a succeeded
// purchase, requested by "cli", and prints its id and state; `refund
// show` prints it with its trail, `purchase show` and `ops show` list
// it; a refund beyond what is left of the amount paid is refused and
// stores nothing; the worker then sends the refund, and `refund show`
// says it succeeded.
func TestRefundCreateShow(t *testing.T) {
	f := newOpsFixture(t)
	p := f.purchase(t, true)
	if p.State != statemachine.Succeeded {
		t.Fatalf("set-up: %s is %s", p.ID, p.State)
	}

	code, out, stderr := run(t, nil, "refund", "create", p.ID, "--amount", "100", "--reason", "one item returned", "--database-url", f.db)
	if code != 0 {
		t.Fatalf("refund create: exit %d: %s", code, stderr)
	}
	id, state := refundID(t, out)
	if state != string(statemachine.Created) {
		t.Errorf("refund create printed state %q, want created", state)
	}

	code, out, stderr = run(t, nil, "refund", "show", id, "--database-url", f.db)
	if code != 0 {
		t.Fatalf("refund show: exit %d: %s", code, stderr)
	}
	for _, want := range []string{id, "created", p.ID, p.ProviderPaymentID, "1.00 USD", "one item returned", "cli",
		"payrecon-" + id, "transitions:", "provider calls:", "operator actions:"} {
		if !strings.Contains(out, want) {
			t.Errorf("refund show lacks %q:\n%s", want, out)
		}
	}
	code, out, stderr = run(t, nil, "refund", "show", id, "--json", "--database-url", f.db)
	var c reconcile.RefundCase
	if code != 0 || json.Unmarshal([]byte(out), &c) != nil {
		t.Fatalf("refund show --json: exit %d: %s\n%s", code, stderr, out)
	}
	if r := c.Refund; r.ID != id || r.PurchaseID != p.ID || r.Amount != 100 || r.RequestedBy != "cli" ||
		r.PaymentID != p.ProviderPaymentID || r.State != statemachine.Created {
		t.Errorf("refund show --json: %+v", r)
	}

	for _, args := range [][]string{{"purchase", "show", p.ID}, {"ops", "show", p.ID}} {
		code, out, stderr := run(t, nil, append(args, "--database-url", f.db)...)
		section := out[strings.Index(out, "\nrefunds:")+1:]
		if code != 0 || !strings.Contains(out, "\nrefunds:") || !strings.Contains(section, id) || !strings.Contains(section, "one item returned") {
			t.Errorf("%v does not list the refund: exit %d %s\n%s", args, code, stderr, out)
		}
	}
	code, out, _ = run(t, nil, "purchase", "show", p.ID, "--json", "--database-url", f.db)
	var d struct {
		Purchase reconcile.Purchase
		Refunds  []reconcile.Refund
	}
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || d.Purchase.ID != p.ID || len(d.Refunds) != 1 || d.Refunds[0].ID != id {
		t.Errorf("purchase show --json: exit %d, %+v\n%s", code, d, out)
	}

	// 100 of 300 is pending: 250 more would exceed the amount paid.
	code, _, stderr = run(t, nil, "refund", "create", p.ID, "--amount", "250", "--reason", "everything", "--database-url", f.db)
	if code != 1 || !strings.Contains(stderr, "would exceed the amount paid") || !strings.Contains(stderr, "nothing was stored") {
		t.Errorf("a refund beyond the amount paid: exit %d: %s", code, stderr)
	}
	if n := len(f.refunds(t, p.ID)); n != 1 {
		t.Errorf("%d refunds after the refused one, want 1", n)
	}

	// The worker sends it through the provider, under its own key, on
	// the clock the CLI created it on.
	svc, _, done := f.serviceAt(t, true, time.Now)
	if _, err := svc.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	done()
	code, out, stderr = run(t, nil, "refund", "show", id, "--database-url", f.db)
	if code != 0 || !strings.Contains(out, "succeeded") || !strings.Contains(out, "refund_create") {
		t.Errorf("refund show after the worker: exit %d: %s\n%s", code, stderr, out)
	}
	// The call's line names the provider's refund as a refund.
	if !regexp.MustCompile(`refund_create .*refund=re_`).MatchString(out) || strings.Contains(out, "payment=re_") {
		t.Errorf("refund show labels the provider's refund other than refund=re_…:\n%s", out)
	}
}

// refunds reads a purchase's refunds from the database.
func (f *opsFixture) refunds(t *testing.T, purchaseID string) []reconcile.Refund {
	t.Helper()
	svc, _, done := f.service(t, false)
	defer done()
	rs, err := svc.PurchaseRefunds(context.Background(), purchaseID)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}
