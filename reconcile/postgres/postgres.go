// Package postgres implements reconcile.Store on PostgreSQL, over pgx/v5.
//
// The schema lives in package migrations (dialect Postgres); Migrate
// applies it. The database itself refuses forbidden state moves (a
// trigger checks every write of purchases.state against the
// allowed_transitions table, and a foreign key every transition the audit
// records), any change to allowed_transitions, any UPDATE or DELETE of
// the audit tables, and any change to an audit finding but its closing,
// so the guarantees hold for every SQL path, not only this package.
//
// Driver errors are translated into reconcile's errors and wrapped with
// %w, keeping the database's own message: errors.Is(err,
// reconcile.ErrForbiddenTransition) works, and the text still says which
// move was refused.
//
// Every write inside a transaction runs under a savepoint, so a refused
// write (a duplicate, a forbidden move) leaves the transaction usable, as
// it is on SQLite: the caller may go on reading and writing and commit.
//
// The store owns the clock (Store.Now, Tx.Now): by default the database
// server's, statement_timestamp(), which every worker and replica shares,
// so a worker whose own clock is off changes no decision. Claims, lease
// checks, releases and sweep locks read it in their own statement, in
// the same round trip; Config.Now injects another clock.
//
// Times are stored as timestamptz to the microsecond (finer digits are
// truncated) and returned in UTC; a zero time.Time is stored as NULL and a
// NULL read back as the zero time. Empty optional strings (reference,
// provider key, payment id, ...) are stored as NULL, so they never collide
// in unique indexes.
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

	"github.com/payrecon/payrecon/migrations"
	"github.com/payrecon/payrecon/reconcile"
)

// Config configures Open.
type Config struct {
	// URL is the database's connection string: a postgres:// URL or a
	// key=value DSN, as accepted by pgx. Required; there is no default.
	// The standard PG* environment variables fill in what it leaves out.
	URL string
	// MaxConns caps the connection pool. Default 8 (when 0).
	MaxConns int32
	// Now is the store's clock. Default nil: the database server's clock
	// (statement_timestamp()), the one clock every worker and replica
	// shares. Tests and the demo inject a clock.
	Now func() time.Time
}

// DefaultMaxConns is Config.MaxConns when left 0.
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
		return nil, fmt.Errorf("postgres: open: %w: Config.URL is empty", reconcile.ErrInvalid)
	}
	if cfg.MaxConns < 0 {
		return nil, fmt.Errorf("postgres: open: %w: Config.MaxConns is %d", reconcile.ErrInvalid, cfg.MaxConns)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// pgx redacts the password in its parse errors.
		return nil, fmt.Errorf("postgres: open: %w: %w", reconcile.ErrInvalid, err)
	}
	pcfg.MaxConns = DefaultMaxConns
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
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
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fmt.Errorf("postgres: begin: %w", err)
	}
	// Rollback after Commit is a no-op; on a failed or cancelled
	// connection it closes the connection, which is all there is left to
	// do. It also covers a panicking fn.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(&txn{tx: tx, now: s.now}); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
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

// Now implements reconcile.Store: the injected clock (Config.Now), else
// the server's statement_timestamp(), to the microsecond, in UTC.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	return storeNow(ctx, s.now, s.pool.QueryRow)
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

// claimSQL returns the statement that leases the open jobs matching
// which (a condition on jobs, reading the clock with nowSQL) in one
// statement. SKIP LOCKED makes concurrent claimers take disjoint rows; it
// also skips a job whose lease a transaction is checking (CheckLease
// locks the row), so a lease cannot be taken over between that check and
// the commit. It returns, with each lease, whether the job was still
// leased (its lease expired without being released) and the clock's time
// the claim judged by.
func claimSQL(which string) string {
	return `
WITH cand AS (
    SELECT purchase_id, lease_owner AS prev_owner
    FROM jobs
    WHERE done_at IS NULL
      AND (` + which + `)
    ORDER BY run_at, purchase_id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs AS j
SET lease_owner = $3,
    lease_token = j.lease_token + 1,
    lease_expires_at = ` + nowSQL + ` + $4::interval,
    checks = j.checks + 1
FROM cand
WHERE j.purchase_id = cand.purchase_id
RETURNING j.purchase_id, j.run_at, j.lease_token, j.lease_expires_at, j.checks, cand.prev_owner IS NOT NULL, ` + nowSQL
}

// expiredLease matches a job whose lease expired without being released.
const expiredLease = `lease_owner IS NOT NULL AND lease_expires_at <= ` + nowSQL

var (
	// claimDueSQL leases jobs that are due or whose lease expired.
	claimDueSQL = claimSQL(`(lease_owner IS NULL AND run_at <= ` + nowSQL + `) OR (` + expiredLease + `)`)
	// claimExpiredSQL leases only jobs whose lease expired.
	claimExpiredSQL = claimSQL(expiredLease)
	// claimOneSQL leases the job of purchase $5, due or not, unless it is
	// leased and the lease has not expired.
	claimOneSQL = claimSQL(`purchase_id = $5 AND (lease_owner IS NULL OR lease_expires_at <= ` + nowSQL + `)`)
)

// ClaimJobs implements reconcile.Store. It judges due and expired by the
// store's clock, read by the claiming statement itself, and returns that
// time as each Lease's Now. owner must not be empty, limit and leaseFor
// must be positive (reconcile.ErrInvalid otherwise). A job whose previous
// lease was never released (it expired) comes back with TakenOver set.
// The leases come in run_at order, oldest first.
func (s *Store) ClaimJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
	return s.claim(ctx, "claim jobs", claimDueSQL, owner, limit, leaseFor)
}

// ClaimExpiredJobs implements reconcile.Store: ClaimJobs for the open jobs
// whose lease expired (lease_expires_at <= the store's now) without being
// released; a job that is due but not leased is left alone. Every lease
// comes back with TakenOver set.
func (s *Store) ClaimExpiredJobs(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]reconcile.Lease, error) {
	return s.claim(ctx, "claim expired jobs", claimExpiredSQL, owner, limit, leaseFor)
}

// ClaimJob implements reconcile.Store: it leases purchaseID's job, due or
// not, unless the job is done or holds an unexpired lease (whoever its
// owner, this one included), which give reconcile.ErrConflict. A job whose
// row another transaction has locked (a worker between CheckLease and its
// commit) is busy too: ErrConflict, at once, without waiting. owner must
// not be empty and leaseFor must be positive (reconcile.ErrInvalid
// otherwise).
func (s *Store) ClaimJob(ctx context.Context, purchaseID, owner string, leaseFor time.Duration) (reconcile.Lease, error) {
	what := "claim job of " + purchaseID
	leases, err := s.claim(ctx, what, claimOneSQL, owner, 1, leaseFor, purchaseID)
	if err != nil {
		return reconcile.Lease{}, err
	}
	if len(leases) == 1 {
		return leases[0], nil
	}
	// Say why not; this is the failure path only.
	var owned *string
	var expires, done *time.Time
	var now time.Time
	err = s.pool.QueryRow(ctx, `SELECT lease_owner, lease_expires_at, done_at, `+nowSQL+` FROM jobs WHERE purchase_id = $2`,
		clockArg(s.now), purchaseID).Scan(&owned, &expires, &done, &now)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return reconcile.Lease{}, fmt.Errorf("postgres: %s: no such job: %w", what, reconcile.ErrNotFound)
	case err != nil:
		return reconcile.Lease{}, wrap(err, "%s", what)
	}
	why := "a transaction holding its lease is in progress"
	switch {
	case done != nil:
		why = "it is done since " + done.UTC().Format(time.RFC3339Nano)
	case owned != nil && expires.After(now):
		why = fmt.Sprintf("leased by %q until %s", *owned, expires.UTC().Format(time.RFC3339Nano))
	}
	return reconcile.Lease{}, fmt.Errorf("postgres: %s for %s: %w: %s", what, owner, reconcile.ErrConflict, why)
}

// claim runs one of the claim statements and returns its leases in run_at
// order. extra are the statement's parameters after the first four.
func (s *Store) claim(ctx context.Context, what, query, owner string, limit int, leaseFor time.Duration, extra ...any) ([]reconcile.Lease, error) {
	switch {
	case owner == "":
		return nil, fmt.Errorf("postgres: %s: %w: empty owner", what, reconcile.ErrInvalid)
	case limit <= 0:
		return nil, fmt.Errorf("postgres: %s: %w: limit %d", what, reconcile.ErrInvalid, limit)
	case leaseFor <= 0:
		return nil, fmt.Errorf("postgres: %s: %w: lease duration %s", what, reconcile.ErrInvalid, leaseFor)
	}
	rows, err := s.pool.Query(ctx, query, append([]any{clockArg(s.now), limit, owner, leaseFor}, extra...)...)
	if err != nil {
		return nil, wrap(err, "%s for %s", what, owner)
	}
	type claimed struct {
		lease reconcile.Lease
		runAt time.Time
	}
	var got []claimed
	for rows.Next() {
		var c claimed
		if err := rows.Scan(&c.lease.PurchaseID, &c.runAt, &c.lease.Token, &c.lease.ExpiresAt, &c.lease.Checks, &c.lease.TakenOver, &c.lease.Now); err != nil {
			rows.Close()
			return nil, wrap(err, "%s for %s", what, owner)
		}
		c.lease.Owner = owner
		c.lease.ExpiresAt = c.lease.ExpiresAt.UTC()
		c.lease.Now = c.lease.Now.UTC()
		got = append(got, c)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err, "%s for %s", what, owner)
	}
	// RETURNING does not keep the CTE's order.
	slices.SortFunc(got, func(a, b claimed) int {
		if c := a.runAt.Compare(b.runAt); c != 0 {
			return c
		}
		return strings.Compare(a.lease.PurchaseID, b.lease.PurchaseID)
	})
	leases := make([]reconcile.Lease, len(got))
	for i, c := range got {
		leases[i] = c.lease
	}
	return leases, nil
}

// ReleaseLeases implements reconcile.Store: every open job leased by
// owner, expired or not, loses its lease and becomes due at the store's
// now.
func (s *Store) ReleaseLeases(ctx context.Context, owner string) (int, error) {
	tag, err := s.pool.Exec(ctx, `
UPDATE jobs SET lease_owner = NULL, lease_expires_at = NULL, run_at = `+nowSQL+`
WHERE lease_owner = $2 AND done_at IS NULL`, clockArg(s.now), owner)
	if err != nil {
		return 0, wrap(err, "release leases of %s", owner)
	}
	return int(tag.RowsAffected()), nil
}
