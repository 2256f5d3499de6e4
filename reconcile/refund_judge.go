package reconcile

import (
	"fmt"
	"strings"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// JudgeRefund is Judge for a refund: the one place that decides what a
// provider answer about a refund means for it, whatever the answer's
// source (a create reply, a replay, a lookup, a listing, a webhook). It is
// pure; the caller reads r and looks up a.Owner (the refund the books
// give the provider's refund id to) in the transaction that will apply
// the verdict.
//
// In order:
//   - a key mismatch or a rejection escalates;
//   - a provider refund the answer names must be this refund's: its
//     metadata must name this refund, the books must not give its id to
//     another refund, it must return money from this refund's payment,
//     and it must be the refund's stored provider refund if one is
//     stored: a second provider refund that moved or may move money is a
//     duplicate;
//   - its amount and currency must be the refund's;
//   - an answer that settles nothing (unknown, retry later, not found)
//     leaves the outcome open: not found is never a failure;
//   - a definite or pending answer must agree with the state: nothing
//     exists before submission; a final state is never overwritten: a
//     repeat, or a stale "pending" after a success, is recorded only, and
//     a contradiction (a success after a failure, a failure after a
//     success, which a provider may report when the money could not go
//     back) escalates for a human, since money may or may not have moved.
func JudgeRefund(r Refund, a Answer) Verdict {
	switch a.Outcome {
	case provider.IdempotencyMismatch:
		return escalateVerdict(EscalationIdempotencyMismatch, "the provider holds the refund's key with other parameters")
	case provider.Rejected:
		return escalateVerdict(EscalationProviderRejected, "the provider refused the refund without acting on it")
	}
	if v, ok := judgeRefundIdentity(r, a); ok {
		return v
	}
	if (a.Amount != 0 && a.Amount != r.Amount) || (a.Currency != "" && !strings.EqualFold(a.Currency, r.Currency)) {
		return escalateVerdict(EscalationAmountMismatch, fmt.Sprintf(
			"the provider's refund %s is %s, the refund %s", orNone(a.PaymentID), provider.FormatAmount(a.Amount, a.Currency), provider.FormatAmount(r.Amount, r.Currency)))
	}
	target := refundSettledBy(a.Outcome)
	switch a.Outcome {
	case provider.Succeeded, provider.Failed, provider.Pending:
	default:
		if statemachine.Refund.Terminal(r.State) {
			return Verdict{Kind: VerdictRecord, Why: fmt.Sprintf("%s answer after the refund was %s: nothing to apply", a.Outcome, r.State)}
		}
		return Verdict{Kind: VerdictApply, Why: fmt.Sprintf("%s: the refund's outcome stays open", a.Outcome)}
	}
	switch {
	case r.State == statemachine.Created:
		return escalateVerdict(EscalationContradiction, fmt.Sprintf(
			"the provider reports refund %s (%s) for a refund never submitted", orNone(a.PaymentID), a.Outcome))
	case !statemachine.Refund.Terminal(r.State):
		return Verdict{Kind: VerdictApply, Settles: target, Why: fmt.Sprintf("%s: provider refund %s", a.Outcome, orNone(a.PaymentID))}
	case target == "":
		return Verdict{Kind: VerdictRecord, Why: fmt.Sprintf("a %s answer never overwrites %s", a.Outcome, r.State)}
	case target == r.State:
		return Verdict{Kind: VerdictRecord, Why: fmt.Sprintf("repeats the final state %s", r.State)}
	default:
		return escalateVerdict(EscalationStateDisagreement, fmt.Sprintf(
			"the provider says refund %s is %s (%s), the books say %s", orNone(a.PaymentID), a.Outcome, a.Source, r.State))
	}
}

// judgeRefundIdentity checks that the answer is about this refund's own
// provider refund, and only one.
func judgeRefundIdentity(r Refund, a Answer) (Verdict, bool) {
	mayMoveMoney := a.Outcome != provider.Failed
	switch {
	case a.PaymentID == "" && a.RefundID == "":
		return Verdict{}, false // about the call, not a refund
	case a.Account != r.Account():
		return escalateVerdict(EscalationForeignPayment, fmt.Sprintf(
			"the provider's refund %s is in account %s, the refund's is %s", orNone(a.PaymentID), accountName(a.Account), accountName(r.Account()))), true
	case a.RefundID != r.ID:
		named := fmt.Sprintf("names refund %q", a.RefundID)
		if a.RefundID == "" {
			named = "names no refund"
		}
		return escalateVerdict(EscalationForeignPayment,
			fmt.Sprintf("the provider's refund %s %s in its metadata, not %s", orNone(a.PaymentID), named, r.ID)), true
	case a.Owner != "" && a.Owner != r.ID:
		return escalateVerdict(EscalationForeignPayment,
			fmt.Sprintf("the books give provider refund %s to refund %s", a.PaymentID, a.Owner)), true
	case a.Refunded != "" && a.Refunded != r.PaymentID:
		return escalateVerdict(EscalationForeignPayment,
			fmt.Sprintf("the provider's refund %s returns money from payment %s, the refund's payment is %s", orNone(a.PaymentID), a.Refunded, r.PaymentID)), true
	case a.PaymentID != "" && r.ProviderRefundID != "" && a.PaymentID != r.ProviderRefundID:
		if !mayMoveMoney {
			return Verdict{Kind: VerdictRecord, Why: fmt.Sprintf(
				"another provider refund %s for the refund (its own is %s) failed: no money moved", a.PaymentID, r.ProviderRefundID)}, true
		}
		return escalateVerdict(EscalationDuplicateCharge, fmt.Sprintf(
			"a second provider refund %s (%s) for the refund, whose own is %s", a.PaymentID, a.Outcome, r.ProviderRefundID)), true
	case a.Charges > 1:
		return escalateVerdict(EscalationDuplicateCharge, fmt.Sprintf(
			"the provider holds %d refunds that moved or may move money for the refund", a.Charges)), true
	}
	return Verdict{}, false
}

// refundSettledBy returns the final refund state an outcome proves, or "".
func refundSettledBy(o provider.Outcome) statemachine.State {
	switch o {
	case provider.Succeeded:
		return statemachine.Succeeded
	case provider.Failed:
		return statemachine.Failed
	}
	return ""
}
