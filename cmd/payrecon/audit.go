package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// runAudit runs the audit from the provider's side by hand over
// [--since, --until): it lists the provider's payments created in the
// window, matches them to the books and stores what does not match as
// findings on the operator list. It prints how many payments it matched,
// the new findings per kind, the money they put at risk per currency, and
// each new finding on one line. It exits 0 when the audit ran, findings or
// not (they are on the operator list and in payrecon_audit_findings_open),
// and 1 when it could not run. Like `ops recheck` it needs the provider
// the worker uses (--provider stripe), never the in-process fake.
func runAudit(ctx context.Context, e *env, args []string) error {
	var since, until string
	rest, err := e.parse("audit", args, func(fs *flag.FlagSet) {
		fs.StringVar(&since, "since", "", "start of the window: an RFC 3339 time (2026-03-01T09:00:00Z) or a duration back from now (24h) (required)")
		fs.StringVar(&until, "until", "", "end of the window, excluded: an RFC 3339 time or a duration back from now (default: now)")
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: unexpected arguments %q: audit takes --since and --until", errUsage, rest)
	}
	if strings.TrimSpace(since) == "" {
		return fmt.Errorf("%w: --since is required: an RFC 3339 time or a duration back from now, such as 24h", errUsage)
	}
	// Check the syntax before opening anything; "now" is the store's.
	if _, err := auditTime("since", since, time.Time{}); err != nil {
		return err
	}
	if until != "" {
		if _, err := auditTime("until", until, time.Time{}); err != nil {
			return err
		}
	}
	if err := requireSharedProvider(e, "audit"); err != nil {
		return err
	}
	svc, cleanup, err := newService(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	now, err := svc.Store().Now(ctx)
	if err != nil {
		return fmt.Errorf("read the store's clock: %w", err)
	}
	w := provider.Window{Until: now}
	if w.From, err = auditTime("since", since, now); err != nil {
		return err
	}
	if until != "" {
		if w.Until, err = auditTime("until", until, now); err != nil {
			return err
		}
	}
	if !w.From.Before(w.Until) {
		return fmt.Errorf("%w: --since %s is not before --until %s", errUsage, stamp(w.From), stamp(w.Until))
	}
	rep, err := svc.Audit(ctx, w)
	if errors.Is(err, reconcile.ErrAuditWindow) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err != nil {
		return err
	}
	return printAudit(ctx, e, svc, rep)
}

// auditTime parses a window bound: an RFC 3339 time, or a positive
// duration back from now.
func auditTime(name, v string, now time.Time) (time.Time, error) {
	v = strings.TrimSpace(v)
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t.UTC(), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%w: --%s %q: want an RFC 3339 time such as 2026-03-01T09:00:00Z, or a positive duration back from now such as 24h", errUsage, name, v)
	}
	return now.Add(-d), nil
}

// printAudit writes the audit's summary and its new findings.
func printAudit(ctx context.Context, e *env, svc *reconcile.Service, rep reconcile.AuditReport) error {
	run := rep.Run
	fmt.Fprintf(e.stdout, "audit of %s payments created from %s to %s", run.Name, stamp(run.From), stamp(run.Until))
	if rep.Resumed {
		fmt.Fprintf(e.stdout, " (resumed a run that had stopped midway)")
	}
	fmt.Fprintln(e.stdout)
	fmt.Fprintf(e.stdout, "payments listed: %d\n", rep.Payments)
	fmt.Fprintf(e.stdout, "refunds listed: %d\n", rep.Refunds)
	fmt.Fprintf(e.stdout, "disputes listed: %d\n", rep.Disputes)
	fmt.Fprintf(e.stdout, "new findings: %d\n", len(rep.New))
	per := map[reconcile.FindingKind]int{}
	for _, f := range rep.New {
		per[f.Kind]++
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, k := range reconcile.FindingKinds {
		fmt.Fprintf(tw, "  %s\t%d\n", k, per[k])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "money at risk (new findings): %s\n", strings.Join(moneyAtRisk(rep.New, nil), ", "))
	if len(rep.New) > 0 {
		// The report's findings carry no id; the stored ones do.
		all, err := svc.Findings(ctx, reconcile.AnyAccount, true)
		if err != nil {
			return err
		}
		// A finding is one per (provider, payment, kind): the stored one of
		// each new finding carries the id close-finding takes.
		type key struct {
			provider, payment string
			kind              reconcile.FindingKind
		}
		stored := map[key]reconcile.Finding{}
		for _, f := range all {
			stored[key{f.Provider, f.PaymentID, f.Kind}] = f
		}
		news := make([]reconcile.Finding, 0, len(rep.New))
		for _, f := range rep.New {
			s, ok := stored[key{f.Provider, f.PaymentID, f.Kind}]
			if !ok {
				return fmt.Errorf("audit: the new finding %s of payment %s is not among the stored findings", f.Kind, f.PaymentID)
			}
			news = append(news, s)
		}
		fmt.Fprintln(e.stdout)
		if err := printFindings(e, news); err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, "\nThe audit moved no money and no purchase. Handle each finding (docs/runbook.md#payreconauditfinding), "+
			"then close it: payrecon ops close-finding ID --note \"…\"")
	}
	open, err := svc.Findings(ctx, reconcile.AnyAccount, false)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "open findings in all: %d (payrecon ops findings)\n", len(open))
	return nil
}
