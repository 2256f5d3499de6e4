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

	// ConnectWebhooks maps a provider name to the verifier of its Connect
	// endpoint, which receives the events of the platform's connected
	// accounts, signed with a secret of its own; each is served at POST
	// /webhooks/{name}/connect. An event there must name its account, and
	// one at the platform's endpoint must name none. Default none.
	ConnectWebhooks map[string]WebhookVerifier

	// MaxWebhookBytes caps a webhook body. Default 256 KiB (Stripe's
	// events are a few KiB).
	MaxWebhookBytes int64

	// Metrics, if set, is served at GET /metrics.
	Metrics http.Handler

	// MetricsAddr, if set, is a second listen address that serves GET
	// /metrics and nothing else, and /metrics is then not served on Addr:
	// keep it on a private interface for the scraper. Default empty:
	// /metrics is served on Addr, beside everything else.
	MetricsAddr string

	// MetricsToken, if set, is required of every GET /metrics, wherever it
	// is served, as "Authorization: Bearer <token>" (Prometheus'
	// authorization.credentials); without it /metrics answers 401. At
	// least 16 characters (Listen refuses a shorter one). Default empty:
	// no token.
	MetricsToken string

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
//
// Every response carries X-Content-Type-Options: nosniff, so that no
// browser reads a JSON body (which may echo a client's text) as HTML.
type Server struct {
	svc *reconcile.Service
	cfg Config
	mux *http.ServeMux

	// metricsMux serves /metrics on MetricsAddr; nil when /metrics is on
	// mux. metricsLn is its listener, opened by Listen.
	metricsMux *http.ServeMux
	metricsLn  net.Listener
}

// minMetricsToken is the shortest metrics token Listen accepts, as for
// the API and operator tokens.
const minMetricsToken = 16

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
		s.mux.Handle("POST /webhooks/"+name, s.webhookHandler(name, v, false))
	}
	for name, v := range cfg.ConnectWebhooks {
		s.mux.Handle("POST /webhooks/"+name+"/connect", s.webhookHandler(name, v, true))
	}
	if cfg.Metrics != nil {
		metrics := s.guardMetrics(cfg.Metrics)
		if cfg.MetricsAddr == "" {
			s.mux.Handle("GET /metrics", metrics)
		} else {
			s.metricsMux = http.NewServeMux()
			s.metricsMux.Handle("GET /metrics", metrics)
		}
	}
	return s
}

// guardMetrics requires the metrics token, if one is configured, by its
// digest (matchToken).
func (s *Server) guardMetrics(h http.Handler) http.Handler {
	if s.cfg.MetricsToken == "" {
		return h
	}
	want := digestOf(s.cfg.MetricsToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok, ok := bearer(r); ok && matchToken(tok, want) == 0 {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="payrecon-metrics"`)
		writeError(w, http.StatusUnauthorized, "unauthorized", "/metrics requires Authorization: Bearer <metrics token>")
	})
}

// Handle registers an extra handler on the server's mux, for the purchase
// API and the operator pages.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// ServeHTTP makes Server an http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	s.mux.ServeHTTP(w, r)
}

// MetricsHandler returns the handler of the separate metrics listener
// (GET /metrics, with the token if one is set), or nil when MetricsAddr
// is empty and /metrics is served by ServeHTTP.
func (s *Server) MetricsHandler() http.Handler {
	if s.metricsMux == nil {
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		s.metricsMux.ServeHTTP(w, r)
	})
}

// Listen opens the configured address, and the metrics address if one is
// set, which Serve then serves too. Serve the returned listener with
// Serve. It refuses a MetricsToken shorter than 16 characters.
func (s *Server) Listen() (net.Listener, error) {
	if t := s.cfg.MetricsToken; t != "" && len(t) < minMetricsToken {
		return nil, fmt.Errorf("http: the metrics token is shorter than %d characters", minMetricsToken)
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("http: listen on %s: %w", s.cfg.Addr, err)
	}
	if s.metricsMux != nil {
		mln, err := net.Listen("tcp", s.cfg.MetricsAddr)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("http: listen for /metrics on %s: %w", s.cfg.MetricsAddr, err)
		}
		s.metricsLn = mln
	}
	return ln, nil
}

// MetricsAddr returns the address of the metrics listener Listen opened,
// or nil when /metrics is served on the main listener.
func (s *Server) MetricsAddr() net.Addr {
	if s.metricsLn == nil {
		return nil
	}
	return s.metricsLn.Addr()
}

// Serve answers requests on ln, and on the metrics listener if Listen
// opened one, until ctx ends; then it stops accepting, waits up to
// ShutdownTimeout for requests in flight, and returns nil. If either
// listener fails, Serve stops the other and returns the error.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	servers := []*http.Server{s.newHTTPServer(ctx, s)}
	listeners := []net.Listener{ln}
	if s.metricsLn != nil {
		servers = append(servers, s.newHTTPServer(ctx, s.MetricsHandler()))
		listeners = append(listeners, s.metricsLn)
		s.cfg.Logger.Info("serving /metrics on its own listener", "addr", s.metricsLn.Addr().String(),
			"token", s.cfg.MetricsToken != "")
	}
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { errc <- srv.Serve(listeners[i]) }()
	}
	var first error
	running := len(servers)
	select {
	case err := <-errc: // a listener failed: stop the others
		first = fmt.Errorf("http: serve: %w", err)
		running--
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	errs := []error{first}
	for _, srv := range servers {
		if err := srv.Shutdown(shutdownCtx); err != nil {
			errs = append(errs, fmt.Errorf("http: shutdown: %w", err))
		}
	}
	for range running {
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("http: serve: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (s *Server) newHTTPServer(ctx context.Context, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := s.svc.Store().Ready(ctx); err != nil {
		// The driver's text can name hosts, users and paths: the log
		// keeps it, the unauthenticated answer does not.
		s.cfg.Logger.Warn("readiness check: database unreachable", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "error": "database unreachable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// writeJSON writes v as the JSON response body with status, marked
// nosniff (as every response of the Server is, also when a handler is
// served on another mux).
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away; nothing to do
}

// writeError writes a JSON error body {"error": {"code", "message"}}.
func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": message}})
}
