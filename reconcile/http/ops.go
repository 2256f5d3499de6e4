package http

import (
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// The operator pages.
//
// Routes (all under /ops, registered by Ops.Register):
//
//	GET  /ops                          the escalated cases and refunds and the open audit findings, as HTML tables
//	GET  /ops/escalations              the same cases with their full record, the escalated refunds and the
//	                                   open findings (as JSON; the page of /ops otherwise)
//	GET  /ops/purchases/{id}           one case: record, refunds, findings, timeline, the provider's live view
//	                                   an operator last asked for, the actions
//	POST /ops/purchases/{id}/live      ask the provider for its live view now (recorded, spends budget)
//	POST /ops/purchases/{id}/recheck   reconcile it now
//	POST /ops/purchases/{id}/resolve   settle it as succeeded or declined, with evidence
//	                                   (and override_provider, a reason to go against the provider)
//	POST /ops/purchases/{id}/note      add a note; optionally close a terminal case's escalation
//	GET  /ops/outbox                   the outbox: pending and dead deliveries, with the replay form
//	POST /ops/outbox/replay            replay the dead deliveries (of one subscription, or all)
//	GET  /ops/findings                 the audit's findings: the open ones, all with ?all=1
//	GET  /ops/findings/{fid}           one finding, with its close form
//	POST /ops/findings/{fid}/close     close a finding with a note
//	POST /ops/findings/{fid}/refund    "Refund this charge": refund an open duplicate charge's payment,
//	                                   with evidence (amount: the finding's unless given)
//	GET  /ops/refunds/{rid}            one refund: record and timeline
//	GET  /ops/login, POST /ops/login   the login form
//	POST /ops/logout                   drop the session
//
// Every GET answers an HTML page, and JSON instead on Accept:
// application/json or ?format=json (see opsWantsJSON); so do the POSTs,
// which otherwise redirect to the page with a flash message.
//
// An operator may only recheck, resolve (to succeeded or declined, with
// evidence), add a note, close an audit finding with a note, or refund a
// duplicate charge an audit finding names ("Refund this charge"). That
// refund is the one action here that moves money: it goes through the
// refund process like any other refund (its own id, key and states,
// reconciled by the worker) and is recorded with the operator's name and
// evidence. Nothing here can create a charge. A resolution is checked against
// the provider's live view by reconcile.Service.Resolve, which fetches and
// records what the provider said itself: the form never supplies it. When
// the provider contradicts the resolution the action is refused with 409
// (code provider_disagrees) and the provider's answer, unless the form
// gives override_provider, the operator's reason to go against it.

//go:embed templates/*.html
var opsTemplateFS embed.FS

// OpsConfig configures the operator pages.
type OpsConfig struct {
	// Token is the operator bearer token (--ops-token /
	// PAYRECON_OPS_TOKEN), at least 16 characters, distinct from the
	// purchase API tokens. Required. Sessions are signed with a key
	// derived from it.
	Token string
	// SessionTTL is how long a login lasts. Default 12h.
	SessionTTL time.Duration
	// Now is the clock for sessions and for the lockouts of the login
	// throttle (ops_throttle.go). Default time.Now.
	Now func() time.Time
}

// Ops serves the operator pages. Create it with NewOps.
type Ops struct {
	svc       *reconcile.Service
	cfg       OpsConfig
	tokenHash tokenDigest
	key       []byte // HMAC key for sessions, CSRF tokens and flash messages
	pages     map[string]*template.Template
	cop       *http.CrossOriginProtection
	log       *slog.Logger
	throttle  *loginThrottle // see ops_throttle.go
	loginObs  LoginObserver  // from the server's Observer, if it is one
}

// Names of the cookies and limits of the operator pages.
const (
	opsSessionCookie = "payrecon_ops_session"
	opsLoginCookie   = "payrecon_ops_login"
	opsLoginNonceTTL = time.Hour
	opsMaxFormBytes  = 64 << 10
	opsMaxText       = 4000 // runes of evidence or note text
	opsMaxName       = 64   // runes of an operator name
	opsMinToken      = 16
)

// NewOps returns the operator pages for svc. It refuses to exist without
// a token of at least 16 characters: the pages are never served
// unauthenticated.
func NewOps(svc *reconcile.Service, cfg OpsConfig) (*Ops, error) {
	if svc == nil {
		return nil, errors.New("ops pages: nil service")
	}
	switch {
	case cfg.Token == "":
		return nil, errors.New("ops pages: no operator token configured (--ops-token / PAYRECON_OPS_TOKEN); refusing to serve them unauthenticated")
	case len(cfg.Token) < opsMinToken:
		return nil, fmt.Errorf("ops pages: the operator token is shorter than %d characters", opsMinToken)
	case cfg.SessionTTL < 0:
		return nil, fmt.Errorf("ops pages: session TTL %s must be positive", cfg.SessionTTL)
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	mac := hmac.New(sha256.New, []byte(cfg.Token))
	mac.Write([]byte("payrecon ops session key v1"))
	o := &Ops{
		svc:       svc,
		cfg:       cfg,
		tokenHash: digestOf(cfg.Token),
		key:       mac.Sum(nil),
		pages:     map[string]*template.Template{},
		log:       slog.Default(),
		throttle:  newLoginThrottle(cfg.Now),
	}
	for _, page := range []string{"login", "list", "findings", "case", "finding", "refund", "outbox", "error"} {
		t, err := template.New(page).Funcs(opsFuncs).ParseFS(opsTemplateFS, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return nil, fmt.Errorf("ops pages: template %s: %w", page, err)
		}
		o.pages[page] = t
	}
	o.cop = http.NewCrossOriginProtection()
	o.cop.SetDenyHandler(http.HandlerFunc(o.crossOriginDenied))
	return o, nil
}

// Register adds the operator routes to s.
func (o *Ops) Register(s *Server) {
	if s.cfg.Logger != nil {
		o.log = s.cfg.Logger
	}
	if lo, ok := s.cfg.Observer.(LoginObserver); ok {
		o.loginObs = lo
	}
	s.Handle("GET /ops", o.auth(opsPage, o.listPage))
	s.Handle("GET /ops/{$}", http.RedirectHandler("/ops", http.StatusMovedPermanently))
	s.Handle("GET /ops/escalations", o.auth(opsPage, o.escalations))
	s.Handle("GET /ops/purchases/{id}", o.auth(opsPage, o.casePage))
	s.Handle("POST /ops/purchases/{id}/live", o.post(o.askProvider))
	s.Handle("POST /ops/purchases/{id}/recheck", o.post(o.recheck))
	s.Handle("POST /ops/purchases/{id}/resolve", o.post(o.resolve))
	s.Handle("POST /ops/purchases/{id}/note", o.post(o.note))
	s.Handle("GET /ops/findings", o.auth(opsPage, o.findings))
	s.Handle("GET /ops/findings/{fid}", o.auth(opsPage, o.findingPage))
	s.Handle("POST /ops/findings/{fid}/close", o.post(o.closeFinding))
	s.Handle("POST /ops/findings/{fid}/refund", o.post(o.refundCharge))
	s.Handle("GET /ops/refunds/{rid}", o.auth(opsPage, o.refundPage))
	s.Handle("GET /ops/outbox", o.auth(opsPage, o.outboxPage))
	s.Handle("POST /ops/outbox/replay", o.post(o.replayOutbox))
	s.Handle("POST /ops/events/{eid}/retry", o.post(o.retryEvent))
	s.Handle("GET /ops/login", http.HandlerFunc(o.loginForm))
	s.Handle("POST /ops/login", o.cop.Handler(http.HandlerFunc(o.login)))
	s.Handle("POST /ops/logout", o.cop.Handler(http.HandlerFunc(o.logout)))
}
