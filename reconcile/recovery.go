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

// Recovery after restoring an old backup. A restore brings back an
// earlier state of the books while the provider keeps every charge made
// since: a purchase the backup shows as created may have been charged
// (and once the provider has forgotten its key, a create charges it
// again), and purchases made after the backup are gone from the books
// while their money is not.
//
// Recover records a recovery epoch. Until the epoch's audit completes,
// the worker sends no create and no replay for a purchase or refund
// created before the epoch was recorded (the guard: heldByRecovery); it
// still queries status and searches, which move no money. The recovery
// audit lists every payment the provider created in [restored-at − key
// retention, recorded-at]: it re-links each purchase the books show as
// not yet linked whose charge the provider holds (its payment id is
// recorded and the worker settles it by a status query, never a create),
// and the audit from the provider's side reports every charge whose
// purchase the books lost as an orphan_charge finding. Then the epoch is
// completed and the guard lifts.
//
// CheckRestore is what the worker and the server run before they start:
// it refuses, naming `payrecon recover`, when it sees signs of a restore.

// Recovery is one recovery epoch.
type Recovery struct {
	ID int64
	// RestoredAt is the time the restored backup was taken: the books
	// know nothing written after it.
	RestoredAt time.Time
	// RecordedAt is when Recover recorded the epoch: the guard holds
	// every purchase and refund created before it.
	RecordedAt time.Time
	// AuditFrom and AuditUntil bound the recovery audit: RestoredAt less
	// Config.KeyRetention, to RecordedAt.
	AuditFrom, AuditUntil time.Time
	// CompletedAt is when its audit completed; zero while the guard holds.
	CompletedAt time.Time
	// Relinked counts the purchases the audit re-linked to their charge;
	// (and refunds to their provider refund, counted with them); Orphans
	// the charges it reported as orphan_charge findings.
	Relinked, Orphans int
}

// Open reports whether the epoch's audit has not completed: its guard
// holds.
func (r Recovery) Open() bool { return r.CompletedAt.IsZero() }

// EventEpoch is the epoch (events.Event.Epoch) of the outbox's events
// committed after it was recorded: EventEpochOf(RecordedAt).
func (r Recovery) EventEpoch() int64 { return EventEpochOf(r.RecordedAt) }

// EventEpochOf returns the event epoch of a recovery recorded at
// recordedAt: its Unix time in seconds (0 for the zero time: no
// recovery). The outbox stamps each event with the epoch of the latest
// recovery recorded (Tx.AppendOutbox). A restore brings the books'
// per-purchase sequence numbers back with the backup, and with them the
// recovery epochs the backup held; a time, unlike a counter, is above
// every epoch of the lost period too, since every recovery of that
// period was recorded before this restore.
func EventEpochOf(recordedAt time.Time) int64 {
	if recordedAt.IsZero() {
		return 0
	}
	return recordedAt.Unix()
}

// RecoveryReport says what one Recover call did.
type RecoveryReport struct {
	Recovery Recovery
	// Resumed is true when the call completed an epoch recorded earlier.
	Resumed bool
	// Relinked lists the purchases this call re-linked to a charge, and
	// RelinkedRefunds the refunds it re-linked to a provider refund.
	Relinked, RelinkedRefunds []string
	// Orphans lists the orphan_charge findings the audit stored.
	Orphans []Finding
	// Audit is the provider-side audit's own report.
	Audit AuditReport
}

// RecoveryStatus is the state of recovery: the epochs, latest first, and
// what the guard holds while one is open.
type RecoveryStatus struct {
	Epochs []Recovery
	// HeldPurchases and HeldRefunds count the purchases and refunds not
	// final that the open epoch's guard keeps from creates and replays.
	HeldPurchases, HeldRefunds int
}

// ErrRestoreSuspected is wrapped by CheckRestore's refusal: the database
// shows signs of a restored backup and `payrecon recover` has not run.
var ErrRestoreSuspected = errors.New("signs of a restored backup")

// ErrRecoveryOpen is wrapped by Recover when an epoch with another
// restore time is still open: complete it first (Recover with its time,
// or the zero time).
var ErrRecoveryOpen = errors.New("a recovery epoch is still open")

// recoveryGuard is the cut-off of the open epoch as the service last read
// it: the zero time when none is open.
type recoveryGuard struct{ cutoff time.Time }

// refreshRecovery reads the open epoch, if any, into the service's
// guard. The worker calls it before each claim, so that an epoch
// recorded or completed while it runs takes effect at its next claim. A
// failed read keeps the guard as it was.
func (s *Service) refreshRecovery(ctx context.Context) error {
	var g recoveryGuard
	err := s.store.InTx(ctx, func(tx Tx) error {
		r, err := tx.OpenRecovery(ctx)
		switch {
		case errors.Is(err, ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		g.cutoff = r.RecordedAt
		return nil
	})
	if err != nil {
		return fmt.Errorf("reconcile: read the open recovery epoch: %w", err)
	}
	s.recovery.Store(&g)
	return nil
}

// recoveryCutoff returns the open epoch's cut-off, the zero time if none.
func (s *Service) recoveryCutoff() time.Time {
	if g := s.recovery.Load(); g != nil {
		return g.cutoff
	}
	return time.Time{}
}

// heldByRecovery reports whether the guard of an open recovery epoch
// keeps a purchase or refund created at createdAt from every create and
// replay. It uses the creation time, not the last change: every row
// created before the epoch may be one the restore brought back, and a
// later unrelated write to it (an escalation, a webhook) must not lift
// the guard.
func (s *Service) heldByRecovery(createdAt time.Time) bool {
	cutoff := s.recoveryCutoff()
	return !cutoff.IsZero() && createdAt.Before(cutoff)
}

// holdForRecovery reschedules the job id, held by the recovery guard,
// after the backoff of its run count (Config.Backoff: 30s, 2m, 10m, then
// hourly), as an uncertain purchase's checks back off, so that a guard
// held for hours does not spend its attempts: it is neither failed nor
// escalated, and goes on at its first run after the recovery audit
// completes.
func (s *Service) holdForRecovery(ctx context.Context, l Lease, id, what string) error {
	s.cfg.Logger.Info("held until the recovery audit completes: no create or replay for what the restore may have brought back",
		"job", id, "what", what, "recovery_cutoff", s.recoveryCutoff())
	return s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.CheckLease(ctx, l); err != nil {
			return err
		}
		return tx.RescheduleJob(ctx, id, s.leaseNow(l).Add(s.cfg.backoff(l.Checks-1)))
	})
}

// RecordRecovery records a recovery epoch for a backup taken at
// restoredAt, or returns the open one when its restore time is the same
// (or restoredAt is zero). It records the database's system identifier
// anew, since the restore may have moved the books to another cluster.
// It does not run the audit: Recover does both. Returns an error wrapping
// ErrRecoveryOpen when an epoch with another restore time is open, and
// ErrInvalid when restoredAt is zero with no epoch open or lies in the
// future.
func (s *Service) RecordRecovery(ctx context.Context, restoredAt time.Time) (Recovery, bool, error) {
	restoredAt = restoredAt.UTC().Truncate(time.Microsecond)
	var (
		r       Recovery
		resumed bool
	)
	err := s.store.InTx(ctx, func(tx Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		open, err := tx.OpenRecovery(ctx)
		switch {
		case err == nil && (restoredAt.IsZero() || open.RestoredAt.Equal(restoredAt)):
			r, resumed = open, true
			return nil
		case err == nil:
			return fmt.Errorf("%w: epoch %d for a backup of %s; complete it first (payrecon recover --restored-at %s)",
				ErrRecoveryOpen, open.ID, open.RestoredAt.Format(time.RFC3339), open.RestoredAt.Format(time.RFC3339))
		case !errors.Is(err, ErrNotFound):
			return err
		case restoredAt.IsZero():
			return &FieldError{"restored_at", "is required: the time the restored backup was taken"}
		case restoredAt.After(now):
			return &FieldError{"restored_at", "lies in the future"}
		}
		r = Recovery{RestoredAt: restoredAt, RecordedAt: now, AuditFrom: restoredAt.Add(-s.cfg.KeyRetention), AuditUntil: now}
		if r.ID, err = tx.InsertRecovery(ctx, r); err != nil {
			return err
		}
		return s.recordSystemIdentifier(ctx, tx, now)
	})
	if err != nil {
		return Recovery{}, false, fmt.Errorf("reconcile: record recovery epoch: %w", err)
	}
	if !resumed {
		s.cfg.Logger.Warn("recovery epoch recorded: no create or replay for what was created before it until its audit completes",
			"epoch", r.ID, "restored_at", r.RestoredAt, "recorded_at", r.RecordedAt, "audit_from", r.AuditFrom, "audit_until", r.AuditUntil)
	}
	return r, resumed, nil
}

// recordSystemIdentifier records the cluster's current identifier, when
// the store has one.
func (s *Service) recordSystemIdentifier(ctx context.Context, tx Tx, now time.Time) error {
	current, _, err := tx.SystemIdentifier(ctx)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return nil
	case err != nil:
		return err
	}
	return tx.RecordSystemIdentifier(ctx, current, now)
}

// Recover records a recovery epoch for a backup taken at restoredAt (see
// RecordRecovery; the zero time resumes the open one) and runs its audit:
// it re-links the purchases whose charge the provider holds, reports the
// charges of purchases the books lost as orphan_charge findings, and
// completes the epoch, which lifts the guard. A call that fails midway
// leaves the epoch open; calling again resumes it (the audit resumes
// from its watermark, and re-linking is idempotent).
func (s *Service) Recover(ctx context.Context, restoredAt time.Time) (RecoveryReport, error) {
	r, resumed, err := s.RecordRecovery(ctx, restoredAt)
	if err != nil {
		return RecoveryReport{}, err
	}
	rep := RecoveryReport{Recovery: r, Resumed: resumed}
	w := provider.Window{From: r.AuditFrom, Until: r.AuditUntil.Add(time.Second)} // the audit truncates to seconds
	// Every watched account: the restore lost its sends as much as the
	// platform's, and its guard holds them all until this completes.
	accounts, err := s.watchedAccounts(ctx)
	if err != nil {
		return rep, fmt.Errorf("reconcile: recovery %d: %w", r.ID, err)
	}
	for _, account := range accounts {
		for from := w.From; from.Before(w.Until); from = from.Add(s.cfg.AuditChunk) {
			chunk := provider.Window{From: from, Until: minTime(from.Add(s.cfg.AuditChunk), w.Until)}
			ids, err := s.relinkChunk(ctx, account, chunk)
			if err != nil {
				return rep, fmt.Errorf("reconcile: recovery %d: account %s: re-link [%s, %s): %w", r.ID, accountName(account),
					chunk.From.Format(time.RFC3339), chunk.Until.Format(time.RFC3339), err)
			}
			rep.Relinked = append(rep.Relinked, ids...)
			if ids, err = s.relinkRefunds(ctx, account, chunk); err != nil {
				return rep, fmt.Errorf("reconcile: recovery %d: account %s: re-link refunds [%s, %s): %w", r.ID, accountName(account),
					chunk.From.Format(time.RFC3339), chunk.Until.Format(time.RFC3339), err)
			}
			rep.RelinkedRefunds = append(rep.RelinkedRefunds, ids...)
		}
	}
	suffix := fmt.Sprintf("/recovery-%d", r.ID)
	if rep.Audit, err = s.auditAccounts(ctx, suffix, func(context.Context, string) (provider.Window, error) { return w, nil }); err != nil {
		return rep, fmt.Errorf("reconcile: recovery %d: %w", r.ID, err)
	}
	// The orphans: those of this run, and of a run this one resumed.
	var orphans []Finding
	err = s.store.InTx(ctx, func(tx Tx) error {
		all, err := tx.ListFindings(ctx, "", AnyAccount, true, 0)
		if err != nil {
			return err
		}
		for _, f := range all {
			if f.Kind == FindingOrphanCharge && f.PurchaseID == "" && !f.FoundAt.Before(r.RecordedAt) {
				orphans = append(orphans, f)
			}
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		relinked := r.Relinked + len(rep.Relinked) + len(rep.RelinkedRefunds)
		if err := tx.CompleteRecovery(ctx, r.ID, relinked, len(orphans), now); err != nil {
			return err
		}
		r.CompletedAt, r.Relinked, r.Orphans = now, relinked, len(orphans)
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("reconcile: recovery %d: complete: %w", r.ID, err)
	}
	rep.Recovery, rep.Orphans = r, orphans
	if err := s.refreshRecovery(ctx); err != nil {
		return rep, err
	}
	s.cfg.Logger.Info("recovery audit complete: the guard is lifted", "epoch", r.ID,
		"relinked", r.Relinked, "orphan_charges", r.Orphans, "payments", rep.Audit.Payments)
	return rep, nil
}

// relinkChunk lists the payments the provider created in w and re-links
// each purchase they name that the books link to no payment and show as
// not final (created, submitted, uncertain or reconciling): it records
// the payment id, moves the purchase to uncertain (created goes through
// submitted, as the transition table demands) and makes its job due, so
// that the worker settles it by a status query. A payment that took money
// is preferred over a decline for the same purchase. It returns the ids
// of the purchases it re-linked.
func (s *Service) relinkChunk(ctx context.Context, account string, w provider.Window) ([]string, error) {
	payments, err := s.list(ctx, account, w)
	if err != nil {
		return nil, err
	}
	best := map[string]provider.Payment{}
	for _, pay := range payments {
		if pay.PurchaseID == "" {
			continue
		}
		if cur, ok := best[pay.PurchaseID]; !ok || (!cur.MoneyTaken() && pay.MoneyTaken()) {
			best[pay.PurchaseID] = pay
		}
	}
	var out []string
	for id, pay := range best {
		var did bool
		err := s.retryRaces(ctx, func(tx Tx) error {
			did = false
			p, err := tx.GetPurchase(ctx, id)
			switch {
			case errors.Is(err, ErrNotFound):
				return nil // lost by the restore: the audit reports it
			case err != nil:
				return err
			case p.ProviderPaymentID != "" || p.State.Terminal():
				return nil
			case p.Account != account:
				return nil // another account's money: the audit reports it
			}
			if owner, err := tx.FindPurchaseByPaymentID(ctx, pay.ID); err == nil && owner.ID != p.ID {
				return nil // the books give it to another purchase: the audit reports it
			} else if err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			if err := s.relink(ctx, tx, p, pay, now); err != nil {
				return err
			}
			did = true
			return tx.ReopenJob(ctx, p.ID, now)
		})
		if err != nil {
			return out, fmt.Errorf("re-link purchase %s to payment %s: %w", id, pay.ID, err)
		}
		if did {
			out = append(out, id)
			s.cfg.Logger.Warn("recovery re-linked a purchase to the charge the provider holds: settled by a status query, never a create",
				"purchase", id, "payment", pay.ID, "status", pay.Status)
		}
	}
	return out, nil
}

// relinkRefunds is relinkChunk for refunds: each refund the provider
// created in w whose refund the books show as not final and linked to no
// provider refund gets its provider refund id, moves to uncertain and is
// made due, so that the worker settles it by a lookup, never by sending
// it again. It returns the ids of the refunds it re-linked.
func (s *Service) relinkRefunds(ctx context.Context, account string, w provider.Window) ([]string, error) {
	refunds, err := s.listRefunds(ctx, account, w)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, x := range refunds {
		if x.RefundID == "" || x.ID == "" {
			continue
		}
		var did bool
		err := s.retryRaces(ctx, func(tx Tx) error {
			did = false
			r, err := tx.GetRefund(ctx, x.RefundID)
			switch {
			case errors.Is(err, ErrNotFound):
				return nil // lost by the restore: the audit reports it
			case err != nil:
				return err
			case r.ProviderRefundID != "" || statemachine.Refund.Terminal(r.State):
				return nil
			case r.Account() != account:
				return nil // another account's refund: the audit reports it
			}
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			evidence := fmt.Sprintf("recovery audit: the provider holds refund %s (%s, created %s) for this refund",
				x.ID, x.Status, x.Created.UTC().Format(time.RFC3339))
			actor := s.cfg.WorkerID + "/recovery"
			cur := r
			if cur.State == statemachine.Created {
				next := cur
				next.State, next.UpdatedAt, next.FirstAttemptAt = statemachine.Submitted, now, now
				if err := refundKind.update(ctx, tx, actor, 0, cur, next, CauseRecovery, evidence); err != nil {
					return err
				}
				next.Version++
				cur = next
			}
			next := cur
			next.ProviderRefundID, next.UpdatedAt = x.ID, now
			if cur.State == statemachine.Submitted {
				next.State = statemachine.Uncertain
			}
			if next.State == statemachine.Uncertain && next.UncertainSince.IsZero() {
				next.UncertainSince = now
			}
			if err := refundKind.update(ctx, tx, actor, 0, cur, next, CauseRecovery, evidence); err != nil {
				return err
			}
			did = true
			return tx.ReopenJob(ctx, r.ID, now)
		})
		if err != nil {
			return out, fmt.Errorf("re-link refund %s to provider refund %s: %w", x.RefundID, x.ID, err)
		}
		if did {
			out = append(out, x.RefundID)
			s.cfg.Logger.Warn("recovery re-linked a refund to the refund the provider holds: settled by a lookup, never sent again",
				"refund", x.RefundID, "provider_refund", x.ID, "status", x.Status)
		}
	}
	return out, nil
}

// relink writes pay's id into p and moves p to uncertain, recording each
// move with cause recovery.
func (s *Service) relink(ctx context.Context, tx Tx, p Purchase, pay provider.Payment, now time.Time) error {
	evidence := fmt.Sprintf("recovery audit: the provider holds payment %s (%s, created %s) for this purchase",
		pay.ID, pay.Status, pay.Created.UTC().Format(time.RFC3339))
	cur := p
	if cur.State == statemachine.Created {
		next := cur
		next.State, next.UpdatedAt = statemachine.Submitted, now
		next.FirstAttemptAt = pay.Created.UTC()
		if next.FirstAttemptAt.IsZero() || next.FirstAttemptAt.After(now) {
			next.FirstAttemptAt = now
		}
		if err := purchaseKind.update(ctx, tx, s.cfg.WorkerID+"/recovery", 0, cur, next, CauseRecovery, evidence); err != nil {
			return err
		}
		next.Version++
		cur = next
	}
	next := cur
	next.ProviderPaymentID, next.UpdatedAt = pay.ID, now
	if cur.State == statemachine.Submitted {
		next.State = statemachine.Uncertain
	}
	if next.State == statemachine.Uncertain && next.UncertainSince.IsZero() {
		next.UncertainSince = now
	}
	return purchaseKind.update(ctx, tx, s.cfg.WorkerID+"/recovery", 0, cur, next, CauseRecovery, evidence)
}

// RecoveryStatus returns the recovery epochs, latest first, and what the
// open one's guard holds.
func (s *Service) RecoveryStatus(ctx context.Context) (RecoveryStatus, error) {
	var st RecoveryStatus
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		if st.Epochs, err = tx.ListRecoveries(ctx, 0); err != nil {
			return err
		}
		open, err := tx.OpenRecovery(ctx)
		switch {
		case errors.Is(err, ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		st.HeldPurchases, st.HeldRefunds, err = tx.CountRecoveryHeld(ctx, open.RecordedAt)
		return err
	})
	if err != nil {
		return RecoveryStatus{}, fmt.Errorf("reconcile: recovery status: %w", err)
	}
	return st, nil
}

// maxRestoreSigns caps the charges and refunds a refusal names.
const maxRestoreSigns = 5

// CheckRestore looks for signs that the database was restored from an
// old backup since payrecon last ran, and returns an error wrapping
// ErrRestoreSuspected that says which and names `payrecon recover
// --restored-at` when it finds one:
//   - the cluster's system identifier differs from the one recorded
//     (Postgres only: a logical restore into another cluster; SQLite has
//     none, see its store); the first check records it;
//   - the provider holds a charge for a purchase, or a refund for a
//     refund, that the books do not know or show as created (never
//     sent), created after the books' send horizon (Tx.SendHorizon) less
//     Config.RestoreSkew (for empty books, Config.AuditFirstWindow back).
//
// The second check cannot miss a restore, however old the backup: the
// books commit created → submitted (setting first_attempt_at) before the
// provider is ever called for it. A charge or refund whose row the
// restored books show as created, or do not hold, was therefore sent
// after a commit the backup lacks, hence created at the provider after
// every send the backup records: after the horizon. Nothing but a send
// or a recovery moves the horizon, so purchases and refunds stored after
// the restore by a command that sends nothing (the API, `purchase
// create`, `refund create`) do not hide it. The listing has no cap; in
// normal operation the horizon is the last send, moments ago, and the
// listing short.
//
// It lists the provider's payments and refunds, so it needs the provider
// reachable; an error that is not a sign is returned as is. The horizon
// is the one the service's first check read (or a recovery epoch
// recorded since, whichever is later), so that a check made again, once
// the provider answers, is not fooled by what this process sent since
// (WaitRestoreCheck).
func (s *Service) CheckRestore(ctx context.Context) error {
	var (
		now, horizon      time.Time
		current, recorded string
	)
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		if now, err = tx.Now(ctx); err != nil {
			return err
		}
		if horizon, err = s.startHorizon(ctx, tx); err != nil {
			return err
		}
		current, recorded, err = tx.SystemIdentifier(ctx)
		switch {
		case errors.Is(err, errors.ErrUnsupported):
			return nil
		case err != nil:
			return err
		case recorded == "":
			recorded = current
			return tx.RecordSystemIdentifier(ctx, current, now)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reconcile: check for a restore: %w", err)
	}
	if current != recorded {
		return fmt.Errorf("reconcile: %w: the database's system identifier is %s, but payrecon recorded %s: "+
			"the books were restored into (or copied to) another cluster; run `payrecon recover --restored-at <when the backup was taken>` first",
			ErrRestoreSuspected, current, recorded)
	}
	from := horizon.Add(-s.cfg.RestoreSkew)
	if horizon.IsZero() {
		// Empty books hold nothing that could be sent twice: look only
		// as far back as the first periodic audit would, for charges of
		// purchases they lost.
		from = now.Add(-s.cfg.AuditFirstWindow)
	}
	w := provider.Window{From: from, Until: now.Add(s.cfg.RestoreSkew)}
	// Every watched account's sends count: a backup loses a connected
	// account's as it loses the platform's.
	accounts, err := s.watchedAccounts(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: check for a restore: %w", err)
	}
	var (
		payments []accountPayment
		refunds  []accountRefund
	)
	for _, account := range accounts {
		ps, err := s.list(ctx, account, w)
		if err != nil {
			return fmt.Errorf("reconcile: check for a restore: account %s: %w", accountName(account), err)
		}
		for _, pay := range ps {
			payments = append(payments, accountPayment{account, pay})
		}
		rs, err := s.listRefunds(ctx, account, w)
		if err != nil {
			return fmt.Errorf("reconcile: check for a restore: account %s: %w", accountName(account), err)
		}
		for _, x := range rs {
			refunds = append(refunds, accountRefund{account, x})
		}
	}
	var signs []string
	n := 0
	sign := func(what string) {
		n++
		if len(signs) < maxRestoreSigns {
			signs = append(signs, what)
		}
	}
	err = s.store.InTx(ctx, func(tx Tx) error {
		signs, n = nil, 0
		for _, ap := range payments {
			pay := ap.Payment
			if pay.PurchaseID == "" {
				continue
			}
			p, err := tx.GetPurchase(ctx, pay.PurchaseID)
			var why string
			switch {
			case errors.Is(err, ErrNotFound):
				why = "which the books do not know"
			case err != nil:
				return err
			case p.Account != ap.account:
				continue // another account's purchase: not a send of its
			case p.State == statemachine.Created:
				why = "which the books show as never submitted"
			default:
				continue
			}
			sign(fmt.Sprintf("payment %s of purchase %s, created %s, %s",
				pay.ID, pay.PurchaseID, pay.Created.UTC().Format(time.RFC3339), why))
		}
		for _, ar := range refunds {
			x := ar.RefundResult
			if x.RefundID == "" {
				continue
			}
			r, err := tx.GetRefund(ctx, x.RefundID)
			var why string
			switch {
			case errors.Is(err, ErrNotFound):
				why = "which the books do not know"
			case err != nil:
				return err
			case r.Account() != ar.account:
				continue // another account's refund: not a send of its
			case r.State == statemachine.Created:
				why = "which the books show as never submitted"
			default:
				continue
			}
			sign(fmt.Sprintf("provider refund %s of refund %s, created %s, %s",
				x.ID, x.RefundID, x.Created.UTC().Format(time.RFC3339), why))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reconcile: check for a restore: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("reconcile: %w: the provider holds %d charges or refunds newer than the books' last send (%s) that the books do not know or never sent: %s: "+
			"run `payrecon recover --restored-at <when the backup was taken>` first",
			ErrRestoreSuspected, n, horizon.Format(time.RFC3339), strings.Join(signs, "; "))
	}
	s.restoreChecked.Store(true)
	return nil
}

// accountPayment is a payment listed in account.
type accountPayment struct {
	account string
	provider.Payment
}

// accountRefund is a refund listed in account.
type accountRefund struct {
	account string
	provider.RefundResult
}

// startHorizon returns the books' send horizon as the service's first
// check read it, or the latest recovery epoch's recording if later.
func (s *Service) startHorizon(ctx context.Context, tx Tx) (time.Time, error) {
	s.restoreMu.Lock()
	defer s.restoreMu.Unlock()
	if s.restoreHorizon == nil {
		h, err := tx.SendHorizon(ctx)
		if err != nil {
			return time.Time{}, err
		}
		s.restoreHorizon = &h
		return h, nil
	}
	h := *s.restoreHorizon
	epochs, err := tx.ListRecoveries(ctx, 1)
	if err != nil {
		return time.Time{}, err
	}
	if len(epochs) > 0 && epochs[0].RecordedAt.After(h) {
		h = epochs[0].RecordedAt
	}
	return h, nil
}

// WaitRestoreCheck runs CheckRestore until it passes, every retry while it
// cannot tell (the provider cannot be listed), and returns nil once it
// passes, or when ctx ends. It returns CheckRestore's error when that is
// a sign of a restore. A process that could not check at start waits
// here before its worker claims anything.
func (s *Service) WaitRestoreCheck(ctx context.Context, retry time.Duration) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		err := s.CheckRestore(ctx)
		switch {
		case err == nil:
			s.cfg.Logger.Info("no sign of a restored backup: the worker starts")
			return nil
		case errors.Is(err, ErrRestoreSuspected):
			return err
		case ctx.Err() != nil:
			return nil
		}
		s.cfg.Logger.Warn("cannot check for signs of a restored backup yet: the worker waits", "err", err, "retry", retry)
		t.Reset(retry)
	}
}
