package bench

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// roundTrips counts each statement the stores send, and which of them
// are transaction control, in batches and alone.
func TestRoundTripsCountStatements(t *testing.T) {
	type sent struct {
		sql   string
		args  []any
		batch bool // a statement of a batch, not sent alone
	}
	for _, c := range []struct {
		name                               string
		sent                               []sent
		roundTrips, statements, txControls int64
	}{
		{"a statement alone", []sent{{sql: "SELECT 1"}}, 1, 1, 0},
		{"COMMIT alone", []sent{{sql: "COMMIT"}}, 1, 1, 1},
		{"joined savepoint statements", []sent{{sql: "ROLLBACK TO SAVEPOINT x; RELEASE SAVEPOINT x"}}, 1, 2, 2},
		{"a statement with a semicolon in it", []sent{{sql: "SELECT ';'"}}, 1, 1, 0},
		{"pending statements joined to one", []sent{{sql: "BEGIN ISOLATION LEVEL READ COMMITTED; SAVEPOINT a; SELECT 1"}}, 1, 3, 2},
		{"a statement with arguments", []sent{{sql: "UPDATE t SET a = $1; ", args: []any{1}}}, 1, 1, 0},
		{"a batch", []sent{
			{sql: "BEGIN ISOLATION LEVEL READ COMMITTED", batch: true},
			{sql: "  savepoint payrecon_write", batch: true},
			{sql: "INSERT INTO t VALUES ($1)", args: []any{1}, batch: true},
			{sql: "release savepoint payrecon_write", batch: true},
			{sql: "SET LOCAL jit = off", batch: true},
		}, 1, 5, 3},
		{"end and start transaction", []sent{{sql: "END"}, {sql: "START TRANSACTION"}, {sql: "ENDPOINT"}}, 3, 3, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &roundTrips{}
			inBatch := false
			for _, s := range c.sent {
				if !s.batch {
					inBatch = false
					r.TraceQueryStart(t.Context(), nil, pgx.TraceQueryStartData{SQL: s.sql, Args: s.args})
					continue
				}
				if !inBatch {
					inBatch = true
					r.TraceBatchStart(t.Context(), nil, pgx.TraceBatchStartData{})
				}
				r.TraceBatchQuery(t.Context(), nil, pgx.TraceBatchQueryData{SQL: s.sql, Args: s.args})
			}
			if got := [3]int64{r.n.Load(), r.statements.Load(), r.txControl.Load()}; got != [3]int64{c.roundTrips, c.statements, c.txControls} {
				t.Errorf("round trips, statements, transaction control = %v, want %v", got, [3]int64{c.roundTrips, c.statements, c.txControls})
			}
		})
	}
}
