package fakeprovider

import (
	"math/rand/v2"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// The disputes' events and wire format: Stripe's Dispute object, and the
// charge.dispute.* events that carry it.

// logDispute logs an event of each of types, in order, for e's change at
// at: each carries e as it is after the change, and is created a second
// after the dispute's previous event at least, so that their times order
// them. A dispute's
// events carry no idempotency key: no request of the merchant made them.
// Call with f.mu held.
func (f *Fake) logDispute(e *disputeEntry, types []string, at time.Time) []*loggedEvent {
	obj := renderDispute(e, nil)
	var out []*loggedEvent
	for _, typ := range types {
		created := e.eventTime(at)
		info := WebhookEvent{Type: typ, PaymentID: e.paymentID, PurchaseID: e.purchaseID, DisputeID: e.id, Status: e.status, Created: created}
		d := disputeOfObject(obj)
		ev := provider.Event{Outcome: provider.Pending, PaymentID: d.PaymentID, Amount: d.Amount, Currency: d.Currency, Dispute: &d}
		out = append(out, f.logEvent(info, obj, "", ev))
	}
	return out
}

// disputeOfObject is the neutral dispute of o, a Dispute as an event
// carries it, as provider/stripe translates it: times in UTC seconds, no
// purchase id (the PaymentIntent is not expanded).
func disputeOfObject(o disputeObject) provider.Dispute {
	d := provider.Dispute{
		ID:               o.ID,
		ChargeID:         o.Charge,
		Amount:           o.Amount,
		Currency:         o.Currency,
		Reason:           o.Reason,
		Status:           o.Status,
		ChargeRefundable: o.IsChargeRefundable,
		Created:          time.Unix(o.Created, 0).UTC(),
	}
	if id, ok := o.PaymentIntent.(string); ok {
		d.PaymentID = id
	}
	if o.EvidenceDetails.DueBy != nil && *o.EvidenceDetails.DueBy > 0 {
		d.EvidenceDueBy = time.Unix(*o.EvidenceDetails.DueBy, 0).UTC()
	}
	for _, t := range o.BalanceTransactions {
		if t.Amount < 0 {
			d.Withdrawn -= t.Amount
		} else {
			d.Reinstated += t.Amount
		}
	}
	return d
}

// disputeSalt separates the webhook draws of disputes' events from the
// others of the same seed.
const disputeSalt = 0x64697370_75746573 // "disputes"

// disputeRNG returns the fault source of the events of the dispute id:
// of its own, the same in every fake. Call with w.mu held.
func (w *webhooks) disputeRNG(id string) *rand.Rand {
	return w.source(w.disputeRNGs, w.s.fake.localID(id), webhookSalt^disputeSalt)
}

// emitDispute makes the events of a dispute's change, each with its own
// draws from the dispute's source. A dispute is no request of payrecon's:
// its events take no scripted fault, and none gets a stale follower; an
// event of an open dispute may be reordered behind the dispute's next.
// Call with w.mu held.
func (w *webhooks) emitDispute(ch change) {
	final := disputeClosed(ch.status)
	for _, logged := range ch.events {
		u, _ := w.draw(nil, "", false, func() *rand.Rand { return w.disputeRNG(ch.dispute) })
		w.send(w.adopt(logged), ch.dispute, final, u, "", nil)
	}
}

// disputeObject is a Dispute as Stripe renders it, with the fields a fake
// can fill.
type disputeObject struct {
	ID                  string               `json:"id"`
	Object              string               `json:"object"`
	Amount              int64                `json:"amount"`
	BalanceTransactions []balanceTransaction `json:"balance_transactions"`
	Charge              string               `json:"charge"`
	Created             int64                `json:"created"`
	Currency            string               `json:"currency"`
	EvidenceDetails     evidenceDetails      `json:"evidence_details"`
	IsChargeRefundable  bool                 `json:"is_charge_refundable"`
	Livemode            bool                 `json:"livemode"`
	Metadata            map[string]string    `json:"metadata"`
	// PaymentIntent is the PaymentIntent's id, or the PaymentIntent
	// itself when expanded.
	PaymentIntent any    `json:"payment_intent"`
	Reason        string `json:"reason"`
	Status        string `json:"status"`
}

// evidenceDetails is a Dispute's evidence_details.
type evidenceDetails struct {
	DueBy           *int64 `json:"due_by"`
	HasEvidence     bool   `json:"has_evidence"`
	PastDue         bool   `json:"past_due"`
	SubmissionCount int64  `json:"submission_count"`
}

// balanceTransaction is a BalanceTransaction as Stripe renders a
// dispute's: an adjustment of the balance, withdrawn or reinstated.
type balanceTransaction struct {
	ID                string      `json:"id"`
	Object            string      `json:"object"`
	Amount            int64       `json:"amount"`
	AvailableOn       int64       `json:"available_on"`
	Created           int64       `json:"created"`
	Currency          string      `json:"currency"`
	Description       string      `json:"description"`
	Fee               int64       `json:"fee"`
	FeeDetails        []feeDetail `json:"fee_details"`
	Net               int64       `json:"net"`
	ReportingCategory string      `json:"reporting_category"`
	Source            string      `json:"source"`
	Status            string      `json:"status"`
	Type              string      `json:"type"`
}

// feeDetail is one fee of a balance transaction.
type feeDetail struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Description string `json:"description"`
	Type        string `json:"type"`
}

// disputeList is a list of Disputes as Stripe renders it.
type disputeList struct {
	Object  string          `json:"object"`
	URL     string          `json:"url"`
	HasMore bool            `json:"has_more"`
	Data    []disputeObject `json:"data"`
}

// renderDispute renders e as Stripe's Dispute, its payment_intent the id,
// or pi expanded when not nil.
func renderDispute(e *disputeEntry, pi *paymentIntent) disputeObject {
	charge := latestCharge(e.paymentID)
	due := e.dueBy.Unix()
	o := disputeObject{
		ID:                  e.id,
		Object:              "dispute",
		Amount:              e.amount,
		BalanceTransactions: []balanceTransaction{},
		Charge:              charge,
		Created:             e.created.Unix(),
		Currency:            e.currency,
		EvidenceDetails:     evidenceDetails{DueBy: &due},
		IsChargeRefundable:  e.refundable,
		Metadata:            map[string]string{},
		PaymentIntent:       e.paymentID,
		Reason:              e.reason,
		Status:              e.status,
	}
	if pi != nil {
		o.PaymentIntent = pi
	}
	for _, t := range e.txns {
		bt := balanceTransaction{
			ID:                t.id,
			Object:            "balance_transaction",
			Amount:            t.amount,
			AvailableOn:       t.created.Unix(),
			Created:           t.created.Unix(),
			Currency:          e.currency,
			Description:       "Chargeback withdrawal for " + charge,
			Fee:               t.fee,
			FeeDetails:        []feeDetail{},
			Net:               t.amount - t.fee,
			ReportingCategory: "dispute",
			Source:            e.id,
			Status:            "available",
			Type:              "adjustment",
		}
		if t.amount > 0 {
			bt.Description, bt.ReportingCategory = "Chargeback reversal for "+charge, "dispute_reversal"
		}
		if t.fee != 0 {
			bt.FeeDetails = append(bt.FeeDetails, feeDetail{Amount: t.fee, Currency: e.currency, Description: "Dispute fee", Type: "stripe_fee"})
		}
		o.BalanceTransactions = append(o.BalanceTransactions, bt)
	}
	return o
}
