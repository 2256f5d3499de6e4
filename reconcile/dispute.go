package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// Dispute is one provider dispute of a purchase's payment: its own
// process (statemachine.Dispute), opened by the card network and moved by
// the provider's answers, never by payrecon's calls. It never changes its
// purchase's state: the purchase stays succeeded, and the dispute says
// what became of the money.
type Dispute struct {
	ID                string // payrecon's id, "dsp_…"
	ProviderDisputeID string // the provider's, "du_…"
	PurchaseID        string
	// Account is the provider account of the dispute's purchase, as the
	// store reads it with the dispute; "" for the platform's own. Inserts
	// ignore it.
	Account string
	// PaymentID is the disputed payment: the purchase's own.
	PaymentID string
	Amount    int64  // minor units, > 0
	Currency  string // the payment's currency
	Reason    string // the network's reason word

	State   statemachine.State // a statemachine.Dispute state
	Version int64

	// ProviderStatus is the provider's status word as last applied;
	// Inquiry reports whether it is an inquiry's (no chargeback yet).
	ProviderStatus string
	Inquiry        bool
	// EvidenceDueBy is when the merchant's evidence is due; zero when the
	// provider gives none.
	EvidenceDueBy time.Time
	// ChargeRefundable is the provider's word that the payment may still
	// be refunded despite the dispute.
	ChargeRefundable bool
	// Withdrawn and Reinstated are the disputed money the provider took
	// from the merchant's balance and gave back, fees apart.
	Withdrawn  int64
	Reinstated int64
	// ProviderUpdatedAt is the provider's time of the newest answer
	// applied (an event's creation, a listing's read): an older answer
	// changes nothing.
	ProviderUpdatedAt time.Time

	CreatedAt time.Time
	UpdatedAt time.Time
	// ClosedAt is when it reached a final state; zero while open.
	ClosedAt time.Time
}

// Open reports whether the dispute is not decided yet.
func (d Dispute) Open() bool { return !statemachine.Dispute.Terminal(d.State) }

// Chargeback reports whether the dispute is a chargeback (not an inquiry)
// still waiting for the merchant's evidence: the case an operator must
// answer before EvidenceDueBy.
func (d Dispute) Chargeback() bool { return !d.Inquiry && d.State == statemachine.Open }

// BlocksRefund reports whether the dispute forbids a refund of its
// payment: it is open and the provider does not let the payment be
// refunded (a chargeback), or it was lost (the network returned the money
// already).
func (d Dispute) BlocksRefund() bool {
	return (d.Open() && !d.ChargeRefundable) || d.State == statemachine.Lost
}

// Returned is the money the dispute returned to the cardholder for good:
// its amount once lost, nothing otherwise.
func (d Dispute) Returned() int64 {
	if d.State == statemachine.Lost {
		return d.Amount
	}
	return 0
}

// blockingDispute returns the dispute of payment paymentID of purchase
// purchaseID that forbids a refund (BlocksRefund), or nil.
func blockingDispute(ctx context.Context, tx Tx, purchaseID, paymentID string) (*Dispute, error) {
	ds, err := tx.ListDisputes(ctx, purchaseID)
	if err != nil {
		return nil, err
	}
	for _, d := range ds {
		if d.PaymentID == paymentID && d.BlocksRefund() {
			return &d, nil
		}
	}
	return nil, nil
}

// refundBlockedBy returns the open dispute that holds refund r back now,
// or nil. A lost dispute does not: the refund is sent, and the provider
// refuses it (it fails, nothing refunded), so that it ends and the shop
// is told instead of waiting for ever.
func (s *Service) refundBlockedBy(ctx context.Context, r Refund) (*Dispute, error) {
	var d *Dispute
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		d, err = blockingDispute(ctx, tx, r.PurchaseID, r.PaymentID)
		return err
	})
	if d != nil && !d.Open() {
		d = nil
	}
	return d, err
}

// disputeBlockText says why dispute d forbids a refund, for the refusal.
func disputeBlockText(d Dispute) string {
	if d.State == statemachine.Lost {
		return fmt.Sprintf("payment %s lost dispute %s: the card network returned %s to the cardholder already",
			d.PaymentID, d.ProviderDisputeID, provider.FormatAmount(d.Amount, d.Currency))
	}
	return fmt.Sprintf("payment %s has open dispute %s (%s, %s): the card network holds the money until it is decided",
		d.PaymentID, d.ProviderDisputeID, d.ProviderStatus, provider.FormatAmount(d.Amount, d.Currency))
}
