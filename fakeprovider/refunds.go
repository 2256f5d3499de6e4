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

// Refunds: Stripe Refunds of the ledger's charges, each with its own id
// ("re_…"), under its own idempotency key, with the faults of a real
// provider.

// Stripe's Refund statuses.
const (
	RefundStatusSucceeded      = "succeeded"
	RefundStatusPending        = "pending"
	RefundStatusRequiresAction = "requires_action"
	RefundStatusFailed         = "failed"
	RefundStatusCanceled       = "canceled"
)

// refundStatuses are the statuses a refund may have.
var refundStatuses = []string{RefundStatusSucceeded, RefundStatusPending, RefundStatusRequiresAction, RefundStatusFailed, RefundStatusCanceled}

// RefundFailureReason is the failure_reason of a refund the fake fails
// (the Decline, ProcessingDecline and DeclineThenSucceed faults, SetRefundStatus
// to failed or canceled): one of Stripe's words.
const RefundFailureReason = "expired_or_canceled_card"

// Errors of a refund Stripe would refuse without acting (a 400). Each
// wraps ErrInvalidRequest, and so provider.ErrRejected: nothing was
// refunded, and the same request will be refused again; and, being
// refusals for a reason of the payment, provider.ErrRefundRefused.
var (
	// ErrNotRefundable: the payment has no succeeded charge to refund
	// (it is processing, declined, canceled or waiting for action).
	// Stripe's code charge_not_refundable.
	ErrNotRefundable = fmt.Errorf("fakeprovider: payment has no successful charge to refund: %w: %w", ErrInvalidRequest, provider.ErrRefundRefused)
	// ErrRefundTooLarge: the refund's amount is more than what remains of
	// the payment once its refunds that are not failed or canceled
	// (pending ones included) are taken off. Stripe's code
	// amount_too_large.
	ErrRefundTooLarge = fmt.Errorf("fakeprovider: refund exceeds the payment's unrefunded amount: %w: %w", ErrInvalidRequest, provider.ErrRefundRefused)
	// ErrAlreadyRefunded: nothing remains of the payment to refund. It
	// wraps ErrRefundTooLarge too. Stripe's code charge_already_refunded.
	ErrAlreadyRefunded = fmt.Errorf("fakeprovider: payment already fully refunded: %w", ErrRefundTooLarge)
)

// ErrNoSuchRefund is wrapped by the error of SetRefundStatus for an
// unknown refund id.
var ErrNoSuchRefund = errors.New("fakeprovider: no such refund")

// Refund is one refund in the ledger, as Stripe records a Refund: failed
// and canceled ones are recorded too.
type Refund struct {
	ID        string // "re_..."
	PaymentID string // the refunded charge's ("pi_...")
	// RefundID and PurchaseID are payrecon's ids from the request's
	// metadata (refund_id, purchase_id); "" when it names none.
	RefundID   string
	PurchaseID string
	Amount     int64
	// Currency is the payment's: Stripe refunds in the charge's currency.
	Currency string
	// Reason is the reason word the request gave ("duplicate", ...), ""
	// for none.
	Reason         string
	IdempotencyKey string
	// Status is the refund's Stripe status now: succeeded, pending,
	// requires_action, failed or canceled.
	Status string
	// FinalStatus is the status the refund has once settled: Status itself
	// unless a fault left it pending (or failed before succeeding). Only
	// the simulator knows it in advance. SetRefundStatus sets both.
	FinalStatus string
	// FailureReason is the failure_reason it has when failed or canceled
	// (RefundFailureReason), else "".
	FailureReason string
	// Fault is the fault injected into the refund create that made it.
	Fault     Fault
	CreatedAt time.Time
	// SettlesAt is when a pending refund settles; zero for a refund
	// created final.
	SettlesAt time.Time
	// Outside reports a refund made by RefundOutside, not by a refund
	// create: payrecon did not make it, and it has no idempotency key.
	Outside bool
	// MovedAt is when SetRefundStatus last moved the refund; zero if never.
	MovedAt time.Time
}

// MoneyReturned reports whether the refund returned the money: its final
// status is succeeded. A failed or canceled refund is in the ledger but
// returned nothing.
func (r Refund) MoneyReturned() bool { return r.FinalStatus == RefundStatusSucceeded }

// holds reports whether the refund counts against its payment's amount,
// as Stripe counts it: unless it failed or was canceled (and stays so),
// pending ones included.
func (r Refund) holds() bool { return !(refundGone(r.Status) && refundGone(r.FinalStatus)) }

// refundGone reports whether a refund in status returns nothing.
func refundGone(status string) bool {
	return status == RefundStatusFailed || status == RefundStatusCanceled
}

// OutsideRefund is a refund made outside payrecon (see Fake.RefundOutside).
type OutsideRefund struct {
	// PaymentID is the refunded payment's id. Required.
	PaymentID string
	// Amount is the refund's amount; 0 refunds all that remains of the
	// payment, as a refund without amount does in Stripe.
	Amount int64
	// RefundID and PurchaseID are the metadata refund_id and purchase_id;
	// "" for none (a refund made in a dashboard names none).
	RefundID   string
	PurchaseID string
	// Reason is the reason word; "" for none.
	Reason string
	// Status is the refund's status, one of the RefundStatus* constants.
	// Default RefundStatusSucceeded. It stays until SetRefundStatus moves
	// it.
	Status string
}

// refundEntry is a refund in the ledger, with what only the simulator
// knows.
type refundEntry struct {
	Refund
	seq        int // place in creation order, from 1
	staleReads int // GetRefund calls left that answer pending
}

// refundAttempt is what one refund create did, before its reply reaches
// the caller: attempt's counterpart.
type refundAttempt struct {
	fault   Fault
	res     provider.RefundResult
	err     error
	created bool
}

// refundSalt separates the refund creates' draws from the creates' draws
// of the same seed and key.
const refundSalt = 0x72656675_6e647321 // "refunds!"

// ScriptRefund queues faults for the next CreateRefund calls for refundID
// (the request's RefundID, payrecon's refund id), one per call in order,
// after any already queued, as Script does for a purchase's creates; see
// Fault for what each does to a refund. A request with no RefundID uses
// its idempotency key instead.
func (f *Fake) ScriptRefund(refundID string, faults ...Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refundFaults.script(refundID, faults)
}

// refundStream is the key of req's fault draws and scripts: its RefundID,
// else its idempotency key.
func refundStream(req provider.RefundRequest) string {
	if req.RefundID != "" {
		return req.RefundID
	}
	return req.IdempotencyKey
}

// CreateRefund implements provider.Provider. It refunds req.Amount of the
// payment req.PaymentID unless the key's saved response is replayed; the
// replay is the response as first sent (a pending refund replays as
// pending even once settled), as in Stripe, and makes no second refund.
// The same key with other parameters, or a key first used by Create, is an
// error wrapping provider.ErrIdempotencyMismatch; a refund create arriving
// while another with its key is in flight answers Pending with Reason
// ReasonKeyInUse.
//
// Stripe's rules apply, checked when the refund would be made, and a
// refused request saves no key: an unknown payment (ErrNoSuchPayment), a
// payment not succeeded (ErrNotRefundable), a payment charged back by a
// dispute (ErrChargeDisputed), an amount over what remains of the payment
// (ErrRefundTooLarge, ErrAlreadyRefunded), an amount not positive: each
// error wraps ErrInvalidRequest and provider.ErrRejected, and nothing is
// refunded. The refund's currency is the payment's
// (req.Currency is not checked: Stripe takes none).
//
// Faults come from the refund's script (ScriptRefund), else from
// Config.RefundFaults drawn for the refund (see Fault). After a LostReply
// fault, or when ctx ends while the request is in flight, the refund is
// made but CreateRefund returns an unknown-outcome error.
func (f *Fake) CreateRefund(ctx context.Context, req provider.RefundRequest) (provider.RefundResult, error) {
	if err := f.admit(ctx, provider.OpRefundCreate); err != nil {
		return provider.RefundResult{}, err
	}
	if err := ctx.Err(); err != nil {
		f.mu.Lock()
		f.calls[provider.OpRefundCreate]++
		f.refundKeyCalls[req.IdempotencyKey]++
		f.mu.Unlock()
		return provider.RefundResult{}, fmt.Errorf("fakeprovider: refund create for %s: not sent: %w", req.RefundID, err)
	}
	a := f.createRefundHashed(req, req.Hash())
	switch {
	case a.fault == FailBefore || a.fault == Timeout || a.fault == LostReply:
		return provider.RefundResult{}, &FaultError{Fault: a.fault, PurchaseID: req.PurchaseID, RefundID: refundStream(req)}
	case a.err != nil:
		return provider.RefundResult{}, a.err
	case ctx.Err() != nil: // the caller gave up while the provider acted
		return provider.RefundResult{}, fmt.Errorf("fakeprovider: refund create for %s: outcome unknown: %w", req.RefundID, ctx.Err())
	}
	return a.res, nil
}

// createRefundHashed runs one refund create up to its reply, with hash
// standing for the request's parameters in the key store, leaving the
// fault for the caller to act out (see create).
func (f *Fake) createRefundHashed(req provider.RefundRequest, hash string) refundAttempt {
	key := req.IdempotencyKey
	where := "refund create for " + refundStream(req)
	f.mu.Lock()
	f.calls[provider.OpRefundCreate]++
	f.refundKeyCalls[key]++
	a := refundAttempt{fault: f.refundFaults.next(refundStream(req))}
	if a.fault == FailBefore || a.fault == Timeout {
		f.mu.Unlock()
		return a
	}
	if a.fault == Reject {
		f.mu.Unlock()
		a.err = fmt.Errorf("%w: %s: injected reject", ErrInvalidRequest, where)
		return a
	}
	if err := validateRefund(req); err != nil {
		f.mu.Unlock()
		a.err = fmt.Errorf("%s: %w", where, err)
		return a
	}
	if key != "" { // as in Stripe, a request without a key is never replayed
		if f.inFlight[key] {
			f.mu.Unlock()
			a.res = provider.RefundResult{Outcome: provider.Pending, Reason: ReasonKeyInUse}
			return a
		}
		if s, ok := f.keys[key]; ok {
			switch {
			case f.cfg.Now().Sub(s.at) > f.cfg.KeyRetention:
				delete(f.keys, key) // forgotten: this one refunds again, if it may
			case s.op != provider.OpRefundCreate || s.hash != hash:
				f.mu.Unlock()
				a.err = fmt.Errorf("fakeprovider: %s: key %q: %w", where, key, provider.ErrIdempotencyMismatch)
				return a
			default:
				f.mu.Unlock()
				a.res = s.refund
				return a
			}
		}
		f.inFlight[key] = true
	}
	f.mu.Unlock()

	// The lock is not held while the request is in flight, so that a
	// concurrent request with the same key can see it there.
	if f.cfg.OnAcceptRefund != nil {
		f.cfg.OnAcceptRefund(req)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if key != "" {
		delete(f.inFlight, key)
	}
	// Stripe's rules, checked with the refund made under the same lock,
	// so that concurrent refunds cannot together exceed the payment.
	now := f.cfg.Now()
	pay, err := f.refundable(req.PaymentID, req.Amount, now)
	if err != nil {
		a.err = fmt.Errorf("%s: %w", where, err)
		return a
	}
	e := f.newRefund(req, pay, a.fault, now)
	a.res = e.result()
	a.created = true
	if key != "" {
		f.keys[key] = saved{op: provider.OpRefundCreate, hash: hash, refund: a.res, at: now}
	}
	return a
}

// validateRefund checks what needs no ledger: a payment named, an amount
// positive.
func validateRefund(req provider.RefundRequest) error {
	switch {
	case req.PaymentID == "":
		return fmt.Errorf("%w: no payment to refund", ErrInvalidRequest)
	case req.Amount <= 0:
		return fmt.Errorf("%w: amount %d must be positive", ErrInvalidRequest, req.Amount)
	}
	return nil
}

// refundable returns the payment paymentID if amount of it may be refunded
// now: it exists, it succeeded, no dispute charged it back (see
// ErrChargeDisputed), and amount is at most what its refunds that hold
// (Refund.holds) and its lost disputes leave of it. Call with f.mu held.
func (f *Fake) refundable(paymentID string, amount int64, now time.Time) (*entry, error) {
	pay := f.byID[paymentID]
	if pay == nil {
		return nil, fmt.Errorf("%w: %w: %s", ErrInvalidRequest, ErrNoSuchPayment, paymentID)
	}
	f.settle(pay, now)
	if pay.Status != StatusSucceeded {
		return nil, fmt.Errorf("%w: payment %s is %s", ErrNotRefundable, paymentID, pay.Status)
	}
	if d := f.disputeBlocking(paymentID); d != nil {
		return nil, fmt.Errorf("%w: payment %s, dispute %s is %s", ErrChargeDisputed, paymentID, d.id, d.status)
	}
	remaining := pay.Amount - f.returned(paymentID, now)
	switch {
	case remaining <= 0:
		return nil, fmt.Errorf("%w: payment %s (%d)", ErrAlreadyRefunded, paymentID, pay.Amount)
	case amount > remaining:
		return nil, fmt.Errorf("%w: refund amount (%d) is greater than unrefunded amount on payment %s (%d)", ErrRefundTooLarge, amount, paymentID, remaining)
	}
	return pay, nil
}

// held returns the sum of the refunds of paymentID that hold part of it.
// Call with f.mu held.
func (f *Fake) held(paymentID string, now time.Time) int64 {
	var sum int64
	for _, e := range f.refunds {
		if e.PaymentID != paymentID {
			continue
		}
		f.settleRefund(e, now)
		if e.holds() {
			sum += e.Amount
		}
	}
	return sum
}

// newRefund records a refund of pay made by req under fault. Call with
// f.mu held.
func (f *Fake) newRefund(req provider.RefundRequest, pay *entry, fault Fault, now time.Time) *refundEntry {
	f.refundSeq++
	e := &refundEntry{seq: f.refundSeq, Refund: Refund{
		ID:             f.newID("re_", f.refundSeq),
		PaymentID:      pay.ID,
		RefundID:       req.RefundID,
		PurchaseID:     req.PurchaseID,
		Amount:         req.Amount,
		Currency:       pay.Currency,
		Reason:         req.Reason,
		IdempotencyKey: req.IdempotencyKey,
		FinalStatus:    RefundStatusSucceeded,
		Fault:          fault,
		CreatedAt:      now,
	}}
	switch fault {
	case Decline, ProcessingDecline:
		e.FinalStatus, e.FailureReason = RefundStatusFailed, RefundFailureReason
	}
	e.Status = e.FinalStatus
	switch fault {
	case Processing, ProcessingDecline:
		e.Status, e.SettlesAt = RefundStatusPending, now.Add(f.cfg.SettleAfter)
	case DeclineThenSucceed:
		e.Status, e.FailureReason, e.SettlesAt = RefundStatusFailed, RefundFailureReason, now.Add(f.cfg.SettleAfter)
	case StaleProcessing:
		e.staleReads = 1
	}
	f.addRefund(e, false)
	return e
}

// addRefund appends e, just made, to the ledger and logs its creation.
// Call with f.mu held.
func (f *Fake) addRefund(e *refundEntry, silent bool) {
	f.refunds = append(f.refunds, e)
	f.refundByID[e.ID] = e
	if !e.SettlesAt.IsZero() {
		f.unsettledRefunds = append(f.unsettledRefunds, e)
	}
	f.recordRefund(e, e.CreatedAt, true, silent)
}

// settleRefund moves a refund that is not final yet to its final status
// once its time has come, and logs the change as made at SettlesAt. Call
// with f.mu held.
func (f *Fake) settleRefund(e *refundEntry, now time.Time) {
	if !e.SettlesAt.IsZero() && e.Status != e.FinalStatus && !now.Before(e.SettlesAt) {
		e.Status = e.FinalStatus
		f.recordRefund(e, e.SettlesAt, false, false)
	}
}

// result is the neutral answer about the refund as it is now.
func (e *refundEntry) result() provider.RefundResult {
	return refundResult(e.Refund, e.Status)
}

// refundResult is the neutral answer about r in status.
func refundResult(r Refund, status string) provider.RefundResult {
	res := provider.RefundResult{
		Outcome:    refundOutcomeOf(status),
		ID:         r.ID,
		PaymentID:  r.PaymentID,
		RefundID:   r.RefundID,
		PurchaseID: r.PurchaseID,
		Amount:     r.Amount,
		Currency:   r.Currency,
		Status:     status,
		Created:    r.CreatedAt,
	}
	if refundGone(status) {
		res.Reason = r.FailureReason
	}
	return res
}

// refundOutcomeOf maps a Refund status to a neutral outcome.
func refundOutcomeOf(status string) provider.Outcome {
	switch status {
	case RefundStatusSucceeded:
		return provider.Succeeded
	case RefundStatusPending, RefundStatusRequiresAction:
		return provider.Pending
	case RefundStatusFailed, RefundStatusCanceled:
		return provider.Failed
	}
	return provider.Unknown
}

// GetRefund implements provider.Provider: the refund's current status, or
// Outcome NotFound (Reason ReasonNotFound) for an unknown id. After a
// StaleProcessing fault, the first GetRefund of the refund answers
// pending.
func (f *Fake) GetRefund(ctx context.Context, refundID string) (provider.RefundResult, error) {
	if err := f.admit(ctx, provider.OpRefundGet); err != nil {
		return provider.RefundResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[provider.OpRefundGet]++
	if err := ctx.Err(); err != nil {
		return provider.RefundResult{}, fmt.Errorf("fakeprovider: get refund %s: not sent: %w", refundID, err)
	}
	e := f.refundByID[refundID]
	if e == nil {
		return provider.RefundResult{Outcome: provider.NotFound, Reason: ReasonNotFound}, nil
	}
	f.settleRefund(e, f.cfg.Now())
	if e.staleReads > 0 {
		e.staleReads--
		return refundResult(e.Refund, RefundStatusPending), nil
	}
	return e.result(), nil
}

// ListRefunds implements provider.Provider: every refund of paymentID
// (outside ones included), oldest first, settled as of now, except those
// created less than Config.ListLag ago; none for a payment without
// refunds. It reads the ledger: no stale reads. An unknown payment is an
// error wrapping ErrNoSuchPayment and ErrInvalidRequest, as Stripe
// refuses to list the refunds of a PaymentIntent it does not have. Each
// page of Config.ListPageSize refunds is one OpRefundList call, gate
// passed before it.
func (f *Fake) ListRefunds(ctx context.Context, paymentID string, gate provider.PageGate) ([]provider.RefundResult, error) {
	return listPages(f, ctx, gate, provider.OpRefundList, "list refunds of "+paymentID, func(from int, now time.Time, add func(provider.RefundResult) bool) (int, error) {
		if f.byID[paymentID] == nil {
			return 0, fmt.Errorf("fakeprovider: list refunds of %s: %w: %w", paymentID, ErrInvalidRequest, ErrNoSuchPayment)
		}
		for i := from; i < len(f.refunds); i++ {
			e := f.refunds[i]
			if e.PaymentID != paymentID || !f.listable(e.CreatedAt, now) {
				continue
			}
			f.settleRefund(e, now)
			if !add(e.result()) {
				return i + 1, nil
			}
		}
		return -1, nil
	})
}

// ListRefundsCreated implements provider.Provider: every refund created
// within w (From inclusive, Until exclusive), outside ones included,
// oldest first, settled as of now, except those created less than
// Config.ListLag ago. Each page of Config.ListPageSize refunds is one
// OpRefundList call, gate passed before it. An empty or reversed window
// lists nothing.
func (f *Fake) ListRefundsCreated(ctx context.Context, w provider.Window, gate provider.PageGate) ([]provider.RefundResult, error) {
	what := fmt.Sprintf("list refunds created in [%s, %s)", w.From.Format(time.RFC3339Nano), w.Until.Format(time.RFC3339Nano))
	return listPages(f, ctx, gate, provider.OpRefundList, what, func(from int, now time.Time, add func(provider.RefundResult) bool) (int, error) {
		for i := from; i < len(f.refunds); i++ {
			e := f.refunds[i]
			if !f.listable(e.CreatedAt, now) || e.CreatedAt.Before(w.From) || !e.CreatedAt.Before(w.Until) {
				continue
			}
			f.settleRefund(e, now)
			if !add(e.result()) {
				return i + 1, nil
			}
		}
		return -1, nil
	})
}

// RefundOutside records a refund payrecon did not make, as a dashboard or
// another system would make it: no idempotency key, Refund.Outside set,
// created now in o.Status (default succeeded), which it keeps until
// SetRefundStatus moves it. Stripe's rules apply as to a refund create:
// the error wraps ErrNoSuchPayment, ErrNotRefundable, ErrChargeDisputed,
// ErrRefundTooLarge or ErrAlreadyRefunded (and ErrInvalidRequest) and
// nothing is made; or
// ErrUnknownStatus, or ErrInvalidRequest for a negative amount.
//
// It is not a provider call: it counts in no Calls and takes none of the
// refund draws or scripts. A Server with webhooks announces it, as any
// ledger change, after its next create or at its next Tick;
// Server.RefundOutside announces it at once, or never.
func (f *Fake) RefundOutside(o OutsideRefund) (Refund, error) {
	return f.refundOutside(o, false)
}

// refundOutside is RefundOutside, with silent: its creation is never
// announced.
func (f *Fake) refundOutside(o OutsideRefund, silent bool) (Refund, error) {
	if o.Status == "" {
		o.Status = RefundStatusSucceeded
	}
	where := "outside refund of " + o.PaymentID
	switch {
	case !slices.Contains(refundStatuses, o.Status):
		return Refund{}, fmt.Errorf("fakeprovider: %s: status %q: %w (want one of %s)", where, o.Status, ErrUnknownStatus, strings.Join(refundStatuses, ", "))
	case o.Amount < 0:
		return Refund{}, fmt.Errorf("%w: %s: amount %d must not be negative", ErrInvalidRequest, where, o.Amount)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.cfg.Now()
	amount := o.Amount
	if amount == 0 { // all that remains
		if pay := f.byID[o.PaymentID]; pay != nil {
			amount = max(1, pay.Amount-f.returned(o.PaymentID, now))
		}
	}
	pay, err := f.refundable(o.PaymentID, amount, now)
	if err != nil {
		return Refund{}, fmt.Errorf("fakeprovider: %s: %w", where, err)
	}
	f.refundSeq++
	e := &refundEntry{seq: f.refundSeq, Refund: Refund{
		ID:          f.newID("re_", f.refundSeq),
		PaymentID:   pay.ID,
		RefundID:    o.RefundID,
		PurchaseID:  o.PurchaseID,
		Amount:      amount,
		Currency:    pay.Currency,
		Reason:      o.Reason,
		Status:      o.Status,
		FinalStatus: o.Status,
		CreatedAt:   now,
		Outside:     true,
	}}
	if refundGone(o.Status) {
		e.FailureReason = RefundFailureReason
	}
	f.addRefund(e, silent)
	return e.Refund, nil
}

// SetRefundStatus moves the refund refundID (the provider's "re_…" id) to
// status now, whatever its status: a refund failing after it succeeded, a
// cancellation, a pending refund settling otherwise than planned. The
// status is then final for the simulator (Status and FinalStatus alike):
// a settlement still to come is called off. Moving a refund to failed or
// canceled gives it FailureReason RefundFailureReason, if it had none.
// Stripe's limit is not checked: a failed refund moved back to succeeded
// may make the refunds exceed their payment, which is the point of
// moving it.
//
// GetRefund, the listings and the Ledger see the move at once. A Server
// with webhooks announces it, as any ledger change, after its next create
// or at its next Tick; Server.SetRefundStatus announces it at once, or
// never. It is not a provider call: it counts in no Calls.
//
// The error wraps ErrNoSuchRefund for an unknown id and ErrUnknownStatus
// for a status that is none of the RefundStatus* constants.
func (f *Fake) SetRefundStatus(refundID, status string) (Refund, error) {
	return f.setRefundStatus(refundID, status, false)
}

// setRefundStatus is SetRefundStatus, with silent: the move is never
// announced.
func (f *Fake) setRefundStatus(refundID, status string, silent bool) (Refund, error) {
	if !slices.Contains(refundStatuses, status) {
		return Refund{}, fmt.Errorf("fakeprovider: set status of refund %s: status %q: %w (want one of %s)",
			refundID, status, ErrUnknownStatus, strings.Join(refundStatuses, ", "))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.refundByID[refundID]
	if e == nil {
		return Refund{}, fmt.Errorf("fakeprovider: set status of refund %s: %w", refundID, ErrNoSuchRefund)
	}
	now := f.cfg.Now()
	f.settleRefund(e, now)
	e.FinalStatus = status // calls off a settlement to come
	if e.Status == status {
		return e.Refund, nil
	}
	e.Status, e.MovedAt = status, now
	if refundGone(status) && e.FailureReason == "" {
		e.FailureReason = RefundFailureReason
	}
	f.recordRefund(e, now, false, silent)
	return e.Refund, nil
}

// refund returns the refund id, as it is now (not settled).
func (f *Fake) refund(id string) (Refund, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.refundByID[id]
	if e == nil {
		return Refund{}, false
	}
	return e.Refund, true
}

// refundsOf returns the refunds of paymentID as they are now, oldest
// first. Call with f.mu held.
func (f *Fake) refundsOf(paymentID string) []Refund {
	var out []Refund
	for _, e := range f.refunds {
		if e.PaymentID == paymentID {
			out = append(out, e.Refund)
		}
	}
	return out
}
