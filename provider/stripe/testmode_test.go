package stripe_test

import (
	"os"
	"strings"
	"testing"

	"github.com/payrecon/payrecon/internal/testing/providertest"
	"github.com/payrecon/payrecon/provider/stripe"
)

// TestConformanceStripeTestMode runs the provider conformance suite against
// real Stripe in test mode, when STRIPE_SECRET_KEY holds a test key
// (sk_test_…). It never runs with any other key.
func TestConformanceStripeTestMode(t *testing.T) {
	key := os.Getenv("STRIPE_SECRET_KEY")
	switch {
	case key == "":
		t.Skip("STRIPE_SECRET_KEY not set: skipping the conformance suite against Stripe test mode")
	case !strings.HasPrefix(key, "sk_test_"):
		t.Skip("STRIPE_SECRET_KEY is not a test key (sk_test_…): refusing to run against it")
	}
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) providertest.Target {
			p, err := stripe.New(stripe.Config{SecretKey: key})
			if err != nil {
				t.Fatalf("stripe.New: %v", err)
			}
			return providertest.Target{Provider: p}
		},
	})
}
