package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/payrecon/payrecon/cmd/payrecon/internal/bench"
	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/sqlite"
)

// benchN is the tiny N of the end-to-end runs: they check what the bench
// reports, never how fast anything went.
const benchN = 12

// benchStores make a scratch database for a bench run, by store.
var benchStores = []struct {
	name  string
	newDB func(t *testing.T) string
}{
	{"postgres", func(t *testing.T) string { t.Helper(); return pgtest.NewDatabase(t) }},
	{"sqlite", func(t *testing.T) string { t.Helper(); return "sqlite:" + filepath.Join(t.TempDir(), "bench.db") }},
}

// TestBenchEndToEnd runs every bench subcommand with a tiny N on each
// store and checks the report: its sections, the ledger check, the
// database figures where Postgres has them, and the progress lines.
func TestBenchEndToEnd(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	cases := []struct {
		name     string
		args     []string
		label    string // of the measured phase's progress lines
		outcome  string // what every event or request must come to
		latency  []string
		hasRSS   bool
		openLoop bool
		applied  bool // an applied phase, until the inbox is empty
	}{
		{name: "burn-down", args: []string{"bench", "burn-down"}, label: "burn-down",
			latency: []string{"created → final", "submitted → final"}, hasRSS: runtime.GOOS == "linux"},
		{name: "webhooks closed loop", args: []string{"bench", "webhooks", "--clients", "3"}, label: "webhooks",
			outcome: "received", latency: []string{"sent → answered", "received → applied"}, applied: true},
		{name: "webhooks open loop", args: []string{"bench", "webhooks", "--clients", "3", "--rate", "2000"}, label: "webhooks",
			outcome: "received", latency: []string{"scheduled → answered", "received → applied"}, openLoop: true, applied: true},
		{name: "webhooks backlog", args: []string{"bench", "webhooks", "--clients", "3", "--backlog"}, label: "webhooks",
			outcome: "received", latency: []string{"sent → answered", "received → applied"}, applied: true},
		{name: "api closed loop", args: []string{"bench", "api", "--clients", "3"}, label: "api",
			outcome: "201 created", latency: []string{"sent → answered"}},
		{name: "api open loop", args: []string{"bench", "api", "--clients", "3", "--rate", "2000"}, label: "api",
			outcome: "201 created", latency: []string{"scheduled → answered"}, openLoop: true},
	}
	for _, store := range benchStores {
		for _, tc := range cases {
			t.Run(store.name+"/"+tc.name, func(t *testing.T) {
				db := store.newDB(t)
				args := append(slices.Clone(tc.args), "--n", "12", "--database-url", db, "--json")
				code, stdout, stderr := run(t, nil, args...)
				if code != 0 {
					t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
				}
				var r bench.Report
				if err := json.Unmarshal([]byte(stdout), &r); err != nil {
					t.Fatalf("the report is not JSON: %v\n%s", err, stdout)
				}
				checkBenchReport(t, r, store.name, tc.args[1])
				if !strings.Contains(stderr, "bench: "+tc.label+": 12/12 ") {
					t.Errorf("no progress line ending at 12/12 for %s in stderr:\n%s", tc.label, stderr)
				}
				var names []string
				for _, l := range r.Latency {
					names = append(names, l.Name)
					if l.Count != benchN {
						t.Errorf("latency %s over %d %s, want %d", l.Name, l.Count, r.Unit, benchN)
					}
				}
				if !slices.Equal(names, tc.latency) {
					t.Errorf("latency measures %q, want %q", names, tc.latency)
				}
				if tc.outcome != "" && (r.Outcomes[tc.outcome] != benchN || len(r.Outcomes) != 1) {
					t.Errorf("outcomes %v, want %s %d", r.Outcomes, tc.outcome, benchN)
				}
				if (r.Late != nil) != tc.openLoop || (r.LateWakeups != nil) != tc.openLoop {
					t.Errorf("late sends reported: %v, late wake-ups: %v; want both for an open loop only", r.Late != nil, r.LateWakeups != nil)
				}
				if tc.openLoop && *r.Late+*r.LateWakeups > benchN {
					t.Errorf("%d sends late, %d woke late, of %d", *r.Late, *r.LateWakeups, benchN)
				}
				if a := r.Applied; (a != nil) != tc.applied || (a != nil && (a.Count != benchN || a.PerSecond <= 0 || r.AppliedCPU == nil)) {
					t.Errorf("applied phase %+v (cpu %v), want one of %d events: %v", a, r.AppliedCPU, benchN, tc.applied)
				}
				if (r.RSS != nil) != tc.hasRSS {
					t.Errorf("RSS reported: %v, want %v", r.RSS != nil, tc.hasRSS)
				}
				if r.RSS != nil && (r.RSS.PeakKiB <= 0 || r.RSS.Samples == 0 || r.RSS.MinKiB > r.RSS.MaxKiB) {
					t.Errorf("RSS %+v", *r.RSS)
				}
			})
		}
	}
}

// checkBenchReport checks what every report must hold.
func checkBenchReport(t *testing.T, r bench.Report, store, bench string) {
	t.Helper()
	if !r.OK || len(r.Problems) > 0 {
		t.Errorf("report not OK: %q", r.Problems)
	}
	if r.Bench != bench || r.Store != store || r.N != benchN {
		t.Errorf("report of %s on %s, n %d; want %s on %s, n %d", r.Bench, r.Store, r.N, bench, store, benchN)
	}
	if r.Run.Count != benchN || r.Run.Seconds <= 0 || r.Run.PerSecond <= 0 || r.Run.What == "" {
		t.Errorf("run %+v", r.Run)
	}
	if bench != "api" && (r.Setup == nil || r.Setup.Count != benchN) {
		t.Errorf("setup %+v, want %d purchases", r.Setup, benchN)
	}
	if l := r.Ledger; l == nil || !l.OK || l.Charges != benchN || l.Purchases != benchN {
		t.Errorf("ledger %+v, want %d purchases charged once each", l, benchN)
	}
	for _, l := range r.Latency {
		if !(0 <= l.P50ms && l.P50ms <= l.P90ms && l.P90ms <= l.P99ms && l.P99ms <= l.Maxms) {
			t.Errorf("%s: percentiles out of order: %+v", l.Name, l)
		}
		sum := 0
		for _, b := range l.Histogram {
			sum += b.Count
		}
		if sum != l.Count || len(l.Histogram) == 0 {
			t.Errorf("%s: the histogram counts %d of %d", l.Name, sum, l.Count)
		}
	}
	if runtime.GOOS == "linux" {
		c := r.CPU
		switch {
		case c == nil:
			t.Error("no CPU figures on Linux")
		case c.Seconds <= 0 || c.ProcessSeconds <= 0 || c.ProcessMsPerUnit <= 0 || c.ProcessCores <= 0:
			t.Errorf("the process's CPU %+v: none measured", *c)
		case c.MachineBusy == nil:
			// /proc/stat counts in ticks (10 ms a core): a phase much
			// shorter may see it not move, and then has no share.
			if c.Seconds >= 0.1 {
				t.Errorf("the machine's CPU not measured over %.3fs: %+v", c.Seconds, *c)
			}
		case *c.MachineBusy < 0 || *c.MachineBusy > 1 || c.MachineCores < 1 || *c.MachineMsPerUnit < 0:
			t.Errorf("the machine's CPU %+v: want a share of 0 to 1 of at least one core", *c)
		}
	}
	notes := strings.Join(r.Notes, "\n")
	switch store {
	case "postgres":
		if r.DB == nil || r.DB.Commits <= 0 {
			t.Errorf("no commits counted on Postgres: %+v", r.DB)
		} else if r.DB.ServerStatements == nil && !strings.Contains(notes, "pg_stat_statements not read") {
			t.Errorf("pg_stat_statements not read, and no note says why:\n%s", notes)
		}
		if r.DB != nil && (r.DB.Statements == nil || *r.DB.Statements < r.DB.RoundTrips || *r.DB.TxControl <= 0) {
			t.Errorf("statements not counted, or fewer than the round trips, or no BEGIN, COMMIT...: %+v", *r.DB)
		}
		if r.DB != nil && r.DB.RoundTrips <= 0 {
			t.Errorf("no round trips counted on Postgres: %+v", *r.DB)
		}
		if !strings.Contains(notes, "round trips are counted by the store's pgx tracer") {
			t.Errorf("no note on round trips:\n%s", notes)
		}
	case "sqlite":
		if r.DB != nil {
			t.Errorf("database figures on SQLite: %+v", *r.DB)
		}
		if !strings.Contains(notes, "not measured on SQLite") {
			t.Errorf("no note on SQLite's figures:\n%s", notes)
		}
	}
}

// TestBenchTextReport: without --json the report is for a person: every
// section, the histograms, the ledger's verdict.
func TestBenchTextReport(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	db := "sqlite:" + filepath.Join(t.TempDir(), "bench.db")
	code, stdout, stderr := run(t, nil, "bench", "burn-down", "--n", "12", "--database-url", db, "--concurrency", "2", "--batch-size", "5")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	wants := []string{
		"payrecon bench burn-down: 12 purchases on sqlite (concurrency 2, batch size 5)\n",
		"  setup ", "  burn-down     12 purchases in ", " purchases/s\n",
		"created → final", "submitted → final", " p50 ", " p90 ", " p99 ", " max ",
		"  histogram of created → final (12 purchases):\n", "  histogram of submitted → final (12 purchases):\n",
		"  ledger        12 charges for 12 purchases, exactly one each: OK\n",
		"not measured on SQLite",
	}
	if runtime.GOOS == "linux" {
		wants = append(wants, "  cpu           this process ", " ms per purchase (", " of a core); the machine ", "% busy of ")
	}
	for _, want := range wants {
		if !strings.Contains(stdout, want) {
			t.Errorf("the report lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "PROBLEM") || strings.Contains(stdout, "FAILED") {
		t.Errorf("the report of a clean run shows a problem:\n%s", stdout)
	}
}

// countPurchases counts the purchases in the SQLite database at url.
func countPurchases(t *testing.T, url string) int {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: strings.TrimPrefix(url, "sqlite:")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	total := 0
	err = st.InTx(ctx, func(tx reconcile.Tx) error {
		counts, err := tx.CountByState(ctx)
		for _, n := range counts {
			total += n
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// TestBenchRefusesADatabaseNotItsOwn: a database that holds purchases is
// refused unless --yes; one with a purchase not final is refused even
// with --yes, and nothing is added to it.
func TestBenchRefusesADatabaseNotItsOwn(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	benches := [][]string{{"bench", "burn-down"}, {"bench", "webhooks"}, {"bench", "api"}}

	real := "sqlite:" + filepath.Join(t.TempDir(), "real.db")
	if code, _, stderr := run(t, nil, "purchase", "create", "--database-url", real, "--amount", "300", "--currency", "usd", "--customer", "c"); code != 0 {
		t.Fatalf("set-up: %s", stderr)
	}
	for _, bench := range benches {
		for _, yes := range [][]string{nil, {"--yes"}} {
			args := append(append(slices.Clone(bench), "--n", "3", "--database-url", real), yes...)
			code, stdout, stderr := run(t, nil, args...)
			if code != 1 || !strings.Contains(stderr, "refusing to run: the database holds 1 purchases, 1 of them not final") ||
				!strings.Contains(stderr, "--yes does not override this") || stdout != "" {
				t.Errorf("%v: exit %d, stderr %q, stdout %q; want exit 1, refused", args, code, stderr, stdout)
			}
		}
	}
	if n := countPurchases(t, real); n != 1 {
		t.Errorf("the refused runs left %d purchases, want the 1 there was", n)
	}

	// A previous bench's database: final purchases only.
	again := "sqlite:" + filepath.Join(t.TempDir(), "again.db")
	if code, _, stderr := run(t, nil, "bench", "burn-down", "--n", "3", "--database-url", again, "--json"); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, stderr)
	}
	want := 3
	for _, bench := range benches {
		args := append(slices.Clone(bench), "--n", "3", "--database-url", again, "--json")
		code, _, stderr := run(t, nil, args...)
		if code != 1 || !strings.Contains(stderr, "refusing to run: the database holds 3 purchases (all final)") || !strings.Contains(stderr, "--yes") {
			t.Errorf("%v: exit %d, stderr %q; want exit 1, refused, pointing at --yes", args, code, stderr)
		}
	}
	for _, bench := range benches {
		args := append(slices.Clone(bench), "--n", "3", "--database-url", again, "--json", "--yes")
		if code, _, stderr := run(t, nil, args...); code != 0 {
			t.Errorf("%v: exit %d\n%s", args, code, stderr)
		}
		want += 3
	}
	if n := countPurchases(t, again); n != want {
		t.Errorf("%d purchases after the runs, want %d", n, want)
	}
}

// TestBenchBadInputs: a bad command line exits 2 with a clear message and
// a pointer to the help, before anything is opened.
func TestBenchBadInputs(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	path := filepath.Join(t.TempDir(), "never.db")
	db := []string{"--database-url", "sqlite:" + path}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, "want bench burn-down | bench webhooks | bench api"},
		{[]string{"bench", "nonsense"}, `unknown bench subcommand "nonsense": want burn-down, webhooks, api or backlog`},
		{append([]string{"bench", "burn-down", "--n", "0"}, db...), "--n 0: want a number of purchases from 1 to"},
		{append([]string{"bench", "webhooks", "--n", "-3"}, db...), "--n -3: want a number of events from 1 to"},
		{append([]string{"bench", "api", "--n", "many"}, db...), `invalid value "many" for flag -n`},
		{append([]string{"bench", "webhooks", "--rate", "-1"}, db...), "--rate -1: want a number of requests a second, or 0 for a closed loop"},
		{append([]string{"bench", "api", "--rate", "NaN"}, db...), "--rate NaN"},
		{append([]string{"bench", "api", "--clients", "0"}, db...), "--clients 0: want a number of clients from 1 to"},
		{append([]string{"bench", "burn-down", "--rate", "5"}, db...), "flag provided but not defined: -rate"},
		{append([]string{"bench", "burn-down", "extra"}, db...), `unexpected arguments ["extra"]`},
		{[]string{"bench", "burn-down"}, "--database-url is required"},
		{[]string{"bench", "api", "--database-url", "mysql://x"}, "want postgres://"},
		{append([]string{"bench", "burn-down", "--provider", "stripe"}, db...), "--provider stripe: the bench runs against the in-process fake provider only"},
		{append([]string{"bench", "webhooks", "--fake-faults", "timeout=0.5"}, db...), "--fake-faults: the bench's fake provider has no faults"},
		{append([]string{"bench", "burn-down", "--concurrency", "0"}, db...), "--concurrency"},
	}
	for _, tt := range tests {
		code, stdout, stderr := run(t, nil, tt.args...)
		if code != 2 || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "Run 'payrecon help bench") || stdout != "" {
			t.Errorf("payrecon %s: exit %d, stderr %q; want exit 2 mentioning %q and the help", strings.Join(tt.args, " "), code, stderr, tt.want)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a refused command line opened the database: %v", err)
	}
}

// TestBenchUnreachableDatabase: a database that cannot be reached is a
// failure (exit 1), named without its password.
func TestBenchUnreachableDatabase(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	code, stdout, stderr := run(t, nil, "bench", "burn-down", "--n", "3", "--database-url", "postgres://nobody:s3cret@127.0.0.1:1/none")
	if code != 1 || !strings.Contains(stderr, "cannot reach database 127.0.0.1:1/none") || strings.Contains(stderr+stdout, "s3cret") {
		t.Errorf("exit %d, stderr %q; want exit 1 naming the database, not its password", code, stderr)
	}
}

// TestBenchBacklogAccounts runs bench backlog over three connected
// accounts, one of them hot, on SQLite with a high budget: it checks what
// the report says of each account, never how fast.
func TestBenchBacklogAccounts(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	db := "sqlite:" + filepath.Join(t.TempDir(), "bench.db")
	code, stdout, stderr := run(t, nil, "bench", "backlog", "--database-url", db, "--accounts", "3", "--n", "30", "--hot", "20",
		"--fresh", "--rate", "20", "--for", "500ms", "--workers", "2", "--budget-create", "200", "--budget-global", "400")
	if code != 0 {
		t.Fatalf("bench backlog: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"bench backlog: 30 purchases created, none sent across 3 accounts (10 each), 2 workers, budget 200 creates/s per account",
		"per account:", "of 3 accounts under 90%", "fair share:", "answered 429:", "hot account:     acct_bench1, 20 more queued",
		"new purchases:", "ledger:", " 0 problems",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the report lacks %q:\n%s", want, stdout)
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--hot", "5"}, "--hot 5: want --accounts 2 or more"},
		{[]string{"--accounts", "1", "--hot", "5"}, "--hot 5: want --accounts 2 or more"},
		{[]string{"--for", "1s"}, "--for 1s: want a duration of 0 or more, with --accounts"},
		{[]string{"--accounts", "10", "--n", "5"}, "--n 5: want at least one purchase for each of the 10 accounts"},
		{[]string{"--accounts", "2000"}, "--accounts 2000: want 0 to 1000"},
		{[]string{"--n", "0"}, "--n 0: want 1 to"},
	} {
		code, _, stderr := run(t, nil, append([]string{"bench", "backlog", "--database-url", db}, tt.args...)...)
		if code != 2 || !strings.Contains(stderr, tt.want) {
			t.Errorf("bench backlog %q: exit %d, stderr %q; want exit 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
}

// TestBenchBacklog runs bench backlog with a tiny backlog and a high
// budget on SQLite: it checks what the report says, never how fast.
func TestBenchBacklog(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	db := "sqlite:" + filepath.Join(t.TempDir(), "bench.db")
	code, stdout, stderr := run(t, nil, "bench", "backlog", "--database-url", db, "--n", "20", "--rate", "20", "--workers", "2",
		"--budget-create", "200", "--budget-global", "400")
	if code != 0 {
		t.Fatalf("bench backlog: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"bench backlog: 20 purchases uncertain after an outage, 2 workers, budget 200 creates/s",
		"budget used:", "answered 429:", "new purchases:", "p99", "ledger:",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the report lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "outage: making 20 purchases uncertain") {
		t.Errorf("no progress on stderr:\n%s", stderr)
	}
}
