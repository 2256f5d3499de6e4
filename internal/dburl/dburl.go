// Package dburl reads payrecon's database URL, which names the store:
// postgres://… (or postgresql://…) for Postgres, sqlite:PATH for a SQLite
// file, empty for the default SQLite file. A Postgres URL may hold a
// password, in its userinfo (postgres://user:PASSWORD@host/db) or as a
// query parameter (?password=…, ?sslpassword=…), so it is a secret: it is
// never logged or printed but through Redact, and the driver's errors
// about it go through Scrub.
package dburl

import (
	"errors"
	"fmt"
	"strings"
)

// Kind is the store a database URL names.
type Kind string

// The stores a database URL can name.
const (
	Postgres Kind = "postgres"
	SQLite   Kind = "sqlite"
)

// URL is a parsed database URL.
type URL struct {
	Kind Kind
	// Postgres is the Postgres URL as given, password and all; empty for
	// SQLite.
	Postgres string
	// Path is the SQLite file; empty for Postgres and for the default
	// file, whose place the caller chooses.
	Path string
}

// redactedMask replaces every password in a redacted database URL.
const redactedMask = "xxxxx"

// Parse checks a database URL and says which store it names. It accepts
// "" (the default SQLite file), sqlite:PATH with a non-empty path, and a
// postgres:// or postgresql:// URL without a NUL byte, which it keeps as
// given for the driver to read; it refuses anything else, a libpq
// key=value string too. Its errors show the URL redacted, never the
// password.
func Parse(s string) (URL, error) {
	switch {
	case s == "":
		return URL{Kind: SQLite}, nil
	case strings.HasPrefix(s, "sqlite:"):
		path := strings.TrimPrefix(s, "sqlite:")
		if path == "" {
			return URL{}, errors.New("want sqlite:PATH, with the path of the database file")
		}
		return URL{Kind: SQLite, Path: path}, nil
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		if strings.ContainsRune(s, 0) {
			return URL{}, fmt.Errorf("%s: a NUL byte is not allowed", Redact(s))
		}
		return URL{Kind: Postgres, Postgres: s}, nil
	case !strings.Contains(s, "://") && strings.Contains(s, "="):
		return URL{}, fmt.Errorf("%s: a key=value connection string is not supported; "+
			"want postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=… (percent-encode reserved characters of the password) or sqlite:PATH",
			Redact(s))
	default:
		return URL{}, fmt.Errorf("%s: want postgres://… or sqlite:PATH", Redact(s))
	}
}

// Redact returns s with every password replaced by xxxxx, for
// logs and error messages. It masks, whatever the form of s:
//
//   - the userinfo password of a URL (postgres://user:PASSWORD@host), and,
//     when the URL is malformed (an unencoded '@', '/', '?' or '#' in the
//     password), everything from the first ':' to the last '@', so that a
//     password the URL's parser would split is hidden whole;
//   - the value of every query parameter whose name, percent-decoded,
//     contains "password" in any case (password, sslpassword), up to the
//     next '&';
//   - in a key=value connection string (host=h password=…), the value of
//     every key containing "password", quoted ('…', with \' and \\
//     escapes) or not.
//
// It over-masks rather than leak: a malformed URL may lose its host in
// the redacted form. A sqlite: URL holds no password and is returned as
// it is.
func Redact(s string) string {
	if strings.HasPrefix(s, "sqlite:") {
		return s
	}
	return applyMask(s, secretSpans(s))
}

// span is a byte range [from, to) of a string.
type span struct{ from, to int }

// secretSpans returns the ranges of s that Redact masks.
func secretSpans(s string) []span {
	i := schemeEnd(s)
	if i < 0 {
		spans := keyValuePasswordSpans(s)
		if sp, ok := looseUserinfo(s, 0); ok {
			spans = append(spans, sp)
		}
		return spans
	}
	start := i + 3
	spans := queryPasswordSpans(s, start)
	if sp, ok := userinfo(s, start, spans); ok {
		spans = append(spans, sp)
	}
	return spans
}

// schemeEnd returns the index of the "://" that ends s's URL scheme (a
// letter, then letters, digits, '+', '-' or '.'), or -1 when s does not
// start with one: then s is read as a key=value string, whatever "://"
// it holds further on.
func schemeEnd(s string) int {
	i := strings.Index(s, "://")
	if i <= 0 {
		return -1
	}
	for j := 0; j < i; j++ {
		c := s[j]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case j > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return -1
		}
	}
	return i
}

// userinfo returns the password of the URL s whose authority starts at
// start, given the spans of its password parameters. When the URL is
// unambiguous, that is the userinfo's text after its first ':': pgx's
// parser (which ends the userinfo at the first '@' before any '/') and
// net/url's (the last '@' before the path, query or fragment) agree on
// where the userinfo ends, and no '@' follows outside a password
// parameter. Otherwise (an unencoded '@', '/', '?' or '#' in a password)
// it is looseUserinfo's span, which may hide more.
func userinfo(s string, start int, params []span) (span, bool) {
	p := s[start:]
	pgxAt := -1
	if j := strings.IndexAny(p, "@/"); j >= 0 && p[j] == '@' {
		pgxAt = j
	}
	authEnd := strings.IndexAny(p, "/?#")
	if authEnd < 0 {
		authEnd = len(p)
	}
	urlAt := strings.LastIndexByte(p[:authEnd], '@')
	unambiguous := pgxAt == urlAt
	if unambiguous {
		in := coverage(len(s), params)
		for j := max(urlAt+1, 0); j < len(p); j++ {
			if p[j] == '@' && !in[start+j] {
				unambiguous = false
				break
			}
		}
	}
	if !unambiguous {
		return looseUserinfo(s, start)
	}
	if urlAt < 0 {
		return span{}, false
	}
	c := strings.IndexByte(p[:urlAt], ':')
	if c < 0 {
		return span{}, false
	}
	return span{start + c + 1, start + urlAt}, true
}

// looseUserinfo returns the span from the first ':' after start to the
// last '@' of s: whatever any parser could take for a userinfo password.
func looseUserinfo(s string, start int) (span, bool) {
	at := strings.LastIndexByte(s, '@')
	if at <= start {
		return span{}, false
	}
	c := strings.IndexByte(s[start:at], ':')
	if c < 0 {
		return span{}, false
	}
	return span{start + c + 1, at}, true
}

// coverage returns, for each byte of a string of length n, whether one
// of spans covers it.
func coverage(n int, spans []span) []bool {
	in := make([]bool, n)
	for _, sp := range spans {
		for i := max(sp.from, 0); i < min(sp.to, n); i++ {
			in[i] = true
		}
	}
	return in
}

// queryPasswordSpans returns the values of password parameters in a URL
// whose authority starts at start. Every '=' after start is taken for a
// parameter's: its name runs back to the previous '&' or '?' (or to
// start), and when that name, percent-decoded and in any case, contains
// "password", the value is masked from the '=' to the next '&'. Taking
// every '=' rather than the first of each parameter catches a password
// parameter after an '=' inside the userinfo or another value. It runs
// in one pass: the name is decoded as it is read, and only its last
// bytes are kept, to see "password" go by.
func queryPasswordSpans(s string, start int) []span {
	var spans []span
	const word = "password"
	var tail []byte // the name's last decoded bytes, in lower case
	named := false  // the name so far contains "password"
	for i := start; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '&' || c == '?':
			tail, named = tail[:0], false
			continue
		case c == '=' && named:
			end := strings.IndexByte(s[i+1:], '&')
			if end < 0 {
				end = len(s)
			} else {
				end += i + 1
			}
			spans = append(spans, span{i + 1, end})
			// Every '=' up to the '&' would mask a part of this span.
			i = end - 1
			continue
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			c = unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		tail = append(tail, c)
		if len(tail) > len(word) {
			tail = tail[1:]
		}
		if string(tail) == word {
			named = true
		}
	}
	return spans
}

// decodeLenient decodes the valid %XX escapes of s and keeps the rest.
func decodeLenient(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// keyValuePasswordSpans returns the values of password keys in a
// key=value connection string, read as libpq (and pgx) read it: a key is
// the word before an '=', spaces around the '=' are allowed, a value is
// either quoted ('…', a backslash escaping the next character) or runs to
// the next space (a backslash escaping the next character). An
// unterminated quote runs to the end. Whatever a malformed string does to
// the parse, the word before every '=' is taken for a key (but inside a
// password's value, which libpq skips too), percent-decoded as a URL's
// query would be, so no value is missed. It is
// linear: the text between two '='s is read once, and a value only for a
// password key.
func keyValuePasswordSpans(s string) []span {
	var spans []span
	for i := 0; i < len(s); {
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			break
		}
		eq += i
		key := strings.TrimRight(s[i:eq], " \t\n\r\v\f")
		if k := strings.LastIndexAny(key, " \t\n\r\v\f'"); k >= 0 {
			key = key[k+1:]
		}
		i = eq + 1
		if !strings.Contains(strings.ToLower(decodeLenient(key)), "password") {
			continue
		}
		v := eq + 1
		for v < len(s) && isSpace(s[v]) {
			v++
		}
		end := v
		if end < len(s) && s[end] == '\'' {
			end++
			for end < len(s) && s[end] != '\'' {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			end = min(end, len(s))
			if end < len(s) {
				end++ // the closing quote
			}
		} else {
			for end < len(s) && !isSpace(s[end]) {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			end = min(end, len(s))
		}
		if end > v {
			spans = append(spans, span{v, end})
			i = end
		}
	}
	return spans
}

func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}

// applyMask replaces each maximal run of bytes of s covered by spans with
// the mask.
func applyMask(s string, spans []span) string {
	if len(spans) == 0 {
		return s
	}
	masked := coverage(len(s), spans)
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if !masked[i] {
			b.WriteByte(s[i])
			continue
		}
		b.WriteString(redactedMask)
		for i+1 < len(s) && masked[i+1] {
			i++
		}
	}
	return b.String()
}

// databasePasswords returns the passwords a database URL holds, raw as
// they are written in it and percent- or quote-decoded, for scrubbing
// error texts from the database driver.
func databasePasswords(s string) []string {
	if strings.HasPrefix(s, "sqlite:") {
		return nil
	}
	var out []string
	for _, sp := range secretSpans(s) {
		raw := s[sp.from:sp.to]
		if raw == "" {
			continue
		}
		out = append(out, raw)
		if dec := decodeLenient(raw); dec != raw {
			out = append(out, dec)
		}
		if strings.HasPrefix(raw, "'") {
			out = append(out, strings.Trim(raw, "'"))
		}
	}
	return out
}

// scrubbedError is an error whose text has the database passwords
// replaced by the mask; it still wraps the original, for errors.Is.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// Scrub returns err with every password of the database URL s masked in
// its text (a password shorter than three bytes is left: masking it would
// garble the message); the result wraps err, for errors.Is and errors.As.
// It returns err itself when its text holds no password, and nil for nil.
// The driver's own errors are careful; this makes sure.
func Scrub(err error, s string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	scrubbed := msg
	for _, p := range databasePasswords(s) {
		// A one- or two-character password would mask half the message;
		// such a password is not worth hiding from the error.
		if len(p) >= 3 {
			scrubbed = strings.ReplaceAll(scrubbed, p, redactedMask)
		}
	}
	if scrubbed == msg {
		return err
	}
	return &scrubbedError{msg: scrubbed, err: err}
}
