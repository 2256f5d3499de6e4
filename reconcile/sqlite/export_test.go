package sqlite

import "database/sql"

// DB exposes the store's connection pool to the tests: its one
// connection, with the store's settings.
func (s *Store) DB() *sql.DB { return s.db }

// ListUnmatchedEventsSQL is the query of ListUnmatchedEvents, for the test
// of its plan.
const ListUnmatchedEventsSQL = listUnmatchedEventsSQL
