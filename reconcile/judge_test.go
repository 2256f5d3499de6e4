package reconcile_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// judgeBooks returns a purchase of 300 usd in state st, with payment
// pi_own stored when known says so.
func judgeBooks(st statemachine.State, known bool) reconcile.Purchase {
	p := reconcile.Purchase{ID: "pur_1", Amount: 300, Currency: "usd", State: st}
	if known {
		p.ProviderPaymentID = "pi_own"
	}
	if st.Terminal() {
		p.SettledAt = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	}
	return p
}

// own returns an answer about the purchase's own payment.
func own(src reconcile.Source, o provider.Outcome) reconcile.Answer {
	return reconcile.Answer{Source: src, Outcome: o, PaymentID: "pi_own", PurchaseID: "pur_1", Amount: 300, Currency: "usd"}
}

// inAccount returns p as a purchase of a connected account.
func inAccount(p reconcile.Purchase, account string) reconcile.Purchase {
	p.Account = account
	return p
}

func TestJudge(t *testing.T) {
	before := time.Date(2026, 3, 1, 8, 59, 0, 0, time.UTC)
	after := time.Date(2026, 3, 1, 9, 1, 0, 0, time.UTC)
	type row struct {
		name   string
		p      reconcile.Purchase
		a      reconcile.Answer
		kind   reconcile.VerdictKind
		settle statemachine.State
		reason reconcile.EscalationReason
	}
	var rows []row
	add := func(r row) { rows = append(rows, r) }
	with := func(a reconcile.Answer, f func(*reconcile.Answer)) reconcile.Answer { f(&a); return a }

	for _, src := range reconcile.Sources {
		name := func(s string) string { return string(src) + "/" + s }
		// Apply: about the purchase's own charge, before a final state.
		// (An operator's live view is judged against the outcome asked
		// for, a final state, so it never applies: see record.)
		if src != reconcile.SourceOperator {
			add(row{name("success settles"), judgeBooks(statemachine.Reconciling, false), own(src, provider.Succeeded), reconcile.VerdictApply, statemachine.Succeeded, ""})
			add(row{name("decline settles"), judgeBooks(statemachine.Submitted, true), own(src, provider.Declined), reconcile.VerdictApply, statemachine.Declined, ""})
			add(row{name("pending leaves it open"), judgeBooks(statemachine.Reconciling, false), own(src, provider.Pending), reconcile.VerdictApply, "", ""})
			add(row{name("unknown leaves it open"), judgeBooks(statemachine.Submitted, false), reconcile.Answer{Source: src, Outcome: provider.Unknown}, reconcile.VerdictApply, "", ""})
		}
		// Record: repeats or cannot change a final state.
		add(row{name("repeat of success"), judgeBooks(statemachine.Succeeded, true), own(src, provider.Succeeded), reconcile.VerdictRecord, "", ""})
		add(row{name("stale processing after success"), judgeBooks(statemachine.Succeeded, true), own(src, provider.Pending), reconcile.VerdictRecord, "", ""})
		add(row{name("another payment declined"), judgeBooks(statemachine.Reconciling, true),
			with(own(src, provider.Declined), func(a *reconcile.Answer) { a.PaymentID = "pi_other" }), reconcile.VerdictRecord, "", ""})
		// Escalate: every kind of disagreement with the books.
		add(row{name("metadata names another purchase"), judgeBooks(statemachine.Reconciling, false),
			with(own(src, provider.Succeeded), func(a *reconcile.Answer) { a.PurchaseID = "pur_2" }), reconcile.VerdictEscalate, "", reconcile.EscalationForeignPayment})
		add(row{name("metadata names no purchase"), judgeBooks(statemachine.Reconciling, false),
			with(own(src, provider.Succeeded), func(a *reconcile.Answer) { a.PurchaseID = "" }), reconcile.VerdictEscalate, "", reconcile.EscalationForeignPayment})
		add(row{name("books give the payment to another purchase"), judgeBooks(statemachine.Submitted, false),
			with(own(src, provider.Succeeded), func(a *reconcile.Answer) { a.Owner = "pur_2" }), reconcile.VerdictEscalate, "", reconcile.EscalationForeignPayment})
		// Another account's payment is never the purchase's own, even
		// naming it: the platform's purchase, a connected account's, and
		// two connected accounts.
		add(row{name("another account's payment, to the platform's purchase"), judgeBooks(statemachine.Reconciling, false),
			with(own(src, provider.Succeeded), func(a *reconcile.Answer) { a.Account = "acct_A" }), reconcile.VerdictEscalate, "", reconcile.EscalationForeignPayment})
		add(row{name("the platform's payment, to a connected account's purchase"), inAccount(judgeBooks(statemachine.Reconciling, false), "acct_B"),
			own(src, provider.Succeeded), reconcile.VerdictEscalate, "", reconcile.EscalationForeignPayment})
		add(row{name("another connected account's payment"), inAccount(judgeBooks(statemachine.Succeeded, true), "acct_B"),
			with(own(src, provider.Succeeded), func(a *reconcile.Answer) { a.Account = "acct_A" }), reconcile.VerdictEscalate, "", reconcile.EscalationForeignPayment})
		add(row{name("its own account's payment"), inAccount(judgeBooks(statemachine.Reconciling, false), "acct_B"),
			with(own(src, provider.Succeeded), func(a *reconcile.Answer) { a.Account = "acct_B" }), reconcile.VerdictApply, statemachine.Succeeded, ""})
		add(row{name("second payment succeeded"), judgeBooks(statemachine.Succeeded, true),
			with(own(src, provider.Succeeded), func(a *reconcile.Answer) { a.PaymentID = "pi_other" }), reconcile.VerdictEscalate, "", reconcile.EscalationDuplicateCharge})
		add(row{name("second payment pending"), judgeBooks(statemachine.Reconciling, true),
			with(own(src, provider.Pending), func(a *reconcile.Answer) { a.PaymentID = "pi_other" }), reconcile.VerdictEscalate, "", reconcile.EscalationDuplicateCharge})
		add(row{name("two charges found"), judgeBooks(statemachine.Reconciling, false),
			with(own(src, provider.Succeeded), func(a *reconcile.Answer) { a.Charges = 2 }), reconcile.VerdictEscalate, "", reconcile.EscalationDuplicateCharge})
		add(row{name("another amount"), judgeBooks(statemachine.Reconciling, false),
			with(own(src, provider.Succeeded), func(a *reconcile.Answer) { a.Amount = 999 }), reconcile.VerdictEscalate, "", reconcile.EscalationAmountMismatch})
		add(row{name("another currency"), judgeBooks(statemachine.Submitted, false),
			with(own(src, provider.Succeeded), func(a *reconcile.Answer) { a.Currency = "eur" }), reconcile.VerdictEscalate, "", reconcile.EscalationAmountMismatch})
		add(row{name("charge before submission"), judgeBooks(statemachine.Created, false), own(src, provider.Succeeded), reconcile.VerdictEscalate, "", reconcile.EscalationContradiction})
		add(row{name("key mismatch"), judgeBooks(statemachine.Reconciling, false), reconcile.Answer{Source: src, Outcome: provider.IdempotencyMismatch}, reconcile.VerdictEscalate, "", reconcile.EscalationIdempotencyMismatch})
		add(row{name("rejected"), judgeBooks(statemachine.Submitted, false), reconcile.Answer{Source: src, Outcome: provider.Rejected}, reconcile.VerdictEscalate, "", reconcile.EscalationProviderRejected})
		// A contradiction of a final state: a current read escalates at
		// once; anything else is confirmed by a status query first.
		contradiction, decline := reconcile.VerdictConfirm, reconcile.VerdictConfirm
		var reason reconcile.EscalationReason
		if src == reconcile.SourceStatus || src == reconcile.SourceOperator {
			contradiction, decline, reason = reconcile.VerdictEscalate, reconcile.VerdictEscalate, reconcile.EscalationStateDisagreement
		}
		add(row{name("success after decline"), judgeBooks(statemachine.Declined, true),
			with(own(src, provider.Succeeded), func(a *reconcile.Answer) { a.At = before }), contradiction, "", reason})
		add(row{name("newer decline after success"), judgeBooks(statemachine.Succeeded, true),
			with(own(src, provider.Declined), func(a *reconcile.Answer) { a.At = after }), decline, "", reason})
		if !(src == reconcile.SourceStatus || src == reconcile.SourceOperator) {
			add(row{name("older decline after success is stale"), judgeBooks(statemachine.Succeeded, true),
				with(own(src, provider.Declined), func(a *reconcile.Answer) { a.At = before }), reconcile.VerdictRecord, "", ""})
		}
	}

	covered := map[string]bool{}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			v := reconcile.Judge(r.p, r.a)
			if v.Kind != r.kind || v.Settles != r.settle || v.Reason != r.reason {
				t.Fatalf("Judge(%s, %+v) = %s; want %s %s (%s)", r.p.State, r.a, v, r.kind, r.settle, r.reason)
			}
			if v.Why == "" {
				t.Errorf("verdict %s has no explanation", v.Kind)
			}
		})
		covered[fmt.Sprintf("%s×%s", r.a.Source, r.kind)] = true
	}
	// Every source meets every verdict, except the two that cannot be:
	// an operator's live view is judged against a final state, so it never
	// applies; a current read is never merely confirmed.
	impossible := map[string]bool{"operator×apply": true, "status×confirm": true, "operator×confirm": true}
	for _, src := range reconcile.Sources {
		for _, k := range []reconcile.VerdictKind{reconcile.VerdictApply, reconcile.VerdictRecord, reconcile.VerdictEscalate, reconcile.VerdictConfirm} {
			key := fmt.Sprintf("%s×%s", src, k)
			if !covered[key] && !impossible[key] {
				t.Errorf("no row covers %s", key)
			}
		}
	}
}

// A success is never stale, however old: money moved.
func TestJudgeOldSuccessAfterDeclineIsConfirmed(t *testing.T) {
	p := judgeBooks(statemachine.Declined, true)
	a := own(reconcile.SourceWebhook, provider.Succeeded)
	a.At = p.SettledAt.Add(-time.Hour)
	if v := reconcile.Judge(p, a); v.Kind != reconcile.VerdictConfirm {
		t.Fatalf("old success after decline: %s, want confirm", v)
	}
}
