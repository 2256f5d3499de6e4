package migrations_test

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/migrations"
	"github.com/payrecon/payrecon/statemachine"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func openPostgres(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

var _ = stdlib.GetDefaultDriver // registers the "pgx" database/sql driver

func version(t *testing.T, db *sql.DB) (current, latest int64) {
	t.Helper()
	current, latest, err := migrations.Version(t.Context(), db, migrations.Postgres)
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	return current, latest
}

func tableCount(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPostgresUpDownUp(t *testing.T) {
	db := openPostgres(t)
	ctx := t.Context()

	current, latest := version(t, db)
	if current != 0 || latest < 1 {
		t.Fatalf("empty database: version %d of %d, want 0 of at least 1", current, latest)
	}
	if n := tableCount(t, db); n != 0 {
		t.Fatalf("Version created %d tables on an empty database", n)
	}

	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		t.Fatalf("Up: %v", err)
	}
	if current, latest := version(t, db); current != latest {
		t.Fatalf("after Up: version %d of %d", current, latest)
	}
	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		t.Fatalf("second Up: %v", err)
	}

	// Every Down undoes its Up: all the way down leaves only goose's table.
	fsys, err := migrations.FS(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	if n := tableCount(t, db); n != 1 {
		t.Fatalf("after down to 0: %d tables, want only goose_db_version", n)
	}
	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		t.Fatalf("Up after Down: %v", err)
	}
	if current, latest := version(t, db); current != latest {
		t.Fatalf("after Up again: version %d of %d", current, latest)
	}
}

func TestDialects(t *testing.T) {
	if _, err := migrations.FS("oracle"); err == nil {
		t.Fatal("FS(oracle) succeeded")
	}
	if err := migrations.Up(t.Context(), &sql.DB{}, "oracle"); err == nil {
		t.Fatal("Up(oracle) succeeded")
	}
	for _, d := range []migrations.Dialect{migrations.Postgres, migrations.SQLite} {
		fsys, err := migrations.FS(d)
		if err != nil {
			t.Fatalf("FS(%s): %v", d, err)
		}
		files, err := fs.Glob(fsys, "*.sql")
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: migrations %v, %v; want at least one", d, files, err)
		}
	}
}

// openSQLite opens a new, empty SQLite file with foreign keys on, as the
// store's connections have them.
func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "payrecon.db")+"?_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// dialects are the migration sets under test, each with a fresh
// database, a goose provider over it, and a timestamp literal.
var dialects = []struct {
	name  migrations.Dialect
	open  func(t *testing.T) *sql.DB
	goose goose.Dialect
	now   string // a timestamp value in SQL
}{
	{migrations.Postgres, openPostgres, goose.DialectPostgres, "now()"},
	{migrations.SQLite, openSQLite, goose.DialectSQLite3, "0"},
}

func newProvider(t *testing.T, db *sql.DB, dialect migrations.Dialect, gd goose.Dialect) *goose.Provider {
	t.Helper()
	fsys, err := migrations.FS(dialect)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(gd, db, fsys)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustExec(t *testing.T, db *sql.DB, query string) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func queryStrings(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// transitionTable returns the rows of a transition table
// (allowed_transitions, refund_allowed_transitions,
// dispute_allowed_transitions) as "from -> to" lines, sorted.
func transitionTable(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	got := queryStrings(t, db, `SELECT from_state || ' -> ' || to_state FROM `+table)
	slices.Sort(got)
	return got
}

// TestTransitionTableIsReadOnly: allowed_transitions is exactly
// statemachine.Transitions(), refund_allowed_transitions exactly
// statemachine.Refund.Transitions(), dispute_allowed_transitions exactly
// statemachine.Dispute.Transitions(), and the database refuses any
// change to any of them.
func TestTransitionTableIsReadOnly(t *testing.T) {
	for _, d := range dialects {
		t.Run(string(d.name), func(t *testing.T) {
			db := d.open(t)
			if err := migrations.Up(t.Context(), db, d.name); err != nil {
				t.Fatalf("Up: %v", err)
			}
			for _, tc := range []struct {
				table string
				m     statemachine.Machine
			}{
				{"allowed_transitions", statemachine.Purchase},
				{"refund_allowed_transitions", statemachine.Refund},
				{"dispute_allowed_transitions", statemachine.Dispute},
			} {
				var want []string
				for _, p := range tc.m.Transitions() {
					want = append(want, string(p.From)+" -> "+string(p.To))
				}
				slices.Sort(want)
				if got := transitionTable(t, db, tc.table); !slices.Equal(got, want) {
					t.Fatalf("%s = %v, statemachine.%s.Transitions() = %v", tc.table, got, tc.m.Name(), want)
				}

				// Each statement names rows the table holds (SQLite's
				// row triggers refuse only a statement that touches
				// one), or a move it does not.
				moves := tc.m.Transitions()
				first, last := moves[0], moves[len(moves)-1]
				start := string(tc.m.Start())
				stmts := []string{
					`INSERT INTO ` + tc.table + ` (from_state, to_state) VALUES ('` + start + `', '` + start + `')`,
					`UPDATE ` + tc.table + ` SET to_state = '` + string(last.To) + `' WHERE from_state = '` + string(first.From) + `'`,
					`DELETE FROM ` + tc.table + ` WHERE from_state = '` + string(last.From) + `' AND to_state = '` + string(last.To) + `'`,
					`DELETE FROM ` + tc.table,
				}
				switch d.name {
				case migrations.Postgres:
					stmts = append(stmts,
						`TRUNCATE `+tc.table+` CASCADE`,
						`DELETE FROM `+tc.table+` WHERE false`, // a statement trigger: refused even when it would touch nothing
					)
				case migrations.SQLite:
					stmts = append(stmts, `INSERT OR REPLACE INTO `+tc.table+` (from_state, to_state) VALUES ('`+string(first.From)+`', '`+string(first.To)+`')`)
				}
				for _, stmt := range stmts {
					_, err := db.ExecContext(t.Context(), stmt)
					if err == nil || !strings.Contains(err.Error(), tc.table+" is read-only") {
						t.Fatalf("%s: got %v, want %s to refuse it", stmt, err, tc.table)
					}
					var pgErr *pgconn.PgError
					if d.name == migrations.Postgres && (!errors.As(err, &pgErr) || pgErr.Code != "PR002") {
						t.Fatalf("%s: got %v, want SQLSTATE PR002", stmt, err)
					}
				}
				if got := transitionTable(t, db, tc.table); !slices.Equal(got, want) {
					t.Fatalf("%s after the refused changes = %v, want %v", tc.table, got, want)
				}
			}
		})
	}
}

// TestMigration4KeepsTheAudit applies 00004 to a database with data:
// the transitions keep their rows, ids and guards (on SQLite the table
// is rebuilt), and gain the foreign key to allowed_transitions; its Down
// keeps them too. A transition outside the table stops the migration.
func TestMigration4KeepsTheAudit(t *testing.T) {
	for _, d := range dialects {
		t.Run(string(d.name), func(t *testing.T) {
			ctx := t.Context()
			// atVersion3 returns a database at version 3 with a purchase
			// and three transitions (ids 10, 20, 30).
			atVersion3 := func() (*sql.DB, *goose.Provider) {
				t.Helper()
				db := d.open(t)
				p := newProvider(t, db, d.name, d.goose)
				if _, err := p.UpTo(ctx, 3); err != nil {
					t.Fatalf("up to 3: %v", err)
				}
				mustExec(t, db, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at)
VALUES ('pur_1', 'cus_1', 100, 'eur', 'created', 1, `+d.now+`, `+d.now+`)`)
				for i, move := range [][2]string{{"created", "submitted"}, {"submitted", "uncertain"}, {"uncertain", "reconciling"}} {
					mustExec(t, db, fmt.Sprintf(`INSERT INTO transitions (id, purchase_id, from_state, to_state, cause, actor, at)
VALUES (%d, 'pur_1', '%s', '%s', 'submit', 'w1', %s)`, 10*(i+1), move[0], move[1], d.now))
				}
				return db, p
			}
			audit := func(db *sql.DB) []string {
				t.Helper()
				return queryStrings(t, db, `SELECT id || ':' || from_state || '>' || to_state || ':' || actor FROM transitions ORDER BY id`)
			}
			forbidden := fmt.Sprintf(`INSERT INTO transitions (purchase_id, from_state, to_state, cause, at)
VALUES ('pur_1', 'created', 'succeeded', 'operator', %s)`, d.now)

			// A move outside the table in the audit: 00004 refuses to
			// run, and changes nothing.
			db, p := atVersion3()
			mustExec(t, db, forbidden)
			before := audit(db)
			if _, err := p.Up(ctx); err == nil {
				t.Fatal("00004 ran over a transition outside allowed_transitions")
			}
			if v, err := p.GetDBVersion(ctx); err != nil || v != 3 {
				t.Fatalf("after the failed 00004: version %d, %v; want 3", v, err)
			}
			if got := audit(db); !slices.Equal(got, before) {
				t.Fatalf("transitions after the failed 00004: %v, want %v", got, before)
			}

			db, p = atVersion3()
			before = audit(db)
			if _, err := p.Up(ctx); err != nil {
				t.Fatalf("up: %v", err)
			}
			if got := audit(db); !slices.Equal(got, before) {
				t.Fatalf("transitions after 00004: %v, want %v", got, before)
			}
			if _, err := db.ExecContext(ctx, forbidden); err == nil {
				t.Fatal("after 00004, a transition outside allowed_transitions was inserted")
			}
			for _, stmt := range []string{`UPDATE transitions SET actor = 'mallory'`, `DELETE FROM transitions WHERE id = 10`} {
				if _, err := db.ExecContext(ctx, stmt); err == nil || !strings.Contains(err.Error(), "append-only") {
					t.Fatalf("after 00004, %s: %v, want the append-only refusal", stmt, err)
				}
			}
			mustExec(t, db, fmt.Sprintf(`INSERT INTO transitions (id, purchase_id, from_state, to_state, cause, actor, at)
VALUES (40, 'pur_1', 'reconciling', 'succeeded', 'webhook', 'w2', %s)`, d.now))
			after := audit(db)
			if want := append(slices.Clone(before), "40:reconciling>succeeded:w2"); !slices.Equal(after, want) {
				t.Fatalf("transitions after an insert: %v, want %v", after, want)
			}

			if _, err := p.DownTo(ctx, 3); err != nil {
				t.Fatalf("down to 3: %v", err)
			}
			if got := audit(db); !slices.Equal(got, after) {
				t.Fatalf("transitions after 00004's Down: %v, want %v", got, after)
			}
			if _, err := db.ExecContext(ctx, `UPDATE transitions SET actor = 'mallory'`); err == nil {
				t.Fatal("after 00004's Down, transitions is no longer append-only")
			}
			mustExec(t, db, forbidden) // 00003's schema has no such foreign key
		})
	}
}

// TestMigration5PurchaseClient applies 00005 to a database with a
// purchase: the old row has no client (NULL, which no API client may
// read), a new row can name one but not the empty string, and the Down
// drops the column and keeps the rows.
func TestMigration5PurchaseClient(t *testing.T) {
	for _, d := range dialects {
		t.Run(string(d.name), func(t *testing.T) {
			ctx := t.Context()
			db := d.open(t)
			p := newProvider(t, db, d.name, d.goose)
			if _, err := p.UpTo(ctx, 4); err != nil {
				t.Fatalf("up to 4: %v", err)
			}
			insert := func(id, client string) error {
				cols, vals := "", ""
				if client != "-" {
					cols, vals = ", client", ", '"+client+"'"
				}
				_, err := db.ExecContext(ctx, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at`+cols+`)
VALUES ('`+id+`', 'cus_1', 100, 'eur', 'created', 1, `+d.now+`, `+d.now+vals+`)`)
				return err
			}
			if err := insert("pur_old", "-"); err != nil {
				t.Fatalf("insert at version 4: %v", err)
			}
			if err := insert("pur_early", "shop"); err == nil {
				t.Fatal("version 4 has a client column; want 00005 to add it")
			}

			if _, err := p.UpTo(ctx, 5); err != nil {
				t.Fatalf("up to 5: %v", err)
			}
			clients := func() []string {
				return queryStrings(t, db, `SELECT id || ':' || coalesce(client, '<none>') FROM purchases ORDER BY id`)
			}
			if got, want := clients(), []string{"pur_old:<none>"}; !slices.Equal(got, want) {
				t.Fatalf("after 00005: %v, want %v", got, want)
			}
			if err := insert("pur_new", "shop"); err != nil {
				t.Fatalf("insert with a client: %v", err)
			}
			if err := insert("pur_empty", ""); err == nil {
				t.Fatal("a purchase with the empty client was stored; want NULL as the one spelling of none")
			}
			if got, want := clients(), []string{"pur_new:shop", "pur_old:<none>"}; !slices.Equal(got, want) {
				t.Fatalf("after the inserts: %v, want %v", got, want)
			}

			if _, err := p.DownTo(ctx, 4); err != nil {
				t.Fatalf("down to 4: %v", err)
			}
			if got, want := queryStrings(t, db, `SELECT id FROM purchases ORDER BY id`), []string{"pur_new", "pur_old"}; !slices.Equal(got, want) {
				t.Fatalf("after 00005's Down: %v, want %v", got, want)
			}
			if err := insert("pur_after", "shop"); err == nil {
				t.Fatal("after 00005's Down, the client column is still there")
			}
		})
	}
}

// TestMigration7CountsPurchases applies 00007 to a database with
// purchases in several states: it fills purchase_state_counts from them,
// the triggers keep the counts from then on, and the Down drops them.
// (Version 6 is the one before; UpTo stops at the last migration at or
// below it.)
func TestMigration7CountsPurchases(t *testing.T) {
	for _, d := range dialects {
		t.Run(string(d.name), func(t *testing.T) {
			ctx := t.Context()
			db := d.open(t)
			p := newProvider(t, db, d.name, d.goose)
			if _, err := p.UpTo(ctx, 6); err != nil {
				t.Fatalf("up to 6: %v", err)
			}
			insert := func(id string, path ...string) {
				t.Helper()
				mustExec(t, db, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at)
VALUES ('`+id+`', 'cus_1', 100, 'eur', 'created', 1, `+d.now+`, `+d.now+`)`)
				for _, st := range path {
					mustExec(t, db, `UPDATE purchases SET state = '`+st+`' WHERE id = '`+id+`'`)
				}
			}
			insert("pur_1")
			insert("pur_2", "submitted")
			insert("pur_3", "submitted", "succeeded")
			insert("pur_4", "submitted", "succeeded")
			insert("pur_5", "submitted", "uncertain", "reconciling")

			counted := func() []string {
				t.Helper()
				return queryStrings(t, db, `SELECT state || '=' || CAST(sum(n) AS text) FROM purchase_state_counts GROUP BY state ORDER BY state`)
			}
			plain := func() []string {
				t.Helper()
				return queryStrings(t, db, `SELECT s.state || '=' || CAST(count(p.id) AS text)
FROM purchase_states s LEFT JOIN purchases p ON p.state = s.state GROUP BY s.state ORDER BY s.state`)
			}
			if _, err := p.UpTo(ctx, 7); err != nil {
				t.Fatalf("up to 7: %v", err)
			}
			want := []string{"created=1", "declined=0", "reconciling=1", "submitted=1", "succeeded=2", "uncertain=0"}
			if got := counted(); !slices.Equal(got, want) {
				t.Fatalf("after 00007: counts %v, want %v", got, want)
			}
			insert("pur_6", "submitted", "declined")
			mustExec(t, db, `UPDATE purchases SET state = 'uncertain' WHERE state = 'reconciling'`)
			if got, want := counted(), plain(); !slices.Equal(got, want) {
				t.Fatalf("after writes: counts %v, a GROUP BY says %v", got, want)
			}

			if _, err := p.DownTo(ctx, 6); err != nil {
				t.Fatalf("down to 6: %v", err)
			}
			if _, err := db.ExecContext(ctx, `SELECT 1 FROM purchase_state_counts`); err == nil {
				t.Fatal("after 00007's Down, purchase_state_counts is still there")
			}
			insert("pur_7", "submitted")
			if _, err := p.UpTo(ctx, 7); err != nil {
				t.Fatalf("up to 7 again: %v", err)
			}
			if got, want := counted(), plain(); !slices.Equal(got, want) {
				t.Fatalf("after 00007 again: counts %v, a GROUP BY says %v", got, want)
			}
		})
	}
}

// refundsVersion is the migration that adds refunds, per dialect.
var refundsVersion = map[migrations.Dialect]int64{migrations.Postgres: 9, migrations.SQLite: 8}

// TestMigrationRefunds applies the refunds' migration (00009 on Postgres,
// 00008 on SQLite) to a database with a purchase, its job and its audit:
// the job becomes a purchase's job whose id is the purchase's, the audit
// keeps its rows and ids and refuses what it refused, and refunds, their
// jobs and their audit rows can be written. Its Down drops the refunds
// and their rows, and gives back the schema before it: the purchase's job
// keyed by its purchase, the audit's transitions held to
// allowed_transitions.
func TestMigrationRefunds(t *testing.T) {
	for _, d := range dialects {
		t.Run(string(d.name), func(t *testing.T) {
			ctx := t.Context()
			db := d.open(t)
			p := newProvider(t, db, d.name, d.goose)
			v := refundsVersion[d.name]
			if _, err := p.UpTo(ctx, v-1); err != nil {
				t.Fatalf("up to %d: %v", v-1, err)
			}
			mustExec(t, db, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at)
VALUES ('pur_1', 'cus_1', 100, 'eur', 'created', 1, `+d.now+`, `+d.now+`)`)
			mustExec(t, db, `UPDATE purchases SET state = 'submitted', provider_payment_id = 'pi_1' WHERE id = 'pur_1'`)
			mustExec(t, db, `UPDATE purchases SET state = 'succeeded' WHERE id = 'pur_1'`)
			mustExec(t, db, `INSERT INTO jobs (purchase_id, run_at, lease_token, checks) VALUES ('pur_1', `+d.now+`, 3, 3)`)
			for i, move := range [][2]string{{"created", "submitted"}, {"submitted", "succeeded"}} {
				mustExec(t, db, fmt.Sprintf(`INSERT INTO transitions (id, purchase_id, from_state, to_state, cause, actor, at)
VALUES (%d, 'pur_1', '%s', '%s', 'submit', 'w1', %s)`, 10*(i+1), move[0], move[1], d.now))
			}
			mustExec(t, db, `INSERT INTO provider_attempts (id, purchase_id, op, outcome, applied, at)
VALUES (7, 'pur_1', 'create', 'succeeded', `+map[migrations.Dialect]string{migrations.Postgres: "true", migrations.SQLite: "1"}[d.name]+`, `+d.now+`)`)
			mustExec(t, db, `INSERT INTO operator_actions (id, purchase_id, operator, action, at) VALUES (8, 'pur_1', 'alice', 'note', `+d.now+`)`)
			mustExec(t, db, `INSERT INTO audit_findings (id, provider, payment_id, kind, purchase_id, amount, found_at)
VALUES (9, 'stripe', 'pi_dup', 'duplicate_charge', 'pur_1', 100, `+d.now+`)`)
			audit := func() []string {
				t.Helper()
				rows := queryStrings(t, db, `SELECT 't' || id || ':' || from_state || '>' || to_state FROM transitions ORDER BY id`)
				rows = append(rows, queryStrings(t, db, `SELECT 'a' || id || ':' || op FROM provider_attempts ORDER BY id`)...)
				rows = append(rows, queryStrings(t, db, `SELECT 'o' || id || ':' || action FROM operator_actions ORDER BY id`)...)
				return append(rows, queryStrings(t, db, `SELECT 'f' || id || ':' || kind FROM audit_findings ORDER BY id`)...)
			}
			before := audit()

			if _, err := p.UpTo(ctx, v); err != nil {
				t.Fatalf("up to %d: %v", v, err)
			}
			if got, want := queryStrings(t, db, `SELECT id || ':' || kind || ':' || purchase_id || ':' || lease_token FROM jobs`), []string{"pur_1:purchase:pur_1:3"}; !slices.Equal(got, want) {
				t.Fatalf("jobs after the migration: %v, want %v", got, want)
			}
			if got := audit(); !slices.Equal(got, before) {
				t.Fatalf("transitions after the migration: %v, want %v", got, before)
			}

			// A refund, its job and its audit rows.
			mustExec(t, db, `INSERT INTO refunds (id, purchase_id, payment_id, amount, currency, state, version,
    provider_key, provider_request, params_hash, created_at, updated_at)
VALUES ('ref_1', 'pur_1', 'pi_1', 60, 'eur', 'created', 1, 'payrecon-ref_1', '{}', 'h', `+d.now+`, `+d.now+`)`)
			mustExec(t, db, `INSERT INTO jobs (kind, purchase_id, refund_id, run_at) VALUES ('refund', 'pur_1', 'ref_1', `+d.now+`)`)
			mustExec(t, db, `UPDATE refunds SET state = 'submitted' WHERE id = 'ref_1'`)
			mustExec(t, db, `UPDATE refunds SET state = 'failed' WHERE id = 'ref_1'`)
			mustExec(t, db, `INSERT INTO transitions (purchase_id, refund_id, from_state, to_state, cause, at)
VALUES ('pur_1', 'ref_1', 'submitted', 'failed', 'submit_response', `+d.now+`)`)
			mustExec(t, db, `INSERT INTO provider_attempts (purchase_id, refund_id, op, outcome, applied, at)
VALUES ('pur_1', 'ref_1', 'refund_create', 'failed', `+map[migrations.Dialect]string{migrations.Postgres: "true", migrations.SQLite: "1"}[d.name]+`, `+d.now+`)`)
			mustExec(t, db, `INSERT INTO operator_actions (purchase_id, refund_id, operator, action, at)
VALUES ('pur_1', 'ref_1', 'alice', 'refund', `+d.now+`)`)
			mustExec(t, db, `INSERT INTO audit_findings (provider, payment_id, kind, purchase_id, amount, found_at)
VALUES ('stripe', 're_1', 'orphan_refund', 'pur_1', 100, `+d.now+`)`)
			if got, want := queryStrings(t, db, `SELECT id || ':' || kind FROM jobs ORDER BY id`), []string{"pur_1:purchase", "ref_1:refund"}; !slices.Equal(got, want) {
				t.Fatalf("jobs with a refund's: %v, want %v", got, want)
			}
			for _, stmt := range []string{
				// A purchase's row of the audit holds a purchase's move.
				`INSERT INTO transitions (purchase_id, from_state, to_state, cause, at) VALUES ('pur_1', 'submitted', 'failed', 'operator', ` + d.now + `)`,
				// A refund's row a refund's move.
				`INSERT INTO transitions (purchase_id, refund_id, from_state, to_state, cause, at) VALUES ('pur_1', 'ref_1', 'submitted', 'declined', 'operator', ` + d.now + `)`,
				// A refund's row names its own purchase.
				`INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at) VALUES ('pur_2', 'cus_1', 100, 'eur', 'created', 1, ` + d.now + `, ` + d.now + `);
INSERT INTO transitions (purchase_id, refund_id, from_state, to_state, cause, at) VALUES ('pur_2', 'ref_1', 'created', 'submitted', 'operator', ` + d.now + `)`,
				// A second purchase job of a purchase.
				`INSERT INTO jobs (purchase_id, run_at) VALUES ('pur_1', ` + d.now + `)`,
				// A refund's job naming no refund.
				`INSERT INTO jobs (kind, purchase_id, run_at) VALUES ('refund', 'pur_1', ` + d.now + `)`,
				`UPDATE transitions SET actor = 'mallory'`,
			} {
				if _, err := db.ExecContext(ctx, stmt); err == nil {
					t.Fatalf("%s: accepted", stmt)
				}
			}

			if _, err := p.DownTo(ctx, v-1); err != nil {
				t.Fatalf("down to %d: %v", v-1, err)
			}
			if got := audit(); !slices.Equal(got, before) {
				t.Fatalf("transitions after the Down: %v, want %v", got, before)
			}
			if got, want := queryStrings(t, db, `SELECT purchase_id || ':' || lease_token FROM jobs`), []string{"pur_1:3"}; !slices.Equal(got, want) {
				t.Fatalf("jobs after the Down: %v, want %v", got, want)
			}
			for _, table := range []string{"refunds", "refund_allowed_transitions", "refund_states"} {
				if _, err := db.ExecContext(ctx, `SELECT 1 FROM `+table); err == nil {
					t.Fatalf("after the Down, %s is still there", table)
				}
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO transitions (purchase_id, from_state, to_state, cause, at)
VALUES ('pur_1', 'created', 'succeeded', 'operator', `+d.now+`)`); err == nil {
				t.Fatal("after the Down, a transition outside allowed_transitions was inserted")
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO jobs (purchase_id, run_at) VALUES ('pur_1', `+d.now+`)`); err == nil {
				t.Fatal("after the Down, a second job of pur_1 was inserted")
			}
			if _, err := p.Up(ctx); err != nil {
				t.Fatalf("up again: %v", err)
			}
		})
	}
}

// disputesVersion is the migration that adds disputes, per dialect.
var disputesVersion = map[migrations.Dialect]int64{migrations.Postgres: 17, migrations.SQLite: 15}

// TestMigrationDisputes applies the disputes' migration (00017 on
// Postgres, 00015 on SQLite) to a database with a purchase, a refund, the
// audit of both, a finding and an inbox event: they keep their rows and
// ids, and disputes, their rows of the audit, their findings and the
// inbox's disputes can be written, held by the guards. Its Down drops the
// disputes and their rows and gives back the schema before it: the audit
// held to the purchase's and the refund's moves, the refunds' limits
// blind to disputes.
func TestMigrationDisputes(t *testing.T) {
	for _, d := range dialects {
		t.Run(string(d.name), func(t *testing.T) {
			ctx := t.Context()
			db := d.open(t)
			p := newProvider(t, db, d.name, d.goose)
			v := disputesVersion[d.name]
			if _, err := p.UpTo(ctx, v-1); err != nil {
				t.Fatalf("up to %d: %v", v-1, err)
			}
			for _, purchase := range []string{"pur_1", "pur_2"} {
				payment := "pi_" + strings.TrimPrefix(purchase, "pur_")
				mustExec(t, db, `INSERT INTO purchases (id, customer, amount, currency, state, version, created_at, updated_at)
VALUES ('`+purchase+`', 'cus_1', 1000, 'eur', 'created', 1, `+d.now+`, `+d.now+`)`)
				mustExec(t, db, `UPDATE purchases SET state = 'submitted', provider_payment_id = '`+payment+`' WHERE id = '`+purchase+`'`)
				mustExec(t, db, `UPDATE purchases SET state = 'succeeded' WHERE id = '`+purchase+`'`)
			}
			refund := func(id string, amount int) error {
				_, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO refunds (id, purchase_id, payment_id, amount, currency, state, version,
    provider_key, provider_request, params_hash, created_at, updated_at)
VALUES ('%s', 'pur_1', 'pi_1', %d, 'eur', 'created', 1, 'payrecon-%s', '{}', 'h', %s, %s)`, id, amount, id, d.now, d.now))
				return err
			}
			if err := refund("ref_1", 100); err != nil {
				t.Fatal(err)
			}
			for i, move := range [][2]string{{"created", "submitted"}, {"submitted", "succeeded"}} {
				mustExec(t, db, fmt.Sprintf(`INSERT INTO transitions (id, purchase_id, from_state, to_state, cause, actor, at)
VALUES (%d, 'pur_1', '%s', '%s', 'submit', 'w1', %s)`, 10*(i+1), move[0], move[1], d.now))
			}
			mustExec(t, db, `INSERT INTO transitions (id, purchase_id, refund_id, from_state, to_state, cause, at)
VALUES (30, 'pur_1', 'ref_1', 'created', 'submitted', 'submit', `+d.now+`)`)
			mustExec(t, db, `INSERT INTO audit_findings (id, provider, payment_id, kind, purchase_id, amount, found_at)
VALUES (9, 'stripe', 'pi_dup', 'duplicate_charge', 'pur_1', 100, `+d.now+`)`)
			mustExec(t, db, `INSERT INTO webhook_inbox (provider, event_id, outcome, received_at) VALUES ('stripe', 'evt_1', 'applied', `+d.now+`)`)
			audit := func() []string {
				t.Helper()
				rows := queryStrings(t, db, `SELECT 't' || id || ':' || coalesce(refund_id, '-') || ':' || from_state || '>' || to_state FROM transitions ORDER BY id`)
				rows = append(rows, queryStrings(t, db, `SELECT 'f' || id || ':' || kind FROM audit_findings ORDER BY id`)...)
				return append(rows, queryStrings(t, db, `SELECT 'e:' || event_id FROM webhook_inbox ORDER BY event_id`)...)
			}
			before := audit()

			if _, err := p.UpTo(ctx, v); err != nil {
				t.Fatalf("up to %d: %v", v, err)
			}
			if got := audit(); !slices.Equal(got, before) {
				t.Fatalf("the audit after the migration: %v, want %v", got, before)
			}
			if got := queryStrings(t, db, `SELECT event_id FROM webhook_inbox WHERE dispute IS NULL`); !slices.Equal(got, []string{"evt_1"}) {
				t.Fatalf("events without a dispute after the migration: %v, want evt_1", got)
			}

			// A dispute, its audit rows, its finding and its event.
			insertDispute := func(id, purchase, payment, state string) error {
				_, err := db.ExecContext(ctx, `INSERT INTO disputes (id, provider_dispute_id, purchase_id, payment_id, amount, currency,
    state, version, created_at, updated_at)
VALUES ('`+id+`', 'du_`+id+`', '`+purchase+`', '`+payment+`', 600, 'eur', '`+state+`', 1, `+d.now+`, `+d.now+`)`)
				return err
			}
			if err := insertDispute("dsp_1", "pur_1", "pi_1", "open"); err != nil {
				t.Fatal(err)
			}
			if err := insertDispute("dsp_2", "pur_2", "pi_2", "open"); err != nil {
				t.Fatal(err)
			}
			mustExec(t, db, `UPDATE disputes SET state = 'evidence_submitted', withdrawn = 600 WHERE id = 'dsp_1'`)
			mustExec(t, db, `INSERT INTO transitions (purchase_id, dispute_id, from_state, to_state, cause, at)
VALUES ('pur_1', 'dsp_1', 'open', 'evidence_submitted', 'webhook', `+d.now+`)`)
			mustExec(t, db, `INSERT INTO audit_findings (provider, payment_id, kind, purchase_id, amount, found_at)
VALUES ('stripe', 'du_x', 'foreign_dispute', NULL, 100, `+d.now+`)`)
			mustExec(t, db, `INSERT INTO webhook_inbox (provider, event_id, outcome, received_at, dispute)
VALUES ('stripe', 'evt_2', 'unmatched', `+d.now+`, '{"id":"du_dsp_1","payment_id":"pi_1","amount":600,"currency":"eur","status":"under_review"}')`)
			for _, stmt := range []string{
				// A dispute starts open, and moves only along its table.
				`INSERT INTO disputes (id, provider_dispute_id, purchase_id, payment_id, amount, currency, state, version, created_at, updated_at)
VALUES ('dsp_x', 'du_x', 'pur_1', 'pi_1', 1, 'eur', 'won', 1, ` + d.now + `, ` + d.now + `)`,
				`UPDATE disputes SET state = 'submitted' WHERE id = 'dsp_1'`,
				// What was disputed is fixed.
				`UPDATE disputes SET amount = 1 WHERE id = 'dsp_1'`,
				`UPDATE disputes SET payment_id = 'pi_2' WHERE id = 'dsp_1'`,
				// One provider id, one dispute.
				`INSERT INTO disputes (id, provider_dispute_id, purchase_id, payment_id, amount, currency, state, version, created_at, updated_at)
VALUES ('dsp_x', 'du_dsp_1', 'pur_1', 'pi_1', 1, 'eur', 'open', 1, ` + d.now + `, ` + d.now + `)`,
				// A dispute's row holds a dispute's move, of its own purchase,
				// and is not a refund's too.
				`INSERT INTO transitions (purchase_id, dispute_id, from_state, to_state, cause, at) VALUES ('pur_1', 'dsp_1', 'submitted', 'failed', 'operator', ` + d.now + `)`,
				`INSERT INTO transitions (purchase_id, dispute_id, from_state, to_state, cause, at) VALUES ('pur_1', 'dsp_2', 'open', 'won', 'operator', ` + d.now + `)`,
				`INSERT INTO transitions (purchase_id, refund_id, dispute_id, from_state, to_state, cause, at) VALUES ('pur_1', 'ref_1', 'dsp_1', 'open', 'won', 'operator', ` + d.now + `)`,
				`INSERT INTO transitions (purchase_id, from_state, to_state, cause, at) VALUES ('pur_1', 'open', 'won', 'operator', ` + d.now + `)`,
				`UPDATE transitions SET actor = 'mallory'`,
				// The inbox keeps JSON.
				`INSERT INTO webhook_inbox (provider, event_id, outcome, received_at, dispute) VALUES ('stripe', 'evt_bad', 'unmatched', ` + d.now + `, '{not json')`,
			} {
				if _, err := db.ExecContext(ctx, stmt); err == nil {
					t.Fatalf("%s: accepted", stmt)
				}
			}
			// A chargeback under review forbids a refund of its payment;
			// won, it does not.
			if err := refund("ref_2", 100); err == nil || !strings.Contains(err.Error(), "payment disputed") {
				t.Fatalf("a refund of a disputed payment: %v, want it refused as disputed", err)
			}
			mustExec(t, db, `UPDATE disputes SET state = 'won' WHERE id = 'dsp_1'`)
			if err := refund("ref_2", 100); err != nil {
				t.Fatalf("a refund once the dispute is won: %v", err)
			}
			after := audit()

			if _, err := p.DownTo(ctx, v-1); err != nil {
				t.Fatalf("down to %d: %v", v-1, err)
			}
			// The disputes' rows of the audit and their findings go; the
			// dispute event stays, without its dispute.
			var want []string
			for _, row := range after {
				if !strings.Contains(row, "dispute") && !strings.Contains(row, ":open>") {
					want = append(want, row)
				}
			}
			if got := audit(); !slices.Equal(got, want) {
				t.Fatalf("the audit after the Down: %v, want %v", got, want)
			}
			for _, table := range []string{"disputes", "dispute_allowed_transitions", "dispute_states"} {
				if _, err := db.ExecContext(ctx, `SELECT 1 FROM `+table); err == nil {
					t.Fatalf("after the Down, %s is still there", table)
				}
			}
			if _, err := db.ExecContext(ctx, `SELECT dispute FROM webhook_inbox`); err == nil {
				t.Fatal("after the Down, webhook_inbox.dispute is still there")
			}
			for _, stmt := range []string{
				`INSERT INTO transitions (purchase_id, from_state, to_state, cause, at) VALUES ('pur_1', 'created', 'succeeded', 'operator', ` + d.now + `)`,
				`INSERT INTO transitions (purchase_id, refund_id, from_state, to_state, cause, at) VALUES ('pur_1', 'ref_1', 'submitted', 'declined', 'operator', ` + d.now + `)`,
				`INSERT INTO audit_findings (provider, payment_id, kind, amount, found_at) VALUES ('stripe', 'du_y', 'dispute_mismatch', 1, ` + d.now + `)`,
			} {
				if _, err := db.ExecContext(ctx, stmt); err == nil {
					t.Fatalf("after the Down, %s: accepted", stmt)
				}
			}
			mustExec(t, db, `INSERT INTO transitions (purchase_id, refund_id, from_state, to_state, cause, at)
VALUES ('pur_1', 'ref_1', 'submitted', 'failed', 'webhook', `+d.now+`)`)
			if err := refund("ref_3", 800); err != nil {
				t.Fatalf("after the Down, a refund within the payment: %v", err)
			}
			if _, err := p.Up(ctx); err != nil {
				t.Fatalf("up again: %v", err)
			}
		})
	}
}
