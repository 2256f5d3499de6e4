package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/migrations"
	"github.com/payrecon/payrecon/reconcile"
)

// Config configures Open.
type Config struct {
	// Path is the database file. Required; there is no default. It is
	// created if missing, but its directory must exist: Open does not
	// create directories. SQLite puts its -wal and -shm files beside it,
	// so the directory must be writable. Every process that shares the
	// data must open the same file on a local file system (WAL needs
	// shared memory; network file systems are not supported).
	Path string
	// BusyTimeout bounds how long a transaction waits for the database:
	// for this Store's connection, held by another goroutine's
	// transaction, and for the write lock, held by another process. After
	// it the call fails with an error wrapping ErrLockTimeout. Default 5s
	// (when 0).
	BusyTimeout time.Duration
	// Synchronous is SQLite's synchronous setting on every connection:
	// "FULL" or "NORMAL", in any case. Default "FULL" (when empty).
	// FULL syncs the write-ahead log to disk at every commit: a
	// transaction committed is durable, whatever happens to the machine.
	// NORMAL syncs it only at checkpoints: commits are cheaper, but a
	// power loss or an operating system crash may lose the transactions
	// committed since the last checkpoint (the database stays consistent;
	// a crash of the process alone loses nothing). Any other value is
	// refused (EXTRA adds nothing to FULL in WAL mode, OFF risks
	// corruption).
	Synchronous string
	// Now is the store's clock. Default nil: time.Now. SQLite is
	// embedded, so the database's clock is this machine's clock, shared by
	// every process on it that opens the file. Tests and the demo inject
	// a clock.
	Now func() time.Time
}

// DefaultBusyTimeout is Config.BusyTimeout when left 0.
const DefaultBusyTimeout = 5 * time.Second

// DefaultSynchronous is Config.Synchronous when left empty.
const DefaultSynchronous = "FULL"

// ParseSynchronous returns the synchronous setting v names, as Open
// applies it: "FULL" or "NORMAL" (upper case), v being either in any
// case; "" is DefaultSynchronous. Any other value is an error saying what
// is allowed.
func ParseSynchronous(v string) (string, error) {
	switch mode := strings.ToUpper(v); mode {
	case "":
		return DefaultSynchronous, nil
	case "FULL", "NORMAL":
		return mode, nil
	default:
		return "", errors.New("want FULL (durable at every commit) or NORMAL (durable at checkpoints)")
	}
}

// Store is a reconcile.Store on SQLite. It is safe for concurrent use; its
// transactions run one at a time. Create it with Open and release it with
// Close.
type Store struct {
	db          *sql.DB
	path        string
	busyTimeout time.Duration
	now         func() time.Time // Config.Now, or time.Now
	closeOnce   sync.Once
	closeErr    error
}

var _ reconcile.Store = (*Store)(nil)

// Open opens (creating it if missing) the database file cfg.Path and
// configures its connection. It fails, naming the path, when the file's
// directory does not exist or the file is not a SQLite database; it does
// not check the schema (see Ready and Migrate).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	switch {
	case cfg.Path == "":
		return nil, dialect.Invalid("open", "Config.Path is empty")
	case cfg.Path == ":memory:" || strings.HasPrefix(cfg.Path, "file:"):
		return nil, dialect.Invalid("open", fmt.Sprintf("Config.Path %q: want a file path (in-memory databases and URIs are not supported)", cfg.Path))
	case strings.ContainsAny(cfg.Path, "?\x00"):
		return nil, dialect.Invalid("open", fmt.Sprintf("Config.Path %q contains '?' or NUL", cfg.Path))
	case cfg.BusyTimeout < 0:
		return nil, dialect.Invalid("open", fmt.Sprintf("Config.BusyTimeout is %s", cfg.BusyTimeout))
	}
	synchronous, err := ParseSynchronous(cfg.Synchronous)
	if err != nil {
		return nil, dialect.Invalid("open", fmt.Sprintf("Config.Synchronous %q: %v", cfg.Synchronous, err))
	}
	busy := DefaultBusyTimeout
	if cfg.BusyTimeout > 0 {
		busy = cfg.BusyTimeout
	}
	path, err := filepath.Abs(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", cfg.Path, err)
	}
	dir := filepath.Dir(path)
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("sqlite: open %s: directory %s does not exist (create it first): %w", path, dir, err)
	case err != nil:
		return nil, fmt.Errorf("sqlite: open %s: directory %s: %w", path, dir, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("sqlite: open %s: %s is not a directory", path, dir)
	}

	db, err := sql.Open("sqlite", dsn(path, busy, synchronous))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// One connection for everything: transactions take the write lock at
	// BEGIN, so a second connection could only wait for it (see the
	// package documentation). Keep it open for the Store's life.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	s := &Store{db: db, path: path, busyTimeout: busy, now: now}

	// Connecting applies the pragmas; journal_mode=WAL reads the file's
	// header, so a file that is not a database fails here.
	if err := checkWAL(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return s, nil
}

// checkWAL connects and checks that the file is in WAL mode, which the
// connection's journal_mode pragma asked for: SQLite keeps the old mode
// when it cannot use WAL, on some network file systems for instance.
func checkWAL(ctx context.Context, db *sql.DB) error {
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, not wal (is the file on a network file system?)", mode)
	}
	return nil
}

// dsn is the driver's data source name for path: a plain file name (not
// a file: URI, so no character of path is special but '?', which Open
// refuses) followed by the connection's settings, which the driver
// applies to every connection it opens. synchronous is FULL or NORMAL.
func dsn(path string, busy time.Duration, synchronous string) string {
	q := url.Values{}
	// The driver runs busy_timeout first, then the others.
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+synchronous+")")
	q.Add("_pragma", "foreign_keys(1)")
	// database/sql's BeginTx sends BEGIN IMMEDIATE.
	q.Set("_txlock", "immediate")
	return path + "?" + q.Encode()
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Migrate applies every pending schema migration (see package
// migrations), each in its own transaction. It is safe to run on an
// up-to-date database. Run it from one process at a time (payrecon
// migrate, before starting workers): goose has no lock for SQLite, and a
// second process migrating the same file at the same moment may fail (its
// failed migration changes nothing; run it again).
func (s *Store) Migrate(ctx context.Context) error {
	if err := migrations.Up(ctx, s.db, migrations.SQLite); err != nil {
		return fmt.Errorf("sqlite: migrate %s: %w", s.path, err)
	}
	return nil
}

// Ready returns nil when the database file answers and its schema is at
// least at the version this binary embeds; an error wrapping
// reconcile.ErrNotMigrated when the schema is missing or older. It never
// writes.
func (s *Store) Ready(ctx context.Context) error {
	if err := s.withConn(ctx, "ready", func(c *sql.Conn) error { return c.PingContext(ctx) }); err != nil {
		return fmt.Errorf("sqlite: ready: %w", err)
	}
	// Version needs the store's connection too: wait for it no longer
	// than a transaction would.
	vctx, cancel := context.WithTimeout(ctx, s.busyTimeout)
	defer cancel()
	current, latest, err := migrations.Version(vctx, s.db, migrations.SQLite)
	switch {
	case err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("sqlite: ready: %s: %w: %w", s.path, ErrLockTimeout, err)
	case err != nil:
		return fmt.Errorf("sqlite: ready: %s: %w", s.path, err)
	}
	if current < latest {
		return fmt.Errorf("sqlite: ready: %s: schema is at version %d, this binary needs %d: %w",
			s.path, current, latest, reconcile.ErrNotMigrated)
	}
	return nil
}

// Close releases the store's connection. It is safe to call more than
// once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("sqlite: close %s: %w", s.path, err)
		}
	})
	return s.closeErr
}

// InTx implements reconcile.Store: fn runs once, in a BEGIN IMMEDIATE
// transaction that holds the database's write lock from start to end (no
// other transaction, in any process, writes meanwhile). It waits at most
// Config.BusyTimeout for the lock (ErrLockTimeout). fn's own error is
// returned as is.
func (s *Store) InTx(ctx context.Context, fn func(reconcile.Tx) error) error {
	return s.inTx(ctx, "transaction", func(tx *sql.Tx) error { return fn(&txn{tx: tx, now: s.now}) })
}

// withConn runs fn on the store's connection, waiting at most the busy
// timeout for it.
func (s *Store) withConn(ctx context.Context, what string, fn func(*sql.Conn) error) error {
	wait, cancel := context.WithTimeout(ctx, s.busyTimeout)
	c, err := s.db.Conn(wait)
	cancel()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return fmt.Errorf("sqlite: %s: %w", what, context.Cause(ctx))
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("sqlite: %s: %w: this process's connection to %s stayed in use for %s "+
			"(a Store method called inside InTx waits for the transaction that called it)",
			what, ErrLockTimeout, s.path, s.busyTimeout)
	default:
		return wrap(err, "%s", what)
	}
	defer c.Close()
	return fn(c)
}

// inTx runs fn in one BEGIN IMMEDIATE transaction on the store's
// connection, committing if fn returns nil and rolling back otherwise
// (also when fn panics).
func (s *Store) inTx(ctx context.Context, what string, fn func(*sql.Tx) error) error {
	return s.withConn(ctx, what, func(c *sql.Conn) error {
		tx, err := c.BeginTx(ctx, nil)
		if err != nil {
			if errors.Is(kindOf(err), ErrLockTimeout) {
				return fmt.Errorf("sqlite: %s: begin: %w: the write lock of %s stayed taken for %s: %w",
					what, ErrLockTimeout, s.path, s.busyTimeout, err)
			}
			return wrap(err, "%s: begin", what)
		}
		// Rollback after Commit is a no-op (sql.ErrTxDone).
		defer func() { _ = tx.Rollback() }()
		if err := fn(tx); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return wrap(err, "%s: commit", what)
		}
		return nil
	})
}

// txn is the reconcile.Tx of one BEGIN IMMEDIATE transaction. A statement
// that fails (a constraint, a trigger's RAISE(ABORT)) is undone alone, so
// the transaction stays usable without savepoints.
type txn struct {
	tx  *sql.Tx
	now func() time.Time // the store's clock
	// depth counts the Savepoints open around the current statement, so
	// that each nested one has a name of its own.
	depth int
}

var _ reconcile.Tx = (*txn)(nil)

// exec runs one write and returns how many rows it changed.
func (t *txn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Savepoint implements reconcile.Tx with SAVEPOINT, RELEASE and, when fn
// fails, ROLLBACK TO: what fn wrote is undone, the rest of the
// transaction kept. Each level of nesting has its own name.
func (t *txn) Savepoint(ctx context.Context, fn func(reconcile.Tx) error) error {
	t.depth++
	defer func() { t.depth-- }()
	name := fmt.Sprintf("payrecon_nested_%d", t.depth)
	if _, err := t.tx.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return wrap(err, "savepoint")
	}
	ferr := fn(t)
	if ferr == nil {
		if _, err := t.tx.ExecContext(ctx, "RELEASE "+name); err != nil {
			return wrap(err, "release savepoint")
		}
		return nil
	}
	// Undo fn's writes even when ctx ended them: the transaction is the
	// caller's, and goes on.
	ctx = context.WithoutCancel(ctx)
	if _, err := t.tx.ExecContext(ctx, "ROLLBACK TO "+name); err != nil {
		return errors.Join(ferr, wrap(err, "roll back to savepoint"))
	}
	if _, err := t.tx.ExecContext(ctx, "RELEASE "+name); err != nil {
		return errors.Join(ferr, wrap(err, "release savepoint"))
	}
	return ferr
}

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
	v, err := scan(t.tx.QueryRowContext(ctx, query, args...))
	if errors.Is(err, sql.ErrNoRows) {
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
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, wrap(err, "%s", what)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, wrap(err, "%s", what)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err, "%s", what)
	}
	if err := rows.Close(); err != nil {
		return nil, wrap(err, "%s", what)
	}
	return out, nil
}

// Now implements reconcile.Store: Config.Now (time.Now by default), to
// the microsecond, in UTC. It does not touch the database.
func (s *Store) Now(context.Context) (time.Time, error) { return storeNow(s.now), nil }

// Now implements reconcile.Tx.
func (t *txn) Now(context.Context) (time.Time, error) { return storeNow(t.now), nil }

// storeNow reads now as the store keeps times: to the microsecond
// (truncated, as micros does), in UTC.
func storeNow(now func() time.Time) time.Time { return fromMicros(now().UnixMicro()) }
