package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/dburl"
	"github.com/payrecon/payrecon/migrations"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/provider/stripe"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/postgres"
	"github.com/payrecon/payrecon/reconcile/sqlite"
)

// openedStore is a store with what the commands need beside the
// reconcile.Store interface.
type openedStore struct {
	reconcile.Store
	kind    string // "postgres" or "sqlite", for logs
	migrate func(context.Context) error
	// version returns the schema version the database is at and the
	// latest this binary embeds.
	version func(context.Context) (current, latest int64, err error)
}

// storeOptions says how a command opens the store.
type storeOptions struct {
	// migrate migrates a SQLite file on open (it belongs to this binary
	// alone); `migrate` does it itself, to say from which version.
	migrate bool
	// ready refuses a database whose schema is missing or older.
	ready bool
	// now is the store's clock; nil for the database's.
	now func() time.Time
}

// openStore opens the database named by --database-url: postgres://… or
// sqlite:PATH, and by default a SQLite file in the user's data directory.
// An embedded SQLite store is migrated on open (it belongs to this binary
// alone); a Postgres one must be migrated with `payrecon migrate`, and with
// requireReady a command refuses to run against a missing or old schema.
// The store keeps the database's clock (see reconcile.Store.Now).
func openStore(ctx context.Context, e *env, requireReady bool) (*openedStore, error) {
	return openStoreFor(ctx, e, storeOptions{migrate: true, ready: requireReady})
}

// openStoreAt is openStore with the store's clock: now, or the
// database's clock when now is nil, as every command but the demo uses.
// The demo passes its simulated clock, so that due times, leases and key
// retention follow it.
func openStoreAt(ctx context.Context, e *env, requireReady bool, now func() time.Time) (*openedStore, error) {
	return openStoreFor(ctx, e, storeOptions{migrate: true, ready: requireReady, now: now})
}

// openStoreFor opens the store as opts say. The database URL is a
// secret: it is logged redacted, and the driver's errors are scrubbed of
// its password.
func openStoreFor(ctx context.Context, e *env, opts storeOptions) (*openedStore, error) {
	raw, err := e.settings.secret("database-url")
	if err != nil {
		return nil, usageError(err)
	}
	db, err := dburl.Parse(raw)
	if err != nil {
		return nil, usageError(fmt.Errorf("--database-url: %w", err))
	}
	var st *openedStore
	shown := dburl.Redact(raw)
	switch db.Kind {
	case dburl.Postgres:
		pg, err := postgres.Open(ctx, postgres.Config{URL: db.Postgres, Now: opts.now, Tracer: e.tracer})
		if err != nil {
			return nil, dburl.Scrub(err, raw)
		}
		st = &openedStore{Store: pg, kind: "postgres", migrate: pg.Migrate,
			version: func(ctx context.Context) (int64, int64, error) {
				return postgresSchemaVersion(ctx, db.Postgres)
			}}
	default:
		path := db.Path
		if path == "" {
			if path, err = defaultSQLitePath(); err != nil {
				return nil, err
			}
		}
		lite, err := sqlite.Open(ctx, sqlite.Config{Path: path, Synchronous: e.settings.str("sqlite-synchronous"), Now: opts.now})
		if err != nil {
			return nil, err
		}
		st = &openedStore{Store: lite, kind: "sqlite", migrate: lite.Migrate,
			version: func(ctx context.Context) (int64, int64, error) {
				db, err := sql.Open("sqlite", lite.Path()+"?_pragma=busy_timeout(5000)")
				if err != nil {
					return 0, 0, err
				}
				return schemaVersion(ctx, db, migrations.SQLite)
			}}
		if opts.migrate {
			if err := lite.Migrate(ctx); err != nil {
				lite.Close()
				return nil, err
			}
		}
		shown = "sqlite:" + lite.Path()
	}
	e.log.Info("store opened", "store", st.kind, "database", shown)
	if opts.ready {
		if err := st.Ready(ctx); err != nil {
			st.Close()
			return nil, dburl.Scrub(err, raw)
		}
	}
	return st, nil
}

// schemaVersion reads the schema version of a database over a connection
// of its own (the stores do not lend theirs), and closes it.
func schemaVersion(ctx context.Context, db *sql.DB, dialect migrations.Dialect) (int64, int64, error) {
	defer db.Close()
	current, latest, err := migrations.Version(ctx, db, dialect)
	if err != nil {
		return 0, 0, fmt.Errorf("read the schema version: %w", err)
	}
	return current, latest, nil
}

// postgresSchemaVersion is schemaVersion for the Postgres database at
// url, parsed as postgres.Open parses it (pool_* parameters are the
// pool's); its errors are scrubbed of the password.
func postgresSchemaVersion(ctx context.Context, url string) (int64, int64, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return 0, 0, dburl.Scrub(err, url)
	}
	current, latest, err := schemaVersion(ctx, stdlib.OpenDB(*cfg.ConnConfig), migrations.Postgres)
	return current, latest, dburl.Scrub(err, url)
}

// defaultSQLitePath is payrecon.db in the user's data directory
// ($XDG_DATA_HOME/payrecon, else ~/.local/share/payrecon), created if
// missing.
func defaultSQLitePath() (string, error) {
	dir := os.Getenv("XDG_DATA_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no database configured and no home directory for the default SQLite file: set --database-url: %w", err)
		}
		dir = filepath.Join(home, ".local", "share")
	}
	dir = filepath.Join(dir, "payrecon")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create the data directory for the default SQLite file: %w", err)
	}
	return filepath.Join(dir, "payrecon.db"), nil
}

// newProvider builds the payment provider named by --provider.
func newProvider(e *env) (provider.Provider, error) {
	switch name := e.settings.str("provider"); name {
	case "fake":
		cfg, err := fakeprovider.ParseConfig(e.settings.str("fake-faults"))
		if err != nil {
			return nil, usageError(fmt.Errorf("--fake-faults / PAYRECON_FAKE_FAULTS: %w", err))
		}
		e.log.Info("provider: in-process fake (its ledger lives as long as this process)", "faults", e.settings.str("fake-faults"))
		return fakeprovider.New(cfg), nil
	case "stripe":
		key, err := e.settings.secret("stripe-secret-key")
		if err != nil {
			return nil, usageError(err)
		}
		if key == "" {
			return nil, usageError(errors.New("--provider stripe needs STRIPE_SECRET_KEY (or STRIPE_SECRET_KEY_FILE)"))
		}
		p, err := stripe.New(stripe.Config{SecretKey: key, APIBase: e.settings.str("stripe-api-base"), Logger: e.log})
		if err != nil {
			return nil, usageError(err)
		}
		base := e.settings.str("stripe-api-base")
		if base == "" {
			base = stripe.DefaultAPIBase
		}
		e.log.Info("provider: stripe", "api_base", base, "test_mode", strings.HasPrefix(key, "sk_test_"))
		return p, nil
	default:
		return nil, usageError(fmt.Errorf("--provider %q: want fake or stripe", name))
	}
}
