package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3"

	"github.com/payrecon/payrecon/internal/dburl"
	"github.com/payrecon/payrecon/provider/stripe"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/budget"
	"github.com/payrecon/payrecon/reconcile/cron"
	"github.com/payrecon/payrecon/reconcile/sqlite"
)

// setting is one configuration value with a flag, an environment variable
// and a default; it can also be set in the config file (--config). A flag
// given on the command line wins over the environment, which wins over
// the config file, which wins over the default. A few secrets of Stripe's
// are read from the environment only (envOnly), under Stripe's own names.
//
// A setting that configures a component takes its default from that
// component's config (reconcile.DefaultConfig, cron.DefaultSweepConfig,
// stripe.DefaultWebhookTolerance), never from a literal of its own, and
// an empty default leaves the field zero, to the component's default:
// TestFlagDefaultsAreTheConfigs checks both.
type setting struct {
	name  string // flag name, without dashes; for an envOnly setting, a key for the code
	env   string
	def   string
	kind  *kind
	usage string
	// envOnly: no flag and no config-file line, the environment only.
	envOnly bool
	// secret: never printed or logged (a database URL only redacted);
	// read from a file with its -file setting; a warning is logged when
	// it is given on the command line, where every user of the machine
	// can read it (ps).
	secret bool
	// fileFor names the secret whose value this setting's file holds.
	fileFor string
	// defFor overrides the default for some commands.
	defFor map[string]string

	value  string // resolved value
	source source // where the value came from
}

// source says where a setting's value came from.
type source int

const (
	fromDefault source = iota
	fromFlag
	fromEnv
	fromConfig
)

// kind is the type of a setting's value: its name in the help, and the
// check a value must pass, whatever its source. A value is checked when
// it is set, so a bad one is refused before anything is opened.
type kind struct {
	typ   string
	check func(v string) error // nil: any text
}

// The kinds of settings.
var (
	kindString      = &kind{typ: "string"}
	kindPath        = &kind{typ: "path"}
	kindAddr        = &kind{typ: "host:port", check: checkAddr}
	kindHTTPURL     = &kind{typ: "URL", check: checkHTTPURL}
	kindDatabaseURL = &kind{typ: "URL", check: checkDatabaseURL}
	kindDuration    = &kind{typ: "duration", check: checkDuration}
	kindDurations   = &kind{typ: "durations", check: checkDurations}
	kindCount       = &kind{typ: "int", check: checkCount}
	kindBool        = &kind{typ: "bool", check: checkBool}
	kindProvider    = &kind{typ: "fake|stripe", check: checkOneOf("fake", "stripe")}
	kindSynchronous = &kind{typ: "FULL|NORMAL", check: checkSynchronous}
	kindLevel       = &kind{typ: "level", check: checkLevel}
	kindFormat      = &kind{typ: "text|json", check: checkOneOf("text", "json")}
	kindSchedule    = &kind{typ: "schedule", check: checkSchedule}
	kindFaults      = &kind{typ: "faults", check: checkFaults}
	kindAPITokens   = &kind{typ: "tokens", check: checkAPITokens}
	kindToken       = &kind{typ: "token", check: checkToken}
	kindSecret      = &kind{typ: "secret"}
	kindRate        = &kind{typ: "calls/s", check: checkRate}
	kindAccounts    = &kind{typ: "accounts", check: checkAccounts}
	kindPolicy      = &kind{typ: "refuse|accept", check: checkOneOf(string(reconcile.AccountsRefuse), string(reconcile.AccountsAccept))}
)

// minTokenLen is the shortest API or operator token reconcile/http
// accepts (TestTokenRules holds it to that).
const minTokenLen = 16

// settings holds every setting payrecon knows, so that `payrecon help`
// lists them all and every command resolves them the same way.
type settings struct {
	list  []*setting
	byKey map[string]*setting
	// bad is the last value a setting refused, for the error message:
	// the flag package's own message would show a secret.
	bad *badValue
	// badLine is the config file's line being set, for a bad value's
	// message; 0 when the value came from elsewhere.
	badLine int
}

// badValue is a value a setting refused.
type badValue struct {
	st    *setting
	value string
	err   error
}

// defaultAddr is the default of --addr: rhttp.Config.Addr's default.
// defaultWorkerAddr is its default for `worker`, and defaultFakeAddr for
// `fakeprovider` (stripe-mock's port), so that serve, a worker and the
// fake run side by side on one machine as they are.
const (
	defaultAddr       = "127.0.0.1:8080"
	defaultWorkerAddr = "127.0.0.1:8081"
	defaultFakeAddr   = "127.0.0.1:12111"
)

// envPrefix is the prefix of every environment variable of a setting with
// a flag: PAYRECON_ and the flag's name in capitals, '-' as '_' (the
// rule of ff.WithEnvVarPrefix; TestEnvNames holds the table to it).
const envPrefix = "PAYRECON"

func newSettings() *settings {
	s := &settings{byKey: map[string]*setting{}}
	add := func(st *setting) *setting {
		s.list = append(s.list, st)
		s.byKey[st.name] = st
		return st
	}
	plain := func(name, env, def string, k *kind, usage string) {
		add(&setting{name: name, env: env, def: def, kind: k, usage: usage})
	}
	secret := func(name, env string, k *kind, usage, fileEnv string) {
		st := add(&setting{name: name, env: env, kind: k, usage: usage, secret: true})
		file := &setting{name: name + "-file", env: fileEnv, kind: kindPath, fileFor: name,
			usage: "a file holding " + labelOf(name, env) + ", instead of the value itself (one trailing newline is dropped)"}
		if strings.HasPrefix(env, "STRIPE_") {
			st.envOnly, file.envOnly = true, true
		}
		add(file)
	}
	rc := reconcile.DefaultConfig()
	sw := cron.DefaultSweepConfig()
	plain("config", "PAYRECON_CONFIG", "", kindPath, "a config file: one setting a line, its flag's name and its value (lease-duration 10m); # starts a comment")
	secret("database-url", "PAYRECON_DATABASE_URL", kindDatabaseURL, "database: postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=… or sqlite:PATH (default: a SQLite file in the user's data directory)", "PAYRECON_DATABASE_URL_FILE")
	plain("sqlite-synchronous", "PAYRECON_SQLITE_SYNCHRONOUS", sqlite.DefaultSynchronous, kindSynchronous, "SQLite's synchronous setting: FULL syncs every commit to disk; NORMAL only at checkpoints, so a power loss or OS crash can lose the last commits (the file stays consistent)")
	add(&setting{name: "addr", env: "PAYRECON_ADDR", def: defaultAddr, kind: kindAddr, defFor: map[string]string{"worker": defaultWorkerAddr, "fakeprovider": defaultFakeAddr},
		usage: "HTTP listen address of serve (webhooks, API, /ops, /metrics), of worker (/healthz, /readyz, /metrics; its own default, so that it runs beside serve) and of fakeprovider (its Stripe-compatible API)"})
	plain("worker-id", "PAYRECON_WORKER_ID", "", kindString, "worker name in leases and the audit (default: host-pid)")
	plain("lease-duration", "PAYRECON_LEASE_DURATION", formatDuration(rc.LeaseDuration), kindDuration, "how long a job claim is valid; at least twice --provider-timeout")
	plain("provider-timeout", "PAYRECON_PROVIDER_TIMEOUT", formatDuration(rc.ProviderTimeout), kindDuration, "deadline of one provider call")
	plain("backoff", "PAYRECON_BACKOFF", formatDurations(rc.Backoff), kindDurations, "delays between checks of an uncertain purchase, comma-separated; the last repeats")
	plain("max-attempts", "PAYRECON_MAX_ATTEMPTS", strconv.Itoa(rc.MaxAttempts), kindCount, "job runs before an unresolved purchase is escalated")
	plain("max-uncertain-age", "PAYRECON_MAX_UNCERTAIN_AGE", formatDuration(rc.MaxUncertainAge), kindDuration, "time in uncertainty before escalation")
	plain("escalated-interval", "PAYRECON_ESCALATED_INTERVAL", formatDuration(rc.EscalatedInterval), kindDuration, "check cadence of an escalated purchase")
	plain("key-retention", "PAYRECON_KEY_RETENTION", formatDuration(rc.KeyRetention), kindDuration, "how long the provider keeps idempotency keys, from the first attempt")
	plain("key-replay-margin", "PAYRECON_KEY_REPLAY_MARGIN", formatDuration(rc.KeyReplayMargin), kindDuration, "stop replaying this long before the key retention ends")
	plain("batch-size", "PAYRECON_BATCH_SIZE", strconv.Itoa(rc.BatchSize), kindCount, "jobs claimed per poll")
	plain("concurrency", "PAYRECON_CONCURRENCY", strconv.Itoa(rc.Concurrency), kindCount, "jobs one worker runs at once")
	plain("apply-window", "PAYRECON_APPLY_WINDOW", formatDuration(rc.ApplyWindow), kindDuration, "how long the worker waits for more provider answers to apply in one transaction while calls are out")
	plain("poll-interval", "PAYRECON_POLL_INTERVAL", formatDuration(rc.PollInterval), kindDuration, "wait between polls when idle")
	plain("shutdown-grace", "PAYRECON_SHUTDOWN_GRACE", formatDuration(rc.ShutdownGrace), kindDuration, "how long in-flight jobs may finish on SIGTERM")
	plain("max-amount", "PAYRECON_MAX_AMOUNT", strconv.FormatInt(rc.MaxAmount, 10), kindCount, "largest purchase amount, in minor units")
	plain("provider", "PAYRECON_PROVIDER", "fake", kindProvider, "payment provider: fake (in-process simulator) or stripe")
	plain("fake-faults", "PAYRECON_FAKE_FAULTS", "", kindFaults, "fault mix of the fake provider, e.g. lost_reply=0.2,timeout=0.1,stale_processing=0.1,search_lag=30s,seed=7")
	plain("stripe-api-base", "PAYRECON_STRIPE_API_BASE", "", kindHTTPURL, "Stripe API base URL override, e.g. a payrecon fakeprovider (default Stripe's)")
	secret("stripe-secret-key", "STRIPE_SECRET_KEY", kindSecret, "Stripe secret key (sk_…) for --provider stripe; environment only, to keep it out of argv", "STRIPE_SECRET_KEY_FILE")
	secret("stripe-webhook-secret", "STRIPE_WEBHOOK_SECRET", kindSecret, "Stripe webhook signing secret (whsec_…): serve verifies POST /webhooks/stripe with it, fakeprovider signs with it; environment only", "STRIPE_WEBHOOK_SECRET_FILE")
	secret("stripe-connect-webhook-secret", "STRIPE_CONNECT_WEBHOOK_SECRET", kindSecret, "the Connect endpoint's signing secret (whsec_…): serve verifies POST /webhooks/stripe/connect, the connected accounts' events, with it, fakeprovider signs them with it; environment only", "STRIPE_CONNECT_WEBHOOK_SECRET_FILE")
	// In seconds, as Stripe states it.
	plain("webhook-tolerance", "PAYRECON_WEBHOOK_TOLERANCE", formatSeconds(stripe.DefaultWebhookTolerance), kindDuration, "maximum age of a webhook signature")
	plain("worker", "PAYRECON_WORKER", "true", kindBool, "serve also runs the worker and its scheduler (--worker=false turns them off)")
	plain("webhooks", "PAYRECON_WEBHOOKS", "true", kindBool, "serve serves POST /webhooks/stripe; with --provider stripe it refuses to start without STRIPE_WEBHOOK_SECRET unless this is false")
	plain("api", "PAYRECON_API", "true", kindBool, "serve serves the purchase API (--api=false turns it off)")
	secret("api-token", "PAYRECON_API_TOKEN", kindAPITokens, fmt.Sprintf("purchase API bearer tokens, comma-separated, each name:token (or a bare token), each at least %d characters; serve refuses to start the API without one", minTokenLen), "PAYRECON_API_TOKEN_FILE")
	secret("ops-token", "PAYRECON_OPS_TOKEN", kindToken, fmt.Sprintf("operator token for /ops, at least %d characters, distinct from every API token; without it the ops pages are not served", minTokenLen), "PAYRECON_OPS_TOKEN_FILE")
	plain("group-commit", "PAYRECON_GROUP_COMMIT", strconv.FormatBool(!rc.GroupCommitOff), kindBool, "concurrent webhooks and purchase API requests share one transaction, each under a savepoint of its own (--group-commit=false: one transaction each)")
	plain("group-commit-max", "PAYRECON_GROUP_COMMIT_MAX", strconv.Itoa(rc.GroupCommitMax), kindCount, "most requests in one group transaction")
	plain("group-commit-leaders", "PAYRECON_GROUP_COMMIT_LEADERS", strconv.Itoa(rc.GroupCommitLeaders), kindCount, "group transactions in flight at once; requests that arrive meanwhile wait for the next and share it")
	plain("inbox-batch", "PAYRECON_INBOX_BATCH", strconv.Itoa(rc.InboxBatch), kindCount, "webhook events the applier claims and applies per transaction")
	plain("inbox-max-attempts", "PAYRECON_INBOX_MAX_ATTEMPTS", strconv.Itoa(rc.InboxMaxAttempts), kindCount, "tries at applying a webhook event before it waits for an operator")
	plain("inbox-gather", "PAYRECON_INBOX_GATHER", formatDuration(rc.InboxGather), kindDuration, "how long the webhook applier waits, once woken, for more events to join its batch")
	plain("inbox-backoff", "PAYRECON_INBOX_BACKOFF", formatDuration(rc.InboxBackoff), kindDuration, "wait before a failed webhook event is tried again, doubling each time, at most 64 times this")
	plain("metrics-addr", "PAYRECON_METRICS_ADDR", "", kindAddr, "a listen address of its own for /metrics, of serve and worker; /metrics is then not served on --addr (default: /metrics on --addr)")
	secret("metrics-token", "PAYRECON_METRICS_TOKEN", kindToken, fmt.Sprintf("bearer token /metrics requires (Prometheus' authorization credentials), at least %d characters (default: none, /metrics is open)", minTokenLen), "PAYRECON_METRICS_TOKEN_FILE")
	plain("sweep-rescue", "PAYRECON_SWEEP_RESCUE", sw.RescueSchedule, kindSchedule, "cron schedule: take over jobs whose lease expired")
	plain("sweep-escalate", "PAYRECON_SWEEP_ESCALATE", sw.EscalateSchedule, kindSchedule, "cron schedule: escalate purchases uncertain too long")
	plain("sweep-gauges", "PAYRECON_SWEEP_GAUGES", sw.GaugesSchedule, kindSchedule, "cron schedule: refresh the gauges read from the database")
	plain("sweep-unmatched", "PAYRECON_SWEEP_UNMATCHED", sw.UnmatchedSchedule, kindSchedule, "cron schedule: the webhook applier retries the events stored as unmatched")
	plain("sweep-retention", "PAYRECON_SWEEP_RETENTION", sw.RetentionSchedule, kindSchedule, "cron schedule: delete old inbox rows and expired idempotency keys")
	plain("sweep-audit", "PAYRECON_SWEEP_AUDIT", sw.AuditSchedule, kindSchedule, "cron schedule: the audit from the provider's side (lists the provider's payments, refunds and disputes and matches them to the books)")
	plain("audit-overlap", "PAYRECON_AUDIT_OVERLAP", formatDuration(rc.AuditOverlap), kindDuration, "how far before the last audit's end the scheduled audit starts, so that windows overlap")
	plain("audit-settle", "PAYRECON_AUDIT_SETTLE", formatDuration(rc.AuditSettle), kindDuration, "how long before now the scheduled audit's window ends, leaving payments still being created to the next run")
	plain("sweep-events", "PAYRECON_SWEEP_EVENTS", sw.EventsSchedule, kindSchedule, "cron schedule: the event sweep (lists the provider's payment, refund and dispute events and applies through the webhook inbox those whose webhooks were lost)")
	plain("event-sweep-overlap", "PAYRECON_EVENT_SWEEP_OVERLAP", formatDuration(rc.EventSweepOverlap), kindDuration, "how far before its watermark the event sweep lists the provider's events, for events listed late")
	plain("event-sweep-first-window", "PAYRECON_EVENT_SWEEP_FIRST_WINDOW", formatDuration(rc.EventSweepFirstWindow), kindDuration, "how far back the first event sweep lists the provider's events, at most 720h (Stripe keeps them 30 days)")
	plain("inbox-retention", "PAYRECON_INBOX_RETENTION", formatDuration(sw.InboxRetention), kindDuration, "how long webhook inbox rows are kept; at least "+
		formatDuration(cron.MinInboxRetention)+" (Stripe's 3-day redelivery plus a replay margin)")
	plain("outbox-retry-window", "PAYRECON_OUTBOX_RETRY_WINDOW", formatDuration(sw.OutboxRetryWindow), kindDuration, "how long the relay retries delivering an event to a subscription that fails, before it is dead (replay it from /ops or with payrecon events replay)")
	plain("outbox-retention", "PAYRECON_OUTBOX_RETENTION", formatDuration(sw.OutboxRetention), kindDuration, "how long delivered outbox events are kept for replays; at least --outbox-retry-window plus "+
		formatDuration(cron.ReplayMargin)+" (a replay margin)")
	plain("idempotency-key-retention", "PAYRECON_IDEMPOTENCY_KEY_RETENTION", formatDuration(sw.IdempotencyKeyRetention), kindDuration, "how long purchase API idempotency keys are kept; at least 24h")
	plain("accounts", "PAYRECON_ACCOUNTS", "", kindAccounts, "the provider's connected accounts (acct_…, comma-separated) this deployment charges on behalf of, besides the platform's own; acct_…=N paces one at N calls a second in all (default: the platform's limits)")
	plain("undeclared-accounts", "PAYRECON_UNDECLARED_ACCOUNTS", string(reconcile.AccountsRefuse), kindPolicy, "a purchase naming a connected account --accounts does not declare is refused, or accepted")
	plain("budget", "PAYRECON_BUDGET", "true", kindBool, "provider calls wait for the provider account's rate budget, kept in the database and shared by every worker (--budget=false: calls never wait)")
	plain("budget-account", "PAYRECON_BUDGET_ACCOUNT", budget.DefaultConfig().Account, kindString, "the provider account the budget is of: workers with the same account share one budget")
	for _, c := range append([]reconcile.BudgetClass{reconcile.ClassGlobal}, reconcile.BudgetClasses...) {
		live, test := budget.DefaultLimits(true).Of(c), budget.DefaultLimits(false).Of(c)
		plain("budget-"+string(c), "PAYRECON_BUDGET_"+strings.ToUpper(string(c)), "", kindRate,
			fmt.Sprintf("%s calls per second (default: Stripe's limit for the key's mode, %v with an sk_live_ key, %v otherwise)", budgetClassUsage[c], live, test))
	}
	plain("log-level", "PAYRECON_LOG_LEVEL", "info", kindLevel, "debug, info, warn or error")
	plain("log-format", "PAYRECON_LOG_FORMAT", "text", kindFormat, "text or json")
	return s
}

// budgetClassUsage says what each budget class counts, for the help.
var budgetClassUsage = map[reconcile.BudgetClass]string{
	reconcile.ClassGlobal:   "all provider",
	reconcile.ClassCreate:   "payment create",
	reconcile.ClassRetrieve: "payment retrieve (status)",
	reconcile.ClassSearch:   "payment search",
	reconcile.ClassList:     "payment list (the audit)",
	reconcile.ClassRefund:   "refund",
}

// labelOf names a setting in messages: "--name / ENV", or ENV alone for
// an environment-only one.
func labelOf(name, env string) string {
	if strings.HasPrefix(env, "STRIPE_") {
		return env
	}
	return "--" + name + " / " + env
}

func (st *setting) label() string {
	if st.envOnly {
		return st.env
	}
	return labelOf(st.name, st.env)
}

// defaultFor is the setting's default in command.
func (st *setting) defaultFor(command string) string {
	if d, ok := st.defFor[command]; ok {
		return d
	}
	return st.def
}

// fileSetting returns the -file setting of a secret, or nil.
func (s *settings) fileSetting(name string) *setting {
	if f := s.byKey[name+"-file"]; f != nil && f.fileFor == name {
		return f
	}
	return nil
}

// formatDuration writes d as a person writes a flag's value: 30s, 2m,
// 24h, 1h30m, not Go's 2m0s or 24h0m0s. time.ParseDuration reads it back.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// formatDurations writes ds as the value of a list setting: 30s,2m,10m,1h.
func formatDurations(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = formatDuration(d)
	}
	return strings.Join(parts, ",")
}

// formatSeconds writes d in whole seconds, 300s, or as formatDuration
// does if d is not a whole number of seconds.
func formatSeconds(d time.Duration) string {
	if d%time.Second != 0 {
		return formatDuration(d)
	}
	return strconv.FormatInt(int64(d/time.Second), 10) + "s"
}

// value is a setting's flag.Value. Set checks the text with the
// setting's kind before keeping it.
type value struct {
	s  *settings
	st *setting
}

func (v value) String() string {
	if v.st == nil {
		return ""
	}
	return v.st.value
}

func (v value) Set(x string) error {
	if v.st.kind.check != nil {
		if err := v.st.kind.check(x); err != nil {
			v.s.bad = &badValue{st: v.st, value: x, err: err}
			return err
		}
	}
	v.st.value = x
	return nil
}

func (v value) IsBoolFlag() bool { return v.st != nil && v.st.kind == kindBool }

// register adds every setting that has a flag to fs.
func (s *settings) register(fs *flag.FlagSet) {
	for _, st := range s.list {
		// A command's own flag of a setting's name shadows the setting,
		// which that command does not take.
		if !st.envOnly && fs.Lookup(st.name) == nil {
			fs.Var(value{s: s, st: st}, st.name, st.usage)
		}
	}
}

// isSetting reports whether f is a setting's flag (register's), not a
// command's own.
func isSetting(f *flag.Flag) bool {
	_, ok := f.Value.(value)
	return ok
}

// resolve fills the settings not given on the command line (fs, already
// parsed; its settings were registered by register) from the environment,
// then from the config file (--config / PAYRECON_CONFIG), then from their
// defaults in command. ff does the work: the settings given on fs are
// handed to it again as arguments, so that it knows them for given.
func (s *settings) resolve(fs *flag.FlagSet, command string) error {
	var argv []string
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		if st := s.byKey[f.Name]; st != nil && !st.envOnly && isSetting(f) {
			given[f.Name] = true
			argv = append(argv, "-"+f.Name+"="+st.value)
		}
	})
	only := flag.NewFlagSet("settings", flag.ContinueOnError)
	only.SetOutput(io.Discard)
	for _, st := range s.list {
		st.source = fromDefault
		if given[st.name] {
			st.source = fromFlag
		} else {
			st.value = st.defaultFor(command)
		}
		if !st.envOnly {
			only.Var(value{s: s, st: st}, st.name, st.usage)
		}
	}
	s.bad, s.badLine = nil, 0
	config := func() string { return s.byKey["config"].value }
	err := ff.Parse(only, argv,
		ff.WithEnvVarPrefix(envPrefix),
		ff.WithConfigFileFlag("config"),
		ff.WithConfigFileParser(s.configFileParser(config)))
	if err != nil {
		var unknown unknownSettingError
		if errors.As(err, &unknown) {
			return unknown
		}
		if b := s.bad; b != nil {
			src := "--config " + config()
			if s.badLine > 0 {
				src += fmt.Sprintf(":%d", s.badLine)
			}
			if os.Getenv(b.st.env) == b.value {
				src = "environment"
			}
			return s.badValueError(b, src)
		}
		return fmt.Errorf("--config %s: %w", config(), err)
	}
	only.Visit(func(f *flag.Flag) {
		st := s.byKey[f.Name]
		switch {
		case st.source == fromFlag:
		case os.Getenv(st.env) != "":
			st.source = fromEnv
		default:
			st.source = fromConfig
		}
	})
	for _, st := range s.list {
		if st.envOnly {
			if v := os.Getenv(st.env); v != "" {
				st.value, st.source = v, fromEnv
			}
		}
	}
	return nil
}

// badValueError says which setting refused which value, from where, and
// what it wants; a secret's value is not shown, a database URL only
// redacted.
func (s *settings) badValueError(b *badValue, src string) error {
	shown := strconv.Quote(b.value)
	switch {
	case b.st.kind == kindDatabaseURL:
		shown = "" // the check's own message shows it redacted
	case b.st.secret:
		shown = "(value hidden)"
	}
	var where string
	switch src {
	case "flag":
		where = "--" + b.st.name
		if shown != "" {
			where += " " + shown
		}
	case "environment":
		where = b.st.env
		if shown != "" {
			where += "=" + shown
		}
		where += " (--" + b.st.name + ")"
	default:
		where = b.st.name
		if shown != "" {
			where += " " + shown
		}
		where += " in " + strings.TrimPrefix(src, "--config ") + " (--" + b.st.name + " / " + b.st.env + ")"
	}
	return fmt.Errorf("%s: %w", where, b.err)
}

// secret returns the value of the secret setting name: its own value
// (flag, environment, config file), or the content of the file its
// -file setting names, less one trailing newline. Both set is an error,
// as is a file that cannot be read or is empty. It is read when a
// command needs it, so that a command that does not need it works
// whatever the file.
func (s *settings) secret(name string) (string, error) {
	st := s.byKey[name]
	f := s.fileSetting(name)
	if f == nil || f.value == "" {
		return st.value, nil
	}
	if st.value != "" {
		return "", fmt.Errorf("%s and %s are both set: give one of them", st.label(), f.label())
	}
	data, err := os.ReadFile(f.value)
	if err != nil {
		return "", fmt.Errorf("%s: %w", f.label(), err)
	}
	v := string(data)
	if t, ok := strings.CutSuffix(v, "\r\n"); ok {
		v = t
	} else {
		v = strings.TrimSuffix(v, "\n")
	}
	if v == "" {
		return "", fmt.Errorf("%s: %s is empty", f.label(), f.value)
	}
	if st.kind.check != nil {
		if err := st.kind.check(v); err != nil {
			return "", fmt.Errorf("%s: the value in %s: %w", f.label(), f.value, err)
		}
	}
	return v, nil
}

// set replaces a setting's value, as a command that chooses it does (the
// demo's temporary database); a secret's file setting is cleared.
func (s *settings) set(name, v string) {
	s.byKey[name].value = v
	if f := s.fileSetting(name); f != nil {
		f.value = ""
	}
}

// warnSecretsInArgs logs a warning for every secret given on the command
// line, where every user of the machine reads it (ps, /proc/PID/cmdline).
func (s *settings) warnSecretsInArgs(log *slog.Logger) {
	for _, st := range s.list {
		if !st.secret || st.source != fromFlag || st.value == "" {
			continue
		}
		if st.kind == kindDatabaseURL && dburl.Redact(st.value) == st.value {
			continue // no password in it
		}
		log.Warn("a secret is given on the command line, where every user of this machine can read it (ps, /proc/PID/cmdline)",
			"flag", "--"+st.name, "instead", fmt.Sprintf("%s_FILE, %s or the config file", st.env, st.env))
	}
}

func (s *settings) str(name string) string { return s.byKey[name].value }

func (s *settings) duration(name string) (time.Duration, error) {
	st := s.byKey[name]
	d, err := time.ParseDuration(st.value)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--%s / %s = %q: want a positive duration such as 30s or 2m", st.name, st.env, st.value)
	}
	return d, nil
}

func (s *settings) integer(name string) (int64, error) {
	st := s.byKey[name]
	n, err := strconv.ParseInt(st.value, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("--%s / %s = %q: want a positive whole number", st.name, st.env, st.value)
	}
	return n, nil
}

func (s *settings) boolean(name string) (bool, error) {
	st := s.byKey[name]
	b, err := strconv.ParseBool(st.value)
	if err != nil {
		return false, fmt.Errorf("--%s / %s = %q: want true or false", st.name, st.env, st.value)
	}
	return b, nil
}

func (s *settings) durations(name string) ([]time.Duration, error) {
	st := s.byKey[name]
	ds, err := parseDurations(st.value)
	if err != nil {
		return nil, fmt.Errorf("--%s / %s = %q: %w", st.name, st.env, st.value, err)
	}
	return ds, nil
}
