package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Report is what a bench subcommand found: printed as text, or as
// JSON with --json.
type Report struct {
	Bench string `json:"bench"` // burn-down, webhooks or api
	Store string `json:"store"` // postgres or sqlite
	N     int    `json:"n"`
	Unit  string `json:"unit"` // purchases, events or requests

	// The worker's settings (burn-down, and the set-up of webhooks).
	Concurrency int `json:"concurrency,omitempty"`
	BatchSize   int `json:"batch_size,omitempty"`
	// The HTTP drivers' shape: clients, and the open loop's rate (0 for a
	// closed loop).
	Clients int     `json:"clients,omitempty"`
	Rate    float64 `json:"rate,omitempty"`

	// Setup is the untimed preparation: the load of a burn-down, the
	// purchases a webhook run needs. Nil when there is none.
	Setup *Phase `json:"setup,omitempty"`
	// Run is the measured phase.
	Run Phase `json:"run"`
	// Applied is the webhook applier's phase, until the inbox was empty,
	// and AppliedCPU its CPU time: from the first send, or with
	// --backlog from the applier's start once every event was received.
	Applied    *Phase `json:"applied,omitempty"`
	AppliedCPU *CPU   `json:"applied_cpu,omitempty"`
	// Late counts the open loop's sends that left more than a millisecond
	// after their scheduled time because every client was busy then;
	// LateWakeups those that left late because their client woke late
	// from its wait for their time (the machine's scheduler, a loaded
	// CPU). Both count their latency from the scheduled time. (Reports
	// from before late_wakeups counted both in late_sends.)
	Late        *int `json:"late_sends,omitempty"`
	LateWakeups *int `json:"late_wakeups,omitempty"`

	// DB holds the database's own counters over the measured phase
	// (Postgres only).
	DB *DB `json:"db,omitempty"`
	// RSS is the process's memory during the burn-down.
	RSS *RSS `json:"rss,omitempty"`
	// CPU is the CPU time the measured phase took, of the process and of
	// the machine; nil where the process's could not be read.
	CPU *CPU `json:"cpu,omitempty"`
	// Latency has one entry per measure, p50 to max and a histogram.
	Latency []Latency `json:"latency"`
	// Outcomes counts what became of each event (webhooks) or request
	// (api).
	Outcomes map[string]int `json:"outcomes,omitempty"`
	// Ledger is the fake provider's ledger against the purchases.
	Ledger *Ledger `json:"ledger,omitempty"`

	// Notes say what was not measured, and why.
	Notes []string `json:"notes,omitempty"`
	// OK is false when something went wrong: Problems say what.
	OK       bool     `json:"ok"`
	Problems []string `json:"problems,omitempty"`
}

// Phase is one phase's count and time.
type Phase struct {
	What      string  `json:"what"`
	Count     int     `json:"count"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
}

func newPhase(what string, count int, took time.Duration) Phase {
	p := Phase{What: what, Count: count, Seconds: took.Seconds()}
	if took > 0 {
		p.PerSecond = float64(count) / took.Seconds()
	}
	return p
}

// DB is the measured phase's share of the database's counters:
// pg_stat_database's commits and rollbacks, and pg_stat_statements'
// calls when it is loaded (nil otherwise); and the round trips and
// statements the bench's stores sent, counted client-side.
type DB struct {
	Commits    int64 `json:"commits"`
	Rollbacks  int64 `json:"rollbacks"`
	RoundTrips int64 `json:"round_trips"`
	// Statements counts the statements the stores sent and the server
	// ran (counted by the stores' pgx tracer: a statement that a failure
	// before it skipped is not), TxControl those of them that are
	// BEGIN, COMMIT, ROLLBACK, SAVEPOINT or RELEASE.
	Statements *int64 `json:"statements,omitempty"`
	TxControl  *int64 `json:"tx_control_statements,omitempty"`
	// ServerStatements is pg_stat_statements' count of the statements
	// run in the database. On PostgreSQL 15 (where it was checked) it
	// leaves out a utility
	// statement (BEGIN, SET, SAVEPOINT, RELEASE) sent through the
	// extended protocol, in a batch, after its first run on a
	// connection; and it counts other sessions' statements too.
	ServerStatements *int64 `json:"server_statements,omitempty"`
}

// Latency summarises one latency measure.
type Latency struct {
	Name      string   `json:"name"`
	About     string   `json:"about,omitempty"`
	Count     int      `json:"count"`
	P50ms     float64  `json:"p50_ms"`
	P90ms     float64  `json:"p90_ms"`
	P99ms     float64  `json:"p99_ms"`
	Maxms     float64  `json:"max_ms"`
	Histogram []Bucket `json:"histogram"`
}

// Bucket counts the latencies above the previous bucket's bound, up
// to UpToMs.
type Bucket struct {
	UpToMs float64 `json:"up_to_ms"`
	Count  int     `json:"count"`
}

// Ledger compares the fake provider's ledger with the purchases:
// each must have exactly one charge.
type Ledger struct {
	Purchases     int      `json:"purchases"`
	Charges       int      `json:"charges"`
	Uncharged     int      `json:"uncharged"`
	DoubleCharged []string `json:"double_charged,omitempty"`
	Foreign       int      `json:"foreign"` // charges for no purchase of this run
	OK            bool     `json:"ok"`
}

// bucketBounds are the histogram's upper bounds: 1-2-5 steps from 100µs.
var bucketBounds = func() []time.Duration {
	var out []time.Duration
	for d := 100 * time.Microsecond; d <= 10000*time.Second; d *= 10 {
		out = append(out, d, 2*d, 5*d)
	}
	return out
}()

// summarise returns the percentiles and histogram of ds (which it sorts).
func summarise(name, about string, ds []time.Duration) Latency {
	l := Latency{Name: name, About: about, Count: len(ds), Histogram: []Bucket{}}
	if len(ds) == 0 {
		return l
	}
	slices.Sort(ds)
	l.P50ms, l.P90ms, l.P99ms = ms(percentile(ds, 50)), ms(percentile(ds, 90)), ms(percentile(ds, 99))
	l.Maxms = ms(ds[len(ds)-1])
	counts := make([]int, len(bucketBounds))
	for _, d := range ds {
		i, _ := slices.BinarySearch(bucketBounds, d) // the first bound >= d
		counts[min(i, len(counts)-1)]++
	}
	first, last := -1, -1
	for i, c := range counts {
		if c > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	for i := first; i <= last; i++ {
		l.Histogram = append(l.Histogram, Bucket{UpToMs: ms(bucketBounds[i]), Count: counts[i]})
	}
	return l
}

// percentile is the nearest-rank p-th percentile of sorted ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	return ds[min(max(rank, 1), len(ds))-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fmtMs writes a latency in milliseconds as a person reads it.
func fmtMs(v float64) string {
	switch {
	case v < 1:
		return fmt.Sprintf("%.0fµs", v*1000)
	case v < 10:
		return fmt.Sprintf("%.2fms", v)
	case v < 100:
		return fmt.Sprintf("%.1fms", v)
	case v < 1000:
		return fmt.Sprintf("%.0fms", v)
	default:
		return fmt.Sprintf("%.2fs", v/1000)
	}
}

// fmtKiB writes a size in KiB as MiB.
func fmtKiB(k int64) string { return fmt.Sprintf("%.1f MiB", float64(k)/1024) }

// per writes n per unit, with two decimals.
func per(n int64, units int) string {
	if units == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(n)/float64(units))
}

// writeJSON writes the report as indented JSON.
func (r *Report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeText writes the report for a person: one section a line, the
// histograms below the latencies.
func (r *Report) writeText(w io.Writer) {
	shape := ""
	switch {
	case r.Bench == "burn-down":
		shape = fmt.Sprintf("concurrency %d, batch size %d", r.Concurrency, r.BatchSize)
	case r.Rate > 0:
		shape = fmt.Sprintf("open loop at %g/s, at most %d in flight", r.Rate, r.Clients)
	default:
		shape = fmt.Sprintf("closed loop, %d clients", r.Clients)
	}
	fmt.Fprintf(w, "payrecon bench %s: %d %s on %s (%s)\n", r.Bench, r.N, r.Unit, r.Store, shape)
	row := func(head, format string, args ...any) {
		fmt.Fprintf(w, "  %-12s  %s\n", head, fmt.Sprintf(format, args...))
	}
	if s := r.Setup; s != nil {
		row("setup", "%s: %d in %.2fs, %.0f/s (not timed below)", s.What, s.Count, s.Seconds, s.PerSecond)
	}
	row(r.Bench, "%d %s in %.2fs: %.1f %s/s", r.Run.Count, r.Unit, r.Run.Seconds, r.Run.PerSecond, r.Unit)
	if r.Late != nil {
		line := fmt.Sprintf("%d of %d sends left more than 1ms late, every client busy", *r.Late, r.Run.Count)
		if r.LateWakeups != nil {
			line += fmt.Sprintf("; %d more, their client woke more than 1ms late (the machine's scheduler)", *r.LateWakeups)
		}
		row("schedule", "%s; their latency counts from the scheduled time", line)
	}
	unit := strings.TrimSuffix(r.Unit, "s")
	if d := r.DB; d != nil {
		line := fmt.Sprintf("per %s: %s round trips, %s commits, %s rollbacks", unit, per(d.RoundTrips, r.N), per(d.Commits, r.N), per(d.Rollbacks, r.N))
		if d.Statements != nil {
			line += fmt.Sprintf(", %s statements (%s of them BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE)", per(*d.Statements, r.N), per(*d.TxControl, r.N))
		}
		if d.ServerStatements != nil {
			line += fmt.Sprintf(", %s counted by pg_stat_statements", per(*d.ServerStatements, r.N))
		}
		row("database", "%s", line)
	}
	if m := r.RSS; m != nil {
		row("RSS", "peak %s (VmHWM since %s); sampled %s to %s (VmRSS, %d samples)", fmtKiB(m.PeakKiB), m.PeakSince, fmtKiB(m.MinKiB), fmtKiB(m.MaxKiB), m.Samples)
	}
	cpu := func(head string, c *CPU) {
		line := fmt.Sprintf("this process %.3f ms per %s (%.2f of a core)", c.ProcessMsPerUnit, unit, c.ProcessCores)
		if c.MachineBusy != nil {
			line += fmt.Sprintf("; the machine %.0f%% busy of %d cores: %.3f ms per %s, the database's share included when it runs on this machine",
				100**c.MachineBusy, c.MachineCores, *c.MachineMsPerUnit, unit)
		}
		row(head, "%s", line)
	}
	if c := r.CPU; c != nil {
		cpu("cpu", c)
	}
	if a := r.Applied; a != nil {
		row("applied", "%s: %d in %.2fs, %.1f %s/s", a.What, a.Count, a.Seconds, a.PerSecond, r.Unit)
		if c := r.AppliedCPU; c != nil {
			cpu("applied cpu", c)
		}
	}
	for _, l := range r.Latency {
		if l.Count == 0 {
			row("latency", "%s: none measured", l.Name)
			continue
		}
		row("latency", "%-22s p50 %-8s p90 %-8s p99 %-8s max %s", l.Name, fmtMs(l.P50ms), fmtMs(l.P90ms), fmtMs(l.P99ms), fmtMs(l.Maxms))
		if l.About != "" {
			row("", "  (%s)", l.About)
		}
	}
	for _, l := range r.Latency {
		if len(l.Histogram) == 0 {
			continue
		}
		fmt.Fprintf(w, "  histogram of %s (%d %s):\n", l.Name, l.Count, r.Unit)
		most := 0
		for _, b := range l.Histogram {
			most = max(most, b.Count)
		}
		for _, b := range l.Histogram {
			bar := strings.Repeat("#", int(math.Ceil(40*float64(b.Count)/float64(most))))
			fmt.Fprintf(w, "    ≤ %-8s %8d  %s\n", fmtMs(b.UpToMs), b.Count, bar)
		}
	}
	if len(r.Outcomes) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.Outcomes)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, r.Outcomes[k]))
		}
		row("outcomes", "%s", strings.Join(parts, ", "))
	}
	if l := r.Ledger; l != nil {
		if l.OK {
			row("ledger", "%d charges for %d purchases, exactly one each: OK", l.Charges, l.Purchases)
		} else {
			row("ledger", "FAILED: %d charges for %d purchases: %d charged more than once, %d not charged, %d charges for no purchase of this run",
				l.Charges, l.Purchases, len(l.DoubleCharged), l.Uncharged, l.Foreign)
		}
	}
	for _, n := range r.Notes {
		row("note", "%s", n)
	}
	for _, p := range r.Problems {
		row("PROBLEM", "%s", p)
	}
}
