package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/postgres"
)

// openedStore is a store with what the commands need beside the
// reconcile.Store interface.
type openedStore struct {
	reconcile.Store
	kind    string // "postgres" or "sqlite", for logs
	migrate func(context.Context) error
}

// openStore opens the database named by --database-url. With requireReady
// it also checks that the schema is migrated, so that a command never runs
// against a missing or old schema.
func openStore(ctx context.Context, e *env, requireReady bool) (*openedStore, error) {
	url := e.settings.str("database-url")
	var st *openedStore
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		pg, err := postgres.Open(ctx, postgres.Config{URL: url})
		if err != nil {
			return nil, err
		}
		st = &openedStore{Store: pg, kind: "postgres", migrate: pg.Migrate}
	case url == "":
		return nil, fmt.Errorf("%w: no database: set --database-url or PAYRECON_DATABASE_URL to postgres://…", errUsage)
	default:
		return nil, fmt.Errorf("%w: --database-url %q: want postgres://… or postgresql://…", errUsage, redact(url))
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
			return nil, fmt.Errorf("%w: --fake-faults / PAYRECON_FAKE_FAULTS: %v", errUsage, err)
		}
		e.log.Info("provider: in-process fake (its ledger lives as long as this process)", "faults", e.settings.str("fake-faults"))
		return fakeprovider.New(cfg), nil
	default:
		return nil, fmt.Errorf("%w: --provider %q: want fake", errUsage, name)
	}
}
