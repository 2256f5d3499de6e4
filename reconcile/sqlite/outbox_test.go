package sqlite_test

import (
	"testing"
)

// TestOutboxRowsAreImmutable: no SQL path changes an outbox row's bytes,
// not an UPDATE, not a REPLACE; deleting (the retention sweep) is
// allowed.
func TestOutboxRowsAreImmutable(t *testing.T) {
	t.Parallel()
	_, path := newStore(t)
	db := rawDB(t, path)
	exec(t, db, `INSERT INTO outbox (event_id, purchase_id, event_type, schema_version, sequence, payload, digest, created_at)
VALUES ('evt_1', 'pur_1', 'purchase.succeeded', 1, 1, X'7B7D', 'd', 0)`)
	for _, stmt := range []string{
		`UPDATE outbox SET payload = X'7B2278223A317D'`,
		`UPDATE outbox SET digest = 'e' WHERE event_id = 'evt_1'`,
		`UPDATE outbox SET sequence = 2`,
		`REPLACE INTO outbox (event_id, purchase_id, event_type, schema_version, sequence, payload, digest, created_at)
VALUES ('evt_1', 'pur_1', 'purchase.succeeded', 1, 1, X'7B2278223A317D', 'd', 0)`,
	} {
		_, err := db.ExecContext(t.Context(), stmt)
		wantRaise(t, stmt, err, "outbox", "immutable")
	}
	if got := queryString(t, db, `SELECT hex(payload) FROM outbox WHERE event_id = 'evt_1'`); got != "7B7D" {
		t.Fatalf("payload = %s after the refusals, want 7B7D", got)
	}
	exec(t, db, `DELETE FROM outbox WHERE event_id = 'evt_1'`)
}
