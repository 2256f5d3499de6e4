package events

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Dialect is the SQL dialect of the shop's database.
type Dialect string

// The dialects the receiver speaks. The SQL is the same but for the
// placeholders ($1 or ?) and the type of the time columns (timestamptz or
// text, as RFC 3339 in UTC).
const (
	// Postgres is PostgreSQL 9.5 or later, through any database/sql
	// driver that takes $1 placeholders (pgx's stdlib, lib/pq).
	Postgres Dialect = "postgres"
	// SQLite is SQLite 3.35 or later (upsert with RETURNING), through any
	// database/sql driver that takes ? placeholders (modernc.org/sqlite,
	// mattn/go-sqlite3). Give the connection a busy timeout.
	SQLite Dialect = "sqlite"
)

// The default names of the receiver's two tables.
const (
	DefaultInboxTable    = "payrecon_event_inbox"
	DefaultSequenceTable = "payrecon_event_sequences"
)

// schemaTemplate is the DDL of both dialects: %[1]s the inbox table, %[2]s
// the sequence table, %[3]s the type of a time column.
//
// The inbox has one row per event a consumer applied; its primary key is
// what decides that an event is new. The sequence table has one row per
// purchase a consumer saw an event of: the highest order applied. Both
// sequence columns hold an event's order (Event.Order: Epoch<<32 +
// Sequence), which is its sequence for an event of epoch 0, so tables
// made before epochs existed need no change.
const schemaTemplate = `CREATE TABLE IF NOT EXISTS %[1]s (
	consumer       TEXT    NOT NULL,
	event_id       TEXT    NOT NULL,
	event_type     TEXT    NOT NULL,
	schema_version INTEGER NOT NULL,
	purchase_id    TEXT    NOT NULL,
	refund_id      TEXT    NOT NULL DEFAULT '',
	sequence       BIGINT  NOT NULL,
	digest         TEXT    NOT NULL,
	created_at     %[3]s NOT NULL,
	received_at    %[3]s NOT NULL,
	PRIMARY KEY (consumer, event_id)
);
CREATE TABLE IF NOT EXISTS %[2]s (
	consumer      TEXT   NOT NULL,
	purchase_id   TEXT   NOT NULL,
	last_sequence BIGINT NOT NULL,
	last_event_id TEXT   NOT NULL,
	updated_at    %[3]s NOT NULL,
	PRIMARY KEY (consumer, purchase_id)
);
`

// identifier is what a table name may be: a plain SQL identifier, with an
// optional schema. Table names are put into SQL text, so nothing else is
// allowed.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// tables is the part of a Config the schema depends on, with defaults
// applied and checked.
type tables struct {
	dialect         Dialect
	inbox, sequence string
}

// resolveTables applies the defaults to cfg's dialect and table names and
// checks them.
func resolveTables(cfg Config) (tables, error) {
	t := tables{dialect: cfg.Dialect, inbox: cfg.InboxTable, sequence: cfg.SequenceTable}
	if t.dialect != Postgres && t.dialect != SQLite {
		return tables{}, fmt.Errorf("events: Config.Dialect is %q; want %q or %q", t.dialect, Postgres, SQLite)
	}
	if t.inbox == "" {
		t.inbox = DefaultInboxTable
	}
	if t.sequence == "" {
		t.sequence = DefaultSequenceTable
	}
	for _, name := range []string{t.inbox, t.sequence} {
		if !identifier.MatchString(name) {
			return tables{}, fmt.Errorf("events: table name %q: want an SQL identifier, optionally schema-qualified", clip(name))
		}
	}
	if strings.EqualFold(t.inbox, t.sequence) {
		return tables{}, fmt.Errorf("events: the inbox and sequence tables are both %q", t.inbox)
	}
	return t, nil
}

// Schema returns the DDL of the receiver's tables for cfg's Dialect,
// InboxTable and SequenceTable (the other fields are ignored), for a shop
// that runs its own migrations. Each statement is CREATE TABLE IF NOT
// EXISTS, ended by ";". Returns an error if the dialect is not Postgres or
// SQLite or a table name is not an SQL identifier.
//
// For PostgreSQL, with the default names:
//
//	CREATE TABLE IF NOT EXISTS payrecon_event_inbox (
//		consumer       TEXT    NOT NULL,
//		event_id       TEXT    NOT NULL,
//		event_type     TEXT    NOT NULL,
//		schema_version INTEGER NOT NULL,
//		purchase_id    TEXT    NOT NULL,
//		refund_id      TEXT    NOT NULL DEFAULT '',
//		sequence       BIGINT  NOT NULL,
//		digest         TEXT    NOT NULL,
//		created_at     TIMESTAMPTZ NOT NULL,
//		received_at    TIMESTAMPTZ NOT NULL,
//		PRIMARY KEY (consumer, event_id)
//	);
//	CREATE TABLE IF NOT EXISTS payrecon_event_sequences (
//		consumer      TEXT   NOT NULL,
//		purchase_id   TEXT   NOT NULL,
//		last_sequence BIGINT NOT NULL,
//		last_event_id TEXT   NOT NULL,
//		updated_at    TIMESTAMPTZ NOT NULL,
//		PRIMARY KEY (consumer, purchase_id)
//	);
//
// For SQLite the time columns are TEXT (RFC 3339, UTC, fixed width).
func Schema(cfg Config) (string, error) {
	t, err := resolveTables(cfg)
	if err != nil {
		return "", err
	}
	return t.schema(), nil
}

func (t tables) schema() string {
	timeType := "TIMESTAMPTZ"
	if t.dialect == SQLite {
		timeType = "TEXT"
	}
	return fmt.Sprintf(schemaTemplate, t.inbox, t.sequence, timeType)
}

// Migrate creates the receiver's tables in cfg.DB if they do not exist
// (Schema's DDL), in one transaction. Only cfg's DB, Dialect, InboxTable
// and SequenceTable are used. It is safe to run at every start. Returns an
// error if cfg.DB is nil, Schema refuses cfg, or a statement fails.
func Migrate(ctx context.Context, cfg Config) error {
	if cfg.DB == nil {
		return fmt.Errorf("events: migrate: Config.DB is nil")
	}
	t, err := resolveTables(cfg)
	if err != nil {
		return err
	}
	tx, err := cfg.DB.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("events: migrate: %w", err)
	}
	defer tx.Rollback()
	for stmt := range strings.SplitSeq(t.schema(), ";") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("events: migrate: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("events: migrate: %w", err)
	}
	return nil
}

// rebind rewrites the ? placeholders of query for the dialect: $1, $2, …
// for Postgres. The receiver's queries have no ? anywhere else.
func (d Dialect) rebind(query string) string {
	if d != Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// sqliteTime is the layout of a time in an SQLite text column: RFC 3339
// in UTC with a fixed width, so that text order is time order.
const sqliteTime = "2006-01-02T15:04:05.000000Z"

// timeArg is t as the dialect's time columns take it.
func (d Dialect) timeArg(t time.Time) any {
	if d == SQLite {
		return t.UTC().Format(sqliteTime)
	}
	return t.UTC()
}
