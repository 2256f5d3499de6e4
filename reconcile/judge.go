package reconcile

import (
	"fmt"
	"strings"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// Source says where a provider answer came from. Every answer, whatever
// its source, is judged by Judge before it may change the books.
type Source string

// The sources of provider answers.
const (
	// SourceCreate: the reply to a create sent from submitted.
	SourceCreate Source = "create"
	// SourceReplay: the reply to a replay of the stored create under the
	// same key, while reconciling. It may be the saved first response, so
	// it is not a current read.
	SourceReplay Source = "replay"
	// SourceStatus: a status query by payment id: the provider's current
	// view of one payment.
	SourceStatus Source = "status"
	// SourceSearch: a search by the purchase's metadata. It lags.
	SourceSearch Source = "search"
	// SourceWebhook: a verified provider event.
	SourceWebhook Source = "webhook"
	// SourceOperator: the live view fetched for an operator's resolution,
	// judged against the outcome the operator asks for.
	SourceOperator Source = "operator"
)

// Sources lists every source, for tests and documentation.
var Sources = []Source{SourceCreate, SourceReplay, SourceStatus, SourceSearch, SourceWebhook, SourceOperator}

// current reports whether an answer from s is the provider's present view
// of the payment, strong enough to establish a disagreement with a final
// state on its own. Other sources are confirmed by a status query first.
func (s Source) current() bool { return s == SourceStatus || s == SourceOperator }

// Answer is one provider answer in the judge's terms.
type Answer struct {
	Source  Source
	Outcome provider.Outcome
	// PaymentID is the provider's payment the answer is about; "" when it
	// names none (a timeout, a search that found nothing).
	PaymentID string
	// PurchaseID is the purchase the payment's metadata names, "" for
	// none.
	PurchaseID string
	// Account is the provider account the answer comes from: the one a
	// call was made on behalf of, or the one an event happened in. A
	// payment of another account than the purchase's is never its own,
	// whatever its metadata says: ids are the platform's to choose, and
	// two accounts may hold payments naming one purchase id.
	Account string
	// Amount and Currency are the payment's as the provider reports them;
	// 0 and "" when the answer carries none.
	Amount   int64
	Currency string
	// Charges is how many payments a search found for the purchase that
	// took or may take money.
	Charges int
	// At is when the provider said it: an event's creation time. Zero when
	// unknown.
	At time.Time
	// Owner is the purchase the books give PaymentID to, "" if none. The
	// caller looks it up in the transaction that applies the verdict.
	// For a refund answer: the refund the books give the provider's
	// refund id to.
	Owner string

	// For an answer about a refund (JudgeRefund), PaymentID is the
	// provider's refund id, RefundID the refund id its metadata names
	// ("" for none), and Refunded the payment it returns money from.
	RefundID string
	Refunded string
}

// refundAnswerOf builds the Answer to a refund call from its result.
func refundAnswerOf(src Source, outcome provider.Outcome, res provider.RefundResult) Answer {
	return Answer{
		Source: src, Outcome: outcome, PaymentID: res.ID, PurchaseID: res.PurchaseID,
		RefundID: res.RefundID, Refunded: res.PaymentID, Amount: res.Amount, Currency: res.Currency,
	}
}

// answerOf builds the Answer to a provider call from its result.
func answerOf(src Source, outcome provider.Outcome, res provider.Result) Answer {
	return Answer{
		Source: src, Outcome: outcome, PaymentID: res.PaymentID, PurchaseID: res.PurchaseID,
		Amount: res.Amount, Currency: res.Currency, Charges: res.Charges,
	}
}

// VerdictKind is what the judge decides to do with an answer.
type VerdictKind string

// The verdicts.
const (
	// VerdictApply: the answer is about this purchase's own charge and
	// agrees with the books; apply it (Settles says whether it settles the
	// purchase).
	VerdictApply VerdictKind = "apply"
	// VerdictRecord: the answer changes nothing (a stale or repeated
	// fact); record it only.
	VerdictRecord VerdictKind = "record"
	// VerdictEscalate: the answer disagrees with the books; record it,
	// apply nothing, and put the purchase on the operator list with
	// Reason.
	VerdictEscalate VerdictKind = "escalate"
	// VerdictConfirm: the answer contradicts a final state but is not a
	// current read (an event, a replayed response, a search); record it
	// and confirm with a status query, whose answer the judge then weighs.
	VerdictConfirm VerdictKind = "confirm"
)

// Verdict is the judge's decision about one answer.
type Verdict struct {
	Kind VerdictKind
	// Settles is the final state an applied answer proves: succeeded or
	// declined; "" when the outcome stays open.
	Settles statemachine.State
	// Reason says why, with VerdictEscalate.
	Reason EscalationReason
	// Why explains the verdict in words, for the audit trail.
	Why string
}

func (v Verdict) String() string {
	s := string(v.Kind)
	if v.Settles != "" {
		s += " " + string(v.Settles)
	}
	if v.Reason != "" {
		s += " (" + string(v.Reason) + ")"
	}
	return s + ": " + v.Why
}

// Judge is the one place that decides what a provider answer means for a
// purchase, whatever the answer's source: a create reply, a replay, a
// status query, a search, a webhook or an operator's live view. It is
// pure: the caller reads p and looks up a.Owner in the transaction that
// will apply the verdict.
//
// It compares the answer with the books, in this order:
//   - a key mismatch or a rejection escalates;
//   - whatever the outcome, a payment the answer names must be this
//     purchase's: its metadata must name this
//     purchase exactly, the books must not give its id to another
//     purchase (foreign_payment), and it must be the purchase's stored
//     payment if one is stored: another payment that took or may take
//     money is a second charge (duplicate_charge), as is a search that
//     found more than one;
//   - its amount and currency must be the purchase's (amount_mismatch);
//   - an answer that settles nothing (unknown, retry later, not found)
//     leaves the outcome open;
//   - a definite or pending answer must agree with the state: nothing exists before submission
//     (contradiction); a final state is never overwritten: an answer that
//     repeats it, or a pending one, is recorded only; one that contradicts
//     it escalates (state_disagreement) when it is a current read (a
//     status query, a live view), is stale when it is a decline older
//     than the answer that settled a success, and is otherwise confirmed
//     with a status query first. A success is never stale: money moved.
func Judge(p Purchase, a Answer) Verdict {
	switch a.Outcome {
	case provider.IdempotencyMismatch:
		return escalateVerdict(EscalationIdempotencyMismatch, "the provider holds the key with other parameters")
	case provider.Rejected:
		return escalateVerdict(EscalationProviderRejected, "the provider refused the request without acting on it")
	}
	// Any answer that names a payment, whatever its outcome (an error body
	// can carry one), must be about this purchase's own charge.
	if v, ok := judgeIdentity(p, a); ok {
		return v
	}
	if v, ok := judgeAmount(p, a); ok {
		return v
	}
	switch a.Outcome {
	case provider.Succeeded, provider.Declined, provider.Pending:
		return judgeState(p, a)
	}
	// Unknown, retry later, not found: nothing settled.
	if p.State.Terminal() {
		return Verdict{Kind: VerdictRecord, Why: fmt.Sprintf("%s answer after the purchase was %s: nothing to apply", a.Outcome, p.State)}
	}
	return Verdict{Kind: VerdictApply, Why: fmt.Sprintf("%s: the outcome stays open", a.Outcome)}
}

// judgeIdentity checks that the answer is about this purchase's own
// charge, and only one.
func judgeIdentity(p Purchase, a Answer) (Verdict, bool) {
	// Only a definite decline took nothing: an answer in a status the
	// adapter does not know may be money taken.
	mayTakeMoney := a.Outcome != provider.Declined
	switch {
	case a.PaymentID == "" && a.PurchaseID == "":
		// No payment named (a key in use answers pending without one):
		// nothing to compare; the answer is about the call, not a charge.
		return Verdict{}, false
	case a.Account != p.Account:
		return escalateVerdict(EscalationForeignPayment, fmt.Sprintf(
			"the provider's payment %s is in account %s, the purchase's is %s", orNone(a.PaymentID), accountName(a.Account), accountName(p.Account))), true
	case a.PurchaseID != p.ID:
		named := fmt.Sprintf("names purchase %q", a.PurchaseID)
		if a.PurchaseID == "" {
			named = "names no purchase"
		}
		return escalateVerdict(EscalationForeignPayment,
			fmt.Sprintf("the provider's payment %s %s in its metadata, not %s", orNone(a.PaymentID), named, p.ID)), true
	case a.Owner != "" && a.Owner != p.ID:
		return escalateVerdict(EscalationForeignPayment,
			fmt.Sprintf("the books give payment %s to purchase %s", a.PaymentID, a.Owner)), true
	case a.PaymentID != "" && p.ProviderPaymentID != "" && a.PaymentID != p.ProviderPaymentID:
		if !mayTakeMoney {
			return Verdict{Kind: VerdictRecord, Why: fmt.Sprintf(
				"another payment %s for the purchase (its own is %s) is %s: no money taken", a.PaymentID, p.ProviderPaymentID, a.Outcome)}, true
		}
		return escalateVerdict(EscalationDuplicateCharge, fmt.Sprintf(
			"a second payment %s (%s) for the purchase, whose own is %s", a.PaymentID, a.Outcome, p.ProviderPaymentID)), true
	case a.Charges > 1:
		return escalateVerdict(EscalationDuplicateCharge, fmt.Sprintf(
			"the provider holds %d payments that took or may take money for the purchase", a.Charges)), true
	}
	return Verdict{}, false
}

// judgeAmount checks the payment's amount and currency.
func judgeAmount(p Purchase, a Answer) (Verdict, bool) {
	if (a.Amount != 0 && a.Amount != p.Amount) || (a.Currency != "" && !strings.EqualFold(a.Currency, p.Currency)) {
		return escalateVerdict(EscalationAmountMismatch, fmt.Sprintf(
			"the provider's payment %s is %s, the purchase %s", orNone(a.PaymentID), provider.FormatAmount(a.Amount, a.Currency), provider.FormatAmount(p.Amount, p.Currency))), true
	}
	return Verdict{}, false
}

// judgeState weighs an answer about the purchase's own charge against its
// state.
func judgeState(p Purchase, a Answer) Verdict {
	target := settledBy(a.Outcome)
	switch {
	case p.State == statemachine.Created:
		return escalateVerdict(EscalationContradiction, fmt.Sprintf(
			"the provider reports payment %s (%s) for a purchase never submitted", orNone(a.PaymentID), a.Outcome))
	case !p.State.Terminal():
		return Verdict{Kind: VerdictApply, Settles: target, Why: fmt.Sprintf("%s: payment %s", a.Outcome, orNone(a.PaymentID))}
	case target == "":
		return Verdict{Kind: VerdictRecord, Why: fmt.Sprintf("a %s answer never overwrites %s", a.Outcome, p.State)}
	case target == p.State:
		return Verdict{Kind: VerdictRecord, Why: fmt.Sprintf("repeats the final state %s", p.State)}
	case a.Source.current():
		return escalateVerdict(EscalationStateDisagreement, fmt.Sprintf(
			"the provider's current view of payment %s is %s, the books say %s", orNone(a.PaymentID), a.Outcome, p.State))
	case target == statemachine.Declined && !a.At.IsZero() && !p.SettledAt.IsZero() && a.At.Before(p.SettledAt):
		// A failed attempt's event can arrive after the success it
		// preceded: older than the settling answer, it is stale.
		return Verdict{Kind: VerdictRecord, Why: fmt.Sprintf(
			"a decline from %s, older than the success settled at %s: stale", a.At.UTC().Format(time.RFC3339), p.SettledAt.UTC().Format(time.RFC3339))}
	default:
		return Verdict{Kind: VerdictConfirm, Why: fmt.Sprintf(
			"a %s answer (%s) contradicts the final state %s: confirm with a status query", a.Outcome, a.Source, p.State)}
	}
}

// settledBy returns the final state an outcome proves, or "".
func settledBy(o provider.Outcome) statemachine.State {
	switch o {
	case provider.Succeeded:
		return statemachine.Succeeded
	case provider.Declined:
		return statemachine.Declined
	}
	return ""
}

func escalateVerdict(r EscalationReason, why string) Verdict {
	return Verdict{Kind: VerdictEscalate, Reason: r, Why: why}
}

func orNone(id string) string {
	if id == "" {
		return "(no id)"
	}
	return id
}
