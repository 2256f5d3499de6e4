// Package reconcile owns payrecon's protocol: how a purchase is created,
// submitted to the provider under a stable idempotency key, and reconciled
// by leased jobs until its outcome is known.
//
// The package declares the small interfaces it consumes: Store (implemented
// by reconcile/postgres and reconcile/sqlite, both checked by the shared
// suite in internal/testing/storetest) and provider.Provider.
package reconcile

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// Cause says why a transition happened.
type Cause string

// The causes of transitions.
const (
	// CauseSubmit: created→submitted, before the first provider call.
	CauseSubmit Cause = "submit"
	// CauseSubmitResponse: the answer to the first create call.
	CauseSubmitResponse Cause = "submit_response"
	// CauseStatusQuery: a lookup by the provider's payment id.
	CauseStatusQuery Cause = "status_query"
	// CauseKeyReplay: the create replayed with the same key and parameters.
	CauseKeyReplay Cause = "key_replay"
	// CauseSearch: a search by the purchase's metadata.
	CauseSearch Cause = "search"
	// CauseLeaseLost: the worker holding the job died or stalled mid-call.
	CauseLeaseLost Cause = "lease_lost"
	// CauseWebhook: a verified provider event.
	CauseWebhook Cause = "webhook"
	// CauseOperator: a human decision, with evidence.
	CauseOperator Cause = "operator"
	// CauseFinding: a finding that a charge may already exist holds the
	// purchase back from another create; it is reconciled by status or
	// search instead.
	CauseFinding Cause = "finding"
	// CauseRecovery: the recovery audit after a restore found the charge
	// the provider holds for the purchase and re-linked it, to be settled
	// by a status query.
	CauseRecovery Cause = "recovery"
	// CauseAudit: the audit from the provider's side listed the record
	// (a dispute) in a state the books did not hold.
	CauseAudit Cause = "audit"
)

// EscalationReason says why a purchase is on the operator list.
type EscalationReason string

// The reasons a purchase is escalated.
const (
	EscalationUncertainTooLong    EscalationReason = "uncertain_too_long"
	EscalationAttemptsExhausted   EscalationReason = "attempts_exhausted"
	EscalationKeyRetentionExpired EscalationReason = "key_retention_expired"
	EscalationIdempotencyMismatch EscalationReason = "idempotency_mismatch"
	EscalationContradiction       EscalationReason = "contradiction"
	// EscalationProviderMismatch: the provider settled an amount or
	// currency other than the purchase's.
	EscalationProviderMismatch EscalationReason = "provider_mismatch"
	// EscalationProviderRejected: the provider refused the request without
	// acting on it (invalid parameters, a bad API key).
	EscalationProviderRejected EscalationReason = "provider_rejected"
	// EscalationDuplicateCharge: the provider holds more than one charge
	// that took (or may take) money for the purchase.
	EscalationDuplicateCharge EscalationReason = "duplicate_charge"
	// EscalationForeignPayment: the provider's answer is about a payment
	// that is not this purchase's: its metadata names another purchase (or
	// none), or the books give its payment id to another purchase.
	EscalationForeignPayment EscalationReason = "foreign_payment"
	// EscalationAmountMismatch: the provider's payment has another amount
	// or currency than the purchase.
	EscalationAmountMismatch EscalationReason = "amount_mismatch"
	// EscalationStateDisagreement: the provider's confirmed status
	// contradicts a final state of the books: a success for a declined
	// purchase (a late approval), or a decline or cancel for a succeeded
	// one.
	EscalationStateDisagreement EscalationReason = "state_disagreement"
)

// Sticky reports whether the reason keeps a purchase on the operator list
// after it settles: a bug or a disagreement with the provider needs a
// human whatever the outcome.
func (r EscalationReason) Sticky() bool {
	switch r {
	case EscalationIdempotencyMismatch, EscalationContradiction, EscalationProviderMismatch,
		EscalationDuplicateCharge, EscalationForeignPayment, EscalationAmountMismatch, EscalationStateDisagreement:
		return true
	}
	return false
}

// ChargeMayExist reports whether the reason is a finding that a charge may
// exist that the books do not account for. While a purchase carries such
// a reason the worker never sends a create or a replay for it: a human
// looks first.
func (r EscalationReason) ChargeMayExist() bool {
	switch r {
	case EscalationContradiction, EscalationProviderMismatch, EscalationDuplicateCharge,
		EscalationForeignPayment, EscalationAmountMismatch, EscalationStateDisagreement:
		return true
	}
	return false
}

// Purchase is one purchase and everything known about its charge.
type Purchase struct {
	ID            string
	Customer      string
	Reference     string // optional client reference, unique per customer
	Amount        int64  // minor units, > 0
	Currency      string // lower-case ISO 4217 code
	Description   string
	PaymentMethod string
	// Client is the purchase API client that created the purchase (its
	// name, as the idempotency keys are scoped), fixed at insert. Empty
	// for a purchase made another way (the CLI, the demo, a test) or
	// before the store recorded it (migration 00005): no API client may
	// read such a purchase (see Service.ClientPurchase).
	Client string
	// Account is the provider account whose money the purchase is:
	// provider.PlatformAccount ("") for the platform's own, or a
	// connected account (acct_…). Fixed at insert, before the first call,
	// like the key: every provider call about the purchase is made on
	// behalf of it, and only that account's answers can settle it.
	Account string

	State   statemachine.State
	Version int64 // bumped by every write; writes are conditional on it

	// ProviderKey is the provider idempotency key, fixed when the purchase
	// is submitted and never changed.
	ProviderKey string
	// ProviderRequest is the exact request stored before the first call;
	// replays send it unchanged. Nil until submitted.
	ProviderRequest *provider.CreateRequest
	// ParamsHash is ProviderRequest.Hash(), stored beside it.
	ParamsHash string
	// ProviderPaymentID is the provider's id for the charge, once known.
	ProviderPaymentID string

	FirstAttemptAt time.Time // zero until submitted
	UncertainSince time.Time // first time the outcome became unknown; zero if never

	EscalatedAt      time.Time // zero unless on the operator list
	EscalationReason EscalationReason

	// SettledAt is when the answer that made the purchase final was given:
	// a webhook's event time, or the start of the call whose answer
	// settled it (store clock). A contradicting event older than this is
	// stale; a newer one is confirmed with a status query. Zero until
	// final.
	SettledAt time.Time
	// Doubt, when not empty, says why a final state must be confirmed
	// with the provider: a newer event contradicts it. The job is reopened
	// and the worker's status query decides; empty otherwise.
	Doubt string

	CreatedAt time.Time
	UpdatedAt time.Time
}

// Escalated reports whether the purchase is on the operator list.
func (p Purchase) Escalated() bool { return !p.EscalatedAt.IsZero() }

// TransitionRecord is one row of the append-only transition audit.
type TransitionRecord struct {
	ID         int64
	PurchaseID string
	// RefundID is set for a move of a refund of the purchase (From and To
	// are then the refund's states); empty for the purchase's own moves.
	RefundID string
	// DisputeID is set for a move of a dispute of the purchase's payment
	// (From and To are then the dispute's states).
	DisputeID  string
	From, To   statemachine.State
	Cause      Cause
	Evidence   string // what the decision rests on: the provider's answer, an event id, an operator's note
	Actor      string // worker id, "webhook", or the operator's name
	LeaseToken int64  // fencing token of the lease it was written under; 0 for none
	At         time.Time
}

// Attempt is one row of the append-only audit of provider calls.
type Attempt struct {
	ID         int64
	PurchaseID string
	// RefundID is set for a call about a refund of the purchase; empty
	// for the purchase's own charge.
	RefundID   string
	Op         provider.Op
	Key        string // idempotency key sent, for create
	Outcome    provider.Outcome
	PaymentID  string
	Status     string // the provider's own status word
	Latency    time.Duration
	Error      string
	Actor      string
	LeaseToken int64
	// Applied is false when the answer changed nothing: it arrived after a
	// terminal state, lost a race, or its worker's lease was lost.
	Applied bool
	Note    string
	At      time.Time
	// Derived is true for a call that has no row of its own: a
	// transition shows that a worker started it, and no answer was ever
	// recorded (the worker died or stalled during it, or it is still in
	// flight). Such entries are made when the audit trail is read; they
	// are never stored.
	Derived bool
}

// IdempotencyKey is a purchase API client's key, remembered with the
// response it got so that a retry gets the same answer.
type IdempotencyKey struct {
	Client      string // the API client the key belongs to; keys are scoped per client
	Key         string
	RequestHash string // hex SHA-256 of the request, to refuse the key with another body
	StatusCode  int    // HTTP status of the saved response; 0 until saved
	Response    []byte // saved response body
	PurchaseID  string // the purchase the request created, if any
	CreatedAt   time.Time
}

// OperatorAction is one row of the operator audit: who did what, when,
// and what they saw before doing it.
type OperatorAction struct {
	ID         int64
	PurchaseID string
	// RefundID is the refund the action started or concerned, if any.
	RefundID string
	Operator string
	Action   string // recheck, resolve, note or refund (the operator's "refund this charge")
	Saw      string // the provider's live view shown before confirming
	Did      string // what was done, e.g. "uncertain→reconciling→succeeded"
	Evidence string // the operator's evidence or note text
	At       time.Time
}

// JobKind says what a job moves.
type JobKind string

// The kinds of job. One table holds both, claimed by the same worker with
// the same leases, backoff and sweeps.
const (
	// JobPurchase moves a purchase; its job id is the purchase id.
	JobPurchase JobKind = "purchase"
	// JobRefund moves a refund; its job id is the refund id.
	JobRefund JobKind = "refund"
)

// Job is the leased unit of work that moves one purchase or one refund.
type Job struct {
	// Kind is what the job moves; the zero value means JobPurchase.
	Kind JobKind
	// PurchaseID is the purchase moved, or the purchase the refund
	// belongs to.
	PurchaseID string
	// RefundID is the refund moved, for a JobRefund; empty otherwise.
	RefundID       string
	RunAt          time.Time
	LeaseOwner     string // empty when not leased
	LeaseToken     int64  // increases on every claim
	LeaseExpiresAt time.Time
	Checks         int // how many times the job ran
	DoneAt         time.Time
}

// JobAction is what a Move does to its purchase's job.
type JobAction int

// The job actions of a Move.
const (
	// JobKeep leaves the job and its lease as they are: the worker goes
	// on under the lease (the intent before a provider call).
	JobKeep JobAction = iota
	// JobComplete releases the lease and marks the job done at RunAt.
	JobComplete
	// JobReschedule releases the lease and makes the job due at RunAt.
	JobReschedule
)

// Move is one member of a batched, fenced write (Tx.ApplyMoves): the
// purchase goes from From to To, with the transition and the provider
// attempt that record it and what becomes of its job, if and only if
// Lease is still the job's current, unexpired lease and the purchase is
// still at From's state and version.
//
// A move without a lease (Lease.Owner empty, Token 0: a webhook's, which
// holds none) is fenced by the purchase's state and version alone, as
// UpdatePurchase is, and must leave the job alone (Job JobKeep).
type Move struct {
	Lease Lease
	// From is the purchase as the writer read it; To is what it writes
	// (the fields UpdatePurchase writes), stored at From.Version+1.
	From, To Purchase
	// Transition is appended when set; it must record From.State →
	// To.State, and it must be set whenever they differ.
	Transition *TransitionRecord
	// Attempt is appended when set.
	Attempt *Attempt
	// Job and RunAt say what becomes of the job.
	Job   JobAction
	RunAt time.Time
}

// Leaseless reports whether mv is a move without a lease (see Move).
func (mv Move) Leaseless() bool { return mv.Lease.Owner == "" && mv.Lease.Token == 0 }

// Lease is a worker's claim on one job. Every write made under it is fenced
// by Token.
type Lease struct {
	// Kind is the leased job's kind; the zero value means JobPurchase.
	Kind JobKind
	// PurchaseID is the purchase of the job (a refund job's: the
	// purchase its refund belongs to).
	PurchaseID string
	// RefundID is the refund of a JobRefund; empty otherwise.
	RefundID  string
	Owner     string
	Token     int64
	ExpiresAt time.Time
	// TakenOver is true when the previous lease expired without being
	// released: the worker holding it died or stalled, possibly mid-call.
	TakenOver bool
	// Checks is the job's run count including this one.
	Checks int
	// Now is the store's time when the lease was granted. The worker
	// measures every protocol time from it (plus the time elapsed on its
	// own clock since), never from its own wall clock.
	Now time.Time
	// Purchase is the purchase as the claim read it, in the claiming
	// statement, so that the first step needs no read of its own; nil
	// when the claim did not read it. It may be stale by the time it is
	// used: every write made from it is conditional on its version.
	Purchase *Purchase
	// Refund is, for a JobRefund, the refund as the claim read it (nil
	// when the claim did not read it); always nil for a JobPurchase.
	Refund *Refund

	// local is the worker's own clock reading when it got the lease.
	local time.Time
}

// JobID returns the id of the leased job: the refund id of a JobRefund,
// the purchase id otherwise.
func (l Lease) JobID() string {
	if l.Kind == JobRefund {
		return l.RefundID
	}
	return l.PurchaseID
}

// JobID returns the job's id: the refund id of a JobRefund, the purchase
// id otherwise.
func (j Job) JobID() string {
	if j.Kind == JobRefund {
		return j.RefundID
	}
	return j.PurchaseID
}

// Refund is one refund: its own process, with its own id, provider key
// and states (statemachine.Refund), returning money from one payment of a
// purchase. It is never a charge with a minus sign.
type Refund struct {
	ID         string // "ref_…"
	PurchaseID string
	// PaymentID is the provider's payment refunded: the purchase's own
	// payment id, or a duplicate charge's named by an audit finding.
	PaymentID string
	// FindingID is the audit finding whose payment is refunded (an
	// operator's "refund this charge"); 0 for a refund of the purchase's
	// own payment.
	FindingID int64
	Amount    int64  // minor units, > 0
	Currency  string // the payment's currency
	Reason    string // why, in the requester's words
	// Client is the purchase API client that asked for it; empty for the
	// CLI or an operator.
	Client string
	// RequestedBy is who asked: an API client, "cli", or an operator.
	RequestedBy string

	State   statemachine.State // a statemachine.Refund state
	Version int64

	// ProviderKey is the refund's provider idempotency key, fixed at
	// insert and never changed.
	ProviderKey string
	// ProviderRequest is the exact request stored before the first call;
	// replays send it unchanged. ParamsHash is its Hash.
	ProviderRequest *provider.RefundRequest
	ParamsHash      string
	// ProviderRefundID is the provider's id for the refund, once known.
	ProviderRefundID string
	// FailureReason is the provider's reason for a failed refund.
	FailureReason string

	FirstAttemptAt   time.Time
	UncertainSince   time.Time
	EscalatedAt      time.Time
	EscalationReason EscalationReason
	SettledAt        time.Time

	CreatedAt time.Time
	UpdatedAt time.Time
}

// Escalated reports whether the refund is on the operator list.
func (r Refund) Escalated() bool { return !r.EscalatedAt.IsZero() }

// RefundKeyFor returns the stable provider idempotency key of a refund,
// derived from its id as a purchase's is.
func RefundKeyFor(refundID string) string { return "payrecon-" + refundID }

// FindingKind names what the audit from the provider's side found.
type FindingKind string

// The kinds of audit findings.
const (
	// FindingOrphanCharge: money taken with no purchase, or for a
	// purchase id the books do not know.
	FindingOrphanCharge FindingKind = "orphan_charge"
	// FindingDuplicateCharge: a second charge that took money for one
	// purchase.
	FindingDuplicateCharge FindingKind = "duplicate_charge"
	// FindingAmountMismatch: the payment's amount differs from the
	// purchase's.
	FindingAmountMismatch FindingKind = "amount_mismatch"
	// FindingCurrencyMismatch: the payment's currency differs from the
	// purchase's.
	FindingCurrencyMismatch FindingKind = "currency_mismatch"
	// FindingStateDisagreement: the provider succeeded where the books say
	// declined (a late approval), or declined or canceled where they say
	// succeeded.
	FindingStateDisagreement FindingKind = "state_disagreement"
	// FindingMissingAtProvider: a succeeded purchase whose payment the
	// provider does not have, or which names no payment while the provider
	// holds none for it that took money (PaymentID NoPaymentID). Its
	// Amount is the purchase's: what the books count as taken.
	FindingMissingAtProvider FindingKind = "missing_at_provider"
	// FindingOrphanRefund: a refund at the provider with no refund in the
	// books (made in the dashboard, or under an id the books do not know).
	// Its PaymentID is the provider's refund id.
	FindingOrphanRefund FindingKind = "orphan_refund"
	// FindingRefundMismatch: a refund at the provider whose amount,
	// currency or payment disagrees with the refund in the books. Its
	// PaymentID is the provider's refund id.
	FindingRefundMismatch FindingKind = "refund_mismatch"
	// FindingForeignDispute: a dispute of a payment no purchase of the
	// books owns. Its PaymentID is the provider's dispute id.
	FindingForeignDispute FindingKind = "foreign_dispute"
	// FindingDisputeMismatch: a dispute that disagrees with the books:
	// its payment is another purchase's than the one it was linked to or
	// its metadata names, its currency is not the payment's, or its
	// payment is declined in the books. Its PaymentID is the provider's
	// dispute id.
	FindingDisputeMismatch FindingKind = "dispute_mismatch"
	// FindingDisputeExceeds: a dispute that returns more than its payment
	// kept: its amount beyond what is left after refunds, or a lost
	// dispute and refunds together beyond the payment's amount. Its
	// PaymentID is the provider's dispute id.
	FindingDisputeExceeds FindingKind = "dispute_exceeds"
)

// FindingKinds lists every kind, for metrics and validation.
var FindingKinds = []FindingKind{
	FindingOrphanCharge, FindingDuplicateCharge, FindingAmountMismatch,
	FindingCurrencyMismatch, FindingStateDisagreement, FindingMissingAtProvider,
	FindingOrphanRefund, FindingRefundMismatch,
	FindingForeignDispute, FindingDisputeMismatch, FindingDisputeExceeds,
}

// Finding is one discrepancy the audit from the provider's side found
// between the provider's payments and the books. It is unique per
// (Provider, PaymentID, Kind), stays open until an operator closes it
// with a note, and never moves money or a purchase's state.
type Finding struct {
	ID         int64
	Provider   string // "stripe"
	PaymentID  string // the provider's payment the finding is about
	Kind       FindingKind
	PurchaseID string // the purchase it concerns; "" for an orphan
	// Account is the provider account of the purchase it concerns, as
	// the store reads it with the finding; "" for the platform's own, or
	// for a finding about no purchase. Inserts ignore it.
	Account string
	// Amount and Currency are the provider's payment's: the money at
	// risk.
	Amount   int64
	Currency string
	Status   string // the provider's status word
	Evidence string // what the audit saw, for the operator
	FoundAt  time.Time

	ClosedAt  time.Time // zero while open
	ClosedBy  string
	CloseNote string
}

// AccountLabel names the account of f's purchase as the operator lists
// show it (see AccountLabel), "" for a finding about no purchase.
func (f Finding) AccountLabel() string {
	if f.PurchaseID == "" {
		return ""
	}
	return AccountLabel(f.Account)
}

// NoPaymentID is the PaymentID of a missing_at_provider finding about a
// purchase the books hold succeeded without any payment id: "none:" and
// the purchase id. A finding is unique by (Provider, PaymentID, Kind), so
// the audit reports such a purchase once, whichever run sees it.
func NoPaymentID(purchaseID string) string { return "none:" + purchaseID }

// Open reports whether no operator has closed the finding.
func (f Finding) Open() bool { return f.ClosedAt.IsZero() }

// AuditRun is the resumable watermark of an audit from the provider's
// side: the window it covers and how far it got. A run that stops midway
// resumes from Done.
type AuditRun struct {
	Name        string    // the audit's name, e.g. "stripe"
	From, Until time.Time // the window of provider creation times
	Done        time.Time // everything created before Done has been matched
	StartedAt   time.Time
	UpdatedAt   time.Time
	Findings    int // new findings stored by this run so far
}

// Complete reports whether the run covered its whole window.
func (r AuditRun) Complete() bool { return !r.Done.Before(r.Until) }

// NewID returns a new id with the given prefix, such as "pur_", for a
// record created at at: 12 hex digits of at in Unix milliseconds, then 12
// hex digits (48 bits) from crypto/rand, 24 in all, as the API has always
// promised (api/openapi.yaml). Ids sort by the millisecond they were made
// in, so the rows a busy hour creates (and their jobs, transitions and
// attempts, all keyed by it) put their index entries next to each other,
// and not each on a random page of an index that has outgrown memory: the
// claim of a bulk import's jobs reads a few index pages, not one for
// every job. (Earlier builds made every digit random. Among their ids,
// today's fall in one narrow band of each index, not at its right edge,
// but still together.) Within a millisecond the order is random: n ids
// made in one millisecond collide with a probability of about
// n²/2^49, and a collision is refused by the primary key, never merged.
// at must not be before 1970. An id says when its record was made;
// nothing in it is secret.
func NewID(prefix string, at time.Time) string {
	var b [12]byte
	ms := uint64(at.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	if _, err := rand.Read(b[6:]); err != nil {
		panic("reconcile: crypto/rand failed: " + err.Error())
	}
	return prefix + hex.EncodeToString(b[:])
}

// ProviderKeyFor returns the stable provider idempotency key of a purchase.
// It derives from the purchase id, the natural business id, so every
// attempt for one purchase carries the same key.
func ProviderKeyFor(purchaseID string) string { return "payrecon-" + purchaseID }
