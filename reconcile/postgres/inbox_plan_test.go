package postgres_test

import (
	"strings"
	"testing"

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
	exec(t, conn, postgres.UpdateInboxEventsSetting)
	plan, err := explain(t.Context(), conn, planCase{name: "UpdateInboxEvents", sql: postgres.UpdateInboxEventsSQL,
		args: []string{"ARRAY['stripe']", "ARRAY['evt_1']", "ARRAY['pur_1']", "ARRAY['applied']", "ARRAY[now()]", "1"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plan, "Seq Scan on webhook_inbox") || !strings.Contains(plan, "webhook_inbox_pkey") {
		t.Errorf("UpdateInboxEvents does not find its events by key:\n%s", plan)
	}
}
