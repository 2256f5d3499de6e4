package provider

import "time"

// Dispute is a cardholder's challenge of a payment, as the provider shows
// it (Stripe's Dispute object). The card network opens it, never
// payrecon; payrecon records it, judges it and tells the shop. Stripe's
// ids start "du_" (or "dp_").
type Dispute struct {
	// ID is the provider's dispute id, stable across its events.
	ID string `json:"id"`
	// PaymentID is the disputed payment (Stripe: payment_intent), the id
	// a purchase stores as its payment's.
	PaymentID string `json:"payment_id"`
	// ChargeID is the provider's charge under the payment (Stripe:
	// charge), for the operator.
	ChargeID string `json:"charge_id,omitempty"`
	// PurchaseID is the purchase id the disputed payment's metadata names,
	// when the adapter sees it (a listing that expands the payment); ""
	// when it does not or the payment names none. A webhook's dispute
	// carries the payment's id only.
	PurchaseID string `json:"purchase_id,omitempty"`
	// Amount and Currency are the disputed money, which the network
	// withdraws on a chargeback: at most the payment's amount.
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// Reason is the network's reason word (fraudulent, duplicate,
	// product_not_received, ...).
	Reason string `json:"reason,omitempty"`
	// Status is the provider's status word (see the DisputeStatus
	// constants).
	Status string `json:"status"`
	// EvidenceDueBy is when the merchant's evidence is due; zero when the
	// provider gives no date (the dispute is decided).
	EvidenceDueBy time.Time `json:"evidence_due_by,omitzero"`
	// ChargeRefundable is the provider's is_charge_refundable: whether the
	// disputed payment may still be refunded (an inquiry, usually).
	ChargeRefundable bool `json:"charge_refundable,omitempty"`
	// Withdrawn is the disputed money the provider took back from the
	// merchant's balance (fees apart), and Reinstated what it returned:
	// the sums of the dispute's balance transactions, below and above 0.
	Withdrawn  int64 `json:"withdrawn,omitempty"`
	Reinstated int64 `json:"reinstated,omitempty"`
	// Created is when the provider opened the dispute.
	Created time.Time `json:"created,omitzero"`
}

// The statuses of a Stripe dispute, which the fake provider speaks too.
// The warning_ statuses are an inquiry: the issuer asks before any
// chargeback, and no money moves yet.
const (
	DisputeWarningNeedsResponse = "warning_needs_response"
	DisputeWarningUnderReview   = "warning_under_review"
	DisputeWarningClosed        = "warning_closed"
	DisputeNeedsResponse        = "needs_response"
	DisputeUnderReview          = "under_review"
	DisputeWon                  = "won"
	DisputeLost                 = "lost"
	DisputePrevented            = "prevented"
)

// DisputeStatuses lists every status, in the order a dispute may reach
// them (DisputeRank).
var DisputeStatuses = []string{
	DisputeWarningNeedsResponse, DisputeWarningUnderReview, DisputeNeedsResponse, DisputeUnderReview,
	DisputeWarningClosed, DisputePrevented, DisputeWon, DisputeLost,
}

// DisputeRank orders a dispute's statuses by how far along they are: an
// inquiry's before a chargeback's, each one's need of a response before
// its review, every decision last. A dispute only moves forward, so an
// answer of a lower rank than the dispute's is stale. 0 for a status
// this package does not know.
func DisputeRank(status string) int {
	switch status {
	case DisputeWarningNeedsResponse:
		return 1
	case DisputeWarningUnderReview:
		return 2
	case DisputeNeedsResponse:
		return 3
	case DisputeUnderReview:
		return 4
	case DisputeWarningClosed, DisputePrevented, DisputeWon, DisputeLost:
		return 5
	}
	return 0
}

// DisputeInquiry reports whether status is an inquiry's (warning_...): the
// issuer asks, and no chargeback has withdrawn money.
func DisputeInquiry(status string) bool {
	switch status {
	case DisputeWarningNeedsResponse, DisputeWarningUnderReview, DisputeWarningClosed:
		return true
	}
	return false
}

// The event types about disputes (Stripe's names, which the fake provider
// speaks too). Each carries the dispute as it is after the change.
const (
	EventDisputeCreated         = "charge.dispute.created"
	EventDisputeUpdated         = "charge.dispute.updated"
	EventDisputeClosed          = "charge.dispute.closed"
	EventDisputeFundsWithdrawn  = "charge.dispute.funds_withdrawn"
	EventDisputeFundsReinstated = "charge.dispute.funds_reinstated"
)

// DisputeEventTypes lists the dispute event types.
var DisputeEventTypes = []string{
	EventDisputeCreated, EventDisputeUpdated, EventDisputeClosed,
	EventDisputeFundsWithdrawn, EventDisputeFundsReinstated,
}
