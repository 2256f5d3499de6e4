package bench

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payrecon/payrecon/internal/dburl"
)

// pgStats reads a Postgres database's activity counters for the bench:
// commits and rollbacks from pg_stat_database, statements from
// pg_stat_statements when the server loads it. Each read is made over a
// connection of its own, after the bench's other connections to the
// database have ended: a backend reports its counters when it exits (or
// at most every few seconds while it lives), so only then are they all
// in the views.
type pgStats struct {
	url string // the database's URL, a secret
	// others are the backends connected to the database before the bench
	// opened anything: someone else's, not waited for.
	others []int32
	// statements: pg_stat_statements is readable in this database.
	statements bool
	notes      []string
}

// pgCounters is one read of the counters.
type pgCounters struct {
	commits, rollbacks int64
	statements         int64 // pg_stat_statements' calls
	// The bench's own counts (roundTrips).
	roundTrips, sent, sentTxControl int64
}

// roundTrips counts the round trips of the bench's Postgres stores, as
// their pgx tracer (postgres.Config.Tracer): one for each statement sent
// alone, one for each batch. It also counts the statements they carry,
// and of those the transaction control (BEGIN, COMMIT, ROLLBACK,
// SAVEPOINT, RELEASE): each statement of a batch when its result is read
// (one that a failure before it skipped is not), and each statement of a
// query without arguments that has transaction control statements
// joined in front of it with semicolons. A statement's first preparation
// on a connection, and the pool's health checks, are not seen. Safe for
// concurrent use.
type roundTrips struct{ n, statements, txControl atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	sql := d.SQL
	if len(d.Args) == 0 {
		// The simple protocol: the store joins the transaction control
		// statements it deferred in front of the statement it sends.
		for {
			first, rest, ok := strings.Cut(sql, ";")
			if !ok || !isTxControl(first) {
				break
			}
			r.count(first)
			sql = rest
		}
	}
	if strings.TrimSpace(sql) != "" {
		r.count(sql)
	}
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.count(d.SQL)
}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// count counts one statement.
func (r *roundTrips) count(sql string) {
	r.statements.Add(1)
	if isTxControl(sql) {
		r.txControl.Add(1)
	}
}

// txControlStatement matches a transaction control statement.
var txControlStatement = regexp.MustCompile(`(?i)^\s*(begin|commit|rollback|savepoint|release|start\s+transaction|end)\b`)

// isTxControl reports whether sql is a transaction control statement.
func isTxControl(sql string) bool { return txControlStatement.MatchString(sql) }

// benchWaitTimeout bounds the wait for the bench's connections to end.
const benchWaitTimeout = 30 * time.Second

// newPGStats connects to the database at url, notes who else is
// connected, and makes pg_stat_statements readable if the server loads
// it (creating the extension in this database if it is missing). It
// fails only when the database cannot be read at all.
func newPGStats(ctx context.Context, url string) (*pgStats, error) {
	p := &pgStats{url: url}
	err := p.with(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
		if err != nil {
			return err
		}
		if p.others, err = pgx.CollectRows(rows, pgx.RowTo[int32]); err != nil {
			return err
		}
		p.statements, p.notes = p.enableStatements(ctx, conn)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// enableStatements reports whether pg_stat_statements can be read, and
// says why not when it cannot.
func (p *pgStats) enableStatements(ctx context.Context, conn *pgx.Conn) (bool, []string) {
	var libs string
	if err := conn.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries')`).Scan(&libs); err != nil {
		return false, []string{"pg_stat_statements not read: cannot read shared_preload_libraries: " + dburl.Scrub(err, p.url).Error()}
	}
	if !slices.Contains(strings.Split(strings.ReplaceAll(libs, " ", ""), ","), "pg_stat_statements") {
		return false, []string{"pg_stat_statements not read: the server does not load pg_stat_statements (shared_preload_libraries)"}
	}
	var notes []string
	var present bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements')`).Scan(&present); err != nil {
		return false, []string{"pg_stat_statements not read: " + dburl.Scrub(err, p.url).Error()}
	}
	if !present {
		if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
			return false, []string{"pg_stat_statements not read: the server loads pg_stat_statements, but the extension is not created in this database and creating it failed: " + dburl.Scrub(err, p.url).Error()}
		}
		notes = append(notes, "created the extension pg_stat_statements in this database, to count statements")
	}
	if _, err := conn.Exec(ctx, `SELECT 1 FROM pg_stat_statements LIMIT 1`); err != nil {
		return false, append(notes, "pg_stat_statements not read: "+dburl.Scrub(err, p.url).Error())
	}
	return true, notes
}

// with runs fn over a new connection to the database, and closes it.
func (p *pgStats) with(ctx context.Context, fn func(*pgx.Conn) error) error {
	// Parsed as the store parses it: pool_* parameters are the pool's.
	cfg, err := pgxpool.ParseConfig(p.url)
	if err != nil {
		return dburl.Scrub(err, p.url)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		c := cfg.ConnConfig
		return fmt.Errorf("postgres: cannot reach database %s:%d/%s as %s, to read its statistics: %w", c.Host, c.Port, c.Database, c.User, dburl.Scrub(err, p.url))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := fn(conn); err != nil {
		return fmt.Errorf("read the statistics: %w", dburl.Scrub(err, p.url))
	}
	return nil
}

// read waits until every connection the bench opened to the database
// has ended, so that their counters are reported, then reads the
// counters.
func (p *pgStats) read(ctx context.Context) (pgCounters, error) {
	var c pgCounters
	err := p.with(ctx, func(conn *pgx.Conn) error {
		if err := p.waitAlone(ctx, conn); err != nil {
			return err
		}
		err := conn.QueryRow(ctx, `SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()`).
			Scan(&c.commits, &c.rollbacks)
		if err != nil || !p.statements {
			return err
		}
		// The bench's own queries (they all name a pg_stat view or a
		// setting) are not payrecon's.
		return conn.QueryRow(ctx, `
			SELECT coalesce(sum(calls), 0)::bigint
			FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			  AND query !~* 'pg_stat_|pg_extension|shared_preload_libraries'`).Scan(&c.statements)
	})
	return c, err
}

// waitAlone waits until no backend but conn's and the others' is
// connected to the database.
func (p *pgStats) waitAlone(ctx context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, benchWaitTimeout)
	defer cancel()
	for {
		rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
		if err != nil {
			return err
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(pids, func(pid int32) bool { return !slices.Contains(p.others, pid) }) {
			return nil
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("the bench's connections to the database did not end within %s", benchWaitTimeout)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// delta is the measured phase's share of the counters.
func (p *pgStats) delta(before, after pgCounters) *DB {
	sent, sentTx := after.sent-before.sent, after.sentTxControl-before.sentTxControl
	d := &DB{Commits: after.commits - before.commits, Rollbacks: after.rollbacks - before.rollbacks,
		RoundTrips: after.roundTrips - before.roundTrips, Statements: &sent, TxControl: &sentTx}
	if p.statements {
		s := after.statements - before.statements
		d.ServerStatements = &s
	}
	return d
}
