package postgres

import (
	"encoding/json"
	"time"
)

// Times as PostgreSQL keeps them: timestamptz, to the microsecond. The
// NULL handling of strings and byte strings, and the provider request's
// JSON, are internal/sqlstore's, shared with reconcile/sqlite.

// nullTime maps the zero time to NULL.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// derefTime maps NULL (nil) to the zero time, and a time to UTC.
func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// nullJSON maps a nil JSON document to NULL, and passes any other as
// json.RawMessage, the text of a jsonb value.
func nullJSON(b []byte) any {
	if b == nil {
		return nil
	}
	return json.RawMessage(b)
}
