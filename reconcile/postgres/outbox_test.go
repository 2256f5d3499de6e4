package postgres_test

import (
	"testing"
)

// TestOutboxRowsAreImmutable: no UPDATE changes an outbox row (SQLSTATE
// PR002); deleting (the retention sweep) is allowed.
func TestOutboxRowsAreImmutable(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	exec(t, conn, `INSERT INTO outbox (event_id, purchase_id, event_type, schema_version, sequence, payload, digest, created_at)
VALUES ('evt_1', 'pur_1', 'purchase.succeeded', 1, 1, '{}'::bytea, 'd', now())`)
	for _, stmt := range []string{
		`UPDATE outbox SET payload = '{"x":1}'::bytea`,
		`UPDATE outbox SET digest = 'e' WHERE event_id = 'evt_1'`,
		`UPDATE outbox SET sequence = 2`,
		`UPDATE outbox SET payload = payload WHERE false`,
	} {
		_, err := conn.Exec(t.Context(), stmt)
		if stmt == `UPDATE outbox SET payload = payload WHERE false` {
			if err != nil {
				t.Fatalf("%s: %v (a row trigger: nothing touched, nothing refused)", stmt, err)
			}
			continue
		}
		wantSQLState(t, stmt, err, "PR002", "outbox", "immutable")
	}
	var payload string
	if err := conn.QueryRow(t.Context(), `SELECT convert_from(payload, 'UTF8') FROM outbox`).Scan(&payload); err != nil || payload != "{}" {
		t.Fatalf("payload = %q, %v after the refusals; want {}", payload, err)
	}
	exec(t, conn, `DELETE FROM outbox WHERE event_id = 'evt_1'`)
}
