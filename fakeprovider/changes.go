package fakeprovider

import (
	"slices"
	"time"
)

// The change log of the ledger, which the event log keeps and a Server
// turns into webhooks, and the settling of charges and refunds that are
// not final yet. A dispute's changes are logged by recordDispute.

// add appends e, just made, to the ledger and logs its creation. Call with
// f.mu held.
func (f *Fake) add(e *entry, silent bool) {
	f.ledger = append(f.ledger, e)
	f.byID[e.ID] = e
	if !e.SettlesAt.IsZero() {
		f.unsettled = append(f.unsettled, e)
	}
	f.record(e, e.CreatedAt, true, silent)
}

// record logs e's change to its current status in the event log, and for
// every Server that watches. Call with f.mu held.
// A dispute test card's payment that is now succeeded is disputed at
// once, after its change.
func (f *Fake) record(e *entry, at time.Time, created, silent bool) {
	events := f.logCharge(e.Charge, e.Status, at, created)
	for _, l := range f.watchers {
		l.changes = append(l.changes, change{c: e.Charge, status: e.Status, at: at, created: created, silent: silent, events: events})
	}
	f.disputeIfCard(e, at, silent)
}

// recordRefund logs e's change to its current status in the event log,
// and for every Server that watches. Call with f.mu held.
func (f *Fake) recordRefund(e *refundEntry, at time.Time, created, silent bool) {
	r := e.Refund
	var pay Charge
	if p := f.byID[r.PaymentID]; p != nil {
		pay = p.Charge
	}
	refunds := f.refundsOf(r.PaymentID)
	events := f.logRefund(r, pay, refunds, at, created)
	for _, l := range f.watchers {
		l.changes = append(l.changes, change{c: pay, r: &r, refunds: refunds, status: r.Status, at: at, created: created, silent: silent, events: events})
	}
}

// watch returns a new change log that records every change from now on.
func (f *Fake) watch() *changeLog {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := &changeLog{}
	f.watchers = append(f.watchers, l)
	return l
}

// unwatch stops recording changes to l.
func (f *Fake) unwatch(l *changeLog) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watchers = slices.DeleteFunc(f.watchers, func(w *changeLog) bool { return w == l })
}

// settle moves a charge that is not final yet (processing, or declined
// before a late approval) to its final status once its time has come, and
// logs the change as made at SettlesAt. Call with f.mu held.
func (f *Fake) settle(e *entry, now time.Time) {
	if !e.SettlesAt.IsZero() && e.Status != e.FinalStatus && !now.Before(e.SettlesAt) {
		e.Status = e.FinalStatus
		f.record(e, e.SettlesAt, false, false)
	}
}

// settleDue settles every charge, then every refund, whose time has come,
// in creation order, and forgets those settled. Call with f.mu held.
func (f *Fake) settleDue(now time.Time) {
	still := f.unsettled[:0]
	for _, e := range f.unsettled {
		f.settle(e, now)
		if e.Status != e.FinalStatus {
			still = append(still, e)
		}
	}
	clear(f.unsettled[len(still):])
	f.unsettled = still

	stillRefunds := f.unsettledRefunds[:0]
	for _, e := range f.unsettledRefunds {
		f.settleRefund(e, now)
		if e.Status != e.FinalStatus {
			stillRefunds = append(stillRefunds, e)
		}
	}
	clear(f.unsettledRefunds[len(stillRefunds):])
	f.unsettledRefunds = stillRefunds
}
