package fakeprovider

import (
	"sort"

	"github.com/payrecon/payrecon/provider"
)

// What tests read of the ledger: its charges, the money taken, its
// refunds, the money returned, the calls received.

// Charges returns a copy of the ledger, oldest first, with processing
// charges settled as of now.
func (f *Fake) Charges() []Charge {
	return f.charges(func(Charge) bool { return true })
}

// ChargesFor returns the charges made for purchaseID, oldest first.
func (f *Fake) ChargesFor(purchaseID string) []Charge {
	return f.charges(func(c Charge) bool { return c.PurchaseID == purchaseID })
}

func (f *Fake) charges(keep func(Charge) bool) []Charge {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.cfg.Now()
	var out []Charge
	for _, e := range f.ledger {
		f.settle(e, now)
		if keep(e.Charge) {
			out = append(out, e.Charge)
		}
	}
	return out
}

// MoneyTaken counts the charges for purchaseID that took money (see
// Charge.MoneyTaken): the number tests compare with 1. Declines are not
// counted.
func (f *Fake) MoneyTaken(purchaseID string) int {
	n := 0
	for _, c := range f.ChargesFor(purchaseID) {
		if c.MoneyTaken() {
			n++
		}
	}
	return n
}

// CountSucceeded counts the charges for purchaseID whose status is
// succeeded now; unlike MoneyTaken, it omits processing charges.
func (f *Fake) CountSucceeded(purchaseID string) int {
	n := 0
	for _, c := range f.ChargesFor(purchaseID) {
		if c.Status == StatusSucceeded {
			n++
		}
	}
	return n
}

// DoubleCharged returns, sorted, the purchases with more than one charge
// that took money, outside charges included (charges with no purchase id
// are not counted).
func (f *Fake) DoubleCharged() []string {
	taken := make(map[string]int)
	for _, c := range f.Charges() {
		if c.MoneyTaken() && c.PurchaseID != "" {
			taken[c.PurchaseID]++
		}
	}
	var out []string
	for p, n := range taken {
		if n > 1 {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// Calls returns how many calls of op the fake has received, including
// those that failed.
func (f *Fake) Calls(op provider.Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// CreateCalls returns how many Create calls the fake has received with
// idempotency key key, including replays and failed calls.
func (f *Fake) CreateCalls(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keyCalls[key]
}

// Refunds returns a copy of the ledger's refunds, oldest first, with
// pending refunds settled as of now.
func (f *Fake) Refunds() []Refund {
	return f.refundsWhere(func(Refund) bool { return true })
}

// RefundsOf returns the refunds of payment paymentID (the provider's
// "pi_…" id), oldest first, failed ones included.
func (f *Fake) RefundsOf(paymentID string) []Refund {
	return f.refundsWhere(func(r Refund) bool { return r.PaymentID == paymentID })
}

// RefundsFor returns the refunds whose metadata names payrecon's refund
// refundID, oldest first, failed ones included: more than one is a
// refund made twice.
func (f *Fake) RefundsFor(refundID string) []Refund {
	return f.refundsWhere(func(r Refund) bool { return r.RefundID == refundID })
}

func (f *Fake) refundsWhere(keep func(Refund) bool) []Refund {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.cfg.Now()
	var out []Refund
	for _, e := range f.refunds {
		f.settleRefund(e, now)
		if keep(e.Refund) {
			out = append(out, e.Refund)
		}
	}
	return out
}

// Refunded returns how much of payment paymentID its refunds returned:
// the sum of those that returned money (Refund.MoneyReturned), pending
// ones that will succeed included.
func (f *Fake) Refunded(paymentID string) int64 {
	var sum int64
	for _, r := range f.RefundsOf(paymentID) {
		if r.MoneyReturned() {
			sum += r.Amount
		}
	}
	return sum
}

// NetAmount returns what payment paymentID keeps of the customer's money:
// its amount if it took money (Charge.MoneyTaken), less Refunded. It is
// negative if refunds returned more than the payment took (a refund moved
// by SetRefundStatus), and 0 for an unknown payment.
func (f *Fake) NetAmount(paymentID string) int64 {
	f.mu.Lock()
	e := f.byID[paymentID]
	var taken int64
	if e != nil {
		f.settle(e, f.cfg.Now())
		if e.MoneyTaken() {
			taken = e.Amount
		}
	}
	f.mu.Unlock()
	if e == nil {
		return 0
	}
	return taken - f.Refunded(paymentID)
}

// NetCharges counts the charges for purchaseID that still hold some of
// the customer's money (NetAmount above 0): a double charge of which one
// was refunded in full counts 1, the number tests compare with 1 once
// refunds have run.
func (f *Fake) NetCharges(purchaseID string) int {
	n := 0
	for _, c := range f.ChargesFor(purchaseID) {
		if f.NetAmount(c.ID) > 0 {
			n++
		}
	}
	return n
}

// RefundCreateCalls returns how many CreateRefund calls the fake has
// received with idempotency key key, including replays and failed calls.
func (f *Fake) RefundCreateCalls(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refundKeyCalls[key]
}
