// Package migrations holds payrecon's database schema, one goose SQL
// migration set per dialect, embedded in the binary, and applies it with
// goose's Provider API.
//
// The schema loads the transition table of package statemachine into the
// database, refuses any change to it, and guards purchases.state and the
// transition audit with it, so that no SQL path can write or record a
// forbidden move.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
)

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// Dialect names a migration set and the SQL dialect goose speaks to it.
type Dialect string

// The supported dialects. Each is also the directory of its migrations.
const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
)

func (d Dialect) goose() (goose.Dialect, error) {
	switch d {
	case Postgres:
		return goose.DialectPostgres, nil
	case SQLite:
		return goose.DialectSQLite3, nil
	default:
		return "", fmt.Errorf("migrations: unknown dialect %q", string(d))
	}
}

// FS returns the migration files of dialect, rooted at its directory.
func FS(dialect Dialect) (fs.FS, error) {
	if _, err := dialect.goose(); err != nil {
		return nil, err
	}
	sub, err := fs.Sub(files, string(dialect))
	if err != nil {
		return nil, fmt.Errorf("migrations: %s files: %w", dialect, err)
	}
	return sub, nil
}

func newProvider(db *sql.DB, dialect Dialect, withLock bool) (*goose.Provider, error) {
	gd, err := dialect.goose()
	if err != nil {
		return nil, err
	}
	fsys, err := FS(dialect)
	if err != nil {
		return nil, err
	}
	var opts []goose.ProviderOption
	if withLock && dialect == Postgres {
		// Several instances may migrate at once on deploy: serialise them
		// on a session advisory lock, polling every second for 5 minutes.
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
		if err != nil {
			return nil, fmt.Errorf("migrations: session locker: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	p, err := goose.NewProvider(gd, db, fsys, opts...)
	if err != nil {
		return nil, fmt.Errorf("migrations: %s provider: %w", dialect, err)
	}
	return p, nil
}

// Up applies every pending migration of dialect to db, in order, each in
// its own transaction. It is safe to call on an up-to-date database (it
// does nothing) and, for Postgres, from several processes at once (they
// take turns on an advisory lock).
func Up(ctx context.Context, db *sql.DB, dialect Dialect) error {
	p, err := newProvider(db, dialect, true)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: %s up: %w", dialect, err)
	}
	return nil
}

// Version returns the schema version db is at (0 when never migrated)
// and the latest version this binary embeds for dialect. The database is
// behind when current < latest.
//
// Version only reads: on a database that was never migrated it does not
// create goose's version table.
func Version(ctx context.Context, db *sql.DB, dialect Dialect) (current, latest int64, err error) {
	p, err := newProvider(db, dialect, false)
	if err != nil {
		return 0, 0, err
	}
	sources := p.ListSources()
	if len(sources) == 0 {
		return 0, 0, fmt.Errorf("migrations: %s: no migrations embedded", dialect)
	}
	latest = sources[len(sources)-1].Version

	exists, err := versionTableExists(ctx, db, dialect)
	if err != nil {
		return 0, latest, err
	}
	if !exists {
		return 0, latest, nil
	}
	current, latest, err = p.GetVersions(ctx)
	if err != nil {
		return 0, latest, fmt.Errorf("migrations: %s version: %w", dialect, err)
	}
	return current, latest, nil
}

// versionTableExists asks goose's own store whether its version table is
// there, without creating it. When the dialect cannot tell, it reports
// true and lets GetVersions decide. goose cannot tell for SQLite (and its
// GetVersions would create the table), so SQLite's catalog is asked
// directly.
func versionTableExists(ctx context.Context, db *sql.DB, dialect Dialect) (bool, error) {
	gd, err := dialect.goose()
	if err != nil {
		return false, err
	}
	if dialect == SQLite {
		var exists bool
		err := db.QueryRowContext(ctx,
			`SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?)`,
			goose.DefaultTablename).Scan(&exists)
		if err != nil {
			return false, fmt.Errorf("migrations: %s version table: %w", dialect, err)
		}
		return exists, nil
	}
	store, err := database.NewStore(gd, goose.DefaultTablename)
	if err != nil {
		return false, fmt.Errorf("migrations: %s store: %w", dialect, err)
	}
	ext, ok := store.(interface {
		TableExists(context.Context, database.DBTxConn) (bool, error)
	})
	if !ok {
		return true, nil
	}
	exists, err := ext.TableExists(ctx, db)
	if errors.Is(err, errors.ErrUnsupported) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("migrations: %s version table: %w", dialect, err)
	}
	return exists, nil
}
