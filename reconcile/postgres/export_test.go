package postgres

// ListUnmatchedEventsSQL is the query of ListUnmatchedEvents, for the test
// of its plan.
const ListUnmatchedEventsSQL = listUnmatchedEventsSQL

// ClaimDueSQL is the statement of ClaimJobs, for the test of its plan.
var ClaimDueSQL = claimDueSQL
