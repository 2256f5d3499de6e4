package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
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
}

// openStore opens the database named by --database-url: postgres://… or
// sqlite:PATH, and by default a SQLite file in the user's data directory.
// An embedded SQLite store is migrated on open (it belongs to this binary
// alone); a Postgres one must be migrated with `payrecon migrate`, and with
// requireReady a command refuses to run against a missing or old schema.
// The store keeps the database's clock (see reconcile.Store.Now).
func openStore(ctx context.Context, e *env, requireReady bool) (*openedStore, error) {
	return openStoreAt(ctx, e, requireReady, nil)
}

// openStoreAt is openStore with the store's clock: now, or the
// database's clock when now is nil, as every command but the demo uses.
// The demo passes its simulated clock, so that due times, leases and key
// retention follow it.
func openStoreAt(ctx context.Context, e *env, requireReady bool, now func() time.Time) (*openedStore, error) {
	url := e.settings.str("database-url")
	var st *openedStore
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		pg, err := postgres.Open(ctx, postgres.Config{URL: url, Now: now})
		if err != nil {
			return nil, err
		}
		st = &openedStore{Store: pg, kind: "postgres", migrate: pg.Migrate}
	case url == "" || strings.HasPrefix(url, "sqlite:"):
		path := strings.TrimPrefix(url, "sqlite:")
		if url == "" {
			var err error
			if path, err = defaultSQLitePath(); err != nil {
				return nil, err
			}
		}
		if path == "" {
			return nil, fmt.Errorf("%w: --database-url %q: want sqlite:PATH", errUsage, url)
		}
		lite, err := sqlite.Open(ctx, sqlite.Config{Path: path, Now: now})
		if err != nil {
			return nil, err
		}
		st = &openedStore{Store: lite, kind: "sqlite", migrate: lite.Migrate}
		if err := lite.Migrate(ctx); err != nil {
			lite.Close()
			return nil, err
		}
		url = "sqlite:" + path
	default:
		return nil, fmt.Errorf("%w: --database-url %q: want postgres://… or sqlite:PATH", errUsage, redact(url))
	}
	e.log.Info("store opened", "store", st.kind, "database", redact(url))
	if requireReady {
		if err := st.Ready(ctx); err != nil {
			st.Close()
			return nil, err
		}
	}
	return st, nil
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

// redact hides a password in a database URL for logs and errors.
func redact(url string) string {
	at := strings.LastIndex(url, "@")
	scheme := strings.Index(url, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return url
	}
	userinfo := url[scheme+3 : at]
	if colon := strings.Index(userinfo, ":"); colon >= 0 {
		return url[:scheme+3] + userinfo[:colon] + ":xxxxx" + url[at:]
	}
	return url
}

// newProvider builds the payment provider named by --provider.
func newProvider(e *env) (provider.Provider, error) {
	switch name := e.settings.str("provider"); name {
	case "fake":
		cfg, err := fakeprovider.ParseConfig(e.settings.str("fake-faults"))
		if err != nil {
			return nil, fmt.Errorf("%w: --fake-faults / PAYRECON_FAKE_FAULTS: %w", errUsage, err)
		}
		e.log.Info("provider: in-process fake (its ledger lives as long as this process)", "faults", e.settings.str("fake-faults"))
		return fakeprovider.New(cfg), nil
	case "stripe":
		key := os.Getenv("STRIPE_SECRET_KEY")
		if key == "" {
			return nil, fmt.Errorf("%w: --provider stripe needs STRIPE_SECRET_KEY", errUsage)
		}
		p, err := stripe.New(stripe.Config{SecretKey: key, APIBase: e.settings.str("stripe-api-base"), Logger: e.log})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		base := e.settings.str("stripe-api-base")
		if base == "" {
			base = stripe.DefaultAPIBase
		}
		e.log.Info("provider: stripe", "api_base", base, "test_mode", strings.HasPrefix(key, "sk_test_"))
		return p, nil
	default:
		return nil, fmt.Errorf("%w: --provider %q: want fake or stripe", errUsage, name)
	}
}
