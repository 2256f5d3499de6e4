package fakeprovider

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/payrecon/payrecon/provider"
)

var _ provider.Accounts = (*Fake)(nil)

// Account returns the fake of connected account account, as Stripe
// Connect keeps one: a ledger, idempotency keys, event log, refunds,
// disputes and rate limits of its own, with the platform's Config (its
// faults, clock and limits), created on first use. Its ids are its own
// (its Instance is the platform's and the account's), so that no id of
// one account is found in another. PlatformAccount returns f. It panics
// on an account provider.ParseAccount refuses: a bug in the caller. Call
// it on the platform's fake.
func (f *Fake) Account(account string) *Fake {
	if _, err := provider.ParseAccount(account); err != nil {
		panic(fmt.Sprintf("fakeprovider: %v", err))
	}
	if account == provider.PlatformAccount || account == f.account {
		return f
	}
	f.accountsMu.Lock()
	defer f.accountsMu.Unlock()
	if sub, ok := f.accounts[account]; ok {
		return sub
	}
	cfg := f.cfg
	cfg.Instance = f.cfg.Instance + "x" + strings.TrimPrefix(account, "acct_")
	sub := New(cfg)
	sub.account = account
	if f.accounts == nil {
		f.accounts = map[string]*Fake{}
	}
	f.accounts[account] = sub
	return sub
}

// ForAccount implements provider.Accounts: the fake of account (Account).
func (f *Fake) ForAccount(account string) provider.Provider { return f.Account(account) }

// accountServer returns the Server of connected account account: its
// requests (those carrying the Stripe-Account header) are served from the
// account's fake, with the platform's settings, its webhooks sent to the
// Connect endpoint (ServerConfig.ConnectWebhookURL) under that endpoint's
// secret. It is started on first use and closed with s.
func (s *Server) accountServer(account string) *Server {
	s.accountsMu.Lock()
	defer s.accountsMu.Unlock()
	if sub, ok := s.accounts[account]; ok {
		return sub
	}
	cfg := s.cfg
	cfg.WebhookURL, cfg.WebhookSecret = s.cfg.ConnectWebhookURL, s.cfg.ConnectWebhookSecret
	cfg.ConnectWebhookURL, cfg.ConnectWebhookSecret = "", ""
	sub := NewServer(s.fake.Account(account), cfg)
	if s.accounts == nil {
		s.accounts = map[string]*Server{}
	}
	s.accounts[account] = sub
	return sub
}

// withoutAccount is r without its Stripe-Account header: the request as
// the account's own Server serves it.
func withoutAccount(r *http.Request) *http.Request {
	r = r.Clone(r.Context())
	r.Header.Del("Stripe-Account")
	return r
}
