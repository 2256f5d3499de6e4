package prometheus

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// OtherAccount is the account label of every connected account the
// deployment does not declare (those it accepts under
// reconcile.AccountsAccept, or any a changed configuration left in the
// books): the label takes declared accounts only, so that the series
// stay bounded however many accounts the platform serves.
const OtherAccount = "other"

// accountLabels are the values of the account label: the platform's,
// each declared connected account's and OtherAccount.
type accountLabels struct {
	declared map[string]bool
	ordered  []string // declared, in their order
}

// newAccountLabels returns the account labels of a deployment declaring
// declared, or an error for an account that is malformed or the
// platform's own. A repeated account is labelled once.
func newAccountLabels(declared []string) (accountLabels, error) {
	l := accountLabels{declared: map[string]bool{}}
	var errs []error
	for _, a := range declared {
		switch _, err := provider.ParseAccount(a); {
		case err != nil:
			errs = append(errs, fmt.Errorf("prometheus: declared account: %w", err))
		case a == provider.PlatformAccount:
			errs = append(errs, errors.New("prometheus: declared account: the platform's own is always labelled platform; declare connected accounts (acct_…) only"))
		case !l.declared[a]:
			l.declared[a] = true
			l.ordered = append(l.ordered, a)
		}
	}
	return l, errors.Join(errs...)
}

// values returns every value the account label takes: the platform's
// first, then the declared accounts, then OtherAccount.
func (l accountLabels) values() []string {
	out := append([]string{reconcile.PlatformName}, l.ordered...)
	return append(out, OtherAccount)
}

// AccountLabel returns the value of the account label of the metrics
// about provider account account: "platform" (reconcile.PlatformName)
// for the platform's own account (provider.PlatformAccount), the
// account's id for a connected account the deployment declares
// (NewWithAccounts), and OtherAccount for any other. It takes at most
// the number of declared accounts plus two values.
func (m *Metrics) AccountLabel(account string) string {
	switch {
	case account == provider.PlatformAccount:
		return reconcile.PlatformName
	case m.accounts.declared[account]:
		return account
	}
	return OtherAccount
}

// setByAccount sets g's series of every account label to the sum of
// counts (by provider account) under that label, 0 when none.
func (m *Metrics) setByAccount(g *prometheus.GaugeVec, counts map[string]int) {
	byLabel := map[string]int{}
	for account, n := range counts {
		byLabel[m.AccountLabel(account)] += n
	}
	for _, a := range m.accounts.values() {
		g.WithLabelValues(a).Set(float64(byLabel[a]))
	}
}
