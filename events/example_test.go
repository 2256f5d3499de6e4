package events_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/payrecon/payrecon/events"
)

// A shop that grants access to a course once per purchase. Two lines of
// defence keep it to once: the receiver's inbox (a repeat of an event is
// not applied again) and the shop's own business key, UNIQUE (purchase_id,
// product) on its grants, which also holds against a second event that
// means the same thing (here an operator confirming a purchase that had
// already succeeded) and after old inbox rows are deleted.
func Example() {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	// The shop's database. (In memory, one connection, for the example; a
	// file or PostgreSQL in a shop. Give SQLite a busy timeout.)
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)

	cfg := events.Config{
		DB:      db,
		Dialect: events.SQLite,
		Secrets: []string{"whsec_shop"},
		Now:     func() time.Time { return now },
		Logger:  slog.New(slog.DiscardHandler),
	}
	if err := events.Migrate(ctx, cfg); err != nil {
		log.Fatal(err)
	}
	// The shop's own tables: what it sold (written when it created the
	// purchase through payrecon's API), and what it granted.
	for _, ddl := range []string{
		`CREATE TABLE orders (purchase_id TEXT PRIMARY KEY, product TEXT NOT NULL)`,
		`CREATE TABLE access_grants (
			purchase_id TEXT NOT NULL,
			product     TEXT NOT NULL,
			granted_by  TEXT NOT NULL,
			UNIQUE (purchase_id, product)
		)`,
		`INSERT INTO orders VALUES ('pur_1', 'course-go')`,
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			log.Fatal(err)
		}
	}

	// The effect: in the receiver's transaction, grant access when the
	// purchase succeeded. (The payload's fields are the sender's to
	// define; this example reads a "state".)
	grant := func(ctx context.Context, tx *sql.Tx, ev events.Event) error {
		switch ev.Type {
		case events.PurchaseSucceeded, events.PurchaseResolved:
		default:
			return nil // nothing to do for other types, known or not
		}
		var data struct {
			State string `json:"state"`
		}
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			return err
		}
		if data.State != "succeeded" {
			return nil
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO access_grants (purchase_id, product, granted_by)
			SELECT purchase_id, product, ? FROM orders WHERE purchase_id = ?
			ON CONFLICT (purchase_id, product) DO NOTHING`, ev.ID, ev.PurchaseID)
		return err
	}
	receiver, err := events.NewReceiver(cfg, grant)
	if err != nil {
		log.Fatal(err)
	}
	shop := httptest.NewServer(receiver) // in a shop: http.Handle("/payrecon/events", receiver)
	defer shop.Close()

	// payrecon's side: two events of the purchase, each sent until a 2xx.
	succeeded := events.Event{ID: "evt_1", Type: events.PurchaseSucceeded, SchemaVersion: events.SchemaVersion,
		PurchaseID: "pur_1", Sequence: 1, CreatedAt: now}
	confirmed := events.Event{ID: "evt_2", Type: events.PurchaseResolved, SchemaVersion: events.SchemaVersion,
		PurchaseID: "pur_1", Sequence: 2, CreatedAt: now}
	if err := succeeded.SetData(map[string]string{"state": "succeeded"}); err != nil {
		log.Fatal(err)
	}
	if err := confirmed.SetData(map[string]string{"state": "succeeded"}); err != nil {
		log.Fatal(err)
	}
	send := func(ev events.Event, attempt int) {
		req, err := events.NewRequest(ctx, shop.URL, "whsec_shop", ev, attempt, now)
		if err != nil {
			log.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		var answer struct{ Outcome string }
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s attempt %d: %d %s\n", ev.Type, attempt, resp.StatusCode, answer.Outcome)
	}
	send(succeeded, 1)
	send(succeeded, 2) // the 2xx was lost on the way back: sent again
	send(confirmed, 1) // a new event that grants again: the business key holds

	var grants int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM access_grants WHERE purchase_id = 'pur_1'`).Scan(&grants); err != nil {
		log.Fatal(err)
	}
	fmt.Println("grants for pur_1:", grants)
	// Output:
	// purchase.succeeded attempt 1: 200 applied
	// purchase.succeeded attempt 2: 200 duplicate
	// purchase.resolved attempt 1: 200 applied
	// grants for pur_1: 1
}
