package cron

import (
	"context"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/relay"
)

// Names of the standard sweeps, used in logs, metrics and lock rows.
const (
	SweepRescueLeases  = "rescue_leases"
	SweepEscalate      = "escalate"
	SweepRefreshGauges = "refresh_gauges"
	SweepUnmatched     = "apply_unmatched_webhooks"
	SweepRetention     = "retention"
	SweepAudit         = "audit"
	SweepEvents        = "events"
)

// AuditLockTTL bounds one run of the audit sweep, and of the event sweep,
// which may page through many of the provider's list calls: longer than
// the other sweeps' lock. A run cut off by it resumes from its watermark
// at the next run.
const AuditLockTTL = 30 * time.Minute

// ProviderRedeliveryWindow is how long Stripe keeps redelivering an
// unacknowledged webhook: up to 3 days.
const ProviderRedeliveryWindow = 72 * time.Hour

// ReplayMargin is added to the redelivery window for manual replays
// ("resend" from the dashboard, a replay script) after an incident.
const ReplayMargin = 24 * time.Hour

// SweepConfig configures the standard sweeps. Zero fields take their
// documented defaults, which DefaultSweepConfig returns.
type SweepConfig struct {
	// RescueSchedule: take over jobs whose lease expired. Default "@every 30s".
	RescueSchedule string
	// EscalateSchedule: escalate purchases uncertain too long. Default "@every 1m".
	EscalateSchedule string
	// GaugesSchedule: refresh the gauges read from the database. Default "@every 15s".
	GaugesSchedule string
	// UnmatchedSchedule: apply webhooks stored as unmatched whose purchase
	// now exists. Default "@every 1m".
	UnmatchedSchedule string
	// RetentionSchedule: delete old inbox rows, expired idempotency keys
	// and delivered outbox events. Default "@hourly".
	RetentionSchedule string
	// AuditSchedule: the audit from the provider's side
	// (reconcile.Service.AuditDue), over a window that overlaps the last
	// one. Default "@hourly".
	AuditSchedule string
	// EventsSchedule: the event sweep (reconcile.Service.SweepEvents),
	// which catches up from the provider's event log the changes whose
	// webhooks were lost: a lost webhook is applied, or flagged, within
	// one interval. Default "@every 5m".
	EventsSchedule string

	// InboxRetention is how long webhook inbox rows are kept, so that a
	// redelivered or replayed event is still recognised as a duplicate. It
	// must be at least MinInboxRetention (4 days). Default 7 days (168h).
	InboxRetention time.Duration
	// IdempotencyKeyRetention is how long purchase API keys are kept:
	// longer than the longest client retry plan, including a manual retry
	// the next morning. Default 72h.
	IdempotencyKeyRetention time.Duration
	// OutboxRetention is how long delivered outbox events are kept (an
	// event not yet delivered to every subscription is never deleted), so
	// that `payrecon events replay` can send them again. It must be at
	// least OutboxRetryWindow plus ReplayMargin. Default 7 days (168h).
	OutboxRetention time.Duration
	// OutboxRetryWindow is the relay's retry window
	// (relay.Config.RetryWindow), the longest an event may be
	// redelivered. Default 72h (relay.DefaultRetryWindow).
	OutboxRetryWindow time.Duration
	// DeleteBatch is the rows deleted per transaction. Default 1000.
	DeleteBatch int
}

// MinInboxRetention is the shortest SweepConfig.InboxRetention allowed:
// the provider's redelivery window plus a margin for manual replays.
const MinInboxRetention = ProviderRedeliveryWindow + ReplayMargin

// DefaultSweepConfig returns the default of every field of SweepConfig, as
// documented on the field: what Sweeps uses for a zero field.
func DefaultSweepConfig() SweepConfig {
	return SweepConfig{
		RescueSchedule:          "@every 30s",
		EscalateSchedule:        "@every 1m",
		GaugesSchedule:          "@every 15s",
		UnmatchedSchedule:       "@every 1m",
		RetentionSchedule:       "@hourly",
		AuditSchedule:           "@hourly",
		EventsSchedule:          "@every 5m",
		InboxRetention:          7 * 24 * time.Hour,
		IdempotencyKeyRetention: 72 * time.Hour,
		OutboxRetention:         7 * 24 * time.Hour,
		OutboxRetryWindow:       relay.DefaultRetryWindow,
		DeleteBatch:             1000,
	}
}

func (c SweepConfig) withDefaults() (SweepConfig, error) {
	d := DefaultSweepConfig()
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.RescueSchedule, d.RescueSchedule)
	def(&c.EscalateSchedule, d.EscalateSchedule)
	def(&c.GaugesSchedule, d.GaugesSchedule)
	def(&c.UnmatchedSchedule, d.UnmatchedSchedule)
	def(&c.RetentionSchedule, d.RetentionSchedule)
	def(&c.AuditSchedule, d.AuditSchedule)
	def(&c.EventsSchedule, d.EventsSchedule)
	if c.InboxRetention == 0 {
		c.InboxRetention = d.InboxRetention
	}
	if c.IdempotencyKeyRetention == 0 {
		c.IdempotencyKeyRetention = d.IdempotencyKeyRetention
	}
	if c.OutboxRetention == 0 {
		c.OutboxRetention = d.OutboxRetention
	}
	if c.OutboxRetryWindow == 0 {
		c.OutboxRetryWindow = d.OutboxRetryWindow
	}
	if c.DeleteBatch == 0 {
		c.DeleteBatch = d.DeleteBatch
	}
	if min := c.OutboxRetryWindow + ReplayMargin; c.OutboxRetention < min {
		return c, fmt.Errorf("outbox retention %s is shorter than the relay's retry window (%s) plus a replay margin (%s): "+
			"an event could be deleted while it may still be redelivered or replayed; use at least %s", c.OutboxRetention, c.OutboxRetryWindow, ReplayMargin, min)
	}
	if min := MinInboxRetention; c.InboxRetention < min {
		return c, fmt.Errorf("inbox retention %s is shorter than the provider's redelivery window (%s) plus a replay margin (%s): "+
			"a redelivered event would be applied again; use at least %s", c.InboxRetention, ProviderRedeliveryWindow, ReplayMargin, min)
	}
	if c.IdempotencyKeyRetention < 24*time.Hour {
		return c, fmt.Errorf("idempotency key retention %s is shorter than 24h: a client's next-morning retry would create a second purchase", c.IdempotencyKeyRetention)
	}
	return c, nil
}

// Sweeps returns the standard sweeps over svc. refresh reads the gauges
// (reconcile/prometheus's Metrics.Refresh); nil leaves that sweep out.
// The audit sweep counts the provider's payments it matched as its items,
// the event sweep the provider's events it read.
func Sweeps(svc *reconcile.Service, refresh func(context.Context) error, cfg SweepConfig) ([]Sweep, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("cron: %w", err)
	}
	sweeps := []Sweep{
		{Name: SweepRescueLeases, Schedule: cfg.RescueSchedule, Run: svc.RescueExpired},
		{Name: SweepEscalate, Schedule: cfg.EscalateSchedule, Run: func(ctx context.Context) (int, error) {
			// Purchases and refunds alike: the same escalation for both
			// money-moving processes.
			purchases, err := svc.EscalateOverdue(ctx)
			if err != nil {
				return purchases, err
			}
			refunds, err := svc.EscalateOverdueRefunds(ctx)
			return purchases + refunds, err
		}},
		// The webhook applier runs it, between its batches
		// (reconcile/applier).
		{Name: SweepUnmatched, Schedule: cfg.UnmatchedSchedule, Looped: true, Run: func(ctx context.Context) (int, error) {
			return svc.ApplyUnmatched(ctx, 500)
		}},
		{Name: SweepRetention, Schedule: cfg.RetentionSchedule, Run: func(ctx context.Context) (int, error) {
			inbox, err := svc.SweepInbox(ctx, cfg.InboxRetention, cfg.DeleteBatch)
			if err != nil {
				return inbox, err
			}
			keys, err := svc.SweepIdempotencyKeys(ctx, cfg.IdempotencyKeyRetention, cfg.DeleteBatch)
			if err != nil {
				return inbox + keys, err
			}
			outbox, err := svc.SweepOutbox(ctx, cfg.OutboxRetention, cfg.DeleteBatch)
			return inbox + keys + outbox, err
		}},
		{Name: SweepAudit, Schedule: cfg.AuditSchedule, Run: func(ctx context.Context) (int, error) {
			rep, err := svc.AuditDue(ctx)
			return rep.Payments, err
		}, LockTTL: AuditLockTTL},
		{Name: SweepEvents, Schedule: cfg.EventsSchedule, Run: func(ctx context.Context) (int, error) {
			rep, err := svc.SweepEvents(ctx)
			return rep.Read, err
		}, LockTTL: AuditLockTTL},
	}
	if refresh != nil {
		sweeps = append(sweeps, Sweep{Name: SweepRefreshGauges, Schedule: cfg.GaugesSchedule, Run: func(ctx context.Context) (int, error) {
			return 0, refresh(ctx)
		}})
	}
	return sweeps, nil
}
