package budget

import (
	"fmt"
	"sync"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// Accounts is the reconcile.AccountBudgets of a platform's connected
// accounts: a Shared budget for each, kept in the same Store under the
// name base.Account, "/" and the account, so that every worker shares
// each account's budget and no account's calls take from another's. An
// account declared with limits of its own is paced at them; any other at
// base's limits (a connected account has the limits of its mode, as the
// platform's does). An Observer of base that is an AccountObserver is
// told each account's budget apart, by account.
type Accounts struct {
	store  Store
	base   Config
	limits map[string]Limits

	mu      sync.Mutex
	budgets map[string]*Shared
}

var _ reconcile.AccountBudgets = (*Accounts)(nil)

// NewAccounts returns the budgets of the connected accounts kept in
// store, each configured as base but for its name and, when limits names
// the account, its limits (a zero field: DefaultLimits(base.Live)'s). It
// returns an error for an invalid base, a key of limits that is not a
// connected account, or invalid limits.
func NewAccounts(store Store, base Config, limits map[string]Limits) (*Accounts, error) {
	def, err := base.withDefaults()
	if err != nil {
		return nil, err
	}
	a := &Accounts{store: store, base: def, limits: map[string]Limits{}, budgets: map[string]*Shared{}}
	for account, l := range limits {
		if _, err := provider.ParseAccount(account); err != nil || account == provider.PlatformAccount {
			return nil, fmt.Errorf("reconcile: budget: the limits of %q: not a connected account (acct_ followed by letters and digits)", account)
		}
		cfg := base
		cfg.Limits = l
		if cfg, err = cfg.withDefaults(); err != nil {
			return nil, fmt.Errorf("reconcile: budget: the limits of %s: %w", account, err)
		}
		a.limits[account] = cfg.Limits
	}
	return a, nil
}

// For implements reconcile.AccountBudgets: the budget of account, made
// on first use.
func (a *Accounts) For(account string) reconcile.Budget {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b, ok := a.budgets[account]; ok {
		return b
	}
	cfg := a.base
	cfg.Account = a.base.Account + "/" + account
	cfg.Observer = observerFor(a.base.Observer, account)
	if l, ok := a.limits[account]; ok {
		cfg.Limits = l
	}
	b := &Shared{store: a.store, cfg: cfg} // cfg is defaulted: NewAccounts checked it
	a.budgets[account] = b
	return b
}
