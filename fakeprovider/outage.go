package fakeprovider

import (
	"fmt"
	"net/http"
	"time"
)

// Outage makes the server refuse every call of Stripe's API (/v1/…) for d
// from now, by the server's clock, with a 503 api_error and nothing done:
// a provider outage. The simulator's own endpoints keep answering, and
// webhooks keep being delivered. A later call replaces the deadline; d 0
// ends an outage. The platform's outage refuses its connected accounts'
// calls too; an account's Server's (Account) refuses that account's alone.
// POST /_fake/outage serves it.
func (s *Server) Outage(d time.Duration) {
	s.outageMu.Lock()
	defer s.outageMu.Unlock()
	s.outageUntil = s.now().Add(d)
}

// inOutage reports whether an outage refuses the calls now.
func (s *Server) inOutage() bool {
	s.outageMu.Lock()
	defer s.outageMu.Unlock()
	return s.now().Before(s.outageUntil)
}

// refuseInOutage answers a call refused by an outage.
func refuseInOutage(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, apiError{Type: "api_error",
		Message: "The provider is unavailable (a simulated outage): nothing was done; retry later."})
}

// controlOutage serves POST /_fake/outage: duration, a Go duration >= 0.
func (s *Server) controlOutage(w http.ResponseWriter, r *http.Request) {
	p, bad := controlParams(r, "duration")
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	v, ok := p["duration"]
	if !ok {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_missing", Param: "duration",
			Message: "Missing required param: duration."})
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_invalid_string", Param: "duration",
			Message: fmt.Sprintf("Invalid duration: %q: want a Go duration >= 0, such as 30s", v)})
		return
	}
	s.Outage(d)
	writeJSON(w, http.StatusOK, map[string]any{"outage_until": s.now().Add(d).UTC()})
}

// WebhookView is what GET /_fake/webhooks answers: the delivery counts,
// the events emitted (without their payloads) and every delivery attempt.
type WebhookView struct {
	Stats      WebhookStats   `json:"stats"`
	Events     []WebhookEvent `json:"events"`
	Deliveries []Delivery     `json:"deliveries"`
}

// webhookView returns the server's WebhookView.
func (s *Server) webhookView() WebhookView {
	v := WebhookView{Stats: s.WebhookStats(), Events: s.Events(), Deliveries: s.Deliveries()}
	for i := range v.Events {
		v.Events[i].Payload = nil
	}
	if v.Events == nil {
		v.Events = []WebhookEvent{}
	}
	if v.Deliveries == nil {
		v.Deliveries = []Delivery{}
	}
	return v
}
