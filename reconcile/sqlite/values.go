package sqlite

import "time"

// Times as SQLite keeps them: INTEGER microseconds since the Unix epoch.
// The NULL handling of strings and byte strings, and the provider
// request's JSON, are internal/sqlstore's, shared with reconcile/postgres.

// micros maps t to its column value: microseconds since the Unix epoch
// (finer digits truncated), or NULL for the zero time.
func micros(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

// fromMicros is the inverse of micros for a non-NULL column, in UTC.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// fromNullMicros maps NULL (nil) to the zero time.
func fromNullMicros(us *int64) time.Time {
	if us == nil {
		return time.Time{}
	}
	return fromMicros(*us)
}
