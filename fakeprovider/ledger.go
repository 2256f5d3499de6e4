package fakeprovider

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// ChargeOutside records a charge payrecon did not make, as a dashboard or
// another system would make it: no idempotency key, Charge.Outside set,
// the purchase id (if any) and customer in its metadata, created now in
// c.Status (default succeeded), which it keeps until SetStatus moves it.
// A second charge for a purchase is ChargeOutside with the purchase's id;
// a charge with another amount, the same with that amount.
//
// It is not a provider call: it counts in no Calls, takes none of the
// purchase's fault draws or scripted faults, and its webhook events take
// none of the purchase's webhook draws or scripts (they draw from the
// payment id's source). A Server with webhooks announces it, as any ledger
// change, after its next create or at its next Tick; Server.ChargeOutside
// announces it at once, or never.
//
// It panics if c is invalid (amount not positive, no currency, an unknown
// status): that is a bug in the test.
func (f *Fake) ChargeOutside(c OutsideCharge) Charge {
	ch, err := f.chargeOutside(c, false)
	if err != nil {
		panic(err)
	}
	return ch
}

// chargeOutside is ChargeOutside, with silent: its creation is never
// announced.
func (f *Fake) chargeOutside(c OutsideCharge, silent bool) (Charge, error) {
	c, err := c.validate()
	if err != nil {
		return Charge{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	e := &entry{seq: f.seq, Charge: Charge{
		ID:          f.newID("pi_", f.seq),
		PurchaseID:  c.PurchaseID,
		Customer:    c.Customer,
		Amount:      c.Amount,
		Currency:    c.Currency,
		Status:      c.Status,
		FinalStatus: c.Status,
		CreatedAt:   f.cfg.Now(),
		Outside:     true,
	}}
	if c.Status == StatusRequiresPaymentMethod {
		e.DeclineCode = DeclineCode
	}
	f.add(e, silent)
	return e.Charge, nil
}

// SetStatus moves the charge paymentID to status now, whatever its
// status: a late approval after a decline (requires_payment_method to
// succeeded), a cancellation, a success turning out declined. The status
// is then final for the simulator (Status and FinalStatus alike): a
// settlement still to come is called off, after the charge has settled
// if its time had come. Moving a charge to the status it has changes
// nothing but calls off its settlement.
//
// Status, Search, List and the Ledger see the move at once. A Server with
// webhooks announces it, as any ledger change, after its next create or
// at its next Tick; Server.SetStatus announces it at once, or never. It is
// not a provider call: it counts in no Calls.
//
// The error wraps ErrNoSuchPayment for an unknown id and ErrUnknownStatus
// for a status that is none of the Status* constants.
func (f *Fake) SetStatus(paymentID, status string) (Charge, error) {
	return f.setStatus(paymentID, status, false)
}

// setStatus is SetStatus, with silent: the move is never announced.
func (f *Fake) setStatus(paymentID, status string, silent bool) (Charge, error) {
	if !slices.Contains(statuses, status) {
		return Charge{}, fmt.Errorf("fakeprovider: set status of %s: status %q: %w (want one of %s)",
			paymentID, status, ErrUnknownStatus, strings.Join(statuses, ", "))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.byID[paymentID]
	if e == nil {
		return Charge{}, fmt.Errorf("fakeprovider: set status of %s: %w", paymentID, ErrNoSuchPayment)
	}
	now := f.cfg.Now()
	f.settle(e, now)
	e.FinalStatus = status // calls off a settlement to come
	if e.Status == status {
		return e.Charge, nil
	}
	e.Status, e.MovedAt = status, now
	if status == StatusRequiresPaymentMethod && e.DeclineCode == "" {
		e.DeclineCode = DeclineCode
	}
	f.record(e, now, false, silent)
	return e.Charge, nil
}

// Ledger is everything the fake holds, for tests to count real charges,
// refunds, disputes and calls; a Server serves it as JSON at GET
// /_fake/ledger.
type Ledger struct {
	// Account is the connected account whose ledger it is (Fake.Account);
	// "" and left out of the JSON for the platform's.
	Account string `json:"account,omitempty"`
	// Charges is the ledger, oldest first, settled as of now.
	Charges []LedgerCharge `json:"charges"`
	// Refunds are the refunds of the ledger's charges, oldest first,
	// settled as of now.
	Refunds []LedgerRefund `json:"refunds"`
	// Disputes are the disputes of the ledger's charges, oldest first, as
	// they are now.
	Disputes []LedgerDispute `json:"disputes"`
	// CreateCalls counts the create calls received by idempotency key
	// (replays and failed calls included; "" for keyless creates).
	CreateCalls map[string]int `json:"create_calls"`
	// RefundCreateCalls counts the refund create calls received by
	// idempotency key, as CreateCalls.
	RefundCreateCalls map[string]int `json:"refund_create_calls"`
	// Calls counts the calls received by operation (Fake.Calls).
	Calls LedgerCalls `json:"calls"`
}

// LedgerCharge is one charge of a Ledger.
type LedgerCharge struct {
	PaymentID   string `json:"payment_id"`
	PurchaseID  string `json:"purchase_id"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Status      string `json:"status"`
	FinalStatus string `json:"final_status"`
	// Created is the creation time, in JSON as RFC 3339 with nanoseconds.
	Created        time.Time `json:"created"`
	IdempotencyKey string    `json:"idempotency_key"`
	// OffSession: created off-session, with no customer present (see
	// Charge.OffSession).
	OffSession bool `json:"off_session"`
	// Outside: made by ChargeOutside, not by a create.
	Outside bool `json:"outside"`
}

// MoneyTaken reports whether the charge took the customer's money, as
// Charge.MoneyTaken does: its final status is succeeded.
func (c LedgerCharge) MoneyTaken() bool { return c.FinalStatus == StatusSucceeded }

// LedgerRefund is one refund of a Ledger.
type LedgerRefund struct {
	// ID is the provider's refund id ("re_…"); PaymentID the refunded
	// payment's.
	ID        string `json:"id"`
	PaymentID string `json:"payment_id"`
	// RefundID and PurchaseID are payrecon's, from the refund's metadata.
	RefundID    string `json:"refund_id"`
	PurchaseID  string `json:"purchase_id"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Status      string `json:"status"`
	FinalStatus string `json:"final_status"`
	// Reason is the reason word the refund was asked with; FailureReason
	// why it failed, if it did.
	Reason        string `json:"reason"`
	FailureReason string `json:"failure_reason"`
	// Created is the creation time, in JSON as RFC 3339 with nanoseconds.
	Created        time.Time `json:"created"`
	IdempotencyKey string    `json:"idempotency_key"`
	// Outside: made by RefundOutside, not by a refund create.
	Outside bool `json:"outside"`
}

// MoneyReturned reports whether the refund returned the money, as
// Refund.MoneyReturned does: its final status is succeeded.
func (r LedgerRefund) MoneyReturned() bool { return r.FinalStatus == RefundStatusSucceeded }

// LedgerDispute is one dispute of a Ledger.
type LedgerDispute struct {
	// ID is the provider's dispute id ("du_…"); PaymentID the disputed
	// payment's, ChargeID its charge's, PurchaseID the purchase its
	// metadata names.
	ID         string `json:"id"`
	PaymentID  string `json:"payment_id"`
	ChargeID   string `json:"charge_id"`
	PurchaseID string `json:"purchase_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	Reason     string `json:"reason"`
	Status     string `json:"status"`
	// EvidenceDueBy is when the evidence is due (see
	// DisputeEvidenceWindow).
	EvidenceDueBy time.Time `json:"evidence_due_by"`
	// ChargeRefundable is Stripe's is_charge_refundable: true for an
	// inquiry, false once a chargeback.
	ChargeRefundable bool `json:"charge_refundable"`
	// Withdrawn is the amount taken back from the merchant, Reinstated
	// what came back (fees apart).
	Withdrawn  int64 `json:"withdrawn"`
	Reinstated int64 `json:"reinstated"`
	// Created is the opening time, in JSON as RFC 3339 with nanoseconds.
	Created time.Time `json:"created"`
}

// LedgerCalls counts the calls of each provider operation, including
// those that failed. Over HTTP, every request counts once: each page of a
// list is a List (or RefundList, DisputeList) call, each create request a
// Create (or RefundCreate) call.
type LedgerCalls struct {
	Create int `json:"create"`
	Status int `json:"status"`
	Search int `json:"search"`
	List   int `json:"list"`
	// The refund calls: CreateRefund, GetRefund, and both listings of
	// refunds.
	RefundCreate int `json:"refund_create"`
	RefundGet    int `json:"refund_get"`
	RefundList   int `json:"refund_list"`
	// DisputeList counts the pages of ListDisputes and GET /v1/disputes,
	// DisputeGet the GET /v1/disputes/{id} (OpDisputeGet).
	DisputeList int `json:"dispute_list"`
	DisputeGet  int `json:"dispute_get"`
}

// Ledger returns a copy of the ledger, charges, refunds and disputes,
// settled as of now, with the calls received.
func (f *Fake) Ledger() Ledger {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.cfg.Now()
	l := Ledger{
		Account:           f.account,
		Charges:           make([]LedgerCharge, 0, len(f.ledger)),
		Refunds:           make([]LedgerRefund, 0, len(f.refunds)),
		Disputes:          make([]LedgerDispute, 0, len(f.disputes)),
		CreateCalls:       maps.Clone(f.keyCalls),
		RefundCreateCalls: maps.Clone(f.refundKeyCalls),
		Calls: LedgerCalls{
			Create:       f.calls[provider.OpCreate],
			Status:       f.calls[provider.OpStatus],
			Search:       f.calls[provider.OpSearch],
			List:         f.calls[provider.OpList],
			RefundCreate: f.calls[provider.OpRefundCreate],
			RefundGet:    f.calls[provider.OpRefundGet],
			RefundList:   f.calls[provider.OpRefundList],
			DisputeList:  f.calls[provider.OpDisputeList],
			DisputeGet:   f.calls[OpDisputeGet],
		},
	}
	for _, e := range f.ledger {
		f.settle(e, now)
		l.Charges = append(l.Charges, LedgerCharge{
			PaymentID:      e.ID,
			PurchaseID:     e.PurchaseID,
			Amount:         e.Amount,
			Currency:       e.Currency,
			Status:         e.Status,
			FinalStatus:    e.FinalStatus,
			Created:        e.CreatedAt,
			IdempotencyKey: e.IdempotencyKey,
			OffSession:     e.OffSession,
			Outside:        e.Outside,
		})
	}
	for _, e := range f.refunds {
		f.settleRefund(e, now)
		l.Refunds = append(l.Refunds, LedgerRefund{
			ID:             e.ID,
			PaymentID:      e.PaymentID,
			RefundID:       e.RefundID,
			PurchaseID:     e.PurchaseID,
			Amount:         e.Amount,
			Currency:       e.Currency,
			Status:         e.Status,
			FinalStatus:    e.FinalStatus,
			Reason:         e.Reason,
			FailureReason:  e.FailureReason,
			Created:        e.CreatedAt,
			IdempotencyKey: e.IdempotencyKey,
			Outside:        e.Outside,
		})
	}
	for _, e := range f.disputes {
		d := e.dispute()
		l.Disputes = append(l.Disputes, LedgerDispute{
			ID:               d.ID,
			PaymentID:        d.PaymentID,
			ChargeID:         d.ChargeID,
			PurchaseID:       d.PurchaseID,
			Amount:           d.Amount,
			Currency:         d.Currency,
			Reason:           d.Reason,
			Status:           d.Status,
			EvidenceDueBy:    d.EvidenceDueBy,
			ChargeRefundable: d.ChargeRefundable,
			Withdrawn:        d.Withdrawn,
			Reinstated:       d.Reinstated,
			Created:          d.Created,
		})
	}
	return l
}
