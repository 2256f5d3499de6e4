// Package prometheus exports payrecon's metrics with
// github.com/prometheus/client_golang. The metric names are a contract:
// the alert rules in deploy/prometheus/alerts.yml rely on them.
//
// No label carries an unbounded value: states, causes, operations,
// outcomes, sweep names, audit finding kinds and provider event types are
// all small fixed sets, and the account label takes one of the declared
// accounts, "platform" or "other" (AccountLabel).
package prometheus

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/budget"
	"github.com/payrecon/payrecon/reconcile/relay"
	"github.com/payrecon/payrecon/statemachine"
)

// Metrics holds payrecon's collectors, registered on its own registry.
// It implements reconcile.Observer and AccountObserver, budget.Observer
// and AccountObserver, and the HTTP server's WebhookObserver and
// LoginObserver.
// Safe for concurrent use.
type Metrics struct {
	reg      *prometheus.Registry
	accounts accountLabels

	purchases       *prometheus.GaugeVec
	oldestUncertain prometheus.Gauge
	refunds         *prometheus.GaugeVec
	oldestRefund    prometheus.Gauge
	refundMoves     *prometheus.CounterVec
	escalationsOpen *prometheus.GaugeVec
	findingsOpen    *prometheus.GaugeVec
	transitions     *prometheus.CounterVec
	providerCalls   *prometheus.CounterVec
	providerLatency *prometheus.HistogramVec
	webhookEvents   *prometheus.CounterVec
	webhookApplied  *prometheus.CounterVec
	applyLag        prometheus.Histogram
	inboxPending    prometheus.Gauge
	inboxOldest     prometheus.Gauge
	inboxFailed     prometheus.Gauge
	jobsClaimed     prometheus.Counter
	leaseLost       prometheus.Counter
	resolution      prometheus.Histogram
	workerRunning   prometheus.Gauge
	sweepRuns       *prometheus.CounterVec
	sweepDuration   *prometheus.HistogramVec
	sweepItems      *prometheus.CounterVec
	sweepLastOK     *prometheus.GaugeVec
	opsLogins       *prometheus.CounterVec
	outboxPending   prometheus.Gauge
	outboxDead      prometheus.Gauge
	outboxOldest    prometheus.Gauge
	outboxDelivered *prometheus.CounterVec
	outboxLatency   prometheus.Histogram
	budgetRate      *prometheus.GaugeVec
	budgetThrottled *prometheus.CounterVec
	budgetWait      *prometheus.HistogramVec
	sweptEvents     *prometheus.CounterVec
	eventWatermark  prometheus.Gauge
	disputesOpen    *prometheus.GaugeVec
	disputedAmount  *prometheus.GaugeVec
	evidenceDue     *prometheus.GaugeVec
}

var (
	_ reconcile.Observer        = (*Metrics)(nil)
	_ reconcile.AccountObserver = (*Metrics)(nil)
	_ relay.Observer            = (*Metrics)(nil)
	_ budget.AccountObserver    = (*Metrics)(nil)

	_ reconcile.EventSweepObserver = (*Metrics)(nil)
)

// New returns Metrics registered on a fresh registry, with Go runtime and
// process collectors, for a deployment that declares no connected
// account: every connected account is labelled other.
func New() *Metrics { return newMetrics(accountLabels{}) }

// NewWithAccounts is New for a deployment that declares the connected
// accounts declared (reconcile.Config.Accounts): each is labelled by its
// id, and their series are present from the start. It returns an error
// for an account that is malformed or the platform's own (empty).
func NewWithAccounts(declared []string) (*Metrics, error) {
	labels, err := newAccountLabels(declared)
	if err != nil {
		return nil, err
	}
	return newMetrics(labels), nil
}

// newMetrics is New with the account labels of labels.
func newMetrics(labels accountLabels) *Metrics {
	m := &Metrics{
		reg:      prometheus.NewRegistry(),
		accounts: labels,
		purchases: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "payrecon_purchases", Help: "Purchases by state, read from the database.",
		}, []string{"state"}),
		oldestUncertain: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "payrecon_oldest_uncertain_age_seconds",
			Help: "Age of the oldest purchase in uncertain or reconciling, from when it first became uncertain; 0 when none.",
		}),
		refunds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "payrecon_refunds", Help: "Refunds by state (created, submitted, uncertain, reconciling, succeeded, failed), read from the database.",
		}, []string{"state"}),
		oldestRefund: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "payrecon_oldest_uncertain_refund_age_seconds",
			Help: "Age of the oldest refund in uncertain or reconciling, from when it first became uncertain; 0 when none.",
		}),
		refundMoves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrecon_refund_transitions_total", Help: "Committed state transitions of refunds.",
		}, []string{"from", "to", "cause"}),
		escalationsOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "payrecon_escalations_open", Help: "Purchases on the operator list, by account (platform, a declared connected account, or other), read from the database.",
		}, []string{"account"}),
		findingsOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "payrecon_audit_findings_open",
			Help: "Open findings of the audit from the provider's side, by kind (orphan_charge, duplicate_charge, amount_mismatch, currency_mismatch, state_disagreement, missing_at_provider, orphan_refund, refund_mismatch), read from the database.",
		}, []string{"kind"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrecon_transitions_total", Help: "Committed state transitions of purchases, by the purchase's account.",
		}, []string{"from", "to", "cause", "account"}),
		providerCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrecon_provider_requests_total", Help: "Provider calls by operation, neutral outcome and the account they were made on behalf of.",
		}, []string{"op", "outcome", "account"}),
		providerLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "payrecon_provider_request_duration_seconds", Help: "Provider call latency, by operation and account.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"op", "account"}),
		webhookEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrecon_webhook_events_total",
			Help: "Webhook events at receipt, by type (those payrecon acts on; other for the rest) and outcome (received, duplicate, conflict, rejected).",
		}, []string{"type", "outcome"}),
		webhookApplied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrecon_webhook_events_applied_total",
			Help: "Webhook events the applier took from the inbox, by type and outcome (applied, stale, contradiction, confirming, unmatched, ignored; pending when a try failed and is retried; failed when it waits for an operator).",
		}, []string{"type", "outcome"}),
		applyLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "payrecon_webhook_apply_lag_seconds", Help: "Time from a webhook event's receipt to its application.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		inboxPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "payrecon_webhook_inbox_pending", Help: "Webhook events received and not yet applied, read from the database.",
		}),
		inboxOldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "payrecon_webhook_inbox_oldest_pending_seconds", Help: "Age of the oldest webhook event received and not yet applied, on the database's clock; 0 if none.",
		}),
		inboxFailed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "payrecon_webhook_inbox_failed", Help: "Webhook events the applier gave up on after its last try, waiting for an operator, read from the database.",
		}),
		jobsClaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "payrecon_jobs_claimed_total", Help: "Jobs leased by this process.",
		}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "payrecon_lease_lost_total", Help: "Writes refused because this process's lease had expired or was taken over.",
		}),
		resolution: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "payrecon_resolution_seconds", Help: "Time from a purchase's first uncertainty to its final state.",
			Buckets: []float64{1, 10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 72 * 3600},
		}),
		workerRunning: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "payrecon_worker_running", Help: "1 while this process runs the reconcile worker loop.",
		}),
		sweepRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrecon_sweep_runs_total", Help: "Scheduled sweep runs by result (ok, error, skipped when another replica holds the lock).",
		}, []string{"sweep", "result"}),
		sweepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "payrecon_sweep_duration_seconds", Help: "Duration of sweep runs.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"sweep"}),
		sweepItems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrecon_sweep_items_total", Help: "Items a sweep handled (rows deleted, leases rescued, ...).",
		}, []string{"sweep"}),
		sweepLastOK: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "payrecon_sweep_last_success_timestamp_seconds", Help: "Unix time of the last successful run of each sweep.",
		}, []string{"sweep"}),
		opsLogins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrecon_ops_login_attempts_total",
			Help: "Attempts to authenticate with the operator token (the /ops login form, or a bearer token on /ops) by outcome: success, failure, or throttled (refused unchecked while the client or name is locked out).",
		}, []string{"outcome"}),
		outboxPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "payrecon_outbox_pending", Help: "Outbox deliveries not yet acknowledged by their subscription (not dead), read from the database.",
		}),
		outboxDead: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "payrecon_outbox_dead", Help: "Outbox deliveries dead after their retry window, waiting for an operator's replay, read from the database.",
		}),
		outboxOldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "payrecon_outbox_oldest_age_seconds", Help: "Age of the oldest pending outbox delivery, from its event's commit; 0 when none.",
		}),
		outboxDelivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrecon_outbox_deliveries_total", Help: "Outbox delivery attempts by outcome (delivered, retry, dead, lease_lost).",
		}, []string{"outcome"}),
		outboxLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "payrecon_outbox_delivery_seconds", Help: "Time from an event's commit to its delivery's 2xx.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 60, 600, 3600},
		}),
		budgetRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "payrecon_provider_budget",
			Help: "The provider rate budget's current rate, in calls per second, by class (create, retrieve, search, list, refund, global) and account: the configured limit less the headroom, lowered by 429s. Under other, the rate an undeclared account's budget set last.",
		}, []string{"class", "account"}),
		budgetThrottled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrecon_provider_throttled_total",
			Help: "Provider calls answered 429 (rate limited), by budget class and account. Each lowers that class's rate in that account's budget.",
		}, []string{"class", "account"}),
		budgetWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "payrecon_provider_wait_seconds", Help: "How long provider calls waited for the rate budget, by class and account.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"class", "account"}),
		sweptEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrecon_event_sweep_events_total",
			Help: "Provider events the event sweep read from the provider's event log, by what became of them in the inbox (duplicate: a webhook brought it first; refused: the adapter refused it, as its webhook would be).",
		}, []string{"outcome"}),
		eventWatermark: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "payrecon_event_sweep_watermark_timestamp_seconds",
			Help: "Unix time of the event sweep's watermark, as this process last left it: every provider event created before it has been through the inbox; 0 until this process ran the sweep.",
		}),
		disputesOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "payrecon_disputes_open",
			Help: "Disputes not decided yet, by the provider's status (warning_* for an inquiry), read from the database.",
		}, []string{"status"}),
		disputedAmount: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "payrecon_disputes_open_amount",
			Help: "Money in the disputes not decided yet, per currency and account (the disputed purchase's), in the currency's major unit, read from the database.",
		}, []string{"currency", "account"}),
		evidenceDue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "payrecon_dispute_evidence_due_seconds",
			Help: "Seconds until the soonest evidence due date of the chargebacks waiting for the merchant's evidence, on the database's clock; negative once past due; absent when none waits.",
		}, nil),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.purchases, m.oldestUncertain, m.refunds, m.oldestRefund, m.refundMoves, m.escalationsOpen, m.findingsOpen, m.transitions, m.providerCalls,
		m.providerLatency, m.webhookEvents, m.webhookApplied, m.applyLag, m.inboxPending, m.inboxOldest, m.inboxFailed, m.jobsClaimed, m.leaseLost, m.resolution,
		m.workerRunning, m.sweepRuns, m.sweepDuration, m.sweepItems, m.sweepLastOK, m.opsLogins,
		m.outboxPending, m.outboxDead, m.outboxOldest, m.outboxDelivered, m.outboxLatency,
		m.budgetRate, m.budgetThrottled, m.budgetWait, m.sweptEvents, m.eventWatermark,
		m.disputesOpen, m.disputedAmount, m.evidenceDue,
	)
	for _, st := range openDisputeStatuses {
		m.disputesOpen.WithLabelValues(st)
	}
	for _, o := range relay.DeliveryOutcomes {
		m.outboxDelivered.WithLabelValues(string(o))
	}
	// The throttling alert takes rate() of every class of every account
	// from the start, and the operator list shows 0 for each account.
	for _, a := range m.accounts.values() {
		for _, c := range reconcile.BudgetClasses {
			m.budgetThrottled.WithLabelValues(string(c), a)
		}
		m.escalationsOpen.WithLabelValues(a)
	}
	for _, s := range statemachine.States {
		m.purchases.WithLabelValues(string(s))
	}
	// Every refund state is present from the start, at 0 until the first
	// refresh.
	for _, s := range statemachine.Refund.States() {
		m.refunds.WithLabelValues(string(s))
	}
	// Every finding kind is present from the start, at 0 until the first
	// refresh, so that the audit alert sees a series for each.
	for _, k := range reconcile.FindingKinds {
		m.findingsOpen.WithLabelValues(string(k))
	}
	// Counters the alerts take increase() of start at 0, so that the
	// first event after a restart is an increase and not a new series.
	for _, typ := range provider.EventTypes {
		for _, o := range receiptOutcomes {
			m.webhookEvents.WithLabelValues(typ, string(o))
		}
		for _, o := range appliedOutcomes {
			m.webhookApplied.WithLabelValues(typ, string(o))
		}
	}
	m.webhookEvents.WithLabelValues(reconcile.UnverifiedEventType, string(reconcile.EventRejected))
	for _, o := range opsLoginOutcomes {
		m.opsLogins.WithLabelValues(o)
	}
	return m
}

// opsLoginOutcomes are the outcomes of an attempt at the operator token,
// as reconcile/http names them (LoginSuccess, LoginFailure,
// LoginThrottled).
var opsLoginOutcomes = []string{"success", "failure", "throttled"}

// otherEventType is the type label of every verified event whose type
// payrecon does not act on: the label takes known types only, so that
// the series stay bounded whatever a provider sends.
const otherEventType = "other"

// eventTypeLabel is eventType if payrecon acts on it (provider.EventTypes)
// or it is reconcile.UnverifiedEventType, otherwise otherEventType.
func eventTypeLabel(eventType string) string {
	if eventType == reconcile.UnverifiedEventType || slices.Contains(provider.EventTypes, eventType) {
		return eventType
	}
	return otherEventType
}

// receiptOutcomes are the endpoint's outcomes of an event that passed
// verification.
var receiptOutcomes = []reconcile.EventOutcome{reconcile.EventReceived, reconcile.EventDuplicate, reconcile.EventConflict}

// appliedOutcomes are the applier's outcomes of an event.
var appliedOutcomes = []reconcile.EventOutcome{
	reconcile.EventApplied, reconcile.EventStale, reconcile.EventContradiction, reconcile.EventConfirming,
	reconcile.EventUnmatched, reconcile.EventFinding, reconcile.EventPending, reconcile.EventFailed,
}

// BudgetRate implements budget.Observer: the platform's budget.
func (m *Metrics) BudgetRate(class reconcile.BudgetClass, rate float64) {
	m.AccountBudgetRate(provider.PlatformAccount, class, rate)
}

// BudgetThrottled implements budget.Observer: the platform's budget.
func (m *Metrics) BudgetThrottled(class reconcile.BudgetClass) {
	m.AccountBudgetThrottled(provider.PlatformAccount, class)
}

// BudgetWait implements budget.Observer: the platform's budget.
func (m *Metrics) BudgetWait(class reconcile.BudgetClass, waited time.Duration) {
	m.AccountBudgetWait(provider.PlatformAccount, class, waited)
}

// AccountBudgetRate implements budget.AccountObserver.
func (m *Metrics) AccountBudgetRate(account string, class reconcile.BudgetClass, rate float64) {
	m.budgetRate.WithLabelValues(string(class), m.AccountLabel(account)).Set(rate)
}

// AccountBudgetThrottled implements budget.AccountObserver.
func (m *Metrics) AccountBudgetThrottled(account string, class reconcile.BudgetClass) {
	m.budgetThrottled.WithLabelValues(string(class), m.AccountLabel(account)).Inc()
}

// AccountBudgetWait implements budget.AccountObserver.
func (m *Metrics) AccountBudgetWait(account string, class reconcile.BudgetClass, waited time.Duration) {
	m.budgetWait.WithLabelValues(string(class), m.AccountLabel(account)).Observe(waited.Seconds())
}

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry returns the registry, for tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Transition implements reconcile.Observer: a purchase of the
// platform's own account.
func (m *Metrics) Transition(from, to statemachine.State, cause reconcile.Cause) {
	m.AccountTransition(provider.PlatformAccount, from, to, cause)
}

// AccountTransition implements reconcile.AccountObserver.
func (m *Metrics) AccountTransition(account string, from, to statemachine.State, cause reconcile.Cause) {
	m.transitions.WithLabelValues(string(from), string(to), string(cause), m.AccountLabel(account)).Inc()
}

// RefundTransition implements reconcile.Observer: it counts a refund's
// committed transition in payrecon_refund_transitions_total, apart from
// the purchases'.
func (m *Metrics) RefundTransition(from, to statemachine.State, cause reconcile.Cause) {
	m.refundMoves.WithLabelValues(string(from), string(to), string(cause)).Inc()
}

// ProviderCall implements reconcile.Observer: a call on behalf of the
// platform's own account.
func (m *Metrics) ProviderCall(op provider.Op, outcome provider.Outcome, took time.Duration) {
	m.AccountProviderCall(provider.PlatformAccount, op, outcome, took)
}

// AccountProviderCall implements reconcile.AccountObserver.
func (m *Metrics) AccountProviderCall(account string, op provider.Op, outcome provider.Outcome, took time.Duration) {
	a := m.AccountLabel(account)
	m.providerCalls.WithLabelValues(string(op), string(outcome), a).Inc()
	m.providerLatency.WithLabelValues(string(op), a).Observe(took.Seconds())
}

// JobsClaimed implements reconcile.Observer.
func (m *Metrics) JobsClaimed(n int) { m.jobsClaimed.Add(float64(n)) }

// LeaseLost implements reconcile.Observer.
func (m *Metrics) LeaseLost() { m.leaseLost.Inc() }

// Resolved implements reconcile.Observer.
func (m *Metrics) Resolved(uncertainFor time.Duration) { m.resolution.Observe(uncertainFor.Seconds()) }

// Webhook counts one webhook event.
func (m *Metrics) Webhook(eventType string, outcome reconcile.EventOutcome) {
	m.webhookEvents.WithLabelValues(eventTypeLabel(eventType), string(outcome)).Inc()
}

// EventApplied implements reconcile.Observer.
func (m *Metrics) EventApplied(eventType string, outcome reconcile.EventOutcome, sinceReceipt time.Duration) {
	m.webhookApplied.WithLabelValues(eventTypeLabel(eventType), string(outcome)).Inc()
	if outcome != reconcile.EventPending && outcome != reconcile.EventFailed {
		m.applyLag.Observe(max(sinceReceipt, 0).Seconds())
	}
}

// OpsLogin counts one attempt at the operator token: outcome is
// "success", "failure" or "throttled". It implements the HTTP server's
// LoginObserver.
func (m *Metrics) OpsLogin(outcome string) { m.opsLogins.WithLabelValues(outcome).Inc() }

// WorkerRunning sets whether this process runs the worker loop.
func (m *Metrics) WorkerRunning(running bool) {
	if running {
		m.workerRunning.Set(1)
	} else {
		m.workerRunning.Set(0)
	}
}

// Sweep records one run of a scheduled sweep: result is "ok", "error" or
// "skipped".
func (m *Metrics) Sweep(name, result string, took time.Duration, items int, at time.Time) {
	m.sweepRuns.WithLabelValues(name, result).Inc()
	if result == "skipped" {
		return
	}
	m.sweepDuration.WithLabelValues(name).Observe(took.Seconds())
	m.sweepItems.WithLabelValues(name).Add(float64(items))
	if result == "ok" {
		m.sweepLastOK.WithLabelValues(name).Set(float64(at.Unix()))
	}
}

// EventsSwept implements reconcile.EventSweepObserver: it counts the
// events of the run by outcome, and sets the watermark.
func (m *Metrics) EventsSwept(rep reconcile.EventSweepReport) {
	for o, n := range rep.Outcomes {
		m.sweptEvents.WithLabelValues(string(o)).Add(float64(n))
	}
	if rep.Refused > 0 {
		m.sweptEvents.WithLabelValues("refused").Add(float64(rep.Refused))
	}
	if !rep.Watermark.IsZero() {
		m.eventWatermark.Set(float64(rep.Watermark.Unix()))
	}
}

// OutboxDelivery implements relay.Observer.
func (m *Metrics) OutboxDelivery(outcome relay.DeliveryOutcome, sinceCommit time.Duration) {
	m.outboxDelivered.WithLabelValues(string(outcome)).Inc()
	if outcome == relay.DeliveryDelivered {
		m.outboxLatency.Observe(sinceCommit.Seconds())
	}
}

// Refresh reads the gauges from the store, in one transaction: purchases
// and refunds by state, open escalations by account, open audit findings
// by kind,
// and the ages of the oldest uncertain purchase and refund, measured on
// the store's clock (the one that stamped them).
func (m *Metrics) Refresh(ctx context.Context, st reconcile.Store) error {
	var (
		counts       map[statemachine.State]int
		refunds      map[statemachine.State]int
		escalated    map[string]int
		findings     map[reconcile.FindingKind]int
		oldest       time.Time
		oldestRefund time.Time
		outbox       reconcile.OutboxStats
		inbox        reconcile.InboxBacklog
		disputes     []reconcile.Dispute
		now          time.Time
	)
	err := st.InTx(ctx, func(tx reconcile.Tx) error {
		var err error
		if now, err = tx.Now(ctx); err != nil {
			return err
		}
		if counts, err = tx.CountByState(ctx); err != nil {
			return err
		}
		if escalated, err = tx.CountEscalatedByAccount(ctx); err != nil {
			return err
		}
		if findings, err = tx.CountOpenFindings(ctx); err != nil {
			return err
		}
		if refunds, err = tx.CountRefundsByState(ctx); err != nil {
			return err
		}
		if oldestRefund, err = tx.OldestUncertainRefundSince(ctx); err != nil {
			return err
		}
		if outbox, err = tx.OutboxStats(ctx); err != nil {
			return err
		}
		if inbox, err = tx.InboxBacklog(ctx); err != nil {
			return err
		}
		if disputes, err = tx.ListOpenDisputes(ctx, reconcile.AnyAccount); err != nil {
			return err
		}
		oldest, err = tx.OldestUncertainSince(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("prometheus: refresh gauges: %w", err)
	}
	for _, s := range statemachine.States {
		m.purchases.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
	m.setByAccount(m.escalationsOpen, escalated)
	for _, k := range reconcile.FindingKinds {
		m.findingsOpen.WithLabelValues(string(k)).Set(float64(findings[k]))
	}
	for _, s := range statemachine.Refund.States() {
		m.refunds.WithLabelValues(string(s)).Set(float64(refunds[s]))
	}
	m.oldestUncertain.Set(ageSince(oldest, now))
	m.oldestRefund.Set(ageSince(oldestRefund, now))
	m.outboxPending.Set(float64(outbox.Pending))
	m.outboxDead.Set(float64(outbox.Dead))
	m.outboxOldest.Set(ageSince(outbox.Oldest, now))
	m.inboxPending.Set(float64(inbox.Pending))
	m.inboxOldest.Set(ageSince(inbox.Oldest, now))
	m.inboxFailed.Set(float64(inbox.Failed))
	m.Disputes(disputes, now)
	return nil
}

// openDisputeStatuses are the provider's statuses of a dispute not
// decided yet: the values of payrecon_disputes_open's status label.
var openDisputeStatuses = []string{
	provider.DisputeWarningNeedsResponse, provider.DisputeWarningUnderReview,
	provider.DisputeNeedsResponse, provider.DisputeUnderReview,
}

// Disputes sets the dispute gauges from the open disputes ds at now, as
// Refresh does after reading them: the money per currency and account
// (each dispute's Account, labelled by AccountLabel), the count per
// status, and the soonest evidence due date.
func (m *Metrics) Disputes(ds []reconcile.Dispute, now time.Time) {
	type currencyOf struct{ currency, account string }
	byStatus := map[string]int{}
	amounts := map[currencyOf]int64{}
	var soonest time.Duration
	due := false
	for _, d := range ds {
		byStatus[d.ProviderStatus]++
		amounts[currencyOf{d.Currency, m.AccountLabel(d.Account)}] += d.Amount
		if left, ok := reconcile.EvidenceTimeLeft(d, now); ok && d.Chargeback() && (!due || left < soonest) {
			soonest, due = left, true
		}
	}
	m.disputesOpen.Reset()
	for _, st := range openDisputeStatuses {
		m.disputesOpen.WithLabelValues(st).Set(float64(byStatus[st]))
	}
	m.disputedAmount.Reset()
	for c, n := range amounts {
		m.disputedAmount.WithLabelValues(c.currency, c.account).Set(majorUnits(n, c.currency))
	}
	m.evidenceDue.Reset()
	if due {
		m.evidenceDue.WithLabelValues().Set(soonest.Seconds())
	}
}

// majorUnits is amount, in currency's minor units, in its major unit.
func majorUnits(amount int64, currency string) float64 {
	return float64(amount) / math.Pow10(provider.MinorDigits(currency))
}

// ageSince returns the seconds from since to now, or 0 when since is
// zero or not before now.
func ageSince(since, now time.Time) float64 {
	if since.IsZero() || !now.After(since) {
		return 0
	}
	return now.Sub(since).Seconds()
}
