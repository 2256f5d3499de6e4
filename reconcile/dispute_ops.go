package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/statemachine"
)

// DisputeRecord is a dispute with its history.
type DisputeRecord struct {
	Dispute     Dispute
	Transitions []TransitionRecord
}

// OpenDisputes returns the disputes not decided yet of purchases of the
// account that account selects (AnyAccount: every one), soonest evidence
// due date first (those with none last), and the store's time now, against
// which an operator's time left is measured. payrecon submits no
// evidence: an operator answers each in the provider's dashboard before
// its due date.
func (s *Service) OpenDisputes(ctx context.Context, account AccountFilter) ([]Dispute, time.Time, error) {
	var (
		ds  []Dispute
		now time.Time
	)
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		if now, err = tx.Now(ctx); err != nil {
			return err
		}
		ds, err = tx.ListOpenDisputes(ctx, account)
		return err
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("reconcile: open disputes: %w", err)
	}
	return ds, now, nil
}

// disputeRecordsTx reads a purchase's disputes with their histories.
func disputeRecordsTx(ctx context.Context, tx Tx, purchaseID string) ([]DisputeRecord, error) {
	ds, err := tx.ListDisputes(ctx, purchaseID)
	if err != nil {
		return nil, err
	}
	out := make([]DisputeRecord, 0, len(ds))
	for _, d := range ds {
		ts, err := tx.ListDisputeTransitions(ctx, d.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, DisputeRecord{Dispute: d, Transitions: ts})
	}
	return out, nil
}

// EvidenceTimeLeft is how long is left, at now, to answer d with
// evidence: negative once past due, and ok false when the provider gave
// no due date or the dispute waits for no answer (its evidence is in, or
// it is decided).
func EvidenceTimeLeft(d Dispute, now time.Time) (left time.Duration, ok bool) {
	if d.EvidenceDueBy.IsZero() || d.State != statemachine.Open {
		return 0, false
	}
	return d.EvidenceDueBy.Sub(now), true
}
