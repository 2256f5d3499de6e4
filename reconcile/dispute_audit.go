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

// listedDisputes is a listing of the disputes opened in a window, and
// when it was read: the provider's time of each answer in it (an event
// created after the read is newer than the listing).
type listedDisputes struct {
	disputes []provider.Dispute
	readAt   time.Time
	// account is the provider account the disputes were listed in.
	account string
}

// listDisputes asks the provider for the disputes opened in w.
func (s *Service) listDisputes(ctx context.Context, account string, w provider.Window) (listedDisputes, error) {
	callCtx, cancel := context.WithTimeout(ctx, s.cfg.AuditListTimeout)
	defer cancel()
	start := s.cfg.Now()
	disputes, err := s.providerFor(account).ListDisputes(callCtx, w, s.pageGate(account, provider.OpDisputeList, PriorityAudit, false))
	s.observeCall(account, provider.OpDisputeList, provider.OutcomeOf(provider.Result{Outcome: provider.Succeeded}, err), s.cfg.Now().Sub(start))
	s.noteThrottle(ctx, account, provider.OpDisputeList, err)
	if err != nil {
		return listedDisputes{}, fmt.Errorf("list the provider's disputes: %w", err)
	}
	return listedDisputes{disputes: disputes, readAt: start, account: account}, nil
}

// matchDisputes applies the disputes the audit listed, in tx, at the
// store's time now, and returns the findings they raised.
func (s *Service) matchDisputes(ctx context.Context, tx Tx, listed listedDisputes, now time.Time) ([]Finding, error) {
	var found []Finding
	for _, d := range listed.disputes {
		src := disputeSource{cause: CauseAudit, actor: "audit", at: listed.readAt, account: listed.account,
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
