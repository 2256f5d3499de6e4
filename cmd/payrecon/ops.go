package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/payrecon/payrecon/reconcile"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
	"github.com/payrecon/payrecon/statemachine"
)

// registerOps serves the operator pages when an ops token is set.
func (e *env) registerOps(a *app) error {
	token := e.settings.str("ops-token")
	if token == "" {
		e.log.Warn("--ops-token / PAYRECON_OPS_TOKEN is not set: the operator pages (/ops) are not served")
		return nil
	}
	for _, c := range strings.Split(e.settings.str("api-token"), ",") {
		if _, tok, ok := strings.Cut(c, ":"); (ok && tok == token) || c == token {
			return fmt.Errorf("%w: the ops token must differ from every API token", errUsage)
		}
	}
	ops, err := rhttp.NewOps(a.svc, rhttp.OpsConfig{Token: token})
	if err != nil {
		return fmt.Errorf("%w: --ops-token: %w", errUsage, err)
	}
	ops.Register(a.server)
	e.log.Info("serving the operator pages at /ops")
	return nil
}

func runOps(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: want ops list | show ID | recheck ID | resolve ID | note ID", errUsage)
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "list":
		return runOpsList(ctx, e, args)
	case "show":
		return runOpsShow(ctx, e, args)
	case "recheck":
		return runOpsRecheck(ctx, e, args)
	case "resolve":
		return runOpsResolve(ctx, e, args)
	case "note":
		return runOpsNote(ctx, e, args)
	default:
		return fmt.Errorf("%w: unknown ops subcommand %q: want list, show, recheck, resolve or note", errUsage, sub)
	}
}

// defaultOperator names the operator from the login user.
func defaultOperator() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

func runOpsList(ctx context.Context, e *env, args []string) error {
	var asJSON bool
	if _, err := e.parse("ops list", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print JSON, for scripts")
	}); err != nil {
		return err
	}
	svc, cleanup, err := newService(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	cases, err := svc.Escalations(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		out := make([]caseJSON, 0, len(cases))
		for _, c := range cases {
			out = append(out, toCaseJSON(c))
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(cases) == 0 {
		fmt.Fprintln(e.stdout, "no escalated purchases")
		return nil
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PURCHASE\tPAYMENT\tAMOUNT\tCUSTOMER\tSTATE\tAGE\tREASON\tCALLS")
	for _, c := range cases {
		p := c.Purchase
		fmt.Fprintf(w, "%s\t%s\t%d %s\t%s\t%s\t%s\t%s\t%d\n", p.ID, dash(p.ProviderPaymentID), p.Amount, p.Currency,
			p.Customer, p.State, c.Age.Round(time.Second), p.EscalationReason, len(c.Attempts))
	}
	return w.Flush()
}

// caseJSON is the scripted view of an escalated case.
type caseJSON struct {
	PurchaseID        string    `json:"purchase_id"`
	ProviderPaymentID string    `json:"provider_payment_id,omitempty"`
	Amount            int64     `json:"amount"`
	Currency          string    `json:"currency"`
	Customer          string    `json:"customer"`
	Reference         string    `json:"reference,omitempty"`
	State             string    `json:"state"`
	AgeSeconds        float64   `json:"age_seconds"`
	Reason            string    `json:"reason"`
	EscalatedAt       time.Time `json:"escalated_at"`
	ProviderCalls     int       `json:"provider_calls"`
	Webhooks          int       `json:"webhooks"`
}

func toCaseJSON(c reconcile.Case) caseJSON {
	p := c.Purchase
	return caseJSON{
		PurchaseID: p.ID, ProviderPaymentID: p.ProviderPaymentID, Amount: p.Amount, Currency: p.Currency,
		Customer: p.Customer, Reference: p.Reference, State: string(p.State), AgeSeconds: c.Age.Seconds(),
		Reason: string(p.EscalationReason), EscalatedAt: p.EscalatedAt, ProviderCalls: len(c.Attempts), Webhooks: len(c.Events),
	}
}

// oneID parses a command that takes exactly one purchase id, with its
// flags before or after it.
func oneID(e *env, name string, args []string, extra func(fs *flag.FlagSet)) (string, error) {
	rest, err := e.parse(name, args, extra)
	if err != nil {
		return "", err
	}
	if len(rest) != 1 {
		return "", fmt.Errorf("%w: want exactly one purchase id, got %d arguments %q", errUsage, len(rest), rest)
	}
	return rest[0], nil
}

func noPurchase(id string) error { return fmt.Errorf("no purchase with id %q", id) }

// requireSharedProvider refuses an operator action that asks the provider
// when the provider is the in-process fake: it is created empty for this
// command, so it knows nothing of the charges the worker made, and a
// replayed create would even "charge" in its empty ledger.
func requireSharedProvider(e *env, what string) error {
	if name := e.settings.str("provider"); name != "fake" {
		return nil
	}
	return fmt.Errorf("%w: %s asks the provider, and the in-process fake provider (--provider fake, the default) "+
		"knows no charges made by other processes; use --provider stripe with --stripe-api-base pointing at "+
		"`payrecon fakeprovider` or Stripe", errUsage, what)
}

// readOpen reads a purchase an operator action would change, refusing an
// unknown id and a purchase already final.
func readOpen(ctx context.Context, svc *reconcile.Service, id, what string) (reconcile.Detail, error) {
	d, err := svc.Purchase(ctx, id)
	if errors.Is(err, reconcile.ErrNotFound) {
		return d, noPurchase(id)
	}
	if err != nil {
		return d, err
	}
	if p := d.Purchase; p.State.Terminal() {
		msg := fmt.Sprintf("%s refused: %s is already %s, and an operator cannot change a final state; nothing changed", what, id, p.State)
		if p.Escalated() {
			msg += fmt.Sprintf(" (to take it off the operator list, record what was done: payrecon ops note %s --close --text …)", id)
		}
		return d, errors.New(msg)
	}
	return d, nil
}

func runOpsShow(ctx context.Context, e *env, args []string) error {
	id, err := oneID(e, "ops show", args, nil)
	if err != nil {
		return err
	}
	svc, cleanup, err := newService(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	c, err := svc.Case(ctx, id)
	if errors.Is(err, reconcile.ErrNotFound) {
		return noPurchase(id)
	}
	if err != nil {
		return err
	}
	printDetail(e, c.Detail)
	fmt.Fprintln(e.stdout, "\nwebhooks:")
	for _, ev := range c.Events {
		fmt.Fprintf(e.stdout, "  %s  %s  %s  %s\n", stamp(ev.ReceivedAt), ev.EventID, ev.Type, ev.Outcome)
	}
	fmt.Fprintln(e.stdout, "\noperator actions:")
	for _, a := range c.Actions {
		fmt.Fprintf(e.stdout, "  %s  %s by %s: %s  %s\n", stamp(a.At), a.Action, a.Operator, a.Did, a.Evidence)
	}
	return nil
}

func runOpsRecheck(ctx context.Context, e *env, args []string) error {
	operator := defaultOperator()
	id, err := oneID(e, "ops recheck", args, func(fs *flag.FlagSet) {
		fs.StringVar(&operator, "operator", operator, "your name, for the audit")
	})
	if err != nil {
		return err
	}
	svc, cleanup, err := newService(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	if _, err := readOpen(ctx, svc, id, "ops recheck"); err != nil {
		return err
	}
	if err := requireSharedProvider(e, "ops recheck"); err != nil {
		return err
	}
	p, err := svc.Recheck(ctx, id, operator)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s is %s\n", p.ID, p.State)
	return nil
}

func runOpsResolve(ctx context.Context, e *env, args []string) error {
	var succeeded, declined, yes bool
	var evidence string
	operator := defaultOperator()
	id, err := oneID(e, "ops resolve", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&succeeded, "succeeded", false, "the charge succeeded")
		fs.BoolVar(&declined, "declined", false, "the charge was declined")
		fs.StringVar(&evidence, "evidence", "", "what the decision rests on (required)")
		fs.StringVar(&operator, "operator", operator, "your name, for the audit")
		fs.BoolVar(&yes, "yes", false, "do not ask for confirmation after showing the provider's view")
	})
	if err != nil {
		return err
	}
	if succeeded == declined {
		return fmt.Errorf("%w: give exactly one of --succeeded or --declined", errUsage)
	}
	if strings.TrimSpace(evidence) == "" {
		return fmt.Errorf("%w: --evidence is required: say what the decision rests on", errUsage)
	}
	to := statemachine.Succeeded
	if declined {
		to = statemachine.Declined
	}
	svc, cleanup, err := newService(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	d, err := readOpen(ctx, svc, id, "ops resolve")
	if err != nil {
		return err
	}
	if err := requireSharedProvider(e, "ops resolve (its live view)"); err != nil {
		return err
	}
	view, err := svc.LiveView(ctx, id)
	if err != nil {
		return err
	}
	saw := reconcile.DescribeView(view)
	fmt.Fprintf(e.stdout, "purchase %s: %s, %d %s, version %d\nprovider now says: %s\n", id, d.Purchase.State,
		d.Purchase.Amount, d.Purchase.Currency, d.Purchase.Version, saw)
	if !yes {
		fmt.Fprintf(e.stdout, "resolve as %s with evidence %q? type yes: ", to, evidence)
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if strings.TrimSpace(line) != "yes" {
			return errors.New("not confirmed; nothing changed")
		}
	}
	p, err := svc.Resolve(ctx, reconcile.Resolution{
		PurchaseID: id, Operator: operator, To: to, Evidence: evidence, Saw: saw, Version: d.Purchase.Version,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s is now %s\n", p.ID, p.State)
	return nil
}

func runOpsNote(ctx context.Context, e *env, args []string) error {
	var text string
	var closeCase bool
	operator := defaultOperator()
	id, err := oneID(e, "ops note", args, func(fs *flag.FlagSet) {
		fs.StringVar(&text, "text", "", "the note (required)")
		fs.BoolVar(&closeCase, "close", false, "also take a final purchase (a contradiction) off the operator list")
		fs.StringVar(&operator, "operator", operator, "your name, for the audit")
	})
	if err != nil {
		return err
	}
	if strings.TrimSpace(text) == "" {
		return fmt.Errorf("%w: --text is required: the note itself", errUsage)
	}
	svc, cleanup, err := newService(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := svc.Note(ctx, id, operator, text, closeCase); errors.Is(err, reconcile.ErrNotFound) {
		return noPurchase(id)
	} else if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "noted")
	return nil
}
