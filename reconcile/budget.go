package reconcile

import (
	"context"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// BudgetClass names one rate budget of a provider account: a class of
// provider calls that the provider limits together.
type BudgetClass string

// The classes. ClassGlobal is the budget every call also takes from.
const (
	ClassCreate   BudgetClass = "create"
	ClassRetrieve BudgetClass = "retrieve"
	ClassSearch   BudgetClass = "search"
	ClassList     BudgetClass = "list"
	ClassRefund   BudgetClass = "refund"
	ClassGlobal   BudgetClass = "global"
)

// BudgetClasses lists the classes a call can be of (ClassGlobal aside), in
// a fixed order, for metrics and pages.
var BudgetClasses = []BudgetClass{ClassCreate, ClassRetrieve, ClassSearch, ClassList, ClassRefund}

// ClassOf returns the budget class of a provider call: creates, status
// queries, searches, listings, and every refund call.
func ClassOf(op provider.Op) BudgetClass {
	switch op {
	case provider.OpCreate:
		return ClassCreate
	case provider.OpStatus:
		return ClassRetrieve
	case provider.OpSearch:
		return ClassSearch
	case provider.OpList, provider.OpEventList, provider.OpDisputeList:
		return ClassList
	case provider.OpRefundCreate, provider.OpRefundGet, provider.OpRefundList:
		return ClassRefund
	}
	return ClassGlobal
}

// Priority orders the calls that wait for one budget: 1 goes first.
type Priority int

// The priorities, from first to last. Operator calls (the live views of
// the ops pages) are few and a person waits for them: PriorityNew.
const (
	// PriorityNew: the first create of a new purchase.
	PriorityNew Priority = 1
	// PriorityReconcile: the reconciliation of an uncertain purchase (a
	// replayed create, a status query, a search) and refund calls.
	PriorityReconcile Priority = 2
	// PrioritySlow: the slow checks of escalated purchases.
	PrioritySlow Priority = 3
	// PriorityAudit: the audit's listing.
	PriorityAudit Priority = 4
)

// Budget is the rate budget of one provider account, shared by every
// worker that calls the provider with its key.
type Budget interface {
	// Wait blocks until one call of class may be made at priority, or
	// ctx ends (its error wraps ctx's). A call that Wait let through
	// counts against the budget whether or not it is then made.
	Wait(ctx context.Context, class BudgetClass, priority Priority) error
	// Throttled reports that the provider answered a call of class with a
	// 429, asking for retryAfter of silence (0: not said). The budget of
	// class shrinks, and grows back slowly.
	Throttled(ctx context.Context, class BudgetClass, retryAfter time.Duration) error
}

// AccountBudgets hands out the rate budget of each connected account.
type AccountBudgets interface {
	// For returns the budget of connected account account (acct_…): the
	// same Budget, shared by every worker, for every call of one account,
	// and never one account's for another's.
	For(account string) Budget
}

// Reserver is a Budget that hands out several tokens at once, each with
// the time its call may be sent: a worker takes the tokens of its next
// claim's creates before it claims (see Service.claim), so that it
// never claims more purchases than the budget serves within their leases.
type Reserver interface {
	Budget
	// Reserve takes up to n tokens of class at priority, each for a call
	// that may be sent within horizon of now, and none due sooner than
	// lead: the caller cannot send a call sooner, and a token it could not
	// use on time would bunch its call with the next ones. It takes fewer
	// than n, or none, when the budget cannot serve more within horizon.
	// Tokens taken count against the budget whether or not their calls
	// are made: give back the ones no call will use (Unreserve).
	Reserve(ctx context.Context, class BudgetClass, priority Priority, n int, lead, horizon time.Duration) (Reservation, error)
	// Send waits until the call of a token of class reserved with a due
	// time of due (by the budget's clock: now plus its delay when
	// reserved) may be sent, or ctx ends.
	Send(ctx context.Context, class BudgetClass, due time.Time) error
	// Unreserve gives back the last k tokens of r, which no call will
	// use. The budget takes them back only while nobody took a token after
	// r's (their slots are still the last handed out); otherwise they are
	// lost, so that no slot is ever handed out twice.
	Unreserve(ctx context.Context, r Reservation, k int) error
}

// Reservation is what Reserve took.
type Reservation struct {
	// Class is the class the tokens are of.
	Class BudgetClass
	// Delays are, soonest first, how long after the reservation each
	// token's call must wait before it is sent: one per token.
	Delays []time.Duration
	// Retry is, when no token was taken, how long to wait before asking
	// again.
	Retry time.Duration
	// Tails are opaque to callers: set and read only by the budget that
	// made the reservation (budget.Shared: where the class's and the
	// global bucket's last handed-out slot stood after it, for Unreserve).
	Tails [2]time.Time
}

// Unlimited is the Budget that never waits: a provider without limits.
type Unlimited struct{}

// Wait implements Budget: it returns ctx's error, if any, at once.
func (Unlimited) Wait(ctx context.Context, _ BudgetClass, _ Priority) error { return ctx.Err() }

// Throttled implements Budget: it does nothing.
func (Unlimited) Throttled(context.Context, BudgetClass, time.Duration) error { return nil }
