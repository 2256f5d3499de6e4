package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
)

// runFakeProvider serves the fake provider as a Stripe-compatible HTTP
// server on --addr, so that several worker processes (--provider stripe
// --stripe-api-base http://ADDR) share one ledger, and sends signed
// webhooks to --webhook-url. It also serves the simulator's own endpoints
// (GET /_fake/ledger, POST /_fake/charges, POST
// /_fake/payment_intents/{id}/status; see fakeprovider.Server), which need
// no API key: keep --addr on a loopback address. The list lag is an item
// of --fake-faults (list_lag=DUR), like the search lag.
func runFakeProvider(ctx context.Context, e *env, args []string) error {
	var webhookURL, connectURL string
	rest, err := e.parse("fakeprovider", args, func(fs *flag.FlagSet) {
		fs.StringVar(&webhookURL, "webhook-url", "", "where to POST signed webhooks, e.g. http://127.0.0.1:8080/webhooks/stripe (needs STRIPE_WEBHOOK_SECRET)")
		fs.StringVar(&connectURL, "connect-webhook-url", "", "where to POST the connected accounts' webhooks, e.g. http://127.0.0.1:8080/webhooks/stripe/connect (needs STRIPE_CONNECT_WEBHOOK_SECRET)")
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageError(fmt.Errorf("unexpected arguments %q: fakeprovider takes only flags", rest))
	}
	cfg, scfg, err := fakeprovider.ParseSpec(e.settings.str("fake-faults"))
	if err != nil {
		return fmt.Errorf("%w: --fake-faults / PAYRECON_FAKE_FAULTS: %w", errUsage, err)
	}
	if webhookURL != "" {
		secret, err := e.settings.secret("stripe-webhook-secret")
		if err != nil {
			return usageError(err)
		}
		if secret == "" {
			return usageError(errors.New("--webhook-url needs STRIPE_WEBHOOK_SECRET (or STRIPE_WEBHOOK_SECRET_FILE) to sign the webhooks"))
		}
		scfg.WebhookURL, scfg.WebhookSecret = webhookURL, secret
	}
	if connectURL != "" {
		secret, err := e.settings.secret("stripe-connect-webhook-secret")
		if err != nil {
			return usageError(err)
		}
		if secret == "" {
			return usageError(errors.New("--connect-webhook-url needs STRIPE_CONNECT_WEBHOOK_SECRET (or STRIPE_CONNECT_WEBHOOK_SECRET_FILE) to sign the webhooks"))
		}
		scfg.ConnectWebhookURL, scfg.ConnectWebhookSecret = connectURL, secret
	}
	scfg.Logger = e.log
	srv := fakeprovider.NewServer(fakeprovider.New(cfg), scfg)
	defer srv.Close()
	ln, err := net.Listen("tcp", e.settings.str("addr"))
	if err != nil {
		return fmt.Errorf("listen on %s: %w", e.settings.str("addr"), err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	e.log.Info("fake Stripe server listening", "addr", ln.Addr().String(), "webhooks", webhookURL, "faults", e.settings.str("fake-faults"))
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
