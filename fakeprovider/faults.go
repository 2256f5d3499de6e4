package fakeprovider

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// Fault is a misbehaviour injected into one Create call, or one
// CreateRefund call. The zero value, NoFault, means the call behaves.
type Fault string

// The faults. FailBefore, Timeout and LostReply act on the request and
// apply to every Create, replays included; Processing, ProcessingDecline,
// StaleProcessing and Decline shape a new charge and have no effect on a
// call that makes none (a replay, a mismatch, a key in use).
//
// The same faults apply to CreateRefund calls (Config.RefundFaults,
// Fake.ScriptRefund), acted out on the refund: FailBefore, Timeout,
// LostReply and Reject as for a charge (no refund, no refund, a refund
// whose reply is lost, a refusal); Processing leaves the refund pending
// until Config.SettleAfter has passed, then succeeded; ProcessingDecline
// the same, settling to failed (RefundFailureReason); StaleProcessing
// makes it succeeded at once, but the next GetRefund of it answers
// pending; Decline makes it failed at once; DeclineThenSucceed makes it
// failed at first, succeeded once Config.SettleAfter has passed.
const (
	NoFault Fault = ""
	// FailBefore: the provider refuses before acting (a refused connection,
	// a 429). No charge; the error wraps provider.ErrRetryLater.
	FailBefore Fault = "fail_before"
	// Timeout: the request times out before the provider acts. No charge,
	// but the caller cannot know that: the error wraps
	// context.DeadlineExceeded, not provider.ErrRetryLater.
	Timeout Fault = "timeout"
	// LostReply: the provider charges and saves the key's response, then
	// the reply is lost. The error wraps io.ErrUnexpectedEOF.
	LostReply Fault = "lost_reply"
	// Processing: the charge is created processing and settles to
	// succeeded once Config.SettleAfter has passed.
	Processing Fault = "processing"
	// ProcessingDecline: the charge is created processing and settles to
	// declined (requires_payment_method, "card_declined") once
	// Config.SettleAfter has passed, as a failed bank debit does.
	ProcessingDecline Fault = "processing_decline"
	// StaleProcessing: the charge is final at once, but the next Status
	// call for it answers processing (a stale read); later ones the truth.
	StaleProcessing Fault = "stale_processing"
	// Decline: the card is declined: status requires_payment_method,
	// Outcome Declined, Reason "card_declined".
	Decline Fault = "decline"
	// Reject: the provider refuses the request as invalid without acting
	// on it (as Stripe does a 400 or a 401); the error wraps
	// ErrInvalidRequest and provider.ErrRejected. Script only.
	Reject Fault = "reject"
	// DeclineThenSucceed: the card is declined at first, and once
	// Config.SettleAfter has passed the charge turns out to have succeeded
	// after all (a bank's late approval): the provider's truth contradicts
	// its first answer. Script only; it has no probability in Faults.
	DeclineThenSucceed Fault = "decline_then_succeed"
)

// drawOrder is the fixed order in which one uniform draw in [0,1) is cut
// into faults: changing it changes what every seed produces.
var drawOrder = []Fault{FailBefore, Timeout, LostReply, Processing, ProcessingDecline, StaleProcessing, Decline}

// Faults gives the probability, in [0,1], that a Create call gets each
// fault. The probabilities must sum to at most 1: each call gets at most
// one fault.
type Faults struct {
	FailBefore        float64
	Timeout           float64
	LostReply         float64
	Processing        float64
	ProcessingDecline float64
	StaleProcessing   float64
	Decline           float64
}

func (fs *Faults) prob(f Fault) *float64 {
	switch f {
	case FailBefore:
		return &fs.FailBefore
	case Timeout:
		return &fs.Timeout
	case LostReply:
		return &fs.LostReply
	case Processing:
		return &fs.Processing
	case ProcessingDecline:
		return &fs.ProcessingDecline
	case StaleProcessing:
		return &fs.StaleProcessing
	case Decline:
		return &fs.Decline
	}
	return nil
}

// sumTolerance absorbs float rounding, so that 0.1+0.2+0.7 counts as 1.
const sumTolerance = 1e-9

// Validate reports the first probability outside [0,1], or a sum over 1.
func (fs Faults) Validate() error { return fs.validate("") }

// validate is Validate with the faults' names in errors prefixed: "" for
// Config.Faults, refundPrefix for Config.RefundFaults.
func (fs Faults) validate(prefix string) error {
	var sum float64
	for _, f := range drawOrder {
		p := *fs.prob(f)
		if !(p >= 0 && p <= 1) { // also rejects NaN
			return fmt.Errorf("fake faults: %s%s=%v: probability must be in [0,1]", prefix, f, p)
		}
		sum += p
	}
	if sum > 1+sumTolerance {
		what := "probabilities"
		if prefix != "" {
			what = strings.TrimSuffix(prefix, "_") + " " + what
		}
		return fmt.Errorf("fake faults: %s sum to %v, must be at most 1", what, sum)
	}
	return nil
}

// refundPrefix starts the names of the refund faults in a spec
// (refund_lost_reply=P sets Config.RefundFaults.LostReply).
const refundPrefix = "refund_"

func (fs Faults) any() bool { return fs != Faults{} }

// pick maps a uniform draw u in [0,1) to a fault, cutting [0,1) into
// consecutive intervals in drawOrder.
func (fs Faults) pick(u float64) Fault {
	var edge float64
	for _, f := range drawOrder {
		edge += *fs.prob(f)
		if u < edge {
			return f
		}
	}
	return NoFault
}

// FaultError is the error Create (and CreateRefund) returns when an
// injected fault leaves the caller without an answer. Unwrap gives
// provider.ErrRetryLater for FailBefore, context.DeadlineExceeded for
// Timeout and io.ErrUnexpectedEOF for LostReply, so only FailBefore is
// retryable; after the others the outcome is unknown (provider.OutcomeOf
// gives provider.Unknown).
type FaultError struct {
	Fault      Fault
	PurchaseID string
	// RefundID is the refund request's RefundID for a CreateRefund's
	// fault; "" for a Create's.
	RefundID string
}

func (e *FaultError) Error() string {
	var what string
	switch e.Fault {
	case FailBefore:
		what = "refused before acting"
	case Timeout:
		what = "timed out, outcome unknown"
	case LostReply:
		what = "reply lost, outcome unknown"
	}
	if e.RefundID != "" {
		return fmt.Sprintf("fakeprovider: refund create for %s (purchase %s): injected %s: %s: %v", e.RefundID, e.PurchaseID, e.Fault, what, e.Unwrap())
	}
	return fmt.Sprintf("fakeprovider: create for %s: injected %s: %s: %v", e.PurchaseID, e.Fault, what, e.Unwrap())
}

// Unwrap returns the error the fault imitates.
func (e *FaultError) Unwrap() error {
	switch e.Fault {
	case FailBefore:
		return provider.ErrRetryLater
	case Timeout:
		return context.DeadlineExceeded
	case LostReply:
		return io.ErrUnexpectedEOF
	}
	return nil
}

// WebhookFault is a misbehaviour of webhook delivery. The names are those
// of the fault spec (ParseServerConfig).
type WebhookFault string

// The webhook faults.
const (
	// WebhookDrop: the event is never sent.
	WebhookDrop WebhookFault = "webhook_drop"
	// WebhookDuplicate: the event is sent twice: same id, byte-identical
	// payload, two copies delivered independently.
	WebhookDuplicate WebhookFault = "webhook_duplicate"
	// WebhookReorder: an event of a charge that is not final yet
	// (processing) is held until the charge's next event, and sent after
	// it: processing after succeeded. It does not apply to final events.
	// A refund's event in pending is held until the refund's next event
	// alike.
	WebhookReorder WebhookFault = "webhook_reorder"
	// WebhookDelay: the event is held until the next Tick, and sent after
	// the events that Tick emits.
	WebhookDelay WebhookFault = "webhook_delay"
	// WebhookStaleProcessing: after a final event (succeeded,
	// payment_failed, canceled), a payment_intent.processing event for
	// the same PaymentIntent is sent too, with a new event id, the
	// PaymentIntent in processing and created at the charge's creation, as
	// a late event would be. The extra event is marked with this fault.
	// After a final event of a refund (refund.created, .updated or
	// .failed in succeeded, failed or canceled), the extra event is a
	// refund.updated with the refund in pending, created at the refund's
	// creation.
	WebhookStaleProcessing WebhookFault = "webhook_stale_processing"
)

// WebhookFaults gives the probability, in [0,1], that an event gets each
// fault. Unlike Faults, they are independent: an event may be both
// duplicated and delayed. A dropped event gets no other fault (its stale
// follower, if drawn, is still sent). Every event takes one draw of each,
// in the order Drop, Duplicate, Reorder, Delay, StaleProcessing, from a
// math/rand/v2 source seeded by the Fake's Config.Seed and the purchase
// id, so a purchase's n-th event gets the same faults for a given seed
// however purchases interleave. A refund's events draw from a source of
// their own, seeded by the refund's metadata refund_id (see
// Server.ScriptRefundWebhooks).
type WebhookFaults struct {
	Drop            float64
	Duplicate       float64
	Reorder         float64
	Delay           float64
	StaleProcessing float64
}

var webhookFaultOrder = []WebhookFault{WebhookDrop, WebhookDuplicate, WebhookReorder, WebhookDelay, WebhookStaleProcessing}

func (fs *WebhookFaults) prob(f WebhookFault) *float64 {
	switch f {
	case WebhookDrop:
		return &fs.Drop
	case WebhookDuplicate:
		return &fs.Duplicate
	case WebhookReorder:
		return &fs.Reorder
	case WebhookDelay:
		return &fs.Delay
	case WebhookStaleProcessing:
		return &fs.StaleProcessing
	}
	return nil
}

// Validate reports the first probability outside [0,1].
func (fs WebhookFaults) Validate() error {
	for _, f := range webhookFaultOrder {
		if p := *fs.prob(f); !(p >= 0 && p <= 1) {
			return fmt.Errorf("fake faults: %s=%v: probability must be in [0,1]", f, p)
		}
	}
	return nil
}

func (fs WebhookFaults) any() bool { return fs != WebhookFaults{} }

// The fault spec.
//
// One comma-separated list of name=value items sets the faults of a Fake
// (ParseConfig: create faults, lags, seed) and of its Server
// (ParseServerConfig: webhook faults and delivery), and ParseSpec takes a
// list mixing both, as --fake-faults does. Both parsers split the list
// with parseItems, so that both report errors alike.

// ParseSpec parses a spec mixing ParseConfig's items and
// ParseServerConfig's (those whose name starts with "webhook_"), for one
// command-line flag, e.g.
//
//	lost_reply=0.1,processing=0.2,seed=7,webhook_drop=0.1,webhook_duplicate=0.2
func ParseSpec(spec string) (Config, ServerConfig, error) {
	var fake, server []string
	if strings.TrimSpace(spec) != "" {
		for i, item := range strings.Split(spec, ",") {
			switch name, _, _ := strings.Cut(item, "="); {
			case strings.TrimSpace(item) == "":
				return Config{}, ServerConfig{}, fmt.Errorf("fake faults: item %d is empty", i+1)
			case strings.HasPrefix(strings.TrimSpace(name), "webhook_"):
				server = append(server, item)
			default:
				fake = append(fake, item)
			}
		}
	}
	cfg, err := ParseConfig(strings.Join(fake, ","))
	if err != nil {
		return Config{}, ServerConfig{}, err
	}
	scfg, err := ParseServerConfig(strings.Join(server, ","))
	if err != nil {
		return Config{}, ServerConfig{}, err
	}
	return cfg, scfg, nil
}

// ParseConfig parses a fault spec into the Config fields it sets (Faults,
// RefundFaults, Seed, SearchLag, ListLag, SettleAfter, KeyRetention,
// RateLimits); the
// other fields are left zero for the caller to fill (Now) or for New to
// default.
//
// The spec is a comma-separated list of name=value items, for example
//
//	lost_reply=0.2,timeout=0.1,stale_processing=0.1,search_lag=30s,seed=7
//
// Names and values:
//
//	fail_before=P, timeout=P, lost_reply=P, processing=P,
//	processing_decline=P, stale_processing=P, decline=P
//	                   probability in [0,1] that a Create call gets the
//	                   fault; together at most 1
//	refund_fail_before=P, refund_timeout=P, ... (each of the above
//	                   prefixed with refund_)
//	                   probability in [0,1] that a CreateRefund call gets
//	                   the fault (Config.RefundFaults); together at most 1
//	search_lag=DUR     Config.SearchLag, a Go duration >= 0 ("30s")
//	list_lag=DUR       Config.ListLag, a Go duration >= 0 ("2s"): how long a
//	                   new charge stays out of List
//	settle_after=DUR   Config.SettleAfter, a Go duration > 0
//	key_retention=DUR  Config.KeyRetention, a Go duration > 0 ("24h")
//	seed=N             Config.Seed, a decimal int64
//	rate_global=N, rate_create=N, rate_retrieve=N, rate_search=N,
//	rate_list=N, rate_refund=N
//	                   Config.RateLimits: N calls of the class a second,
//	                   bursts of at most N, an int >= 0 (0: no limit)
//	rate_retry_after=DUR
//	                   Config.RateLimits.RetryAfter, a Go duration >= 0
//
// Space around items, names and values is ignored. An empty (or blank)
// spec means no faults. Each name may appear once. Errors name the
// offending item, as in "fake faults: lost_reply=1.5: probability must be
// in [0,1]".
func ParseConfig(spec string) (Config, error) {
	var cfg Config
	if err := parseItems(spec, func(name, value string) error { return setItem(&cfg, name, value) }); err != nil {
		return Config{}, err
	}
	if err := cfg.Faults.Validate(); err != nil {
		return Config{}, err
	}
	if err := cfg.RefundFaults.validate(refundPrefix); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func setItem(cfg *Config, name, value string) error {
	if class, ok := strings.CutPrefix(name, "rate_"); ok {
		if class == "retry_after" {
			return setDuration(&cfg.RateLimits.RetryAfter, value, true)
		}
		if p := cfg.RateLimits.ptr(class); p != nil {
			n, err := strconv.Atoi(value)
			if err != nil || n < 0 {
				return fmt.Errorf("not an int >= 0")
			}
			*p = n
			return nil
		}
	}
	if p := cfg.Faults.prob(Fault(name)); p != nil {
		return setProbability(p, value)
	}
	if fault, ok := strings.CutPrefix(name, refundPrefix); ok {
		if p := cfg.RefundFaults.prob(Fault(fault)); p != nil {
			return setProbability(p, value)
		}
	}
	switch name {
	case "seed":
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return fmt.Errorf("not an int64")
		}
		cfg.Seed = v
		return nil
	case "search_lag":
		return setDuration(&cfg.SearchLag, value, true)
	case "list_lag":
		return setDuration(&cfg.ListLag, value, true)
	case "settle_after":
		return setDuration(&cfg.SettleAfter, value, false)
	case "key_retention":
		return setDuration(&cfg.KeyRetention, value, false)
	}
	return fmt.Errorf("unknown name (want one of %s, each also prefixed with %s, search_lag, list_lag, settle_after, key_retention, seed, rate_<%s>, rate_retry_after)", faultNames(), refundPrefix, strings.Join(rateClasses, "|"))
}

// ParseServerConfig parses a webhook fault spec into the ServerConfig
// fields it sets (WebhookFaults, WebhookMaxAttempts, WebhookBackoff,
// WebhookMaxBackoff, TickEvery); the caller sets the rest (WebhookURL,
// WebhookSecret, ...). The syntax is ParseConfig's, for example
//
//	webhook_delay=0.2,webhook_duplicate=0.2,webhook_reorder=0.1,webhook_drop=0.1,webhook_stale_processing=0.1
//
// Names and values:
//
//	webhook_drop=P, webhook_duplicate=P, webhook_reorder=P,
//	webhook_delay=P, webhook_stale_processing=P
//	                           probability in [0,1] that an event gets the
//	                           fault, each independent (see WebhookFaults)
//	webhook_attempts=N         WebhookMaxAttempts, an int >= 1
//	webhook_backoff=DUR        WebhookBackoff, a Go duration > 0
//	webhook_max_backoff=DUR    WebhookMaxBackoff, a Go duration > 0
//	webhook_tick=DUR           TickEvery, a Go duration > 0
//
// The draws are seeded by the Fake's seed (seed=N of ParseConfig). An
// empty spec sets nothing. ParseSpec parses a spec mixing these items with
// ParseConfig's.
func ParseServerConfig(spec string) (ServerConfig, error) {
	var cfg ServerConfig
	err := parseItems(spec, func(name, value string) error { return setServerItem(&cfg, name, value) })
	return cfg, err
}

// parseItems splits spec into name=value items, for ParseConfig and
// ParseServerConfig alike, and calls set for each, wrapping its error with
// the item. A blank spec has no items.
func parseItems(spec string, set func(name, value string) error) error {
	if strings.TrimSpace(spec) == "" {
		return nil
	}
	seen := make(map[string]bool)
	for i, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return fmt.Errorf("fake faults: item %d is empty", i+1)
		}
		name, value, ok := strings.Cut(item, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" || value == "" {
			return fmt.Errorf("fake faults: %q: want name=value", item)
		}
		item = name + "=" + value
		if seen[name] {
			return fmt.Errorf("fake faults: %s: %s given twice", item, name)
		}
		seen[name] = true
		if err := set(name, value); err != nil {
			return fmt.Errorf("fake faults: %s: %w", item, err)
		}
	}
	return nil
}

func setServerItem(cfg *ServerConfig, name, value string) error {
	if p := cfg.WebhookFaults.prob(WebhookFault(name)); p != nil {
		return setProbability(p, value)
	}
	switch name {
	case "webhook_attempts":
		v, err := strconv.Atoi(value)
		if err != nil || v < 1 {
			return fmt.Errorf("not an int >= 1")
		}
		cfg.WebhookMaxAttempts = v
		return nil
	case "webhook_backoff":
		return setDuration(&cfg.WebhookBackoff, value, false)
	case "webhook_max_backoff":
		return setDuration(&cfg.WebhookMaxBackoff, value, false)
	case "webhook_tick":
		return setDuration(&cfg.TickEvery, value, false)
	}
	names := make([]string, len(webhookFaultOrder))
	for i, f := range webhookFaultOrder {
		names[i] = string(f)
	}
	return fmt.Errorf("unknown name (want one of %s, webhook_attempts, webhook_backoff, webhook_max_backoff, webhook_tick)", strings.Join(names, ", "))
}

// setProbability parses value into *p: a probability in [0,1].
func setProbability(p *float64, value string) error {
	v, err := strconv.ParseFloat(value, 64)
	if err != nil {
		return fmt.Errorf("not a number")
	}
	if !(v >= 0 && v <= 1) {
		return fmt.Errorf("probability must be in [0,1]")
	}
	*p = v
	return nil
}

// setDuration parses value into *d. Zero is refused where the field's zero
// value means "use the default", so that "0" cannot silently mean 1m.
func setDuration(d *time.Duration, value string, zeroOK bool) error {
	v, err := time.ParseDuration(value)
	switch {
	case err != nil:
		return fmt.Errorf("not a duration (want e.g. 30s, 1m, 24h)")
	case v < 0:
		return fmt.Errorf("duration must not be negative")
	case v == 0 && !zeroOK:
		return fmt.Errorf("duration must be positive")
	}
	*d = v
	return nil
}

func faultNames() string {
	names := make([]string, len(drawOrder))
	for i, f := range drawOrder {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}
