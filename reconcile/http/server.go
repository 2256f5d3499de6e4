// Package http is payrecon's HTTP surface: health and readiness, the
// provider webhook endpoint, the purchase API, metrics and the operator
// pages. It translates HTTP to calls on reconcile.Service and back; the
// protocol itself lives in package reconcile.
package http

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// Config configures a Server. Zero fields take their documented defaults.
type Config struct {
	// Addr is the listen address. Default "127.0.0.1:8080".
	Addr string

	// Webhooks maps a provider name to the verifier of its webhooks; each
	// is served at POST /webhooks/{name}. Default none.
	Webhooks map[string]WebhookVerifier

	// MaxWebhookBytes caps a webhook body. Default 256 KiB (Stripe's
	// events are a few KiB).
	MaxWebhookBytes int64

	// Metrics, if set, is served at GET /metrics.
	Metrics http.Handler

	// Observer is told about every webhook, for metrics. Default none.
	Observer WebhookObserver

	// ShutdownTimeout bounds how long Serve waits for in-flight requests
	// after its context ends. Default 15s.
	ShutdownTimeout time.Duration

	// Logger receives request errors. Default slog.Default().
	Logger *slog.Logger
}

// WebhookObserver counts webhooks by type and outcome. Implementations
// must be safe for concurrent use.
type WebhookObserver interface {
	Webhook(eventType string, outcome reconcile.EventOutcome)
}

// Server serves payrecon's HTTP endpoints. Safe for concurrent use.
type Server struct {
	svc *reconcile.Service
	cfg Config
	mux *http.ServeMux
}

// New returns a Server for svc.
func New(svc *reconcile.Service, cfg Config) *Server {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:8080"
	}
	if cfg.MaxWebhookBytes == 0 {
		cfg.MaxWebhookBytes = 256 << 10
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{svc: svc, cfg: cfg, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /healthz", s.handleHealth)
	s.mux.HandleFunc("GET /readyz", s.handleReady)
	for name, v := range cfg.Webhooks {
		s.mux.Handle("POST /webhooks/"+name, s.webhookHandler(name, v))
	}
	if cfg.Metrics != nil {
		s.mux.Handle("GET /metrics", cfg.Metrics)
	}
	return s
}

// Handle registers an extra handler on the server's mux, for the purchase
// API and the operator pages.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// ServeHTTP makes Server an http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Listen opens the configured address. Serve the listener with Serve.
func (s *Server) Listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("http: listen on %s: %w", s.cfg.Addr, err)
	}
	return ln, nil
}

// Serve answers requests on ln until ctx ends, then stops accepting,
// waits up to ShutdownTimeout for requests in flight, and returns nil.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http: serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("http: shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http: serve: %w", err)
	}
	return nil
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := s.svc.Store().Ready(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// writeJSON writes v as the JSON response body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away; nothing to do
}

// writeError writes a JSON error body {"error": {"code", "message"}}.
func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": message}})
}
