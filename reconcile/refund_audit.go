package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// The audit from the provider's side matches refunds too: every refund
// the provider created in a chunk must be exactly one refund of the
// books, for the same payment, amount and currency, and in a state that
// does not contradict the books'. A refund that moved or may move money
// with no refund in the books (made in the provider's dashboard, say) is
// an orphan_refund finding; one that disagrees is a refund_mismatch.

// listRefunds asks the provider for the refunds created in w.
func (s *Service) listRefunds(ctx context.Context, account string, w provider.Window) ([]provider.RefundResult, error) {
	callCtx, cancel := context.WithTimeout(ctx, s.cfg.AuditListTimeout)
	defer cancel()
	start := s.cfg.Now()
	refunds, err := s.providerFor(account).ListRefundsCreated(callCtx, w, s.pageGate(account, provider.OpRefundList, PriorityAudit, false))
	s.observeCall(account, provider.OpRefundList, provider.RefundOutcomeOf(provider.RefundResult{Outcome: provider.Succeeded}, err), s.cfg.Now().Sub(start))
	s.noteThrottle(ctx, account, provider.OpRefundList, err)
	if err != nil {
		return nil, fmt.Errorf("list the provider's refunds: %w", err)
	}
	return refunds, nil
}

// matchRefunds matches the provider's refunds to the books, reading the
// books' refunds they name in one read, and returns what does not match.
// A books' refund the provider disagrees with is escalated here, where it
// is known (a finding's PaymentID is the provider's refund id, which the
// books' refund may not hold yet); now is the store's time. account is
// the one the refunds were listed in: a refund of another account's books
// is none of this account's.
func (s *Service) matchRefunds(ctx context.Context, tx Tx, account string, refunds []provider.RefundResult, now time.Time) ([]Finding, error) {
	if len(refunds) == 0 {
		return nil, nil
	}
	var ids, providerIDs []string
	for _, x := range refunds {
		ids = append(ids, x.RefundID)
		providerIDs = append(providerIDs, x.ID)
	}
	books, err := tx.FindRefunds(ctx, ids, providerIDs)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]Refund, len(books))
	byProvider := make(map[string]Refund, len(books))
	for _, r := range books {
		byID[r.ID] = r
		if r.ProviderRefundID != "" {
			byProvider[r.ProviderRefundID] = r
		}
	}
	var found []Finding
	for _, x := range refunds {
		r, ok := byProvider[x.ID]
		if !ok {
			r, ok = byID[x.RefundID]
		}
		f := Finding{PaymentID: x.ID, Amount: x.Amount, Currency: x.Currency, Status: x.Status}
		if ok && r.Account() != account {
			// A refund of another account's books: none of this account's.
			ok = false
		}
		if !ok {
			if x.Outcome == provider.Failed {
				continue // no money moved: nothing to account for
			}
			f.Kind = FindingOrphanRefund
			// The purchase whose money it returned: the payment's owner in
			// the books, else the one its metadata names.
			if f.PurchaseID, err = ownerOf(ctx, tx, x.PaymentID); err != nil {
				return nil, err
			}
			if f.PurchaseID == "" {
				if f.PurchaseID, err = s.knownPurchase(ctx, tx, x.PurchaseID); err != nil {
					return nil, err
				}
			}
			f.Evidence = fmt.Sprintf("provider refund %s (%s) of %s from payment %s names refund %q: the books have no such refund",
				x.ID, x.Status, provider.FormatAmount(x.Amount, x.Currency), orNone(x.PaymentID), x.RefundID)
			found = append(found, f)
			continue
		}
		f.PurchaseID = r.PurchaseID
		if why := refundDisagreement(r, x); why != "" {
			f.Kind = FindingRefundMismatch
			f.Evidence = fmt.Sprintf("provider refund %s for refund %s: %s", x.ID, r.ID, why)
			found = append(found, f)
			next := r
			if escalate(&next.EscalatedAt, &next.EscalationReason, EscalationStateDisagreement, now) {
				next.UpdatedAt = now
				if err := tx.UpdateRefund(ctx, next, r.State); err != nil {
					return nil, err
				}
			}
		}
	}
	return found, nil
}

// refundDisagreement says how the provider's refund x disagrees with the
// books' refund r, or "" when it agrees.
func refundDisagreement(r Refund, x provider.RefundResult) string {
	mayMoveMoney := x.Outcome != provider.Failed
	switch {
	case r.ProviderRefundID != "" && r.ProviderRefundID != x.ID && mayMoveMoney:
		return fmt.Sprintf("a second provider refund (%s) for one refund, whose own is %s", x.Status, r.ProviderRefundID)
	case x.PaymentID != "" && x.PaymentID != r.PaymentID:
		return fmt.Sprintf("it returns money from payment %s, the refund's payment is %s", x.PaymentID, r.PaymentID)
	case x.Amount != r.Amount || !strings.EqualFold(x.Currency, r.Currency):
		return fmt.Sprintf("it is %s, the books' refund %s", provider.FormatAmount(x.Amount, x.Currency), provider.FormatAmount(r.Amount, r.Currency))
	case x.Outcome == provider.Succeeded && r.State == statemachine.Failed:
		return "the provider says succeeded, the books say failed: money went back"
	case x.Outcome == provider.Failed && r.State == statemachine.Succeeded:
		return "the provider says failed, the books say succeeded: no money went back"
	}
	return ""
}

// knownPurchase returns id if the books have that purchase, "" otherwise.
func (s *Service) knownPurchase(ctx context.Context, tx Tx, id string) (string, error) {
	if id == "" {
		return "", nil
	}
	_, err := tx.GetPurchase(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return "", nil
	case err != nil:
		return "", err
	}
	return id, nil
}

// escalateRefundForFinding puts the purchase an orphan refund returned
// money from on the operator list. A refund_mismatch's own refund is
// escalated where it is matched (matchRefunds).
func (s *Service) escalateRefundForFinding(ctx context.Context, tx Tx, f Finding, now time.Time) error {
	if f.Kind != FindingOrphanRefund {
		return nil
	}
	p, err := tx.GetPurchase(ctx, f.PurchaseID)
	if err != nil {
		return err
	}
	next := p
	if !markEscalated(&next, EscalationForeignPayment, now) {
		return nil
	}
	next.UpdatedAt = now
	return tx.UpdatePurchase(ctx, next, p.State)
}
