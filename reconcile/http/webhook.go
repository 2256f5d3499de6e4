package http

import (
	"errors"
	"io"
	"net/http"

	"github.com/payrecon/payrecon/internal/crashpoint"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// WebhookVerifier checks a webhook's signature and translates its payload.
// provider/stripe implements it for Stripe.
type WebhookVerifier interface {
	// Verify returns the event the payload carries if header is a valid
	// signature of payload. Any error means the request must be refused
	// and nothing stored; its message says why.
	Verify(payload []byte, header string) (provider.Event, error)
	// SignatureHeader names the HTTP header that carries the signature.
	SignatureHeader() string
}

// webhookHandler verifies each event and stores it in the inbox,
// pending, and answers 2xx only once that has committed: a 2xx means
// stored, not applied. The applier applies it after the answer; the
// provider redelivers anything not stored. connect is true for a Connect
// endpoint: its events must name a connected account, and the
// platform's must name none, since an event is judged against its
// account's books and a mismatch means the endpoint's configuration is
// wrong.
func (s *Server) webhookHandler(name string, v WebhookVerifier, connect bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxWebhookBytes))
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			s.rejectWebhook(w, http.StatusRequestEntityTooLarge, "too_large", "webhook body over the size limit")
			return
		case err != nil:
			s.rejectWebhook(w, http.StatusBadRequest, "unreadable", "could not read the body: "+err.Error())
			return
		}
		ev, err := v.Verify(body, r.Header.Get(v.SignatureHeader()))
		if err != nil {
			s.rejectWebhook(w, http.StatusBadRequest, "rejected", err.Error())
			return
		}
		switch {
		case connect && ev.Account == provider.PlatformAccount:
			s.rejectWebhook(w, http.StatusBadRequest, "rejected", "event "+ev.ID+" names no connected account: the platform's events go to POST /webhooks/"+name)
			return
		case !connect && ev.Account != provider.PlatformAccount:
			s.rejectWebhook(w, http.StatusBadRequest, "rejected", "event "+ev.ID+" is of connected account "+ev.Account+": connected accounts' events go to POST /webhooks/"+name+"/connect")
			return
		}
		crashpoint.Hit(crashpoint.WebhookVerified)
		outcome, err := s.svc.ReceiveEvent(r.Context(), reconcile.EventFromProvider(name, ev, "", body))
		switch {
		case reconcile.KindOf(err) == reconcile.KindEventConflict:
			s.observeWebhook(ev.Type, reconcile.EventConflict)
			s.cfg.Logger.Error("webhook conflict: event id reused with another payload", "provider", name, "event", ev.ID)
			writeKindError(w, reconcile.KindEventConflict,
				"event "+ev.ID+" was already received with a different payload; nothing stored")
			return
		case err != nil:
			// Not committed, whatever the kind: the provider must redeliver.
			s.cfg.Logger.Error("webhook not stored", "provider", name, "event", ev.ID, "err", err)
			writeKindError(w, reconcile.KindInternal, "event not stored; retry")
			return
		}
		crashpoint.Hit(crashpoint.WebhookReceived)
		s.observeWebhook(ev.Type, outcome)
		writeJSON(w, http.StatusOK, map[string]string{"event": ev.ID, "outcome": string(outcome)})
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		crashpoint.Hit(crashpoint.WebhookAnswered)
	})
}

func (s *Server) rejectWebhook(w http.ResponseWriter, status int, code, message string) {
	s.observeWebhook(reconcile.UnverifiedEventType, reconcile.EventRejected)
	s.cfg.Logger.Warn("webhook rejected", "status", status, "reason", message)
	writeError(w, status, code, message)
}

func (s *Server) observeWebhook(eventType string, outcome reconcile.EventOutcome) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.Webhook(eventType, outcome)
	}
}
