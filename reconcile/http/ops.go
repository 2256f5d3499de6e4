package http

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The operator pages.
//
// Routes (all under /ops, registered by Ops.Register):
//
//	GET  /ops                          the escalated cases and the open audit findings, as HTML tables
//	GET  /ops/escalations              the same cases with their full record, and the open findings, as JSON
//	GET  /ops/purchases/{id}           one case: record, findings, timeline, the provider's live view, the actions
//	                                   (JSON for bearer clients or Accept: application/json)
//	POST /ops/purchases/{id}/recheck   reconcile it now
//	POST /ops/purchases/{id}/resolve   settle it as succeeded or declined, with evidence
//	                                   (and override_provider, a reason to go against the provider)
//	POST /ops/purchases/{id}/note      add a note; optionally close a terminal case's escalation
//	GET  /ops/findings                 the audit's findings as JSON: the open ones, all with ?all=1
//	GET  /ops/findings/{fid}           one finding, with its close form (JSON for bearer clients)
//	POST /ops/findings/{fid}/close     close a finding with a note
//	GET  /ops/login, POST /ops/login   the login form
//	POST /ops/logout                   drop the session
//
// An operator may only recheck, resolve (to succeeded or declined, with
// evidence), add a note or close an audit finding with a note. Nothing
// here can create a charge or move money. A resolution is checked against
// the provider's live view by reconcile.Service.Resolve, which fetches and
// records what the provider said itself: the form never supplies it. When
// the provider contradicts the resolution the action is refused with 409
// (code provider_disagrees) and the provider's answer, unless the form
// gives override_provider, the operator's reason to go against it.
//
// Authentication: every route but the login form needs either
// "Authorization: Bearer <ops token>" (scripts; the operator's name is then
// the required form field "operator") or the session cookie the login form
// sets. The cookie is base64url(name|expiry|HMAC-SHA256(key, name|expiry)),
// key being derived from the ops token, so sessions need no server state
// and changing the token ends all of them.
//
// CSRF: every POST is wrapped in http.CrossOriginProtection (Sec-Fetch-Site,
// else Origin against Host), and every form carries a token that is
// checked too: for a session, HMAC(key, "csrf|"+cookie value); for the
// login form, which has no session yet, HMAC(key, "login|"+nonce) where
// the nonce is a short-lived pre-session cookie (a signed double-submit
// cookie). Bearer requests carry no cookie, so they cannot be forged by
// another site and need no form token.

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
	// Now is the clock for sessions. Default time.Now.
	Now func() time.Time
}

// Ops serves the operator pages. Create it with NewOps.
type Ops struct {
	svc       *reconcile.Service
	cfg       OpsConfig
	tokenHash [sha256.Size]byte
	key       []byte // HMAC key for sessions, CSRF tokens and flash messages
	pages     map[string]*template.Template
	cop       *http.CrossOriginProtection
	log       *slog.Logger
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
		tokenHash: sha256.Sum256([]byte(cfg.Token)),
		key:       mac.Sum(nil),
		pages:     map[string]*template.Template{},
		log:       slog.Default(),
	}
	for _, page := range []string{"login", "list", "case", "finding", "error"} {
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
	s.Handle("GET /ops", o.auth(opsPage, o.listPage))
	s.Handle("GET /ops/{$}", http.RedirectHandler("/ops", http.StatusMovedPermanently))
	s.Handle("GET /ops/escalations", o.auth(opsJSON, o.listJSON))
	s.Handle("GET /ops/purchases/{id}", o.auth(opsPage, o.casePage))
	s.Handle("POST /ops/purchases/{id}/recheck", o.post(o.recheck))
	s.Handle("POST /ops/purchases/{id}/resolve", o.post(o.resolve))
	s.Handle("POST /ops/purchases/{id}/note", o.post(o.note))
	s.Handle("GET /ops/findings", o.auth(opsJSON, o.findingsJSON))
	s.Handle("GET /ops/findings/{fid}", o.auth(opsPage, o.findingPage))
	s.Handle("POST /ops/findings/{fid}/close", o.post(o.closeFinding))
	s.Handle("GET /ops/login", http.HandlerFunc(o.loginForm))
	s.Handle("POST /ops/login", o.cop.Handler(http.HandlerFunc(o.login)))
	s.Handle("POST /ops/logout", o.cop.Handler(http.HandlerFunc(o.logout)))
}

// ---------------------------------------------------------------------
// Authentication, sessions and CSRF tokens.

// opsWho is an authenticated caller.
type opsWho struct {
	Operator string // from the session; for a bearer client, from the form
	Bearer   bool
	session  string // the session cookie's value, for the CSRF token
}

// opsKind says how a route answers an unauthenticated request.
type opsKind int

const (
	opsPage   opsKind = iota // 401 with the login page as its body
	opsJSON                  // 401 with a JSON error
	opsAction                // the login page for browsers, else JSON
)

type opsHandler func(http.ResponseWriter, *http.Request, opsWho)

// authenticate finds the caller. An Authorization header decides alone:
// a wrong token is refused even with a valid cookie.
func (o *Ops) authenticate(r *http.Request) (opsWho, bool) {
	if r.Header.Get("Authorization") != "" {
		tok, ok := bearer(r)
		if !ok {
			return opsWho{}, false
		}
		sum := sha256.Sum256([]byte(tok))
		if subtle.ConstantTimeCompare(sum[:], o.tokenHash[:]) != 1 {
			return opsWho{}, false
		}
		return opsWho{Bearer: true}, true
	}
	c, err := r.Cookie(opsSessionCookie)
	if err != nil {
		return opsWho{}, false
	}
	name, ok := o.verifySession(c.Value)
	if !ok {
		return opsWho{}, false
	}
	return opsWho{Operator: name, session: c.Value}, true
}

func (o *Ops) auth(kind opsKind, next opsHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, ok := o.authenticate(r)
		if !ok {
			o.unauthorized(w, r, kind)
			return
		}
		next(w, r, who)
	})
}

func (o *Ops) unauthorized(w http.ResponseWriter, r *http.Request, kind opsKind) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="payrecon-ops"`)
	msg := "Sign in to see the operator pages."
	if r.Header.Get("Authorization") != "" {
		msg = "The Authorization header does not carry the operator token."
	} else if _, err := r.Cookie(opsSessionCookie); err == nil {
		msg = "Your session has expired or is not valid. Sign in again."
	}
	if kind == opsJSON || (kind == opsAction && !acceptsHTML(r)) {
		writeError(w, http.StatusUnauthorized, "unauthorized",
			"the operator token is required: Authorization: Bearer <ops token>, or sign in at /ops/login")
		return
	}
	next := "/ops"
	switch id, fid := r.PathValue("id"), r.PathValue("fid"); {
	case r.Method == http.MethodGet:
		next = r.URL.Path
	case id != "":
		next = "/ops/purchases/" + id // back to the case after a refused action
	case fid != "":
		next = "/ops/findings/" + fid
	}
	o.renderLogin(w, r, http.StatusUnauthorized, msg, next, "")
}

// post wraps an action: cross-origin protection, authentication, the form
// (size-capped), the CSRF token for sessions and the operator name.
func (o *Ops) post(next opsHandler) http.Handler {
	return o.cop.Handler(o.auth(opsAction, func(w http.ResponseWriter, r *http.Request, who opsWho) {
		r.Body = http.MaxBytesReader(w, r.Body, opsMaxFormBytes)
		if err := r.ParseForm(); err != nil {
			o.actionError(w, r, who, http.StatusBadRequest, "invalid_request", "the form could not be read: "+err.Error())
			return
		}
		if who.Bearer {
			name, msg := opsCheckName(r.PostForm.Get("operator"))
			if msg != "" {
				o.actionError(w, r, who, http.StatusBadRequest, "invalid_request", "operator: "+msg+" (bearer clients name the operator in the form field \"operator\")")
				return
			}
			who.Operator = name
		} else if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(o.csrfToken(who.session))) {
			o.log.Warn("ops: POST without a valid CSRF token refused", "path", r.URL.Path, "operator", who.Operator)
			o.renderError(w, r, who, http.StatusForbidden, "Form token missing or not valid",
				"The form's security token is missing or does not match your session. Reload the case page and submit again.")
			return
		}
		next(w, r, who)
	}))
}

func (o *Ops) crossOriginDenied(w http.ResponseWriter, r *http.Request) {
	o.log.Warn("ops: cross-origin POST refused", "path", r.URL.Path,
		"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
	msg := "cross-origin request refused: operator actions are accepted only from the operator pages themselves"
	if !acceptsHTML(r) {
		writeError(w, http.StatusForbidden, "cross_origin", msg)
		return
	}
	o.renderError(w, r, opsWho{}, http.StatusForbidden, "Cross-origin request refused", msg+".")
}

func (o *Ops) sign(parts ...string) []byte {
	mac := hmac.New(sha256.New, o.key)
	for i, p := range parts {
		if i > 0 {
			mac.Write([]byte{0})
		}
		mac.Write([]byte(p))
	}
	return mac.Sum(nil)
}

// newSession returns the cookie value of a session for name.
func (o *Ops) newSession(name string, expires time.Time) string {
	payload := name + "|" + strconv.FormatInt(expires.Unix(), 10)
	sig := hex.EncodeToString(o.sign("session", payload))
	return base64.RawURLEncoding.EncodeToString([]byte(payload + "|" + sig))
}

// verifySession returns the operator of a valid, unexpired session.
func (o *Ops) verifySession(value string) (string, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil {
		return "", false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, '|')
	if i < 0 {
		return "", false
	}
	payload, sig := s[:i], s[i+1:]
	want := hex.EncodeToString(o.sign("session", payload))
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return "", false
	}
	j := strings.LastIndexByte(payload, '|')
	if j < 0 {
		return "", false
	}
	name, exp := payload[:j], payload[j+1:]
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || !o.cfg.Now().Before(time.Unix(unix, 0)) {
		return "", false
	}
	if n, msg := opsCheckName(name); msg != "" || n != name {
		return "", false
	}
	return name, true
}

func (o *Ops) csrfToken(session string) string {
	return base64.RawURLEncoding.EncodeToString(o.sign("csrf", session))
}

func (o *Ops) loginToken(nonce string) string {
	return base64.RawURLEncoding.EncodeToString(o.sign("login", nonce))
}

// opsCheckName trims an operator name and says what is wrong with it, if
// anything.
func opsCheckName(name string) (string, string) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return "", "is required"
	case !utf8.ValidString(name):
		return "", "is not valid UTF-8"
	case utf8.RuneCountInString(name) > opsMaxName:
		return "", fmt.Sprintf("is longer than %d characters", opsMaxName)
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '|' }):
		return "", "must not contain control characters or '|'"
	}
	return name, ""
}

func opsCheckText(field, text string) (string, string) {
	text = strings.TrimSpace(text)
	switch {
	case !utf8.ValidString(text):
		return "", field + ": is not valid UTF-8"
	case utf8.RuneCountInString(text) > opsMaxText:
		return "", fmt.Sprintf("%s: is longer than %d characters", field, opsMaxText)
	case strings.ContainsFunc(text, func(r rune) bool { return (r < 0x20 && r != '\n' && r != '\r' && r != '\t') || r == 0x7f }):
		return "", field + ": contains control characters"
	}
	return text, ""
}

// ---------------------------------------------------------------------
// Login and logout.

func (o *Ops) cookie(name, value string, maxAge time.Duration) *http.Cookie {
	c := &http.Cookie{
		Name: name, Value: value, Path: "/ops",
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode,
	}
	// Max-Age only: an Expires date would come from the injected clock,
	// while the browser judges it by its own.
	c.MaxAge = int(maxAge / time.Second)
	if maxAge <= 0 {
		c.MaxAge = -1 // delete
	}
	return c
}

// loginNonce returns the pre-session nonce of the request's login cookie,
// or sets a new one, so that two open login forms share it.
func (o *Ops) loginNonce(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(opsLoginCookie); err == nil && len(c.Value) == 32 {
		if _, err := hex.DecodeString(c.Value); err == nil {
			http.SetCookie(w, o.cookie(opsLoginCookie, c.Value, opsLoginNonceTTL))
			return c.Value
		}
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails
	nonce := hex.EncodeToString(b[:])
	http.SetCookie(w, o.cookie(opsLoginCookie, nonce, opsLoginNonceTTL))
	return nonce
}

// opsNextRE is the set of places a login may return to: operator pages
// only, never another host.
var opsNextRE = regexp.MustCompile(`^/ops(/[A-Za-z0-9_\-]+)*$`)

func opsNext(s string) string {
	if !opsNextRE.MatchString(s) || s == "/ops/login" || s == "/ops/logout" {
		return "/ops"
	}
	return s
}

func (o *Ops) loginForm(w http.ResponseWriter, r *http.Request) {
	msg := ""
	if who, ok := o.authenticate(r); ok && !who.Bearer {
		msg = "You are signed in as " + who.Operator + ". Signing in again replaces the session."
	}
	o.renderLogin(w, r, http.StatusOK, msg, r.URL.Query().Get("next"), "")
}

func (o *Ops) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, opsMaxFormBytes)
	if err := r.ParseForm(); err != nil {
		o.renderLogin(w, r, http.StatusBadRequest, "The form could not be read.", "/ops", "")
		return
	}
	next := opsNext(r.PostForm.Get("next"))
	name := r.PostForm.Get("operator")
	c, err := r.Cookie(opsLoginCookie)
	if err != nil || !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(o.loginToken(c.Value))) {
		o.log.Warn("ops: login without a valid form token refused")
		o.renderLogin(w, r, http.StatusForbidden, "The sign-in form expired or was not sent by this site. Submit it again.", next, name)
		return
	}
	name, msg := opsCheckName(name)
	if msg != "" {
		o.renderLogin(w, r, http.StatusBadRequest, "Your name "+msg+".", next, "")
		return
	}
	sum := sha256.Sum256([]byte(r.PostForm.Get("token")))
	if subtle.ConstantTimeCompare(sum[:], o.tokenHash[:]) != 1 {
		o.log.Warn("ops: login with a wrong token", "operator", name)
		o.renderLogin(w, r, http.StatusUnauthorized, "Wrong operator token.", next, name)
		return
	}
	expires := o.cfg.Now().Add(o.cfg.SessionTTL)
	http.SetCookie(w, o.cookie(opsSessionCookie, o.newSession(name, expires), o.cfg.SessionTTL))
	http.SetCookie(w, o.cookie(opsLoginCookie, "", 0))
	o.log.Info("ops: operator signed in", "operator", name)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (o *Ops) logout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, opsMaxFormBytes)
	_ = r.ParseForm()
	who, ok := o.authenticate(r)
	if ok && !who.Bearer {
		if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(o.csrfToken(who.session))) {
			o.renderError(w, r, who, http.StatusForbidden, "Form token missing or not valid",
				"The sign-out form's security token does not match your session. Reload the page and try again.")
			return
		}
		o.log.Info("ops: operator signed out", "operator", who.Operator)
	}
	http.SetCookie(w, o.cookie(opsSessionCookie, "", 0))
	http.Redirect(w, r, "/ops/login", http.StatusSeeOther)
}

// ---------------------------------------------------------------------
// JSON views.

type opsCaseJSON struct {
	PurchaseID        string           `json:"purchase_id"`
	ProviderPaymentID string           `json:"provider_payment_id,omitempty"`
	Amount            int64            `json:"amount"`
	Currency          string           `json:"currency"`
	AmountDisplay     string           `json:"amount_display"`
	Customer          string           `json:"customer"`
	Reference         string           `json:"reference,omitempty"`
	Description       string           `json:"description,omitempty"`
	State             string           `json:"state"`
	Final             bool             `json:"final"`
	Version           int64            `json:"version"`
	AgeSeconds        int64            `json:"age_seconds"`
	Age               string           `json:"age"`
	Escalated         bool             `json:"escalated"`
	EscalationReason  string           `json:"escalation_reason,omitempty"`
	EscalatedAt       *time.Time       `json:"escalated_at"`
	UncertainSince    *time.Time       `json:"uncertain_since"`
	CreatedAt         time.Time        `json:"created_at"`
	UpdatedAt         time.Time        `json:"updated_at"`
	Attempts          []attemptJSON    `json:"attempts"`
	Transitions       []transitionJSON `json:"transitions"`
	Webhooks          []opsWebhookJSON `json:"webhooks"`
	OperatorActions   []opsActionJSON  `json:"operator_actions"`
	// Findings are the audit's findings about the purchase, open and
	// closed.
	Findings []opsFindingJSON `json:"findings"`
	// LiveView is the provider's answer now; only on the single case.
	LiveView *opsLiveViewJSON `json:"live_view,omitempty"`
}

// opsFindingJSON is one finding of the audit from the provider's side.
// Amount and currency are the provider's payment's: the money at risk.
type opsFindingJSON struct {
	ID            int64      `json:"id"`
	Provider      string     `json:"provider"`
	Kind          string     `json:"kind"`
	PaymentID     string     `json:"payment_id"`
	PurchaseID    string     `json:"purchase_id,omitempty"`
	Amount        int64      `json:"amount"`
	Currency      string     `json:"currency"`
	AmountDisplay string     `json:"amount_display"`
	Status        string     `json:"status,omitempty"`
	Evidence      string     `json:"evidence"`
	FoundAt       time.Time  `json:"found_at"`
	Open          bool       `json:"open"`
	ClosedAt      *time.Time `json:"closed_at"`
	ClosedBy      string     `json:"closed_by,omitempty"`
	CloseNote     string     `json:"close_note,omitempty"`
}

func opsFindingToJSON(f reconcile.Finding) opsFindingJSON {
	return opsFindingJSON{
		ID: f.ID, Provider: f.Provider, Kind: string(f.Kind), PaymentID: f.PaymentID, PurchaseID: f.PurchaseID,
		Amount: f.Amount, Currency: f.Currency, AmountDisplay: opsAmount(f.Amount, f.Currency), Status: f.Status,
		Evidence: f.Evidence, FoundAt: f.FoundAt, Open: f.Open(), ClosedAt: opsTimePtr(f.ClosedAt),
		ClosedBy: f.ClosedBy, CloseNote: f.CloseNote,
	}
}

func opsFindingsToJSON(fs []reconcile.Finding) []opsFindingJSON {
	out := make([]opsFindingJSON, 0, len(fs))
	for _, f := range fs {
		out = append(out, opsFindingToJSON(f))
	}
	return out
}

type opsWebhookJSON struct {
	Provider    string     `json:"provider"`
	EventID     string     `json:"event_id"`
	Type        string     `json:"type"`
	PaymentID   string     `json:"payment_id,omitempty"`
	Result      string     `json:"result,omitempty"`
	Outcome     string     `json:"outcome"`
	ReceivedAt  time.Time  `json:"received_at"`
	ProcessedAt *time.Time `json:"processed_at"`
}

type opsActionJSON struct {
	Operator string    `json:"operator"`
	Action   string    `json:"action"`
	Saw      string    `json:"saw,omitempty"`
	Did      string    `json:"did"`
	Evidence string    `json:"evidence,omitempty"`
	At       time.Time `json:"at"`
}

type opsLiveViewJSON struct {
	Outcome   string `json:"outcome"`
	Status    string `json:"status,omitempty"`
	PaymentID string `json:"payment_id,omitempty"`
	Amount    int64  `json:"amount,omitempty"`
	Currency  string `json:"currency,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// Text is the view as the audit records it. A resolution fetches and
	// records its own live view; this one is for the operator to read.
	Text  string `json:"text"`
	Error string `json:"error,omitempty"`
}

func opsTimePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func opsCaseToJSON(c reconcile.Case) opsCaseJSON {
	p := c.Purchase
	out := opsCaseJSON{
		PurchaseID: p.ID, ProviderPaymentID: p.ProviderPaymentID, Amount: p.Amount, Currency: p.Currency,
		AmountDisplay: opsAmount(p.Amount, p.Currency), Customer: p.Customer, Reference: p.Reference,
		Description: p.Description, State: string(p.State), Final: p.State.Terminal(), Version: p.Version,
		AgeSeconds: int64(c.Age / time.Second), Age: opsAge(c.Age), Escalated: p.Escalated(),
		EscalationReason: string(p.EscalationReason), EscalatedAt: opsTimePtr(p.EscalatedAt),
		UncertainSince: opsTimePtr(p.UncertainSince), CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
		Attempts: toAttemptsJSON(c.Attempts), Transitions: toTransitionsJSON(c.Transitions),
		Webhooks: []opsWebhookJSON{}, OperatorActions: []opsActionJSON{}, Findings: opsFindingsToJSON(c.Findings),
	}
	for _, e := range c.Events {
		out.Webhooks = append(out.Webhooks, opsWebhookJSON{
			Provider: e.Provider, EventID: e.EventID, Type: e.Type, PaymentID: e.ObjectID, Result: string(e.Result),
			Outcome: string(e.Outcome), ReceivedAt: e.ReceivedAt, ProcessedAt: opsTimePtr(e.ProcessedAt),
		})
	}
	for _, a := range c.Actions {
		out.OperatorActions = append(out.OperatorActions, opsActionJSON{
			Operator: a.Operator, Action: a.Action, Saw: a.Saw, Did: a.Did, Evidence: a.Evidence, At: a.At,
		})
	}
	return out
}

func (o *Ops) listJSON(w http.ResponseWriter, r *http.Request, _ opsWho) {
	cases, err := o.svc.Escalations(r.Context())
	if err != nil {
		o.log.Error("ops: list escalations", "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "could not read the escalated cases; try again")
		return
	}
	findings, err := o.svc.Findings(r.Context(), false)
	if err != nil {
		o.log.Error("ops: list findings", "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "could not read the audit findings; try again")
		return
	}
	out := make([]opsCaseJSON, 0, len(cases))
	for _, c := range cases {
		out = append(out, opsCaseToJSON(c))
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"count": len(out), "cases": out,
		"findings_count": len(findings), "findings": opsFindingsToJSON(findings),
		"money_at_risk": opsMoneyAtRisk(findings),
	})
}

// findingsJSON lists the audit's findings: the open ones, or all of them
// with ?all=1.
func (o *Ops) findingsJSON(w http.ResponseWriter, r *http.Request, _ opsWho) {
	all, ok := opsBool(r.URL.Query().Get("all"))
	if !ok {
		writeError(w, http.StatusBadRequest, "invalid_request", "all: "+quote(r.URL.Query().Get("all"))+" is not a yes/no value")
		return
	}
	findings, err := o.svc.Findings(r.Context(), all)
	if err != nil {
		o.log.Error("ops: list findings", "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "could not read the audit findings; try again")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": len(findings), "findings": opsFindingsToJSON(findings)})
}

// opsMoneyAtRisk sums the open findings' amounts per currency, formatted
// for people ("12.50 EUR"), currencies in alphabetical order.
func opsMoneyAtRisk(fs []reconcile.Finding) []string {
	sum := map[string]int64{}
	for _, f := range fs {
		if f.Open() {
			sum[strings.ToLower(f.Currency)] += f.Amount
		}
	}
	curs := make([]string, 0, len(sum))
	for c := range sum {
		curs = append(curs, c)
	}
	sort.Strings(curs)
	out := make([]string, 0, len(curs))
	for _, c := range curs {
		out = append(out, opsAmount(sum[c], c))
	}
	return out
}

// ---------------------------------------------------------------------
// Pages.

// opsBase is what every page's layout needs.
type opsBase struct {
	Title    string
	Operator string // signed-in operator; empty for bearer clients
	CSRF     string // token for the session's forms
}

func (o *Ops) base(title string, who opsWho) opsBase {
	b := opsBase{Title: title, Operator: who.Operator}
	if who.session != "" {
		b.CSRF = o.csrfToken(who.session)
	}
	return b
}

// render writes a page: headers that forbid framing, caching and any
// outside resource, then the template executed into a buffer first, so a
// template error becomes a clean 500.
func (o *Ops) render(w http.ResponseWriter, status int, page string, data any) {
	var buf bytes.Buffer
	if err := o.pages[page].ExecuteTemplate(&buf, "layout", data); err != nil {
		o.log.Error("ops: render page", "page", page, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy",
		"default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type opsLoginData struct {
	opsBase
	Message string
	Next    string
	Name    string
	Form    string // the login form token
}

func (o *Ops) renderLogin(w http.ResponseWriter, r *http.Request, status int, msg, next, name string) {
	nonce := o.loginNonce(w, r)
	o.render(w, status, "login", opsLoginData{
		opsBase: opsBase{Title: "Sign in"}, Message: msg, Next: opsNext(next), Name: name, Form: o.loginToken(nonce),
	})
}

type opsErrorData struct {
	opsBase
	Heading string
	Message string
	Back    string
}

func (o *Ops) renderError(w http.ResponseWriter, r *http.Request, who opsWho, status int, heading, msg string) {
	back := "/ops"
	if id := r.PathValue("id"); id != "" {
		back = "/ops/purchases/" + url.PathEscape(id)
	} else if fid := r.PathValue("fid"); fid != "" && r.Method != http.MethodGet {
		back = "/ops/findings/" + url.PathEscape(fid)
	}
	o.render(w, status, "error", opsErrorData{opsBase: o.base(heading, who), Heading: heading, Message: msg, Back: back})
}

type opsRow struct {
	ID, PaymentID, Amount, Customer, Reference, Age, Reason, State string
	EscalatedAt                                                    time.Time
}

type opsListData struct {
	opsBase
	Rows        []opsRow
	Findings    []opsFindingRow
	MoneyAtRisk []string
	Now         time.Time
}

// opsFindingRow is an audit finding as the pages show it.
type opsFindingRow struct {
	ID                                 int64
	Kind, PaymentID, PurchaseID        string
	Amount, Status, Evidence, Provider string
	FoundAt                            time.Time
	Open                               bool
	ClosedAt                           time.Time
	ClosedBy, CloseNote                string
}

func opsFindingRows(fs []reconcile.Finding) []opsFindingRow {
	out := make([]opsFindingRow, 0, len(fs))
	for _, f := range fs {
		out = append(out, opsFindingRow{
			ID: f.ID, Kind: string(f.Kind), PaymentID: f.PaymentID, PurchaseID: f.PurchaseID,
			Amount: opsAmount(f.Amount, f.Currency), Status: f.Status, Evidence: f.Evidence, Provider: f.Provider,
			FoundAt: f.FoundAt, Open: f.Open(), ClosedAt: f.ClosedAt, ClosedBy: f.ClosedBy, CloseNote: f.CloseNote,
		})
	}
	return out
}

func (o *Ops) listPage(w http.ResponseWriter, r *http.Request, who opsWho) {
	cases, err := o.svc.Escalations(r.Context())
	if err != nil {
		o.log.Error("ops: list escalations", "err", err)
		o.renderError(w, r, who, http.StatusInternalServerError, "Could not read the cases", "The escalated cases could not be read from the database. Reload to try again.")
		return
	}
	findings, err := o.svc.Findings(r.Context(), false)
	if err != nil {
		o.log.Error("ops: list findings", "err", err)
		o.renderError(w, r, who, http.StatusInternalServerError, "Could not read the findings", "The audit findings could not be read from the database. Reload to try again.")
		return
	}
	data := opsListData{
		opsBase: o.base("Operator list", who), Now: o.cfg.Now().UTC(),
		Findings: opsFindingRows(findings), MoneyAtRisk: opsMoneyAtRisk(findings),
	}
	for _, c := range cases {
		p := c.Purchase
		data.Rows = append(data.Rows, opsRow{
			ID: p.ID, PaymentID: p.ProviderPaymentID, Amount: opsAmount(p.Amount, p.Currency), Customer: p.Customer,
			Reference: p.Reference, Age: opsAge(c.Age), Reason: string(p.EscalationReason), State: string(p.State),
			EscalatedAt: p.EscalatedAt,
		})
	}
	o.render(w, http.StatusOK, "list", data)
}

// opsEntry is one line of a case's timeline.
type opsEntry struct {
	At     time.Time
	Kind   string // transition, provider, webhook, operator
	Title  string
	Detail string
	Actor  string
	State  string // for transitions: the target state, for its badge
}

func opsTimeline(c reconcile.Case) []opsEntry {
	var out []opsEntry
	for _, a := range c.Attempts {
		title := fmt.Sprintf("%s → %s", a.Op, a.Outcome)
		var d []string
		if a.Status != "" {
			d = append(d, "status "+a.Status)
		}
		if a.PaymentID != "" {
			d = append(d, "payment "+a.PaymentID)
		}
		if a.Key != "" {
			d = append(d, "key "+a.Key)
		}
		if a.Error != "" {
			d = append(d, "error: "+a.Error)
		}
		if a.Note != "" {
			d = append(d, a.Note)
		}
		switch {
		case a.Derived:
			d = append(d, "sent, no answer recorded")
		case !a.Applied:
			d = append(d, "answer not applied")
		}
		d = append(d, fmt.Sprintf("%.1f ms", float64(a.Latency.Microseconds())/1000))
		out = append(out, opsEntry{At: a.At, Kind: "provider", Title: title, Detail: strings.Join(d, " · "), Actor: a.Actor})
	}
	for _, e := range c.Events {
		d := "outcome " + string(e.Outcome)
		if e.ObjectID != "" {
			d += " · payment " + e.ObjectID
		}
		if e.Result != "" {
			d += " · reports " + string(e.Result)
		}
		out = append(out, opsEntry{At: e.ReceivedAt, Kind: "webhook", Title: e.Provider + " " + e.Type + " (" + e.EventID + ")", Detail: d, Actor: e.Provider})
	}
	for _, t := range c.Transitions {
		out = append(out, opsEntry{
			At: t.At, Kind: "transition", Title: string(t.From) + " → " + string(t.To) + " (" + string(t.Cause) + ")",
			Detail: t.Evidence, Actor: t.Actor, State: string(t.To),
		})
	}
	for _, a := range c.Actions {
		d := a.Did
		if a.Evidence != "" {
			d += " · " + a.Evidence
		}
		if a.Saw != "" {
			d += " · provider showed: " + a.Saw
		}
		out = append(out, opsEntry{At: a.At, Kind: "operator", Title: a.Action + " by " + a.Operator, Detail: d, Actor: a.Operator})
	}
	// Entries at the same instant (a coarse or fake clock) keep the
	// protocol's order: the move that starts a call, the call and any
	// event, the move its answer makes, then the operator's record.
	rank := func(e opsEntry) int {
		switch {
		case e.Kind == "transition" && (e.State == string(statemachine.Submitted) || e.State == string(statemachine.Reconciling)):
			return 0
		case e.Kind == "provider" || e.Kind == "webhook":
			return 1
		case e.Kind == "transition":
			return 2
		}
		return 3
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].At.Equal(out[j].At) {
			return out[i].At.Before(out[j].At)
		}
		return rank(out[i]) < rank(out[j])
	})
	return out
}

type opsFlash struct {
	Error bool
	Text  string
}

// opsForm keeps what the operator typed when an action is refused.
type opsForm struct {
	To, Evidence, Note, Override string
	Close                        bool
	// Disagrees is set when the provider refused the resolution: the
	// override field is then shown open, with the provider's answer.
	Disagrees bool
}

type opsCaseData struct {
	opsBase
	P          reconcile.Purchase
	ID         string // path-escaped id, for form actions
	Amount     string
	Age        string
	Final      bool
	Timeline   []opsEntry
	Live       *provider.Result
	LiveText   string
	LiveErr    string
	CanResolve bool
	NoResolve  string // why there is no resolve form
	CanClose   bool
	Flash      *opsFlash
	Form       opsForm
	Findings   []opsFindingRow
	OpenFinds  int // how many of Findings are open
}

func (o *Ops) casePage(w http.ResponseWriter, r *http.Request, who opsWho) {
	var flash *opsFlash
	q := r.URL.Query()
	if msg := q.Get("flash"); msg != "" && hmac.Equal([]byte(q.Get("fs")), []byte(o.flashSig(r.PathValue("id"), msg))) {
		flash = &opsFlash{Text: msg}
	}
	o.showCase(w, r, who, http.StatusOK, flash, opsForm{})
}

// showCase renders a case, or its JSON for script clients, with the
// provider's live view fetched now.
func (o *Ops) showCase(w http.ResponseWriter, r *http.Request, who opsWho, status int, flash *opsFlash, form opsForm) {
	id := r.PathValue("id")
	asJSON := opsWantsJSON(r, who)
	// The case first, then the live view: the version shown is never
	// newer than what the provider was asked about, so a resolve based on
	// this page is refused as stale if anything moved in between.
	c, err := o.svc.Case(r.Context(), id)
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		if asJSON {
			writeError(w, http.StatusNotFound, "not_found", "no purchase with id "+quote(id))
			return
		}
		o.renderError(w, r, who, http.StatusNotFound, "No such purchase", "There is no purchase with id "+quote(id)+".")
		return
	case err != nil:
		o.log.Error("ops: read case", "purchase", id, "err", err)
		if asJSON {
			writeError(w, http.StatusInternalServerError, "internal", "could not read the purchase")
			return
		}
		o.renderError(w, r, who, http.StatusInternalServerError, "Could not read the purchase", "The purchase could not be read from the database. Reload to try again.")
		return
	}
	live, lerr := o.svc.LiveView(r.Context(), id)
	if asJSON {
		out := opsCaseToJSON(c)
		lv := &opsLiveViewJSON{}
		if lerr != nil {
			o.log.Error("ops: live view", "purchase", id, "err", lerr)
			lv.Error = "the provider's live view could not be fetched: " + lerr.Error()
		} else {
			*lv = opsLiveViewJSON{
				Outcome: string(live.Outcome), Status: live.Status, PaymentID: live.PaymentID, Amount: live.Amount,
				Currency: live.Currency, Reason: live.Reason, Text: reconcile.DescribeView(live),
			}
		}
		out.LiveView = lv
		writeJSON(w, status, out)
		return
	}
	p := c.Purchase
	data := opsCaseData{
		opsBase: o.base("Purchase "+p.ID, who), P: p, ID: url.PathEscape(p.ID),
		Amount: opsAmount(p.Amount, p.Currency), Age: opsAge(c.Age), Final: p.State.Terminal(),
		Timeline: opsTimeline(c), Flash: flash, Form: form, Findings: opsFindingRows(c.Findings),
	}
	for _, f := range c.Findings {
		if f.Open() {
			data.OpenFinds++
		}
	}
	if lerr != nil {
		o.log.Error("ops: live view", "purchase", id, "err", lerr)
		data.LiveErr = "The provider's live view could not be fetched (" + lerr.Error() + "). Reload the page to ask again."
	} else {
		data.Live, data.LiveText = &live, reconcile.DescribeView(live)
	}
	switch {
	case p.State.Terminal():
		data.NoResolve = "This purchase is final (" + string(p.State) + "): an operator cannot change a final state. " +
			"If the provider disagrees with it (a contradiction), handle the money outside payrecon, " +
			"then close the escalation with a note."
	case p.State == statemachine.Created && !p.EscalationReason.ChargeMayExist():
		data.NoResolve = "This purchase was never submitted to the provider, so there is no charge to settle. " +
			"Recheck it to let the worker submit it."
	case lerr != nil:
		data.NoResolve = "Resolving needs the provider's live view, which could not be fetched. Reload the page."
	default:
		data.CanResolve = true
	}
	data.CanClose = p.State.Terminal() && p.Escalated()
	o.render(w, status, "case", data)
}

// ---------------------------------------------------------------------
// Actions.

func (o *Ops) flashSig(id, msg string) string {
	return base64.RawURLEncoding.EncodeToString(o.sign("flash", id, msg)[:16])
}

// done answers a successful action: JSON for scripts, else a redirect to
// the case page with a signed flash message (unsigned ones are ignored,
// so a link cannot put words on the page).
func (o *Ops) done(w http.ResponseWriter, r *http.Request, who opsWho, msg string) {
	id := r.PathValue("id")
	if opsWantsJSON(r, who) {
		c, err := o.svc.Case(r.Context(), id)
		if err != nil {
			writeJSON(w, http.StatusOK, map[string]any{"message": msg})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"message": msg, "case": opsCaseToJSON(c)})
		return
	}
	q := url.Values{"flash": {msg}, "fs": {o.flashSig(id, msg)}}
	http.Redirect(w, r, "/ops/purchases/"+url.PathEscape(id)+"?"+q.Encode(), http.StatusSeeOther)
}

// actionError answers a refused action: JSON for scripts; for browsers
// the case page again, with the message, the status and what they typed.
func (o *Ops) actionError(w http.ResponseWriter, r *http.Request, who opsWho, status int, code, msg string) {
	if opsWantsJSON(r, who) {
		if status == http.StatusConflict && code == "busy" {
			w.Header().Set("Retry-After", "5")
		}
		writeError(w, status, code, msg)
		return
	}
	if r.PathValue("fid") != "" { // an action on an audit finding
		if status == http.StatusNotFound {
			o.renderError(w, r, who, status, "No such finding", msg)
			return
		}
		o.showFinding(w, r, who, status, &opsFlash{Error: true, Text: msg}, r.PostForm.Get("note"))
		return
	}
	if status == http.StatusNotFound {
		o.renderError(w, r, who, status, "No such purchase", msg)
		return
	}
	form := opsForm{
		To: r.PostForm.Get("to"), Evidence: r.PostForm.Get("evidence"), Override: r.PostForm.Get("override_provider"),
		Note: r.PostForm.Get("text"), Close: r.PostForm.Get("close") != "",
		Disagrees: code == "provider_disagrees",
	}
	o.showCase(w, r, who, status, &opsFlash{Error: true, Text: msg}, form)
}

// serviceError maps an error of the Service to a status and a message an
// operator can act on.
func (o *Ops) serviceError(w http.ResponseWriter, r *http.Request, who opsWho, action string, err error) {
	id := r.PathValue("id")
	var status int
	var code, msg string
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		status, code, msg = http.StatusNotFound, "not_found", "There is no purchase with id "+quote(id)+"."
	case errors.Is(err, reconcile.ErrStale):
		status, code = http.StatusConflict, "stale"
		msg = "Not done: the purchase changed since this page was shown (" + opsReason(err, reconcile.ErrStale) +
			"). Look at it again, with the provider's live view as it is now, before deciding."
	case errors.Is(err, reconcile.ErrAlreadyFinal):
		status, code = http.StatusConflict, "already_final"
		msg = "Not done: the purchase is already final (" + opsReason(err, reconcile.ErrAlreadyFinal) +
			"). An operator cannot change a final state."
	case errors.Is(err, reconcile.ErrBusy):
		status, code = http.StatusConflict, "busy"
		msg = "Not done: a worker is checking this purchase right now. Reload in a few seconds and look again."
	case errors.Is(err, reconcile.ErrForbiddenTransition):
		status, code = http.StatusConflict, "forbidden_transition"
		msg = "Not done: the state machine does not allow this from the purchase's current state (" + opsReason(err, reconcile.ErrForbiddenTransition) + ")."
	case errors.Is(err, reconcile.ErrProviderDisagrees):
		o.providerDisagrees(w, r, who, err)
		return
	case errors.Is(err, reconcile.ErrInvalid):
		status, code = http.StatusBadRequest, "invalid_request"
		msg = "Not done: " + opsInvalid(err)
	default:
		o.log.Error("ops: action", "action", action, "purchase", id, "operator", who.Operator, "err", err)
		status, code = http.StatusInternalServerError, "internal"
		msg = "Not done: an internal error stopped the " + action + ". Nothing was changed; reload the page and try again."
	}
	o.actionError(w, r, who, status, code, msg)
}

// providerDisagrees answers a resolution the provider's live view
// contradicts: 409 provider_disagrees, saying what the provider answered
// (the live view Resolve fetched and recorded, and the judge's reason)
// and how to override it. JSON clients get the answer in
// error.provider_answer too.
func (o *Ops) providerDisagrees(w http.ResponseWriter, r *http.Request, who opsWho, err error) {
	id := r.PathValue("id")
	why, _, _ := strings.Cut(opsReason(err, reconcile.ErrProviderDisagrees), "; resolve with an override")
	answer := o.lastLiveView(r, id, who.Operator)
	o.log.Warn("ops: resolve refused: the provider disagrees", "purchase", id, "operator", who.Operator, "why", why, "provider", answer)
	msg := "Not done: the provider's live view contradicts this resolution: " + why + "."
	if answer != "" {
		msg += " The provider answered: " + answer + "."
	}
	if opsWantsJSON(r, who) {
		msg += " Nothing changed. If you are sure the provider is wrong, resolve again with override_provider set to your reason; the provider's answer and your reason are both recorded."
		writeJSON(w, http.StatusConflict, map[string]any{"error": map[string]string{
			"code": "provider_disagrees", "message": msg, "reason": why, "provider_answer": answer,
		}})
		return
	}
	msg += " Nothing changed. If you are sure the provider is wrong, give your reason under \"Override the provider\" and resolve again; the provider's answer and your reason are both recorded."
	o.actionError(w, r, who, http.StatusConflict, "provider_disagrees", msg)
}

// lastLiveView describes the provider call Resolve made for operator, the
// latest call the purchase's audit records under that operator, or "".
func (o *Ops) lastLiveView(r *http.Request, id, operator string) string {
	c, err := o.svc.Case(r.Context(), id)
	if err != nil {
		return ""
	}
	for i := len(c.Attempts) - 1; i >= 0; i-- {
		a := c.Attempts[i]
		if a.Actor != "operator:"+operator {
			continue
		}
		parts := []string{string(a.Op) + " → " + string(a.Outcome)}
		if a.Status != "" {
			parts = append(parts, "status "+a.Status)
		}
		if a.PaymentID != "" {
			parts = append(parts, "payment "+a.PaymentID)
		}
		if a.Error != "" {
			parts = append(parts, "error: "+a.Error)
		}
		return strings.Join(parts, ", ")
	}
	return ""
}

// opsReason returns the detail that follows sentinel's text in err's
// message, or the whole message.
func opsReason(err, sentinel error) string {
	s := err.Error()
	if i := strings.Index(s, sentinel.Error()); i >= 0 {
		if rest := strings.TrimLeft(s[i+len(sentinel.Error()):], ": "); rest != "" {
			return rest
		}
		return sentinel.Error()
	}
	return s
}

// opsInvalid lists the invalid fields of err, or its message.
func opsInvalid(err error) string {
	var msgs []string
	var walk func(error)
	walk = func(e error) {
		switch x := e.(type) {
		case *reconcile.FieldError:
			msgs = append(msgs, x.Error())
		case interface{ Unwrap() []error }:
			for _, in := range x.Unwrap() {
				walk(in)
			}
		case interface{ Unwrap() error }:
			walk(x.Unwrap())
		}
	}
	walk(err)
	if len(msgs) == 0 {
		return opsReason(err, reconcile.ErrInvalid)
	}
	return strings.Join(msgs, "; ")
}

func (o *Ops) recheck(w http.ResponseWriter, r *http.Request, who opsWho) {
	id := r.PathValue("id")
	before, err := o.svc.Case(r.Context(), id)
	if err != nil {
		o.serviceError(w, r, who, "recheck", err)
		return
	}
	after, err := o.svc.Recheck(r.Context(), id, who.Operator)
	if err != nil {
		o.serviceError(w, r, who, "recheck", err)
		return
	}
	o.log.Info("ops: recheck", "purchase", id, "operator", who.Operator, "from", before.Purchase.State, "to", after.State)
	msg := fmt.Sprintf("Rechecked with the provider: %s → %s.", before.Purchase.State, after.State)
	if !after.State.Terminal() {
		msg += " The outcome is still not known."
	}
	o.done(w, r, who, msg)
}

func (o *Ops) resolve(w http.ResponseWriter, r *http.Request, who opsWho) {
	f := r.PostForm
	evidence, bad := opsCheckText("evidence", f.Get("evidence"))
	if bad != "" {
		o.actionError(w, r, who, http.StatusBadRequest, "invalid_request", "Not done: "+bad)
		return
	}
	override, bad := opsCheckText("override_provider", f.Get("override_provider"))
	if bad != "" {
		o.actionError(w, r, who, http.StatusBadRequest, "invalid_request", "Not done: "+bad)
		return
	}
	version, err := strconv.ParseInt(strings.TrimSpace(f.Get("version")), 10, 64)
	if err != nil || version <= 0 {
		o.actionError(w, r, who, http.StatusBadRequest, "invalid_request",
			"Not done: version: is required: the purchase version shown with the live view (reload the case page)")
		return
	}
	to := statemachine.State(strings.TrimSpace(f.Get("to")))
	p, err := o.svc.Resolve(r.Context(), reconcile.Resolution{
		PurchaseID: r.PathValue("id"), Operator: who.Operator, To: to,
		Evidence: evidence, Version: version, OverrideProvider: override,
	})
	if err != nil {
		o.serviceError(w, r, who, "resolve", err)
		return
	}
	o.log.Info("ops: resolved", "purchase", p.ID, "operator", who.Operator, "to", p.State, "override", override)
	msg := fmt.Sprintf("Resolved as %s by %s.", p.State, who.Operator)
	if override != "" {
		msg = fmt.Sprintf("Resolved as %s by %s, with an override reason recorded beside the provider's answer.", p.State, who.Operator)
	}
	o.done(w, r, who, msg)
}

func (o *Ops) note(w http.ResponseWriter, r *http.Request, who opsWho) {
	text, bad := opsCheckText("text", r.PostForm.Get("text"))
	if bad != "" {
		o.actionError(w, r, who, http.StatusBadRequest, "invalid_request", "Not done: "+bad)
		return
	}
	close, ok := opsBool(r.PostForm.Get("close"))
	if !ok {
		o.actionError(w, r, who, http.StatusBadRequest, "invalid_request",
			"Not done: close: "+quote(strings.TrimSpace(r.PostForm.Get("close")))+" is not a yes/no value")
		return
	}
	id := r.PathValue("id")
	if err := o.svc.Note(r.Context(), id, who.Operator, text, close); err != nil {
		o.serviceError(w, r, who, "note", err)
		return
	}
	msg := "Note added."
	if close {
		msg = "Note added; the escalation is closed."
	}
	o.log.Info("ops: note", "purchase", id, "operator", who.Operator, "close", close)
	o.done(w, r, who, msg)
}

// ---------------------------------------------------------------------
// Audit findings.

type opsFindingData struct {
	opsBase
	F     opsFindingRow
	Flash *opsFlash
	Note  string // what the operator typed, when closing was refused
}

// findingFlashSig signs a flash message for a finding's page, apart from
// those of purchase pages.
func (o *Ops) findingFlashSig(fid, msg string) string {
	return base64.RawURLEncoding.EncodeToString(o.sign("flash finding", fid, msg)[:16])
}

// findingID parses the {fid} of the path; false when it is no finding id.
func findingID(r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("fid"), 10, 64)
	return id, err == nil && id > 0
}

func (o *Ops) findingPage(w http.ResponseWriter, r *http.Request, who opsWho) {
	var flash *opsFlash
	q := r.URL.Query()
	if msg := q.Get("flash"); msg != "" && hmac.Equal([]byte(q.Get("fs")), []byte(o.findingFlashSig(r.PathValue("fid"), msg))) {
		flash = &opsFlash{Text: msg}
	}
	o.showFinding(w, r, who, http.StatusOK, flash, "")
}

// showFinding renders a finding, or its JSON for script clients.
func (o *Ops) showFinding(w http.ResponseWriter, r *http.Request, who opsWho, status int, flash *opsFlash, note string) {
	asJSON := opsWantsJSON(r, who)
	id, ok := findingID(r)
	var f reconcile.Finding
	var err error
	if ok {
		f, err = o.svc.Finding(r.Context(), id)
	}
	switch {
	case !ok || errors.Is(err, reconcile.ErrNotFound):
		msg := "There is no audit finding with id " + quote(r.PathValue("fid")) + "."
		if asJSON {
			writeError(w, http.StatusNotFound, "not_found", msg)
			return
		}
		o.renderError(w, r, who, http.StatusNotFound, "No such finding", msg)
		return
	case err != nil:
		o.log.Error("ops: read finding", "finding", id, "err", err)
		if asJSON {
			writeError(w, http.StatusInternalServerError, "internal", "could not read the finding")
			return
		}
		o.renderError(w, r, who, http.StatusInternalServerError, "Could not read the finding", "The finding could not be read from the database. Reload to try again.")
		return
	}
	if asJSON {
		writeJSON(w, status, opsFindingToJSON(f))
		return
	}
	rows := opsFindingRows([]reconcile.Finding{f})
	o.render(w, status, "finding", opsFindingData{
		opsBase: o.base("Audit finding "+strconv.FormatInt(f.ID, 10), who), F: rows[0], Flash: flash, Note: note,
	})
}

// closeFinding closes an audit finding with the operator's note. It moves
// no money and no purchase.
func (o *Ops) closeFinding(w http.ResponseWriter, r *http.Request, who opsWho) {
	fail := func(status int, code, msg string) { o.actionError(w, r, who, status, code, msg) }
	id, ok := findingID(r)
	if !ok {
		fail(http.StatusNotFound, "not_found", "There is no audit finding with id "+quote(r.PathValue("fid"))+".")
		return
	}
	note, bad := opsCheckText("note", r.PostForm.Get("note"))
	if bad == "" && note == "" {
		bad = "note: is required: say how the finding was handled (a refund's id, who checked it)"
	}
	if bad != "" {
		fail(http.StatusBadRequest, "invalid_request", "Not done: "+bad)
		return
	}
	f, err := o.svc.CloseFinding(r.Context(), id, who.Operator, note)
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		fail(http.StatusNotFound, "not_found", "There is no audit finding with id "+quote(r.PathValue("fid"))+".")
		return
	case errors.Is(err, reconcile.ErrConflict):
		fail(http.StatusConflict, "already_closed", "Not done: the finding is already closed; nothing changed.")
		return
	case errors.Is(err, reconcile.ErrInvalid):
		fail(http.StatusBadRequest, "invalid_request", "Not done: "+opsInvalid(err))
		return
	case err != nil:
		o.log.Error("ops: close finding", "finding", id, "operator", who.Operator, "err", err)
		fail(http.StatusInternalServerError, "internal", "Not done: an internal error stopped closing the finding. Nothing was changed; reload the page and try again.")
		return
	}
	o.log.Info("ops: closed audit finding", "finding", id, "kind", f.Kind, "operator", who.Operator)
	msg := fmt.Sprintf("Finding %d closed by %s.", f.ID, who.Operator)
	if opsWantsJSON(r, who) {
		writeJSON(w, http.StatusOK, map[string]any{"message": msg, "finding": opsFindingToJSON(f)})
		return
	}
	fid := strconv.FormatInt(f.ID, 10)
	q := url.Values{"flash": {msg}, "fs": {o.findingFlashSig(fid, msg)}}
	http.Redirect(w, r, "/ops/findings/"+fid+"?"+q.Encode(), http.StatusSeeOther)
}

// ---------------------------------------------------------------------
// Helpers.

// opsBool parses a yes/no form or query value; "" is no.
func opsBool(v string) (value, ok bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "0", "false", "off", "no":
		return false, true
	case "1", "true", "on", "yes":
		return true, true
	}
	return false, false
}

// acceptsHTML reports whether the client asks for an HTML page.
func acceptsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// opsWantsJSON: an explicit Accept decides; otherwise scripts (bearer
// clients) get JSON and browsers (sessions) pages.
func opsWantsJSON(r *http.Request, who opsWho) bool {
	accept := r.Header.Get("Accept")
	switch {
	case strings.Contains(accept, "application/json"):
		return true
	case strings.Contains(accept, "text/html"):
		return false
	}
	return who.Bearer
}

// opsZeroDecimal lists the supported currencies without minor units.
var opsZeroDecimal = map[string]bool{"jpy": true, "krw": true}

// opsAmount formats minor units for people: "12.34 EUR".
func opsAmount(minor int64, currency string) string {
	cur := strings.ToUpper(currency)
	if opsZeroDecimal[currency] {
		return strconv.FormatInt(minor, 10) + " " + cur
	}
	sign := ""
	if minor < 0 {
		sign, minor = "-", -minor
	}
	return fmt.Sprintf("%s%d.%02d %s", sign, minor/100, minor%100, cur)
}

// opsAge renders a duration for people: "2d 3h", "4h 12m", "5m 3s".
func opsAge(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	d = d.Round(time.Second)
	days, d := d/(24*time.Hour), d%(24*time.Hour)
	h, d := d/time.Hour, d%time.Hour
	m, s := d/time.Minute, (d%time.Minute)/time.Second
	switch {
	case days > 0:
		return fmt.Sprintf("%dd %dh", days, h)
	case h > 0:
		return fmt.Sprintf("%dh %dm", h, m)
	case m > 0:
		return fmt.Sprintf("%dm %ds", m, s)
	}
	return fmt.Sprintf("%ds", s)
}

var opsFuncs = template.FuncMap{
	"fmtTime": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"isoTime": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"orDash": func(s string) string {
		if s == "" {
			return "—"
		}
		return s
	},
	"stateLabel": func(s string) string {
		switch statemachine.State(s) {
		case statemachine.Uncertain:
			return "uncertain: outcome unknown"
		case statemachine.Reconciling:
			return "reconciling: checking"
		}
		return s
	},
	"reasonLabel": func(s string) string { return strings.ReplaceAll(s, "_", " ") },
}
