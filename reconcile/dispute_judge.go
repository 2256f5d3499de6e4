package reconcile

import (
	"fmt"
	"strings"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// DisputeBooks is what the books say about the payment a dispute answer
// names, for JudgeDispute.
type DisputeBooks struct {
	// Owner is the purchase whose payment the answer names; nil when the
	// books give the payment to no purchase.
	Owner *Purchase
	// Refunded is what the payment's succeeded refunds returned, and
	// Pending what its refunds not final yet may return.
	Refunded int64
	Pending  int64
	// OtherLost is what the payment's other disputes, lost, returned.
	OtherLost int64
}

// DisputeVerdictKind is what JudgeDispute decides about a dispute answer.
type DisputeVerdictKind int

// The kinds of dispute verdict.
const (
	// DisputeStale: the answer repeats or predates what the books hold;
	// nothing changes.
	DisputeStale DisputeVerdictKind = iota
	// DisputeApply: the answer is new and agrees with the books: the
	// dispute is stored or moved to Verdict.To. A Finding may come with
	// it (a lost dispute that, with the refunds, returns more than the
	// payment took): the fact is applied and reported.
	DisputeApply
	// DisputeReject: the answer disagrees with the books: its Finding is
	// recorded and nothing is applied.
	DisputeReject
)

// DisputeVerdict is JudgeDispute's decision.
type DisputeVerdict struct {
	Kind DisputeVerdictKind
	// To is the dispute's state after the answer, for DisputeApply.
	To statemachine.State
	// Finding is the finding to record, "" for none.
	Finding FindingKind
	// Reason says why, for the transition's evidence, the finding and
	// the logs.
	Reason string
}

// String says the verdict for logs: its kind, its finding and why.
func (v DisputeVerdict) String() string {
	kind := map[DisputeVerdictKind]string{DisputeStale: "stale", DisputeApply: "apply", DisputeReject: "reject"}[v.Kind]
	if v.Finding != "" {
		kind += " (" + string(v.Finding) + ")"
	}
	return kind + ": " + v.Reason
}

// DisputeStateOf is the dispute state a provider status means: open while
// the merchant may answer, evidence submitted while the issuer reviews,
// then won, lost or closed (an inquiry closed, or a dispute prevented).
// ok is false for a status payrecon does not know.
func DisputeStateOf(status string) (st statemachine.State, ok bool) {
	switch status {
	case provider.DisputeWarningNeedsResponse, provider.DisputeNeedsResponse:
		return statemachine.Open, true
	case provider.DisputeWarningUnderReview, provider.DisputeUnderReview:
		return statemachine.EvidenceSubmitted, true
	case provider.DisputeWon:
		return statemachine.Won, true
	case provider.DisputeLost:
		return statemachine.Lost, true
	case provider.DisputeWarningClosed, provider.DisputePrevented:
		return statemachine.Closed, true
	}
	return "", false
}

// JudgeDispute is the one judge of every answer about a dispute, whether
// a webhook, the event log or the audit's listing brought it: cur is the
// dispute the books hold (nil for none yet), books what they say about
// the payment the answer names, d the answer, account the provider
// account it comes from (the one its event happened in, or the one the
// audit listed it in; provider.PlatformAccount for the platform's own),
// and at the provider's time of it (an event's creation; the listing's
// read for the audit).
//
// A dispute of a payment no purchase owns, or whose owner is a purchase
// of another account than the answer's, is foreign: rejected with a
// finding, whatever the payment's metadata names, since the platform
// chooses purchase ids and two accounts may hold payments naming one. A
// dispute linked to another purchase than the payment's owner or the one
// its payment's metadata names, one in another currency than its payment,
// or one of a payment the books hold declined, is rejected with a
// finding: nothing is applied. So is a new dispute whose amount exceeds what the payment kept after its
// succeeded refunds and lost disputes. A status that goes backwards (a
// stale needs_response after won), an answer of the same status that
// changes nothing, or one older than the last applied, is stale.
// Otherwise the answer applies: the status moves forward, the funds
// withdrawn and reinstated only grow, and a lost dispute that with the
// refunds, pending ones included, returns more than the payment took is
// applied with a finding.
func JudgeDispute(cur *Dispute, books DisputeBooks, d provider.Dispute, account string, at time.Time) DisputeVerdict {
	reject := func(kind FindingKind, format string, args ...any) DisputeVerdict {
		return DisputeVerdict{Kind: DisputeReject, Finding: kind, Reason: fmt.Sprintf(format, args...)}
	}
	p := books.Owner
	switch {
	case p == nil && cur != nil:
		return reject(FindingDisputeMismatch, "dispute %s names payment %q, which no purchase owns; the books link it to payment %s of purchase %s",
			d.ID, d.PaymentID, cur.PaymentID, cur.PurchaseID)
	case p == nil:
		return reject(FindingForeignDispute, "dispute %s is about payment %q, which no purchase owns", d.ID, d.PaymentID)
	case p.Account != account:
		return reject(FindingForeignDispute, "dispute %s is about payment %s in account %s; the books give it to purchase %s of account %s",
			d.ID, d.PaymentID, accountName(account), p.ID, accountName(p.Account))
	case cur != nil && (cur.PurchaseID != p.ID || cur.PaymentID != d.PaymentID):
		return reject(FindingDisputeMismatch, "dispute %s names payment %s of purchase %s; the books link it to payment %s of purchase %s",
			d.ID, d.PaymentID, p.ID, cur.PaymentID, cur.PurchaseID)
	case d.PurchaseID != "" && d.PurchaseID != p.ID:
		return reject(FindingDisputeMismatch, "dispute %s is about payment %s of purchase %s, but the payment's metadata names purchase %q",
			d.ID, d.PaymentID, p.ID, d.PurchaseID)
	case !strings.EqualFold(d.Currency, p.Currency):
		return reject(FindingDisputeMismatch, "dispute %s is in %s, its payment %s in %s", d.ID, strings.ToUpper(d.Currency), d.PaymentID, strings.ToUpper(p.Currency))
	case p.State == statemachine.Declined:
		return reject(FindingDisputeMismatch, "dispute %s is about payment %s of purchase %s, which the books hold declined: the payment took money", d.ID, d.PaymentID, p.ID)
	}
	to, known := DisputeStateOf(d.Status)
	if !known {
		return DisputeVerdict{Kind: DisputeStale, Reason: fmt.Sprintf("dispute %s: unknown status %q", d.ID, d.Status)}
	}
	kept := p.Amount - books.Refunded - books.OtherLost
	if cur == nil && d.Amount > kept {
		// A pending refund may still fail: only money returned for good
		// makes a new dispute too large.
		return reject(FindingDisputeExceeds, "dispute %s of %s exceeds what payment %s kept: %s of %s after refunds and lost disputes",
			d.ID, provider.FormatAmount(d.Amount, d.Currency), d.PaymentID, provider.FormatAmount(max(kept, 0), p.Currency), provider.FormatAmount(p.Amount, p.Currency))
	}
	if cur != nil {
		newRank, curRank := provider.DisputeRank(d.Status), provider.DisputeRank(cur.ProviderStatus)
		grows := d.Withdrawn > cur.Withdrawn || d.Reinstated > cur.Reinstated
		switch {
		case newRank < curRank:
			return DisputeVerdict{Kind: DisputeStale, Reason: fmt.Sprintf("dispute %s: %s is behind %s", d.ID, d.Status, cur.ProviderStatus)}
		case newRank == curRank && d.Status != cur.ProviderStatus:
			// Two decisions of one rank (won after lost): the first
			// applied stands, and a decision never changes.
			return DisputeVerdict{Kind: DisputeStale, Reason: fmt.Sprintf("dispute %s: %s after %s changes nothing", d.ID, d.Status, cur.ProviderStatus)}
		case newRank == curRank && !grows && d.EvidenceDueBy.Equal(cur.EvidenceDueBy) &&
			d.ChargeRefundable == cur.ChargeRefundable && (d.Reason == "" || d.Reason == cur.Reason):
			return DisputeVerdict{Kind: DisputeStale, Reason: fmt.Sprintf("dispute %s: %s again, nothing new", d.ID, d.Status)}
		case newRank == curRank && !grows && at.Before(cur.ProviderUpdatedAt):
			// Ties apply: provider times are whole seconds, and two
			// changes in one second must not lose the second.
			return DisputeVerdict{Kind: DisputeStale, Reason: fmt.Sprintf("dispute %s: %s older than the last answer applied", d.ID, d.Status)}
		}
		if statemachine.Dispute.Terminal(cur.State) {
			to = cur.State // a decided dispute's funds may still move
		}
	}
	v := DisputeVerdict{Kind: DisputeApply, To: to, Reason: fmt.Sprintf("dispute %s %s", d.ID, d.Status)}
	if to == statemachine.Lost && (cur == nil || cur.State != statemachine.Lost) && d.Amount > kept-books.Pending {
		v.Finding = FindingDisputeExceeds
		v.Reason = fmt.Sprintf("dispute %s lost: %s returned to the cardholder, and payment %s kept only %s of %s after refunds, pending ones included, and lost disputes",
			d.ID, provider.FormatAmount(d.Amount, d.Currency), d.PaymentID, provider.FormatAmount(max(kept-books.Pending, 0), p.Currency), provider.FormatAmount(p.Amount, p.Currency))
	}
	return v
}
