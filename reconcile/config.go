package reconcile

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// Config configures a Service. The zero value of every field means its
// documented default; DefaultConfig returns them all, and is their one
// source (payrecon's command-line flags take theirs from it).
type Config struct {
	// WorkerID names this worker in leases and in the audit.
	// Default: the host name and process id, "host-1234".
	WorkerID string

	// LeaseDuration is how long a claim on a job is valid. It must exceed
	// ProviderTimeout by enough for two commits, because a worker whose lease
	// has expired may not write. Default 30s.
	LeaseDuration time.Duration

	// ProviderTimeout bounds one provider call. Default 10s.
	ProviderTimeout time.Duration

	// Backoff lists the delays before successive checks of a purchase whose
	// outcome is unknown; the last one repeats. Default 30s, 2m, 10m, 1h
	// (then hourly).
	Backoff []time.Duration

	// MaxAttempts is how many times a job may run before an unresolved
	// purchase is escalated to the operators. Default 10.
	MaxAttempts int

	// MaxUncertainAge is how long a purchase may stay uncertain before it is
	// escalated. Default 24h.
	MaxUncertainAge time.Duration

	// EscalatedInterval is the slow cadence at which an escalated purchase
	// keeps being checked, so that a late answer still resolves it.
	// Default 6h.
	EscalatedInterval time.Duration

	// KeyRetention is how long the provider keeps an idempotency key,
	// measured from the first attempt. Default 24h (Stripe's).
	KeyRetention time.Duration

	// KeyReplayMargin stops replays this long before KeyRetention ends, so
	// that a replay never reaches a provider that has just forgotten the key
	// (which would create a second charge). It must exceed LeaseDuration.
	// Default 1h.
	KeyReplayMargin time.Duration

	// BatchSize caps the jobs claimed by one poll. Default 16.
	BatchSize int

	// Concurrency is how many jobs one worker runs at once. Default 4.
	Concurrency int

	// ApplyWindow is how long the worker holds the first provider answer
	// back while calls are still out, so that the answers that follow
	// are applied with it in one transaction (a group is written at once
	// when no call is out, or when it reaches BatchSize or Concurrency,
	// whichever is larger). Default 2ms.
	ApplyWindow time.Duration

	// PollInterval is the wait between polls when no job is due.
	// Default 1s.
	PollInterval time.Duration

	// ShutdownGrace is how long in-flight jobs may finish after the worker
	// is told to stop; after it their provider calls are cancelled (their
	// outcome recorded as unknown) and every remaining lease is released.
	// Default 15s.
	ShutdownGrace time.Duration

	// MaxAmount caps a purchase's amount, in minor units. Default
	// 99_999_999 (999,999.99 in a two-decimal currency).
	MaxAmount int64

	// DefaultPaymentMethod is used when a purchase names none. Default
	// "pm_card_visa", Stripe's test-mode card.
	DefaultPaymentMethod string

	// Accounts are the provider's connected accounts (acct_…) this
	// deployment serves besides the platform's own, which it always
	// serves. A purchase may name one of them (NewPurchase.Account), and
	// the Provider must then act on behalf of accounts (provider.Accounts).
	// Default none: the platform's account only.
	Accounts []string

	// UndeclaredAccounts is what becomes of a purchase naming a
	// well-formed account that Accounts does not declare. Default
	// AccountsRefuse: it is refused, nothing stored.
	UndeclaredAccounts AccountPolicy

	// ProviderName names the provider in audit findings and runs.
	// Default "stripe".
	ProviderName string

	// AuditChunk is the span of provider creation times an audit run
	// matches per transaction; the run's watermark advances by one chunk
	// at a time. Default 15m.
	AuditChunk time.Duration

	// AuditOverlap is how far back before the last run's watermark the
	// periodic audit starts, so that consecutive windows overlap. Default
	// 1h.
	AuditOverlap time.Duration

	// AuditSettle is how long before now the periodic audit's window ends,
	// so that payments still being created or listed are left to the next
	// run. Default 5m.
	AuditSettle time.Duration

	// AuditFirstWindow is how far back the first periodic audit looks.
	// Default 25h: the provider's key retention and a margin.
	AuditFirstWindow time.Duration

	// AuditListTimeout bounds one listing of a chunk, every page included.
	// Default 2m.
	AuditListTimeout time.Duration

	// RestoreSkew is how far the provider's clock may run behind the
	// store's: the check for a restored backup (CheckRestore) lists the
	// provider's payments and refunds from the books' send horizon less
	// this much. Default 10m.
	RestoreSkew time.Duration

	// EventSweepOverlap is how far back before its watermark the event
	// sweep (SweepEvents) lists the provider's events, so that an event
	// created before the watermark but listed late is still read; the
	// inbox stores each event once. Default 10m.
	EventSweepOverlap time.Duration

	// EventSweepFirstWindow is how far back the first event sweep lists
	// the provider's events, with no watermark yet. At most the provider's
	// retention of events (Stripe's 30 days, 720h). Default 24h.
	EventSweepFirstWindow time.Duration

	// EventSweepChunk is how many listed events the event sweep applies
	// per transaction, with its watermark. Default 100.
	EventSweepChunk int

	// EventSweepPage is how many events the event sweep asks for per page
	// of the provider's log, each page one call and one token of the rate
	// budget: 1 to provider.MaxEventPage. Default provider.MaxEventPage
	// (100).
	EventSweepPage int

	// InboxBatch is how many pending webhook events the applier claims
	// and applies per transaction (ApplyPending). Default 256.
	InboxBatch int

	// InboxMaxAttempts is how many times the applier tries a pending
	// event whose application fails before it leaves it to an operator
	// (EventFailed). Default 8.
	InboxMaxAttempts int

	// InboxGather is how long the webhook applier (reconcile/applier)
	// waits, once woken by a receipt, for more events to join its batch:
	// fewer transactions, each event a little later. Default 10ms.
	InboxGather time.Duration

	// InboxBackoff is the wait before the applier tries a failed event
	// again: InboxBackoff after the first failure, doubling each time, at
	// most 64 × InboxBackoff. Default 1s.
	InboxBackoff time.Duration

	// GroupCommitMax caps how many concurrent webhooks and purchase API
	// requests share one transaction (group commit, groupcommit.go).
	// Default 64.
	GroupCommitMax int

	// GroupCommitLeaders is how many group transactions may be in flight
	// at once; requests that arrive while they all are wait for the next
	// one free and share it. Default 1: with the webhooks' receipt a
	// single insert, one leader's larger groups cost the machine less and
	// answer no later (docs/capacity.md, 2026-12-06).
	GroupCommitLeaders int

	// GroupCommitOff gives every webhook and purchase API request a
	// transaction of its own. Default false: they are grouped.
	GroupCommitOff bool

	// Now is the worker's own clock. Default time.Now. Protocol decisions
	// use the store's clock (see Store.Now): this one only measures time
	// elapsed within one lease or one call. Tests inject a fake one.
	Now func() time.Time

	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger

	// Observer is told about transitions, provider calls and claims, for
	// metrics. Default: none.
	Observer Observer

	// Budget is the rate budget of the platform's own provider account,
	// which every provider call on its behalf waits for (a budget.Shared
	// of package reconcile/budget, shared by every worker through the
	// store). Default Unlimited: calls never wait.
	Budget Budget

	// AccountBudgets hands out the rate budget of each connected account,
	// as the provider limits each account apart. Default nil: the
	// connected accounts' calls wait for Budget, the platform's, which
	// keeps them all within one account's limits together.
	AccountBudgets AccountBudgets
}

// DefaultConfig returns the default of every field of Config, as
// documented on the field: what New uses for a zero field. Each call
// returns a Backoff of its own. Observer is nil: none. Budget is nil:
// Unlimited.
func DefaultConfig() Config {
	return Config{
		WorkerID:              DefaultWorkerID(),
		LeaseDuration:         30 * time.Second,
		ProviderTimeout:       10 * time.Second,
		Backoff:               []time.Duration{30 * time.Second, 2 * time.Minute, 10 * time.Minute, time.Hour},
		MaxAttempts:           10,
		MaxUncertainAge:       24 * time.Hour,
		EscalatedInterval:     6 * time.Hour,
		KeyRetention:          24 * time.Hour,
		KeyReplayMargin:       time.Hour,
		BatchSize:             16,
		Concurrency:           4,
		ApplyWindow:           2 * time.Millisecond,
		PollInterval:          time.Second,
		ShutdownGrace:         15 * time.Second,
		MaxAmount:             99_999_999,
		DefaultPaymentMethod:  "pm_card_visa",
		UndeclaredAccounts:    AccountsRefuse,
		ProviderName:          "stripe",
		AuditChunk:            15 * time.Minute,
		AuditOverlap:          time.Hour,
		AuditSettle:           5 * time.Minute,
		AuditFirstWindow:      25 * time.Hour,
		AuditListTimeout:      2 * time.Minute,
		RestoreSkew:           10 * time.Minute,
		EventSweepOverlap:     10 * time.Minute,
		EventSweepFirstWindow: 24 * time.Hour,
		EventSweepChunk:       100,
		EventSweepPage:        provider.MaxEventPage,
		InboxBatch:            256,
		InboxMaxAttempts:      8,
		InboxBackoff:          time.Second,
		InboxGather:           10 * time.Millisecond,
		GroupCommitMax:        64,
		GroupCommitLeaders:    1,
		Now:                   time.Now,
		Logger:                slog.Default(),
	}
}

// withDefaults returns c with every zero field set to its default (from
// DefaultConfig), or an error naming the first invalid field.
func (c Config) withDefaults() (Config, error) {
	def := DefaultConfig()
	if c.WorkerID == "" {
		c.WorkerID = def.WorkerID
	}
	setDuration(&c.LeaseDuration, def.LeaseDuration)
	setDuration(&c.ProviderTimeout, def.ProviderTimeout)
	if len(c.Backoff) == 0 {
		c.Backoff = def.Backoff
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = def.MaxAttempts
	}
	setDuration(&c.MaxUncertainAge, def.MaxUncertainAge)
	setDuration(&c.EscalatedInterval, def.EscalatedInterval)
	setDuration(&c.KeyRetention, def.KeyRetention)
	setDuration(&c.KeyReplayMargin, def.KeyReplayMargin)
	if c.BatchSize == 0 {
		c.BatchSize = def.BatchSize
	}
	if c.Concurrency == 0 {
		c.Concurrency = def.Concurrency
	}
	setDuration(&c.ApplyWindow, def.ApplyWindow)
	setDuration(&c.PollInterval, def.PollInterval)
	setDuration(&c.ShutdownGrace, def.ShutdownGrace)
	if c.MaxAmount == 0 {
		c.MaxAmount = def.MaxAmount
	}
	if c.DefaultPaymentMethod == "" {
		c.DefaultPaymentMethod = def.DefaultPaymentMethod
	}
	if c.ProviderName == "" {
		c.ProviderName = def.ProviderName
	}
	setDuration(&c.AuditChunk, def.AuditChunk)
	setDuration(&c.AuditOverlap, def.AuditOverlap)
	setDuration(&c.AuditSettle, def.AuditSettle)
	setDuration(&c.AuditFirstWindow, def.AuditFirstWindow)
	setDuration(&c.AuditListTimeout, def.AuditListTimeout)
	setDuration(&c.RestoreSkew, def.RestoreSkew)
	setDuration(&c.EventSweepOverlap, def.EventSweepOverlap)
	setDuration(&c.EventSweepFirstWindow, def.EventSweepFirstWindow)
	if c.EventSweepChunk == 0 {
		c.EventSweepChunk = def.EventSweepChunk
	}
	if c.EventSweepPage == 0 {
		c.EventSweepPage = def.EventSweepPage
	}
	if c.InboxBatch == 0 {
		c.InboxBatch = def.InboxBatch
	}
	if c.InboxMaxAttempts == 0 {
		c.InboxMaxAttempts = def.InboxMaxAttempts
	}
	setDuration(&c.InboxBackoff, def.InboxBackoff)
	setDuration(&c.InboxGather, def.InboxGather)
	if c.GroupCommitMax == 0 {
		c.GroupCommitMax = def.GroupCommitMax
	}
	if c.GroupCommitLeaders == 0 {
		c.GroupCommitLeaders = def.GroupCommitLeaders
	}
	if c.Now == nil {
		c.Now = def.Now
	}
	if c.Logger == nil {
		c.Logger = def.Logger
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	if c.Budget == nil {
		c.Budget = Unlimited{}
	}

	var errs []error
	for i, d := range c.Backoff {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("backoff[%d] = %s: must be positive", i, d))
		}
	}
	if c.LeaseDuration < 2*c.ProviderTimeout {
		errs = append(errs, fmt.Errorf("lease duration %s must be at least twice the provider timeout %s", c.LeaseDuration, c.ProviderTimeout))
	}
	if c.KeyReplayMargin >= c.KeyRetention {
		errs = append(errs, fmt.Errorf("key replay margin %s must be shorter than the key retention %s", c.KeyReplayMargin, c.KeyRetention))
	}
	if c.KeyReplayMargin <= c.LeaseDuration {
		// A replay is decided before the lease's last fence and sent before
		// the lease ends: the margin must cover that whole window, or a
		// replay could reach a provider that has just forgotten the key.
		errs = append(errs, fmt.Errorf("key replay margin %s must be longer than the lease duration %s", c.KeyReplayMargin, c.LeaseDuration))
	}
	for name, v := range map[string]int{"max attempts": c.MaxAttempts, "batch size": c.BatchSize, "concurrency": c.Concurrency,
		"group commit max": c.GroupCommitMax, "group commit leaders": c.GroupCommitLeaders, "event sweep chunk": c.EventSweepChunk,
		"inbox batch": c.InboxBatch, "inbox max attempts": c.InboxMaxAttempts} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s %d: must be positive", name, v))
		}
	}
	for name, d := range map[string]time.Duration{
		"lease duration": c.LeaseDuration, "provider timeout": c.ProviderTimeout,
		"max uncertain age": c.MaxUncertainAge, "escalated interval": c.EscalatedInterval,
		"key retention": c.KeyRetention, "key replay margin": c.KeyReplayMargin,
		"poll interval": c.PollInterval, "shutdown grace": c.ShutdownGrace, "apply window": c.ApplyWindow,
		"audit chunk": c.AuditChunk, "audit overlap": c.AuditOverlap, "audit settle": c.AuditSettle,
		"audit first window": c.AuditFirstWindow, "audit list timeout": c.AuditListTimeout,
		"restore skew": c.RestoreSkew, "inbox backoff": c.InboxBackoff, "inbox gather": c.InboxGather,
		"event sweep overlap": c.EventSweepOverlap, "event sweep first window": c.EventSweepFirstWindow,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %s: must be positive", name, d))
		}
	}
	if c.EventSweepFirstWindow > providerEventRetention {
		errs = append(errs, fmt.Errorf("event sweep first window %s: the provider keeps its events %s, at most that", c.EventSweepFirstWindow, providerEventRetention))
	}
	if c.EventSweepPage < 0 || c.EventSweepPage > provider.MaxEventPage {
		errs = append(errs, fmt.Errorf("event sweep page %d: must be 1 to %d", c.EventSweepPage, provider.MaxEventPage))
	}
	if c.MaxAmount < 0 {
		errs = append(errs, fmt.Errorf("max amount %d: must be positive", c.MaxAmount))
	}
	errs = append(errs, c.checkAccounts()...)
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("reconcile: config: %w", err)
	}
	return c, nil
}

func setDuration(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}

// DefaultWorkerID returns "host-pid", the default Config.WorkerID.
func DefaultWorkerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "payrecon"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

// backoff returns the delay before check number n (0-based) of an
// unresolved purchase.
func (c Config) backoff(n int) time.Duration {
	if n < 0 {
		n = 0
	}
	if n >= len(c.Backoff) {
		return c.Backoff[len(c.Backoff)-1]
	}
	return c.Backoff[n]
}
