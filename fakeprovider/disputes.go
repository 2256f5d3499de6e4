package fakeprovider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// Disputes: a cardholder's challenge of a succeeded payment, which the
// card network opens, never payrecon. A test opens one (OpenDispute, the
// dispute test cards) and moves it as the network would (MoveDispute);
// the fake logs Stripe's charge.dispute.* events of each change, lists
// them (ListDisputes, GET /v1/disputes) and refuses refunds of a payment
// charged back.

// DisputeFee is the fee of a chargeback's withdrawal (its balance
// transaction's fee), in the currency's smallest unit whatever the
// currency: the fake has no exchange rates. A win reinstates the amount
// withdrawn, never the fee.
const DisputeFee = 1500

// DisputeEvidenceWindow is how long after a dispute needs a response its
// evidence is due (evidence_details.due_by): at its opening, or at an
// inquiry's escalation to a chargeback.
const DisputeEvidenceWindow = 7 * 24 * time.Hour

// DefaultDisputeReason is the reason of a dispute opened without one.
const DefaultDisputeReason = "fraudulent"

// disputeReasons are Stripe's dispute reasons (stripe-go's
// DisputeReason values).
var disputeReasons = []string{
	"bank_cannot_process", "check_returned", "credit_not_processed", "customer_initiated", "debit_not_authorized",
	"duplicate", "fraudulent", "general", "incorrect_account_details", "insufficient_funds", "noncompliant",
	"product_not_received", "product_unacceptable", "subscription_canceled", "unrecognized",
}

// disputeMoves are the moves MoveDispute allows, from each open status:
// Stripe's disputes only move forward. An inquiry is reviewed and closed
// or escalates to a chargeback; a chargeback is reviewed and decided; any
// open dispute may be prevented. Closed statuses move nowhere.
var disputeMoves = map[string][]string{
	provider.DisputeWarningNeedsResponse: {provider.DisputeWarningUnderReview, provider.DisputeWarningClosed, provider.DisputeNeedsResponse, provider.DisputePrevented},
	provider.DisputeWarningUnderReview:   {provider.DisputeWarningClosed, provider.DisputeNeedsResponse, provider.DisputePrevented},
	provider.DisputeNeedsResponse:        {provider.DisputeUnderReview, provider.DisputeWon, provider.DisputeLost, provider.DisputePrevented},
	provider.DisputeUnderReview:          {provider.DisputeWon, provider.DisputeLost, provider.DisputePrevented},
}

// disputeClosed reports whether a dispute in status is decided.
func disputeClosed(status string) bool {
	return provider.DisputeRank(status) == provider.DisputeRank(provider.DisputeWon)
}

// Errors of OpenDispute and MoveDispute. Each wraps ErrInvalidRequest,
// except ErrNoSuchDispute.
var (
	// ErrNotDisputable: the payment has no succeeded charge to dispute,
	// or nothing of it remains once its refunds and lost disputes are
	// taken off.
	ErrNotDisputable = fmt.Errorf("fakeprovider: payment cannot be disputed: %w", ErrInvalidRequest)
	// ErrDisputeMove: the dispute cannot move to the status asked (see
	// MoveDispute): Stripe's disputes only move forward.
	ErrDisputeMove = fmt.Errorf("fakeprovider: dispute cannot move so: %w", ErrInvalidRequest)
	// ErrNoSuchDispute: no dispute in the ledger has the id.
	ErrNoSuchDispute = errors.New("fakeprovider: no such dispute")
)

// errDisputeReason marks a dispute's reason that is none of Stripe's.
var errDisputeReason = errors.New("unknown reason")

// ErrChargeDisputed is wrapped by the error of a refund of a payment
// charged back: it has a dispute that is open and whose charge is not
// refundable (a chargeback, not an inquiry), or one that was lost.
// Stripe's 400 charge_disputed. It wraps ErrInvalidRequest and
// provider.ErrRefundRefused: nothing was refunded, and the same request
// will be refused again while the dispute stands.
var ErrChargeDisputed = fmt.Errorf("fakeprovider: payment is charged back by a dispute: %w: %w", ErrInvalidRequest, provider.ErrRefundRefused)

// DisputeOptions are a dispute's own terms (see Fake.OpenDispute).
type DisputeOptions struct {
	// Amount is the disputed amount: at most what remains of the payment
	// once its refunds that hold and its lost disputes are taken off; 0
	// disputes all of that.
	Amount int64
	// Reason is one of Stripe's dispute reasons; "" is
	// DefaultDisputeReason.
	Reason string
	// Inquiry opens an inquiry (warning_needs_response): the issuer asks,
	// no money moves and the payment may still be refunded. Otherwise a
	// chargeback (needs_response) opens, its amount withdrawn at once.
	Inquiry bool
}

// disputeEntry is a dispute in the ledger.
type disputeEntry struct {
	seq        int // place in creation order, from 1
	id         string
	paymentID  string
	purchaseID string // the payment's metadata purchase_id
	amount     int64
	currency   string
	reason     string
	status     string
	dueBy      time.Time
	refundable bool // is_charge_refundable
	txns       []disputeTxn
	created    time.Time
	// lastEvent is the Unix second of its latest event: the next is
	// created later, so that its events' times order them strictly.
	lastEvent int64
}

// disputeTxn is a balance transaction of a dispute: its amount withdrawn
// (negative) or reinstated (positive), the fee, and when.
type disputeTxn struct {
	id      string
	amount  int64
	fee     int64
	created time.Time
}

// withdrawn returns the sums of e's balance transactions' amounts below
// and above 0, fees apart: withdrawn (as a positive number) and
// reinstated.
func (e *disputeEntry) withdrawn() (withdrawn, reinstated int64) {
	for _, t := range e.txns {
		if t.amount < 0 {
			withdrawn -= t.amount
		} else {
			reinstated += t.amount
		}
	}
	return withdrawn, reinstated
}

// dispute is the neutral form of e as it is now, its purchase id included.
func (e *disputeEntry) dispute() provider.Dispute {
	w, r := e.withdrawn()
	return provider.Dispute{
		ID:               e.id,
		PaymentID:        e.paymentID,
		ChargeID:         latestCharge(e.paymentID),
		PurchaseID:       e.purchaseID,
		Amount:           e.amount,
		Currency:         e.currency,
		Reason:           e.reason,
		Status:           e.status,
		EvidenceDueBy:    e.dueBy,
		ChargeRefundable: e.refundable,
		Withdrawn:        w,
		Reinstated:       r,
		Created:          e.created,
	}
}

// blocksRefund reports whether e refuses a refund of its payment: open
// and not refundable (a chargeback), or lost.
func (e *disputeEntry) blocksRefund() bool {
	return e.status == provider.DisputeLost || !disputeClosed(e.status) && !e.refundable
}

// eventTime returns the creation time of e's next event, at at unless
// that is not a later second than its latest event's.
func (e *disputeEntry) eventTime(at time.Time) time.Time {
	if at.Unix() <= e.lastEvent {
		at = time.Unix(e.lastEvent+1, 0).In(at.Location())
	}
	e.lastEvent = at.Unix()
	return at
}

// OpenDispute opens a dispute of the succeeded payment paymentID now, as
// a card network would, on o's terms: a chargeback (needs_response, its
// amount withdrawn at once with DisputeFee: charge.dispute.created, then
// charge.dispute.funds_withdrawn) or an inquiry (warning_needs_response,
// its charge still refundable: charge.dispute.created), its evidence due
// DisputeEvidenceWindow from now. It returns the dispute, its PurchaseID
// the payment's. A payment may have several.
//
// The events are logged, and announced by a Server with webhooks after
// its next create or at its next Tick; Server.OpenDispute announces them
// at once, or never. It is not a provider call: it counts in no Calls.
//
// The error wraps ErrNoSuchPayment for an unknown payment, ErrNotDisputable
// for a payment not succeeded or with nothing left to dispute, and
// ErrInvalidRequest for an amount negative or over what remains, or a
// reason that is none of Stripe's; nothing is opened.
func (f *Fake) OpenDispute(paymentID string, o DisputeOptions) (provider.Dispute, error) {
	return f.openDispute(paymentID, o, false)
}

// openDispute is OpenDispute, with silent: its events are never
// announced.
func (f *Fake) openDispute(paymentID string, o DisputeOptions, silent bool) (provider.Dispute, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.cfg.Now()
	// Test cards' payments due to settle open their disputes first, so
	// that disputes are opened in the order of their times.
	f.settleDue(now)
	e, err := f.newDispute(paymentID, o, now, silent)
	if err != nil {
		return provider.Dispute{}, err
	}
	return e.dispute(), nil
}

// newDispute opens a dispute of paymentID at now on o's terms (see
// OpenDispute). Call with f.mu held.
func (f *Fake) newDispute(paymentID string, o DisputeOptions, now time.Time, silent bool) (*disputeEntry, error) {
	where := "open dispute of " + paymentID
	if o.Reason == "" {
		o.Reason = DefaultDisputeReason
	}
	switch {
	case !slices.Contains(disputeReasons, o.Reason):
		return nil, fmt.Errorf("%w: %s: %w %q (want one of %s)", ErrInvalidRequest, where, errDisputeReason, o.Reason, strings.Join(disputeReasons, ", "))
	case o.Amount < 0:
		return nil, fmt.Errorf("%w: %s: amount %d must not be negative", ErrInvalidRequest, where, o.Amount)
	}
	pay := f.byID[paymentID]
	if pay == nil {
		return nil, fmt.Errorf("fakeprovider: %s: %w", where, ErrNoSuchPayment)
	}
	f.settle(pay, now)
	if pay.Status != StatusSucceeded {
		return nil, fmt.Errorf("%w: %s: payment is %s, only a succeeded one is disputed", ErrNotDisputable, where, pay.Status)
	}
	remaining := pay.Amount - f.returned(paymentID, now)
	amount := o.Amount
	if amount == 0 {
		amount = remaining
	}
	switch {
	case remaining <= 0:
		return nil, fmt.Errorf("%w: %s: nothing of its %d remains once refunded", ErrNotDisputable, where, pay.Amount)
	case amount > remaining:
		return nil, fmt.Errorf("%w: %s: amount %d is greater than what remains of the payment (%d)", ErrInvalidRequest, where, amount, remaining)
	}
	f.disputeSeq++
	e := &disputeEntry{
		seq:        f.disputeSeq,
		id:         f.newID("du_", f.disputeSeq),
		paymentID:  pay.ID,
		purchaseID: pay.PurchaseID,
		amount:     amount,
		currency:   pay.Currency,
		reason:     o.Reason,
		status:     provider.DisputeNeedsResponse,
		dueBy:      now.Add(DisputeEvidenceWindow),
		created:    now,
	}
	types := []string{provider.EventDisputeCreated}
	if o.Inquiry {
		e.status, e.refundable = provider.DisputeWarningNeedsResponse, true
	} else {
		f.withdraw(e, now)
		types = append(types, provider.EventDisputeFundsWithdrawn)
	}
	f.disputes = append(f.disputes, e)
	f.disputeByID[e.id] = e
	f.recordDispute(e, now, types, silent)
	return e, nil
}

// withdraw takes e's amount back from the merchant, with DisputeFee: a
// chargeback opened or escalated at now.
func (f *Fake) withdraw(e *disputeEntry, now time.Time) {
	e.txns = append(e.txns, disputeTxn{id: f.disputeTxnID(e), amount: -e.amount, fee: DisputeFee, created: now})
}

// disputeTxnID is the id of e's next balance transaction.
func (f *Fake) disputeTxnID(e *disputeEntry) string {
	return fmt.Sprintf("txn_%s_%d", strings.TrimPrefix(e.id, "du_"), len(e.txns)+1)
}

// MoveDispute moves the dispute disputeID (the provider's "du_…" id) to
// status now, as the card network decides, and returns it. Only Stripe's
// forward moves are allowed:
//
//	warning_needs_response  → warning_under_review, warning_closed
//	warning_under_review    → warning_closed
//	an inquiry (either)     → needs_response (it escalates: a chargeback,
//	                          its amount withdrawn, evidence due anew)
//	needs_response          → under_review, won, lost
//	under_review            → won, lost
//	any open status         → prevented
//
// Its events: charge.dispute.updated for a move to an open status (then
// charge.dispute.funds_withdrawn for an escalation), charge.dispute.closed
// for a decision (then charge.dispute.funds_reinstated when won: the
// amount withdrawn comes back, the fee does not). They are logged and
// announced as OpenDispute's; Server.MoveDispute announces them at once,
// or never. It is not a provider call: it counts in no Calls.
//
// The error wraps ErrNoSuchDispute for an unknown id, ErrUnknownStatus for
// a status that is none of Stripe's, and ErrDisputeMove for a move not
// allowed (backwards, from a closed status, or to the status it has);
// nothing moves.
func (f *Fake) MoveDispute(disputeID, status string) (provider.Dispute, error) {
	return f.moveDispute(disputeID, status, false)
}

// moveDispute is MoveDispute, with silent: its events are never
// announced.
func (f *Fake) moveDispute(disputeID, status string, silent bool) (provider.Dispute, error) {
	where := "move dispute " + disputeID
	if !slices.Contains(provider.DisputeStatuses, status) {
		return provider.Dispute{}, fmt.Errorf("fakeprovider: %s: status %q: %w (want one of %s)", where, status, ErrUnknownStatus, strings.Join(provider.DisputeStatuses, ", "))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.disputeByID[disputeID]
	if e == nil {
		return provider.Dispute{}, fmt.Errorf("fakeprovider: %s: %w", where, ErrNoSuchDispute)
	}
	if !slices.Contains(disputeMoves[e.status], status) {
		return provider.Dispute{}, fmt.Errorf("%w: %s: from %s to %s (from %s: %s)", ErrDisputeMove, where, e.status, status, e.status, movesFrom(e.status))
	}
	now := f.cfg.Now()
	types := []string{provider.EventDisputeUpdated}
	switch {
	case status == provider.DisputeNeedsResponse: // an inquiry escalates
		e.refundable, e.dueBy = false, now.Add(DisputeEvidenceWindow)
		f.withdraw(e, now)
		types = append(types, provider.EventDisputeFundsWithdrawn)
	case status == provider.DisputeWon:
		types = []string{provider.EventDisputeClosed}
		if w, _ := e.withdrawn(); w > 0 {
			e.txns = append(e.txns, disputeTxn{id: f.disputeTxnID(e), amount: w, created: now})
			types = append(types, provider.EventDisputeFundsReinstated)
		}
	case disputeClosed(status):
		types = []string{provider.EventDisputeClosed}
	}
	e.status = status
	f.recordDispute(e, now, types, silent)
	return e.dispute(), nil
}

// movesFrom lists the statuses a dispute in status may move to.
func movesFrom(status string) string {
	if len(disputeMoves[status]) == 0 {
		return "none, it is closed"
	}
	return strings.Join(disputeMoves[status], ", ")
}

// recordDispute logs e's change at at, as events of types, in the event
// log, and for every Server that watches. Call with f.mu held.
func (f *Fake) recordDispute(e *disputeEntry, at time.Time, types []string, silent bool) {
	events := f.logDispute(e, types, at)
	var pay Charge
	if p := f.byID[e.paymentID]; p != nil {
		pay = p.Charge
	}
	for _, l := range f.watchers {
		l.changes = append(l.changes, change{c: pay, dispute: e.id, status: e.status, at: at, silent: silent, events: events})
	}
}

// disputeBlocking returns the first dispute of paymentID that refuses a
// refund of it (disputeEntry.blocksRefund), nil if none. Call with f.mu
// held.
func (f *Fake) disputeBlocking(paymentID string) *disputeEntry {
	for _, e := range f.disputes {
		if e.paymentID == paymentID && e.blocksRefund() {
			return e
		}
	}
	return nil
}

// returned returns how much of paymentID went back to the customer, or
// may: its refunds that hold part of it and its lost disputes. Call with
// f.mu held.
func (f *Fake) returned(paymentID string, now time.Time) int64 {
	sum := f.held(paymentID, now)
	for _, e := range f.disputes {
		if e.paymentID == paymentID && e.status == provider.DisputeLost {
			sum += e.amount
		}
	}
	return sum
}

// disputeCard reports whether paymentMethod is a test card whose payment
// is disputed once it succeeds, and whether the dispute is an inquiry.
func disputeCard(paymentMethod string) (card, inquiry bool) {
	switch paymentMethod {
	case PaymentMethodDispute:
		return true, false
	case PaymentMethodDisputeInquiry:
		return true, true
	}
	return false, false
}

// disputeIfCard opens the dispute of a dispute test card's payment e at
// at, the first time e is succeeded. Call with f.mu held.
func (f *Fake) disputeIfCard(e *entry, at time.Time, silent bool) {
	card, inquiry := disputeCard(e.PaymentMethod)
	if !card || e.disputed || e.Status != StatusSucceeded {
		return
	}
	e.disputed = true
	if _, err := f.newDispute(e.ID, DisputeOptions{Inquiry: inquiry}, at, silent); err != nil {
		panic(fmt.Sprintf("fakeprovider: dispute of test card payment %s: %v", e.ID, err)) // a new succeeded payment: cannot fail
	}
}

// Disputes returns every dispute of the ledger as it is now (the
// disputes of test cards' payments that settled included), oldest first,
// its PurchaseID the payment's.
func (f *Fake) Disputes() []provider.Dispute {
	return f.disputesWhere(func(*disputeEntry) bool { return true })
}

// DisputesOf returns the disputes of payment paymentID (the provider's
// "pi_…" id) as they are now, oldest first, closed ones included.
func (f *Fake) DisputesOf(paymentID string) []provider.Dispute {
	return f.disputesWhere(func(e *disputeEntry) bool { return e.paymentID == paymentID })
}

func (f *Fake) disputesWhere(keep func(*disputeEntry) bool) []provider.Dispute {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settleDue(f.cfg.Now()) // a test card's payment that settles opens its dispute
	var out []provider.Dispute
	for _, e := range f.disputes {
		if keep(e) {
			out = append(out, e.dispute())
		}
	}
	return out
}

// ListDisputes implements provider.Provider: every dispute opened within
// w (From inclusive, Until exclusive), oldest first, each as it is now
// with its payment's purchase id, except those opened less than
// Config.ListLag ago. Each page of Config.ListPageSize disputes is one
// OpDisputeList call, gate passed before it, rate limited as a list. An
// empty or reversed window lists nothing.
func (f *Fake) ListDisputes(ctx context.Context, w provider.Window, gate provider.PageGate) ([]provider.Dispute, error) {
	what := fmt.Sprintf("list disputes created in [%s, %s)", w.From.Format(time.RFC3339Nano), w.Until.Format(time.RFC3339Nano))
	return listPages(f, ctx, gate, provider.OpDisputeList, what, func(from int, now time.Time, add func(provider.Dispute) bool) (int, error) {
		f.settleDue(now) // a test card's payment that settles opens its dispute
		for i := from; i < len(f.disputes); i++ {
			e := f.disputes[i]
			if !f.listable(e.created, now) || e.created.Before(w.From) || !e.created.Before(w.Until) {
				continue
			}
			if !add(e.dispute()) {
				return i + 1, nil
			}
		}
		return -1, nil
	})
}
