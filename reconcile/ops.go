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

// Case is an escalated purchase with everything an operator needs to
// decide: its attempts, transitions, webhooks and earlier operator actions.
type Case struct {
	Detail
	Events   []InboxEvent
	Actions  []OperatorAction
	Findings []Finding // the audit's findings about the purchase, open and closed
	// Disputes are the disputes of the purchase's payments, with their
	// histories, oldest first.
	Disputes []DisputeRecord
	// Now is the store's time the case was read at.
	Now time.Time
	// Age is how long the purchase has been uncertain, or since it was
	// escalated when it never was uncertain (a contradiction).
	Age time.Duration
}

// Escalations returns the cases on the operator list of the account that
// account selects (AnyAccount: every case), oldest escalation first.
func (s *Service) Escalations(ctx context.Context, account AccountFilter) ([]Case, error) {
	var ids []string
	err := s.store.InTx(ctx, func(tx Tx) error {
		ps, err := tx.ListEscalated(ctx, account)
		for _, p := range ps {
			ids = append(ids, p.ID)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile: escalations: %w", err)
	}
	cases := make([]Case, 0, len(ids))
	for _, id := range ids {
		c, err := s.Case(ctx, id)
		if err != nil {
			return nil, err
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// Case returns the purchase with id and its full record, escalated or not.
// Returns an error wrapping ErrNotFound if there is none.
func (s *Service) Case(ctx context.Context, id string) (Case, error) {
	var c Case
	var now time.Time
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		if now, err = tx.Now(ctx); err != nil {
			return err
		}
		if c.Detail, err = detailTx(ctx, tx, id); err != nil {
			return err
		}
		if c.Findings, err = tx.ListFindings(ctx, id, AnyAccount, true, 0); err != nil {
			return err
		}
		if c.Events, err = tx.ListInboxEvents(ctx, id); err != nil {
			return err
		}
		if c.Disputes, err = disputeRecordsTx(ctx, tx, id); err != nil {
			return err
		}
		c.Actions, err = tx.ListOperatorActions(ctx, id)
		return err
	})
	if err != nil {
		return Case{}, fmt.Errorf("reconcile: case %q: %w", id, err)
	}
	since := c.Purchase.UncertainSince
	if since.IsZero() {
		since = c.Purchase.EscalatedAt
	}
	if !since.IsZero() {
		c.Age = now.Sub(since)
	}
	c.Now = now
	return c, nil
}

// LiveViewActor is the actor of the attempts LiveView records: the
// latest one is the live view an operator last asked for.
const LiveViewActor = "operator live view"

// LiveView asks the provider now what it knows of the purchase's charge:
// by payment id when known, else by search. It changes nothing; the
// operator sees it before confirming a resolution. The call is recorded in
// the purchase's audit as not applied.
func (s *Service) LiveView(ctx context.Context, id string) (provider.Result, error) {
	p, err := s.read(ctx, id)
	if err != nil {
		return provider.Result{}, err
	}
	res, _, err := s.liveView(ctx, p, LiveViewActor, 0)
	return res, err
}

// liveView asks the provider about p's charge, records the call (not
// applied: it changes nothing by itself) and returns the answer, with an
// error's outcome folded into it, and its Answer for the judge.
func (s *Service) liveView(ctx context.Context, p Purchase, actor string, token int64) (provider.Result, Answer, error) {
	callCtx, cancel := context.WithTimeout(ctx, s.cfg.ProviderTimeout)
	defer cancel()
	op := provider.OpSearch
	if p.ProviderPaymentID != "" {
		op = provider.OpStatus
	}
	// An operator waits for the answer: the live view goes first.
	if err := s.awaitBudget(callCtx, p.Account, op, PriorityNew, 0, false); err != nil {
		return provider.Result{}, Answer{}, err
	}
	start := s.cfg.Now()
	res, err := s.callProvider(callCtx, op, p)
	took := s.cfg.Now().Sub(start)
	outcome := provider.OutcomeOf(res, err)
	s.observeCall(p.Account, op, outcome, took)
	s.noteThrottle(ctx, p.Account, op, err)
	ans := answerOf(SourceOperator, outcome, res)
	ans.Account = p.Account
	a := Attempt{
		PurchaseID: p.ID, Op: op, Outcome: outcome, PaymentID: res.PaymentID, Status: res.Status,
		Latency: took, Actor: actor, LeaseToken: token, Note: "shown to an operator; changes nothing",
	}
	if err != nil {
		a.Error = err.Error()
		res = provider.Result{Outcome: outcome, Reason: err.Error()}
	}
	aerr := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		if a.At, err = tx.Now(ctx); err != nil {
			return err
		}
		return tx.InsertAttempt(ctx, a)
	})
	if aerr != nil {
		return res, ans, fmt.Errorf("reconcile: live view of %s: record the call: %w", p.ID, aerr)
	}
	return res, ans, nil
}

// DescribeView renders a provider answer for the operator audit.
func DescribeView(r provider.Result) string {
	parts := []string{"outcome=" + string(r.Outcome)}
	if r.Status != "" {
		parts = append(parts, "status="+r.Status)
	}
	if r.PaymentID != "" {
		parts = append(parts, "payment="+r.PaymentID)
	}
	if r.Amount != 0 {
		parts = append(parts, "amount="+provider.FormatAmount(r.Amount, r.Currency))
	}
	if r.PurchaseID != "" {
		parts = append(parts, "metadata purchase="+r.PurchaseID)
	}
	if r.Charges > 1 {
		parts = append(parts, fmt.Sprintf("charges=%d", r.Charges))
	}
	if r.Reason != "" {
		parts = append(parts, "reason="+r.Reason)
	}
	return strings.Join(parts, " ")
}

// Resolution is an operator's decision about a purchase.
type Resolution struct {
	PurchaseID string
	Operator   string
	To         statemachine.State // succeeded or declined
	Evidence   string             // required: what the decision rests on
	// Version is the purchase version the operator was shown; 0 skips the
	// check.
	Version int64
	// OverrideProvider, when not empty, is the operator's reason to
	// resolve against a definite live answer of the provider. Both the
	// answer and the reason are recorded.
	OverrideProvider string
}

// Resolve settles a purchase by an operator's decision, through the state
// machine: an uncertain purchase moves through reconciling, each move
// recorded with cause operator, the operator's name and the evidence. The
// job completes and the purchase leaves the operator list. Nothing here
// can charge.
//
// Resolve first takes the purchase's job, so that no worker is inside a
// provider call while a human settles the outcome: an answer arriving
// after the resolution could otherwise contradict it unseen. Under that
// lease it asks the provider for its live view, and the judge compares
// that answer with the requested outcome: a definite answer that
// contradicts it (a success where the operator says declined, a charge of
// another amount, a second charge, a payment of another purchase) refuses
// the resolution, unless OverrideProvider gives a reason. So does a
// resolution to succeeded that the live view does not back with a payment
// of the purchase that took the money (none found, only a declined or a
// pending one, or no answer): the books would otherwise say succeeded for
// money never taken. What the operator saw is what payrecon fetched, stored by payrecon with the
// action.
//
// Returns an error wrapping ErrInvalid without evidence, an operator name,
// with a target other than succeeded or declined, or for a purchase whose
// outcome is not in doubt (submitted and not escalated: the worker is
// establishing it); ErrAlreadyFinal for a terminal purchase; ErrBusy while
// a worker holds the job; ErrForbiddenTransition when the table allows no
// path (a purchase never submitted and not suspected of a charge);
// ErrStale when the purchase changed since the operator was shown Version;
// ErrProviderDisagrees when the provider's live view contradicts it;
// ErrNotFound for an unknown id. Nothing changes when it returns an error
// (the live view's call is still recorded in the audit).
func (s *Service) Resolve(ctx context.Context, r Resolution) (Purchase, error) {
	r.Evidence = strings.TrimSpace(r.Evidence)
	r.Operator = strings.TrimSpace(r.Operator)
	r.OverrideProvider = strings.TrimSpace(r.OverrideProvider)
	switch {
	case r.Evidence == "":
		return Purchase{}, fmt.Errorf("reconcile: resolve %s: %w", r.PurchaseID, &FieldError{"evidence", "is required: say what the decision rests on"})
	case r.Operator == "":
		return Purchase{}, fmt.Errorf("reconcile: resolve %s: %w", r.PurchaseID, &FieldError{"operator", "is required"})
	case r.To != statemachine.Succeeded && r.To != statemachine.Declined:
		return Purchase{}, fmt.Errorf("reconcile: resolve %s: %w", r.PurchaseID,
			&FieldError{"to", fmt.Sprintf("%q: an operator resolves to succeeded or declined only", r.To)})
	}
	// Refuse what can be refused without touching the job; checked again
	// under the lease, in case the purchase moves meanwhile.
	p, err := s.read(ctx, r.PurchaseID)
	if err == nil {
		_, err = resolvePath(p, r)
	}
	if err != nil {
		return Purchase{}, fmt.Errorf("reconcile: resolve %s: %w", r.PurchaseID, err)
	}
	l, restore, err := s.takeJob(ctx, r.PurchaseID, "operator")
	if err != nil {
		return Purchase{}, fmt.Errorf("reconcile: resolve %s: %w", r.PurchaseID, err)
	}
	out, err := s.resolveUnderLease(ctx, l, r)
	if err != nil {
		restore()
		return Purchase{}, fmt.Errorf("reconcile: resolve %s: %w", r.PurchaseID, err)
	}
	s.cfg.Logger.Info("operator resolved purchase", "purchase", r.PurchaseID, "operator", r.Operator, "to", r.To,
		"override", r.OverrideProvider)
	return out, nil
}

// resolveUnderLease fetches the provider's live view, has the judge weigh
// it against the resolution and, unless it refuses, settles the purchase.
func (s *Service) resolveUnderLease(ctx context.Context, l Lease, r Resolution) (Purchase, error) {
	p, err := s.read(ctx, r.PurchaseID)
	if err != nil {
		return Purchase{}, err
	}
	if _, err := resolvePath(p, r); err != nil {
		return Purchase{}, err
	}
	live, ans, err := s.liveView(ctx, p, "operator:"+r.Operator, l.Token)
	if err != nil {
		return Purchase{}, err
	}
	saw := DescribeView(live)
	var (
		out   Purchase
		moves []move
	)
	err = s.store.InTx(ctx, func(tx Tx) error {
		moves = nil
		if err := tx.CheckLease(ctx, l); err != nil {
			return err
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		p, err := tx.GetPurchase(ctx, r.PurchaseID)
		if err != nil {
			return err
		}
		path, err := resolvePath(p, r)
		if err != nil {
			return err
		}
		if ans.Owner, err = ownerOf(ctx, tx, ans.PaymentID); err != nil {
			return err
		}
		// The judge weighs the live answer as if the books already said
		// what the operator asks.
		wanted := p
		wanted.State = r.To
		v := Judge(wanted, ans)
		if v.Kind == VerdictRecord && r.To == statemachine.Declined && ans.Outcome == provider.Pending {
			// Not a contradiction yet, but a pending payment may still
			// take the money the operator calls declined.
			v = escalateVerdict(EscalationStateDisagreement, "the provider's payment is still pending: it may yet take the money")
		}
		if v.Kind == VerdictRecord && r.To == statemachine.Succeeded && ans.Outcome != provider.Succeeded {
			// Nothing contradicts it, but nothing shows the money either:
			// the books would say succeeded for a charge the provider
			// does not hold.
			v = escalateVerdict(EscalationStateDisagreement, noChargeWhy(ans))
		}
		evidence := fmt.Sprintf("operator %s: %s (provider showed: %s)", r.Operator, r.Evidence, saw)
		if v.Kind == VerdictEscalate || v.Kind == VerdictConfirm {
			if r.OverrideProvider == "" {
				// The judge's reason is the detail; the hint is context.
				return fmt.Errorf("%w; resolve with an override and its reason to go against it", E(KindProviderDisagrees, v.Why, nil))
			}
			evidence += fmt.Sprintf("; overriding the provider (%s): %s", v.Why, r.OverrideProvider)
		}
		cur := p
		did := []string{string(p.State)}
		for _, to := range path {
			next := cur
			next.State, next.UpdatedAt = to, now
			if to.Terminal() {
				next.EscalatedAt, next.EscalationReason, next.SettledAt, next.Doubt = time.Time{}, "", now, ""
				if to == statemachine.Succeeded && v.Kind == VerdictRecord && ans.PaymentID != "" && next.ProviderPaymentID == "" {
					next.ProviderPaymentID = ans.PaymentID
				}
			}
			if err := purchaseKind.update(ctx, tx, "operator:"+r.Operator, l.Token, cur, next, CauseOperator, evidence); err != nil {
				return err
			}
			moves = append(moves, move{from: cur.State, to: to, cause: CauseOperator, p: next})
			next.Version++
			cur = next
			did = append(did, string(to))
		}
		if err := tx.CompleteJob(ctx, p.ID, now); err != nil {
			return err
		}
		out = cur
		action := OperatorAction{
			PurchaseID: p.ID, Operator: r.Operator, Action: "resolve", Saw: saw,
			Did: strings.Join(did, "→"), Evidence: r.Evidence, At: now,
		}
		if r.OverrideProvider != "" {
			action.Did += "; override: " + r.OverrideProvider
		}
		return tx.InsertOperatorAction(ctx, action)
	})
	if err != nil {
		return Purchase{}, err
	}
	s.observeMoves(moves)
	return out, nil
}

// noChargeWhy says why a live answer shows no money taken for the
// purchase an operator would resolve as succeeded.
func noChargeWhy(a Answer) string {
	switch a.Outcome {
	case provider.NotFound:
		return "the provider holds no payment for the purchase: nothing was charged"
	case provider.Pending:
		return fmt.Sprintf("the provider's payment %s is still pending: it has not taken the money yet", orNone(a.PaymentID))
	case provider.Declined:
		return fmt.Sprintf("the provider's payment %s is declined: it took no money", orNone(a.PaymentID))
	}
	return fmt.Sprintf("the provider could not show a payment that took the money (%s)", a.Outcome)
}

// resolvePath returns the moves that settle p as r says, or why it may
// not be settled so.
func resolvePath(p Purchase, r Resolution) ([]statemachine.State, error) {
	switch {
	case r.Version != 0 && p.Version != r.Version:
		return nil, E(KindStale, fmt.Sprintf("shown version %d, now %d in state %s", r.Version, p.Version, p.State), nil)
	case p.State.Terminal():
		return nil, errAlreadyFinal(p.ID, p.State)
	case p.State == statemachine.Submitted && !p.Escalated():
		return nil, E(KindInvalid, p.ID+" is submitted and not escalated: the worker is establishing its outcome; recheck it instead", nil)
	}
	path := []statemachine.State{r.To}
	switch {
	case p.State == statemachine.Uncertain:
		path = []statemachine.State{statemachine.Reconciling, r.To}
	case p.State == statemachine.Created && p.EscalationReason.ChargeMayExist():
		// A charge the worker never made (another system's): the operator
		// records its outcome through submitted, the only way out of
		// created.
		path = []statemachine.State{statemachine.Submitted, r.To}
	}
	from := p.State
	for _, to := range path {
		if err := statemachine.Transition(from, to); err != nil {
			return nil, E(KindForbiddenTransition, "", err)
		}
		from = to
	}
	return path, nil
}

// errAlreadyFinal refuses an operator action on a final purchase, saying
// its state.
func errAlreadyFinal(id string, state statemachine.State) error {
	return E(KindAlreadyFinal, fmt.Sprintf("%s is %s; an operator cannot change a final state", id, state), nil)
}

// takeJob leases the purchase's job for an operator action, under an owner
// of its own (so that a stopping worker never releases it). restore gives
// the job back as it was, due when it was due; call it when the action
// does not complete the job. Returns ErrAlreadyFinal when the job is done
// because the purchase is final, ErrBusy while a worker holds it.
func (s *Service) takeJob(ctx context.Context, id, role string) (Lease, func(), error) {
	var before Job
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		before, err = tx.GetJob(ctx, id)
		return err
	})
	if err != nil {
		return Lease{}, nil, err
	}
	if err := s.refreshRecovery(ctx); err != nil {
		return Lease{}, nil, err // an operator's recheck never runs unguarded
	}
	l, err := s.store.ClaimJob(ctx, id, s.cfg.WorkerID+"/"+role, s.cfg.LeaseDuration)
	if errors.Is(err, ErrConflict) {
		p, rerr := s.read(ctx, id)
		switch {
		case rerr != nil:
			return Lease{}, nil, rerr
		case p.State.Terminal():
			return Lease{}, nil, errAlreadyFinal(id, p.State)
		default:
			return Lease{}, nil, ErrBusy
		}
	}
	if err != nil {
		return Lease{}, nil, err
	}
	s.claimed([]Lease{l})
	l.local = s.cfg.Now()
	restore := func() {
		err := s.store.InTx(context.WithoutCancel(ctx), func(tx Tx) error {
			if err := tx.CheckLease(ctx, l); err != nil {
				return err
			}
			return tx.RescheduleJob(ctx, id, before.RunAt)
		})
		if err != nil {
			s.cfg.Logger.Warn("operator lease not given back; it expires by itself", "purchase", id, "err", err)
		}
	}
	return l, restore, nil
}

// Note adds an operator's note to a purchase's record. With close, it also
// takes the purchase off the operator list: for a contradiction, once the
// separate refund process has started, or a terminal case already handled.
// An open, non-terminal case cannot be closed by a note: resolve it.
func (s *Service) Note(ctx context.Context, id, operator, text string, close bool) error {
	text, operator = strings.TrimSpace(text), strings.TrimSpace(operator)
	switch {
	case text == "":
		return fmt.Errorf("reconcile: note %s: %w", id, &FieldError{"text", "is required"})
	case operator == "":
		return fmt.Errorf("reconcile: note %s: %w", id, &FieldError{"operator", "is required"})
	}
	err := s.store.InTx(ctx, func(tx Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		p, err := tx.GetPurchase(ctx, id)
		if err != nil {
			return err
		}
		did := "note"
		if close {
			if !p.State.Terminal() {
				return E(KindInvalid, fmt.Sprintf("%s is %s; resolve it instead of closing it with a note", id, p.State), nil)
			}
			if p.Escalated() {
				next := p
				next.EscalatedAt, next.EscalationReason, next.UpdatedAt = time.Time{}, "", now
				if err := tx.UpdatePurchase(ctx, next, p.State); err != nil {
					return err
				}
				did = "note; closed escalation " + string(p.EscalationReason)
			}
		}
		return tx.InsertOperatorAction(ctx, OperatorAction{
			PurchaseID: id, Operator: operator, Action: "note", Did: did, Evidence: text, At: now,
		})
	})
	if err != nil {
		return fmt.Errorf("reconcile: note %s: %w", id, err)
	}
	return nil
}

// Recheck reconciles a purchase now, on the operator's request: it takes
// the purchase's job (unless a worker holds it) and works it at once.
// Returns the purchase as it stands afterwards; ErrAlreadyFinal for a
// terminal purchase, ErrBusy when a worker holds the job. Working a
// created purchase sends its create, so unless this service's check for
// a restored backup passed, Recheck runs it first (CheckRestore) and
// returns its error: a recheck from the command line, or from serve's
// operator pages while its worker still waits for the check, never sends
// a create the worker would not.
func (s *Service) Recheck(ctx context.Context, id, operator string) (Purchase, error) {
	operator = strings.TrimSpace(operator)
	if operator == "" {
		return Purchase{}, fmt.Errorf("reconcile: recheck %s: %w", id, &FieldError{"operator", "is required"})
	}
	p, err := s.read(ctx, id)
	if err != nil {
		return Purchase{}, err
	}
	if p.State.Terminal() {
		return p, fmt.Errorf("reconcile: recheck %s: %w", id, E(KindAlreadyFinal, "it is "+string(p.State), nil))
	}
	if p.State == statemachine.Created && !s.restoreChecked.Load() {
		if err := s.CheckRestore(ctx); err != nil {
			return p, fmt.Errorf("reconcile: recheck %s would send its create: %w", id, err)
		}
	}
	l, _, err := s.takeJob(ctx, id, "recheck")
	if err != nil {
		return p, fmt.Errorf("reconcile: recheck %s: %w", id, err)
	}
	if err := s.Process(ctx, l); err != nil {
		return p, fmt.Errorf("reconcile: recheck %s: %w", id, err)
	}
	after, err := s.read(ctx, id)
	if err != nil {
		return p, err
	}
	err = s.store.InTx(ctx, func(tx Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		return tx.InsertOperatorAction(ctx, OperatorAction{
			PurchaseID: id, Operator: operator, Action: "recheck",
			Did: fmt.Sprintf("checked: %s → %s", p.State, after.State), At: now,
		})
	})
	if err != nil {
		return after, fmt.Errorf("reconcile: recheck %s: record action: %w", id, err)
	}
	return after, nil
}
