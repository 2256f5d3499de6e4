// Command payrecon is the payment reconciliation worker: it takes each
// purchase from created to succeeded or declined through leased jobs,
// reconciling every outcome the provider left unknown.
//
// Run `payrecon help` for the commands and settings.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/cmd/payrecon/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runMain(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// env carries what a command needs: its output streams and the settings.
type env struct {
	stdout, stderr io.Writer
	settings       *settings
	log            *slog.Logger
	// tracer, when set, sees every statement and batch of every Postgres
	// store the command opens: the bench counts round trips with it.
	tracer pgx.QueryTracer
	// parsed is the name of the last command whose flags were parsed: a
	// subcommand's ("purchase create"), for its usage errors.
	parsed string
}

// command is a command, or a subcommand ("ops list"). run gets the
// arguments after its name; a subcommand is run by its parent's run.
type command struct {
	name     string
	args     string // what follows the name in its usage line
	summary  string
	about    string   // the help's description, when it says more than the summary
	settings []string // the settings it uses, for its help
	run      func(ctx context.Context, e *env, args []string) error
}

// The settings the commands use, by purpose, for their help. Every
// command accepts every setting.
var (
	basicSettings    = []string{"config", "log-level", "log-format"}
	storeSettings    = []string{"database-url", "database-url-file", "sqlite-synchronous"}
	protocolSettings = []string{"worker-id", "lease-duration", "provider-timeout", "backoff", "max-attempts", "max-uncertain-age",
		"escalated-interval", "key-retention", "key-replay-margin", "batch-size", "concurrency", "apply-window", "poll-interval", "shutdown-grace",
		"max-amount", "audit-overlap", "audit-settle", "event-sweep-overlap", "event-sweep-first-window"}
	providerSettings = []string{"provider", "fake-faults", "stripe-api-base", "stripe-secret-key", "stripe-secret-key-file",
		"accounts", "undeclared-accounts", "budget", "budget-account", "budget-global", "budget-create", "budget-retrieve", "budget-search", "budget-list", "budget-refund"}
	httpSettings = []string{"addr", "metrics-addr", "metrics-token", "metrics-token-file", "worker", "webhooks", "webhook-tolerance", "stripe-webhook-secret", "stripe-webhook-secret-file", "stripe-connect-webhook-secret", "stripe-connect-webhook-secret-file",
		"api", "api-token", "api-token-file", "ops-token", "ops-token-file", "group-commit", "group-commit-max", "group-commit-leaders"}
	sweepSettings = []string{"sweep-rescue", "sweep-escalate", "sweep-gauges", "sweep-unmatched", "sweep-retention", "sweep-audit", "sweep-events",
		"inbox-retention", "idempotency-key-retention", "outbox-retry-window", "outbox-retention"}
	// readSettings are those of a command that reads or writes the books
	// and never asks the provider.
	readSettings = join(basicSettings, storeSettings)
	// askSettings are those of a command that asks the provider.
	askSettings = join(basicSettings, storeSettings, providerSettings, []string{"provider-timeout", "lease-duration", "worker-id"})
)

func join(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		for _, name := range l {
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// commands are payrecon's commands, in the order of the help.
func commands() []command {
	return []command{
		{name: "demo", args: "[--keep] [--json] [--timeout DURATION]",
			summary:  "a tour of every failure the protocol survives, in a minute",
			about:    "A one-command tour: every failure the protocol survives, played against a fake Stripe over HTTP on a simulated clock, then the audit from the provider's side. It uses a temporary SQLite file unless --database-url is set.",
			settings: join(basicSettings, storeSettings), run: runDemo},
		{name: "migrate", summary: "apply the database schema; says from which version to which",
			about:    "Applies every pending migration of the database schema and says what it did: \"migrated from version N to M\" or \"already at version M\". A Postgres database must be migrated with it before any other command runs against it; a SQLite file is migrated on first use by every command.",
			settings: readSettings, run: runMigrate},
		{name: "serve", summary: "the all-in-one process: HTTP (API, webhooks, /ops), the worker",
			about: "The all-in-one process: HTTP on --addr (POST /webhooks/stripe, the purchase API, /healthz, /readyz, /metrics, /ops) plus the worker and its sweeps, until SIGTERM. " +
				"It is an alternative to worker, not a companion: it runs the worker itself (--worker=false turns it off, for an HTTP-only replica). " +
				"The purchase API needs --api-token (or --api=false), the ops pages --ops-token, and with --provider stripe the webhooks STRIPE_WEBHOOK_SECRET (or --webhooks=false).",
			settings: join(basicSettings, storeSettings, httpSettings, providerSettings, protocolSettings, sweepSettings), run: runServe},
		{name: "worker", summary: "the worker and its sweeps alone (HTTP: health checks, /metrics)",
			about: "Runs the reconcile worker and its sweeps until SIGTERM, with /healthz, /readyz and /metrics on --addr, which defaults to " + defaultWorkerAddr + " (serve's is " + defaultAddr + "), so that extra workers run beside serve on one machine. " +
				"Give each worker process its own --worker-id when the default (host-pid) is not unique.",
			settings: join(basicSettings, storeSettings, []string{"addr", "metrics-addr", "metrics-token", "metrics-token-file"}, providerSettings, protocolSettings, sweepSettings), run: runWorker},
		{name: "purchase", args: "create | show ID", summary: "purchase create | purchase show ID", run: runPurchase},
		{name: "purchase create", args: "--amount N --currency CODE --customer ID [--description TEXT] [--reference REF] [--payment-method PM] [--account acct_…]",
			summary:  "create a purchase and print its id; the worker charges it",
			settings: join(readSettings, []string{"max-amount", "accounts", "undeclared-accounts"}), run: runPurchaseCreate},
		{name: "purchase show", args: "ID [--json]", summary: "a purchase: its state, transitions, provider calls and refunds",
			settings: readSettings, run: runPurchaseShow},
		{name: "refund", args: "create PURCHASE | show ID", summary: "refund create PURCHASE | refund show ID", run: runRefund},
		{name: "refund create", args: "PURCHASE --amount N --reason TEXT",
			summary: "refund all or part of a succeeded purchase; prints the refund's id and state",
			about: "Stores a refund of --amount minor units of a succeeded purchase's payment, with its own id (ref_…), its own provider idempotency key and its job, and prints its id and state (created). " +
				"The worker sends it to the provider and reconciles it as it does a purchase: created, submitted, then succeeded or failed, or uncertain and reconciling until the provider's answer is known (payrecon refund show ID). " +
				"The purchase's refunds, pending ones included, may not add up to more than the amount paid. It never asks the provider itself. " +
				"Never create another refund for an uncertain one: it is reconciled under its own key.",
			settings: readSettings, run: runRefundCreate},
		{name: "refund show", args: "ID [--json]", summary: "a refund: its state, transitions, provider calls and operator actions",
			settings: readSettings, run: runRefundShow},
		{name: "ops", args: "list | show ID | recheck ID | resolve ID | note ID | findings | close-finding ID | refund-charge ID | retry-event ID",
			summary: "operator handoff: cases, findings, recheck, resolve, notes", run: runOps},
		{name: "ops list", args: "[--json]", summary: "the operator list: escalated purchases and refunds, open audit findings",
			settings: readSettings, run: runOpsList},
		{name: "ops show", args: "ID", summary: "one case: the purchase, its refunds, webhooks, findings and operator actions",
			settings: readSettings, run: runOpsShow},
		{name: "ops recheck", args: "ID [--operator NAME]", summary: "ask the provider now (needs --provider stripe)",
			settings: askSettings, run: runOpsRecheck},
		{name: "ops resolve", args: "ID (--succeeded | --declined) --evidence TEXT [--override-provider REASON] [--yes] [--operator NAME]",
			summary: "resolve a purchase by hand, after the provider's live view (needs --provider stripe)",
			about: "Resolves an escalated purchase to succeeded or declined. The provider's live view is fetched, shown and judged: a view that contradicts the resolution refuses it, " +
				"as does one that shows no payment that took the money for --succeeded, unless --override-provider gives the reason to go against it. The provider's answer is recorded with the action. Needs --provider stripe (Stripe, or a payrecon fakeprovider).",
			settings: askSettings, run: runOpsResolve},
		{name: "ops note", args: "ID --text TEXT [--close] [--operator NAME]", summary: "add a note to a case (--close takes a final one off the list)",
			settings: readSettings, run: runOpsNote},
		{name: "ops findings", args: "[--all] [--json]", summary: "the audit findings: open ones, or all",
			settings: readSettings, run: runOpsFindings},
		{name: "ops close-finding", args: "ID --note TEXT [--operator NAME]", summary: "close an audit finding once handled",
			settings: readSettings, run: runOpsCloseFinding},
		{name: "ops refund-charge", args: "ID --evidence TEXT [--amount N] [--operator NAME]",
			summary: "refund the duplicate charge an open audit finding names",
			about: "Refunds the payment of an open duplicate_charge finding (its amount unless --amount) through the refund process: a refund with its own id and key, sent and reconciled by the worker, recorded as your action with --evidence. " +
				"It is the one operator action that moves money; it never charges. Close the finding once the refund succeeded: payrecon ops close-finding ID --note \"refund ref_…\".",
			settings: readSettings, run: runOpsRefundCharge},
		{name: "ops retry-event", args: "EVENT_ID [--operator NAME]", summary: "put a webhook event the applier gave up on back in the inbox",
			about: "The applier tries a webhook event --inbox-max-attempts times before it leaves it to an operator (the /ops page lists them with their errors). " +
				"Once its cause is fixed, this makes it pending again, due at once, with your name on its error line; the applier of any serve or worker applies it next.",
			settings: readSettings, run: runOpsRetryEvent},
		{name: "subscriptions", args: "add NAME | list | remove NAME", summary: "the endpoints the outbox's events are delivered to", run: runSubscriptions},
		{name: "subscriptions add", args: "NAME --url URL [--secret-file FILE] [--types T,...]",
			summary: "add an endpoint: signed POSTs of the events it wants",
			about: "Stores a subscription: the relay (in serve and worker) POSTs every event committed from now on whose type it wants to --url, signed with HMAC-SHA256 over the timestamp and the body in the Payrecon-Signature header (the events package verifies it), " +
				"with Event-Id and Delivery-Attempt headers, at least once and in order per purchase, retried for --outbox-retry-window. The secret is read from --secret-file or " + subscriptionSecretEnv + ", never from the command line.",
			settings: readSettings, run: runSubscriptionsAdd},
		{name: "subscriptions list", args: "[--json]", summary: "the subscriptions (secrets not shown)",
			settings: readSettings, run: runSubscriptionsList},
		{name: "subscriptions remove", args: "NAME", summary: "remove a subscription and its pending and dead deliveries",
			settings: readSettings, run: runSubscriptionsRemove},
		{name: "events", args: "replay --since T [--subscription S]", summary: "events replay: send the outbox's events again", run: runEvents},
		{name: "events replay", args: "--since T [--subscription S] [--dead-only]",
			summary: "send again the events committed since T, with the same ids and bytes",
			about: "Makes the deliveries of the events committed since --since pending again (done and dead ones; with --dead-only, dead ones only), to every subscription or to --subscription, and writes the missing deliveries for subscriptions added since. " +
				"The relay sends the same events, with the same ids and bytes, in order per purchase; a receiver that saw one already answers it as a duplicate. Events older than the outbox retention are gone.",
			settings: readSettings, run: runEventsReplay},
		{name: "audit", args: "--since T [--until T]",
			summary:  "audit --since T: match the provider's payments to the books",
			about:    "The audit from the provider's side, by hand: lists the payments the provider created in [--since, --until) and matches each to one purchase; what does not match is stored as a finding on the operator list. It moves no money. Needs --provider stripe (Stripe, or a payrecon fakeprovider).",
			settings: askSettings, run: runAudit},
		{name: "recover", args: "--restored-at T | --status",
			summary:  "after restoring an old backup: hold creates, re-link charges, report lost purchases",
			about:    recoverAbout,
			settings: join(askSettings, []string{"key-retention"}), run: runRecover},
		{name: "bench", args: "burn-down | webhooks | api", summary: "capacity figures, like pgbench: the worker, webhooks, the purchase API", run: runBench},
		{name: "bench burn-down", args: "[--n N] [--yes] [--json]",
			summary: "load N purchases, then time the worker taking them all to a final state",
			about: "Migrates the database if needed and loads N purchases through Service.CreatePurchase, " + fmt.Sprint(bench.Loaders) + " at a time (timed apart), " +
				"then runs the worker as `payrecon worker` does (Service.Work, with --concurrency, --batch-size and the other worker settings) against the in-process fake provider, " +
				"with no faults and no latency, until every purchase is final. It reports purchases/s; round trips, commits, rollbacks and statements per purchase " +
				"(Postgres: the store's pgx tracer, pg_stat_database, and pg_stat_statements when the server loads it, the extension created in the database if missing); " +
				"the bench process's RSS during the burn-down; the CPU time per purchase" + benchCPUAbout + "; the latency created → final and submitted → final (p50, p90, p99, max, a histogram); " +
				"and the fake's ledger, which must hold exactly one charge per purchase." + benchSafety,
			settings: join(basicSettings, storeSettings, protocolSettings), run: runBenchBurnDown},
		{name: "bench webhooks", args: "[--n N] [--clients C] [--rate R] [--yes] [--json]",
			summary: "time signed Stripe webhooks through serve's endpoint, closed or open loop",
			about: "Sets up N purchases, not timed: created, then charged by the worker at the fake provider, which loses every reply, so that each is uncertain and its payment_intent.succeeded event pending. " +
				"Then it POSTs each event, signed with a secret of its own as Stripe and the fake sign, to POST /webhooks/stripe of serve's HTTP server (wired as serve wires it, on a loopback port): " +
				"a closed loop of --clients clients, or with --rate an open loop, each send scheduled on a fixed clock and its latency counted from its scheduled time. " +
				"Each event is applied: its purchase moves uncertain → reconciling → succeeded. " +
				"It reports events/s, the latency (p50, p90, p99, max, a histogram), each event's outcome, round trips, commits and statements per event (Postgres), the CPU time per event" + benchCPUAbout + ", and the fake's ledger." + benchSafety,
			settings: join(basicSettings, storeSettings, protocolSettings, []string{"webhook-tolerance", "group-commit", "group-commit-max", "group-commit-leaders"}), run: runBenchWebhooks},
		{name: "bench api", args: "[--n N] [--clients C] [--rate R] [--yes] [--json]",
			summary: "time POST /v1/purchases through serve's purchase API, closed or open loop",
			about: "POSTs N purchases, each with its own Idempotency-Key and a bearer token of the bench's own, to POST /v1/purchases of serve's HTTP server (wired as serve wires it, on a loopback port): " +
				"a closed loop of --clients clients, or with --rate an open loop, each send scheduled on a fixed clock and its latency counted from its scheduled time. " +
				"It reports requests/s, the latency (p50, p90, p99, max, a histogram), the answers, round trips, commits and statements per request (Postgres), and the CPU time per request" + benchCPUAbout + ". " +
				"Then, not timed, the worker takes the new purchases to a final state against the fake provider, so that the database holds final purchases only, and checks the fake's ledger." + benchSafety,
			settings: join(basicSettings, storeSettings, protocolSettings, []string{"group-commit", "group-commit-max", "group-commit-leaders"}), run: runBenchAPI},
		{name: "bench backlog", args: "[--n N] [--rate R] [--workers W] [--fresh] [--accounts K [--hot H] [--for D]]",
			summary: "drain a backlog of uncertain purchases after a provider outage, within the shared rate budget",
			about: "Makes N purchases uncertain while the in-process fake provider is in an outage (every call fails, outcome unknown), then lifts the outage: the fake enforces the budget's limits " +
				"(--budget-create and the others; test mode's by default: 25 creates/s, 25 in all) and answers 429 past them, W workers (services over the same database, each with its own view of the shared budget) " +
				"drain the backlog, and new purchases keep arriving at R a second (none with 0). With --fresh the backlog is N purchases created and never sent, with no outage: the workers' first creates drain it. " +
				"It reports the drain's time and rate, the creates at the provider as a share of the budget and at most in any second, " +
				"the share of calls answered 429, the transitions of cause lease_lost, the time between the backlog's last two charges, the new purchases' created → final p50 and p99 during the drain, and the fake's ledger. " +
				"With --accounts K the backlog is spread over K connected accounts, each paced by its own shared budget at those limits and limited apart by the fake, and the new purchases arrive in them in turn; " +
				"--hot H queues H more in the first account, the new purchases then arriving in the others, and the run does not wait for the hot backlog; --for D keeps new purchases arriving for at least D. " +
				"It then reports each account's drain as a share of its budget (slowest, median, fastest), the least served account's share of the work while every account had some, " +
				"the most creates of one account in any second, and the new purchases' created → final p50, p99 and max against an account's pacing. " +
				"It needs --database-url and refuses a database that holds purchases not final: use a scratch database.",
			settings: join(basicSettings, storeSettings, protocolSettings, []string{"budget-account", "budget-global", "budget-create", "budget-retrieve", "budget-search", "budget-list", "budget-refund"}), run: runBenchBacklog},
		{name: "fakeprovider", args: "[--webhook-url URL] [--connect-webhook-url URL]",
			summary:  "a Stripe-compatible fake provider over HTTP, with webhooks",
			about:    "Serves the fake provider as a Stripe-compatible HTTP server on --addr, with its ledger at GET /_fake/ledger, and sends webhooks signed with STRIPE_WEBHOOK_SECRET to --webhook-url. Its own endpoints take no key: keep it on loopback.",
			settings: join(basicSettings, []string{"addr", "fake-faults", "stripe-webhook-secret", "stripe-webhook-secret-file", "stripe-connect-webhook-secret", "stripe-connect-webhook-secret-file"}), run: runFakeProvider},
		{name: "statemachine", args: "[--mermaid] [--refund]", summary: "print the state machine (--mermaid for a Mermaid diagram)",
			about: "Prints the purchase's state machine, one allowed move a line, or with --mermaid the Mermaid diagram the README carries; --refund prints the refund's machine instead.",
			run:   runStatemachine},
		{name: "version", summary: "print the version, VCS revision and Go version (also --version)",
			about: "Prints the version of the module payrecon was built from ((devel) for a build from a work tree), the VCS revision and commit time when the build recorded them, and the Go version.", run: runVersion},
		{name: "help", args: "[COMMAND [SUBCOMMAND] | settings]", summary: "this list; help COMMAND: its flags and settings; help settings: all settings", run: runHelp},
	}
}

// findCommand returns the command named name ("ops list" for a
// subcommand), or nil.
func findCommand(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return &c
		}
	}
	return nil
}

// errUsage marks an error in the command line or a setting; runMain prints
// it with a pointer to the help and exits 2.
var errUsage = errors.New("usage")

// usageError marks err as a usage error.
func usageError(err error) error { return fmt.Errorf("%w: %w", errUsage, err) }

// runMain runs payrecon with args (without the program name) and returns the
// process exit code: 0 on success (and for help asked for), 2 for a bad
// command line or setting, 1 when the command failed. Tests call it
// directly.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// A command's parts (the logger, a demo's timeline, a bench's
	// progress) write to these from several goroutines, and a caller's
	// writer need not be safe for that, as a file is.
	var mu sync.Mutex
	stdout, stderr = &lockedWriter{mu: &mu, w: stdout}, &lockedWriter{mu: &mu, w: stderr}
	e := &env{stdout: stdout, stderr: stderr, settings: newSettings()}
	if len(args) == 0 {
		fmt.Fprint(stderr, "payrecon: no command given\n\n")
		printCommands(stderr)
		fmt.Fprintln(stderr, "\nRun 'payrecon help' for the settings too.")
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	case "-version", "--version":
		name = "version"
	}
	c := findCommand(name)
	if c == nil || strings.Contains(name, " ") {
		fmt.Fprintf(stderr, "payrecon: unknown command %q\n\n", name)
		printCommands(stderr)
		fmt.Fprintln(stderr, "\nRun 'payrecon help' for the settings too.")
		return 2
	}
	return e.exitCode(c.name, c.run(ctx, e, rest))
}

// exitCode prints a command's error and returns its exit code.
func (e *env) exitCode(name string, err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		if strings.HasPrefix(e.parsed, name+" ") {
			name = e.parsed // the subcommand's help, not its group's
		}
		msg := strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
		fmt.Fprintf(e.stderr, "payrecon %s: %s\nRun 'payrecon help %s' for its flags and settings.\n", name, msg, name)
		return 2
	default:
		fmt.Fprintf(e.stderr, "payrecon %s: %v\n", name, err)
		return 1
	}
}

// printCommands writes the usage line and the list of commands.
func printCommands(w io.Writer) {
	fmt.Fprintln(w, "Usage: payrecon COMMAND [flags]")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands() {
		if !strings.Contains(c.name, " ") {
			fmt.Fprintf(w, "  %-14s %s\n", c.name, c.summary)
		}
	}
}

// helpText ends `payrecon help`, after the commands.
const helpText = `Run 'payrecon help COMMAND' (or 'payrecon COMMAND -h') for a command's
flags and the settings it reads, and 'payrecon help settings' for every
setting, its environment variable, default and meaning.

Exit status: 0 on success, 1 when the command failed, 2 for a bad command
line or a bad setting (nothing was done).
`

// settingsText heads `payrecon help settings`, before the settings.
const settingsText = `Settings: every command takes every setting; each command's help lists
those it reads. A setting has a flag, an environment variable and a line
in the config file (--config FILE: "name value", one a line, # starts a
comment). A flag wins over the environment, which wins over the config
file, which wins over the default. Durations are written 30s, 2m, 1h30m.

serve and worker are alternatives: serve runs the worker itself, beside
HTTP. Extra workers may run beside it, on their own address (worker's
--addr defaults to ` + defaultWorkerAddr + `, serve's to ` + defaultAddr + `).

Secrets (the database URL, the API and operator tokens, Stripe's keys)
can also be read from a file, with the _FILE variable (or -file flag)
beside each: one trailing newline is dropped, an empty or unreadable file
is refused, and so is a secret given both ways. A secret given as a flag
is visible to every user of the machine (ps): payrecon warns about it.

Tokens: --api-token is a comma-separated list of name:token items (a bare
token is named by its hash), one per API client; every token, and
--ops-token, is at least 16 characters (openssl rand -hex 16), and the
operator token differs from every API token.

Settings (flag, type and default; environment variable and meaning):
`

// usage writes `payrecon help`: the commands and where to read more.
func usage(w io.Writer) {
	fmt.Fprint(w, "payrecon: payment reconciliation worker\n\n")
	printCommands(w)
	fmt.Fprintln(w)
	fmt.Fprint(w, helpText)
}

// usageSettings writes `payrecon help settings`: the rules of the
// settings, and every setting.
func usageSettings(e *env, w io.Writer) {
	fmt.Fprint(w, settingsText)
	e.settings.printSettings(w, nil, "")
}

// runHelp prints the help, every setting (`payrecon help settings`), or a
// command's help: `payrecon help ops resolve` is `payrecon ops resolve -h`.
func runHelp(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		usage(e.stdout)
		return nil
	}
	if len(args) == 1 && args[0] == "settings" {
		usageSettings(e, e.stdout)
		return nil
	}
	if args[0] == "help" || isHelp(args[0]) {
		e.printHelp("help", nil)
		return nil
	}
	c := findCommand(args[0])
	if c == nil {
		return usageError(fmt.Errorf("no command %q: run 'payrecon help' for the list", args[0]))
	}
	return c.run(ctx, e, append(slices.Clone(args[1:]), "-h"))
}

// printHelp writes the help of command name: its usage line, what it
// does, its own flags (those of fs that are not settings), and the
// settings it uses.
func (e *env) printHelp(name string, fs *flag.FlagSet) {
	w := e.stdout
	c := findCommand(name)
	if c == nil {
		c = &command{name: name}
	}
	usage := "payrecon " + name
	if c.args != "" {
		usage += " " + c.args
	}
	if len(c.settings) > 0 {
		usage += " [settings]"
	}
	fmt.Fprintf(w, "Usage: %s\n\n", usage)
	about := c.about
	if about == "" {
		about = strings.ToUpper(c.summary[:1]) + c.summary[1:] + "."
	}
	for _, line := range wrap(about, 74) {
		fmt.Fprintln(w, line)
	}
	var own []*flag.Flag
	if fs != nil {
		fs.VisitAll(func(f *flag.Flag) {
			if !isSetting(f) {
				own = append(own, f)
			}
		})
	}
	if len(own) > 0 {
		fmt.Fprintln(w, "\nFlags:")
		for _, f := range own {
			typ, usage := flag.UnquoteUsage(f)
			head := "--" + f.Name
			if typ != "" {
				head += " " + typ
			}
			// A flag whose text says its default itself ("(default: the
			// charge's whole amount)") shows no zero value besides.
			if f.DefValue != "" && f.DefValue != "false" && !strings.Contains(usage, "(default") {
				usage += " (default " + f.DefValue + ")"
			}
			fmt.Fprintf(w, "  %s  %s\n", head, usage)
		}
	}
	if len(c.settings) == 0 {
		fmt.Fprintln(w, "\nIt uses no setting.")
		return
	}
	fmt.Fprintln(w, "\nSettings it reads, with their defaults (flag, then PAYRECON_NAME, then the")
	fmt.Fprintln(w, "config file; 'payrecon help settings' says what each means):")
	e.settings.printCompact(w, c.settings, name)
}

// printGroupHelp writes the help of a command made of subcommands.
func (e *env) printGroupHelp(name string) {
	w := e.stdout
	c := findCommand(name)
	fmt.Fprintf(w, "Usage: payrecon %s SUBCOMMAND [flags]\n\nSubcommands:\n", name)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, sub := range commands() {
		if rest, ok := strings.CutPrefix(sub.name, name+" "); ok {
			fmt.Fprintf(tw, "  %s\t%s\n", rest, sub.summary)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\nRun 'payrecon help %s SUBCOMMAND' for a subcommand's flags and settings.\n", c.name)
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// parse parses a command's flags: the shared settings plus the command's
// own, registered by extra. Flags may come before or after the positional
// arguments (`ops resolve ID --succeeded`); a "--" ends the flags. The
// settings not given as flags are resolved from the environment, then
// the config file, then their defaults. The positional arguments are
// returned, in order. For -h it prints the command's help and returns
// flag.ErrHelp.
func (e *env) parse(name string, args []string, extra func(fs *flag.FlagSet)) ([]string, error) {
	s := e.settings
	e.parsed = name
	fs := flag.NewFlagSet("payrecon "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if extra != nil {
		extra(fs)
	}
	s.register(fs)
	s.bad = nil
	if err := fs.Parse(flagsFirst(fs, args)); err != nil {
		switch {
		case errors.Is(err, flag.ErrHelp):
			e.printHelp(name, fs)
			return nil, err
		case s.bad != nil:
			// The flag package's message would show a secret's value.
			return nil, usageError(s.badValueError(s.bad, "flag"))
		default:
			return nil, usageError(err)
		}
	}
	if err := s.resolve(fs, name); err != nil {
		return nil, usageError(err)
	}
	log, err := newLogger(e.stderr, s.str("log-level"), s.str("log-format"))
	if err != nil {
		return nil, usageError(err)
	}
	e.log = log
	s.warnSecretsInArgs(log)
	return fs.Args(), nil
}

// flagsFirst reorders args so that every flag, with its value, comes
// before the positional arguments, which follow a "--": Go's flag package
// stops at the first positional argument, and an operator writes
// `payrecon ops resolve ID --succeeded --evidence TEXT`. It splits args as
// the flag package reads them: a flag without "=" that is not boolean
// takes the next argument as its value, whatever it looks like, and "--"
// (not taken as a value) ends the flags. An unknown or malformed flag, or
// one missing its value, is kept with the flags, for fs.Parse to report.
func flagsFirst(fs *flag.FlagSet, args []string) []string {
	var flags, positional []string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if len(arg) < 2 || arg[0] != '-' {
			positional = append(positional, arg)
			continue
		}
		flags = append(flags, arg)
		name := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 == len(args) {
			// The flag's value is missing: leave the flag last, so that
			// fs.Parse reports it rather than take "--" for its value.
			return flags
		}
		i++
		flags = append(flags, args[i])
	}
	return append(append(flags, "--"), positional...)
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
}

// lockedWriter serializes the writes of several goroutines to w under mu,
// which runMain shares between its stdout and stderr in case they are one
// writer. Safe for concurrent use.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
