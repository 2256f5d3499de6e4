package migrations_test

import (
	"slices"
	"testing"

	"github.com/payrecon/payrecon/migrations"
)

// accountsVersion is the migration that adds the provider accounts, per
// dialect.
var accountsVersion = map[migrations.Dialect]int64{migrations.Postgres: 18, migrations.SQLite: 16}

// TestMigrationAccounts applies the accounts' migration (00018 on
// Postgres, 00016 on SQLite) to a database with a purchase and an inbox
// event: both become the platform's. A connected account is stored, a
// malformed one refused, and a purchase's account cannot change. Its
// Down drops the columns and keeps the rows.
func TestMigrationAccounts(t *testing.T) {
	for _, d := range dialects {
		t.Run(string(d.name), func(t *testing.T) {
			ctx := t.Context()
			db := d.open(t)
			p := newProvider(t, db, d.name, d.goose)
			v := accountsVersion[d.name]
			if _, err := p.UpTo(ctx, v-1); err != nil {
				t.Fatalf("up to %d: %v", v-1, err)
			}
			purchase := func(id, account string) error {
				cols, vals := "", ""
				if account != "-" {
					cols, vals = ", account", ", '"+account+"'"
				}
				_, err := db.ExecContext(ctx, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at`+cols+`)
VALUES ('`+id+`', 'cus_1', 100, 'eur', 'created', 1, `+d.now+`, `+d.now+vals+`)`)
				return err
			}
			event := func(id, account string) error {
				cols, vals := "", ""
				if account != "-" {
					cols, vals = ", account", ", '"+account+"'"
				}
				_, err := db.ExecContext(ctx, `INSERT INTO webhook_inbox (provider, event_id, outcome, received_at`+cols+`)
VALUES ('stripe', '`+id+`', 'unmatched', `+d.now+vals+`)`)
				return err
			}
			if err := purchase("pur_old", "-"); err != nil {
				t.Fatal(err)
			}
			if err := event("evt_old", "-"); err != nil {
				t.Fatal(err)
			}

			if _, err := p.UpTo(ctx, v); err != nil {
				t.Fatalf("up to %d: %v", v, err)
			}
			accounts := func() []string {
				rows := queryStrings(t, db, `SELECT id || ':' || account FROM purchases ORDER BY id`)
				return append(rows, queryStrings(t, db, `SELECT event_id || ':' || account FROM webhook_inbox ORDER BY event_id`)...)
			}
			if got, want := accounts(), []string{"pur_old:", "evt_old:"}; !slices.Equal(got, want) {
				t.Fatalf("after the migration: %v, want %v", got, want)
			}
			if err := purchase("pur_new", "acct_1A"); err != nil {
				t.Fatalf("a purchase of a connected account: %v", err)
			}
			if err := event("evt_new", "acct_1A"); err != nil {
				t.Fatalf("an event of a connected account: %v", err)
			}
			for _, bad := range []string{"acct_", "acct_1_2", "x"} {
				if err := purchase("pur_bad", bad); err == nil {
					t.Fatalf("a purchase of account %q was stored", bad)
				}
				if err := event("evt_bad", bad); err == nil {
					t.Fatalf("an event of account %q was stored", bad)
				}
			}
			for _, stmt := range []string{
				`UPDATE purchases SET account = 'acct_2' WHERE id = 'pur_new'`,
				`UPDATE purchases SET account = '' WHERE id = 'pur_new'`,
				`UPDATE purchases SET account = 'acct_2' WHERE id = 'pur_old'`,
			} {
				if _, err := db.ExecContext(ctx, stmt); err == nil {
					t.Fatalf("%s: accepted", stmt)
				}
			}
			mustExec(t, db, `UPDATE purchases SET state = 'submitted', account = account WHERE id = 'pur_new'`)
			if got, want := accounts(), []string{"pur_new:acct_1A", "pur_old:", "evt_new:acct_1A", "evt_old:"}; !slices.Equal(got, want) {
				t.Fatalf("after the writes: %v, want %v", got, want)
			}

			if _, err := p.DownTo(ctx, v-1); err != nil {
				t.Fatalf("down to %d: %v", v-1, err)
			}
			if got, want := queryStrings(t, db, `SELECT id FROM purchases ORDER BY id`), []string{"pur_new", "pur_old"}; !slices.Equal(got, want) {
				t.Fatalf("purchases after the Down: %v, want %v", got, want)
			}
			if got, want := queryStrings(t, db, `SELECT event_id FROM webhook_inbox ORDER BY event_id`), []string{"evt_new", "evt_old"}; !slices.Equal(got, want) {
				t.Fatalf("events after the Down: %v, want %v", got, want)
			}
			for _, table := range []string{"purchases", "webhook_inbox"} {
				if _, err := db.ExecContext(ctx, `SELECT account FROM `+table); err == nil {
					t.Fatalf("after the Down, %s.account is still there", table)
				}
			}
			if _, err := p.Up(ctx); err != nil {
				t.Fatalf("up again: %v", err)
			}
		})
	}
}

// jobAccountsVersion is the migration that adds the jobs' account, per
// dialect.
var jobAccountsVersion = map[migrations.Dialect]int64{migrations.Postgres: 19, migrations.SQLite: 17}

// TestMigrationJobAccounts applies the jobs' account migration to a
// database with open jobs of a platform's purchase and of a connected
// account's, and a done one: each job takes its purchase's account, so
// that the account's claims find it, the done one too, which may be
// reopened. Its Down drops the column and keeps the jobs.
func TestMigrationJobAccounts(t *testing.T) {
	for _, d := range dialects {
		t.Run(string(d.name), func(t *testing.T) {
			ctx := t.Context()
			db := d.open(t)
			p := newProvider(t, db, d.name, d.goose)
			v := jobAccountsVersion[d.name]
			if _, err := p.UpTo(ctx, v-1); err != nil {
				t.Fatalf("up to %d: %v", v-1, err)
			}
			for _, r := range []struct{ id, account, done string }{
				{"pur_plat", "", "NULL"}, {"pur_conn", "acct_1A", "NULL"}, {"pur_done", "acct_1A", d.now},
			} {
				mustExec(t, db, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at, account)
VALUES ('`+r.id+`', 'cus_1', 100, 'eur', 'created', 1, `+d.now+`, `+d.now+`, '`+r.account+`')`)
				mustExec(t, db, `INSERT INTO jobs (kind, purchase_id, run_at, done_at) VALUES ('purchase', '`+r.id+`', `+d.now+`, `+r.done+`)`)
			}
			if _, err := p.UpTo(ctx, v); err != nil {
				t.Fatalf("up to %d: %v", v, err)
			}
			jobs := func() []string {
				return queryStrings(t, db, `SELECT purchase_id || ':' || account FROM jobs ORDER BY purchase_id`)
			}
			if got, want := jobs(), []string{"pur_conn:acct_1A", "pur_done:acct_1A", "pur_plat:"}; !slices.Equal(got, want) {
				t.Fatalf("after the migration: %v, want %v", got, want)
			}
			if _, err := db.ExecContext(ctx, `UPDATE jobs SET account = 'acct_' WHERE purchase_id = 'pur_plat'`); err == nil {
				t.Fatal("a job of account acct_ was stored")
			}
			if _, err := p.DownTo(ctx, v-1); err != nil {
				t.Fatalf("down to %d: %v", v-1, err)
			}
			if got, want := queryStrings(t, db, `SELECT purchase_id FROM jobs ORDER BY purchase_id`), []string{"pur_conn", "pur_done", "pur_plat"}; !slices.Equal(got, want) {
				t.Fatalf("jobs after the Down: %v, want %v", got, want)
			}
			if _, err := db.ExecContext(ctx, `SELECT account FROM jobs`); err == nil {
				t.Fatal("after the Down, jobs.account is still there")
			}
			if _, err := p.Up(ctx); err != nil {
				t.Fatalf("up again: %v", err)
			}
		})
	}
}
