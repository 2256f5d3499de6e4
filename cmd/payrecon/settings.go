package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/payrecon/payrecon/provider/stripe"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/cron"
)

// setting is one configuration value with a flag, an environment variable
// and a default. A flag given on the command line wins over the
// environment, which wins over the default.
//
// A setting that configures a component takes its default from that
// component's config (reconcile.DefaultConfig, cron.DefaultSweepConfig,
// stripe.DefaultWebhookTolerance), never from a literal of its own, and
// an empty default leaves the field zero, to the component's default:
// TestFlagDefaultsAreTheConfigs checks both.
type setting struct {
	name  string // flag name, without dashes
	env   string
	def   string
	usage string
	value string // resolved value
}

// settings holds every setting payrecon knows, so that `payrecon help`
// lists them all and every command resolves them the same way.
type settings struct {
	list  []*setting
	byKey map[string]*setting
}

// defaultAddr is the default of --addr: rhttp.Config.Addr's default, and
// the fake provider's listen address too.
const defaultAddr = "127.0.0.1:8080"

func newSettings() *settings {
	s := &settings{byKey: map[string]*setting{}}
	add := func(name, env, def, usage string) {
		st := &setting{name: name, env: env, def: def, usage: usage}
		s.list = append(s.list, st)
		s.byKey[name] = st
	}
	rc := reconcile.DefaultConfig()
	sw := cron.DefaultSweepConfig()
	add("database-url", "PAYRECON_DATABASE_URL", "", "database: postgres://… (default: a SQLite file in the user's data directory, sqlite:PATH)")
	add("addr", "PAYRECON_ADDR", defaultAddr, "HTTP listen address of `serve` (webhooks, API, /ops, /metrics), of `worker` (/healthz, /readyz, /metrics) and of `fakeprovider` (its Stripe-compatible API)")
	add("worker-id", "PAYRECON_WORKER_ID", "", "worker name in leases and the audit (default: host-pid)")
	add("lease-duration", "PAYRECON_LEASE_DURATION", formatDuration(rc.LeaseDuration), "how long a job claim is valid; at least twice --provider-timeout")
	add("provider-timeout", "PAYRECON_PROVIDER_TIMEOUT", formatDuration(rc.ProviderTimeout), "deadline of one provider call")
	add("backoff", "PAYRECON_BACKOFF", formatDurations(rc.Backoff), "delays between checks of an uncertain purchase; the last repeats")
	add("max-attempts", "PAYRECON_MAX_ATTEMPTS", strconv.Itoa(rc.MaxAttempts), "job runs before an unresolved purchase is escalated")
	add("max-uncertain-age", "PAYRECON_MAX_UNCERTAIN_AGE", formatDuration(rc.MaxUncertainAge), "time in uncertainty before escalation")
	add("escalated-interval", "PAYRECON_ESCALATED_INTERVAL", formatDuration(rc.EscalatedInterval), "check cadence of an escalated purchase")
	add("key-retention", "PAYRECON_KEY_RETENTION", formatDuration(rc.KeyRetention), "how long the provider keeps idempotency keys, from the first attempt")
	add("key-replay-margin", "PAYRECON_KEY_REPLAY_MARGIN", formatDuration(rc.KeyReplayMargin), "stop replaying this long before the key retention ends")
	add("batch-size", "PAYRECON_BATCH_SIZE", strconv.Itoa(rc.BatchSize), "jobs claimed per poll")
	add("concurrency", "PAYRECON_CONCURRENCY", strconv.Itoa(rc.Concurrency), "jobs one worker runs at once")
	add("poll-interval", "PAYRECON_POLL_INTERVAL", formatDuration(rc.PollInterval), "wait between polls when idle")
	add("shutdown-grace", "PAYRECON_SHUTDOWN_GRACE", formatDuration(rc.ShutdownGrace), "how long in-flight jobs may finish on SIGTERM")
	add("max-amount", "PAYRECON_MAX_AMOUNT", strconv.FormatInt(rc.MaxAmount, 10), "largest purchase amount, in minor units")
	add("provider", "PAYRECON_PROVIDER", "fake", "payment provider: fake (in-process simulator) or stripe")
	add("fake-faults", "PAYRECON_FAKE_FAULTS", "", "fault mix of the fake provider, e.g. lost_reply=0.2,timeout=0.1,stale_processing=0.1,search_lag=30s,seed=7")
	add("stripe-api-base", "PAYRECON_STRIPE_API_BASE", "", "Stripe API base URL override, e.g. a local fake Stripe server (default Stripe's)")
	// In seconds, as Stripe states it.
	add("webhook-tolerance", "PAYRECON_WEBHOOK_TOLERANCE", formatSeconds(stripe.DefaultWebhookTolerance), "maximum age of a webhook signature")
	add("worker", "PAYRECON_WORKER", "true", "`serve` also runs the worker and its scheduler (true or false)")
	add("webhooks", "PAYRECON_WEBHOOKS", "true", "`serve` serves POST /webhooks/stripe (true or false); with --provider stripe it refuses to start without STRIPE_WEBHOOK_SECRET unless this is false")
	add("api-token", "PAYRECON_API_TOKEN", "", "purchase API bearer tokens, comma-separated, each name:token or token; `serve` refuses to start the API without one")
	add("api", "PAYRECON_API", "true", "`serve` serves the purchase API (true or false)")
	add("ops-token", "PAYRECON_OPS_TOKEN", "", "operator bearer token for /ops (distinct from the API tokens); without it the ops pages are not served")
	add("sweep-rescue", "PAYRECON_SWEEP_RESCUE", sw.RescueSchedule, "cron schedule: take over jobs whose lease expired")
	add("sweep-escalate", "PAYRECON_SWEEP_ESCALATE", sw.EscalateSchedule, "cron schedule: escalate purchases uncertain too long")
	add("sweep-gauges", "PAYRECON_SWEEP_GAUGES", sw.GaugesSchedule, "cron schedule: refresh the gauges read from the database")
	add("sweep-unmatched", "PAYRECON_SWEEP_UNMATCHED", sw.UnmatchedSchedule, "cron schedule: apply webhooks stored as unmatched")
	add("sweep-retention", "PAYRECON_SWEEP_RETENTION", sw.RetentionSchedule, "cron schedule: delete old inbox rows and expired idempotency keys")
	add("sweep-audit", "PAYRECON_SWEEP_AUDIT", sw.AuditSchedule, "cron schedule: the audit from the provider's side (lists the provider's payments and matches them to the books)")
	add("audit-overlap", "PAYRECON_AUDIT_OVERLAP", formatDuration(rc.AuditOverlap), "how far before the last audit's end the scheduled audit starts, so that windows overlap")
	add("audit-settle", "PAYRECON_AUDIT_SETTLE", formatDuration(rc.AuditSettle), "how long before now the scheduled audit's window ends, leaving payments still being created to the next run")
	add("inbox-retention", "PAYRECON_INBOX_RETENTION", formatDuration(sw.InboxRetention), "how long webhook inbox rows are kept; at least "+
		formatDuration(cron.MinInboxRetention)+" (Stripe's 3-day redelivery plus a replay margin)")
	add("idempotency-key-retention", "PAYRECON_IDEMPOTENCY_KEY_RETENTION", formatDuration(sw.IdempotencyKeyRetention), "how long purchase API idempotency keys are kept")
	add("log-level", "PAYRECON_LOG_LEVEL", "info", "debug, info, warn or error")
	add("log-format", "PAYRECON_LOG_FORMAT", "text", "text or json")
	return s
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

// register adds every setting to fs as a string flag.
func (s *settings) register(fs *flag.FlagSet) {
	for _, st := range s.list {
		fs.StringVar(&st.value, st.name, "", st.usage)
	}
}

// resolve fills unset flags from the environment, then from defaults.
func (s *settings) resolve(fs *flag.FlagSet) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, st := range s.list {
		if set[st.name] {
			continue
		}
		if v, ok := os.LookupEnv(st.env); ok {
			st.value = v
			continue
		}
		st.value = st.def
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
	var out []time.Duration
	for _, part := range strings.Split(st.value, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("--%s / %s = %q: want positive durations separated by commas, such as 30s,2m,10m,1h", st.name, st.env, st.value)
		}
		out = append(out, d)
	}
	return out, nil
}

// reconcileConfig builds the protocol's configuration from the settings.
func (s *settings) reconcileConfig() (reconcile.Config, error) {
	var (
		cfg  reconcile.Config
		errs []error
	)
	dur := func(dst *time.Duration, name string) {
		d, err := s.duration(name)
		if err != nil {
			errs = append(errs, err)
		}
		*dst = d
	}
	num := func(name string) int64 {
		n, err := s.integer(name)
		if err != nil {
			errs = append(errs, err)
		}
		return n
	}
	cfg.WorkerID = s.str("worker-id")
	dur(&cfg.LeaseDuration, "lease-duration")
	dur(&cfg.ProviderTimeout, "provider-timeout")
	dur(&cfg.MaxUncertainAge, "max-uncertain-age")
	dur(&cfg.EscalatedInterval, "escalated-interval")
	dur(&cfg.KeyRetention, "key-retention")
	dur(&cfg.KeyReplayMargin, "key-replay-margin")
	dur(&cfg.PollInterval, "poll-interval")
	dur(&cfg.ShutdownGrace, "shutdown-grace")
	dur(&cfg.AuditOverlap, "audit-overlap")
	dur(&cfg.AuditSettle, "audit-settle")
	backoff, err := s.durations("backoff")
	if err != nil {
		errs = append(errs, err)
	}
	cfg.Backoff = backoff
	cfg.MaxAttempts = int(num("max-attempts"))
	cfg.BatchSize = int(num("batch-size"))
	cfg.Concurrency = int(num("concurrency"))
	cfg.MaxAmount = num("max-amount")
	return cfg, errors.Join(errs...)
}

// sweepConfig builds the standard sweeps' configuration from the
// settings.
func (s *settings) sweepConfig() (cron.SweepConfig, error) {
	inbox, err := s.duration("inbox-retention")
	if err != nil {
		return cron.SweepConfig{}, err
	}
	keys, err := s.duration("idempotency-key-retention")
	if err != nil {
		return cron.SweepConfig{}, err
	}
	return cron.SweepConfig{
		RescueSchedule:          s.str("sweep-rescue"),
		EscalateSchedule:        s.str("sweep-escalate"),
		GaugesSchedule:          s.str("sweep-gauges"),
		UnmatchedSchedule:       s.str("sweep-unmatched"),
		RetentionSchedule:       s.str("sweep-retention"),
		AuditSchedule:           s.str("sweep-audit"),
		InboxRetention:          inbox,
		IdempotencyKeyRetention: keys,
	}, nil
}

// printSettings writes the table `payrecon help` shows.
func (s *settings) printSettings(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FLAG\tENVIRONMENT\tDEFAULT\tMEANING")
	fmt.Fprintln(tw, "-\tSTRIPE_SECRET_KEY\t-\tStripe secret key for --provider stripe (environment only: keep it out of argv)")
	fmt.Fprintln(tw, "-\tSTRIPE_WEBHOOK_SECRET\t-\tStripe webhook signing secret (whsec_…); enables POST /webhooks/stripe")
	for _, st := range s.list {
		def := st.def
		if def == "" {
			def = "-"
		}
		fmt.Fprintf(tw, "--%s\t%s\t%s\t%s\n", st.name, st.env, def, st.usage)
	}
	tw.Flush()
}
