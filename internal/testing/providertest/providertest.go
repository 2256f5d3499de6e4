// Package providertest is the conformance suite for implementations of
// provider.Provider: the in-process fake (package fakeprovider), the Stripe
// adapter pointed at the fake's HTTP server, and the Stripe adapter against
// Stripe test mode.
//
// The suite relies only on behaviour real Stripe has, so that a fake that
// passes it behaves like Stripe where payrecon depends on it: a create
// charges once per idempotency key, a replay with the same key and
// parameters returns the same charge, the same key with another amount is a
// mismatch, status by id agrees with create, search by purchase id finds
// the charge once its index catches up and counts it as one charge, every
// answer about a charge names its purchase (Result.PurchaseID), the test
// card for declines is declined, and a listing of a window of creation
// times holds the charges created in it, and only those, oldest first.
// Requests are of the current version (off-session), as the worker sends
// them, except where the suite checks the versions themselves: a request
// stored before versions (on-session) replays as itself, the same key at
// another version is a mismatch, and the test card that demands
// authentication is declined (authentication_required) off-session but
// waits in requires_action on-session.
// Refunds: a refund of part of a succeeded charge succeeds and reads back
// by its id as it was made, naming the payment, the refund and the
// purchase; a replay with the same key and parameters is the same refund
// and makes no second; the same key with another amount is a mismatch;
// a refund beyond what remains of the payment is rejected and makes
// nothing; an unknown refund id is not found (never failed); a payment's
// refunds list oldest first, and a listing of a window of creation times
// holds the refunds created in it.
// Events: a succeeded charge and its refund are in the provider's event
// log, newest first, translated as their webhooks are, and pages of one
// event list the same events as one page.
// Disputes, where the provider can be made to open one
// (Target.OpenDispute): a chargeback is listed in a window of its creation
// time and not outside it, with its payment, purchase, amount, currency
// and status; its opening is in the event log as charge.dispute.created
// carrying it; and a refund of the payment it charged back is refused
// (Failed) and makes nothing.
// Listings: each listing passes its PageGate once before every request it
// sends, one per page, and a gate's error stops it with that error and
// no items.
// Hooks the provider cannot offer (a simulated clock, a readable ledger)
// are optional; the checks that need them are skipped without them.
package providertest

import (
	"context"
	"testing"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// Payment methods understood by Stripe test mode, and honoured by the fake.
const (
	// PaymentMethodSucceeds is charged successfully.
	PaymentMethodSucceeds = "pm_card_visa"
	// PaymentMethodDeclines is declined.
	PaymentMethodDeclines = "pm_card_chargeDeclined"
	// PaymentMethodAuthenticationRequired demands authentication (3-D
	// Secure) on every charge: declined off-session, requires_action
	// on-session.
	PaymentMethodAuthenticationRequired = "pm_card_authenticationRequired"
)

// ReasonAuthenticationRequired is the Reason of the off-session decline of
// PaymentMethodAuthenticationRequired: Stripe's decline code.
const ReasonAuthenticationRequired = "authentication_required"

// Harness describes the provider under test.
type Harness struct {
	// New returns a fresh provider without faults, with its hooks. Each
	// subtest calls it once; subtests run in parallel. Required.
	New func(t *testing.T) Target
	// Customer is sent in every create. Stripe needs an existing customer
	// id or none; default "".
	Customer string
	// SearchWithin bounds how long search may lag behind a create: of the
	// simulated clock when Target.Advance is set, of real time otherwise.
	// Default 2m.
	SearchWithin time.Duration
	// PollEvery is how often search is retried on real time. Default 2s.
	PollEvery time.Duration
}

// Target is one fresh provider and the hooks into it.
type Target struct {
	// Provider is the provider under test. Required.
	Provider provider.Provider
	// Advance moves the provider's simulated clock forward by d. Nil when
	// it runs on real time, as Stripe does.
	Advance func(d time.Duration)
	// Now reads the provider's clock, the one that stamps its payments'
	// creation times, for the windows of List. Nil: time.Now when Advance
	// is nil (the provider runs on real time); when Advance is set, the
	// suite does not know the simulated time, and finds a new charge with
	// a window covering all time (fine for a fresh fake's small ledger).
	Now func() time.Time
	// Charges returns how many charges (declines included) the provider
	// holds for a purchase. Nil when its ledger cannot be read.
	Charges func(purchaseID string) int
	// MoneyTaken returns how many of those charges took money (succeeded,
	// or processing towards success). Nil when its ledger cannot be read.
	MoneyTaken func(purchaseID string) int
	// Refunds returns how many refunds (failed ones included) the
	// provider holds whose metadata names payrecon's refund refundID. Nil
	// when its ledger cannot be read.
	Refunds func(refundID string) int
	// PageSize is how many objects one request of a listing returns at
	// most, for the checks of listings of several pages; 0 when unknown
	// (they are skipped). Keep it small: the checks make 2·PageSize+1
	// charges and refunds.
	PageSize int
	// Requests returns how many requests of op (provider.OpList,
	// provider.OpRefundList, provider.OpDisputeList) the provider has
	// served, throttled ones excluded. Nil when it cannot be read: the
	// checks of listings then count the gate's passes only.
	Requests func(op provider.Op) int
	// OpenDispute has the provider open a dispute of all of the succeeded
	// payment paymentID now, as a card network would: a chargeback
	// (needs_response), its amount withdrawn. Nil when the provider cannot
	// be made to (stripe-mock, Stripe test mode outside its test cards):
	// the dispute checks are skipped.
	OpenDispute func(ctx context.Context, paymentID string) error
}

// Run runs the conformance suite against the provider h describes.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("providertest: Harness.New is nil")
	}
	if h.SearchWithin <= 0 {
		h.SearchWithin = 2 * time.Minute
	}
	if h.PollEvery <= 0 {
		h.PollEvery = 2 * time.Second
	}
	tests := []struct {
		name string
		run  func(t *testing.T, h Harness, tg Target)
	}{
		{"CreateSucceeds", testCreateSucceeds},
		{"ReplaySameKeyAndParams", testReplay},
		{"SameKeyOtherAmountIsMismatch", testMismatch},
		{"DistinctKeysChargeSeparately", testDistinctKeys},
		{"StatusAgreesWithCreate", testStatusAgrees},
		{"StatusOfUnknownIDIsNotFound", testStatusUnknown},
		{"SearchFindsCharge", testSearchFinds},
		{"SearchOfUnknownPurchaseIsNotFound", testSearchUnknown},
		{"DeclineTestCard", testDecline},
		{"OffSessionAuthenticationRequiredDeclines", testOffSessionAuthenticationRequired},
		{"OnSessionAuthenticationRequiredWaits", testOnSessionAuthenticationRequired},
		{"RequestOfOldVersionReplaysAsItself", testOldVersionReplays},
		{"ListFindsChargeInItsWindow", testListFinds},
		{"ListOldestFirst", testListOldestFirst},
		{"ListShowsDecline", testListDecline},
		{"RefundThenGet", testRefundThenGet},
		{"RefundReplaySameKeyAndParams", testRefundReplay},
		{"RefundSameKeyOtherAmountIsMismatch", testRefundMismatch},
		{"RefundBeyondAmountIsRejected", testRefundBeyondAmount},
		{"GetRefundOfUnknownIDIsNotFound", testGetRefundUnknown},
		{"ListRefundsOfPayment", testListRefundsOfPayment},
		{"ListRefundsCreatedInItsWindow", testListRefundsCreated},
		{"EventsListedNewestFirst", testEventsListed},
		{"ListDisputesInItsWindow", testListDisputes},
		{"DisputeOpeningIsAnEvent", testDisputeEvents},
		{"RefundOfDisputedPaymentIsRefused", testRefundOfDisputedPaymentIsRefused},
		{"ListingsPassTheGatePerPage", testListingsGatedPerPage},
		{"ListingStopsAtItsGate", testListingStopsAtGate},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tg := h.New(t)
			if tg.Provider == nil {
				t.Fatal("providertest: Harness.New returned a Target without Provider")
			}
			tc.run(t, h, tg)
		})
	}
}
