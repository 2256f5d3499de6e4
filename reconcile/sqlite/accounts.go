package sqlite

import (
	"context"

	"github.com/payrecon/payrecon/internal/sqlstore"
)

// ListAccounts implements reconcile.Tx.
func (t *txn) ListAccounts(ctx context.Context) ([]string, error) {
	return queryAll(ctx, t, sqlstore.ScanString, "list accounts", listAccountsSQL)
}

// listAccountsSQL is ListAccounts' query: a skip scan of the partial
// index purchases_account_idx (migration 00016), one probe per account
// for the first account after the last one found, as
// reconcile/postgres's, so that its cost grows with the accounts, not
// with their purchases. Each probe is a search of the index, the first
// too (it asks for an account after the empty string), and each repeats
// the index's condition, which the planner needs to read it.
const listAccountsSQL = `WITH RECURSIVE a(account) AS (
    SELECT (SELECT account FROM purchases WHERE account <> '' AND account > '' ORDER BY account LIMIT 1)
    UNION ALL
    SELECT (SELECT p.account FROM purchases AS p
            WHERE p.account <> '' AND p.account > a.account ORDER BY p.account LIMIT 1)
    FROM a WHERE a.account IS NOT NULL
)
SELECT account FROM a WHERE account IS NOT NULL`
