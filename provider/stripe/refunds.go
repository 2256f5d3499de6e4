package stripe

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/payrecon/payrecon/provider"
)

// Refunds: one Stripe Refund per payrecon refund, created with the
// refund's stored idempotency key and tagged with metadata refund_id and
// purchase_id, so that a listing of the payment's refunds finds it when
// its id was never learnt.

// MetadataRefundID holds payrecon's refund id on every Refund this
// adapter creates; MetadataPurchaseID holds the purchase's.
const MetadataRefundID = "refund_id"

// refundStatusOutcomes maps a Refund status to an outcome. A status not
// listed (one Stripe may add) is Unknown, never Failed: a refund whose
// status is not understood may still return the money.
var refundStatusOutcomes = map[stripego.RefundStatus]provider.Outcome{
	stripego.RefundStatusSucceeded: provider.Succeeded,
	// Not final: the bank is processing it, or the customer must give
	// details for it (requires_action, for payment methods that need
	// them); it may still succeed, fail or be canceled.
	stripego.RefundStatusPending:        provider.Pending,
	stripego.RefundStatusRequiresAction: provider.Pending,
	// Final, no money went back: the refund failed (failure_reason tells
	// why) or was canceled before it was made.
	stripego.RefundStatusFailed:   provider.Failed,
	stripego.RefundStatusCanceled: provider.Failed,
}

// refundOutcome returns the outcome of a Refund in status:
// refundStatusOutcomes' row, or Unknown for a status it does not list.
//
//	succeeded                   Succeeded
//	pending, requires_action    Pending
//	failed, canceled            Failed (Reason: failure_reason)
//	any other status            Unknown
func refundOutcome(status stripego.RefundStatus) provider.Outcome {
	if o, ok := refundStatusOutcomes[status]; ok {
		return o
	}
	return provider.Unknown
}

// CreateRefund creates a Refund of req.Amount of the PaymentIntent
// req.PaymentID (POST /v1/refunds: payment_intent, amount, reason when
// set, metadata refund_id and purchase_id) with req.IdempotencyKey, and
// translates the answer (see translateRefund). The parameters are a pure
// function of req, so a replay of the stored request is the same Stripe
// request, which Stripe answers from its idempotency cache while it keeps
// the key. req.Currency is not sent: Stripe refunds in the payment's
// currency (the result reports it, for the caller to compare).
//
// Refused before sending (ErrRejected): a request without a key (stripe-go
// would invent one, and a replay could refund twice), a padded or too long
// key, no payment id, an amount not positive (Stripe would refund all that
// remains of the payment when none is sent). Stripe refuses without acting
// a payment that did not succeed, an amount over what remains of it, a
// payment already refunded in full, a payment charged back by a dispute
// (400 charge_not_refundable, amount_too_large, charge_already_refunded,
// charge_disputed): errors wrapping provider.ErrRefundRefused (and so
// ErrRejected), which RefundOutcomeOf reads as Failed.
func (p *Provider) CreateRefund(ctx context.Context, req provider.RefundRequest) (provider.RefundResult, error) {
	where := fmt.Sprintf("create refund %s of %s (key %s)", req.RefundID, req.PaymentID, req.IdempotencyKey)
	switch key := req.IdempotencyKey; {
	case key == "" || strings.TrimSpace(key) != key:
		return provider.RefundResult{}, fmt.Errorf("stripe: %s: empty or padded idempotency key: %w", where, ErrRejected)
	case len(key) > maxKeyLength:
		return provider.RefundResult{}, fmt.Errorf("stripe: %s: idempotency key longer than %d bytes: %w", where, maxKeyLength, ErrRejected)
	case req.PaymentID == "":
		return provider.RefundResult{}, fmt.Errorf("stripe: %s: no payment id: %w", where, ErrRejected)
	case req.Amount <= 0:
		return provider.RefundResult{}, fmt.Errorf("stripe: %s: amount %d is not positive: %w", where, req.Amount, ErrRejected)
	}
	if err := ctx.Err(); err != nil {
		return provider.RefundResult{}, notSentYet(where, err)
	}
	params := refundParams(req)
	p.on(params)
	r, err := p.client.V1Refunds.Create(ctx, params)
	return translateRefund(provider.OpRefundCreate, where, r, err)
}

// refundParams returns the Stripe parameters for req, from req alone.
// Changing what it sends changes the parameters of requests whose keys
// Stripe still holds: their replays would fail as idempotency mismatches.
func refundParams(req provider.RefundRequest) *stripego.RefundCreateParams {
	params := &stripego.RefundCreateParams{
		PaymentIntent: stripego.String(req.PaymentID),
		Amount:        stripego.Int64(req.Amount),
	}
	if req.Reason != "" {
		params.Reason = stripego.String(req.Reason)
	}
	params.AddMetadata(MetadataRefundID, req.RefundID)
	params.AddMetadata(MetadataPurchaseID, req.PurchaseID)
	params.SetIdempotencyKey(req.IdempotencyKey)
	return params
}

// GetRefund retrieves the Refund refundID and translates it (see
// translateRefund). An id Stripe does not know (404 resource_missing)
// gives Outcome NotFound with Reason "resource_missing" and no error,
// never Failed.
func (p *Provider) GetRefund(ctx context.Context, refundID string) (provider.RefundResult, error) {
	where := fmt.Sprintf("retrieve refund %s", refundID)
	if refundID == "" {
		return provider.RefundResult{}, fmt.Errorf("stripe: %s: empty refund id: %w", where, ErrRejected)
	}
	if err := ctx.Err(); err != nil {
		return provider.RefundResult{}, notSentYet(where, err)
	}
	params := &stripego.RefundRetrieveParams{}
	p.on(params)
	r, err := p.client.V1Refunds.Retrieve(ctx, refundID, params)
	return translateRefund(provider.OpRefundGet, where, r, err)
}

// ListRefunds returns every Refund of the PaymentIntent paymentID (GET
// /v1/refunds?payment_intent=…), reading every page (one request per
// page, gate passed before each: see listPages), oldest first; none for a
// payment without refunds. Each is translated by refundOf: a status the
// table does not know gives that refund Outcome Unknown rather than
// failing the listing. A failure on any page returns no refunds and the
// error, translated as for the other calls (an unknown payment, which
// Stripe refuses with resource_missing, wraps ErrRejected); so does an
// error of gate, wrapped. An empty payment id is refused before sending
// (ErrRejected).
func (p *Provider) ListRefunds(ctx context.Context, paymentID string, gate provider.PageGate) ([]provider.RefundResult, error) {
	where := fmt.Sprintf("list refunds of payment intent %s", paymentID)
	if paymentID == "" {
		return nil, fmt.Errorf("stripe: %s: empty payment id: %w", where, ErrRejected)
	}
	return p.listRefunds(ctx, gate, where, func() *stripego.RefundListParams {
		return &stripego.RefundListParams{PaymentIntent: stripego.String(paymentID)}
	})
}

// ListRefundsCreated returns every Refund Stripe created within w (GET
// /v1/refunds with created[gte] and created[lt]), reading every page,
// oldest first, for the audit from Stripe's side. The window is widened to
// the whole seconds that cover it and refused when it has a zero bound,
// starts before the Unix epoch or is empty, as List's (ErrRejected);
// pages, gate, refunds and errors are as ListRefunds'.
func (p *Provider) ListRefundsCreated(ctx context.Context, w provider.Window, gate provider.PageGate) ([]provider.RefundResult, error) {
	where := fmt.Sprintf("list refunds created in [%s, %s)", formatBound(w.From), formatBound(w.Until))
	if err := checkWindow(where, w); err != nil {
		return nil, err
	}
	return p.listRefunds(ctx, gate, where, func() *stripego.RefundListParams {
		return &stripego.RefundListParams{
			CreatedRange: &stripego.RangeQueryParams{
				GreaterThanOrEqual: w.From.Unix(),
				LesserThan:         ceilUnix(w.Until),
			},
		}
	})
}

// listRefunds reads every page of a listing of refunds, each request's
// parameters made by params, and returns them oldest first: by creation
// time, those of the same second in Stripe's order reversed (Stripe lists
// newest first).
func (p *Provider) listRefunds(ctx context.Context, gate provider.PageGate, where string, params func() *stripego.RefundListParams) ([]provider.RefundResult, error) {
	var refunds []provider.RefundResult
	err := listPages(ctx, gate, where, provider.OpRefundList, p.pageSize,
		func(ctx context.Context, after *string) stripego.Seq2[*stripego.Refund, error] {
			ps := params()
			ps.Limit, ps.StartingAfter, ps.Single = stripego.Int64(p.pageSize), after, true
			p.on(ps)
			return p.client.V1Refunds.List(ctx, ps)
		},
		func(r *stripego.Refund) (string, error) {
			refunds = append(refunds, refundOf(r))
			return r.ID, nil
		})
	if err != nil {
		return nil, err
	}
	slices.Reverse(refunds)
	slices.SortStableFunc(refunds, func(a, b provider.RefundResult) int { return a.Created.Compare(b.Created) })
	return refunds, nil
}

// translateRefund is translate for the refund calls: with err nil, the
// Refund r by the refund status table (refundOutcome); a status the table
// does not know is an error, so the call's outcome is Unknown, as for a
// PaymentIntent. With err not nil, the error as translateError translates
// it for op (429 → ErrRetryLater, idempotency_error →
// ErrIdempotencyMismatch, other 4xx → ErrRejected, 5xx, timeouts and lost
// replies → Unknown, a dial that failed → ErrRetryLater), except:
//
//	409 idempotency_key_in_use                 Pending, Reason ReasonKeyInUse, nil error
//	404 resource_missing on OpRefundGet        NotFound, Reason ReasonNotFound, nil error
//	a refusal for the payment on               error wrapping provider.ErrRefundRefused → Failed
//	  OpRefundCreate (refundRefusals:
//	  amount_too_large, charge_disputed, …)
//	card_error (never sent for a refund)       error → Unknown
func translateRefund(op provider.Op, where string, r *stripego.Refund, err error) (provider.RefundResult, error) {
	if err != nil {
		return refundError(op, where, err)
	}
	if r == nil {
		return provider.RefundResult{}, fmt.Errorf("stripe: %s: no refund in the answer", where)
	}
	res := refundOf(r)
	if res.Outcome == provider.Unknown {
		return res, fmt.Errorf("stripe: %s: refund %s has unrecognised status %q: outcome unknown", where, r.ID, r.Status)
	}
	return res, nil
}

// refundError translates the error of a refund call through
// translateError, keeping its classification.
func refundError(op provider.Op, where string, err error) (provider.RefundResult, error) {
	res, terr := translateError(op, where, err)
	if terr != nil {
		return provider.RefundResult{Reason: res.Reason}, terr
	}
	switch res.Outcome {
	case provider.Pending, provider.NotFound: // a key in use; an unknown id
		return provider.RefundResult{Outcome: res.Outcome, Reason: res.Reason}, nil
	}
	return provider.RefundResult{Reason: res.Reason}, fmt.Errorf("stripe: %s: unexpected %s answer (%s) to a refund call: outcome unknown", where, res.Outcome, res.Reason)
}

// refundOf translates a Refund: its id, payment (the payment_intent, else
// the charge's), metadata refund_id and purchase_id exactly as stored (""
// if none), amount, currency, status, creation time in UTC, Reason its
// failure_reason when failed or canceled, and Outcome by refundOutcome
// (Unknown for a status the table does not know).
func refundOf(r *stripego.Refund) provider.RefundResult {
	res := provider.RefundResult{
		Outcome:    refundOutcome(r.Status),
		ID:         r.ID,
		RefundID:   r.Metadata[MetadataRefundID],
		PurchaseID: r.Metadata[MetadataPurchaseID],
		Amount:     r.Amount,
		Currency:   string(r.Currency),
		Status:     string(r.Status),
	}
	switch {
	case r.PaymentIntent != nil:
		res.PaymentID = r.PaymentIntent.ID
	case r.Charge != nil && r.Charge.PaymentIntent != nil:
		res.PaymentID = r.Charge.PaymentIntent.ID
	}
	if r.Created > 0 {
		res.Created = time.Unix(r.Created, 0).UTC()
	}
	if res.Outcome == provider.Failed {
		res.Reason = string(r.FailureReason)
	}
	return res
}
