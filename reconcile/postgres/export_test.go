package postgres

import "github.com/jackc/pgx/v5/pgxpool"

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

// UpdateInboxEventsSetting is the SET command of the planner setting
// UpdateInboxEventsSQL runs under.
var UpdateInboxEventsSetting = "SET " + updateInboxEventsSetting.name + " = " + updateInboxEventsSetting.value
