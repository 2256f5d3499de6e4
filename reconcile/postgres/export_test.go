package postgres

import (
	"context"

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
	CountByStateSQL         = countByStateSQL
	CountEscalatedSQL       = countEscalatedSQL
	OldestUncertainSinceSQL = oldestUncertainSinceSQL
	CountOpenFindingsSQL    = countOpenFindingsSQL
	ListOverdueUncertainSQL = listOverdueUncertainSQL
	ListEscalatedSQL        = listEscalatedSQL
	ListSubmittedBetweenSQL = listSubmittedBetweenSQL
	GetAuditRunSQL          = getAuditRunSQL
)

// ListFindingsSQL is the query of ListFindings and its arguments.
func ListFindingsSQL(purchaseID string, includeClosed bool, limit int) (string, []any) {
	return listFindingsSQL(purchaseID, includeClosed, limit)
}

// The refunds' periodic queries, for the tests of their plans.
const (
	CountRefundsByStateSQL         = countRefundsByStateSQL
	OldestUncertainRefundSinceSQL  = oldestUncertainRefundSinceSQL
	ListOverdueUncertainRefundsSQL = listOverdueUncertainRefundsSQL
	ListEscalatedRefundsSQL        = listEscalatedRefundsSQL
)

// UpdateInboxEventsSQL is the statement of UpdateInboxEvents, for the test
// of its plan.
const UpdateInboxEventsSQL = updateInboxEventsSQL

// ByKeyPlan are the SET commands of the planner settings the batched
// statements that find their rows by key run under (ApplyMovesSQL,
// UpdateInboxEventsSQL).
func ByKeyPlan() []string {
	var sets []string
	for _, s := range byKeyPlan {
		sets = append(sets, "SET "+s.name+" = "+s.value)
	}
	return sets
}

// The batched statements that run on their generic plans, for the tests
// of their plans.
var (
	ApplyMovesSQL    = applyMovesSQL
	FindPurchasesSQL = findPurchasesSQL
	AppendOutboxSQL  = appendOutboxSQL
)

// PreparedPlans returns how many generic and custom plans the connection
// of tx has run the store's prepared statement sql on
// (pg_prepared_statements).
func PreparedPlans(ctx context.Context, tx reconcile.Tx, sql string) (generic, custom int64, err error) {
	err = tx.(*txn).tx.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, sql).Scan(&generic, &custom)
	return generic, custom, err
}
