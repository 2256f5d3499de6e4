package fakeprovider

import (
	"sort"

	"github.com/payrecon/payrecon/provider"
)

// What tests read of the ledger: its charges, the money taken, the
// calls received.

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
