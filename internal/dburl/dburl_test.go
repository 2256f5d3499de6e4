package dburl

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestRedact: every form a database password takes is masked,
// and nothing else is.
func TestRedact(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"userinfo", "postgres://app:s3cret@db.example:5432/payrecon?sslmode=require", "postgres://app:xxxxx@db.example:5432/payrecon?sslmode=require"},
		{"postgresql scheme", "postgresql://app:s3cret@db/payrecon", "postgresql://app:xxxxx@db/payrecon"},
		{"empty user", "postgres://:s3cret@db/payrecon", "postgres://:xxxxx@db/payrecon"},
		{"percent-encoded password", "postgres://app:s3%40cr%2Fet@db/payrecon", "postgres://app:xxxxx@db/payrecon"},
		{"query password", "postgres://app@db/payrecon?password=s3cret&sslmode=disable", "postgres://app@db/payrecon?password=xxxxx&sslmode=disable"},
		{"query password last", "postgres://app@db/payrecon?sslmode=disable&password=s3cret", "postgres://app@db/payrecon?sslmode=disable&password=xxxxx"},
		{"sslpassword", "postgres://app@db/payrecon?sslkey=/k.pem&sslpassword=s3cret", "postgres://app@db/payrecon?sslkey=/k.pem&sslpassword=xxxxx"},
		{"encoded parameter name", "postgres://app@db/payrecon?pass%77ord=s3cret", "postgres://app@db/payrecon?pass%77ord=xxxxx"},
		{"capitals", "postgres://app@db/payrecon?PASSWORD=s3cret", "postgres://app@db/payrecon?PASSWORD=xxxxx"},
		{"both", "postgres://app:one@db/payrecon?password=two", "postgres://app:xxxxx@db/payrecon?password=xxxxx"},
		{"unencoded @ in the password", "postgres://app:s3@cret@db/payrecon", "postgres://app:xxxxx@db/payrecon"},
		{"unencoded / in the password", "postgres://app:s3/cret@db/payrecon", "postgres://app:xxxxx@db/payrecon"},
		{"unencoded # and ? in the password", "postgres://app:s3#c?ret@db/payrecon", "postgres://app:xxxxx@db/payrecon"},
		{"unencoded : in the password", "postgres://app:s3:cret@db/payrecon", "postgres://app:xxxxx@db/payrecon"},
		{"IPv6 host", "postgres://app:s3cret@[::1]:5432/payrecon", "postgres://app:xxxxx@[::1]:5432/payrecon"},
		{"several hosts", "postgres://app:s3cret@h1:5432,h2:5433/payrecon", "postgres://app:xxxxx@h1:5432,h2:5433/payrecon"},
		{"an @ in a query value", "postgres://app@db:5432/payrecon?password=s3@cret", "postgres://app@db:5432/payrecon?password=xxxxx"},
		{"no password", "postgres://app@db:5432/payrecon?sslmode=disable", "postgres://app@db:5432/payrecon?sslmode=disable"},
		{"key=value", "host=db user=app password=s3cret dbname=payrecon", "host=db user=app password=xxxxx dbname=payrecon"},
		{"key=value quoted", `host=db password='s3 cr\'et' dbname=payrecon`, "host=db password=xxxxx dbname=payrecon"},
		{"key=value spaces around =", "host=db password = s3cret dbname=payrecon", "host=db password = xxxxx dbname=payrecon"},
		{"key=value sslpassword", "host=db sslpassword=s3cret", "host=db sslpassword=xxxxx"},
		{"key=value escaped space", `password=s3\ cret host=db`, "password=xxxxx host=db"},
		{"key=value unterminated quote", "host=db password='s3cret dbname=payrecon", "host=db password=xxxxx"},
		{"no scheme", "app:s3cret@db/payrecon", "app:xxxxx@db/payrecon"},
		{"other scheme", "mysql://app:s3cret@db/payrecon", "mysql://app:xxxxx@db/payrecon"},
		{"no scheme, a query", "db/payrecon?pass%77ord=s3cret&x=1", "db/payrecon?pass%77ord=xxxxx"},
		{"a :// that is no scheme's", "?password=s3cret://", "?password=xxxxx"},
		{"sqlite", "sqlite:/var/lib/pay:recon/@x/p.db", "sqlite:/var/lib/pay:recon/@x/p.db"},
		{"empty", "", ""},
	} {
		if got := Redact(tt.in); got != tt.want {
			t.Errorf("%s: Redact(%q) = %q, want %q", tt.name, tt.in, got, tt.want)
		}
	}
}

// TestRedactionHidesWhatPgxReads: for each form, the password pgx would
// send (its parser is the one postgres.Open uses) is not in the redacted
// form.
func TestRedactionHidesWhatPgxReads(t *testing.T) {
	t.Setenv("PGPASSFILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("PGSERVICEFILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("PGPASSWORD", "")
	for _, s := range []string{
		"postgres://app:s3cret-one@db/payrecon",
		"postgres://app:s3%40cr%2Fet-two@db/payrecon",
		"postgres://app@db/payrecon?password=s3cret-three",
		"postgres://app@db/payrecon?pass%77ord=s3cret-four",
		"postgres://app:s3cret-five@[::1]:5432,h2/payrecon",
		"host=db user=app password=s3cret-six dbname=payrecon",
		`host=db password='s3cret seven\'s' dbname=payrecon`,
		`host=db password = s3cret\ eight`,
	} {
		cfg, err := pgconn.ParseConfig(s)
		if err != nil {
			t.Fatalf("pgx cannot parse %q: %v", s, err)
		}
		if cfg.Password == "" {
			t.Fatalf("pgx reads no password in %q", s)
		}
		if got := Redact(s); strings.Contains(got, cfg.Password) {
			t.Errorf("Redact(%q) = %q shows pgx's password %q", s, got, cfg.Password)
		}
	}
}

// TestScrub: an error text that holds the password (in any form
// it has in the URL) is masked, and the error still wraps its cause.
func TestScrub(t *testing.T) {
	cause := errors.New("boom")
	const u = "postgres://app:s3%40cret@db/payrecon?sslpassword='q'"
	err := Scrub(wrapErr("dial app:s3%40cret and s3@cret failed", cause), u)
	if strings.Contains(err.Error(), "s3%40cret") || strings.Contains(err.Error(), "s3@cret") || !errors.Is(err, cause) {
		t.Errorf("scrubbed: %v (wraps the cause: %v)", err, errors.Is(err, cause))
	}
	if Scrub(nil, u) != nil {
		t.Error("nil is not nil")
	}
	plain := errors.New("nothing secret")
	if Scrub(plain, u) != plain {
		t.Error("an error without the password is not returned as it is")
	}
}

type wrapped struct {
	msg   string
	cause error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.cause }

func wrapErr(msg string, cause error) error { return &wrapped{msg, cause} }

// TestParse: the forms payrecon accepts, and the ones it
// refuses.
func TestParse(t *testing.T) {
	for in, want := range map[string]URL{
		"":                             {Kind: SQLite},
		"sqlite:/tmp/p.db":             {Kind: SQLite, Path: "/tmp/p.db"},
		"sqlite:rel/p.db":              {Kind: SQLite, Path: "rel/p.db"},
		"postgres://app@db/payrecon":   {Kind: Postgres, Postgres: "postgres://app@db/payrecon"},
		"postgresql://app@db/payrecon": {Kind: Postgres, Postgres: "postgresql://app@db/payrecon"},
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"sqlite:", "mysql://app@db", "host=db password=x", "db.example:5432", "postgres://app\x00@db"} {
		if _, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) accepts it", in)
		}
	}
}
