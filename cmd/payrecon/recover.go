package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// recoverAbout is the help of `payrecon recover`.
const recoverAbout = "After restoring the database from an old backup: records a recovery epoch for a backup taken at --restored-at, then runs its audit from the provider's side over [--restored-at − --key-retention, now]. " +
	"Until the audit completes, the worker sends no create and no replay for any purchase or refund created before the epoch (status queries and searches go on): the provider may hold their charges and have forgotten their keys. " +
	"The audit re-links each purchase the provider charged (the worker then settles it by a status query, never a create) and reports every charge of a purchase the restore lost as an orphan_charge finding; then the guard lifts. " +
	"worker and serve refuse to start while they see signs of a restore that recover has not handled. " +
	"Run it again with no --restored-at to resume an audit that stopped midway. --status prints the epochs and what the guard holds, and asks nothing of the provider. " +
	"Needs --provider stripe (Stripe, or a payrecon fakeprovider)."

// runRecover records a recovery epoch and runs its audit, or with
// --status prints the epochs. It exits 0 when the audit completed (its
// findings are on the operator list), 1 when it could not, 2 for a bad
// command line.
func runRecover(ctx context.Context, e *env, args []string) error {
	var (
		restoredAt string
		status     bool
	)
	rest, err := e.parse("recover", args, func(fs *flag.FlagSet) {
		fs.StringVar(&restoredAt, "restored-at", "", "when the restored backup was taken: an RFC 3339 time (2026-03-01T09:00:00Z); empty resumes the open epoch")
		fs.BoolVar(&status, "status", false, "print the recovery epochs and what the guard holds, and change nothing")
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageError(fmt.Errorf("unexpected arguments %q: recover takes --restored-at or --status", rest))
	}
	if status {
		if restoredAt != "" {
			return usageError(errors.New("--status changes nothing: give it without --restored-at"))
		}
		svc, cleanup, err := newBooks(ctx, e)
		if err != nil {
			return err
		}
		defer cleanup()
		return printRecoveryStatus(ctx, e, svc)
	}
	var at time.Time
	if strings.TrimSpace(restoredAt) != "" {
		if at, err = time.Parse(time.RFC3339, strings.TrimSpace(restoredAt)); err != nil {
			return usageError(fmt.Errorf("--restored-at %q: want an RFC 3339 time such as 2026-03-01T09:00:00Z", restoredAt))
		}
	}
	if err := requireSharedProvider(e, "recover"); err != nil {
		return err
	}
	svc, cleanup, err := newService(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	rep, err := svc.Recover(ctx, at)
	var fe *reconcile.FieldError
	if errors.As(err, &fe) || errors.Is(err, reconcile.ErrRecoveryOpen) {
		return usageError(err)
	}
	if err != nil {
		return fmt.Errorf("%w (the epoch stays open and its guard holds: run `payrecon recover` again to resume)", err)
	}
	r := rep.Recovery
	verb := "recorded"
	if rep.Resumed {
		verb = "resumed"
	}
	fmt.Fprintf(e.stdout, "recovery epoch %d %s: backup of %s, recorded %s\n", r.ID, verb, stamp(r.RestoredAt), stamp(r.RecordedAt))
	fmt.Fprintf(e.stdout, "events committed from now on carry epoch %d: a shop's receiver accepts them after those of the lost period\n", r.EventEpoch())
	fmt.Fprintf(e.stdout, "audit of the provider's payments from %s to %s: %d listed\n", stamp(r.AuditFrom), stamp(r.AuditUntil), rep.Audit.Payments)
	fmt.Fprintf(e.stdout, "re-linked to their charge (settled by status query): %d\n", len(rep.Relinked))
	for _, id := range rep.Relinked {
		fmt.Fprintf(e.stdout, "  %s\n", id)
	}
	fmt.Fprintf(e.stdout, "refunds re-linked to the provider's refund (settled by lookup): %d\n", len(rep.RelinkedRefunds))
	for _, id := range rep.RelinkedRefunds {
		fmt.Fprintf(e.stdout, "  %s\n", id)
	}
	fmt.Fprintf(e.stdout, "orphan charges (purchases the restore lost), on the operator list: %d\n", r.Orphans)
	for _, f := range rep.Orphans {
		fmt.Fprintf(e.stdout, "  %s %s: %s\n", f.PaymentID, provider.FormatAmount(f.Amount, f.Currency), f.Evidence)
	}
	fmt.Fprintf(e.stdout, "other new findings: %d\n", len(rep.Audit.New)-countKind(rep.Audit.New, reconcile.FindingOrphanCharge))
	fmt.Fprintf(e.stdout, "completed %s: the guard is lifted; the worker may start\n", stamp(r.CompletedAt))
	return nil
}

// countKind counts the findings of kind k.
func countKind(fs []reconcile.Finding, k reconcile.FindingKind) int {
	n := 0
	for _, f := range fs {
		if f.Kind == k {
			n++
		}
	}
	return n
}

// printRecoveryStatus writes the recovery epochs, latest first, and what
// an open one's guard holds.
func printRecoveryStatus(ctx context.Context, e *env, svc *reconcile.Service) error {
	st, err := svc.RecoveryStatus(ctx)
	if err != nil {
		return err
	}
	if len(st.Epochs) == 0 {
		fmt.Fprintln(e.stdout, "no recovery epoch recorded")
		return nil
	}
	for _, r := range st.Epochs {
		state := "completed " + stamp(r.CompletedAt)
		if r.Open() {
			state = "OPEN: its audit has not completed; run `payrecon recover` to resume it"
		}
		fmt.Fprintf(e.stdout, "epoch %d: backup of %s, recorded %s, audit %s to %s, re-linked %d, orphans %d, %s\n",
			r.ID, stamp(r.RestoredAt), stamp(r.RecordedAt), stamp(r.AuditFrom), stamp(r.AuditUntil), r.Relinked, r.Orphans, state)
	}
	if st.Epochs[0].Open() {
		fmt.Fprintf(e.stdout, "held from creates and replays: %d purchases, %d refunds\n", st.HeldPurchases, st.HeldRefunds)
	}
	return nil
}
