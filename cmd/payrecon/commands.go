package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/budget"
	"github.com/payrecon/payrecon/statemachine"
)

func runMigrate(ctx context.Context, e *env, args []string) error {
	rest, err := e.parse("migrate", args, nil)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageError(fmt.Errorf("unexpected arguments %q: migrate takes only flags", rest))
	}
	st, err := openStoreFor(ctx, e, storeOptions{migrate: false})
	if err != nil {
		return err
	}
	defer st.Close()
	before, latest, err := st.version(ctx)
	if err != nil {
		return err
	}
	if before > latest {
		return fmt.Errorf("the %s schema is at version %d, newer than this binary's %d: run a newer payrecon", st.kind, before, latest)
	}
	if err := st.migrate(ctx); err != nil {
		return err
	}
	after, _, err := st.version(ctx)
	if err != nil {
		return err
	}
	if after == before {
		fmt.Fprintf(e.stdout, "already at version %d (%s)\n", after, st.kind)
		return nil
	}
	fmt.Fprintf(e.stdout, "migrated from version %d to %d (%s)\n", before, after, st.kind)
	return nil
}

// newService opens the store, checks that it is migrated, and builds the
// provider and the reconcile service from the settings: for the commands
// that ask the provider (worker, serve, ops recheck and resolve, audit).
func newService(ctx context.Context, e *env) (*reconcile.Service, func(), error) {
	return newObservedService(ctx, e, nil)
}

// newObservedService is newService with obs told about the protocol's
// work (nil for none).
func newObservedService(ctx context.Context, e *env, obs reconcile.Observer) (*reconcile.Service, func(), error) {
	cfg, err := e.settings.reconcileConfig()
	if err != nil {
		return nil, nil, usageError(err)
	}
	cfg.Logger, cfg.Observer = e.log, obs
	p, err := newProvider(e)
	if err != nil {
		return nil, nil, err
	}
	live, err := liveProvider(e)
	if err != nil {
		return nil, nil, usageError(err)
	}
	bcfg, shared, err := e.settings.budgetConfig(live)
	if err != nil {
		return nil, nil, usageError(err)
	}
	if bo, ok := obs.(budget.Observer); ok {
		bcfg.Observer = bo
	}
	bcfg.Now = cfg.Now
	return serviceOverBudget(ctx, e, p, cfg, bcfg, shared)
}

// liveProvider reports whether the provider is Stripe with a live-mode
// key, whose documented rate limits are the budget's defaults.
func liveProvider(e *env) (bool, error) {
	if e.settings.str("provider") != "stripe" {
		return false, nil
	}
	key, err := e.settings.secret("stripe-secret-key")
	if err != nil {
		return false, err
	}
	return budget.LiveKey(key), nil
}

// newBooks is newService for the commands that only read or write the
// books and never ask the provider (purchase create and show, refund
// create and show, ops list, show, note, findings and close-finding): it builds no provider, so
// they need none of its settings or secrets and log nothing about one.
// The service's provider refuses every call.
func newBooks(ctx context.Context, e *env) (*reconcile.Service, func(), error) {
	cfg, err := e.settings.reconcileConfig()
	if err != nil {
		return nil, nil, usageError(err)
	}
	cfg.Logger = e.log
	return serviceOver(ctx, e, noProvider{}, cfg)
}

func serviceOver(ctx context.Context, e *env, p provider.Provider, cfg reconcile.Config) (*reconcile.Service, func(), error) {
	return serviceOverBudget(ctx, e, p, cfg, budget.Config{}, false)
}

// serviceOverBudget is serviceOver with, when shared, calls waiting for
// the provider account's rate budget kept in the store (bcfg), and each
// connected account's for its own calls (budget.Accounts: bcfg's, or the
// limits --accounts declares).
func serviceOverBudget(ctx context.Context, e *env, p provider.Provider, cfg reconcile.Config, bcfg budget.Config, shared bool) (*reconcile.Service, func(), error) {
	st, err := openStore(ctx, e, true)
	if err != nil {
		return nil, nil, err
	}
	if bs, ok := st.Store.(budget.Store); ok && shared {
		b, err := budget.New(bs, bcfg)
		if err != nil {
			st.Close()
			return nil, nil, usageError(err)
		}
		cfg.Budget = b
		accounts, err := budget.NewAccounts(bs, bcfg, e.settings.accountLimits())
		if err != nil {
			st.Close()
			return nil, nil, usageError(err)
		}
		cfg.AccountBudgets = accounts
	}
	svc, err := reconcile.New(st.Store, p, cfg)
	if err != nil {
		st.Close()
		return nil, nil, usageError(err)
	}
	return svc, func() { st.Close() }, nil
}

// noProvider is the provider of a command that never asks one.
type noProvider struct{}

// ForAccount is the books' provider for every account: none asks it.
func (noProvider) ForAccount(string) provider.Provider { return noProvider{} }

var errNoProvider = errors.New("this command does not ask the provider")

func (noProvider) Create(context.Context, provider.CreateRequest) (provider.Result, error) {
	return provider.Result{}, errNoProvider
}
func (noProvider) Status(context.Context, string) (provider.Result, error) {
	return provider.Result{}, errNoProvider
}
func (noProvider) Search(context.Context, string) (provider.Result, error) {
	return provider.Result{}, errNoProvider
}
func (noProvider) List(context.Context, provider.Window, provider.PageGate) ([]provider.Payment, error) {
	return nil, errNoProvider
}
func (noProvider) CreateRefund(context.Context, provider.RefundRequest) (provider.RefundResult, error) {
	return provider.RefundResult{}, errNoProvider
}
func (noProvider) GetRefund(context.Context, string) (provider.RefundResult, error) {
	return provider.RefundResult{}, errNoProvider
}
func (noProvider) ListRefunds(context.Context, string, provider.PageGate) ([]provider.RefundResult, error) {
	return nil, errNoProvider
}
func (noProvider) ListRefundsCreated(context.Context, provider.Window, provider.PageGate) ([]provider.RefundResult, error) {
	return nil, errNoProvider
}
func (noProvider) ListDisputes(context.Context, provider.Window, provider.PageGate) ([]provider.Dispute, error) {
	return nil, errNoProvider
}
func (noProvider) ListEvents(context.Context, provider.EventQuery) (provider.EventPage, error) {
	return provider.EventPage{}, errNoProvider
}

func runPurchase(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageError(errors.New("want `purchase create` or `purchase show ID`"))
	}
	switch args[0] {
	case "create":
		return runPurchaseCreate(ctx, e, args[1:])
	case "show":
		return runPurchaseShow(ctx, e, args[1:])
	case "-h", "-help", "--help":
		e.printGroupHelp("purchase")
		return flag.ErrHelp
	default:
		return usageError(fmt.Errorf("unknown purchase subcommand %q: want create or show", args[0]))
	}
}

func runPurchaseCreate(ctx context.Context, e *env, args []string) error {
	var np reconcile.NewPurchase
	var amount string
	rest, err := e.parse("purchase create", args, func(fs *flag.FlagSet) {
		fs.StringVar(&np.Customer, "customer", "", "customer reference (required)")
		fs.StringVar(&amount, "amount", "", "`AMOUNT` in minor units, e.g. 300 for 3.00 (required)")
		fs.StringVar(&np.Currency, "currency", "", "ISO 4217 currency code, e.g. usd (required)")
		fs.StringVar(&np.Description, "description", "", "what is bought")
		fs.StringVar(&np.Reference, "reference", "", "optional business reference, unique per customer")
		fs.StringVar(&np.PaymentMethod, "payment-method", "", "provider payment method (default pm_card_visa, Stripe's test card)")
		fs.StringVar(&np.Account, "account", "", "the connected account (acct_…) to charge on behalf of; default the platform's own")
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageError(fmt.Errorf("unexpected arguments %q", rest))
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"--amount", amount}, {"--currency", np.Currency}, {"--customer", np.Customer}} {
		if strings.TrimSpace(f.v) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return usageError(fmt.Errorf("%s required", strings.Join(missing, ", ")))
	}
	if _, err := fmt.Sscan(amount, &np.Amount); err != nil || fmt.Sprint(np.Amount) != strings.TrimPrefix(amount, "+") {
		return usageError(fmt.Errorf("--amount %q: want a whole number of minor units, e.g. 300 for 3.00", amount))
	}
	svc, cleanup, err := newBooks(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	p, err := svc.CreatePurchase(ctx, np)
	if errors.Is(err, reconcile.ErrInvalid) {
		// A value the flags gave is refused: a bad command line.
		return usageError(err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, p.ID)
	return nil
}

func runPurchaseShow(ctx context.Context, e *env, args []string) error {
	var asJSON bool
	id, err := oneID(e, "purchase show", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	})
	if err != nil {
		return err
	}
	svc, cleanup, err := newBooks(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	d, err := svc.Purchase(ctx, id)
	if errors.Is(err, reconcile.ErrNotFound) {
		return noPurchase(id)
	}
	if err != nil {
		return err
	}
	refunds, err := svc.PurchaseRefunds(ctx, id)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			reconcile.Detail
			Refunds []reconcile.Refund
		}{d, refunds})
	}
	printDetail(e, d)
	printRefunds(e.stdout, refunds)
	return nil
}

func printDetail(e *env, d reconcile.Detail) {
	p := d.Purchase
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "purchase\t%s\n", p.ID)
	fmt.Fprintf(w, "state\t%s (version %d)\n", p.State, p.Version)
	fmt.Fprintf(w, "customer\t%s\n", p.Customer)
	if p.Reference != "" {
		fmt.Fprintf(w, "reference\t%s\n", p.Reference)
	}
	fmt.Fprintf(w, "amount\t%s (%d in minor units)\n", provider.FormatAmount(p.Amount, p.Currency), p.Amount)
	fmt.Fprintf(w, "description\t%s\n", p.Description)
	fmt.Fprintf(w, "provider key\t%s\n", dash(p.ProviderKey))
	fmt.Fprintf(w, "provider payment id\t%s\n", dash(p.ProviderPaymentID))
	fmt.Fprintf(w, "created\t%s\n", stamp(p.CreatedAt))
	if !p.UncertainSince.IsZero() {
		fmt.Fprintf(w, "uncertain since\t%s\n", stamp(p.UncertainSince))
	}
	if p.Escalated() {
		fmt.Fprintf(w, "escalated\t%s (%s)\n", stamp(p.EscalatedAt), p.EscalationReason)
	}
	switch {
	case !d.Job.DoneAt.IsZero():
		fmt.Fprintf(w, "job\tdone at %s after %d runs\n", stamp(d.Job.DoneAt), d.Job.Checks)
	default:
		fmt.Fprintf(w, "job\tnext run %s, %d runs so far\n", stamp(d.Job.RunAt), d.Job.Checks)
	}
	w.Flush()
	printTransitions(e.stdout, d.Transitions)
	printAttempts(e.stdout, d.Attempts, "payment")
}

// printTransitions writes a purchase's or a refund's transitions.
func printTransitions(out io.Writer, ts []reconcile.TransitionRecord) {
	fmt.Fprintln(out, "\ntransitions:")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, t := range ts {
		fmt.Fprintf(w, "  %s\t%s → %s\t%s\tby %s (lease %d)\t%s\n", stamp(t.At), t.From, t.To, t.Cause, t.Actor, t.LeaseToken, t.Evidence)
	}
	w.Flush()
}

// printAttempts writes a purchase's or a refund's provider calls; object
// labels the provider object an answer names ("payment" for a purchase's,
// "refund" for a refund's).
func printAttempts(out io.Writer, as []reconcile.Attempt, object string) {
	fmt.Fprintln(out, "\nprovider calls:")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, a := range as {
		applied := "applied"
		switch {
		case a.Derived:
			applied = "no answer recorded"
		case !a.Applied:
			applied = "not applied"
		}
		extra := a.Note
		if a.Error != "" {
			extra = strings.TrimSpace("error: " + a.Error + " " + extra)
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\tstatus=%s\t%s=%s\t%s\t%s\t%s\n",
			stamp(a.At), a.Op, a.Outcome, dash(a.Status), object, dash(a.PaymentID), a.Latency.Round(time.Millisecond), applied, extra)
	}
	w.Flush()
}

// runStatemachine prints the purchase's machine, or the refund's with
// --refund, or the dispute's with --dispute: its moves, one a line, or
// with --mermaid the diagram the README (the purchase's) and
// docs/protocol.md (the refund's and the dispute's) carry.
func runStatemachine(ctx context.Context, e *env, args []string) error {
	var mermaid, refund, dispute bool
	rest, err := e.parse("statemachine", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&mermaid, "mermaid", false, "print a Mermaid state diagram")
		fs.BoolVar(&refund, "refund", false, "the refund's machine instead of the purchase's")
		fs.BoolVar(&dispute, "dispute", false, "the dispute's machine instead of the purchase's")
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageError(fmt.Errorf("unexpected arguments %q: statemachine takes only --mermaid, --refund and --dispute", rest))
	}
	m := statemachine.Purchase
	switch {
	case refund && dispute:
		return usageError(errors.New("--refund and --dispute name two machines: give one"))
	case refund:
		m = statemachine.Refund
	case dispute:
		m = statemachine.Dispute
	}
	if mermaid {
		fmt.Fprint(e.stdout, m.Mermaid())
		return nil
	}
	for _, p := range m.Transitions() {
		fmt.Fprintln(e.stdout, p)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
