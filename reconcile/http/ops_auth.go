package http

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/payrecon/payrecon/reconcile"
)

// The operator pages' security: who the caller is, sessions, CSRF and
// form tokens, signed flash messages, login and logout.
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
//
// Every HMAC is keyed by Ops.key (see NewOps) and separates its uses by
// a first part: "session", "csrf", "login", "flash", "flash finding".

// opsWho is an authenticated caller.
type opsWho struct {
	Operator string // from the session; for a bearer client, from the form
	Bearer   bool
	session  string // the session cookie's value, for the CSRF token
}

// opsKind says how a route answers an unauthenticated request.
type opsKind int

const (
	opsPage   opsKind = iota // the login page, or JSON for clients that ask for it
	opsAction                // the login page for browsers, else JSON
)

type opsHandler func(http.ResponseWriter, *http.Request, opsWho)

// authenticate finds the caller. An Authorization header decides alone:
// a wrong token is refused even with a valid cookie. A bearer token is an
// attempt at the operator token, throttled per client (ops_throttle.go):
// while the client is locked out, wait is how long for, and the token is
// not compared.
func (o *Ops) authenticate(r *http.Request) (who opsWho, ok bool, wait time.Duration) {
	if r.Header.Get("Authorization") != "" {
		tok, ok := bearer(r)
		if !ok {
			return opsWho{}, false, 0
		}
		client := throttleClientKey(r)
		if wait := o.throttle.wait(client); wait > 0 {
			o.observeLogin(LoginThrottled)
			o.log.Warn("ops: bearer token refused unchecked: too many failed attempts", "client", client, "retry_after", wait)
			return opsWho{}, false, wait
		}
		if matchToken(tok, o.tokenHash) != 0 {
			o.throttle.failed(client)
			o.observeLogin(LoginFailure)
			return opsWho{}, false, 0
		}
		o.throttle.succeeded(client)
		o.observeLogin(LoginSuccess)
		return opsWho{Bearer: true}, true, 0
	}
	c, err := r.Cookie(opsSessionCookie)
	if err != nil {
		return opsWho{}, false, 0
	}
	name, ok := o.verifySession(c.Value)
	if !ok {
		return opsWho{}, false, 0
	}
	return opsWho{Operator: name, session: c.Value}, true, 0
}

func (o *Ops) auth(kind opsKind, next opsHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, ok, wait := o.authenticate(r)
		switch {
		case wait > 0:
			o.throttled(w, r, kind, wait, "")
		case !ok:
			o.unauthorized(w, r, kind)
		default:
			next(w, r, who)
		}
	})
}

// throttled answers an attempt at the operator token while its client
// (or, at the login form, its name) is locked out: 429 with Retry-After,
// as JSON for scripts, else the login page.
func (o *Ops) throttled(w http.ResponseWriter, r *http.Request, kind opsKind, wait time.Duration, name string) {
	w.Header().Set("Retry-After", retryAfter(wait))
	msg := fmt.Sprintf("too many failed attempts at the operator token: try again in %s seconds", retryAfter(wait))
	if opsWantsJSON(r) || (kind == opsAction && !acceptsHTML(r)) {
		writeError(w, http.StatusTooManyRequests, "too_many_attempts", msg)
		return
	}
	next := "/ops"
	if r.Method == http.MethodGet {
		next = r.URL.Path
	} else if v := r.PostForm.Get("next"); v != "" {
		next = v
	}
	o.renderLogin(w, r, http.StatusTooManyRequests, "Too many failed sign-ins from your address or for this name. Try again in "+
		retryAfter(wait)+" seconds.", next, name)
}

func (o *Ops) unauthorized(w http.ResponseWriter, r *http.Request, kind opsKind) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="payrecon-ops"`)
	msg := "Sign in to see the operator pages."
	if r.Header.Get("Authorization") != "" {
		msg = "The Authorization header does not carry the operator token."
	} else if _, err := r.Cookie(opsSessionCookie); err == nil {
		msg = "Your session has expired or is not valid. Sign in again."
	}
	if opsWantsJSON(r) || (kind == opsAction && !acceptsHTML(r)) {
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
			o.refuse(w, r, who, reconcile.KindInvalid, "the form could not be read: "+err.Error())
			return
		}
		if who.Bearer {
			name, msg := opsCheckName(r.PostForm.Get("operator"))
			if msg != "" {
				o.refuse(w, r, who, reconcile.KindInvalid, "operator: "+msg+" (bearer clients name the operator in the form field \"operator\")")
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

func (o *Ops) flashSig(id, msg string) string {
	return base64.RawURLEncoding.EncodeToString(o.sign("flash", id, msg)[:16])
}

// findingFlashSig signs a flash message for a finding's page, apart from
// those of purchase pages.
func (o *Ops) findingFlashSig(fid, msg string) string {
	return base64.RawURLEncoding.EncodeToString(o.sign("flash finding", fid, msg)[:16])
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
	if who, ok, _ := o.authenticate(r); ok && !who.Bearer {
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
	client, nameKey := throttleClientKey(r), throttleNameKey(name)
	if wait := o.throttle.wait(client, nameKey); wait > 0 {
		o.observeLogin(LoginThrottled)
		o.log.Warn("ops: login refused unchecked: too many failed attempts", "operator", name, "client", client, "retry_after", wait)
		o.throttled(w, r, opsPage, wait, name)
		return
	}
	if matchToken(r.PostForm.Get("token"), o.tokenHash) != 0 {
		o.throttle.failed(client, nameKey)
		o.observeLogin(LoginFailure)
		o.log.Warn("ops: login with a wrong token", "operator", name, "client", client)
		o.renderLogin(w, r, http.StatusUnauthorized, "Wrong operator token.", next, name)
		return
	}
	o.throttle.succeeded(client, nameKey)
	o.observeLogin(LoginSuccess)
	expires := o.cfg.Now().Add(o.cfg.SessionTTL)
	http.SetCookie(w, o.cookie(opsSessionCookie, o.newSession(name, expires), o.cfg.SessionTTL))
	http.SetCookie(w, o.cookie(opsLoginCookie, "", 0))
	o.log.Info("ops: operator signed in", "operator", name)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (o *Ops) logout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, opsMaxFormBytes)
	_ = r.ParseForm()
	who, ok, _ := o.authenticate(r)
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
