package reconcile

// supportedCurrencies lists the ISO 4217 codes payrecon accepts, lower
// case as Stripe writes them. Amounts are always in the currency's minor
// unit, so zero-decimal currencies (jpy, krw) need no special case here.
var supportedCurrencies = map[string]bool{
	"aud": true, "bgn": true, "brl": true, "cad": true, "chf": true, "cny": true,
	"czk": true, "dkk": true, "eur": true, "gbp": true, "hkd": true, "huf": true,
	"idr": true, "ils": true, "inr": true, "isk": true, "jpy": true, "krw": true,
	"mxn": true, "myr": true, "nok": true, "nzd": true, "php": true, "pln": true,
	"ron": true, "sek": true, "sgd": true, "thb": true, "try": true, "usd": true,
	"zar": true,
}

// SupportedCurrency reports whether code (lower case) is accepted.
func SupportedCurrency(code string) bool { return supportedCurrencies[code] }
