package postgres

import (
	"context"

	"github.com/payrecon/payrecon/internal/sqlstore"
)

// ListAccounts implements reconcile.Tx.
func (t *txn) ListAccounts(ctx context.Context) ([]string, error) {
	return queryAll(ctx, t, sqlstore.ScanString, "list accounts", listAccountsSQL)
}

// listAccountsSQL is ListAccounts' query: a skip scan of the partial
// index purchases_account_idx (migration 00018), one probe per account
// for the first account after the last one found. The audit and the
// sweeps run it on a schedule, so its cost grows with the accounts, not
// with their purchases as a DISTINCT over the index would.
const listAccountsSQL = `WITH RECURSIVE a(account) AS (
    (SELECT account FROM purchases WHERE account <> '' ORDER BY account LIMIT 1)
    UNION ALL
    SELECT (SELECT p.account FROM purchases AS p
            WHERE p.account <> '' AND p.account > a.account ORDER BY p.account LIMIT 1)
    FROM a WHERE a.account IS NOT NULL
)
SELECT account FROM a WHERE account IS NOT NULL`
