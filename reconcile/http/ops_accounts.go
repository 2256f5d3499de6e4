package http

import (
	"net/http"

	"github.com/payrecon/payrecon/reconcile"
)

// The operator lists' account filter: ?account=platform lists the rows
// of the platform's own account, ?account=acct_… those of one connected
// account, and no account (or an empty one) every row. A refund's and a
// dispute's account is its purchase's, and so is an audit finding's: a
// finding about no purchase shows under every account only. The filter is
// applied by the store's query, before any cap.

// opsAccount parses the ?account= of r. A malformed account is answered
// 400 (JSON when asJSON, else the error page) and ok is false.
func (o *Ops) opsAccount(w http.ResponseWriter, r *http.Request, who opsWho, asJSON bool) (f reconcile.AccountFilter, ok bool) {
	f, err := reconcile.ParseAccountFilter(r.URL.Query().Get("account"))
	if err != nil {
		msg := "account: " + quote(r.URL.Query().Get("account")) + ` is not an account: want "platform" for the platform's own, or a connected account acct_ followed by letters and digits`
		o.cannotShow(w, r, who, asJSON, reconcile.KindInvalid, msg, "Not an account", msg+".")
		return "", false
	}
	return f, true
}

// opsFilter is what the accountFilter template shows: the list's path
// and the account filter in force, "" for every account.
type opsFilter struct{ Action, Account string }

// opsFilterOf is the template function filterOf.
func opsFilterOf(action, account string) opsFilter {
	return opsFilter{Action: action, Account: account}
}
