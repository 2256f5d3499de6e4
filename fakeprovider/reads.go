package fakeprovider

import (
	"context"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// The provider's reads: status by id, search by metadata, list by
// creation time.

func (e *entry) result() provider.Result {
	r := provider.Result{
		Outcome:    outcomeOf(e.Status),
		PaymentID:  e.ID,
		Status:     e.Status,
		Amount:     e.Amount,
		Currency:   e.Currency,
		PurchaseID: e.PurchaseID,
	}
	if e.Status == StatusRequiresPaymentMethod {
		r.Reason = e.DeclineCode
	}
	return r
}

// outcomeOf maps a PaymentIntent status to a neutral outcome.
func outcomeOf(status string) provider.Outcome {
	switch status {
	case StatusSucceeded:
		return provider.Succeeded
	case StatusProcessing, StatusRequiresAction:
		return provider.Pending
	case StatusRequiresPaymentMethod, StatusCanceled:
		return provider.Declined
	}
	return provider.Unknown
}

// Status implements provider.Provider: the charge's current status, or
// Outcome NotFound for an unknown id. After a StaleProcessing fault, the
// first Status call for the charge answers processing.
func (f *Fake) Status(ctx context.Context, paymentID string) (provider.Result, error) {
	if err := f.admit(ctx, provider.OpStatus); err != nil {
		return provider.Result{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[provider.OpStatus]++
	if err := ctx.Err(); err != nil {
		return provider.Result{}, fmt.Errorf("fakeprovider: status of %s: not sent: %w", paymentID, err)
	}
	e := f.byID[paymentID]
	if e == nil {
		return provider.Result{Outcome: provider.NotFound, Reason: ReasonNotFound}, nil
	}
	f.settle(e, f.cfg.Now())
	r := e.result()
	if e.staleReads > 0 {
		e.staleReads--
		r.Outcome, r.Status, r.Reason = provider.Pending, StatusProcessing, ""
	}
	return r, nil
}

// Search implements provider.Provider: the charge made for purchaseID
// (outside charges included), once Config.SearchLag has passed since its
// creation, else NotFound. If several charges are visible (a double
// charge!), it returns a succeeded one if any, else a pending one, else a
// declined one, the oldest of its kind, and appends to Reason how many
// there are. Charges counts the visible charges whose status now took or
// may take money (outcome Succeeded or Pending). A charge with no purchase
// id is never found, not even for "".
func (f *Fake) Search(ctx context.Context, purchaseID string) (provider.Result, error) {
	if err := f.admit(ctx, provider.OpSearch); err != nil {
		return provider.Result{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[provider.OpSearch]++
	if err := ctx.Err(); err != nil {
		return provider.Result{}, fmt.Errorf("fakeprovider: search for %s: not sent: %w", purchaseID, err)
	}
	now := f.cfg.Now()
	var best *entry
	n, taking := 0, 0
	for _, e := range f.ledger {
		if e.PurchaseID == "" || e.PurchaseID != purchaseID || now.Sub(e.CreatedAt) < f.cfg.SearchLag {
			continue
		}
		f.settle(e, now)
		n++
		if o := outcomeOf(e.Status); o == provider.Succeeded || o == provider.Pending {
			taking++
		}
		if best == nil || searchRank(e.Status) < searchRank(best.Status) {
			best = e
		}
	}
	if best == nil {
		return provider.Result{Outcome: provider.NotFound}, nil
	}
	r := best.result()
	r.Charges = taking
	if n > 1 {
		many := fmt.Sprintf("%d charges for purchase %s", n, purchaseID)
		if r.Reason != "" {
			many = r.Reason + "; " + many
		}
		r.Reason = many
	}
	return r, nil
}

func searchRank(status string) int {
	switch outcomeOf(status) {
	case provider.Succeeded:
		return 0
	case provider.Pending:
		return 1
	}
	return 2
}

// List implements provider.Provider: every charge created within w (From
// inclusive, Until exclusive), outside charges included, oldest first
// (creation order), settled as of now, except those created less than
// Config.ListLag ago. It reads the ledger, not a lagging index: no
// SearchLag, no stale reads. It reads Config.ListPageSize charges a call:
// each page is one OpList call, gate passed before it (see listPages). An
// empty or reversed window lists nothing.
func (f *Fake) List(ctx context.Context, w provider.Window, gate provider.PageGate) ([]provider.Payment, error) {
	what := fmt.Sprintf("list [%s, %s)", w.From.Format(time.RFC3339Nano), w.Until.Format(time.RFC3339Nano))
	return listPages(f, ctx, gate, provider.OpList, what, func(from int, now time.Time, add func(provider.Payment) bool) (int, error) {
		for i := from; i < len(f.ledger); i++ {
			e := f.ledger[i]
			if !f.listable(e.CreatedAt, now) || e.CreatedAt.Before(w.From) || !e.CreatedAt.Before(w.Until) {
				continue
			}
			f.settle(e, now)
			if !add(e.payment()) {
				return i + 1, nil
			}
		}
		return -1, nil
	})
}

// listPages reads a listing of the ledger page by page, as Stripe serves
// one: before each page it passes gate, then admits one call of op
// against the rate limits, counts it, and, under the fake's lock, has
// scan add the objects that follow place from (0 for the first page)
// until add says the page is full. scan returns the place the next page
// starts from, or -1 when none is left. A failure of gate, of the rate
// limits or of ctx stops the listing: no objects, and the error.
func listPages[T any](f *Fake, ctx context.Context, gate provider.PageGate, op provider.Op, what string,
	scan func(from int, now time.Time, add func(T) bool) (int, error)) ([]T, error) {
	var out []T
	for from := 0; from >= 0; {
		if err := gate.Pass(ctx); err != nil {
			return nil, fmt.Errorf("fakeprovider: %s: page not sent: %w", what, err)
		}
		if err := f.admit(ctx, op); err != nil {
			return nil, err
		}
		var err error
		from, err = func() (int, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.calls[op]++
			if err := ctx.Err(); err != nil {
				return 0, fmt.Errorf("fakeprovider: %s: not sent: %w", what, err)
			}
			n := 0
			return scan(from, f.cfg.Now(), func(x T) bool {
				out = append(out, x)
				n++
				return n < f.cfg.ListPageSize
			})
		}()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// listable reports whether a listing can see at now a charge or refund
// created at created (Config.ListLag).
func (f *Fake) listable(created, now time.Time) bool {
	return now.Sub(created) >= f.cfg.ListLag
}

func (e *entry) payment() provider.Payment {
	return provider.Payment{
		ID:         e.ID,
		PurchaseID: e.PurchaseID,
		Amount:     e.Amount,
		Currency:   e.Currency,
		Status:     e.Status,
		Outcome:    outcomeOf(e.Status),
		Created:    e.CreatedAt,
	}
}
