package provider_test

import (
	"math"
	"testing"

	"github.com/payrecon/payrecon/provider"
)

func TestFormatAmount(t *testing.T) {
	for _, tt := range []struct {
		amount   int64
		currency string
		want     string
	}{
		{10050, "usd", "100.50 USD"},
		{10050, "USD", "100.50 USD"},
		{5, "eur", "0.05 EUR"},
		{0, "gbp", "0.00 GBP"},
		{-1250, "eur", "-12.50 EUR"},
		{-5, "eur", "-0.05 EUR"},
		{10050, "jpy", "10050 JPY"},
		{0, "jpy", "0 JPY"},
		{-300, "krw", "-300 KRW"},
		{10050, "kwd", "10.050 KWD"},
		{5, "bhd", "0.005 BHD"},
		{0, "kwd", "0.000 KWD"},
		{-1, "tnd", "-0.001 TND"},
		{17500, "huf", "175.00 HUF"},
		{math.MinInt64, "usd", "-92233720368547758.08 USD"},
		{math.MaxInt64, "jpy", "9223372036854775807 JPY"},
	} {
		if got := provider.FormatAmount(tt.amount, tt.currency); got != tt.want {
			t.Errorf("FormatAmount(%d, %q) = %q, want %q", tt.amount, tt.currency, got, tt.want)
		}
	}
}

func TestMinimumCharge(t *testing.T) {
	for _, tt := range []struct {
		currency string
		want     int64
		fixed    bool
	}{
		{"usd", 50, true},
		{"GBP", 30, true},
		{"jpy", 50, true},
		{"huf", 17500, true},
		{"zar", 0, false}, // about 0.50 USD at the day's rate
	} {
		got, fixed := provider.MinimumCharge(tt.currency)
		if got != tt.want || fixed != tt.fixed {
			t.Errorf("MinimumCharge(%q) = %d, %v; want %d, %v", tt.currency, got, fixed, tt.want, tt.fixed)
		}
	}
}
