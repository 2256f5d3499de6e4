package reconcile

import (
	"cmp"
	"slices"
	"strings"

	"github.com/payrecon/payrecon/provider"
)

// Money is an amount in a currency's minor unit.
type Money struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"` // lower case, as Stripe writes it
}

// String writes m with provider.FormatAmount: "100.50 USD".
func (m Money) String() string { return provider.FormatAmount(m.Amount, m.Currency) }

// MoneyAtRisk is the money at risk, per currency, currencies in
// alphabetical order: what the open findings put at risk, each payment
// counted once however many findings it has (a wrong amount and a wrong
// currency put its money at risk once), at the provider's amount; and
// what the open disputes hold, each at its disputed amount (the card
// network may return it to the cardholder). Closed findings and decided
// disputes count nothing. It is the one count of money at risk: the CLI,
// the ops pages and the demo show it.
func MoneyAtRisk(fs []Finding, ds []Dispute) []Money {
	sum := map[string]int64{}
	counted := map[string]bool{}
	for _, f := range fs {
		key := f.Provider + "\x00" + f.PaymentID
		if !f.Open() || counted[key] {
			continue
		}
		counted[key] = true
		sum[strings.ToLower(f.Currency)] += f.Amount
	}
	for _, d := range ds {
		if d.Open() {
			sum[strings.ToLower(d.Currency)] += d.Amount
		}
	}
	out := make([]Money, 0, len(sum))
	for c, n := range sum {
		out = append(out, Money{Amount: n, Currency: c})
	}
	slices.SortFunc(out, func(a, b Money) int { return cmp.Compare(a.Currency, b.Currency) })
	return out
}
