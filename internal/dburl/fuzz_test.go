package dburl

import (
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// Fuzz targets for the database URL, untrusted text that holds a secret.
// Their seed corpora are in testdata/fuzz/<target>/; CI runs each for
// 10s:
//
//	go test -run=XXX -fuzz=FuzzDatabaseURL -fuzztime=10s ./internal/dburl/

// FuzzDatabaseURL parses and redacts a fuzzed database URL. Neither
// panics, and the redacted form (and a refusal's message) does not
// contain a password, whether read as pgx reads it, as net/url reads it,
// or from a key=value string.
func FuzzDatabaseURL(f *testing.F) {
	// A refusal's message is one of these texts around the redacted URL:
	// then the redacted URL is the only part of the input it shows.
	var templates []string
	for _, placeholder := range []string{"postgres://\x00", "a=b", "zzz", "sqlite:"} {
		_, err := Parse(placeholder)
		templates = append(templates, strings.Replace(err.Error(), Redact(placeholder), "", 1))
	}
	f.Fuzz(func(t *testing.T, s string) {
		red := Redact(s)
		if _, perr := Parse(s); perr != nil {
			if rest := strings.Replace(perr.Error(), red, "", 1); !slices.Contains(templates, rest) {
				t.Fatalf("Parse(%q) fails with %q, which shows more of the input than its redacted form %q", s, perr, red)
			}
		}
		for _, pw := range oraclePasswords(s) {
			if findable(s, pw) && strings.Contains(red, pw) {
				t.Fatalf("Redact(%q) = %q shows the password %q", s, red, pw)
			}
		}
		if strings.HasPrefix(s, "sqlite:") && red != s {
			t.Fatalf("a sqlite URL is changed: %q", red)
		}
	})
}

// FuzzRedactBuiltURL builds database URLs from fuzzed parts, the
// password escaped as each form wants it, and checks that the redacted
// form contains neither the password nor its escaped spelling.
func FuzzRedactBuiltURL(f *testing.F) {
	f.Fuzz(func(t *testing.T, user, password, host, db, params string, form uint8) {
		// written is the password as s spells it.
		var s, written string
		switch form % 5 {
		case 0:
			ui := url.UserPassword(user, password).String()
			s = "postgres://" + ui + "@" + host + "/" + db
			_, written, _ = strings.Cut(ui, ":")
		case 1:
			written = url.QueryEscape(password)
			s = "postgresql://" + url.PathEscape(user) + "@" + host + "/" + db + "?" + params + "&password=" + written
		case 2:
			written = url.QueryEscape(password)
			s = "postgres://" + host + "/" + db + "?sslpassword=" + written + "&" + params
		case 3:
			quoted := kvQuote(password)
			written = quoted[1 : len(quoted)-1]
			s = "host=" + kvQuote(host) + " user=" + kvQuote(user) + " password=" + quoted + " dbname=" + kvQuote(db)
		default:
			// Not encoded at all, as a person may paste it.
			written = password
			s = "postgres://" + user + ":" + password + "@" + host + "/" + db + "?" + params
		}
		spellings := []string{written}
		red := Redact(s)
		for _, sp := range spellings {
			if findable(s, sp) && strings.Contains(red, sp) {
				t.Fatalf("Redact(%q) = %q shows the password as %q", s, red, sp)
			}
		}
	})
}

// kvQuote writes v as a quoted value of a key=value connection string.
func kvQuote(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// findable reports whether pw can be looked for in a redacted form of s:
// long enough, written once in s (so that no other part of s shows it),
// and without the mask's letter (the mask next to the text around it
// could spell it).
func findable(s, pw string) bool {
	return len(pw) >= 3 && utf8.ValidString(pw) && !strings.ContainsAny(pw, "xX") && strings.Count(s, pw) == 1
}

// oraclePasswords are the passwords parsers read in s, raw as they are
// written in s: pgx's reading of a URL (the userinfo ends at the first
// '@' before any '/', the query starts at the first '?' after it, and its
// password and sslpassword parameters); net/url's (the userinfo ends at
// the last '@' of the authority; every parameter whose name holds
// "password"; for any string it parses, a relative reference too); and
// libpq's reading of a key=value string (when s has no URL scheme). They are
// written independently of the redaction they check. Decoded forms are
// not among them: the redacted form is made of the input's own text and
// the mask, so a decoded password in it would be text written elsewhere
// in the input.
func oraclePasswords(s string) []string {
	var out []string
	add := func(raw string) {
		if raw != "" {
			out = append(out, raw)
		}
	}
	// net/url, whatever s looks like (a relative reference too).
	if u, err := url.Parse(s); err == nil {
		if _, ok := u.User.Password(); ok {
			rest := s
			if _, r, ok := strings.Cut(s, "//"); ok {
				rest = r
			}
			authority := strings.SplitN(strings.SplitN(strings.SplitN(rest, "#", 2)[0], "?", 2)[0], "/", 2)[0]
			if at := strings.LastIndexByte(authority, '@'); at >= 0 {
				if _, raw, ok := strings.Cut(authority[:at], ":"); ok {
					add(raw)
				}
			}
		}
		for _, pair := range strings.Split(u.RawQuery, "&") {
			k, v, _ := strings.Cut(pair, "=")
			if dk, err := url.QueryUnescape(k); err == nil && strings.Contains(strings.ToLower(dk), "password") {
				add(v)
			}
		}
	}
	if scheme, rest, ok := strings.Cut(s, "://"); ok && validScheme(scheme) {
		// pgx.
		p := rest
		if j := strings.IndexAny(p, "@/"); j >= 0 && p[j] == '@' {
			if _, pw, ok := strings.Cut(p[:j], ":"); ok {
				add(pw)
			}
			p = p[j+1:]
		}
		if _, query, ok := strings.Cut(p, "?"); ok {
			for _, pair := range strings.Split(query, "&") {
				k, v, _ := strings.Cut(pair, "=")
				if dk, err := url.PathUnescape(k); err == nil && (dk == "password" || dk == "sslpassword") {
					add(v)
				}
			}
		}
		return out
	}
	// libpq's key=value, as pgx reads it.
	for _, kv := range keyValuePairs(s) {
		if kv[0] == "password" || kv[0] == "sslpassword" {
			add(kv[1])
		}
	}
	return out
}

// validScheme reports whether s is a URL scheme (RFC 3986).
func validScheme(s string) bool {
	for i, c := range s {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// keyValuePairs reads a key=value connection string as libpq does,
// returning each key with its value raw (as written) and unescaped; it
// stops at the first error.
func keyValuePairs(s string) [][3]string {
	var out [][3]string
	const spaces = " \t\n\r\v\f"
	s = strings.TrimLeft(s, spaces)
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return out
		}
		key := strings.Trim(s[:eq], spaces)
		if key == "" || strings.ContainsAny(key, spaces) {
			return out
		}
		s = strings.TrimLeft(s[eq+1:], spaces)
		var raw, val strings.Builder
		if strings.HasPrefix(s, "'") {
			i := 1
			for ; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
			}
			if i >= len(s) {
				return out
			}
			raw.WriteString(s[1:i])
			s = strings.TrimLeft(s[i+1:], spaces)
		} else {
			i := 0
			for ; i < len(s) && !strings.ContainsRune(spaces, rune(s[i])); i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
			}
			raw.WriteString(s[:i])
			s = strings.TrimLeft(s[i:], spaces)
		}
		out = append(out, [3]string{key, raw.String(), val.String()})
	}
	return out
}
