package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/budget"
	"github.com/payrecon/payrecon/reconcile/cron"
)

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
	dur(&cfg.ApplyWindow, "apply-window")
	dur(&cfg.PollInterval, "poll-interval")
	dur(&cfg.ShutdownGrace, "shutdown-grace")
	dur(&cfg.AuditOverlap, "audit-overlap")
	dur(&cfg.AuditSettle, "audit-settle")
	dur(&cfg.EventSweepOverlap, "event-sweep-overlap")
	dur(&cfg.EventSweepFirstWindow, "event-sweep-first-window")
	backoff, err := s.durations("backoff")
	if err != nil {
		errs = append(errs, err)
	}
	cfg.Backoff = backoff
	cfg.MaxAttempts = int(num("max-attempts"))
	cfg.BatchSize = int(num("batch-size"))
	cfg.Concurrency = int(num("concurrency"))
	cfg.MaxAmount = num("max-amount")
	group, err := s.boolean("group-commit")
	if err != nil {
		errs = append(errs, err)
	}
	cfg.GroupCommitOff = !group
	cfg.GroupCommitMax = int(num("group-commit-max"))
	cfg.GroupCommitLeaders = int(num("group-commit-leaders"))
	cfg.InboxBatch = int(num("inbox-batch"))
	cfg.InboxMaxAttempts = int(num("inbox-max-attempts"))
	dur(&cfg.InboxBackoff, "inbox-backoff")
	dur(&cfg.InboxGather, "inbox-gather")
	cfg.Accounts = s.declaredAccounts()
	cfg.UndeclaredAccounts = reconcile.AccountPolicy(s.str("undeclared-accounts"))
	return cfg, errors.Join(errs...)
}

// budgetConfig builds the provider rate budget's configuration from the
// settings: live selects the defaults of Stripe's live mode. ok is false
// when --budget is off.
func (s *settings) budgetConfig(live bool) (cfg budget.Config, ok bool, err error) {
	on, err := s.boolean("budget")
	if err != nil || !on {
		return cfg, false, err
	}
	cfg.Account, cfg.Live = s.str("budget-account"), live
	for _, c := range append([]reconcile.BudgetClass{reconcile.ClassGlobal}, reconcile.BudgetClasses...) {
		v := s.str("budget-" + string(c))
		if v == "" {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return cfg, false, fmt.Errorf("--budget-%s: %w", c, err)
		}
		cfg.Limits.Set(c, f)
	}
	return cfg, true, nil
}

// declaredAccounts returns the connected accounts --accounts declares,
// in its order, without their limits: the service's and the metrics'
// account label's.
func (s *settings) declaredAccounts() []string {
	accounts, _, _ := parseAccounts(s.str("accounts")) // checked with the setting
	return accounts
}

// accountLimits returns the limits of the connected accounts declared
// with one (--accounts acct_…=N): N calls a second in all, each class at
// its default.
func (s *settings) accountLimits() map[string]budget.Limits {
	_, limits, _ := parseAccounts(s.str("accounts")) // checked with the setting
	out := map[string]budget.Limits{}
	for a, n := range limits {
		out[a] = budget.Limits{Global: n}
	}
	return out
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
	outboxWindow, err := s.duration("outbox-retry-window")
	if err != nil {
		return cron.SweepConfig{}, err
	}
	outbox, err := s.duration("outbox-retention")
	if err != nil {
		return cron.SweepConfig{}, err
	}
	return cron.SweepConfig{
		OutboxRetryWindow:       outboxWindow,
		OutboxRetention:         outbox,
		RescueSchedule:          s.str("sweep-rescue"),
		EscalateSchedule:        s.str("sweep-escalate"),
		GaugesSchedule:          s.str("sweep-gauges"),
		UnmatchedSchedule:       s.str("sweep-unmatched"),
		RetentionSchedule:       s.str("sweep-retention"),
		AuditSchedule:           s.str("sweep-audit"),
		EventsSchedule:          s.str("sweep-events"),
		InboxRetention:          inbox,
		IdempotencyKeyRetention: keys,
	}, nil
}
