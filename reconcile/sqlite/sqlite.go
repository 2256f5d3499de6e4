// Package sqlite implements reconcile.Store on SQLite, over database/sql
// with the pure-Go driver modernc.org/sqlite (driver name "sqlite", no
// cgo). It is the store for a single host: one database file, shared by
// every payrecon process on that host.
//
// # How SQLite differs, and how this package answers
//
// PostgreSQL lets many transactions write at once and hands claimers
// disjoint rows with FOR UPDATE SKIP LOCKED. SQLite has neither row locks
// nor SKIP LOCKED: it lets one writer at a time hold the database's write
// lock, and a transaction that starts as a reader and later tries to
// write can deadlock with another one doing the same (SQLITE_BUSY
// without waiting). The design follows from that:
//
//   - Every transaction is BEGIN IMMEDIATE (the driver's DSN parameter
//     _txlock=immediate): it takes the write lock up front, waiting for
//     it under the busy timeout, so no transaction ever has to upgrade a
//     read lock and two transactions can never deadlock. Reads inside a
//     transaction see a stable database, since nobody else writes until
//     it ends.
//   - A Store has exactly one connection (db.SetMaxOpenConns(1)), used
//     for reads and writes alike. Goroutines of one process queue for it
//     in database/sql instead of spinning in SQLite's busy handler;
//     processes sharing the file queue on the write lock under the busy
//     timeout. A caller waits at most Config.BusyTimeout for either and
//     then gets an error wrapping ErrBusy. (So a Store method called from
//     inside InTx, which needs the connection the transaction holds,
//     fails after the busy timeout instead of hanging.)
//   - Each connection runs with journal_mode=WAL (readers in other
//     processes do not block the writer, nor it them),
//     synchronous=NORMAL (durable at every WAL checkpoint; a power loss
//     can lose the last commits, never corrupt the file),
//     foreign_keys=ON and busy_timeout=Config.BusyTimeout.
//   - ClaimJobs, under the write lock of its own transaction, selects the
//     due or expired jobs (ORDER BY run_at LIMIT n), noting which had an
//     unreleased lease (SQLite's RETURNING only gives the new values, so
//     the previous owner must be read first), then leases exactly those
//     with one UPDATE ... RETURNING. No other writer runs in between, so
//     two claimers, in one process or several, never get the same job.
//   - CheckLease is a plain SELECT: the transaction already holds the
//     write lock, so no claim can take the job over before it commits.
//   - InsertInboxEvent and InsertIdempotencyKey are INSERT ... ON
//     CONFLICT DO NOTHING. "A concurrent insert of the same key waits for
//     the other transaction" holds trivially: writers are serialized, so
//     the second transaction starts only after the first has committed
//     (it then reports false) or rolled back (true).
//   - AcquireSweepLock is one upsert, INSERT ... ON CONFLICT(name) DO
//     UPDATE ... WHERE expired or already the caller's ... RETURNING, as
//     on PostgreSQL.
//
// Since writers never collide, InTx never retries: fn runs once.
//
// # The clock
//
// The store owns the clock (Store.Now, Tx.Now): claims, lease checks,
// releases and sweep locks read it themselves, under the write lock.
// SQLite is embedded, so the database's clock is this machine's:
// time.Now by default, or Config.Now.
//
// # Guarantees in the database
//
// The schema lives in package migrations (dialect SQLite); Migrate
// applies it. Triggers refuse every write of purchases.state that is not
// in the allowed_transitions table (loaded with statemachine's moves), any
// change to that table, any UPDATE or DELETE of the audit tables
// (transitions, provider_attempts, operator_actions) and any change to an
// audit finding but its closing, and a foreign key every transition the
// audit records that is not in the table, whatever SQL path writes. A
// refused write fails alone: RAISE(ABORT) and constraint failures undo
// the statement, not the transaction, so the caller may go on reading and
// writing and commit, as on PostgreSQL.
//
// Driver errors are translated into reconcile's errors and wrapped with
// %w, keeping SQLite's message: a unique constraint gives
// reconcile.ErrDuplicate, the transition trigger
// reconcile.ErrForbiddenTransition, NOT NULL, CHECK, type and foreign key
// failures reconcile.ErrInvalid (a foreign key to a missing purchase
// reconcile.ErrNotFound where the purchase is the only reference; a
// transition's foreign keys, which SQLite does not tell apart, are told
// apart by looking the move up), SQLITE_BUSY after the busy timeout
// ErrBusy.
//
// # Values
//
// Times are stored as INTEGER microseconds since the Unix epoch
// (time.Time.UnixMicro: finer digits are truncated, as PostgreSQL's
// timestamptz does) and returned in UTC; a zero time.Time is stored as
// NULL and a NULL read back as the zero time. Integers compare in the
// same order as the instants, so run_at <= now is an index range scan.
// Empty optional strings (reference, provider key, payment id, ...) are
// stored as NULL, so they never collide in unique indexes. Byte slices
// (payloads, responses) are BLOBs; an empty one reads back as nil.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

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
	// it the call fails with an error wrapping ErrBusy. Default 5s (when
	// 0).
	BusyTimeout time.Duration
	// Now is the store's clock. Default nil: time.Now. SQLite is
	// embedded, so the database's clock is this machine's clock, shared by
	// every process on it that opens the file. Tests and the demo inject
	// a clock.
	Now func() time.Time
}

// DefaultBusyTimeout is Config.BusyTimeout when left 0.
const DefaultBusyTimeout = 5 * time.Second

// ErrBusy is wrapped by the errors of calls that waited
// Config.BusyTimeout for the database without getting it: another
// transaction, in this process or another one, kept the write lock all
// that time.
var ErrBusy = errors.New("database is busy: another transaction held it for longer than the busy timeout")

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
		return nil, fmt.Errorf("sqlite: open: %w: Config.Path is empty", reconcile.ErrInvalid)
	case cfg.Path == ":memory:" || strings.HasPrefix(cfg.Path, "file:"):
		return nil, fmt.Errorf("sqlite: open: %w: Config.Path %q: want a file path (in-memory databases and URIs are not supported)",
			reconcile.ErrInvalid, cfg.Path)
	case strings.ContainsAny(cfg.Path, "?\x00"):
		return nil, fmt.Errorf("sqlite: open: %w: Config.Path %q contains '?' or NUL", reconcile.ErrInvalid, cfg.Path)
	case cfg.BusyTimeout < 0:
		return nil, fmt.Errorf("sqlite: open: %w: Config.BusyTimeout is %s", reconcile.ErrInvalid, cfg.BusyTimeout)
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

	db, err := sql.Open("sqlite", dsn(path, busy))
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
// applies to every connection it opens.
func dsn(path string, busy time.Duration) string {
	q := url.Values{}
	// The driver runs busy_timeout first, then the others.
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
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
		return fmt.Errorf("sqlite: ready: %s: %w: %w", s.path, ErrBusy, err)
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
			what, ErrBusy, s.path, s.busyTimeout)
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
			if errors.Is(kindOf(err), ErrBusy) {
				return fmt.Errorf("sqlite: %s: begin: %w: the write lock of %s stayed taken for %s: %w",
					what, ErrBusy, s.path, s.busyTimeout, err)
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

// InTx implements reconcile.Store: fn runs once, in a BEGIN IMMEDIATE
// transaction that holds the database's write lock from start to end (no
// other transaction, in any process, writes meanwhile). It waits at most
// Config.BusyTimeout for the lock (ErrBusy). fn's own error is returned
// as is.
func (s *Store) InTx(ctx context.Context, fn func(reconcile.Tx) error) error {
	return s.inTx(ctx, "transaction", func(tx *sql.Tx) error { return fn(&txn{tx: tx, now: s.now}) })
}

// Now implements reconcile.Store: Config.Now (time.Now by default), to
// the microsecond, in UTC. It does not touch the database.
func (s *Store) Now(context.Context) (time.Time, error) { return storeNow(s.now), nil }

// storeNow reads now as the store keeps times: to the microsecond
// (truncated, as micros does), in UTC.
func storeNow(now func() time.Time) time.Time { return fromMicros(now().UnixMicro()) }

// claimWhere selects the jobs ClaimJobs may lease at ?1 (now): open, and
// either due and not leased or leased with an expired lease.
const claimWhere = `done_at IS NULL
  AND ((lease_owner IS NULL AND run_at <= ?1)
    OR (lease_owner IS NOT NULL AND lease_expires_at <= ?1))`

// expiredWhere selects the jobs ClaimExpiredJobs may lease at ?1: open,
// with a lease that expired without being released.
const expiredWhere = `done_at IS NULL AND lease_owner IS NOT NULL AND lease_expires_at <= ?1`

// ClaimJobs implements reconcile.Store. It judges due and expired by the
// store's clock, read once it holds the write lock, and returns that time
// as each Lease's Now. owner must not be empty, limit and leaseFor must be
// positive (reconcile.ErrInvalid otherwise). A job whose previous lease
// was never released (it expired) comes back with TakenOver set. The
// leases come in run_at order, oldest first.
func (s *Store) ClaimJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
	return s.claim(ctx, "claim jobs", claimWhere, owner, limit, leaseFor)
}

// ClaimExpiredJobs implements reconcile.Store: ClaimJobs restricted to
// jobs whose lease expired at the store's now without being released.
// Every lease it returns has TakenOver set.
func (s *Store) ClaimExpiredJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
	return s.claim(ctx, "claim expired jobs", expiredWhere, owner, limit, leaseFor)
}

// ClaimJob implements reconcile.Store: it leases purchaseID's job, due or
// not, unless the job is done or holds an unexpired lease (whoever its
// owner, this one included), which give reconcile.ErrConflict. It reads
// and leases the job under the write lock of one transaction, so it waits
// for a worker between CheckLease and its commit (at most the busy
// timeout) and then judges the row that worker left, by the store's clock
// read then. owner must not be empty and leaseFor must be positive
// (reconcile.ErrInvalid otherwise).
func (s *Store) ClaimJob(ctx context.Context, purchaseID, owner string, leaseFor time.Duration) (reconcile.Lease, error) {
	what := "claim job of " + purchaseID
	switch {
	case owner == "":
		return reconcile.Lease{}, fmt.Errorf("sqlite: %s: %w: empty owner", what, reconcile.ErrInvalid)
	case leaseFor <= 0:
		return reconcile.Lease{}, fmt.Errorf("sqlite: %s: %w: lease duration %s", what, reconcile.ErrInvalid, leaseFor)
	}
	var l reconcile.Lease
	err := s.inTx(ctx, what, func(tx *sql.Tx) error {
		now := storeNow(s.now)
		l = reconcile.Lease{PurchaseID: purchaseID, Owner: owner, ExpiresAt: fromMicros(now.Add(leaseFor).UnixMicro()), Now: now}
		t := &txn{tx: tx, now: s.now}
		j, err := t.GetJob(ctx, purchaseID)
		switch {
		case errors.Is(err, reconcile.ErrNotFound):
			return fmt.Errorf("sqlite: %s: no such job: %w", what, reconcile.ErrNotFound)
		case err != nil:
			return err
		case !j.DoneAt.IsZero():
			return fmt.Errorf("sqlite: %s for %s: %w: it is done since %s",
				what, owner, reconcile.ErrConflict, j.DoneAt.Format(time.RFC3339Nano))
		case j.LeaseOwner != "" && j.LeaseExpiresAt.UnixMicro() > now.UnixMicro():
			return fmt.Errorf("sqlite: %s for %s: %w: leased by %q until %s",
				what, owner, reconcile.ErrConflict, j.LeaseOwner, j.LeaseExpiresAt.Format(time.RFC3339Nano))
		}
		l.TakenOver = j.LeaseOwner != ""
		err = tx.QueryRowContext(ctx, `UPDATE jobs
SET lease_owner = ?2,
    lease_token = lease_token + 1,
    lease_expires_at = ?3,
    checks = checks + 1
WHERE purchase_id = ?1
RETURNING lease_token, checks`, purchaseID, owner, l.ExpiresAt.UnixMicro()).Scan(&l.Token, &l.Checks)
		if err != nil {
			return wrap(err, "%s for %s", what, owner)
		}
		return nil
	})
	if err != nil {
		return reconcile.Lease{}, err
	}
	return l, nil
}

func (s *Store) claim(ctx context.Context, what, where, owner string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
	switch {
	case owner == "":
		return nil, fmt.Errorf("sqlite: %s: %w: empty owner", what, reconcile.ErrInvalid)
	case limit <= 0:
		return nil, fmt.Errorf("sqlite: %s: %w: limit %d", what, reconcile.ErrInvalid, limit)
	case leaseFor <= 0:
		return nil, fmt.Errorf("sqlite: %s: %w: lease duration %s", what, reconcile.ErrInvalid, leaseFor)
	}
	fail := func(err error) error { return wrap(err, "%s for %s", what, owner) }
	var leases []reconcile.Lease
	err := s.inTx(ctx, what, func(tx *sql.Tx) error {
		leases = nil
		// The clock is read under the write lock: a claim that waited for
		// it judges by the time it got it.
		now := storeNow(s.now)
		// The lease's expiry as stored: to the microsecond.
		expires := fromMicros(now.Add(leaseFor).UnixMicro())
		// The write lock is ours until commit: what this reads is what
		// the UPDATE below leases, and nobody else can claim it between.
		rows, err := tx.QueryContext(ctx, `SELECT purchase_id, lease_owner IS NOT NULL FROM jobs
WHERE `+where+`
ORDER BY run_at, purchase_id
LIMIT ?2`, now.UnixMicro(), limit)
		if err != nil {
			return fail(err)
		}
		var ids []string
		for rows.Next() {
			l := reconcile.Lease{Owner: owner, ExpiresAt: expires, Now: now}
			if err := rows.Scan(&l.PurchaseID, &l.TakenOver); err != nil {
				rows.Close()
				return fail(err)
			}
			ids = append(ids, l.PurchaseID)
			leases = append(leases, l)
		}
		if err := rows.Err(); err != nil {
			return fail(err)
		}
		if len(ids) == 0 {
			return nil
		}
		list, err := json.Marshal(ids)
		if err != nil {
			return fail(err)
		}
		rows, err = tx.QueryContext(ctx, `UPDATE jobs
SET lease_owner = ?1,
    lease_token = lease_token + 1,
    lease_expires_at = ?2,
    checks = checks + 1
WHERE purchase_id IN (SELECT value FROM json_each(?3))
RETURNING purchase_id, lease_token, checks`, owner, expires.UnixMicro(), string(list))
		if err != nil {
			return fail(err)
		}
		type claimed struct {
			token  int64
			checks int
		}
		got := make(map[string]claimed, len(ids))
		for rows.Next() {
			var id string
			var c claimed
			if err := rows.Scan(&id, &c.token, &c.checks); err != nil {
				rows.Close()
				return fail(err)
			}
			got[id] = c
		}
		if err := rows.Err(); err != nil {
			return fail(err)
		}
		for i := range leases {
			c, ok := got[leases[i].PurchaseID]
			if !ok {
				return fmt.Errorf("sqlite: %s for %s: job %s was selected but not leased", what, owner, leases[i].PurchaseID)
			}
			leases[i].Token, leases[i].Checks = c.token, c.checks
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return leases, nil
}

// ReleaseLeases implements reconcile.Store: every open job leased by
// owner, expired or not, loses its lease and becomes due at the store's
// now.
func (s *Store) ReleaseLeases(ctx context.Context, owner string) (int, error) {
	var n int64
	err := s.inTx(ctx, "release leases", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE jobs SET lease_owner = NULL, lease_expires_at = NULL, run_at = ?2
WHERE lease_owner = ?1 AND done_at IS NULL`, owner, storeNow(s.now).UnixMicro())
		if err != nil {
			return wrap(err, "release leases of %s", owner)
		}
		n, err = res.RowsAffected()
		if err != nil {
			return wrap(err, "release leases of %s", owner)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return int(n), nil
}
