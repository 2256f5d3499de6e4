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
		{"ops", "operator handoff: ops list | show ID | recheck ID | resolve ID | note ID | findings | close-finding ID", runOps},
		{"audit", "audit from the provider's side: audit --since T [--until T] lists the provider's payments and matches them to the books (needs --provider stripe)", runAudit},
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
// own, registered by extra. Flags may come before or after the positional
// arguments (`ops resolve ID --succeeded`); a "--" ends the flags. The
// positional arguments are returned, in order.
func (e *env) parse(name string, args []string, extra func(fs *flag.FlagSet)) ([]string, error) {
	fs := flag.NewFlagSet("payrecon "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	e.settings.register(fs)
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(flagsFirst(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	e.settings.resolve(fs)
	log, err := newLogger(e.stderr, e.settings.str("log-level"), e.settings.str("log-format"))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	e.log = log
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
