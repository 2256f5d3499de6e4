package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/payrecon/payrecon/internal/crashpoint"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// The audit from the provider's side runs the other way round from the
// worker: it lists every payment the provider created in a window and
// matches each to exactly one purchase of the books, by the payment id the
// books hold and by the purchase id in the payment's metadata. What does
// not match becomes a Finding on the operator list, and the purchase it
// concerns is escalated. It never moves money and never changes a
// purchase's state.
//
// A run covers its window in chunks of Config.AuditChunk. Each chunk's
// findings commit in one transaction with the run's watermark (Done), so a
// run that dies midway resumes where it stopped, without gaps, and
// findings are unique per (provider, payment, kind), so a chunk matched
// twice stores nothing twice.

// AuditReport says what one audit run did.
type AuditReport struct {
	Run AuditRun
	// Resumed is true when the run picked up a run that had stopped
	// midway.
	Resumed bool
	// Payments is how many payments the provider listed in the chunks
	// this call covered.
	Payments int
	// Refunds is how many refunds the provider listed in those chunks.
	Refunds int
	// Disputes is how many disputes the provider listed in those chunks.
	Disputes int
	// New lists the findings this call stored.
	New []Finding
}

// Audit matches every payment the provider created within w to the books,
// chunk by chunk (see the comment above): an audit by hand. If the last
// audit by hand had the same window and stopped midway, it resumes from
// its watermark. It keeps its own watermark, apart from the periodic
// audit's (AuditDue), so that a run by hand over any window never moves
// where the periodic one goes on. Returns an error wrapping ErrAuditWindow
// when w is empty.
//
// Each watched account is audited from its own side, with its own
// watermark; the report sums them (Run is the platform's). An account
// whose audit fails does not stop the others: the error names it.
func (s *Service) Audit(ctx context.Context, w provider.Window) (AuditReport, error) {
	return s.auditAccounts(ctx, "/manual", func(context.Context, string) (provider.Window, error) { return w, nil })
}

// auditAccounts runs, for each watched account, the audit named
// runName(account, suffix) over the window window returns for it, and
// sums the reports.
func (s *Service) auditAccounts(ctx context.Context, suffix string, window func(ctx context.Context, name string) (provider.Window, error)) (AuditReport, error) {
	accounts, err := s.watchedAccounts(ctx)
	if err != nil {
		return AuditReport{}, err
	}
	var (
		sum  AuditReport
		errs []error
	)
	for i, account := range accounts {
		name := s.runName(account, suffix)
		w, err := window(ctx, name)
		if err == nil {
			var rep AuditReport
			rep, err = s.audit(ctx, account, name, w)
			if i == 0 {
				sum.Run, sum.Resumed = rep.Run, rep.Resumed
			}
			sum.Payments += rep.Payments
			sum.Refunds += rep.Refunds
			sum.Disputes += rep.Disputes
			sum.New = append(sum.New, rep.New...)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("account %s: %w", accountName(account), err))
		}
	}
	return sum, errors.Join(errs...)
}

// audit runs the audit named name over w, from account's side, resuming
// its run if it stopped midway over the same window.
func (s *Service) audit(ctx context.Context, account, name string, w provider.Window) (AuditReport, error) {
	w.From, w.Until = w.From.UTC().Truncate(time.Second), w.Until.UTC().Truncate(time.Second)
	if !w.From.Before(w.Until) {
		return AuditReport{}, fmt.Errorf("reconcile: audit [%s, %s): %w", w.From, w.Until, ErrAuditWindow)
	}
	var rep AuditReport
	err := s.store.InTx(ctx, func(tx Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		prev, err := tx.GetAuditRun(ctx, name)
		switch {
		case err == nil && prev.From.Equal(w.From) && prev.Until.Equal(w.Until) && !prev.Complete():
			rep.Run, rep.Resumed = prev, true
			return nil
		case err != nil && !errors.Is(err, ErrNotFound):
			return err
		}
		rep.Run = AuditRun{Name: name, From: w.From, Until: w.Until, Done: w.From, StartedAt: now, UpdatedAt: now}
		return tx.SaveAuditRun(ctx, rep.Run)
	})
	if err != nil {
		return rep, fmt.Errorf("reconcile: audit: start run: %w", err)
	}
	if rep.Resumed {
		s.cfg.Logger.Info("audit resumes a run that stopped midway", "from", rep.Run.From, "until", rep.Run.Until, "done", rep.Run.Done)
	}
	for !rep.Run.Complete() {
		chunk := provider.Window{From: rep.Run.Done, Until: minTime(rep.Run.Done.Add(s.cfg.AuditChunk), rep.Run.Until)}
		n, found, err := s.auditChunk(ctx, account, &rep.Run, chunk)
		if err != nil {
			return rep, fmt.Errorf("reconcile: audit [%s, %s): %w", chunk.From.Format(time.RFC3339), chunk.Until.Format(time.RFC3339), err)
		}
		crashpoint.Hit(crashpoint.AuditMidWindow)
		rep.Payments += n.payments
		rep.Refunds += n.refunds
		rep.Disputes += n.disputes
		rep.New = append(rep.New, found...)
	}
	s.cfg.Logger.Info("audit run complete", "audit", name, "account", account, "from", rep.Run.From, "until", rep.Run.Until,
		"payments", rep.Payments, "refunds", rep.Refunds, "new_findings", len(rep.New))
	return rep, nil
}

// AuditDue runs the periodic audit: from the last run's watermark minus
// Config.AuditOverlap (or Config.AuditFirstWindow back, the first time) to
// the store's now minus Config.AuditSettle, so that consecutive windows
// overlap and a run that stopped midway leaves no gap. Its watermark is
// its own: audits by hand (Audit) never move it.
//
// Each watched account has its own run and watermark (see Audit).
func (s *Service) AuditDue(ctx context.Context) (AuditReport, error) {
	return s.auditAccounts(ctx, "", s.dueWindow)
}

// dueWindow is the periodic audit's next window for the run named name.
func (s *Service) dueWindow(ctx context.Context, name string) (provider.Window, error) {
	var w provider.Window
	err := s.store.InTx(ctx, func(tx Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		w.Until = now.Add(-s.cfg.AuditSettle)
		w.From = w.Until.Add(-s.cfg.AuditFirstWindow)
		prev, err := tx.GetAuditRun(ctx, name)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return err
		case !prev.Complete() && prev.Until.After(w.Until):
			w = provider.Window{From: prev.From, Until: prev.Until} // resume it as it was
		default:
			w.From = prev.Done.Add(-s.cfg.AuditOverlap)
		}
		return nil
	})
	if err != nil {
		return provider.Window{}, fmt.Errorf("reconcile: audit: %w", err)
	}
	return w, nil
}

// auditChunk lists the payments of one chunk and matches them, storing the
// findings and advancing the run's watermark in one transaction.
func (s *Service) auditChunk(ctx context.Context, account string, run *AuditRun, w provider.Window) (listed, []Finding, error) {
	payments, err := s.list(ctx, account, w)
	if err != nil {
		return listed{}, nil, err
	}
	missing, err := s.missingAtProvider(ctx, account, w, payments)
	if err != nil {
		return listed{}, nil, err
	}
	refunds, err := s.listRefunds(ctx, account, w)
	if err != nil {
		return listed{}, nil, err
	}
	disputes, err := s.listDisputes(ctx, account, w)
	if err != nil {
		return listed{}, nil, err
	}
	var (
		stored []Finding
		next   AuditRun
	)
	err = s.retryRaces(ctx, func(tx Tx) error {
		stored, next = nil, *run
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		var found []Finding
		for _, pay := range payments {
			fs, err := s.matchPayment(ctx, tx, account, pay, now)
			if err != nil {
				return err
			}
			found = append(found, fs...)
		}
		fs, err := s.matchRefunds(ctx, tx, account, refunds, now)
		if err != nil {
			return err
		}
		found = append(found, fs...)
		found = append(found, missing...)
		// The disputes' findings are stored as they are judged.
		if stored, err = s.matchDisputes(ctx, tx, disputes, now); err != nil {
			return err
		}
		for _, f := range found {
			f.Provider, f.FoundAt = s.cfg.ProviderName, now
			inserted, err := tx.InsertFinding(ctx, f)
			if err != nil {
				return err
			}
			if !inserted {
				continue
			}
			stored = append(stored, f)
			if err := s.escalateForFinding(ctx, tx, f, now); err != nil {
				return err
			}
		}
		next.Done, next.UpdatedAt = w.Until, now
		next.Findings += len(stored)
		return tx.SaveAuditRun(ctx, next)
	})
	if err != nil {
		return listed{}, nil, err
	}
	*run = next
	for _, f := range stored {
		s.cfg.Logger.Warn("audit finding", "kind", f.Kind, "payment", f.PaymentID, "purchase", f.PurchaseID,
			"amount", f.Amount, "currency", f.Currency, "evidence", f.Evidence)
	}
	return listed{payments: len(payments), refunds: len(refunds), disputes: len(disputes.disputes)}, stored, nil
}

// listed counts what the provider listed in one chunk.
type listed struct{ payments, refunds, disputes int }

// list asks the provider for the payments created in w.
func (s *Service) list(ctx context.Context, account string, w provider.Window) ([]provider.Payment, error) {
	callCtx, cancel := context.WithTimeout(ctx, s.cfg.AuditListTimeout)
	defer cancel()
	// One token for each page of the listing: the audit waits behind
	// every other call.
	start := s.cfg.Now()
	payments, err := s.providerFor(account).List(callCtx, w, s.pageGate(account, provider.OpList, PriorityAudit, false))
	s.observeCall(account, provider.OpList, provider.OutcomeOf(provider.Result{Outcome: provider.Succeeded}, err), s.cfg.Now().Sub(start))
	s.noteThrottle(ctx, account, provider.OpList, err)
	if err != nil {
		return nil, fmt.Errorf("list the provider's payments: %w", err)
	}
	return payments, nil
}

// matchPayment matches one of the provider's payments to the books and
// returns what does not match. For a purchase the books link to no
// payment yet, the first money-taking payment the audit sees is recorded
// (Tx.LinkAuditPayment), so that a second one is a duplicate whichever
// run, chunk or resumption sees it. pay.Created is zero for a payment
// looked up by id rather than listed (judgeForeign). account is the one
// pay was listed or looked up in: a payment naming, or linked to, a
// purchase of another account is owned by no purchase of this one.
func (s *Service) matchPayment(ctx context.Context, tx Tx, account string, pay provider.Payment, now time.Time) ([]Finding, error) {
	created := "unknown"
	if !pay.Created.IsZero() {
		created = pay.Created.UTC().Format(time.RFC3339)
	}
	finding := func(kind FindingKind, p *Purchase, format string, args ...any) Finding {
		f := Finding{
			PaymentID: pay.ID, Kind: kind, Amount: pay.Amount, Currency: pay.Currency, Status: pay.Status,
			Evidence: fmt.Sprintf("provider payment %s: %s %s, created %s, metadata purchase %q; ",
				pay.ID, provider.FormatAmount(pay.Amount, pay.Currency), pay.Status, created, pay.PurchaseID) +
				fmt.Sprintf(format, args...),
		}
		if p != nil {
			f.PurchaseID = p.ID
		}
		return f
	}
	owner, err := tx.FindPurchaseByPaymentID(ctx, pay.ID)
	linked := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	p := owner
	if linked && p.Account != account {
		return []Finding{finding(FindingOrphanCharge, nil, "the books give it to purchase %s of account %s, but it is in account %s",
			p.ID, accountName(p.Account), accountName(account))}, nil
	}
	if !linked {
		if pay.PurchaseID == "" {
			if !pay.MoneyTaken() {
				return nil, nil
			}
			return []Finding{finding(FindingOrphanCharge, nil, "money taken by a payment that names no purchase")}, nil
		}
		p, err = tx.GetPurchase(ctx, pay.PurchaseID)
		switch {
		case errors.Is(err, ErrNotFound):
			if !pay.MoneyTaken() {
				return nil, nil
			}
			return []Finding{finding(FindingOrphanCharge, nil, "money taken for purchase id %q, which the books do not know", pay.PurchaseID)}, nil
		case err != nil:
			return nil, err
		}
		if p.Account != account {
			// Another account's money: no purchase of this account owns it.
			if !pay.MoneyTaken() {
				return nil, nil
			}
			return []Finding{finding(FindingOrphanCharge, nil, "money taken in account %s for purchase %s, which is of account %s",
				accountName(account), p.ID, accountName(p.Account))}, nil
		}
		switch {
		case p.ProviderPaymentID != "":
			// The purchase has its own payment: this one is another.
			if !pay.MoneyTaken() {
				return nil, nil
			}
			return []Finding{finding(FindingDuplicateCharge, &p, "a second charge for purchase %s (%s), whose own payment is %s",
				p.ID, p.State, p.ProviderPaymentID)}, nil
		case !pay.MoneyTaken():
			return nil, nil // a declined attempt: nothing taken
		case p.State == statemachine.Created:
			return []Finding{finding(FindingStateDisagreement, &p, "money taken for purchase %s, which the books say was never submitted", p.ID)}, nil
		}
		first, err := tx.LinkAuditPayment(ctx, s.cfg.ProviderName, p.ID, pay.ID, now)
		if err != nil {
			return nil, err
		}
		if first != pay.ID {
			return []Finding{finding(FindingDuplicateCharge, &p, "a second charge for purchase %s (%s), after payment %s",
				p.ID, p.State, first)}, nil
		}
	}

	// pay is the purchase's own charge (linked, or the first for a
	// purchase that has not learnt its payment id yet).
	var out []Finding
	if pay.Amount != p.Amount {
		out = append(out, finding(FindingAmountMismatch, &p, "the purchase is %s", provider.FormatAmount(p.Amount, p.Currency)))
	}
	if !strings.EqualFold(pay.Currency, p.Currency) {
		out = append(out, finding(FindingCurrencyMismatch, &p, "the purchase is %s", provider.FormatAmount(p.Amount, p.Currency)))
	}
	switch {
	case pay.Outcome == provider.Succeeded && p.State == statemachine.Declined:
		out = append(out, finding(FindingStateDisagreement, &p, "the provider says succeeded, the books say declined (a late approval)"))
	case pay.Outcome == provider.Declined && p.State == statemachine.Succeeded:
		out = append(out, finding(FindingStateDisagreement, &p, "the provider says %s, the books say succeeded", pay.Status))
	}
	return out, nil
}

// missingAtProvider returns a finding for each purchase the books hold
// succeeded whose money the provider does not hold:
//   - first submitted within w, with a payment id the provider did not
//     list there and does not know when asked by id;
//   - settled within w with no payment id at all (an operator's
//     resolution against a live view that showed no charge), when no
//     payment listed in w names it and the provider's search by the
//     purchase finds none that took or may take money.
//
// Asking by id, or searching by the purchase, instead of trusting the
// listing alone spares a purchase whose payment was created just outside
// w (a replay hours after the first attempt, a charge made before the
// resolution): the provider is asked for the purchase's payment wherever
// it lies. The periodic audit's window ends Config.AuditSettle before now,
// so that a payment the search index has not caught up with yet is not
// called missing.
func (s *Service) missingAtProvider(ctx context.Context, account string, w provider.Window, payments []provider.Payment) ([]Finding, error) {
	seen := make(map[string]bool, len(payments))
	named := map[string]bool{} // the purchases a money-taking payment listed in w names
	listed := make([]string, 0, len(payments))
	for _, pay := range payments {
		if !seen[pay.ID] {
			listed = append(listed, pay.ID)
		}
		seen[pay.ID] = true
		if pay.PurchaseID != "" && pay.MoneyTaken() {
			named[pay.PurchaseID] = true
		}
	}
	var settled, unpaid []Purchase
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		if settled, err = tx.ListSubmittedBetween(ctx, w.From, w.Until, statemachine.Succeeded, listed); err != nil {
			return err
		}
		unpaid, err = tx.ListSucceededWithoutPayment(ctx, w.From, w.Until)
		return err
	})
	if err != nil {
		return nil, err
	}
	// Another account's purchases are that account's audit's.
	mine := func(p Purchase) bool { return p.Account == account }
	settled, unpaid = slices.DeleteFunc(settled, func(p Purchase) bool { return !mine(p) }), slices.DeleteFunc(unpaid, func(p Purchase) bool { return !mine(p) })
	var out []Finding
	for _, p := range settled {
		if p.ProviderPaymentID == "" || seen[p.ProviderPaymentID] {
			continue // without a payment id: judged by its settlement, below
		}
		// Not listed here: it may have been created just past the window's
		// end. Ask for it by id before calling it missing.
		res, outcome, err := s.auditRead(ctx, provider.OpStatus, p.Account, p.ProviderPaymentID)
		if err != nil {
			return nil, err
		}
		if outcome != provider.NotFound {
			continue // the provider has it, or could not say: not a finding
		}
		out = append(out, Finding{
			PaymentID: p.ProviderPaymentID, Kind: FindingMissingAtProvider, PurchaseID: p.ID,
			Amount: p.Amount, Currency: p.Currency, Status: res.Status,
			Evidence: fmt.Sprintf("purchase %s succeeded with payment %s, which the provider does not have", p.ID, p.ProviderPaymentID),
		})
	}
	for _, p := range unpaid {
		if named[p.ID] {
			continue // its charge is listed here: matchPayment links it
		}
		res, outcome, err := s.auditRead(ctx, provider.OpSearch, p.Account, p.ID)
		if err != nil {
			return nil, err
		}
		if (outcome != provider.NotFound && outcome != provider.Declined) || res.Charges > 0 {
			continue // a payment took or may take the money, or the provider could not say
		}
		out = append(out, Finding{
			PaymentID: NoPaymentID(p.ID), Kind: FindingMissingAtProvider, PurchaseID: p.ID,
			Amount: p.Amount, Currency: p.Currency, Status: res.Status,
			Evidence: fmt.Sprintf("purchase %s succeeded (settled %s) with no payment id, and the provider holds no payment "+
				"for it that took money (search: %s)", p.ID, p.SettledAt.UTC().Format(time.RFC3339), DescribeView(res)),
		})
	}
	return out, nil
}

// auditRead asks the provider, on behalf of account and at the audit's
// priority, for a payment by id (OpStatus) or for a purchase's payment by
// search (OpSearch), and
// returns the answer with its outcome; an error only when the budget
// refused to wait (the context ended).
func (s *Service) auditRead(ctx context.Context, op provider.Op, account, id string) (provider.Result, provider.Outcome, error) {
	if err := s.awaitBudget(ctx, account, op, PriorityAudit, 0, false); err != nil {
		return provider.Result{}, "", err
	}
	callCtx, cancel := context.WithTimeout(ctx, s.cfg.ProviderTimeout)
	defer cancel()
	start := s.cfg.Now()
	var (
		res provider.Result
		err error
	)
	if op == provider.OpSearch {
		res, err = s.providerFor(account).Search(callCtx, id)
	} else {
		res, err = s.providerFor(account).Status(callCtx, id)
	}
	s.noteThrottle(ctx, account, op, err)
	outcome := provider.OutcomeOf(res, err)
	s.observeCall(account, op, outcome, s.cfg.Now().Sub(start))
	if err != nil {
		res = provider.Result{Outcome: outcome, Reason: err.Error()}
	}
	return res, outcome, nil
}

// escalationFor maps a finding to the reason its purchase is escalated.
func escalationFor(k FindingKind) EscalationReason {
	switch k {
	case FindingDuplicateCharge:
		return EscalationDuplicateCharge
	case FindingAmountMismatch, FindingCurrencyMismatch:
		return EscalationAmountMismatch
	case FindingOrphanCharge:
		return EscalationForeignPayment
	default:
		return EscalationStateDisagreement
	}
}

// escalateForFinding puts the purchase a new finding concerns on the
// operator list, without moving it.
func (s *Service) escalateForFinding(ctx context.Context, tx Tx, f Finding, now time.Time) error {
	if f.PurchaseID == "" {
		return nil
	}
	if f.Kind == FindingOrphanRefund || f.Kind == FindingRefundMismatch {
		return s.escalateRefundForFinding(ctx, tx, f, now)
	}
	p, err := tx.GetPurchase(ctx, f.PurchaseID)
	if err != nil {
		return err
	}
	next := p
	if !markEscalated(&next, escalationFor(f.Kind), now) {
		return nil
	}
	next.UpdatedAt = now
	return tx.UpdatePurchase(ctx, next, p.State)
}

// Findings returns the audit's findings about purchases of the account
// that account selects (AnyAccount: every finding), oldest first: the open
// ones, or all of them with includeClosed.
func (s *Service) Findings(ctx context.Context, account AccountFilter, includeClosed bool) ([]Finding, error) {
	var out []Finding
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		out, err = tx.ListFindings(ctx, "", account, includeClosed, 0)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile: findings: %w", err)
	}
	return out, nil
}

// Finding returns the finding with id. Returns an error wrapping
// ErrNotFound if there is none.
func (s *Service) Finding(ctx context.Context, id int64) (Finding, error) {
	var f Finding
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		f, err = tx.GetFinding(ctx, id)
		return err
	})
	if err != nil {
		return Finding{}, fmt.Errorf("reconcile: finding %d: %w", id, err)
	}
	return f, nil
}

// CloseFinding closes an open finding with the operator's note. It moves
// no money and no purchase; the purchase the finding concerns stays on the
// operator list until it is resolved or closed there. Returns an error
// wrapping ErrInvalid without a note or an operator, ErrNotFound for an
// unknown id, ErrConflict when it is already closed.
func (s *Service) CloseFinding(ctx context.Context, id int64, operator, note string) (Finding, error) {
	operator, note = strings.TrimSpace(operator), strings.TrimSpace(note)
	switch {
	case note == "":
		return Finding{}, fmt.Errorf("reconcile: close finding %d: %w", id, &FieldError{"note", "is required: say how it was handled"})
	case operator == "":
		return Finding{}, fmt.Errorf("reconcile: close finding %d: %w", id, &FieldError{"operator", "is required"})
	}
	var f Finding
	err := s.store.InTx(ctx, func(tx Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		if err := tx.CloseFinding(ctx, id, operator, note, now); err != nil {
			return err
		}
		f, err = tx.GetFinding(ctx, id)
		return err
	})
	if err != nil {
		return Finding{}, fmt.Errorf("reconcile: close finding %d: %w", id, err)
	}
	s.cfg.Logger.Info("operator closed audit finding", "finding", id, "kind", f.Kind, "operator", operator)
	return f, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
