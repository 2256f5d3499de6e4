package fakeprovider

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/payrecon/payrecon/provider"
)

// Connected accounts (Stripe Connect): a platform's fake keeps one Fake
// per connected account, and a platform's Server one Server per account,
// which serves the requests carrying that account's Stripe-Account header
// and sends its webhooks to the Connect endpoint.

var _ provider.Accounts = (*Fake)(nil)

// Account returns the fake of connected account account, as Stripe
// Connect keeps one: a Fake with a ledger, idempotency keys, event log,
// refunds, disputes and rate limits of its own (Config.AccountRateLimits),
// and the platform's Config otherwise (faults, seed, clock, lags, hooks),
// created on first use. Its Instance is the platform's, "x" and the
// account's letters after "acct_", so that no id of one account is found
// in another's books, and its events carry the account. PlatformAccount
// returns the platform's fake; called on an account's fake, Account
// answers as the platform's does. It panics on an account
// provider.ParseAccount refuses: a bug in the caller.
func (f *Fake) Account(account string) *Fake {
	if _, err := provider.ParseAccount(account); err != nil {
		panic(fmt.Sprintf("fakeprovider: %v", err))
	}
	if f.platform != nil {
		return f.platform.Account(account)
	}
	if account == provider.PlatformAccount {
		return f
	}
	f.accountsMu.Lock()
	defer f.accountsMu.Unlock()
	if sub, ok := f.accounts[account]; ok {
		return sub
	}
	f.limiter.mu.Lock() // SetRateLimits writes cfg under it
	cfg := f.cfg
	f.limiter.mu.Unlock()
	cfg.Instance = f.cfg.Instance + "x" + strings.TrimPrefix(account, "acct_")
	cfg.RateLimits = f.accountLimits
	if l, ok := f.cfg.AccountRateLimits[account]; ok {
		cfg.RateLimits = l
	}
	cfg.AccountRateLimits = nil
	sub := New(cfg)
	sub.account, sub.platform = account, f
	if f.accounts == nil {
		f.accounts = map[string]*Fake{}
	}
	f.accounts[account] = sub
	// Every Server of the platform serves the account from now on, so
	// that changes made in-process are announced as the platform's are.
	for _, s := range f.servers {
		s.adoptAccount(sub)
	}
	return sub
}

// ForAccount implements provider.Accounts: Account(account).
func (f *Fake) ForAccount(account string) provider.Provider { return f.Account(account) }

// AccountID returns the connected account the fake is (Account), or
// provider.PlatformAccount for the platform's fake.
func (f *Fake) AccountID() string { return f.account }

// serveAccounts makes s serve every connected account of f, those made
// from now on included, until Close calls unserveAccounts. Only a
// platform's fake has accounts of its own.
func (f *Fake) serveAccounts(s *Server) {
	if f.platform != nil {
		return
	}
	f.accountsMu.Lock()
	defer f.accountsMu.Unlock()
	f.servers = append(f.servers, s)
	for _, sub := range f.accounts {
		s.adoptAccount(sub)
	}
}

// unserveAccounts stops telling s of new accounts.
func (f *Fake) unserveAccounts(s *Server) {
	f.accountsMu.Lock()
	defer f.accountsMu.Unlock()
	f.servers = slices.DeleteFunc(f.servers, func(x *Server) bool { return x == s })
}

// Account returns the Server of connected account account: it serves the
// requests carrying the account's Stripe-Account header from the
// account's fake (Fake.Account), with s's settings but its own outage,
// and sends the account's events to the Connect endpoint
// (ServerConfig.ConnectWebhookURL) signed with its secret, or sends none
// without one. Its Events, Deliveries, WebhookStats, ScriptWebhooks,
// ChargeOutside, SetStatus, OpenDispute and the rest are the account's.
// s's Tick, Drain and Close act on it too. PlatformAccount returns s. It
// panics on an account provider.ParseAccount refuses.
func (s *Server) Account(account string) *Server {
	return s.accountServer(account)
}

// accountServer returns the Server of account's fake; s for s's own.
func (s *Server) accountServer(account string) *Server {
	f := s.fake.Account(account) // a new fake is adopted by s on the way
	if f == s.fake {
		return s
	}
	s.accountsMu.Lock()
	defer s.accountsMu.Unlock()
	if sub, ok := s.accounts[f.account]; ok {
		return sub
	}
	return s.adoptLocked(f) // s serves an account's fake: nothing told it
}

// adoptAccount makes the Server of the account fake f, if s has none.
func (s *Server) adoptAccount(f *Fake) {
	s.accountsMu.Lock()
	defer s.accountsMu.Unlock()
	if _, ok := s.accounts[f.account]; !ok {
		s.adoptLocked(f)
	}
}

// adoptLocked makes and keeps the Server of the account fake f. Call with
// s.accountsMu held.
func (s *Server) adoptLocked(f *Fake) *Server {
	cfg := s.cfg
	cfg.WebhookURL, cfg.WebhookSecret = s.cfg.ConnectWebhookURL, s.cfg.ConnectWebhookSecret
	cfg.ConnectWebhookURL, cfg.ConnectWebhookSecret = "", ""
	cfg.TickEvery = -1 // s's ticker ticks it
	cfg.Now = s.now
	cfg.Logger = s.log.With("account", f.account)
	sub := NewServer(f, cfg)
	sub.parent = s
	if s.accounts == nil {
		s.accounts = map[string]*Server{}
	}
	s.accounts[f.account] = sub
	if s.closed() { // made by a late request: nothing must outlive s
		sub.Close()
	}
	return sub
}

// accountServers returns the connected accounts' Servers made so far, by
// account, so that a Tick delivers their events in a stable order.
func (s *Server) accountServers() []*Server {
	s.accountsMu.Lock()
	defer s.accountsMu.Unlock()
	out := make([]*Server, 0, len(s.accounts))
	for _, account := range slices.Sorted(maps.Keys(s.accounts)) {
		out = append(out, s.accounts[account])
	}
	return out
}

// withoutAccount is r without its Stripe-Account header: the request as
// the account's own Server serves it.
func withoutAccount(r *http.Request) *http.Request {
	r = r.Clone(r.Context())
	r.Header.Del("Stripe-Account")
	return r
}

// refuseAccount answers a request whose Stripe-Account header names no
// account, as Stripe refuses an account the key cannot act for.
func refuseAccount(w http.ResponseWriter, account string) {
	writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "account_invalid",
		DocURL:  "https://stripe.com/docs/error-codes/account-invalid",
		Message: fmt.Sprintf("The Stripe-Account header %q is not an account id: want acct_ followed by letters and digits, or no header for the platform's own account.", account)})
}
