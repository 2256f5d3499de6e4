package postgres

// ListUnmatchedEventsSQL is the query of ListUnmatchedEvents, for the test
// of its plan.
const ListUnmatchedEventsSQL = listUnmatchedEventsSQL
