package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The refund commands: a refund is its own process, with its own id, key
// and states, sent and reconciled by the worker; these commands only
// write and read the books, and never ask the provider.

func runRefund(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageError(errors.New("want `refund create PURCHASE` or `refund show ID`"))
	}
	switch args[0] {
	case "create":
		return runRefundCreate(ctx, e, args[1:])
	case "show":
		return runRefundShow(ctx, e, args[1:])
	case "-h", "-help", "--help":
		e.printGroupHelp("refund")
		return flag.ErrHelp
	default:
		return usageError(fmt.Errorf("unknown refund subcommand %q: want create or show", args[0]))
	}
}

func runRefundCreate(ctx context.Context, e *env, args []string) error {
	var amount, reason string
	rest, err := e.parse("refund create", args, func(fs *flag.FlagSet) {
		fs.StringVar(&amount, "amount", "", "`AMOUNT` to refund in minor units, e.g. 100 for 1.00; at most what is left of the amount paid (required)")
		fs.StringVar(&reason, "reason", "", "why, for the books (required)")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError(fmt.Errorf("want exactly one purchase id, got %d arguments %q", len(rest), rest))
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"--amount", amount}, {"--reason", reason}} {
		if strings.TrimSpace(f.v) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return usageError(fmt.Errorf("%s required", strings.Join(missing, ", ")))
	}
	nr := reconcile.NewRefund{PurchaseID: rest[0], Reason: reason, RequestedBy: "cli"}
	if _, err := fmt.Sscan(amount, &nr.Amount); err != nil || fmt.Sprint(nr.Amount) != strings.TrimPrefix(amount, "+") {
		return usageError(fmt.Errorf("--amount %q: want a whole number of minor units, e.g. 100 for 1.00", amount))
	}
	svc, cleanup, err := newBooks(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	r, err := svc.CreateRefund(ctx, nr)
	switch {
	case errors.Is(err, reconcile.ErrInvalid):
		// A value the flags gave is refused: a bad command line.
		return usageError(err)
	case errors.Is(err, reconcile.ErrNotFound):
		return noPurchase(nr.PurchaseID)
	case errors.Is(err, reconcile.ErrNotRefundable):
		return fmt.Errorf("refund refused: only a succeeded purchase is refunded (%s); nothing was stored",
			detailOr(err, "the purchase is not succeeded"))
	case errors.Is(err, reconcile.ErrRefundExceeds):
		return fmt.Errorf("refund refused: the purchase's refunds, pending ones included, would exceed the amount paid (%s); "+
			"nothing was stored: see payrecon purchase show %s", detailOr(err, "refunds of the payment"), nr.PurchaseID)
	case err != nil:
		return err
	}
	fmt.Fprintf(e.stdout, "%s %s\n", r.ID, r.State)
	return nil
}

// detailOr returns err's detail for people, or fallback.
func detailOr(err error, fallback string) string {
	if d := reconcile.DetailOf(err); d != "" {
		return d
	}
	return fallback
}

func runRefundShow(ctx context.Context, e *env, args []string) error {
	var asJSON bool
	rest, err := e.parse("refund show", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError(fmt.Errorf("want exactly one refund id, got %d arguments %q", len(rest), rest))
	}
	id := rest[0]
	svc, cleanup, err := newBooks(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	c, err := svc.RefundCase(ctx, id)
	if errors.Is(err, reconcile.ErrNotFound) {
		return fmt.Errorf("no refund with id %q", id)
	}
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(e, c)
	}
	printRefundCase(e, c)
	return nil
}

// printRefundCase writes a refund, its transitions, its provider calls
// and the operator actions about it.
func printRefundCase(e *env, c reconcile.RefundCase) {
	r := c.Refund
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "refund\t%s\n", r.ID)
	fmt.Fprintf(w, "state\t%s (version %d)\n", r.State, r.Version)
	fmt.Fprintf(w, "purchase\t%s (%s)\n", r.PurchaseID, c.Purchase.State)
	fmt.Fprintf(w, "payment refunded\t%s\n", dash(r.PaymentID))
	if r.FindingID != 0 {
		fmt.Fprintf(w, "for finding\t#%d\n", r.FindingID)
	}
	fmt.Fprintf(w, "amount\t%s (%d in minor units)\n", provider.FormatAmount(r.Amount, r.Currency), r.Amount)
	fmt.Fprintf(w, "reason\t%s\n", r.Reason)
	fmt.Fprintf(w, "requested by\t%s\n", dash(r.RequestedBy))
	fmt.Fprintf(w, "provider key\t%s\n", dash(r.ProviderKey))
	fmt.Fprintf(w, "provider refund id\t%s\n", dash(r.ProviderRefundID))
	if r.FailureReason != "" {
		fmt.Fprintf(w, "failure\t%s\n", r.FailureReason)
	}
	fmt.Fprintf(w, "created\t%s\n", stamp(r.CreatedAt))
	if !r.UncertainSince.IsZero() {
		fmt.Fprintf(w, "uncertain since\t%s\n", stamp(r.UncertainSince))
	}
	if r.Escalated() {
		fmt.Fprintf(w, "escalated\t%s (%s)\n", stamp(r.EscalatedAt), r.EscalationReason)
	}
	if !r.SettledAt.IsZero() {
		fmt.Fprintf(w, "settled\t%s\n", stamp(r.SettledAt))
	}
	w.Flush()
	if !statemachine.Refund.Terminal(r.State) && !r.UncertainSince.IsZero() {
		fmt.Fprintln(e.stdout, "\nthe outcome is not known yet: the worker reconciles it under the same key; never create a new refund for it")
	}
	printTransitions(e.stdout, c.Transitions)
	printAttempts(e.stdout, c.Attempts, "refund")
	fmt.Fprintln(e.stdout, "\noperator actions:")
	for _, a := range c.Actions {
		fmt.Fprintf(e.stdout, "  %s  %s by %s: %s  %s\n", stamp(a.At), a.Action, a.Operator, a.Did, a.Evidence)
	}
}

// printRefunds writes a purchase's refunds, one a line, or that it has
// none.
func printRefunds(out io.Writer, rs []reconcile.Refund) {
	fmt.Fprintln(out, "\nrefunds:")
	if len(rs) == 0 {
		fmt.Fprintln(out, "  none")
		return
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, r := range rs {
		settled := "-"
		if !r.SettledAt.IsZero() {
			settled = "settled " + stamp(r.SettledAt)
		}
		extra := ""
		if r.Escalated() {
			extra = "escalated: " + string(r.EscalationReason)
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\tpayment=%s\t%s\t%s\t%s\n", stamp(r.CreatedAt), r.ID, r.State,
			provider.FormatAmount(r.Amount, r.Currency), dash(r.PaymentID), settled, r.Reason, extra)
	}
	w.Flush()
}

// refundCaseJSON is the scripted view of an escalated refund.
type refundCaseJSON struct {
	RefundID      string    `json:"refund_id"`
	PurchaseID    string    `json:"purchase_id"`
	Account       string    `json:"account"` // "platform" or acct_…
	PaymentID     string    `json:"payment_id"`
	Amount        int64     `json:"amount"`
	Currency      string    `json:"currency"`
	State         string    `json:"state"`
	AgeSeconds    float64   `json:"age_seconds"`
	Reason        string    `json:"reason"`
	EscalatedAt   time.Time `json:"escalated_at"`
	ProviderCalls int       `json:"provider_calls"`
}

func toRefundCaseJSON(c reconcile.RefundCase) refundCaseJSON {
	r := c.Refund
	return refundCaseJSON{
		RefundID: r.ID, PurchaseID: r.PurchaseID, Account: reconcile.AccountLabel(r.Account()), PaymentID: r.PaymentID,
		Amount: r.Amount, Currency: r.Currency, State: string(r.State), AgeSeconds: c.Age.Seconds(), Reason: string(r.EscalationReason),
		EscalatedAt: r.EscalatedAt, ProviderCalls: len(c.Attempts),
	}
}

// printEscalatedRefunds writes the escalated refunds, one a line, or that
// there are none.
func printEscalatedRefunds(e *env, cases []reconcile.RefundCase) error {
	if len(cases) == 0 {
		fmt.Fprintln(e.stdout, "no escalated refunds")
		return nil
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "REFUND\tPURCHASE\tACCOUNT\tPAYMENT\tAMOUNT\tSTATE\tAGE\tREASON\tCALLS")
	for _, c := range cases {
		r := c.Refund
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", r.ID, r.PurchaseID, reconcile.AccountLabel(r.Account()), dash(r.PaymentID), provider.FormatAmount(r.Amount, r.Currency),
			r.State, c.Age.Round(time.Second), r.EscalationReason, len(c.Attempts))
	}
	return w.Flush()
}
