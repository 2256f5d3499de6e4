package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/pgtest"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
)

// TestMain stops the Postgres cluster a test started, if any.
func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var update = flag.Bool("update", false, "rewrite testdata/help.golden, testdata/help-commands.golden and the settings table of docs/configuration.md")

// golden compares got with the file testdata/name, or rewrites it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/payrecon -run %s -update to write it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("the output differs from %s; if the change is meant, run\n  go test ./cmd/payrecon -run %s -update\n%s",
			path, t.Name(), lineDiff(string(want), got))
	}
}

// lineDiff shows the first lines where want and got differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\nwant %q\n got %q", i+1, wl, gl)
		}
	}
	return ""
}

// TestHelpGolden: `payrecon help` is testdata/help.golden, and every
// command's help (payrecon help COMMAND) is testdata/help-commands.golden.
func TestHelpGolden(t *testing.T) {
	code, out, stderr := run(t, nil, "help")
	if code != 0 || stderr != "" {
		t.Fatalf("help: exit %d, stderr %q", code, stderr)
	}
	golden(t, "help.golden", out)

	var all strings.Builder
	for _, c := range commands() {
		args := append([]string{"help"}, strings.Fields(c.name)...)
		code, out, stderr := run(t, nil, args...)
		if code != 0 || stderr != "" || out == "" {
			t.Fatalf("%v: exit %d, stderr %q", args, code, stderr)
		}
		fmt.Fprintf(&all, "$ payrecon %s\n%s\n", strings.Join(args, " "), out)
		// payrecon COMMAND -h is the same text.
		h := append(strings.Fields(c.name), "-h")
		if c.name == "help" {
			continue
		}
		if code, same, _ := run(t, nil, h...); code != 0 || same != out {
			t.Errorf("payrecon %s: exit %d, and not the text of payrecon help %s", strings.Join(h, " "), code, c.name)
		}
	}
	golden(t, "help-commands.golden", all.String())
}

// TestHelpShowsTypesAndDefaults: every setting shows its type (but a
// boolean) and its default, and no usage text is taken for a type.
func TestHelpShowsTypesAndDefaults(t *testing.T) {
	_, out, _ := run(t, nil, "help", "settings")
	for _, st := range newSettings().list {
		if st.envOnly {
			if !strings.Contains(out, "\n  "+st.env+" (environment only)\n") {
				t.Errorf("help has no line for %s", st.env)
			}
			continue
		}
		head := "--" + st.name
		if st.kind != kindBool {
			head += " " + st.kind.typ
		}
		re := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(head) + `(?:  +(.*))?$`)
		m := re.FindStringSubmatch(out)
		if m == nil {
			t.Errorf("help has no line %q", head)
			continue
		}
		if st.def != "" && !strings.HasPrefix(m[1], "default "+st.def) {
			t.Errorf("%s: %q, want its default %s", head, m[1], st.def)
		}
		if !strings.Contains(out, "        "+st.env+": ") {
			t.Errorf("help does not name %s", st.env)
		}
	}
	// The bug this replaces: `-addr serve`, `-worker serve`.
	for _, name := range []string{"serve", "worker", "fakeprovider"} {
		_, out, _ := run(t, nil, name, "-h")
		if regexp.MustCompile(`--\S+ (serve|worker|fakeprovider)\b`).MatchString(out) {
			t.Errorf("%s -h takes a word of a usage text for a type:\n%s", name, out)
		}
	}
}

// configDoc is the handbook's page on running and configuring payrecon:
// its command list, its config file example and its settings table.
var configDoc = filepath.Join("..", "..", "docs", "configuration.md")

// TestSettingsTable: the settings table in docs/configuration.md is the
// settings table.
func TestSettingsTable(t *testing.T) {
	const begin = "<!-- settings: generated from cmd/payrecon/settings.go by `go test ./cmd/payrecon -run TestSettingsTable -update` -->\n"
	const end = "<!-- end of settings -->"
	data, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	before, rest, ok := strings.Cut(doc, begin)
	if !ok {
		t.Fatalf("%s has no line %q", configDoc, begin)
	}
	table, after, ok := strings.Cut(rest, end)
	if !ok {
		t.Fatalf("%s has no line %q after the settings", configDoc, end)
	}
	want := newSettings().markdownSettings()
	if table == want {
		return
	}
	if *update {
		if err := os.WriteFile(configDoc, []byte(before+begin+want+end+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's settings table differs from cmd/payrecon/settings.go; run\n  go test ./cmd/payrecon -run TestSettingsTable -update\n%s", configDoc, lineDiff(want, table))
}

// TestCommandList: the command list in docs/configuration.md names every
// command and subcommand payrecon has.
func TestCommandList(t *testing.T) {
	data, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(string(data), "## The commands\n\n```sh\n")
	if !ok {
		t.Fatalf("%s has no command list (a sh block under ## The commands)", configDoc)
	}
	list, _, _ = strings.Cut(list, "```")
	listed := map[string]bool{}
	for _, line := range strings.Split(list, "\n") {
		words := strings.Fields(line)
		if len(words) < 2 || words[0] != "payrecon" {
			continue
		}
		listed[words[1]] = true
		if len(words) > 2 {
			listed[words[1]+" "+words[2]] = true
		}
	}
	for _, c := range commands() {
		if !listed[c.name] {
			t.Errorf("%s's command list lacks payrecon %s", configDoc, c.name)
		}
	}
}

// TestEnvNames: every setting with a flag is read from PAYRECON_ and its
// flag's name in capitals, the name ff gives it, and a secret's file
// setting is its variable with _FILE.
func TestEnvNames(t *testing.T) {
	s := newSettings()
	for _, st := range s.list {
		if st.envOnly {
			if st.fileFor == "" && !strings.HasPrefix(st.env, "STRIPE_") {
				t.Errorf("%s: only Stripe's own variables are environment-only", st.env)
			}
		} else if want := envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(st.name, "-", "_")); st.env != want {
			t.Errorf("--%s reads %s, but ff reads %s", st.name, st.env, want)
		}
		if st.secret {
			f := s.fileSetting(st.name)
			if f == nil || f.env != st.env+"_FILE" {
				t.Errorf("secret %s has no %s_FILE", st.env, st.env)
			}
		}
	}
	for _, name := range []string{"database-url", "api-token", "ops-token", "stripe-secret-key", "stripe-webhook-secret"} {
		if st := s.byKey[name]; st == nil || !st.secret {
			t.Errorf("%s is not a secret", name)
		}
	}
}

// TestTokenRules: the minimum token length the help and
// docs/configuration.md state is reconcile/http's.
func TestTokenRules(t *testing.T) {
	short, long := strings.Repeat("a", minTokenLen-1), strings.Repeat("a", minTokenLen)
	if _, err := rhttp.ParseAPITokens("shop:" + short); err == nil {
		t.Errorf("reconcile/http accepts an API token of %d characters", minTokenLen-1)
	}
	if _, err := rhttp.ParseAPITokens("shop:" + long); err != nil {
		t.Errorf("reconcile/http refuses an API token of %d characters: %v", minTokenLen, err)
	}
	if checkToken(short) == nil || checkToken(long) != nil {
		t.Errorf("--ops-token's check is not at %d characters", minTokenLen)
	}
	_, help, _ := run(t, nil, "help", "settings")
	doc, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	for where, text := range map[string]string{"help settings": help, configDoc: string(doc)} {
		for _, want := range []string{fmt.Sprintf("at least %d characters", minTokenLen), "name:token"} {
			if !strings.Contains(strings.Join(strings.Fields(text), " "), want) {
				t.Errorf("%s does not say %q", where, want)
			}
		}
	}
}

// TestExitCodes: 2 for a bad command line or setting, 1 for a command
// that failed, 0 for success and for help asked for.
func TestExitCodes(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	db := "sqlite:" + filepath.Join(t.TempDir(), "x.db")
	code, out, stderr := run(t, nil, "purchase", "create", "--database-url", db, "--amount", "300", "--currency", "usd", "--customer", "c")
	if code != 0 {
		t.Fatalf("set-up: %s", stderr)
	}
	unsettled := strings.TrimSpace(out) // created: not refundable
	tests := []struct {
		args []string
		code int
		want string // in stderr
	}{
		{nil, 2, "no command given"},
		{[]string{"nonsense"}, 2, `unknown command "nonsense"`},
		{[]string{"purchase create"}, 2, "unknown command"},
		{[]string{"help", "nonsense"}, 2, `no command "nonsense"`},
		{[]string{"purchase"}, 2, "want `purchase create`"},
		{[]string{"purchase", "nonsense"}, 2, "unknown purchase subcommand"},
		{[]string{"purchase", "create", "--database-url", db}, 2, "--amount, --currency, --customer required"},
		{[]string{"purchase", "create", "--database-url", db, "--amount", "300", "--currency", "usd"}, 2, "--customer required"},
		{[]string{"purchase", "create", "--database-url", db, "--amount", "3.50", "--currency", "usd", "--customer", "c"}, 2, "whole number"},
		{[]string{"purchase", "create", "--database-url", db, "--amount", "-5", "--currency", "usd", "--customer", "c"}, 2, "amount"},
		{[]string{"purchase", "create", "--database-url", db, "--amount", "5", "--currency", "nope", "--customer", "c"}, 2, "currency"},
		{[]string{"purchase", "create", "--database-url", db, "--amount", "1", "--currency", "usd", "--customer", "c"}, 2, "0.01 USD is under the provider's minimum charge of 0.50 USD"},
		{[]string{"purchase", "show", "--database-url", db}, 2, "want exactly one purchase id"},
		{[]string{"purchase", "show", "--database-url", db, "--bogus", "x"}, 2, "-bogus"},
		{[]string{"ops"}, 2, "want ops list"},
		{[]string{"ops", "nonsense"}, 2, "unknown ops subcommand"},
		{[]string{"ops", "list", "--database-url", db, "--lease-duration", "soon"}, 2, `--lease-duration "soon": want a positive duration`},
		{[]string{"ops", "list", "--database-url", db, "--max-attempts", "0"}, 2, "--max-attempts"},
		{[]string{"ops", "list", "--database-url", db, "--provider", "paypal"}, 2, `--provider "paypal": want fake or stripe`},
		{[]string{"ops", "list", "--database-url", "mysql://x"}, 2, "want postgres://"},
		// robfig/cron panics on these; the setting refuses them first.
		{[]string{"worker", "--database-url", db, "--sweep-audit", "TZ=UTC"}, 2, "want TZ=ZONE, a space and the schedule"},
		{[]string{"worker", "--database-url", db, "--sweep-rescue", "CRON_TZ="}, 2, "want TZ=ZONE, a space and the schedule"},
		{[]string{"ops", "list", "--database-url", db, "--config", filepath.Join(t.TempDir(), "missing.conf")}, 2, "missing.conf"},
		{[]string{"worker", "--database-url", db, "extra"}, 2, "unexpected arguments"},
		{[]string{"statemachine", "extra"}, 2, "unexpected arguments"},
		{[]string{"version", "extra"}, 2, "unexpected arguments"},
		{[]string{"purchase", "show", "--database-url", db, "pur_nope"}, 1, `no purchase with id "pur_nope"`},
		{[]string{"ops", "show", "--database-url", db, "pur_nope"}, 1, `no purchase with id "pur_nope"`},
		{[]string{"refund"}, 2, "want `refund create PURCHASE`"},
		{[]string{"refund", "nonsense"}, 2, "unknown refund subcommand"},
		{[]string{"refund", "create", "--database-url", db}, 2, "want exactly one purchase id"},
		{[]string{"refund", "create", "--database-url", db, unsettled}, 2, "--amount, --reason required"},
		{[]string{"refund", "create", "--database-url", db, unsettled, "--amount", "1.50", "--reason", "r"}, 2, "whole number"},
		{[]string{"refund", "create", "--database-url", db, unsettled, "--amount", "0", "--reason", "r"}, 2, "amount"},
		{[]string{"refund", "create", "--database-url", db, unsettled, "--amount", "1", "--reason", " "}, 2, "--reason required"},
		{[]string{"refund", "create", "--database-url", db, "pur_nope", "--amount", "1", "--reason", "r"}, 1, `no purchase with id "pur_nope"`},
		{[]string{"refund", "create", "--database-url", db, unsettled, "--amount", "1", "--reason", "r"}, 1, "only a succeeded purchase is refunded"},
		{[]string{"refund", "show", "--database-url", db}, 2, "want exactly one refund id"},
		{[]string{"refund", "show", "--database-url", db, "ref_nope"}, 1, `no refund with id "ref_nope"`},
		{[]string{"refund", "--help"}, 0, ""},
		{[]string{"worker", "--database-url", "postgres://nobody@127.0.0.1:1/none"}, 1, "cannot reach database"},
		{[]string{"help"}, 0, ""},
		{[]string{"-h"}, 0, ""},
		{[]string{"--help"}, 0, ""},
		{[]string{"help", "ops", "resolve"}, 0, ""},
		{[]string{"serve", "-h"}, 0, ""},
		{[]string{"ops", "-h"}, 0, ""},
		{[]string{"purchase", "--help"}, 0, ""},
		{[]string{"version"}, 0, ""},
		{[]string{"--version"}, 0, ""},
		{[]string{"statemachine"}, 0, ""},
		{[]string{"statemachine", "--refund", "--mermaid"}, 0, ""},
		{[]string{"ops", "list", "--database-url", db}, 0, ""},
	}
	for _, tt := range tests {
		code, _, stderr := run(t, nil, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("payrecon %s: exit %d, stderr %q; want exit %d mentioning %q", strings.Join(tt.args, " "), code, stderr, tt.code, tt.want)
		}
		if tt.code == 2 && !strings.Contains(stderr, "payrecon help") {
			t.Errorf("payrecon %s: a usage error does not point at the help: %q", strings.Join(tt.args, " "), stderr)
		}
	}
}

// TestExitCodesOfTheBinary: the process exits with runMain's code.
func TestExitCodesOfTheBinary(t *testing.T) {
	bin := buildBinary(t)
	env := append(cleanEnv(), "XDG_DATA_HOME="+t.TempDir(), "HOME="+t.TempDir())
	for _, tt := range []struct {
		args []string
		code int
	}{
		{nil, 2},
		{[]string{"purchase", "create"}, 2},
		{[]string{"purchase", "show", "pur_nope"}, 1},
		{[]string{"version"}, 0},
	} {
		cmd := exec.Command(bin, tt.args...)
		cmd.Env = env
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tt.code {
			t.Errorf("payrecon %s: exit %d, want %d", strings.Join(tt.args, " "), code, tt.code)
		}
	}
}

// settingEnvs are the environment variables of every setting.
func settingEnvs() []string {
	var out []string
	for _, st := range newSettings().list {
		out = append(out, st.env)
	}
	return out
}

// TestVersion: `payrecon version` and `--version` print the module
// version and the Go version; the VCS revision and time when the build
// has them.
func TestVersion(t *testing.T) {
	code, out, _ := run(t, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "payrecon ") || !strings.Contains(out, "\ngo        go1.") {
		t.Fatalf("version: exit %d:\n%s", code, out)
	}
	if code, again, _ := run(t, nil, "--version"); code != 0 || again != out {
		t.Errorf("--version: exit %d:\n%s", code, again)
	}
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/payrecon/payrecon", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-03-01T09:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	got := versionText(bi, true)
	for _, want := range []string{"payrecon v1.2.3\n", "module    github.com/payrecon/payrecon\n", "revision  0123abcd (modified)\n", "time      2026-03-01T09:00:00Z\n", "go        go1.26.0 "} {
		if !strings.Contains(got, want) {
			t.Errorf("version text lacks %q:\n%s", want, got)
		}
	}
	bi.Main.Version, bi.Settings = "", nil
	if got := versionText(bi, true); !strings.HasPrefix(got, "payrecon (devel)\n") || strings.Contains(got, "revision") {
		t.Errorf("a build without VCS information:\n%s", got)
	}
	if got := versionText(nil, false); !strings.Contains(got, "unknown version") {
		t.Errorf("no build information:\n%s", got)
	}
}

// TestReadOnlyCommandsBuildNoProvider: the commands that never ask the
// provider build none: with --provider stripe and no STRIPE_SECRET_KEY
// (and a key file that cannot be read) they work, and log nothing about
// a provider.
func TestReadOnlyCommandsBuildNoProvider(t *testing.T) {
	f := newOpsFixture(t)
	id := f.escalated(t, false, fakeprovider.Timeout)
	clean := f.purchase(t, false) // succeeded: refundable
	unsetenv(t, settingEnvs()...)
	env := map[string]string{"STRIPE_SECRET_KEY_FILE": filepath.Join(t.TempDir(), "no-such-file")}
	stripe := []string{"--provider", "stripe", "--database-url", f.db}
	for _, args := range [][]string{
		{"purchase", "show", id},
		{"purchase", "show", id, "--json"},
		{"ops", "list"},
		{"ops", "list", "--json"},
		{"ops", "show", id},
		{"ops", "findings"},
		{"ops", "findings", "--all", "--json"},
		{"migrate"},
		{"statemachine"},
		{"purchase", "create", "--amount", "300", "--currency", "usd", "--customer", "c"},
		{"ops", "note", id, "--text", "looked at it", "--operator", "alice"},
		{"refund", "create", clean.ID, "--amount", "100", "--reason", "returned"},
	} {
		code, out, stderr := run(t, env, append(args, stripe...)...)
		if code != 0 || out == "" {
			t.Errorf("%v with --provider stripe and no key: exit %d\n%s", args, code, stderr)
		}
		// The store's line only: nothing about a provider.
		for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
			if line != "" && !strings.Contains(line, `msg="store opened"`) {
				t.Errorf("%v logs more than the store:\n%s", args, stderr)
				break
			}
		}
	}
	for _, args := range [][]string{{"version"}, {"help"}, {"help", "ops", "list"}} {
		code, _, stderr := run(t, env, args...)
		if code != 0 || stderr != "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
	// A command that asks the provider still needs it.
	code, _, stderr := run(t, env, append([]string{"ops", "recheck", id}, stripe...)...)
	if code != 2 || !strings.Contains(stderr, "STRIPE_SECRET_KEY_FILE") {
		t.Errorf("ops recheck with an unreadable key file: exit %d: %s", code, stderr)
	}
}

// TestMigrateSaysWhatItDid: migrate says from which version to which, or
// that the schema is up to date, on SQLite and on Postgres.
func TestMigrateSaysWhatItDid(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	latest := regexp.MustCompile(`^migrated from version 0 to (\d+) \((sqlite|postgres)\)\n$`)
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "m.db") }},
		{"postgres", func(t *testing.T) string { return pgtest.NewDatabase(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := tc.url(t)
			code, out, stderr := run(t, nil, "migrate", "--database-url", db)
			m := latest.FindStringSubmatch(out)
			if code != 0 || m == nil || m[2] != tc.name {
				t.Fatalf("first migrate: exit %d, %q\n%s", code, out, stderr)
			}
			code, out, stderr = run(t, nil, "migrate", "--database-url", db)
			if want := fmt.Sprintf("already at version %s (%s)\n", m[1], tc.name); code != 0 || out != want {
				t.Fatalf("second migrate: exit %d, %q, want %q\n%s", code, out, want, stderr)
			}
		})
	}
}

// TestServeAndWorkerAddresses: serve and worker listen on different
// default addresses, so that a worker runs beside serve; the setting
// overrides both.
func TestServeAndWorkerAddresses(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	addr := func(command string, args ...string) string {
		t.Helper()
		e := &env{stdout: io.Discard, stderr: io.Discard, settings: newSettings()}
		if _, err := e.parse(command, args, nil); err != nil {
			t.Fatal(err)
		}
		return e.settings.str("addr")
	}
	if got := addr("serve"); got != defaultAddr {
		t.Errorf("serve listens on %s by default, want %s", got, defaultAddr)
	}
	if got := addr("worker"); got != defaultWorkerAddr || defaultWorkerAddr == defaultAddr {
		t.Errorf("worker listens on %s by default, want %s, not serve's %s", got, defaultWorkerAddr, defaultAddr)
	}
	if got := addr("fakeprovider"); got != defaultFakeAddr || defaultFakeAddr == defaultAddr || defaultFakeAddr == defaultWorkerAddr {
		t.Errorf("fakeprovider listens on %s by default, want %s, not serve's or worker's", got, defaultFakeAddr)
	}
	if got := addr("worker", "--addr", "127.0.0.1:9999"); got != "127.0.0.1:9999" {
		t.Errorf("worker --addr: %s", got)
	}
	t.Setenv("PAYRECON_ADDR", "127.0.0.1:9998")
	if got := addr("worker"); got != "127.0.0.1:9998" {
		t.Errorf("worker with PAYRECON_ADDR: %s", got)
	}
	// The help says so.
	_, out, _ := run(t, nil, "worker", "-h")
	if !strings.Contains(out, "--addr="+defaultWorkerAddr) {
		t.Errorf("worker -h does not show its default address:\n%s", out)
	}
}

// TestSettingsPrecedence: a flag wins over the environment, which wins
// over the config file, which wins over the default; the config file
// comes from --config or PAYRECON_CONFIG and takes flag or variable
// names.
func TestSettingsPrecedence(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	dir := t.TempDir()
	conf := filepath.Join(dir, "payrecon.conf")
	write(t, conf, "# payrecon settings\nlease-duration 40s\nPAYRECON_POLL_INTERVAL 3s\nsweep-audit */10 * * * * # every ten minutes\nbatch-size 7\nmax-attempts 5\n")
	parse := func(args ...string) *settings {
		t.Helper()
		e := &env{stdout: io.Discard, stderr: io.Discard, settings: newSettings()}
		if _, err := e.parse("worker", args, nil); err != nil {
			t.Fatal(err)
		}
		return e.settings
	}
	t.Setenv("PAYRECON_BATCH_SIZE", "9")
	t.Setenv("PAYRECON_MAX_ATTEMPTS", "6")
	s := parse("--config", conf, "--max-attempts", "4")
	for name, want := range map[string]string{
		"lease-duration": "40s",          // config
		"poll-interval":  "3s",           // config, by the variable's name
		"sweep-audit":    "*/10 * * * *", // config, its comment dropped
		"batch-size":     "9",            // environment over config
		"max-attempts":   "4",            // flag over environment and config
		"concurrency":    "4",            // default
	} {
		if got := s.str(name); got != want {
			t.Errorf("--%s = %q, want %q", name, got, want)
		}
	}
	for name, want := range map[string]source{"lease-duration": fromConfig, "batch-size": fromEnv, "max-attempts": fromFlag, "concurrency": fromDefault} {
		if got := s.byKey[name].source; got != want {
			t.Errorf("--%s comes from %d, want %d", name, got, want)
		}
	}
	// PAYRECON_CONFIG names the file too.
	t.Setenv("PAYRECON_CONFIG", conf)
	if got := parse().str("lease-duration"); got != "40s" {
		t.Errorf("with PAYRECON_CONFIG: --lease-duration = %q", got)
	}
	os.Unsetenv("PAYRECON_CONFIG")

	// A bad value or an unknown name in the file is a usage error naming
	// the file and its line; an unknown name, the nearest known one.
	for content, want := range map[string]string{
		"lease-duration soon\n":                          `lease-duration "soon" in ` + conf + ":1 ",
		"# comment\n\nworker-id w1\nlease-duraton 10m\n": conf + `:4: unknown setting "lease-duraton"; did you mean "lease-duration"?`,
		"json true\n":       conf + `:1: unknown setting "json"`,
		"api-token short\n": "api-token (value hidden) in " + conf,
	} {
		write(t, conf, content)
		code, _, stderr := run(t, nil, "worker", "--config", conf)
		if code != 2 || !strings.Contains(stderr, want) || strings.Contains(stderr, "short\"") {
			t.Errorf("config %q: exit %d: %s", content, code, stderr)
		}
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSecretFiles: every secret can come from a file named by its _FILE
// variable (or -file flag): one trailing newline is dropped; both set, an
// unreadable file and an empty one are refused with the variable named.
func TestSecretFiles(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	dir := t.TempDir()
	values := map[string]string{
		"database-url":          "postgres://payrecon:pw-from-file@127.0.0.1:5432/payrecon",
		"api-token":             "shop:shop-token-0123456789",
		"ops-token":             "ops-token-0123456789abcdef",
		"stripe-secret-key":     "sk_test_from_file",
		"stripe-webhook-secret": "whsec_from_file",
	}
	for name, v := range values {
		t.Run(name, func(t *testing.T) {
			unsetenv(t, settingEnvs()...)
			s := newSettings()
			st, f := s.byKey[name], s.fileSetting(name)
			parse := func(vars map[string]string) (*settings, error) {
				for k, v := range vars {
					t.Setenv(k, v)
				}
				defer unsetenv(t, settingEnvs()...)
				e := &env{stdout: io.Discard, stderr: io.Discard, settings: newSettings()}
				_, err := e.parse("serve", nil, nil)
				return e.settings, err
			}
			for content, want := range map[string]string{v + "\n": v, v: v, v + "\r\n": v, v + "\n\n": v + "\n"} {
				path := filepath.Join(dir, name)
				write(t, path, content)
				s, err := parse(map[string]string{f.env: path})
				if err != nil {
					t.Fatal(err)
				}
				if got, err := s.secret(name); got != want && !(strings.HasSuffix(want, "\n") && err != nil) {
					t.Errorf("%s holding %q: %q, %v; want %q", f.env, content, got, err, want)
				}
			}
			path := filepath.Join(dir, name)
			write(t, path, v+"\n")
			s, _ = parse(map[string]string{f.env: path, st.env: v})
			if _, err := s.secret(name); err == nil || !strings.Contains(err.Error(), "both set") || strings.Contains(err.Error(), v) {
				t.Errorf("both %s and %s: %v", st.env, f.env, err)
			}
			write(t, path, "\n")
			s, _ = parse(map[string]string{f.env: path})
			if _, err := s.secret(name); err == nil || !strings.Contains(err.Error(), "is empty") || !strings.Contains(err.Error(), f.env) {
				t.Errorf("an empty %s: %v", f.env, err)
			}
			s, _ = parse(map[string]string{f.env: filepath.Join(dir, "missing")})
			if _, err := s.secret(name); err == nil || !strings.Contains(err.Error(), "no such file") || !strings.Contains(err.Error(), f.env) {
				t.Errorf("a missing %s: %v", f.env, err)
			}
			if os.Getuid() != 0 {
				write(t, path, v)
				os.Chmod(path, 0)
				s, _ = parse(map[string]string{f.env: path})
				if _, err := s.secret(name); err == nil || !strings.Contains(err.Error(), "permission denied") {
					t.Errorf("an unreadable %s: %v", f.env, err)
				}
			}
		})
	}

	// serve takes every secret of its from files, and a stripe provider
	// its key.
	unsetenv(t, settingEnvs()...)
	file := func(name, content string) string {
		p := filepath.Join(dir, name+".secret")
		write(t, p, content+"\n")
		return p
	}
	db := "sqlite:" + filepath.Join(t.TempDir(), "serve.db")
	env := map[string]string{
		"PAYRECON_DATABASE_URL_FILE": file("db", db),
		"PAYRECON_API_TOKEN_FILE":    file("api", values["api-token"]),
		"PAYRECON_OPS_TOKEN_FILE":    file("ops", values["ops-token"]),
		"STRIPE_SECRET_KEY_FILE":     file("key", stripeKey),
		"STRIPE_WEBHOOK_SECRET_FILE": file("hook", values["stripe-webhook-secret"]),
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errOut := &cancelOn{want: "msg=listening", cancel: cancel}
	args := []string{"serve", "--addr", "127.0.0.1:0", "--provider", "stripe", "--stripe-api-base", "http://127.0.0.1:1"}
	if code := runMain(ctx, args, io.Discard, errOut); code != 0 {
		t.Fatalf("serve with every secret from a file: exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"serving POST /webhooks/stripe", "serving the purchase API", "serving the operator pages", "provider: stripe", "sqlite:" + strings.TrimPrefix(db, "sqlite:")} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("serve's log lacks %q:\n%s", want, errOut.String())
		}
	}
	if strings.Contains(errOut.String(), "WARN msg=\"a secret") {
		t.Errorf("a secret from a file is warned about:\n%s", errOut.String())
	}
}

// TestSecretOnCommandLineWarns: a token (or a database URL with a
// password) given as a flag is logged as a warning at startup; from the
// environment it is not.
func TestSecretOnCommandLineWarns(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	parse := func(args ...string) string {
		t.Helper()
		var log bytes.Buffer
		e := &env{stdout: io.Discard, stderr: &log, settings: newSettings()}
		if _, err := e.parse("serve", args, nil); err != nil {
			t.Fatal(err)
		}
		return log.String()
	}
	const warning = `level=WARN msg="a secret is given on the command line`
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--api-token", "shop:shop-token-0123456789"}, "--api-token"},
		{[]string{"--ops-token=ops-token-0123456789abcdef"}, "--ops-token"},
		{[]string{"--database-url", "postgres://u:pw-on-argv@127.0.0.1/db"}, "--database-url"},
		{[]string{"--database-url", "postgres://u@127.0.0.1/db?password=pw-on-argv"}, "--database-url"},
	} {
		log := parse(tc.args...)
		if !strings.Contains(log, warning) || !strings.Contains(log, "flag="+tc.flag) {
			t.Errorf("%v: no warning:\n%s", tc.args, log)
		}
		if strings.Contains(log, "shop-token") || strings.Contains(log, "ops-token-0") || strings.Contains(log, "pw-on-argv") {
			t.Errorf("%v: the warning shows the secret:\n%s", tc.args, log)
		}
	}
	if log := parse("--database-url", "postgres://u@127.0.0.1/db"); strings.Contains(log, warning) {
		t.Errorf("a database URL without a password is warned about:\n%s", log)
	}
	t.Setenv("PAYRECON_API_TOKEN", "shop:shop-token-0123456789")
	if log := parse(); strings.Contains(log, warning) {
		t.Errorf("a token from the environment is warned about:\n%s", log)
	}
}

// TestConfigExample: the config file example in docs/configuration.md is
// one that payrecon reads.
func TestConfigExample(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	data, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(data), "```\n# /etc/payrecon/payrecon.conf\n")
	if !ok {
		t.Fatalf("%s has no config file example", configDoc)
	}
	block, _, _ = strings.Cut(block, "```")
	conf := filepath.Join(t.TempDir(), "payrecon.conf")
	write(t, conf, block)
	e := &env{stdout: io.Discard, stderr: io.Discard, settings: newSettings()}
	if _, err := e.parse("worker", []string{"--config", conf}, nil); err != nil {
		t.Fatalf("the config file of %s: %v", configDoc, err)
	}
	for name, want := range map[string]string{"lease-duration": "1m", "sweep-audit": "*/30 * * * *", "log-format": "json",
		"database-url-file": "/run/secrets/payrecon-database-url"} {
		if got := e.settings.str(name); got != want {
			t.Errorf("--%s = %q, want %q", name, got, want)
		}
	}
}

// TestHelpIsShort: `payrecon help` and the help of the commands that
// read the most settings fit on a screen or two, and a command's help
// names every setting it reads and every flag of its usage line.
func TestHelpIsShort(t *testing.T) {
	for _, tt := range []struct {
		args     []string
		maxLines int
	}{
		{[]string{"help"}, 40},
		{[]string{"serve", "-h"}, 60},
		{[]string{"worker", "-h"}, 60},
	} {
		code, out, _ := run(t, nil, tt.args...)
		if n := strings.Count(out, "\n"); code != 0 || n > tt.maxLines {
			t.Errorf("payrecon %s: exit %d, %d lines, want at most %d", strings.Join(tt.args, " "), code, n, tt.maxLines)
		}
	}
	s := newSettings()
	all := commands()
	for _, c := range all {
		group := slices.ContainsFunc(all, func(sub command) bool { return strings.HasPrefix(sub.name, c.name+" ") })
		if c.name == "help" || group {
			continue // their help lists commands
		}
		_, out, _ := run(t, nil, append(strings.Fields(c.name), "-h")...)
		want := slices.Clone(c.settings)
		for _, f := range strings.Fields(c.args) {
			if name, ok := strings.CutPrefix(strings.Trim(f, "[]"), "--"); ok {
				want = append(want, name)
			}
		}
		for _, name := range want {
			shown := "--" + name
			if st := s.byKey[name]; st != nil && st.envOnly {
				shown = st.env
			}
			if !strings.Contains(out, shown) {
				t.Errorf("payrecon %s -h does not show %s", c.name, shown)
			}
		}
	}
}
