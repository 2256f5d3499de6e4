package main

import (
	"context"
	"flag"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider/stripe"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/budget"
	"github.com/payrecon/payrecon/reconcile/cron"
	"github.com/payrecon/payrecon/reconcile/sqlite"
)

// settingFields says, for every setting that configures a component,
// which config fields it sets: "Type.Field", or "Type" for a setting that
// sets a whole config (a spec). Its default must be the fields' default.
var settingFields = map[string][]string{
	"budget-account":           {"budget.Config.Account"},
	"budget-global":            {"budget.Config.Limits"},
	"budget-create":            {"budget.Config.Limits"},
	"budget-retrieve":          {"budget.Config.Limits"},
	"budget-search":            {"budget.Config.Limits"},
	"budget-list":              {"budget.Config.Limits"},
	"budget-refund":            {"budget.Config.Limits"},
	"worker-id":                {"reconcile.Config.WorkerID"},
	"lease-duration":           {"reconcile.Config.LeaseDuration"},
	"provider-timeout":         {"reconcile.Config.ProviderTimeout"},
	"backoff":                  {"reconcile.Config.Backoff"},
	"max-attempts":             {"reconcile.Config.MaxAttempts"},
	"max-uncertain-age":        {"reconcile.Config.MaxUncertainAge"},
	"escalated-interval":       {"reconcile.Config.EscalatedInterval"},
	"key-retention":            {"reconcile.Config.KeyRetention"},
	"key-replay-margin":        {"reconcile.Config.KeyReplayMargin"},
	"batch-size":               {"reconcile.Config.BatchSize"},
	"concurrency":              {"reconcile.Config.Concurrency"},
	"poll-interval":            {"reconcile.Config.PollInterval"},
	"apply-window":             {"reconcile.Config.ApplyWindow"},
	"shutdown-grace":           {"reconcile.Config.ShutdownGrace"},
	"max-amount":               {"reconcile.Config.MaxAmount"},
	"accounts":                 {"reconcile.Config.Accounts"},
	"undeclared-accounts":      {"reconcile.Config.UndeclaredAccounts"},
	"audit-overlap":            {"reconcile.Config.AuditOverlap"},
	"audit-settle":             {"reconcile.Config.AuditSettle"},
	"event-sweep-overlap":      {"reconcile.Config.EventSweepOverlap"},
	"event-sweep-first-window": {"reconcile.Config.EventSweepFirstWindow"},
	// --group-commit is the field's negation: true sets it false.
	"group-commit":         {"reconcile.Config.GroupCommitOff"},
	"group-commit-max":     {"reconcile.Config.GroupCommitMax"},
	"inbox-batch":          {"reconcile.Config.InboxBatch"},
	"inbox-max-attempts":   {"reconcile.Config.InboxMaxAttempts"},
	"inbox-backoff":        {"reconcile.Config.InboxBackoff"},
	"inbox-gather":         {"reconcile.Config.InboxGather"},
	"group-commit-leaders": {"reconcile.Config.GroupCommitLeaders"},

	"sweep-rescue":              {"cron.SweepConfig.RescueSchedule"},
	"sweep-escalate":            {"cron.SweepConfig.EscalateSchedule"},
	"sweep-gauges":              {"cron.SweepConfig.GaugesSchedule"},
	"sweep-unmatched":           {"cron.SweepConfig.UnmatchedSchedule"},
	"sweep-retention":           {"cron.SweepConfig.RetentionSchedule"},
	"sweep-audit":               {"cron.SweepConfig.AuditSchedule"},
	"sweep-events":              {"cron.SweepConfig.EventsSchedule"},
	"inbox-retention":           {"cron.SweepConfig.InboxRetention"},
	"idempotency-key-retention": {"cron.SweepConfig.IdempotencyKeyRetention"},
	"outbox-retry-window":       {"cron.SweepConfig.OutboxRetryWindow"},
	"outbox-retention":          {"cron.SweepConfig.OutboxRetention"},

	"stripe-api-base":   {"stripe.Config.APIBase"},
	"webhook-tolerance": {"stripe.WebhookConfig.Tolerance"},
	"fake-faults":       {"fakeprovider.Config", "fakeprovider.ServerConfig"},

	"sqlite-synchronous": {"sqlite.Config.Synchronous"},
}

// settingsOfNoConfig are the settings no component's config has a default
// for, and why.
var settingsOfNoConfig = map[string]string{
	"budget":       "whether provider calls wait for the shared rate budget at all",
	"database-url": "the store's address is required by both stores; the default SQLite file is the command's choice",
	// rhttp.Config.Addr has the same default, "127.0.0.1:8080", but
	// reconcile/http does not export it yet; `fakeprovider` listens on
	// --addr too.
	"addr":                               "a listen address",
	"provider":                           "which provider to build",
	"worker":                             "which parts `serve` runs",
	"webhooks":                           "which parts `serve` runs",
	"api":                                "which parts `serve` runs",
	"api-token":                          "a secret: no default",
	"ops-token":                          "a secret: no default",
	"stripe-secret-key":                  "a secret: no default",
	"stripe-webhook-secret":              "a secret: no default",
	"stripe-connect-webhook-secret":      "a secret: no default",
	"database-url-file":                  "a secret's file",
	"api-token-file":                     "a secret's file",
	"ops-token-file":                     "a secret's file",
	"metrics-addr":                       "a listen address; empty leaves rhttp.Config.MetricsAddr zero (/metrics on --addr)",
	"metrics-token":                      "a secret: no default",
	"metrics-token-file":                 "a secret's file",
	"stripe-secret-key-file":             "a secret's file",
	"stripe-webhook-secret-file":         "a secret's file",
	"stripe-connect-webhook-secret-file": "a secret's file",
	"config":                             "where the settings come from",
	"log-level":                          "the command's logger",
	"log-format":                         "the command's logger",
}

// defaultSettings returns the settings resolved from no flag and no
// environment.
func defaultSettings(t *testing.T) *settings {
	t.Helper()
	for _, st := range newSettings().list {
		unsetenv(t, st.env)
	}
	s := newSettings()
	fs := flag.NewFlagSet("defaults", flag.ContinueOnError)
	s.register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := s.resolve(fs, ""); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFlagDefaultsAreTheConfigs: every setting's default is the default of
// the config field it sets. The configs are built from the default
// settings as the commands build them, and compared field by field with
// the components' own defaults (reconcile.DefaultConfig,
// cron.DefaultSweepConfig, the stripe and fakeprovider Default
// constants). A setting whose default is empty must leave its fields
// zero, which the component fills with its own default. Every setting
// must be listed in settingFields or settingsOfNoConfig, and every field
// the commands set from the settings must be listed in settingFields.
func TestFlagDefaultsAreTheConfigs(t *testing.T) {
	s := defaultSettings(t)
	rc, err := s.reconcileConfig()
	if err != nil {
		t.Fatalf("reconcileConfig of the defaults: %v", err)
	}
	sc, err := s.sweepConfig()
	if err != nil {
		t.Fatalf("sweepConfig of the defaults: %v", err)
	}
	tolerance, err := s.duration("webhook-tolerance")
	if err != nil {
		t.Fatalf("webhook-tolerance: %v", err)
	}
	fake, server, err := fakeprovider.ParseSpec(s.str("fake-faults"))
	if err != nil {
		t.Fatalf("fake-faults: %v", err)
	}
	bc, _, err := s.budgetConfig(false)
	if err != nil {
		t.Fatalf("budgetConfig of the defaults: %v", err)
	}
	// What the commands build from the default settings (only the fields
	// settings set), and what each component does with a zero field.
	got := map[string]any{
		"reconcile.Config":          rc,
		"cron.SweepConfig":          sc,
		"stripe.Config":             stripe.Config{APIBase: s.str("stripe-api-base")},
		"stripe.WebhookConfig":      stripe.WebhookConfig{Tolerance: tolerance},
		"fakeprovider.Config":       fake,
		"fakeprovider.ServerConfig": server,
		"sqlite.Config":             sqlite.Config{Synchronous: s.str("sqlite-synchronous")},
		"budget.Config":             bc,
	}
	want := map[string]any{
		"reconcile.Config":     reconcile.DefaultConfig(),
		"cron.SweepConfig":     cron.DefaultSweepConfig(),
		"stripe.Config":        stripe.Config{APIBase: stripe.DefaultAPIBase},
		"stripe.WebhookConfig": stripe.WebhookConfig{Tolerance: stripe.DefaultWebhookTolerance},
		// --fake-faults is a spec whose empty default leaves both
		// configs zero, to fakeprovider.New's and NewServer's defaults.
		"fakeprovider.Config":       fakeprovider.Config{},
		"fakeprovider.ServerConfig": fakeprovider.ServerConfig{},
		"sqlite.Config":             sqlite.Config{Synchronous: sqlite.DefaultSynchronous},
		// The limits' empty defaults leave them zero, to the key's mode's
		// defaults (budget.DefaultLimits).
		"budget.Config": budget.Config{Account: budget.DefaultConfig().Account},
	}

	listed := map[string]bool{}
	for _, st := range s.list {
		fields, sets := settingFields[st.name]
		_, none := settingsOfNoConfig[st.name]
		switch {
		case sets && none:
			t.Errorf("--%s is listed both as setting %v and as setting no config", st.name, fields)
			continue
		case !sets && !none:
			t.Errorf("--%s is in neither settingFields nor settingsOfNoConfig: say which config field it sets, if any", st.name)
			continue
		case none:
			continue
		}
		for _, path := range fields {
			listed[path] = true
			g, w, ok := field(got, want, path)
			if !ok {
				t.Errorf("--%s: no config field %s", st.name, path)
				continue
			}
			if st.def == "" {
				// The empty default hands the field to the component.
				if !g.IsZero() {
					t.Errorf("--%s has an empty default but sets %s = %v: want it zero, for the config's own default", st.name, path, g)
				}
				continue
			}
			if !reflect.DeepEqual(g.Interface(), w.Interface()) {
				t.Errorf("--%s defaults to %q, which sets %s = %v; the config's default is %v", st.name, st.def, path, g, w)
			}
		}
	}
	// Every field the commands set from the default settings is one a
	// setting is listed for, so that no mapping escapes the check above.
	for typ, cfg := range got {
		v := reflect.ValueOf(cfg)
		for i := range v.NumField() {
			path := typ + "." + v.Type().Field(i).Name
			if !v.Field(i).IsZero() && !listed[path] && !listed[typ] {
				t.Errorf("the default settings set %s = %v, but no setting in settingFields names it", path, v.Field(i))
			}
		}
	}
}

// field returns the field named by path ("Type.Field", or "Type" for the
// whole config) in got and want.
func field(got, want map[string]any, path string) (g, w reflect.Value, ok bool) {
	typ, name := path, ""
	if i := strings.LastIndex(path, "."); i > 0 && got[path[:i]] != nil {
		typ, name = path[:i], path[i+1:]
	}
	gc, ok1 := got[typ]
	wc, ok2 := want[typ]
	if !ok1 || !ok2 {
		return g, w, false
	}
	g, w = reflect.ValueOf(gc), reflect.ValueOf(wc)
	if name == "" {
		return g, w, true
	}
	g, w = g.FieldByName(name), w.FieldByName(name)
	return g, w, g.IsValid() && w.IsValid()
}

// TestDefaultServiceConfig: a service built from the default settings, as
// `payrecon worker` builds it, runs on reconcile.DefaultConfig exactly,
// the fields no setting sets included.
func TestDefaultServiceConfig(t *testing.T) {
	s := defaultSettings(t)
	e := &env{stdout: io.Discard, stderr: io.Discard, settings: s}
	if _, err := e.parse("worker", []string{"--database-url", "sqlite:" + filepath.Join(t.TempDir(), "d.db")}, nil); err != nil {
		t.Fatal(err)
	}
	svc, cleanup, err := newService(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	got, want := svc.Config(), reconcile.DefaultConfig()
	// The budget is built over the store, the provider account's shared
	// rate budget (--budget is on by default).
	if _, ok := got.Budget.(*budget.Shared); !ok {
		t.Errorf("service budget %T, want the shared budget", got.Budget)
	}
	// Each connected account's budget is kept in the same store.
	if _, ok := got.AccountBudgets.(*budget.Accounts); !ok {
		t.Errorf("service account budgets %T, want budget.Accounts", got.AccountBudgets)
	}
	got.Budget, got.AccountBudgets = nil, nil
	want.Budget, want.AccountBudgets = nil, nil
	// The clock, the logger and the observer are the command's to set;
	// the worker id is the host's and pid's either way.
	got.Now, got.Logger, got.Observer = nil, nil, nil
	want.Now, want.Logger, want.Observer = nil, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("service config from the default settings:\n got %+v\nwant %+v", got, want)
	}
}

func TestFormatDuration(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{time.Second, "1s"}, {30 * time.Second, "30s"}, {2 * time.Minute, "2m"}, {90 * time.Second, "1m30s"},
		{time.Hour, "1h"}, {168 * time.Hour, "168h"}, {time.Hour + 30*time.Minute, "1h30m"},
		{time.Hour + time.Second, "1h0m1s"}, {1500 * time.Millisecond, "1.5s"},
	} {
		got := formatDuration(tt.d)
		if got != tt.want {
			t.Errorf("formatDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
		if back, err := time.ParseDuration(got); err != nil || back != tt.d {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", got, back, err, tt.d)
		}
	}
	if got := formatSeconds(5 * time.Minute); got != "300s" {
		t.Errorf("formatSeconds(5m) = %q, want 300s", got)
	}
}
