// Package crashpoint names the boundaries where a crash of payrecon's
// process changes what must happen next, and, in a build with the
// failpoints tag only, kills the process at one of them on request.
//
// A production build carries no crash code: without the tag, Hit is an
// empty function the compiler removes with its call. Under the tag,
// PAYRECON_CRASHPOINT=name[:n] makes the process kill itself with SIGKILL
// the n-th time (default the first) it reaches the point called name, so
// that a test can restart it and check that every effect happened once.
//
// The crash test (internal/testing/crashtest, which builds payrecon with
// -tags failpoints) kills a real process at every point in Points.
package crashpoint

// Point names one boundary.
type Point string

// The boundaries. Each is hit right after the step its name says
// committed or happened, before the next one.
const (
	// IntentCommitted: a purchase's intent (created→submitted with the
	// stored request, or uncertain→reconciling) has committed; the
	// provider call has not been sent.
	IntentCommitted Point = "intent-committed"
	// CallSent: the provider received a request and its reply has
	// arrived, but nobody has read it.
	CallSent Point = "call-sent"
	// AnswerRead: a provider answer about a purchase has been read; it is
	// not applied.
	AnswerRead Point = "answer-read"
	// ApplyCommitted: a purchase's answer, its move and its job's next
	// run have committed together (one transaction: there is no separate
	// job completion to crash before).
	ApplyCommitted Point = "apply-committed"
	// WebhookVerified: a webhook's signature is verified; nothing is
	// stored.
	WebhookVerified Point = "webhook-verified"
	// WebhookReceived: a webhook's inbox row has committed, pending; the
	// provider has no 2xx yet, and nothing is applied.
	WebhookReceived Point = "webhook-received"
	// WebhookAnswered: the provider has its 2xx for a stored event,
	// which the applier may not have applied yet.
	WebhookAnswered Point = "webhook-answered"
	// InboxApplyWritten: the applier has written a batch's effects and
	// the events' outcomes in its transaction, which has not committed.
	InboxApplyWritten Point = "inbox-apply-written"
	// PurchaseInserted: the purchase API's purchase, key and saved
	// response have committed; the client has no response yet.
	PurchaseInserted Point = "purchase-inserted"
	// SweepMidBatch: a sweep has written part of its batch.
	SweepMidBatch Point = "sweep-mid-batch"
	// AuditMidWindow: the audit has committed one chunk of its window
	// and its watermark, not the next.
	AuditMidWindow Point = "audit-mid-window"
	// RefundIntentCommitted: a refund's intent (created→submitted, or
	// uncertain→reconciling) has committed; its call has not been sent.
	RefundIntentCommitted Point = "refund-intent-committed"
	// RefundAnswerRead: a provider answer about a refund has been read;
	// it is not applied.
	RefundAnswerRead Point = "refund-answer-read"
	// RefundApplyCommitted: a refund's answer and move have committed.
	RefundApplyCommitted Point = "refund-apply-committed"
	// RefundInserted: the purchase API's refund, key and saved response
	// have committed; the client has no response yet.
	RefundInserted Point = "refund-inserted"
	// DisputeApplyWritten: a dispute answer's effects (the dispute, its
	// move, its outbox events, the inbox row's outcome) are written in
	// their transaction, which has not committed.
	DisputeApplyWritten Point = "dispute-apply-written"
	// OutboxPending: a change and its outbox event are written in one
	// transaction, which has not committed. A crash here must leave
	// neither.
	OutboxPending Point = "outbox-pending"
)

// Points lists every point, for the crash tests.
var Points = []Point{
	IntentCommitted, CallSent, AnswerRead, ApplyCommitted,
	WebhookVerified, WebhookReceived, WebhookAnswered, InboxApplyWritten, PurchaseInserted,
	SweepMidBatch, AuditMidWindow,
	RefundIntentCommitted, RefundAnswerRead, RefundApplyCommitted, RefundInserted,
	OutboxPending, DisputeApplyWritten,
}

// Env is the environment variable that arms a point: name[:n].
const Env = "PAYRECON_CRASHPOINT"
