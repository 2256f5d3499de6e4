package main

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/payrecon/payrecon/internal/dburl"
	"github.com/payrecon/payrecon/internal/testing/pgtest"
)

// TestDatabasePasswordNeverShown: wherever --database-url is refused,
// logged or fails to connect, in every form and from every source, the
// password is not in the output.
func TestDatabasePasswordNeverShown(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	const pw = "Pw0rd-never-shown"
	dir := t.TempDir()
	for _, tc := range []struct {
		url  string
		code int
		want string
	}{
		{"host=db user=app password=" + pw + " dbname=payrecon", 2, "key=value connection string is not supported"},
		{"host=db password='" + pw + " x' dbname=payrecon", 2, "password=xxxxx"},
		{"mysql://app:" + pw + "@db/payrecon", 2, "mysql://app:xxxxx@db/payrecon"},
		{"postgres://app:" + pw + "@127.0.0.1:1/payrecon", 1, "cannot reach database"},
		{"postgres://app@127.0.0.1:1/payrecon?password=" + pw, 1, "cannot reach database"},
		{"postgres://app@127.0.0.1:1/payrecon?sslmode=disable&sslpassword=" + pw, 1, "cannot reach database"},
		{"postgres://app:" + pw + "@127.0.0.1:notaport/payrecon", 1, "payrecon"},
	} {
		file := filepath.Join(dir, "db-url")
		write(t, file, tc.url+"\n")
		conf := filepath.Join(dir, "payrecon.conf")
		write(t, conf, "database-url "+tc.url+"\n")
		for source, run1 := range map[string]func() (int, string, string){
			"flag": func() (int, string, string) { return run(t, nil, "ops", "list", "--database-url", tc.url) },
			"env": func() (int, string, string) {
				return run(t, map[string]string{"PAYRECON_DATABASE_URL": tc.url}, "ops", "list")
			},
			"file": func() (int, string, string) {
				return run(t, map[string]string{"PAYRECON_DATABASE_URL_FILE": file}, "ops", "list")
			},
			"config": func() (int, string, string) { return run(t, nil, "ops", "list", "--config", conf) },
		} {
			code, out, stderr := run1()
			unsetenv(t, "PAYRECON_DATABASE_URL", "PAYRECON_DATABASE_URL_FILE")
			if strings.Contains(stderr+out, pw) {
				t.Errorf("%s %q: the password is shown:\n%s", source, tc.url, stderr)
			}
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("%s %q: exit %d, want %d with %q:\n%s", source, tc.url, code, tc.code, tc.want, stderr)
			}
		}
	}

	// The startup log names the store, its password redacted, in both
	// forms.
	base, err := url.Parse(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	withUser := *base
	withUser.User = url.UserPassword(base.User.Username(), pw)
	withQuery := *base
	q := withQuery.Query()
	q.Set("password", pw)
	withQuery.RawQuery = q.Encode()
	for _, u := range []string{withUser.String(), withQuery.String()} {
		code, out, stderr := run(t, nil, "migrate", "--database-url", u)
		if code != 0 || !strings.Contains(stderr, `msg="store opened" store=postgres database=`) {
			t.Fatalf("migrate %s: exit %d:\n%s%s", dburl.Redact(u), code, out, stderr)
		}
		if strings.Contains(stderr+out, pw) || !strings.Contains(stderr, "xxxxx") {
			t.Errorf("migrate: the log shows the password, or no redacted URL:\n%s", stderr)
		}
	}
}
