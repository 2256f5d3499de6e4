package postgres

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payrecon/payrecon/reconcile"
)

// PoolConfig is the pool's configuration Open builds from cfg.
func PoolConfig(cfg Config) (*pgxpool.Config, error) { return poolConfig(cfg) }

// ListUnmatchedEventsSQL is the query of ListUnmatchedEvents, for the test
// of its plan.
const ListUnmatchedEventsSQL = listUnmatchedEventsSQL

// ClaimDueSQL is the statement of ClaimJobs, for the test of its plan.
var ClaimDueSQL = claimDueSQL

// The queries payrecon runs on a schedule, for the tests of their plans
// and BenchmarkPeriodicQueries.
const (
	CountByStateSQL            = countByStateSQL
	CountEscalatedByAccountSQL = countEscalatedByAccountSQL
	OldestUncertainSinceSQL    = oldestUncertainSinceSQL
	CountOpenFindingsSQL       = countOpenFindingsSQL
	ListOverdueUncertainSQL    = listOverdueUncertainSQL
	ListEscalatedSQL           = listEscalatedSQL
	ListSubmittedBetweenSQL    = listSubmittedBetweenSQL
	GetAuditRunSQL             = getAuditRunSQL
)

// ListFindingsSQL is the query of ListFindings and its arguments.
func ListFindingsSQL(purchaseID string, account reconcile.AccountFilter, includeClosed bool, limit int) (string, []any) {
	return listFindingsSQL(purchaseID, account, includeClosed, limit)
}

// The operator lists' queries for one account, for the tests of their
// plans.
var (
	ListEscalatedAccountSQL        = listEscalatedAccountSQL
	ListEscalatedRefundsAccountSQL = listEscalatedRefundsAccountSQL
	ListOpenDisputesAccountSQL     = listOpenDisputesAccountSQL
)

// The refunds' periodic queries, for the tests of their plans.
const (
	CountRefundsByStateSQL         = countRefundsByStateSQL
	OldestUncertainRefundSinceSQL  = oldestUncertainRefundSinceSQL
	ListOverdueUncertainRefundsSQL = listOverdueUncertainRefundsSQL
	ListEscalatedRefundsSQL        = listEscalatedRefundsSQL
)

// ListOpenDisputesSQL is the query of ListOpenDisputes, for the test of
// its plan.
var ListOpenDisputesSQL = listOpenDisputesSQL

// UpdateInboxEventsSQL is the statement of UpdateInboxEvents, for the test
// of its plan.
const UpdateInboxEventsSQL = updateInboxEventsSQL

// The batched statements that run on their generic plans, for the tests
// of their plans.
var (
	ApplyMovesSQL    = applyMovesSQL
	FindPurchasesSQL = findPurchasesSQL
	AppendOutboxSQL  = appendOutboxSQL
)

// CachedPlan returns the plan that the connection of tx caches for the
// store's prepared statement sql, as EXPLAIN shows it run with args: the
// generic plan, made when and as the store made it.
func CachedPlan(ctx context.Context, tx reconcile.Tx, sql string, args []string) (string, error) {
	c := tx.(*txn).tx
	var name string
	if err := c.QueryRow(ctx, `SELECT name FROM pg_prepared_statements WHERE statement = $1`, sql).Scan(&name); err != nil {
		return "", err
	}
	if _, err := c.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
		return "", err
	}
	defer c.Exec(ctx, `SET LOCAL plan_cache_mode TO DEFAULT`) //nolint:errcheck // the plan is what matters
	rows, _ := c.Query(ctx, `EXPLAIN EXECUTE `+pgx.Identifier{name}.Sanitize()+`(`+strings.Join(args, `, `)+`)`)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

// PreparedPlans returns how many generic and custom plans the connection
// of tx has run the store's prepared statement sql on
// (pg_prepared_statements).
func PreparedPlans(ctx context.Context, tx reconcile.Tx, sql string) (generic, custom int64, err error) {
	err = tx.(*txn).tx.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, sql).Scan(&generic, &custom)
	return generic, custom, err
}

// QueryString runs sql, which returns one text value, in tx.
func QueryString(ctx context.Context, tx reconcile.Tx, sql string) (string, error) {
	var v string
	err := tx.(*txn).tx.QueryRow(ctx, sql).Scan(&v)
	return v, err
}

// ListAccountsSQL is the query of ListAccounts, for the test of its
// plan.
const ListAccountsSQL = listAccountsSQL
