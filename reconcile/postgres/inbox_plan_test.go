package postgres_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/reconcile/postgres"
)

// TestUpdateInboxEventsPlanFindsEventsByKey plans UpdateInboxEvents'
// statement as a connection caches it on a new database, on an empty
// inbox, under the setting the store runs it with (enable_seqscan off):
// it finds each event by the inbox's primary key and never scans the
// inbox, which by the time the plan runs may hold millions of events.
func TestUpdateInboxEventsPlanFindsEventsByKey(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	exec(t, conn, `SET plan_cache_mode = force_generic_plan`)
	exec(t, conn, `SET `+postgres.UpdateInboxEventsSetting[0]+` = `+postgres.UpdateInboxEventsSetting[1])
	exec(t, conn, `PREPARE update_inbox AS `+postgres.UpdateInboxEventsSQL)
	rows, _ := conn.Query(t.Context(), `EXPLAIN EXECUTE update_inbox(
    ARRAY['stripe'], ARRAY['evt_1'], ARRAY['pur_1'], ARRAY['applied'], ARRAY[now()], 1)`)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	plan := strings.Join(lines, "\n")
	if strings.Contains(plan, "Seq Scan on webhook_inbox") || !strings.Contains(plan, "webhook_inbox_pkey") {
		t.Errorf("UpdateInboxEvents does not find its events by key:\n%s", plan)
	}
}
