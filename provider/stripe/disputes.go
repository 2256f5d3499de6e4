package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/payrecon/payrecon/provider"
)

// Disputes: a cardholder's challenge of a payment, which the card network
// opens and Stripe shows as a Dispute. The adapter only reads them: the
// disputes opened in a window (ListDisputes) and the charge.dispute.*
// events (Verify, ListEvents), all translated by disputeOf.

// disputeExpandPaymentIntent expands each listed dispute's PaymentIntent,
// so that its metadata names the purchase (Dispute.PurchaseID) without a
// request per dispute.
const disputeExpandPaymentIntent = "data.payment_intent"

// ListDisputes returns every Dispute Stripe opened within w (GET
// /v1/disputes with created[gte] and created[lt], expand[]
// data.payment_intent), reading every page (one request per page of
// Config.ListPageSize, gate passed before each: see listPages), oldest
// first: by creation time, those of the same second in Stripe's order
// reversed (Stripe lists newest first). Each is translated by disputeOf,
// its PurchaseID read from the expanded PaymentIntent's metadata; a
// dispute of no PaymentIntent has PaymentID "" (not a payrecon payment).
//
// The window is widened to the whole seconds that cover it and refused
// when it has a zero bound, starts before the Unix epoch or is empty, as
// List's (ErrRejected). A failure on any page returns no disputes and the
// error, translated as for the other listings (see listErrorOf); so does
// an error of gate, wrapped, and a dispute disputeOf refuses (no id, an
// amount not positive, no currency), whose outcome is unknown: a listing
// that skipped it would pass for complete.
func (p *Provider) ListDisputes(ctx context.Context, w provider.Window, gate provider.PageGate) ([]provider.Dispute, error) {
	where := fmt.Sprintf("list disputes created in [%s, %s)", formatBound(w.From), formatBound(w.Until))
	if err := checkWindow(where, w); err != nil {
		return nil, err
	}
	var disputes []provider.Dispute
	err := listPages(ctx, gate, where, provider.OpDisputeList, p.pageSize,
		func(ctx context.Context, after *string) stripego.Seq2[*stripego.Dispute, error] {
			params := &stripego.DisputeListParams{
				CreatedRange: &stripego.RangeQueryParams{
					GreaterThanOrEqual: w.From.Unix(),
					LesserThan:         ceilUnix(w.Until),
				},
			}
			params.AddExpand(disputeExpandPaymentIntent)
			params.Limit, params.StartingAfter, params.Single = stripego.Int64(p.pageSize), after, true
			p.on(params)
			return p.client.V1Disputes.List(ctx, params)
		},
		func(d *stripego.Dispute) (string, error) {
			res, err := disputeOf(d)
			if err != nil {
				return "", fmt.Errorf("stripe: %s: %w: outcome unknown", where, err)
			}
			disputes = append(disputes, res)
			return d.ID, nil
		})
	if err != nil {
		return nil, err
	}
	slices.Reverse(disputes)
	slices.SortStableFunc(disputes, func(a, b provider.Dispute) int { return a.Created.Compare(b.Created) })
	return disputes, nil
}

// disputeOf translates a Stripe Dispute, listed or carried by an event:
// its id; PaymentID its payment_intent ("" when it has none); ChargeID its
// charge; PurchaseID the metadata purchase_id of its payment_intent when
// expanded (exactly as stored, "" otherwise: a webhook's dispute carries
// the PaymentIntent's id only); amount, currency, reason and status as
// Stripe gives them; EvidenceDueBy evidence_details.due_by (zero when 0 or
// absent: no response is possible); ChargeRefundable is_charge_refundable;
// Withdrawn and Reinstated the sums of its balance transactions' amounts
// below and above 0 (their fees apart), Withdrawn as a positive number;
// Created its creation time. Times are in UTC.
//
// It refuses, with an error naming the dispute and wrapping no sentinel,
// a dispute without id, with an amount not positive or without currency:
// no payrecon record can be made of it.
func disputeOf(d *stripego.Dispute) (provider.Dispute, error) {
	switch {
	case d == nil:
		return provider.Dispute{}, errors.New("no dispute")
	case d.ID == "":
		return provider.Dispute{}, errors.New("dispute without id")
	case d.Amount <= 0:
		return provider.Dispute{}, fmt.Errorf("dispute %s has amount %d, want a positive one", d.ID, d.Amount)
	case d.Currency == "":
		return provider.Dispute{}, fmt.Errorf("dispute %s has no currency", d.ID)
	}
	res := provider.Dispute{
		ID:               d.ID,
		Amount:           d.Amount,
		Currency:         string(d.Currency),
		Reason:           string(d.Reason),
		Status:           string(d.Status),
		ChargeRefundable: d.IsChargeRefundable,
	}
	if pi := d.PaymentIntent; pi != nil {
		res.PaymentID = pi.ID
		res.PurchaseID = pi.Metadata[MetadataPurchaseID]
	}
	if d.Charge != nil {
		res.ChargeID = d.Charge.ID
	}
	if e := d.EvidenceDetails; e != nil && e.DueBy > 0 {
		res.EvidenceDueBy = time.Unix(e.DueBy, 0).UTC()
	}
	for _, bt := range d.BalanceTransactions {
		switch {
		case bt == nil:
		case bt.Amount < 0:
			res.Withdrawn -= bt.Amount
		default:
			res.Reinstated += bt.Amount
		}
	}
	if d.Created > 0 {
		res.Created = time.Unix(d.Created, 0).UTC()
	}
	return res, nil
}

// disputeEvent translates a charge.dispute.* event e into ev (see
// Verify): the dispute its object is, Outcome Pending (a dispute settles
// no payment), PaymentID, PurchaseID, Amount and Currency the dispute's.
// An object that is no dispute, or one disputeOf refuses, is
// ErrMalformedEvent.
func disputeEvent(ev provider.Event, e stripego.Event, where string) (provider.Event, error) {
	var d stripego.Dispute
	if err := json.Unmarshal(e.Data.Raw, &d); err != nil {
		return provider.Event{}, fmt.Errorf("%w: %s: data.object is not a dispute: %w", ErrMalformedEvent, where, err)
	}
	if d.Object != "dispute" {
		return provider.Event{}, fmt.Errorf("%w: %s: data.object is a %q with id %q, want a dispute", ErrMalformedEvent, where, d.Object, d.ID)
	}
	res, err := disputeOf(&d)
	if err != nil {
		return provider.Event{}, fmt.Errorf("%w: %s: %w", ErrMalformedEvent, where, err)
	}
	ev.Dispute = &res
	ev.Outcome = provider.Pending
	ev.PaymentID = res.PaymentID
	ev.PurchaseID = res.PurchaseID
	ev.Amount = res.Amount
	ev.Currency = res.Currency
	return ev, nil
}
