package reconcile

import (
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// Observer is told what the protocol does, for metrics. Calls happen after
// the corresponding write committed. Implementations must be safe for
// concurrent use and must not block.
type Observer interface {
	// Transition is called once per committed transition.
	Transition(from, to statemachine.State, cause Cause)
	// ProviderCall is called once per provider call, whatever its result.
	ProviderCall(op provider.Op, outcome provider.Outcome, took time.Duration)
	// JobsClaimed is called with the number of jobs one claim returned.
	JobsClaimed(n int)
	// LeaseLost is called when a worker finds its lease gone before a write.
	LeaseLost()
	// Resolved is called when a purchase that was once uncertain reaches a
	// terminal state, with the time since it first became uncertain.
	Resolved(uncertainFor time.Duration)
	// RefundTransition is called once per committed transition of a
	// refund.
	RefundTransition(from, to statemachine.State, cause Cause)
	// EventApplied is called once per webhook event the applier applied,
	// with its outcome and the time since it was received.
	EventApplied(eventType string, outcome EventOutcome, sinceReceipt time.Duration)
}

type nopObserver struct{}

func (nopObserver) Transition(statemachine.State, statemachine.State, Cause)       {}
func (nopObserver) ProviderCall(provider.Op, provider.Outcome, time.Duration)      {}
func (nopObserver) JobsClaimed(int)                                                {}
func (nopObserver) LeaseLost()                                                     {}
func (nopObserver) Resolved(time.Duration)                                         {}
func (nopObserver) RefundTransition(statemachine.State, statemachine.State, Cause) {}
func (nopObserver) EventApplied(string, EventOutcome, time.Duration)               {}
