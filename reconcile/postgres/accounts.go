package postgres

import (
	"context"
	"fmt"
)

// ListAccounts implements reconcile.Tx.
func (t *txn) ListAccounts(ctx context.Context) ([]string, error) {
	rows, err := t.tx.Query(ctx, `SELECT DISTINCT account FROM purchases WHERE account <> '' ORDER BY account`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list accounts: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			return nil, fmt.Errorf("postgres: list accounts: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list accounts: %w", err)
	}
	return out, nil
}
