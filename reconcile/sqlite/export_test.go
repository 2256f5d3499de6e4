package sqlite

import (
	"database/sql"

	"github.com/payrecon/payrecon/reconcile"
)

// DB exposes the store's connection pool to the tests: its one
// connection, with the store's settings.
func (s *Store) DB() *sql.DB { return s.db }

// ListUnmatchedEventsSQL is the query of ListUnmatchedEvents, for the test
// of its plan.
const ListUnmatchedEventsSQL = listUnmatchedEventsSQL

// The queries payrecon runs on a schedule, for the tests of their plans.
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

// ListAccountsSQL is the query of ListAccounts, for the test of its
// plan.
const ListAccountsSQL = listAccountsSQL
