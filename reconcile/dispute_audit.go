package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// The audit from the provider's side matches disputes too: every dispute
// the provider opened in a chunk is judged as a webhook about it would
// be (applyDisputeTx), so that a dispute whose webhooks were all lost is
// stored, moved and told to the shop, and one that disagrees with the
// books is a finding. Later moves of a dispute opened in an audited
// chunk reach the books through its webhooks and the event-log sweep.

// listDisputes asks the provider for the disputes opened in w.
func (s *Service) listDisputes(ctx context.Context, w provider.Window) ([]provider.Dispute, error) {
	callCtx, cancel := context.WithTimeout(ctx, s.cfg.AuditListTimeout)
	defer cancel()
	start := s.cfg.Now()
	disputes, err := s.provider.ListDisputes(callCtx, w, s.pageGate(provider.OpDisputeList, PriorityAudit, false))
	s.cfg.Observer.ProviderCall(provider.OpDisputeList, provider.OutcomeOf(provider.Result{Outcome: provider.Succeeded}, err), s.cfg.Now().Sub(start))
	s.noteThrottle(ctx, provider.OpDisputeList, err)
	if err != nil {
		return nil, fmt.Errorf("list the provider's disputes: %w", err)
	}
	return disputes, nil
}

// matchDisputes applies the disputes the audit listed, in tx, at the
// store's time now, and returns the findings they raised.
func (s *Service) matchDisputes(ctx context.Context, tx Tx, disputes []provider.Dispute, now time.Time) ([]Finding, error) {
	var found []Finding
	for _, d := range disputes {
		src := disputeSource{cause: CauseAudit, actor: "audit", at: now,
			evidence: fmt.Sprintf("%s audit listing: dispute=%s status=%s", s.cfg.ProviderName, d.ID, d.Status)}
		res, err := s.applyDisputeTx(ctx, tx, d, src, now)
		if err != nil {
			return nil, fmt.Errorf("dispute %s: %w", d.ID, err)
		}
		if res.finding != nil {
			found = append(found, *res.finding)
		}
	}
	return found, nil
}
