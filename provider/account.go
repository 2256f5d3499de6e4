package provider

import (
	"fmt"
	"strings"
)

// PlatformAccount is the platform's own account: the one the provider's
// API key belongs to, whose calls carry no account.
const PlatformAccount = ""

// maxAccountLen bounds an account id, as Stripe's object ids are bounded.
const maxAccountLen = 255

// ParseAccount returns s if it names an account: PlatformAccount, or a
// connected account "acct_" followed by letters and digits. Anything
// else is refused with an error that quotes it: a malformed account must
// never reach a call, where the provider would act on another's behalf or
// on none.
func ParseAccount(s string) (string, error) {
	if s == PlatformAccount {
		return s, nil
	}
	rest, ok := strings.CutPrefix(s, "acct_")
	if !ok || rest == "" || len(s) > maxAccountLen {
		return "", fmt.Errorf("provider: account %q is not acct_ followed by letters and digits", s)
	}
	for _, r := range rest {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
			return "", fmt.Errorf("provider: account %q is not acct_ followed by letters and digits", s)
		}
	}
	return s, nil
}

// Accounts is implemented by a provider that acts on behalf of the
// platform's connected accounts (Stripe Connect).
type Accounts interface {
	// ForAccount returns the Provider whose every call is made on behalf
	// of account (Stripe's Stripe-Account header): the idempotency keys,
	// searches, listings, event log and rate limits it sees are that
	// account's alone. PlatformAccount returns the platform's own. account
	// must have passed ParseAccount.
	ForAccount(account string) Provider
}
