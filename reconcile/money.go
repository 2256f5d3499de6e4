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

// MoneyAtRisk is the money the open findings put at risk, per currency,
// currencies in alphabetical order: each payment counts once, however
// many findings it has (a wrong amount and a wrong currency put its
// money at risk once), at the provider's amount. Closed findings count
// nothing. It is the one count of money at risk: the CLI, the ops pages
// and the demo show it.
func MoneyAtRisk(fs []Finding) []Money {
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
	out := make([]Money, 0, len(sum))
	for c, n := range sum {
		out = append(out, Money{Amount: n, Currency: c})
	}
	slices.SortFunc(out, func(a, b Money) int { return cmp.Compare(a.Currency, b.Currency) })
	return out
}
