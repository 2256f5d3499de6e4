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
	// Transition is called once per committed transition of a purchase,
	// unless the Observer is an AccountObserver.
	Transition(from, to statemachine.State, cause Cause)
	// ProviderCall is called once per provider call, whatever its result,
	// unless the Observer is an AccountObserver.
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

// AccountObserver is an Observer told the provider account of each
// provider call and of each purchase's transition, for metrics by
// account. A Config.Observer that implements it is told
// AccountProviderCall instead of ProviderCall, and AccountTransition
// instead of Transition, once per call and per transition.
type AccountObserver interface {
	// AccountProviderCall is ProviderCall for a call made on behalf of
	// account (provider.PlatformAccount for the platform's own).
	AccountProviderCall(account string, op provider.Op, outcome provider.Outcome, took time.Duration)
	// AccountTransition is Transition for a purchase of account
	// (provider.PlatformAccount for the platform's own).
	AccountTransition(account string, from, to statemachine.State, cause Cause)
}

// observeCall tells the Observer about one provider call made on behalf
// of account: AccountProviderCall if it is an AccountObserver, else
// ProviderCall. Every provider call is counted through it.
func (s *Service) observeCall(account string, op provider.Op, outcome provider.Outcome, took time.Duration) {
	if o, ok := s.cfg.Observer.(AccountObserver); ok {
		o.AccountProviderCall(account, op, outcome, took)
		return
	}
	s.cfg.Observer.ProviderCall(op, outcome, took)
}

// observeTransition tells the Observer about one committed transition of
// a purchase of account: AccountTransition if it is an AccountObserver,
// else Transition. Every purchase's transition is counted through it.
func (s *Service) observeTransition(account string, from, to statemachine.State, cause Cause) {
	if o, ok := s.cfg.Observer.(AccountObserver); ok {
		o.AccountTransition(account, from, to, cause)
		return
	}
	s.cfg.Observer.Transition(from, to, cause)
}

type nopObserver struct{}

func (nopObserver) Transition(statemachine.State, statemachine.State, Cause)       {}
func (nopObserver) ProviderCall(provider.Op, provider.Outcome, time.Duration)      {}
func (nopObserver) JobsClaimed(int)                                                {}
func (nopObserver) LeaseLost()                                                     {}
func (nopObserver) Resolved(time.Duration)                                         {}
func (nopObserver) RefundTransition(statemachine.State, statemachine.State, Cause) {}
func (nopObserver) EventApplied(string, EventOutcome, time.Duration)               {}
