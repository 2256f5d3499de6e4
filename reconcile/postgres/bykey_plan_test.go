package postgres_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/events"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/postgres"
	"github.com/payrecon/payrecon/statemachine"
)

// byKeyPlanCases are the batched statements that run on their generic
// plan made with sequential scans off, and the indexes by which each
// must find its rows.
func byKeyPlanCases() []struct {
	c       planCase
	indexes []string
} {
	applyArgs := []string{"NULL"} // the clock; the arrays' values do not matter to a generic plan
	for range 36 {
		applyArgs = append(applyArgs, "NULL")
	}
	return []struct {
		c       planCase
		indexes []string
	}{
		{planCase{name: "ApplyMoves", sql: postgres.ApplyMovesSQL, args: applyArgs}, []string{"jobs_pkey", "purchases_pkey"}},
		{planCase{name: "UpdateInboxEvents", sql: postgres.UpdateInboxEventsSQL,
			args: []string{"ARRAY['stripe']", "ARRAY['evt_1']", "ARRAY['pur_1']", "ARRAY['applied']", "ARRAY[now()]", "1"}},
			[]string{"webhook_inbox_pkey"}},
		{planCase{name: "FindPurchases", sql: postgres.FindPurchasesSQL, args: []string{"ARRAY['pur_1']", "ARRAY['pi_1']"}},
			[]string{"purchases_pkey", "purchases_provider_payment_id_key"}},
	}
}

// TestByKeyPlansFindRowsByKey plans each batched statement as a
// connection caches it on a new database, on empty tables, under the
// settings the store runs it with (byKeyPlan): it finds each row by its
// table's primary key and never scans a table, which by the time the
// plan runs may hold millions of rows. On their generic plans made with
// sequential scans on, both scan a table here.
func TestByKeyPlansFindRowsByKey(t *testing.T) {
	_, url := newStore(t)
	conn := rawConn(t, url)
	for _, set := range postgres.ByKeyPlan() {
		exec(t, conn, set)
	}
	for _, tc := range byKeyPlanCases() {
		plan, err := explain(t.Context(), conn, tc.c, "")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(plan, "Seq Scan on") {
			t.Errorf("%s scans a table:\n%s", tc.c.name, plan)
		}
		for _, index := range tc.indexes {
			if !strings.Contains(plan, index) {
				t.Errorf("%s does not find its rows by %s:\n%s", tc.c.name, index, plan)
			}
		}
	}
}

// TestBatchedStatementsAreNotPlannedPerCall runs the batched statements
// that run on their generic plans through the store, more often than
// PostgreSQL plans a statement anew before it considers the generic
// plan, and reads the connection's prepared statements: each has run on
// its generic plan alone, never on a custom plan made for its arguments.
func TestBatchedStatementsAreNotPlannedPerCall(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	now := time.Now().UTC()
	p := reconcile.Purchase{ID: "pur_1", Customer: "cus_1", Amount: 1250, Currency: "eur",
		State: statemachine.Created, Version: 1, CreatedAt: now, UpdatedAt: now}
	none := reconcile.Purchase{ID: "pur_none", State: statemachine.Created, Version: 1}
	err := s.InTx(ctx, func(tx reconcile.Tx) error {
		if err := tx.InsertPurchase(ctx, p); err != nil {
			return err
		}
		for range 7 {
			if applied, err := tx.ApplyMoves(ctx, []reconcile.Move{{From: none, To: none}}); err != nil || applied[0] {
				t.Fatalf("ApplyMoves of a purchase there is not = %v, %v; want [false], nil", applied, err)
			}
			err := tx.UpdateInboxEvents(ctx, []reconcile.InboxUpdate{{Provider: "stripe", EventID: "evt_none", Outcome: reconcile.EventApplied}})
			if !errors.Is(err, reconcile.ErrNotFound) {
				t.Fatalf("UpdateInboxEvents of an event there is not = %v; want ErrNotFound", err)
			}
			if found, err := tx.FindPurchases(ctx, []string{p.ID}, []string{"pi_none"}); err != nil || len(found) != 1 {
				t.Fatalf("FindPurchases = %d purchases, %v; want 1, nil", len(found), err)
			}
			e := events.Event{ID: events.NewID(), Type: events.PurchaseSucceeded, PurchaseID: p.ID, CreatedAt: now}
			if err := e.SetData(map[string]string{"state": "succeeded"}); err != nil {
				return err
			}
			if _, err := tx.AppendOutbox(ctx, e); err != nil {
				return err
			}
		}
		for _, c := range []struct{ name, sql string }{
			{"ApplyMoves", postgres.ApplyMovesSQL},
			{"UpdateInboxEvents", postgres.UpdateInboxEventsSQL},
			{"FindPurchases", postgres.FindPurchasesSQL},
			{"AppendOutbox", postgres.AppendOutboxSQL},
		} {
			generic, custom, err := postgres.PreparedPlans(ctx, tx, c.sql)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if custom != 0 || generic == 0 {
				t.Errorf("%s: %d custom plans and %d generic ones; want none custom", c.name, custom, generic)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
