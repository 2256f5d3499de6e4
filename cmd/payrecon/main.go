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
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// env carries what a command needs: its output streams and the settings.
type env struct {
	stdout, stderr io.Writer
	settings       *settings
	log            *slog.Logger
}

// command is one subcommand. run gets the arguments after its name.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

func commands() []command {
	return []command{
		{"demo", "a one-command tour: every failure the protocol survives, against a fake Stripe, in under a minute", runDemo},
		{"migrate", "apply the database schema", runMigrate},
		{"serve", "the all-in-one process: HTTP (webhooks, purchase API, /metrics, /ops) plus the worker and its sweeps", runServe},
		{"worker", "run the reconcile worker and its sweeps until SIGTERM (HTTP: /healthz, /readyz, /metrics)", runWorker},
		{"ops", "operator handoff: ops list | show ID | recheck ID | resolve ID | note ID", runOps},
		{"purchase", "purchase create | purchase show ID", runPurchase},
		{"fakeprovider", "serve the fake provider as a Stripe-compatible HTTP server, with signed webhooks (--webhook-url)", runFakeProvider},
		{"statemachine", "print the state machine (--mermaid for a Mermaid diagram)", runStatemachine},
		{"help", "list commands and settings", nil},
	}
}

// errUsage marks an error in the command line; Main prints usage for it.
var errUsage = errors.New("usage")

// Main runs payrecon with args (without the program name) and returns the
// process exit code: 0 on success, 2 for a bad command line, 1 otherwise.
// Tests call it directly.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr, settings: newSettings()}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(e, stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] || c.run == nil {
			continue
		}
		err := c.run(ctx, e, args[1:])
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "payrecon %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "payrecon %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "payrecon: unknown command %q\n\n", args[0])
	usage(e, stderr)
	return 2
}

func usage(e *env, w io.Writer) {
	fmt.Fprintln(w, "payrecon: payment reconciliation worker")
	fmt.Fprintln(w, "\nUsage: payrecon COMMAND [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-14s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nSettings (every command accepts them; a flag wins over the environment, which wins over the default):")
	e.settings.printSettings(w)
}

// parse parses a command's flags: the shared settings plus the command's
// own, registered by extra. Positional arguments are returned.
func (e *env) parse(name string, args []string, extra func(fs *flag.FlagSet)) ([]string, error) {
	fs := flag.NewFlagSet("payrecon "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	e.settings.register(fs)
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	e.settings.resolve(fs)
	log, err := newLogger(e.stderr, e.settings.str("log-level"), e.settings.str("log-format"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	e.log = log
	return fs.Args(), nil
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
