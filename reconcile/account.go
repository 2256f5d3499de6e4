package reconcile

import (
	"context"
	"fmt"
	"slices"

	"github.com/payrecon/payrecon/provider"
)

// AccountPolicy says what becomes of a purchase naming a connected account
// the deployment does not declare (Config.UndeclaredAccounts).
type AccountPolicy string

// The policies for an undeclared account.
const (
	// AccountsRefuse refuses the purchase: a typo in an account id must
	// not charge a customer on behalf of an account nobody watches.
	AccountsRefuse AccountPolicy = "refuse"
	// AccountsAccept serves any well-formed account, as for a platform
	// whose connected accounts come and go faster than its configuration.
	AccountsAccept AccountPolicy = "accept"
)

// checkAccounts returns an error for every malformed declared account, a
// repeated one, and an unknown policy. It sets the policy's default.
func (c *Config) checkAccounts() []error {
	var errs []error
	if c.UndeclaredAccounts == "" {
		c.UndeclaredAccounts = AccountsRefuse
	}
	if c.UndeclaredAccounts != AccountsRefuse && c.UndeclaredAccounts != AccountsAccept {
		errs = append(errs, fmt.Errorf("undeclared accounts %q: must be %q or %q", c.UndeclaredAccounts, AccountsRefuse, AccountsAccept))
	}
	seen := map[string]bool{}
	for _, a := range c.Accounts {
		switch _, err := provider.ParseAccount(a); {
		case err != nil:
			errs = append(errs, fmt.Errorf("accounts: %w", err))
		case a == provider.PlatformAccount:
			errs = append(errs, fmt.Errorf("accounts: the platform's own account is always served; declare only connected accounts (acct_…)"))
		case seen[a]:
			errs = append(errs, fmt.Errorf("accounts: %s is declared twice", a))
		}
		seen[a] = true
	}
	return errs
}

// servesConnected reports whether the deployment may hold purchases of
// connected accounts, and so needs a provider that acts on their behalf.
func (c Config) servesConnected() bool {
	return len(c.Accounts) > 0 || c.UndeclaredAccounts == AccountsAccept
}

// checkAccount returns why a purchase may not name account, or "" if it
// may: a malformed account, or an undeclared one under AccountsRefuse.
func (c Config) checkAccount(account string) string {
	if _, err := provider.ParseAccount(account); err != nil {
		return fmt.Sprintf("%q is not a provider account: the platform's own is empty, a connected account is acct_ followed by letters and digits", account)
	}
	if account == provider.PlatformAccount || c.UndeclaredAccounts == AccountsAccept || slices.Contains(c.Accounts, account) {
		return ""
	}
	return fmt.Sprintf("%s is not an account this deployment serves (declare it, or accept undeclared accounts)", account)
}

// watchedAccounts lists the accounts whose provider side the audit, the
// event sweep, the restore check and recovery read, the platform's first:
// every declared account, and under AccountsAccept every account the
// books hold a purchase of.
func (s *Service) watchedAccounts(ctx context.Context) ([]string, error) {
	out := append([]string{provider.PlatformAccount}, s.cfg.Accounts...)
	if s.cfg.UndeclaredAccounts != AccountsAccept {
		return out, nil
	}
	var books []string
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		books, err = tx.ListAccounts(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile: the books' accounts: %w", err)
	}
	for _, a := range books {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out, nil
}

// runName is the name of a run of the audit or the event sweep over
// account's provider side, each with its own watermark: the provider's
// name, then the connected account if any, then suffix ("/manual",
// "/events", …).
func (s *Service) runName(account, suffix string) string {
	if account == provider.PlatformAccount {
		return s.cfg.ProviderName + suffix
	}
	return s.cfg.ProviderName + "/" + account + suffix
}

// accountName names account for people: "the platform's" for the
// platform's own.
func accountName(account string) string {
	if account == provider.PlatformAccount {
		return "the platform's"
	}
	return account
}

// Account is the provider account the refund is made in: its purchase's,
// stored with its request before the first call.
func (r Refund) Account() string {
	if r.ProviderRequest == nil {
		return provider.PlatformAccount
	}
	return r.ProviderRequest.Account
}

// providerFor returns the provider whose every call is made on behalf of
// account: the Service's own for the platform's account, a view of it
// for a connected one. A purchase of a connected account stored while
// the provider cannot act for accounts (a changed configuration) gets a
// provider that refuses every call before sending it: its outcome stays
// unknown, and nothing is sent on behalf of the wrong account.
func (s *Service) providerFor(account string) provider.Provider {
	if account == provider.PlatformAccount {
		return s.provider
	}
	if s.accounts != nil {
		return s.accounts.ForAccount(account)
	}
	return noAccounts{account: account}
}

// noAccounts is providerFor's provider for a connected account when the
// Service's provider cannot act on behalf of accounts.
type noAccounts struct{ account string }

func (n noAccounts) err() error {
	return fmt.Errorf("reconcile: account %s: the provider cannot act on behalf of connected accounts: %w", n.account, provider.ErrRetryLater)
}

func (n noAccounts) Create(context.Context, provider.CreateRequest) (provider.Result, error) {
	return provider.Result{}, n.err()
}
func (n noAccounts) Status(context.Context, string) (provider.Result, error) {
	return provider.Result{}, n.err()
}
func (n noAccounts) Search(context.Context, string) (provider.Result, error) {
	return provider.Result{}, n.err()
}
func (n noAccounts) List(context.Context, provider.Window, provider.PageGate) ([]provider.Payment, error) {
	return nil, n.err()
}
func (n noAccounts) CreateRefund(context.Context, provider.RefundRequest) (provider.RefundResult, error) {
	return provider.RefundResult{}, n.err()
}
func (n noAccounts) GetRefund(context.Context, string) (provider.RefundResult, error) {
	return provider.RefundResult{}, n.err()
}
func (n noAccounts) ListRefunds(context.Context, string, provider.PageGate) ([]provider.RefundResult, error) {
	return nil, n.err()
}
func (n noAccounts) ListRefundsCreated(context.Context, provider.Window, provider.PageGate) ([]provider.RefundResult, error) {
	return nil, n.err()
}
func (n noAccounts) ListDisputes(context.Context, provider.Window, provider.PageGate) ([]provider.Dispute, error) {
	return nil, n.err()
}
func (n noAccounts) ListEvents(context.Context, provider.EventQuery) (provider.EventPage, error) {
	return provider.EventPage{}, n.err()
}

// PlatformName is how the operator lists' filters and the metrics' account
// label name the platform's own account (provider.PlatformAccount, which
// is empty).
const PlatformName = "platform"

// AccountFilter selects the rows of the operator lists by provider
// account: AnyAccount selects every row, PlatformOnly those of the
// platform's own account, and a connected account's id (acct_…) that
// account's. A purchase's rows are those of its account; a refund's and a
// dispute's, their purchase's; an audit finding's, its purchase's, so that
// a finding about no purchase (a payment no purchase owns) is selected by
// AnyAccount only. Make one with ParseAccountFilter or OnlyAccount.
type AccountFilter string

// The filters that name no connected account.
const (
	// AnyAccount selects every row, whatever its account.
	AnyAccount AccountFilter = ""
	// PlatformOnly selects the rows of the platform's own account.
	PlatformOnly AccountFilter = PlatformName
)

// OnlyAccount returns the filter selecting account's rows only: PlatformOnly
// for provider.PlatformAccount.
func OnlyAccount(account string) AccountFilter {
	if account == provider.PlatformAccount {
		return PlatformOnly
	}
	return AccountFilter(account)
}

// ParseAccountFilter parses an operator's account filter: "" is
// AnyAccount, "platform" PlatformOnly, and anything else must be a
// connected account (provider.ParseAccount). Returns an error wrapping
// ErrInvalid for a malformed account.
func ParseAccountFilter(s string) (AccountFilter, error) {
	switch s {
	case "":
		return AnyAccount, nil
	case PlatformName:
		return PlatformOnly, nil
	}
	if _, err := provider.ParseAccount(s); err != nil {
		return "", fmt.Errorf("reconcile: account filter: %w", &FieldError{"account", fmt.Sprintf("%q: want %q for the platform's own account, or a connected account acct_ followed by letters and digits", s, PlatformName)})
	}
	return AccountFilter(s), nil
}

// Account returns the provider account f selects (provider.PlatformAccount
// for PlatformOnly), and false for AnyAccount.
func (f AccountFilter) Account() (account string, ok bool) {
	switch f {
	case AnyAccount:
		return "", false
	case PlatformOnly:
		return provider.PlatformAccount, true
	}
	return string(f), true
}

// AccountLabel names account as the operator lists and the metrics show
// it: PlatformName for the platform's own account, else its id.
func AccountLabel(account string) string {
	if account == provider.PlatformAccount {
		return PlatformName
	}
	return account
}
