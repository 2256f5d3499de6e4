// Package reconcile owns payrecon's protocol: how a purchase is created,
// submitted to the provider under a stable idempotency key, and reconciled
// by leased jobs until its outcome is known.
//
// The package declares the small interfaces it consumes: Store (implemented
// by reconcile/postgres and reconcile/sqlite, both checked by the shared
// suite in reconcile/storetest) and provider.Provider.
package reconcile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// Errors returned by the Store and by Service. Adapters translate their
// driver's errors into these, wrapped with context.
var (
	// ErrNotFound: no row matched the id.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a conditional write lost, because the row is no longer
	// in the state or at the version the writer read. Re-read and decide
	// again.
	ErrConflict = errors.New("conflict: state or version changed")
	// ErrLeaseLost: the writer's lease expired or was taken over (its
	// fencing token is stale). It must not write anything.
	ErrLeaseLost = errors.New("lease lost")
	// ErrDuplicate: a row with the same unique key exists.
	ErrDuplicate = errors.New("duplicate")
	// ErrForbiddenTransition: the database refused a move that is not in
	// the transition table.
	ErrForbiddenTransition = errors.New("forbidden transition")
	// ErrInvalid: the input is invalid. The message says which field.
	ErrInvalid = errors.New("invalid input")
	// ErrNotMigrated: the schema is missing or older than this binary.
	ErrNotMigrated = errors.New("database schema is not migrated (run `payrecon migrate`)")
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
)

// Sticky reports whether the reason keeps a purchase on the operator list
// after it settles: a bug or a disagreement with the provider needs a
// human whatever the outcome.
func (r EscalationReason) Sticky() bool {
	switch r {
	case EscalationIdempotencyMismatch, EscalationContradiction, EscalationProviderMismatch:
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

	CreatedAt time.Time
	UpdatedAt time.Time
}

// Escalated reports whether the purchase is on the operator list.
func (p Purchase) Escalated() bool { return !p.EscalatedAt.IsZero() }

// TransitionRecord is one row of the append-only transition audit.
type TransitionRecord struct {
	ID         int64
	PurchaseID string
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
	Operator   string
	Action     string // recheck, resolve or note
	Saw        string // the provider's live view shown before confirming
	Did        string // what was done, e.g. "uncertain→reconciling→succeeded"
	Evidence   string // the operator's evidence or note text
	At         time.Time
}

// Job is the leased unit of work that moves one purchase.
type Job struct {
	PurchaseID     string
	RunAt          time.Time
	LeaseOwner     string // empty when not leased
	LeaseToken     int64  // increases on every claim
	LeaseExpiresAt time.Time
	Checks         int // how many times the job ran
	DoneAt         time.Time
}

// Lease is a worker's claim on one job. Every write made under it is fenced
// by Token.
type Lease struct {
	PurchaseID string
	Owner      string
	Token      int64
	ExpiresAt  time.Time
	// TakenOver is true when the previous lease expired without being
	// released: the worker holding it died or stalled, possibly mid-call.
	TakenOver bool
	// Checks is the job's run count including this one.
	Checks int
}

// NewID returns a random id with the given prefix, such as "pur_".
func NewID(prefix string) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("reconcile: crypto/rand failed: " + err.Error())
	}
	return prefix + hex.EncodeToString(b[:])
}

// ProviderKeyFor returns the stable provider idempotency key of a purchase.
// It derives from the purchase id, the natural business id, so every
// attempt for one purchase carries the same key.
func ProviderKeyFor(purchaseID string) string { return "payrecon-" + purchaseID }
