package postgres_test

import (
	"context"
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

// byKeyPlanCase is a batched statement that runs on its generic plan made
// with sequential scans off, the arguments to explain it with, and the
// indexes by which it must find its rows.
type byKeyPlanCase struct {
	c       planCase
	indexes []string
}

func byKeyPlanCases() []byKeyPlanCase {
	applyArgs := []string{"NULL"} // the clock; the arrays' values do not matter to a generic plan
	for range 36 {
		applyArgs = append(applyArgs, "NULL")
	}
	return []byKeyPlanCase{
		{planCase{name: "ApplyMoves", sql: postgres.ApplyMovesSQL, args: applyArgs}, []string{"jobs_pkey", "purchases_pkey"}},
		{planCase{name: "UpdateInboxEvents", sql: postgres.UpdateInboxEventsSQL,
			args: []string{"ARRAY['stripe']", "ARRAY['evt_1']", "ARRAY['pur_1']", "ARRAY['applied']", "ARRAY[now()]", "1"}},
			[]string{"webhook_inbox_pkey"}},
		{planCase{name: "FindPurchases", sql: postgres.FindPurchasesSQL, args: []string{"ARRAY['pur_1']", "ARRAY['pi_1']"}},
			[]string{"purchases_pkey", "purchases_provider_payment_id_key"}},
	}
}

// TestBatchedStatementsRunOnTheirGenericPlans runs the batched statements
// that run on their generic plans through the store, on a new database's
// nearly empty tables, more often than PostgreSQL plans a statement anew
// before it considers the generic plan. Then it reads the connection's
// prepared statements: each has run on its generic plan alone, never on a
// custom plan made for its arguments. The generic plans of those that
// find rows by key, as the connection caches them, read each table by
// its keys and scan none, although they were made on tables that held
// nothing: tables that may hold millions of rows by the time the plan
// runs. After each call the settings are the defaults again.
func TestBatchedStatementsRunOnTheirGenericPlans(t *testing.T) {
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
		defaults := settings(ctx, t, tx)
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
			if got := settings(ctx, t, tx); got != defaults {
				t.Fatalf("settings after the calls = %s; want the defaults, %s", got, defaults)
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
		for _, tc := range byKeyPlanCases() {
			plan, err := postgres.CachedPlan(ctx, tx, tc.c.sql, tc.c.args)
			if err != nil {
				return fmt.Errorf("%s: %w", tc.c.name, err)
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
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// settings returns the planner settings the store sets for its
// statements, as in force in tx.
func settings(ctx context.Context, t *testing.T, tx reconcile.Tx) string {
	t.Helper()
	got, err := postgres.QueryString(ctx, tx, `SELECT current_setting('plan_cache_mode') || ' ' || current_setting('enable_seqscan') || ' ' || current_setting('jit')`)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
