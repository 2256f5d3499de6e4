package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/payrecon/payrecon/events"
	"github.com/payrecon/payrecon/reconcile"
)

// The outbox's commands: the subscriptions the relay delivers to, and
// replays of what it delivered.

// subscriptionSecretEnv is where `subscriptions add` reads the signing
// secret when --secret-file is not given: never on the command line.
const subscriptionSecretEnv = "PAYRECON_SUBSCRIPTION_SECRET"

func runSubscriptions(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageError(errors.New("want `subscriptions add NAME`, `subscriptions list` or `subscriptions remove NAME`"))
	}
	switch args[0] {
	case "add":
		return runSubscriptionsAdd(ctx, e, args[1:])
	case "list":
		return runSubscriptionsList(ctx, e, args[1:])
	case "remove":
		return runSubscriptionsRemove(ctx, e, args[1:])
	case "-h", "-help", "--help":
		e.printGroupHelp("subscriptions")
		return flag.ErrHelp
	default:
		return usageError(fmt.Errorf("unknown subscriptions subcommand %q: want add, list or remove", args[0]))
	}
}

func runSubscriptionsAdd(ctx context.Context, e *env, args []string) error {
	var url, secretFile, types string
	rest, err := e.parse("subscriptions add", args, func(fs *flag.FlagSet) {
		fs.StringVar(&url, "url", "", "where the events are POSTed, an http or https URL (required)")
		fs.StringVar(&secretFile, "secret-file", "", "file holding the signing secret (default: the "+subscriptionSecretEnv+" environment variable)")
		fs.StringVar(&types, "types", "", "comma-separated event types it wants (default: every type): "+joinTypes(events.Types))
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError(fmt.Errorf("want exactly one subscription name, got %d arguments %q", len(rest), rest))
	}
	secret := os.Getenv(subscriptionSecretEnv)
	if secretFile != "" {
		b, err := os.ReadFile(secretFile)
		if err != nil {
			return usageError(fmt.Errorf("--secret-file: %w", err))
		}
		secret = strings.TrimSpace(string(b))
	}
	if secret == "" {
		return usageError(fmt.Errorf("no signing secret: give --secret-file or set %s", subscriptionSecretEnv))
	}
	sub := reconcile.Subscription{Name: rest[0], URL: url, Secret: secret}
	for _, t := range strings.Split(types, ",") {
		if t = strings.TrimSpace(t); t != "" {
			sub.Types = append(sub.Types, events.Type(t))
		}
	}
	svc, cleanup, err := newBooks(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	got, err := svc.AddSubscription(ctx, sub)
	switch {
	case errors.Is(err, reconcile.ErrInvalid):
		return usageError(err)
	case errors.Is(err, reconcile.ErrDuplicate):
		return fmt.Errorf("a subscription named %s exists: remove it first to change it", sub.Name)
	case err != nil:
		return err
	}
	fmt.Fprintf(e.stdout, "subscription %s added: %s, %s; it receives the events committed from now on (payrecon events replay --since T --subscription %s sends earlier ones)\n",
		got.Name, got.RedactedURL(), describeTypes(got.Types), got.Name)
	return nil
}

func runSubscriptionsList(ctx context.Context, e *env, args []string) error {
	var asJSON bool
	rest, err := e.parse("subscriptions list", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print JSON, for scripts")
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageError(fmt.Errorf("unexpected arguments %q: subscriptions list takes only flags", rest))
	}
	svc, cleanup, err := newBooks(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	subs, err := svc.Subscriptions(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		type row struct {
			Name    string        `json:"name"`
			URL     string        `json:"url"`
			Types   []events.Type `json:"types"`
			Created string        `json:"created_at"`
		}
		out := []row{}
		for _, s := range subs {
			out = append(out, row{s.Name, s.RedactedURL(), s.Types, stamp(s.CreatedAt)})
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(subs) == 0 {
		fmt.Fprintln(e.stdout, "no subscriptions: payrecon subscriptions add NAME --url URL")
		return nil
	}
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tURL\tTYPES\tCREATED")
	for _, s := range subs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Name, s.RedactedURL(), describeTypes(s.Types), stamp(s.CreatedAt))
	}
	return w.Flush()
}

func runSubscriptionsRemove(ctx context.Context, e *env, args []string) error {
	rest, err := e.parse("subscriptions remove", args, nil)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError(fmt.Errorf("want exactly one subscription name, got %d arguments %q", len(rest), rest))
	}
	svc, cleanup, err := newBooks(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	switch err := svc.RemoveSubscription(ctx, rest[0]); {
	case errors.Is(err, reconcile.ErrNotFound):
		return fmt.Errorf("no subscription named %s", rest[0])
	case err != nil:
		return err
	}
	fmt.Fprintf(e.stdout, "subscription %s removed, with its pending and dead deliveries\n", rest[0])
	return nil
}

func runEvents(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageError(errors.New("want `events replay --since T`"))
	}
	switch args[0] {
	case "replay":
		return runEventsReplay(ctx, e, args[1:])
	case "-h", "-help", "--help":
		e.printGroupHelp("events")
		return flag.ErrHelp
	default:
		return usageError(fmt.Errorf("unknown events subcommand %q: want replay", args[0]))
	}
}

func runEventsReplay(ctx context.Context, e *env, args []string) error {
	var since, subscription string
	var deadOnly bool
	rest, err := e.parse("events replay", args, func(fs *flag.FlagSet) {
		fs.StringVar(&since, "since", "", "replay the events committed since: an RFC 3339 time (2026-03-01T09:00:00Z) or a duration back from now (24h) (required)")
		fs.StringVar(&subscription, "subscription", "", "only to this subscription (default: every subscription)")
		fs.BoolVar(&deadOnly, "dead-only", false, "only the dead deliveries (what the operator page's replay does)")
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageError(fmt.Errorf("unexpected arguments %q: events replay takes only flags", rest))
	}
	if strings.TrimSpace(since) == "" {
		return usageError(errors.New("--since is required: an RFC 3339 time or a duration back from now, such as 24h"))
	}
	svc, cleanup, err := newBooks(ctx, e)
	if err != nil {
		return err
	}
	defer cleanup()
	now, err := svc.Store().Now(ctx)
	if err != nil {
		return err
	}
	from, err := auditTime("since", since, now)
	if err != nil {
		return err
	}
	n, err := svc.ReplayEvents(ctx, reconcile.Replay{Subscription: subscription, Since: from, DeadOnly: deadOnly})
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		return fmt.Errorf("no subscription named %s", subscription)
	case err != nil:
		return err
	}
	fmt.Fprintf(e.stdout, "%d deliveries of the events committed since %s are pending again; the relay (serve or worker) sends them with their ids and bytes, in order per purchase\n", n, stamp(from))
	return nil
}

func joinTypes(ts []events.Type) string {
	ss := make([]string, len(ts))
	for i, t := range ts {
		ss[i] = string(t)
	}
	return strings.Join(ss, ",")
}

func describeTypes(ts []events.Type) string {
	if len(ts) == 0 {
		return "every event type"
	}
	return joinTypes(ts)
}
