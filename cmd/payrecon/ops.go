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
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
	"github.com/payrecon/payrecon/statemachine"
)

// registerOps serves the operator pages when an ops token is set.
func (e *env) registerOps(a *app) error {
	token, err := e.settings.secret("ops-token")
	if err != nil {
		return usageError(err)
	}
	if token == "" {
		e.log.Warn("--ops-token / PAYRECON_OPS_TOKEN is not set: the operator pages (/ops) are not served")
		return nil
	}
	apiTokens, err := e.settings.secret("api-token")
	if err != nil {
		return usageError(err)
	}
	for _, c := range strings.Split(apiTokens, ",") {
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
		return fmt.Errorf("%w: want ops list | show ID | recheck ID | resolve ID | note ID | findings | close-finding ID | refund-charge ID | retry-event ID", errUsage)
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help":
		e.printGroupHelp("ops")
		return flag.ErrHelp
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
	case "findings":
		return runOpsFindings(ctx, e, args)
	case "close-finding":
		return runOpsCloseFinding(ctx, e, args)
	case "refund-charge":
		return runOpsRefundCharge(ctx, e, args)
	case "retry-event":
		return runOpsRetryEvent(ctx, e, args)
	default:
		return fmt.Errorf("%w: unknown ops subcommand %q: want list, show, recheck, resolve, note, findings, close-finding, refund-charge or retry-event", errUsage, sub)
	}
}

// defaultOperator names the operator from the login user.
func defaultOperator() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// operatorFlag registers --operator, whose default, the login user, is
// taken after parsing (the help does not show whose machine it ran on).
func operatorFlag(fs *flag.FlagSet, operator *string) {
	fs.StringVar(operator, "operator", "", "your name, for the audit (default: the login user)")
}

// orLogin returns operator, or the login user when it is empty.
func orLogin(operator string) string {
	if strings.TrimSpace(operator) == "" {
		return defaultOperator()
	}
	return operator
}

// accountFlag registers --account, the operator lists' account filter.
func accountFlag(fs *flag.FlagSet, account *string) {
	fs.StringVar(account, "account", "", `list only the rows of this provider account: "platform" for the platform's own, or a connected account acct_… (default: every account)`)
}

// parseAccount parses the value of --account; a malformed account is a
// usage error.
func parseAccount(account string) (reconcile.AccountFilter, error) {
	f, err := reconcile.ParseAccountFilter(account)
	if err != nil {
		return "", fmt.Errorf("%w: --account %q is not an account: want \"platform\" for the platform's own, or a connected account acct_ followed by letters and digits", errUsage, account)
	}
	return f, nil
}

func runOpsList(ctx context.Context, e *env, args []string) error {
	var asJSON bool
	var accountArg string
	if _, err := e.parse("ops list", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print JSON, for scripts")
		accountFlag(fs, &accountArg)
	}); err != nil {
		return err
	}
	account, err := parseAccount(accountArg)
	if err != nil {
		return err
	}
	svc, cleanup, err := newBooks(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	cases, err := svc.Escalations(ctx, account)
	if err != nil {
		return err
	}
	refunds, err := svc.EscalatedRefunds(ctx, account)
	if err != nil {
		return err
	}
	findings, err := svc.Findings(ctx, account, false)
	if err != nil {
		return err
	}
	failed, backlog, err := svc.FailedEvents(ctx, 50)
	if err != nil {
		return err
	}
	disputes, now, err := svc.OpenDisputes(ctx, account)
	if err != nil {
		return err
	}
	if asJSON {
		out := opsListJSON{
			Account: string(account), Cases: make([]caseJSON, 0, len(cases)), Refunds: make([]refundCaseJSON, 0, len(refunds)),
			Findings: toFindingsJSON(findings), Inbox: toInboxJSON(failed, backlog),
			Disputes: toDisputesJSON(disputes, now), MoneyAtRisk: reconcile.MoneyAtRisk(findings, disputes),
		}
		for _, c := range cases {
			out.Cases = append(out.Cases, toCaseJSON(c))
		}
		for _, c := range refunds {
			out.Refunds = append(out.Refunds, toRefundCaseJSON(c))
		}
		return printJSON(e, out)
	}
	if len(cases) == 0 {
		fmt.Fprintln(e.stdout, "no escalated purchases")
	} else {
		w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "PURCHASE\tACCOUNT\tPAYMENT\tAMOUNT\tCUSTOMER\tSTATE\tAGE\tREASON\tCALLS")
		for _, c := range cases {
			p := c.Purchase
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", p.ID, reconcile.AccountLabel(p.Account), dash(p.ProviderPaymentID), provider.FormatAmount(p.Amount, p.Currency),
				p.Customer, p.State, c.Age.Round(time.Second), p.EscalationReason, len(c.Attempts))
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(e.stdout)
	if err := printEscalatedRefunds(e, refunds); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout)
	if err := printInbox(e, failed, backlog); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout)
	if err := printOpenDisputes(e.stdout, disputes, now); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout)
	fmt.Fprintf(e.stdout, "money at risk (open findings and open disputes): %s\n", strings.Join(moneyAtRisk(findings, disputes), ", "))
	if len(findings) == 0 {
		fmt.Fprintln(e.stdout, "no open audit findings")
		return nil
	}
	fmt.Fprintf(e.stdout, "open audit findings (%d; close each with `payrecon ops close-finding ID --note …` once handled):\n", len(findings))
	return printFindings(e, findings)
}

// opsListJSON is `ops list --json`: the escalated cases and, beside them,
// the escalated refunds, the open audit findings, the webhook inbox, the
// open disputes (soonest evidence due first) and the money at risk, of
// the account --account selects (Account, "" for every account; the
// webhook inbox is whole).
type opsListJSON struct {
	Account     string            `json:"account,omitempty"`
	Cases       []caseJSON        `json:"cases"`
	Refunds     []refundCaseJSON  `json:"refunds"`
	Findings    []findingJSON     `json:"findings"`
	Inbox       inboxJSON         `json:"webhook_inbox"`
	Disputes    []disputeJSON     `json:"disputes"`
	MoneyAtRisk []reconcile.Money `json:"money_at_risk"`
}

// inboxJSON is the webhook inbox's backlog and the events the applier
// gave up on, most recent first.
type inboxJSON struct {
	Pending        int               `json:"pending"`
	Retrying       int               `json:"retrying"` // of the pending, those due again after a failure
	OldestReceived *time.Time        `json:"oldest_pending_received_at,omitempty"`
	Failed         int               `json:"failed"`
	FailedEvents   []failedEventJSON `json:"failed_events"`
}

type failedEventJSON struct {
	EventID    string    `json:"event_id"`
	Type       string    `json:"type"`
	PurchaseID string    `json:"purchase_id,omitempty"`
	Attempts   int       `json:"attempts"`
	LastError  string    `json:"last_error"`
	FailedAt   time.Time `json:"failed_at"`
}

func toInboxJSON(failed []reconcile.InboxEvent, b reconcile.InboxBacklog) inboxJSON {
	out := inboxJSON{Pending: b.Pending, Retrying: b.Retrying, Failed: b.Failed, FailedEvents: make([]failedEventJSON, 0, len(failed))}
	if !b.Oldest.IsZero() {
		out.OldestReceived = &b.Oldest
	}
	for _, ev := range failed {
		out.FailedEvents = append(out.FailedEvents, failedEventJSON{
			EventID: ev.EventID, Type: ev.Type, PurchaseID: ev.PurchaseID, Attempts: ev.Attempts, LastError: ev.LastError, FailedAt: ev.ProcessedAt,
		})
	}
	return out
}

// printInbox prints the webhook inbox's backlog and its failed events.
func printInbox(e *env, failed []reconcile.InboxEvent, b reconcile.InboxBacklog) error {
	line := "webhook inbox: every event received is applied"
	if b.Pending > 0 {
		line = fmt.Sprintf("webhook inbox: %d received and not yet applied, the oldest since %s", b.Pending, stamp(b.Oldest))
		if b.Retrying > 0 {
			line += fmt.Sprintf("; %d of them failed to apply and will be tried again", b.Retrying)
		}
	}
	fmt.Fprintln(e.stdout, line)
	if b.Failed == 0 {
		return nil
	}
	fmt.Fprintf(e.stdout, "webhook events the applier gave up on (%d; retry each with `payrecon ops retry-event ID` once its cause is fixed):\n", b.Failed)
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "EVENT\tTYPE\tPURCHASE\tTRIES\tFAILED\tLAST ERROR")
	for _, ev := range failed {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", ev.EventID, ev.Type, dash(ev.PurchaseID), ev.Attempts, stamp(ev.ProcessedAt), ev.LastError)
	}
	return w.Flush()
}

// findingJSON is the scripted view of an audit finding. Amount and
// currency are the provider's payment's: the money at risk.
type findingJSON struct {
	ID         int64      `json:"id"`
	Provider   string     `json:"provider"`
	Kind       string     `json:"kind"`
	PaymentID  string     `json:"payment_id"`
	PurchaseID string     `json:"purchase_id,omitempty"`
	Account    string     `json:"account,omitempty"` // its purchase's: "platform" or acct_…; none without a purchase
	Amount     int64      `json:"amount"`
	Currency   string     `json:"currency"`
	Status     string     `json:"status,omitempty"`
	Evidence   string     `json:"evidence"`
	FoundAt    time.Time  `json:"found_at"`
	Open       bool       `json:"open"`
	ClosedAt   *time.Time `json:"closed_at,omitempty"`
	ClosedBy   string     `json:"closed_by,omitempty"`
	CloseNote  string     `json:"close_note,omitempty"`
}

func toFindingsJSON(fs []reconcile.Finding) []findingJSON {
	out := make([]findingJSON, 0, len(fs))
	for _, f := range fs {
		j := findingJSON{
			ID: f.ID, Provider: f.Provider, Kind: string(f.Kind), PaymentID: f.PaymentID, PurchaseID: f.PurchaseID,
			Account: f.AccountLabel(), Amount: f.Amount, Currency: f.Currency, Status: f.Status, Evidence: f.Evidence, FoundAt: f.FoundAt,
			Open: f.Open(), ClosedBy: f.ClosedBy, CloseNote: f.CloseNote,
		}
		if !f.Open() {
			at := f.ClosedAt
			j.ClosedAt = &at
		}
		out = append(out, j)
	}
	return out
}

// printFindings writes one line per finding.
func printFindings(e *env, fs []reconcile.Finding) error {
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "FINDING\tKIND\tPAYMENT\tPURCHASE\tACCOUNT\tAMOUNT\tSTATUS\tFOUND\tEVIDENCE")
	for _, f := range fs {
		evidence := f.Evidence
		if !f.Open() {
			evidence = fmt.Sprintf("closed %s by %s: %s | %s", stamp(f.ClosedAt), f.ClosedBy, f.CloseNote, evidence)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.ID, f.Kind, f.PaymentID, dash(f.PurchaseID), dash(f.AccountLabel()),
			provider.FormatAmount(f.Amount, f.Currency), dash(f.Status), stamp(f.FoundAt), evidence)
	}
	return w.Flush()
}

// moneyAtRisk is reconcile.MoneyAtRisk written for people ("12.50
// EUR"), or "none".
func moneyAtRisk(fs []reconcile.Finding, ds []reconcile.Dispute) []string {
	var out []string
	for _, m := range reconcile.MoneyAtRisk(fs, ds) {
		out = append(out, m.String())
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

func printJSON(e *env, v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// caseJSON is the scripted view of an escalated case.
type caseJSON struct {
	PurchaseID        string    `json:"purchase_id"`
	Account           string    `json:"account"` // "platform" or acct_…
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
		PurchaseID: p.ID, Account: reconcile.AccountLabel(p.Account), ProviderPaymentID: p.ProviderPaymentID, Amount: p.Amount, Currency: p.Currency,
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
	svc, cleanup, err := newBooks(ctx, e)
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
	refunds, err := svc.PurchaseRefunds(ctx, id)
	if err != nil {
		return err
	}
	printDetail(e, c.Detail)
	printRefunds(e.stdout, refunds)
	if len(c.Disputes) > 0 {
		printDisputeRecords(e.stdout, c.Disputes, c.Now)
	}
	fmt.Fprintln(e.stdout, "\nwebhooks:")
	for _, ev := range c.Events {
		fmt.Fprintf(e.stdout, "  %s  %s  %s  %s\n", stamp(ev.ReceivedAt), ev.EventID, ev.Type, ev.OutcomeText())
	}
	fmt.Fprintln(e.stdout, "\naudit findings:")
	for _, f := range c.Findings {
		state := "open"
		if !f.Open() {
			state = fmt.Sprintf("closed %s by %s: %s", stamp(f.ClosedAt), f.ClosedBy, f.CloseNote)
		}
		fmt.Fprintf(e.stdout, "  %s  #%d %s  payment %s  %s  %s  %s\n", stamp(f.FoundAt), f.ID, f.Kind, f.PaymentID,
			provider.FormatAmount(f.Amount, f.Currency), state, f.Evidence)
	}
	fmt.Fprintln(e.stdout, "\noperator actions:")
	for _, a := range c.Actions {
		line := fmt.Sprintf("  %s  %s by %s: %s  %s", stamp(a.At), a.Action, a.Operator, a.Did, a.Evidence)
		if a.Saw != "" {
			line += "  (provider showed: " + a.Saw + ")"
		}
		fmt.Fprintln(e.stdout, line)
	}
	return nil
}

func runOpsRecheck(ctx context.Context, e *env, args []string) error {
	var operator string
	id, err := oneID(e, "ops recheck", args, func(fs *flag.FlagSet) {
		operatorFlag(fs, &operator)
	})
	if err != nil {
		return err
	}
	operator = orLogin(operator)
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
	var evidence, override string
	var operator string
	id, err := oneID(e, "ops resolve", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&succeeded, "succeeded", false, "the charge succeeded")
		fs.BoolVar(&declined, "declined", false, "the charge was declined")
		fs.StringVar(&evidence, "evidence", "", "what the decision rests on (required)")
		operatorFlag(fs, &operator)
		fs.BoolVar(&yes, "yes", false, "do not ask for confirmation after showing the provider's view")
		fs.StringVar(&override, "override-provider", "", "REASON: resolve even though the provider's live view contradicts it (or, for --succeeded, shows no payment that took the money); the provider's answer and the reason are both recorded")
	})
	if err != nil {
		return err
	}
	operator = orLogin(operator)
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
	fmt.Fprintf(e.stdout, "purchase %s: %s, %s, version %d\nprovider now says: %s\n", id, d.Purchase.State,
		provider.FormatAmount(d.Purchase.Amount, d.Purchase.Currency), d.Purchase.Version, saw)
	override = strings.TrimSpace(override)
	if !yes {
		question := fmt.Sprintf("resolve as %s with evidence %q?", to, evidence)
		if override != "" {
			question = fmt.Sprintf("resolve as %s with evidence %q, overriding the provider because %q?", to, evidence, override)
		}
		fmt.Fprintf(e.stdout, "%s type yes: ", question)
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if strings.TrimSpace(line) != "yes" {
			return errors.New("not confirmed; nothing changed")
		}
	}
	// Resolve asks the provider again under the job's lease, records what
	// it said, and refuses if that contradicts the outcome.
	p, err := svc.Resolve(ctx, reconcile.Resolution{
		PurchaseID: id, Operator: operator, To: to, Evidence: evidence, Version: d.Purchase.Version,
		OverrideProvider: override,
	})
	if errors.Is(err, reconcile.ErrProviderDisagrees) {
		return providerDisagrees(ctx, svc, id, operator, saw, err)
	}
	if err != nil {
		return err
	}
	if override != "" {
		fmt.Fprintf(e.stdout, "%s is now %s (overriding the provider: %s)\n", p.ID, p.State, override)
		return nil
	}
	fmt.Fprintf(e.stdout, "%s is now %s\n", p.ID, p.State)
	return nil
}

// providerDisagrees explains a resolution the provider's live view
// refused: what the provider answered when Resolve asked it (as recorded
// in the purchase's provider calls; shown is the view printed before the
// confirmation, used if none is recorded), the judge's reason, and how to
// override.
func providerDisagrees(ctx context.Context, svc *reconcile.Service, id, operator, shown string, err error) error {
	answer := shown
	if c, cerr := svc.Case(ctx, id); cerr == nil {
		for i := len(c.Attempts) - 1; i >= 0; i-- {
			if a := c.Attempts[i]; a.Actor == "operator:"+strings.TrimSpace(operator) {
				answer = fmt.Sprintf("%s → %s status=%s payment=%s", a.Op, a.Outcome, dash(a.Status), dash(a.PaymentID))
				if a.Error != "" {
					answer += " error: " + a.Error
				}
				break
			}
		}
	}
	why := reconcile.DetailOf(err)
	if why == "" {
		why = err.Error()
	}
	return fmt.Errorf("ops resolve refused (%w): %s\n"+
		"  the provider answered: %s\n"+
		"  nothing changed. If you are sure the provider is wrong, run again with --override-provider \"REASON\" "+
		"(the provider's answer and your reason are both recorded)", reconcile.ErrProviderDisagrees, why, answer)
}

func runOpsFindings(ctx context.Context, e *env, args []string) error {
	var all, asJSON bool
	var accountArg string
	rest, err := e.parse("ops findings", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&all, "all", false, "closed findings too")
		fs.BoolVar(&asJSON, "json", false, "print JSON, for scripts")
		accountFlag(fs, &accountArg)
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: unexpected arguments %q: ops findings takes only --all, --account and --json", errUsage, rest)
	}
	account, err := parseAccount(accountArg)
	if err != nil {
		return err
	}
	svc, cleanup, err := newBooks(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	findings, err := svc.Findings(ctx, account, all)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(e, toFindingsJSON(findings))
	}
	if len(findings) == 0 {
		if all {
			fmt.Fprintln(e.stdout, "no audit findings")
		} else {
			fmt.Fprintln(e.stdout, "no open audit findings")
		}
		return nil
	}
	return printFindings(e, findings)
}

func runOpsCloseFinding(ctx context.Context, e *env, args []string) error {
	var note string
	var operator string
	rest, err := e.parse("ops close-finding", args, func(fs *flag.FlagSet) {
		fs.StringVar(&note, "note", "", "how the finding was handled, e.g. the refund's id (required)")
		operatorFlag(fs, &operator)
	})
	if err != nil {
		return err
	}
	operator = orLogin(operator)
	if len(rest) != 1 {
		return fmt.Errorf("%w: want exactly one finding id, got %d arguments %q", errUsage, len(rest), rest)
	}
	id, err := strconv.ParseInt(rest[0], 10, 64)
	if err != nil || id <= 0 {
		return fmt.Errorf("%w: finding id %q: want the number `payrecon ops findings` shows", errUsage, rest[0])
	}
	if strings.TrimSpace(note) == "" {
		return fmt.Errorf("%w: --note is required: say how the finding was handled", errUsage)
	}
	svc, cleanup, err := newBooks(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	f, err := svc.CloseFinding(ctx, id, operator, note)
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		return fmt.Errorf("no audit finding with id %d", id)
	case errors.Is(err, reconcile.ErrConflict):
		return fmt.Errorf("finding %d is already closed; nothing changed", id)
	case errors.Is(err, reconcile.ErrInvalid):
		return fmt.Errorf("%w: %w", errUsage, err)
	case err != nil:
		return err
	}
	fmt.Fprintf(e.stdout, "finding %d (%s, payment %s) closed by %s\n", f.ID, f.Kind, f.PaymentID, f.ClosedBy)
	if f.PurchaseID != "" {
		fmt.Fprintf(e.stdout, "purchase %s stays on the operator list until it is resolved or closed: payrecon ops show %s\n", f.PurchaseID, f.PurchaseID)
	}
	return nil
}

// runOpsRetryEvent puts a failed webhook event back in the inbox,
// pending, for the applier.
func runOpsRetryEvent(ctx context.Context, e *env, args []string) error {
	var operator string
	rest, err := e.parse("ops retry-event", args, func(fs *flag.FlagSet) { operatorFlag(fs, &operator) })
	if err != nil {
		return err
	}
	operator = orLogin(operator)
	if len(rest) != 1 || strings.TrimSpace(rest[0]) == "" {
		return fmt.Errorf("%w: want exactly one webhook event id (evt_…), got %d arguments %q", errUsage, len(rest), rest)
	}
	svc, cleanup, err := newBooks(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	switch err := svc.RetryFailedEvent(ctx, svc.Config().ProviderName, rest[0], operator); {
	case errors.Is(err, reconcile.ErrNotFound):
		return fmt.Errorf("no failed webhook event %s: %w", rest[0], err)
	case err != nil:
		return err
	}
	fmt.Fprintf(e.stdout, "webhook event %s is pending again; the applier of any serve or worker applies it next\n", rest[0])
	return nil
}

// runOpsRefundCharge is the operator's "refund this charge" from the
// command line: Service.RefundCharge on an open duplicate-charge finding.
func runOpsRefundCharge(ctx context.Context, e *env, args []string) error {
	var evidence, operator string
	var amount int64
	rest, err := e.parse("ops refund-charge", args, func(fs *flag.FlagSet) {
		fs.StringVar(&evidence, "evidence", "", "what shows the charge is a duplicate (required)")
		fs.Int64Var(&amount, "amount", 0, "minor units to refund (default: the charge's whole amount)")
		operatorFlag(fs, &operator)
	})
	if err != nil {
		return err
	}
	operator = orLogin(operator)
	if len(rest) != 1 {
		return fmt.Errorf("%w: want exactly one finding id, got %d arguments %q", errUsage, len(rest), rest)
	}
	id, err := strconv.ParseInt(rest[0], 10, 64)
	if err != nil || id <= 0 {
		return fmt.Errorf("%w: finding id %q: want the number `payrecon ops findings` shows", errUsage, rest[0])
	}
	if amount < 0 {
		return fmt.Errorf("%w: --amount %d: want a positive number of minor units", errUsage, amount)
	}
	if strings.TrimSpace(evidence) == "" {
		return fmt.Errorf("%w: --evidence is required: say what shows the charge is a duplicate", errUsage)
	}
	svc, cleanup, err := newBooks(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	r, err := svc.RefundCharge(ctx, id, amount, operator, evidence)
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		return fmt.Errorf("no audit finding with id %d", id)
	case errors.Is(err, reconcile.ErrConflict):
		return fmt.Errorf("finding %d is closed; nothing was refunded", id)
	case errors.Is(err, reconcile.ErrDuplicate):
		return fmt.Errorf("nothing refunded: %s", reconcile.DetailOf(err))
	case errors.Is(err, reconcile.ErrInvalid), errors.Is(err, reconcile.ErrRefundExceeds), errors.Is(err, reconcile.ErrNotRefundable):
		return fmt.Errorf("%w: %w", errUsage, err)
	case err != nil:
		return err
	}
	fmt.Fprintf(e.stdout, "refund %s of %s from payment %s created (state %s); the worker sends it: payrecon refund show %s\n",
		r.ID, provider.FormatAmount(r.Amount, r.Currency), r.PaymentID, r.State, r.ID)
	return nil
}

func runOpsNote(ctx context.Context, e *env, args []string) error {
	var text string
	var closeCase bool
	var operator string
	id, err := oneID(e, "ops note", args, func(fs *flag.FlagSet) {
		fs.StringVar(&text, "text", "", "the note (required)")
		fs.BoolVar(&closeCase, "close", false, "also take a final purchase (a contradiction) off the operator list")
		operatorFlag(fs, &operator)
	})
	if err != nil {
		return err
	}
	operator = orLogin(operator)
	if strings.TrimSpace(text) == "" {
		return fmt.Errorf("%w: --text is required: the note itself", errUsage)
	}
	svc, cleanup, err := newBooks(ctx, e)
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
