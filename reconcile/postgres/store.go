package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/migrations"
	"github.com/payrecon/payrecon/reconcile"
)

// Config configures Open.
type Config struct {
	// URL is the database's connection string: a postgres:// URL or a
	// key=value DSN, as accepted by pgx. Required; there is no default.
	// The standard PG* environment variables fill in what it leaves out.
	// Its pool_* parameters (pool_max_conns, pool_min_conns,
	// pool_max_conn_lifetime, ...) configure the pool, as pgxpool reads
	// them.
	URL string
	// MaxConns caps the connection pool. When 0, the URL's
	// pool_max_conns caps it if the URL has one, else DefaultMaxConns
	// (8): an explicit MaxConns wins over the URL, which wins over the
	// default.
	MaxConns int32
	// Now is the store's clock. Default nil: the database server's clock
	// (statement_timestamp()), the one clock every worker and replica
	// shares. Tests and the demo inject a clock.
	Now func() time.Time
	// Tracer, when set, sees every statement and batch the store sends
	// (pgx calls it as a pgx.QueryTracer, and as a pgx.BatchTracer when
	// it is one): payrecon bench counts round trips with it. Default nil.
	Tracer pgx.QueryTracer
}

// DefaultMaxConns caps the pool when neither Config.MaxConns nor the
// URL's pool_max_conns does.
const DefaultMaxConns int32 = 8

// maxTxAttempts bounds how many times InTx runs fn when the database
// reports a serialization failure or a deadlock.
const maxTxAttempts = 4

// Store is a reconcile.Store on PostgreSQL. It is safe for concurrent use.
// Create it with Open and release it with Close.
type Store struct {
	pool      *pgxpool.Pool
	db        *sql.DB          // database/sql view of pool, for goose
	now       func() time.Time // Config.Now; nil for the server's clock
	closeOnce sync.Once
}

var _ reconcile.Store = (*Store)(nil)

// Open connects to the database cfg.URL names and pings it. It fails with
// an error naming the host and database when the server is unreachable or
// refuses the connection; it does not check the schema (see Ready and
// Migrate).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.URL == "" {
		return nil, dialect.Invalid("open", "Config.URL is empty")
	}
	if cfg.MaxConns < 0 {
		return nil, dialect.Invalid("open", fmt.Sprintf("Config.MaxConns is %d", cfg.MaxConns))
	}
	pcfg, err := poolConfig(cfg)
	if err != nil {
		return nil, err
	}
	where := fmt.Sprintf("%s:%d/%s as %s", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, pcfg.ConnConfig.Database, pcfg.ConnConfig.User)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open %s: %w", where, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open: cannot reach database %s: %w", where, err)
	}
	return &Store{pool: pool, db: stdlib.OpenDBFromPool(pool), now: cfg.Now}, nil
}

// poolConfig parses cfg.URL into the pool's configuration and caps the
// pool: Config.MaxConns when set, else the URL's pool_max_conns when it
// has one, else DefaultMaxConns. A URL pgx cannot parse (a bad
// pool_max_conns too) is reconcile.ErrInvalid.
func poolConfig(cfg Config) (*pgxpool.Config, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// pgx redacts the password in its parse errors.
		return nil, fmt.Errorf("postgres: open: %w: %w", reconcile.ErrInvalid, err)
	}
	if cfg.Tracer != nil {
		pcfg.ConnConfig.Tracer = cfg.Tracer
	}
	switch {
	case cfg.MaxConns > 0:
		pcfg.MaxConns = cfg.MaxConns
	case !hasPoolMaxConns(cfg.URL):
		// pgxpool's own default is the number of CPUs, at least 4.
		pcfg.MaxConns = DefaultMaxConns
	}
	return pcfg, nil
}

// hasPoolMaxConns reports whether the connection string sets
// pool_max_conns, in a URL's query or as a key=value pair. pgxpool takes
// the parameter out of the configuration it parses, so the string is
// parsed again, as pgx parses it, and its parameters looked at.
func hasPoolMaxConns(connString string) bool {
	c, err := pgconn.ParseConfig(connString)
	if err != nil {
		return false
	}
	_, ok := c.RuntimeParams["pool_max_conns"]
	return ok
}

// Migrate applies every pending schema migration (see package
// migrations). It is safe to run on an up-to-date database and from
// several processes at once.
func (s *Store) Migrate(ctx context.Context) error {
	if err := migrations.Up(ctx, s.db, migrations.Postgres); err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	return nil
}

// Ready returns nil when the database answers and its schema is at least
// at the version this binary embeds; an error wrapping
// reconcile.ErrNotMigrated when the schema is missing or older. It never
// writes.
func (s *Store) Ready(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ready: ping: %w", err)
	}
	current, latest, err := migrations.Version(ctx, s.db, migrations.Postgres)
	if err != nil {
		return fmt.Errorf("postgres: ready: %w", err)
	}
	if current < latest {
		return fmt.Errorf("postgres: ready: schema is at version %d, this binary needs %d: %w",
			current, latest, reconcile.ErrNotMigrated)
	}
	return nil
}

// Close releases the store's connections. It is safe to call more than
// once.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		err = s.db.Close()
		s.pool.Close()
	})
	if err != nil {
		return fmt.Errorf("postgres: close: %w", err)
	}
	return nil
}

// InTx runs fn in a READ COMMITTED transaction, committing if fn returns
// nil and rolling back otherwise (also when fn panics). When the database
// reports a serialization failure or a deadlock (SQLSTATE 40001, 40P01),
// from fn's statements or from the commit, it runs fn again in a new
// transaction, up to 4 times in all. fn's own error is returned as is.
func (s *Store) InTx(ctx context.Context, fn func(reconcile.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := s.inTxOnce(ctx, fn)
		if err == nil || attempt == maxTxAttempts || !retryable(err) || ctx.Err() != nil {
			return err
		}
		// A short, jittered pause lets the transaction we collided with
		// finish before we run again.
		pause := time.Duration(attempt) * time.Duration(1+rand.IntN(5)) * time.Millisecond
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

func (s *Store) inTxOnce(ctx context.Context, fn func(reconcile.Tx) error) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: begin: %w", err)
	}
	// BEGIN waits with the pending statements and goes with the first
	// statement fn sends: a transaction costs no round trip for it.
	c := &conn{pc: pc}
	// end rolls back what commit did not end and returns the connection:
	// also when fn fails or panics.
	defer c.end(context.WithoutCancel(ctx))
	if err := fn(&txn{tx: c, now: s.now}); err != nil {
		return err
	}
	if err := c.commit(ctx); err != nil {
		return wrap(err, "commit")
	}
	return nil
}

// retryable reports whether err is a serialization failure or deadlock,
// after which the whole transaction may be run again.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// txn is the reconcile.Tx of one pgx transaction.
type txn struct {
	tx  *conn
	now func() time.Time // the store's Config.Now; nil for the server's clock
	// depth counts the Savepoints open around the current statement, so
	// that each nested one has a name of its own.
	depth int
}

var _ reconcile.Tx = (*txn)(nil)

// exec runs one write under a savepoint, in a single round trip when it
// succeeds, and returns how many rows it changed. When it fails the
// transaction is rolled back to the savepoint, so it stays usable
// (PostgreSQL otherwise aborts the whole transaction on the first error).
func (t *txn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT payrecon_write")
	b.Queue(query, args...)
	b.Queue("RELEASE SAVEPOINT payrecon_write")
	br := t.tx.SendBatch(ctx, b)
	var tag pgconn.CommandTag
	_, err := br.Exec()
	if err == nil {
		tag, err = br.Exec()
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		return tag.RowsAffected(), nil
	}
	if _, rerr := t.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT payrecon_write; RELEASE SAVEPOINT payrecon_write"); rerr != nil {
		return 0, errors.Join(err, fmt.Errorf("roll back to savepoint: %w", rerr))
	}
	return 0, err
}

// Savepoint implements reconcile.Tx with SAVEPOINT, RELEASE SAVEPOINT
// and, when fn fails, ROLLBACK TO SAVEPOINT: what fn wrote is undone,
// and so is the aborted state an error of fn's statements leaves the
// transaction in. Each level of nesting has its own name, so exec's
// savepoint inside fn never shadows it.
//
// SAVEPOINT and RELEASE cost no round trip of their own: they wait in
// t.tx and go with the next statement (a RELEASE left at COMMIT is
// moot), so that a group of members, one savepoint each, costs no more
// round trips than its members' own statements. Only a failure's
// rollback is sent at once, so that its error is its member's.
func (t *txn) Savepoint(ctx context.Context, fn func(reconcile.Tx) error) error {
	t.depth++
	defer func() { t.depth-- }()
	name := fmt.Sprintf("payrecon_nested_%d", t.depth)
	mark, sends := len(t.tx.pending), t.tx.sends
	t.tx.pending = append(t.tx.pending, "SAVEPOINT "+name)
	ferr := fn(t)
	if t.tx.sends == sends {
		// fn sent no statement, and its SAVEPOINT still waits: nothing
		// to release or roll back.
		t.tx.pending = t.tx.pending[:mark]
		return ferr
	}
	if ferr == nil {
		t.tx.pending = append(t.tx.pending, "RELEASE SAVEPOINT "+name)
		return nil
	}
	// What waits was fn's own (inner RELEASEs): the rollback ends it.
	t.tx.pending = nil
	// fn's statements may have been cut off by ctx: the rollback must
	// still be attempted, or the transaction stays aborted.
	if _, err := t.tx.Exec(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+name+"; RELEASE SAVEPOINT "+name); err != nil {
		return errors.Join(ferr, wrap(err, "roll back to savepoint"))
	}
	return ferr
}

// beginSQL starts every store transaction, at READ COMMITTED.
const beginSQL = "BEGIN ISOLATION LEVEL READ COMMITTED"

// conn is a txn's connection, in its transaction, with the statements
// that wait to go in front of the next one (pending): the savepoint
// statements Savepoint defers, and BEGIN whenever the server is outside
// a transaction (before the first statement, or after a send that failed
// before it reached the server), so that no statement ever runs outside
// the transaction. Its QueryRow, Query, Exec and SendBatch are the pooled
// connection's, with the pending statements sent first in the same round
// trip; nothing else of the connection is reachable, so that nothing
// runs outside this bookkeeping.
type conn struct {
	pc      *pgxpool.Conn
	pending []string // statements without arguments, in order
	sends   int      // how many times pending statements were sent
	ended   bool     // commit ended the transaction
}

// status is the server's transaction status, as of its last answer:
// 'I' outside a transaction, 'T' in one, 'E' in a failed one.
func (c *conn) status() byte { return c.pc.Conn().PgConn().TxStatus() }

// begin puts BEGIN in front of the pending statements when the server
// is outside a transaction. Every send calls it first.
func (c *conn) begin() {
	if c.status() == 'I' && !slices.Contains(c.pending, beginSQL) {
		c.pending = slices.Insert(c.pending, 0, beginSQL)
	}
}

// commit commits the transaction. A transaction that ran no statement
// was never begun on the server, and there is nothing to commit. A
// COMMIT that the server turned into a ROLLBACK (the transaction had
// failed) is pgx.ErrTxCommitRollback, as pgx's own Commit reports it.
func (c *conn) commit(ctx context.Context) error {
	if c.status() == 'I' {
		// Every send goes behind a BEGIN while the server is outside a
		// transaction: none of fn's statements ran outside one, and none
		// ran in one either.
		c.ended = true
		return nil
	}
	c.pending = nil // a RELEASE left at COMMIT is moot
	tag, err := c.pc.Exec(ctx, "COMMIT")
	if err != nil {
		return err
	}
	c.ended = true
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// end rolls back a transaction that was begun and not committed, and
// returns the connection to the pool. The pool closes a connection left
// in a transaction or broken (a failed rollback, a cancelled
// statement), so none goes back half-way through a transaction.
func (c *conn) end(ctx context.Context) {
	if !c.ended && !c.pc.Conn().IsClosed() && !c.pc.Conn().PgConn().IsBusy() && c.status() != 'I' {
		_, _ = c.pc.Exec(ctx, "ROLLBACK")
	}
	c.pc.Release()
}

// take returns the pending statements and forgets them.
func (c *conn) take() []string {
	p := c.pending
	c.pending = nil
	c.sends++
	return p
}

// SendBatch sends the pending statements and then b's, in one batch. The
// results the caller reads are b's: the first one reports a failure of a
// pending statement.
func (c *conn) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	c.begin()
	if len(c.pending) == 0 {
		return c.pc.SendBatch(ctx, b)
	}
	pending := c.take()
	all := &pgx.Batch{}
	for _, q := range pending {
		all.Queue(q)
	}
	all.QueuedQueries = append(all.QueuedQueries, b.QueuedQueries...)
	return &afterPending{BatchResults: c.pc.SendBatch(ctx, all), n: len(pending)}
}

// Exec is the connection's Exec after the pending statements. A query
// without arguments may hold several statements (the simple protocol):
// the pending ones go in front of it.
func (c *conn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.begin()
	switch {
	case len(c.pending) == 0:
		return c.pc.Exec(ctx, sql, args...)
	case len(args) == 0:
		return c.pc.Exec(ctx, strings.Join(append(c.take(), sql), "; "))
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := c.SendBatch(ctx, b)
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// QueryRow is the connection's QueryRow after the pending statements.
func (c *conn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.begin()
	if len(c.pending) == 0 {
		return c.pc.QueryRow(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := c.SendBatch(ctx, b)
	return batchRow{row: br.QueryRow(), br: br}
}

// Query is the connection's Query after the pending statements.
func (c *conn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.begin()
	if len(c.pending) == 0 {
		return c.pc.Query(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := c.SendBatch(ctx, b)
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// afterPending reads past the results of n pending statements before the
// caller's first result.
type afterPending struct {
	pgx.BatchResults
	n   int
	err error // the first pending statement's failure
}

func (r *afterPending) skip() error {
	for ; r.n > 0; r.n-- {
		if _, err := r.BatchResults.Exec(); err != nil && r.err == nil {
			r.err = err
		}
	}
	return r.err
}

func (r *afterPending) Exec() (pgconn.CommandTag, error) {
	if err := r.skip(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return r.BatchResults.Exec()
}

func (r *afterPending) Query() (pgx.Rows, error) {
	if err := r.skip(); err != nil {
		return nil, err
	}
	return r.BatchResults.Query()
}

func (r *afterPending) QueryRow() pgx.Row {
	if err := r.skip(); err != nil {
		return errRow{err}
	}
	return r.BatchResults.QueryRow()
}

// batchRow is the row of a batch's one query: scanning it closes the
// batch.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

// batchRows are the rows of a batch's one query: closing them closes the
// batch.
type batchRows struct {
	pgx.Rows
	br       pgx.BatchResults
	closeErr error
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if r.br != nil {
		r.closeErr = r.br.Close()
		r.br = nil
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.closeErr
}

// errRow is a row that failed before it was read.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// execOne runs a write of one row with exec. No row written is the
// store's reconcile.ErrNotFound for what, and a failure its error.
func (t *txn) execOne(ctx context.Context, what, query string, args ...any) error {
	n, err := t.exec(ctx, query, args...)
	if err != nil {
		return wrap(err, "%s", what)
	}
	if n == 0 {
		return dialect.NotFound(what)
	}
	return nil
}

// queryOne reads the one row of query with scan. No row is the store's
// reconcile.ErrNotFound for what, and a failure its error.
func queryOne[T any](ctx context.Context, t *txn, scan func(sqlstore.Row) (T, error), what, query string, args ...any) (T, error) {
	v, err := scan(t.tx.QueryRow(ctx, query, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		var zero T
		return zero, dialect.NotFound(what)
	}
	if err != nil {
		var zero T
		return zero, wrap(err, "%s", what)
	}
	return v, nil
}

// queryAll reads every row of query with scan. A failure is the store's
// error for what.
func queryAll[T any](ctx context.Context, t *txn, scan func(sqlstore.Row) (T, error), what, query string, args ...any) ([]T, error) {
	return queryAllWith(ctx, t, nil, scan, what, query, args...)
}

// queryAllWith is queryAll with the planner settings in force for query
// alone (queryWith).
func queryAllWith[T any](ctx context.Context, t *txn, settings []plannerSetting, scan func(sqlstore.Row) (T, error), what, query string, args ...any) ([]T, error) {
	var out []T
	err := t.queryWith(ctx, settings, func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) { return scan(row) })
		return err
	}, query, args...)
	if err != nil {
		return nil, wrap(err, "%s", what)
	}
	return out, nil
}

// Now implements reconcile.Store: the injected clock (Config.Now), else
// the server's statement_timestamp(), to the microsecond, in UTC.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	return storeNow(ctx, s.now, s.pool.QueryRow)
}

// Now implements reconcile.Tx: the injected clock (Config.Now), else the
// server's statement_timestamp() of this statement (not the
// transaction's start), to the microsecond, in UTC.
func (t *txn) Now(ctx context.Context) (time.Time, error) {
	return storeNow(ctx, t.now, t.tx.QueryRow)
}

// storeNow reads the store's clock: now when injected, else the server's
// with query.
func storeNow(ctx context.Context, now func() time.Time, query func(context.Context, string, ...any) pgx.Row) (time.Time, error) {
	if now != nil {
		return now().Truncate(time.Microsecond).UTC(), nil
	}
	var t time.Time
	if err := query(ctx, `SELECT statement_timestamp()`).Scan(&t); err != nil {
		return time.Time{}, wrap(err, "read the server's clock")
	}
	return t.Truncate(time.Microsecond).UTC(), nil
}

// nowSQL is the store's clock in SQL. Every statement that reads the
// clock takes it as its first parameter, from clockArg: the injected
// clock's time, or NULL for the server's statement_timestamp(), the same
// instant throughout the statement.
const nowSQL = `COALESCE($1::timestamptz, statement_timestamp())`

// clockArg is the value of nowSQL's parameter.
func clockArg(now func() time.Time) any {
	if now == nil {
		return nil
	}
	return now()
}
