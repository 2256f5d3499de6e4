package http

import (
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The operator pages' defence against guessing the operator token.
//
// Every presentation of the token is an attempt: the login form, and an
// Authorization header on any /ops route (a script could guess through
// it as well as through the form). Failed attempts are counted per
// client, by remote address (an IPv6 address by its /64, which one host
// usually has whole), and, for the login form, per operator name too
// (case-folded), so that neither many names from one address nor one
// name from many addresses guesses freely. After loginFreeFailures
// failures of a client or a name, each further failure locks it out,
// for loginLockout, doubled with every further failure up to
// loginMaxLockout. While either is locked out, an attempt is answered
// 429 with Retry-After, and the token is not even compared: a locked-out
// guesser learns nothing, and the attempt does not count as a failure.
// A success forgets the failures of its client and its name.
//
// The remote address is the connection's: X-Forwarded-For is not
// trusted, since any client can write it. Behind a reverse proxy every
// client has the proxy's address, and a guesser locks out everyone.
//
// Memory is bounded: a client or name is forgotten loginForget after its
// last failure, once no lockout holds, and at most loginMaxEntries are
// kept; when the table is full, the forgotten go first, then the unlocked
// ones least recently failed, then the locked ones whose lockout ends
// first.
//
// Every attempt is counted in the LoginObserver, if the server's Observer
// is one: outcome success, failure or throttled.

// The throttle's limits.
const (
	loginFreeFailures = 10
	loginLockout      = time.Minute
	loginMaxLockout   = 15 * time.Minute
	loginForget       = 24 * time.Hour
	loginMaxEntries   = 10000
)

// The outcomes of a login attempt, the values of LoginObserver's outcome.
const (
	LoginSuccess   = "success"
	LoginFailure   = "failure"
	LoginThrottled = "throttled"
)

// LoginObserver counts attempts to authenticate with the operator token
// (the login form, or a bearer token on /ops) by outcome: LoginSuccess,
// LoginFailure or LoginThrottled. When the Server's Config.Observer
// implements it, the operator pages registered on that server tell it
// of every attempt. Implementations must be safe for concurrent use.
type LoginObserver interface {
	OpsLogin(outcome string)
}

// loginThrottle counts failed attempts per key and locks keys out. Safe
// for concurrent use.
type loginThrottle struct {
	now func() time.Time

	free       int
	lockout    time.Duration
	maxLockout time.Duration
	forget     time.Duration
	maxEntries int

	mu      sync.Mutex
	entries map[string]*throttleEntry
}

type throttleEntry struct {
	failures    int
	lastFailure time.Time
	lockedUntil time.Time
}

func newLoginThrottle(now func() time.Time) *loginThrottle {
	return &loginThrottle{
		now: now, free: loginFreeFailures, lockout: loginLockout, maxLockout: loginMaxLockout,
		forget: loginForget, maxEntries: loginMaxEntries, entries: map[string]*throttleEntry{},
	}
}

// forgotten reports whether e no longer counts at now.
func (t *loginThrottle) forgotten(e *throttleEntry, now time.Time) bool {
	return !now.Before(e.lockedUntil) && now.Sub(e.lastFailure) >= t.forget
}

// wait returns how long the longest lockout of keys still holds; 0 when
// none does.
func (t *loginThrottle) wait(keys ...string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	var longest time.Duration
	for _, k := range keys {
		e, ok := t.entries[k]
		if !ok {
			continue
		}
		if t.forgotten(e, now) {
			delete(t.entries, k)
			continue
		}
		longest = max(longest, e.lockedUntil.Sub(now))
	}
	return longest
}

// failed counts a failed attempt for each of keys, and locks out those
// past the free failures.
func (t *loginThrottle) failed(keys ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for _, k := range keys {
		e, ok := t.entries[k]
		if ok && t.forgotten(e, now) {
			e, ok = nil, false
			delete(t.entries, k)
		}
		if !ok {
			t.makeRoom(now)
			e = &throttleEntry{}
			t.entries[k] = e
		}
		e.failures++
		e.lastFailure = now
		if over := e.failures - t.free; over > 0 {
			e.lockedUntil = now.Add(t.lockoutAfter(over))
		}
	}
}

// lockoutAfter returns the lockout of the over-th failure past the free
// ones: lockout, doubled each time, at most maxLockout.
func (t *loginThrottle) lockoutAfter(over int) time.Duration {
	d := t.lockout
	for i := 1; i < over && d < t.maxLockout; i++ {
		if d > math.MaxInt64/2 {
			return t.maxLockout
		}
		d *= 2
	}
	return min(d, t.maxLockout)
}

// succeeded forgets the failures of keys.
func (t *loginThrottle) succeeded(keys ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		delete(t.entries, k)
	}
}

// makeRoom keeps the table under maxEntries before an insert: it drops
// the forgotten entries, then, if still full, the one entry that matters
// least (unlocked before locked; then the least recent failure, or the
// lockout that ends first).
func (t *loginThrottle) makeRoom(now time.Time) {
	if len(t.entries) < t.maxEntries {
		return
	}
	for k, e := range t.entries {
		if t.forgotten(e, now) {
			delete(t.entries, k)
		}
	}
	for len(t.entries) >= t.maxEntries {
		victim, vLocked, vAt := "", false, time.Time{}
		for k, e := range t.entries {
			locked := now.Before(e.lockedUntil)
			at := e.lastFailure
			if locked {
				at = e.lockedUntil
			}
			if victim == "" || (vLocked && !locked) || (vLocked == locked && at.Before(vAt)) {
				victim, vLocked, vAt = k, locked, at
			}
		}
		delete(t.entries, victim)
	}
}

// size returns the number of entries kept, for tests.
func (t *loginThrottle) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

// throttleClientKey returns the throttle key of the request's client:
// its remote address, an IPv6 one by its /64.
func throttleClientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return "client " + host
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is6() {
		return "client " + netip.PrefixFrom(addr, 64).Masked().String()
	}
	return "client " + addr.String()
}

// throttleNameKey returns the throttle key of an operator name.
func throttleNameKey(name string) string { return "name " + strings.ToLower(name) }

// retryAfter writes d as a Retry-After value: whole seconds, rounded up,
// at least 1.
func retryAfter(d time.Duration) string {
	secs := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(secs, 1), 10)
}

// observeLogin counts one attempt, if a LoginObserver is set.
func (o *Ops) observeLogin(outcome string) {
	if o.loginObs != nil {
		o.loginObs.OpsLogin(outcome)
	}
}
