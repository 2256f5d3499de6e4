package reconcile

import (
	"context"
	"fmt"
	"time"
)

// The operator's and the clients' read side of refunds: the escalated
// refunds, one refund's case, and a purchase's refunds.

// RefundCase is a refund with everything an operator needs to look at it:
// its audit trail, the purchase it belongs to, the audit finding whose
// payment it refunds (for an operator's "refund this charge"), and the
// operator actions that started or concern it.
type RefundCase struct {
	RefundDetail
	Purchase Purchase
	// Finding is the finding the refund was made for; nil for a refund of
	// the purchase's own payment.
	Finding *Finding
	Actions []OperatorAction
	// Age is how long the refund has been uncertain, or since it was
	// escalated when it never was uncertain; 0 when neither.
	Age time.Duration
}

// RefundCase returns the refund with id and its full record, escalated
// or not, measured on the store's clock. Returns an error wrapping
// ErrNotFound if there is none.
func (s *Service) RefundCase(ctx context.Context, id string) (RefundCase, error) {
	var (
		c   RefundCase
		now time.Time
	)
	err := s.store.InTx(ctx, func(tx Tx) error {
		c = RefundCase{}
		var err error
		if now, err = tx.Now(ctx); err != nil {
			return err
		}
		if c.RefundDetail, err = refundDetailTx(ctx, tx, id); err != nil {
			return err
		}
		if c.Purchase, err = tx.GetPurchase(ctx, c.Refund.PurchaseID); err != nil {
			return err
		}
		if c.Refund.FindingID != 0 {
			f, err := tx.GetFinding(ctx, c.Refund.FindingID)
			if err != nil {
				return fmt.Errorf("finding %d: %w", c.Refund.FindingID, err)
			}
			c.Finding = &f
		}
		actions, err := tx.ListOperatorActions(ctx, c.Refund.PurchaseID)
		if err != nil {
			return err
		}
		for _, a := range actions {
			if a.RefundID == id {
				c.Actions = append(c.Actions, a)
			}
		}
		return nil
	})
	if err != nil {
		return RefundCase{}, fmt.Errorf("reconcile: refund case %q: %w", id, err)
	}
	since := c.Refund.UncertainSince
	if since.IsZero() {
		since = c.Refund.EscalatedAt
	}
	if !since.IsZero() && now.After(since) {
		c.Age = now.Sub(since)
	}
	return c, nil
}

// EscalatedRefunds returns the refunds on the operator list whose
// purchase is of the account that account selects (AnyAccount: every
// one), oldest escalation first, each with its full record (see
// RefundCase).
func (s *Service) EscalatedRefunds(ctx context.Context, account AccountFilter) ([]RefundCase, error) {
	var ids []string
	err := s.store.InTx(ctx, func(tx Tx) error {
		ids = nil
		rs, err := tx.ListEscalatedRefunds(ctx, account)
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile: escalated refunds: %w", err)
	}
	cases := make([]RefundCase, 0, len(ids))
	for _, id := range ids {
		c, err := s.RefundCase(ctx, id)
		if err != nil {
			return nil, err
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// PurchaseRefunds returns a purchase's refunds, oldest first, without
// their audit trails (see Refunds for those): none for a purchase that
// has none or that does not exist.
func (s *Service) PurchaseRefunds(ctx context.Context, purchaseID string) ([]Refund, error) {
	var rs []Refund
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		rs, err = tx.ListRefunds(ctx, purchaseID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile: refunds of %q: %w", purchaseID, err)
	}
	return rs, nil
}
