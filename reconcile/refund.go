package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// A refund is payrecon's second money-moving process: its own id, its own
// stable provider key stored before the first call, its own states
// (statemachine.Refund), moved by leased jobs of kind JobRefund through
// the same worker, judge and inbox as purchases. It is never a charge with
// a minus sign.

// maxRefundReason bounds a refund's reason, in characters.
const maxRefundReason = 500

// NewRefund asks for a refund of part or all of a payment of a purchase.
type NewRefund struct {
	PurchaseID string
	// Amount is in the payment's minor units, > 0.
	Amount int64
	// Reason says why, for the books and the audit trail; required.
	Reason string
	// FindingID names an audit finding whose payment (a duplicate charge)
	// is refunded, for an operator's "refund this charge"; 0 refunds the
	// purchase's own payment.
	FindingID int64
	// RequestedBy is who asks: an API client, "cli", an operator's name.
	RequestedBy string
}

// ValidateRefund checks nr's own fields and returns it normalized, or an
// error wrapping ErrInvalid whose *FieldError names the field. Whether the
// payment may be refunded by that much is the store's to decide.
func ValidateRefund(nr NewRefund) (NewRefund, error) {
	nr.PurchaseID = strings.TrimSpace(nr.PurchaseID)
	nr.Reason = strings.TrimSpace(nr.Reason)
	switch {
	case nr.PurchaseID == "":
		return nr, &FieldError{Field: "purchase_id", Message: "is required"}
	case nr.Amount <= 0:
		return nr, &FieldError{Field: "amount", Message: "must be a positive number of minor units"}
	case nr.Reason == "":
		return nr, &FieldError{Field: "reason", Message: "is required"}
	case utf8.RuneCountInString(nr.Reason) > maxRefundReason:
		return nr, &FieldError{Field: "reason", Message: fmt.Sprintf("must be at most %d characters", maxRefundReason)}
	case !utf8.ValidString(nr.Reason):
		return nr, &FieldError{Field: "reason", Message: "must be valid UTF-8"}
	case nr.FindingID < 0:
		return nr, &FieldError{Field: "finding_id", Message: "must be a finding's id"}
	}
	return nr, nil
}

// CreateRefund stores a new refund in state created, with its stable
// provider key and the exact request its calls will send, and its job, due
// now. Nothing is sent to the provider before this commits. Returns an
// error wrapping ErrInvalid for a bad field, ErrNotFound for an unknown
// purchase or finding, ErrNotRefundable when the purchase is not
// succeeded (and no finding names the payment), ErrDisputed when a
// dispute of the payment forbids a refund (Dispute.BlocksRefund), and
// ErrRefundExceeds when the payment's refunds, pending ones included, and
// its lost disputes would exceed its amount.
func (s *Service) CreateRefund(ctx context.Context, nr NewRefund) (Refund, error) {
	var r Refund
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		r, err = s.createRefundTx(ctx, tx, nr, "")
		return err
	})
	return r, err
}

// createRefundTx is CreateRefund inside the caller's transaction, for a
// refund asked for by API client client ("" for none).
func (s *Service) createRefundTx(ctx context.Context, tx Tx, nr NewRefund, client string) (Refund, error) {
	nr, err := ValidateRefund(nr)
	if err != nil {
		return Refund{}, fmt.Errorf("reconcile: create refund: %w", err)
	}
	op := "reconcile: refund of " + nr.PurchaseID
	p, err := tx.GetPurchase(ctx, nr.PurchaseID)
	if err != nil {
		return Refund{}, fmt.Errorf("%s: %w", op, err)
	}
	payment, currency, why := p.ProviderPaymentID, p.Currency, "requested_by_customer"
	if nr.FindingID != 0 {
		f, err := tx.GetFinding(ctx, nr.FindingID)
		if err != nil {
			return Refund{}, fmt.Errorf("%s: finding %d: %w", op, nr.FindingID, err)
		}
		if f.PurchaseID != p.ID {
			return Refund{}, fmt.Errorf("%s: %w", op, &FieldError{Field: "finding_id",
				Message: fmt.Sprintf("finding %d is about purchase %q, not %s", f.ID, f.PurchaseID, p.ID)})
		}
		if f.PaymentID == p.ProviderPaymentID {
			return Refund{}, fmt.Errorf("%s: %w", op, &FieldError{Field: "finding_id",
				Message: fmt.Sprintf("finding %d names the purchase's own payment %s: refund it as the purchase's, not as a duplicate", f.ID, f.PaymentID)})
		}
		if f.Kind != FindingDuplicateCharge {
			return Refund{}, fmt.Errorf("%s: %w", op, &FieldError{Field: "finding_id",
				Message: fmt.Sprintf("finding %d is %s: only a duplicate charge is refunded by its finding", f.ID, f.Kind)})
		}
		payment, currency, why = f.PaymentID, f.Currency, "duplicate"
	} else if p.State != statemachine.Succeeded || payment == "" {
		return Refund{}, fmt.Errorf("%s: %w", op, E(KindNotRefundable, fmt.Sprintf("the purchase is %s", p.State), nil))
	}
	if d, err := blockingDispute(ctx, tx, p.ID, payment); err != nil {
		return Refund{}, fmt.Errorf("%s: %w", op, err)
	} else if d != nil {
		return Refund{}, fmt.Errorf("%s: %w", op, E(KindDisputed, disputeBlockText(*d), nil))
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return Refund{}, fmt.Errorf("%s: %w", op, err)
	}
	id := NewID("ref_", now)
	req := provider.RefundRequest{
		IdempotencyKey: RefundKeyFor(id),
		RefundID:       id,
		PurchaseID:     p.ID,
		PaymentID:      payment,
		Amount:         nr.Amount,
		Currency:       strings.ToLower(currency),
		Reason:         why,
		Account:        p.Account,
	}
	r := Refund{
		ID:              id,
		PurchaseID:      p.ID,
		PaymentID:       payment,
		FindingID:       nr.FindingID,
		Amount:          nr.Amount,
		Currency:        req.Currency,
		Reason:          nr.Reason,
		Client:          client,
		RequestedBy:     nr.RequestedBy,
		State:           statemachine.Created,
		Version:         1,
		ProviderKey:     req.IdempotencyKey,
		ProviderRequest: &req,
		ParamsHash:      req.Hash(),
		CreatedAt:       now,
		UpdatedAt:       now,
	}
	if err := tx.InsertRefund(ctx, r); err != nil {
		return Refund{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := tx.InsertJob(ctx, Job{Kind: JobRefund, PurchaseID: p.ID, RefundID: id, RunAt: now}); err != nil {
		return Refund{}, fmt.Errorf("%s: job: %w", op, err)
	}
	return r, nil
}

// RefundDetail is a refund with its full audit trail.
type RefundDetail struct {
	Refund      Refund
	Transitions []TransitionRecord
	Attempts    []Attempt
}

// Refund returns the refund with id and its audit trail, or an error
// wrapping ErrNotFound.
func (s *Service) Refund(ctx context.Context, id string) (RefundDetail, error) {
	var d RefundDetail
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		d, err = refundDetailTx(ctx, tx, id)
		return err
	})
	if err != nil {
		return RefundDetail{}, fmt.Errorf("reconcile: refund %s: %w", id, err)
	}
	return d, nil
}

// ClientRefund is Refund for a purchase API client: a refund of a
// purchase the client did not create is not found, as if it did not
// exist.
func (s *Service) ClientRefund(ctx context.Context, client, id string) (RefundDetail, error) {
	d, err := s.Refund(ctx, id)
	if err != nil {
		return RefundDetail{}, err
	}
	var p Purchase
	err = s.store.InTx(ctx, func(tx Tx) error {
		var err error
		p, err = tx.GetPurchase(ctx, d.Refund.PurchaseID)
		return err
	})
	if err != nil {
		return RefundDetail{}, fmt.Errorf("reconcile: refund %s: %w", id, err)
	}
	if client == "" || p.Client != client {
		return RefundDetail{}, fmt.Errorf("reconcile: refund %s: %w", id, ErrNotFound)
	}
	return d, nil
}

func refundDetailTx(ctx context.Context, tx Tx, id string) (RefundDetail, error) {
	r, err := tx.GetRefund(ctx, id)
	if err != nil {
		return RefundDetail{}, err
	}
	d := RefundDetail{Refund: r}
	if d.Transitions, err = tx.ListRefundTransitions(ctx, id); err != nil {
		return RefundDetail{}, err
	}
	if d.Attempts, err = tx.ListRefundAttempts(ctx, id); err != nil {
		return RefundDetail{}, err
	}
	return d, nil
}

// Refunds returns a purchase's refunds, oldest first, with their audit
// trails. Returns an error wrapping ErrNotFound for an unknown purchase.
func (s *Service) Refunds(ctx context.Context, purchaseID string) ([]RefundDetail, error) {
	var out []RefundDetail
	err := s.store.InTx(ctx, func(tx Tx) error {
		out = nil
		if _, err := tx.GetPurchase(ctx, purchaseID); err != nil {
			return err
		}
		rs, err := tx.ListRefunds(ctx, purchaseID)
		if err != nil {
			return err
		}
		for _, r := range rs {
			d, err := refundDetailTx(ctx, tx, r.ID)
			if err != nil {
				return err
			}
			out = append(out, d)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile: refunds of %s: %w", purchaseID, err)
	}
	return out, nil
}

// RefundCharge is the operator's "refund this charge": it refunds amount
// of the payment an open duplicate-charge finding names, through the
// refund process like any other refund, and records the action with the
// operator's evidence. It is the one operator action that moves money, and
// it never charges. Returns ErrConflict if the finding is closed, and
// ErrDuplicate if a refund of its charge exists that did not fail: a
// repeated submission refunds nothing twice.
func (s *Service) RefundCharge(ctx context.Context, findingID int64, amount int64, operator, evidence string) (Refund, error) {
	operator, evidence = strings.TrimSpace(operator), strings.TrimSpace(evidence)
	if operator == "" {
		return Refund{}, fmt.Errorf("reconcile: refund charge: %w", &FieldError{Field: "operator", Message: "is required"})
	}
	if evidence == "" {
		return Refund{}, fmt.Errorf("reconcile: refund charge: %w", &FieldError{Field: "evidence", Message: "is required: say what shows the charge is a duplicate"})
	}
	var r Refund
	err := s.store.InTx(ctx, func(tx Tx) error {
		f, err := tx.GetFinding(ctx, findingID)
		if err != nil {
			return err
		}
		if !f.Open() {
			return E(KindConflict, fmt.Sprintf("finding %d was closed by %s", f.ID, f.ClosedBy), nil)
		}
		if amount == 0 {
			amount = f.Amount
		}
		r, err = s.createRefundTx(ctx, tx, NewRefund{
			PurchaseID: f.PurchaseID, Amount: amount, FindingID: f.ID,
			// The operator's evidence stays in the operator audit: the
			// reason is shown to the purchase's API client.
			Reason: "refund of duplicate charge " + f.PaymentID, RequestedBy: operator,
		}, "")
		if errors.Is(err, ErrDuplicate) {
			return refundingAlready(ctx, tx, f, err)
		}
		if err != nil {
			return err
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		return tx.InsertOperatorAction(ctx, OperatorAction{
			PurchaseID: f.PurchaseID, RefundID: r.ID, Operator: operator, Action: "refund",
			Saw:      fmt.Sprintf("finding %d: %s %s, %s (%s)", f.ID, f.Kind, f.PaymentID, provider.FormatAmount(f.Amount, f.Currency), f.Status),
			Did:      fmt.Sprintf("refund %s of %s from payment %s", r.ID, provider.FormatAmount(r.Amount, r.Currency), r.PaymentID),
			Evidence: evidence, At: now,
		})
	})
	if err != nil {
		return Refund{}, fmt.Errorf("reconcile: refund charge of finding %d: %w", findingID, err)
	}
	s.cfg.Logger.Warn("operator refunds a charge", "finding", findingID, "refund", r.ID, "payment", r.PaymentID, "amount", provider.FormatAmount(r.Amount, r.Currency), "operator", operator)
	return r, nil
}

// refundingAlready explains the database's refusal of a second refund of
// finding f's charge while one is not failed: it names that refund.
func refundingAlready(ctx context.Context, tx Tx, f Finding, cause error) error {
	rs, err := tx.ListRefunds(ctx, f.PurchaseID)
	if err != nil {
		return errors.Join(cause, err)
	}
	for _, r := range rs {
		if r.FindingID == f.ID && r.State != statemachine.Failed {
			return E(KindDuplicate, fmt.Sprintf("finding %d's charge %s is already being refunded by %s (%s): one refund per finding at a time", f.ID, f.PaymentID, r.ID, r.State), cause)
		}
	}
	return cause
}

// errRefundGone reports a refund job whose refund is missing: a bug, or a
// database edited by hand.
var errRefundGone = errors.New("reconcile: refund job without its refund")
