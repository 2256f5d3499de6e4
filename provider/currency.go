package provider

import (
	"strconv"
	"strings"
)

// Amounts are integers in a currency's minor unit, as Stripe's API
// writes them: cents for USD, yen for JPY (a zero-decimal currency),
// fils for KWD (a three-decimal one).

// zeroDecimal lists the currencies whose minor unit is the major one in
// Stripe's API; threeDecimal those with three decimals. Every other
// currency has two.
var (
	zeroDecimal = map[string]bool{
		"bif": true, "clp": true, "djf": true, "gnf": true, "jpy": true, "kmf": true,
		"krw": true, "mga": true, "pyg": true, "rwf": true, "ugx": true, "vnd": true,
		"vuv": true, "xaf": true, "xof": true, "xpf": true,
	}
	threeDecimal = map[string]bool{"bhd": true, "jod": true, "kwd": true, "omr": true, "tnd": true}
)

// MinorDigits returns how many decimal digits currency's minor unit has
// (0, 2 or 3); the code is case-insensitive.
func MinorDigits(currency string) int {
	c := strings.ToLower(currency)
	switch {
	case zeroDecimal[c]:
		return 0
	case threeDecimal[c]:
		return 3
	}
	return 2
}

// FormatAmount writes amount, in currency's minor unit, for people, in
// the currency's real minor units and its upper-case code: "100.50 USD",
// "10050 JPY", "10.050 KWD", "-0.05 EUR". It is the one formatter of
// amounts: the CLI, the ops pages, the demo and the logs use it.
func FormatAmount(amount int64, currency string) string {
	code := strings.ToUpper(currency)
	digits := MinorDigits(currency)
	sign := ""
	if amount < 0 {
		sign = "-"
	}
	s := strconv.FormatUint(absAmount(amount), 10)
	if digits > 0 {
		if len(s) <= digits {
			s = strings.Repeat("0", digits-len(s)+1) + s
		}
		s = s[:len(s)-digits] + "." + s[len(s)-digits:]
	}
	return sign + s + " " + code
}

// absAmount is |amount|, exact even for the most negative int64.
func absAmount(amount int64) uint64 {
	if amount < 0 {
		return uint64(-(amount + 1)) + 1
	}
	return uint64(amount)
}

// minimumCharge is Stripe's fixed minimum charge per presentment
// currency, in minor units. A currency it does not list has a minimum
// of about 0.50 USD converted at the day's rate, which only the provider
// can check.
var minimumCharge = map[string]int64{
	"usd": 50, "aed": 200, "aud": 50, "bgn": 100, "brl": 50, "cad": 50, "chf": 50,
	"czk": 1500, "dkk": 250, "eur": 50, "gbp": 30, "hkd": 400, "huf": 17500,
	"inr": 50, "jpy": 50, "mxn": 1000, "myr": 200, "nok": 300, "nzd": 50,
	"pln": 200, "ron": 200, "sek": 300, "sgd": 50, "thb": 1000,
}

// MinimumCharge returns the smallest amount Stripe charges in currency
// (minor units), and false when the minimum is not fixed in that
// currency. A create below it is refused with amount_too_small, before
// any charge.
func MinimumCharge(currency string) (int64, bool) {
	m, ok := minimumCharge[strings.ToLower(currency)]
	return m, ok
}
