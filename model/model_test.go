package model_test

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/model"
)

// spec is one model the tests check: its safety run, then one liveness
// run per claim.
type spec struct {
	// file is the model, in this directory.
	file string
	// claims are the model's ltl claims, each checked for acceptance
	// cycles under weak fairness in a run of its own.
	claims []string
	// nfair is pan's NFAIR for the liveness runs: 2 by default, one more
	// when the model's processes need it.
	nfair int
	// depth is pan's search depth (-m), 200,000 by default; a search that
	// reaches it fails as not exhaustive.
	depth int
	// liveDefines are spin -D settings of the liveness runs: a smaller
	// configuration of the model, searched as exhaustively, where the
	// fairness search over the whole one would outlast CI.
	liveDefines []string
	// machines are the state variables a model changes only through its
	// move inline, which asserts the generated table: the variable's name,
	// the include file, and the assertion the move makes.
	machines []machine
}

// machine is a state variable assigned in one place only, the move that
// asserts the include file's table.
type machine struct {
	variable, include, assertion string
}

// models lists every model checked, and the mutants of each are in
// mutants.
var models = []spec{purchaseModel, refundsModel, outboxModel, purchasesModel}

var purchaseModel = spec{
	file:     "model.pml",
	claims:   []string{"settles"},
	nfair:    3,
	machines: []machine{{"pstate", "transitions.pml", "assert(ALLOWED(f, t));"}},
}

// TestTransitionsUpToDate fails when a checked-in include file is not
// what `go generate ./model` writes from the Go table, so that the models
// and the code cannot disagree about a machine's moves.
func TestTransitionsUpToDate(t *testing.T) {
	for _, g := range model.Files {
		got, err := os.ReadFile(g.File)
		if err != nil {
			t.Fatal(err)
		}
		if want := g.Text(); !bytes.Equal(got, want) {
			t.Errorf("%s is out of date with statemachine.%s; run `go generate ./model`\n got:\n%s\nwant:\n%s",
				g.File, g.Machine.Name(), got, want)
		}
	}
}

// TestModelUsesOnlyTheTable checks that each model includes the generated
// moves and changes a process's state only through its move inline, which
// asserts them.
func TestModelUsesOnlyTheTable(t *testing.T) {
	for _, sp := range models {
		src, err := os.ReadFile(sp.file)
		if err != nil {
			t.Fatal(err)
		}
		text := string(src)
		for _, m := range sp.machines {
			if !strings.Contains(text, `#include "`+m.include+`"`) {
				t.Errorf("%s does not include %s", sp.file, m.include)
			}
			if !strings.Contains(text, m.assertion) {
				t.Errorf("%s's move does not %s", sp.file, m.assertion)
			}
			// The variable (or an element of it) is assigned in the move
			// and nowhere else, but its declaration.
			assign := regexp.MustCompile(`\b` + m.variable + `(\[[^\]]*\])?\s*=[^=]`)
			decl := regexp.MustCompile(`^(bit|bool|byte|short|int|unsigned)\s+` + m.variable + `\b`)
			n := 0
			for _, l := range strings.Split(text, "\n") {
				if !decl.MatchString(l) {
					n += len(assign.FindAllString(l, -1))
				}
			}
			if n != 1 {
				t.Errorf("%s is assigned %d times in %s; only its move may assign it", m.variable, n, sp.file)
			}
		}
	}
}

// tools returns the paths of spin and of the C compiler that builds pan.
// Without them the test skips on a developer machine and fails under CI.
func tools(t *testing.T) (spin, cc string) {
	t.Helper()
	spin, err := exec.LookPath("spin")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("spin is required under CI: install Debian's spin package (.ci/run does)")
		}
		t.Skip("spin not found: install Debian's spin package to check the model")
	}
	for _, name := range []string{os.Getenv("CC"), "cc", "gcc"} {
		if name == "" {
			continue
		}
		if cc, err = exec.LookPath(name); err == nil {
			return spin, cc
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("a C compiler is required under CI to build spin's verifier")
	}
	t.Skip("no C compiler (cc, gcc) found to build spin's verifier")
	return "", ""
}

// mutant is a copy of the model with one guard removed: every line of
// model.pml that carries the marker MUTANT:name is replaced, in order, by
// the mutant's lines.
type mutant struct {
	// file is the model mutated.
	file       string
	name, what string
	lines      []string
	// liveness: the mutant breaks the ltl claim named claim, not an
	// assertion.
	liveness bool
	claim    string
	// deep: the counterexample lies deep in the search, where looking for
	// a shorter one costs more than the whole check: the first is kept.
	deep bool
	// want: the properties (the comments on the assertions) of which spin
	// must find one violated.
	want []string
}

var mutants = []mutant{
	{
		file:  "model.pml",
		name:  "newkey",
		what:  "once the key can no longer be replayed, reconcile by a create under a new key instead of a search",
		lines: []string{"\t\t\t\t:: else -> op = OP_CREATE; pkey = KEY + 1"},
		want:  []string{"never a new key"},
	},
	{
		file: "model.pml",
		name: "nofence",
		what: "drop the lease check (owner, token, expiry) from every write and from the provider call",
		lines: []string{
			"#define FENCED(me) (true)",
			"\t\t\t:: true ->",
		},
		deep: true,
		want: []string{"never a create after the retention minus the margin"},
	},
	{
		file: "model.pml",
		name: "replay",
		what: "replay the stored create whatever the key's age (keyReplayable dropped), and stop checking the create's age: the charge count must still catch it",
		lines: []string{
			"\tskip",
			"\t\t\t\t:: payid == PAY_NONE && esc != E_CHARGE -> op = OP_CREATE",
		},
		want: []string{"at most one charge per purchase"},
	},
	{
		file:  "model.pml",
		name:  "overwrite",
		what:  "the judge applies an answer to a final state as to an open one",
		lines: []string{"\t\t\t:: ps != CREATED ->"},
		want:  []string{"no move out of succeeded", "only the table's moves"},
	},
	{
		file: "model.pml",
		name: "nolimit",
		what: "no attempt budget: an uncertain purchase is never escalated however long its answers stay unknown",
		lines: []string{
			"#define EXHAUSTED (false)",
			"\t\t\t\t\t:: false -> skip",
		},
		liveness: true,
		claim:    "settles",
	},
}

// allMutants lists every model's mutants.
func allMutants() []mutant {
	return slices.Concat(mutants, refundsMutants, outboxMutants, purchasesMutants)
}

// apply returns the model's text with m's lines in place of its markers.
func (m mutant) apply(t *testing.T, text string) string {
	t.Helper()
	marker := "MUTANT:" + m.name + " "
	lines := strings.Split(text, "\n")
	n := 0
	for i, l := range lines {
		if !strings.Contains(l+" ", marker) {
			continue
		}
		if n == len(m.lines) {
			t.Fatalf("mutant %s: more than %d lines marked %s", m.name, len(m.lines), marker)
		}
		lines[i] = m.lines[n]
		n++
	}
	if n != len(m.lines) {
		t.Fatalf("mutant %s: %d lines marked %s, want %d", m.name, n, strings.TrimSpace(marker), len(m.lines))
	}
	return strings.Join(lines, "\n")
}

// TestMutantMarkers fails when a marker in a model belongs to no mutant
// of that model, or a mutant's markers are not as many as its lines.
func TestMutantMarkers(t *testing.T) {
	for _, sp := range models {
		src, err := os.ReadFile(sp.file)
		if err != nil {
			t.Fatal(err)
		}
		known := map[string]bool{"name": true} // the header's explanation
		for _, m := range allMutants() {
			if m.file == sp.file {
				known[m.name] = true
				m.apply(t, string(src))
			}
		}
		for _, name := range regexp.MustCompile(`MUTANT:(\w+)`).FindAllStringSubmatch(string(src), -1) {
			if !known[name[1]] {
				t.Errorf("%s marks lines MUTANT:%s, but no mutant of it has that name", sp.file, name[1])
			}
		}
	}
}

// check is one verification run.
type check struct {
	liveness bool
	// claim names the ltl claim of a liveness run; nfair is its NFAIR.
	claim string
	nfair int
	// depth is the search depth, 200,000 when 0.
	depth int
	// defines are spin -D settings ("CRASHES=0").
	defines []string
	// shorter makes pan look for a shorter counterexample than the
	// first it finds (-I), to keep the trail readable.
	shorter bool
}

// result is what pan reported.
type result struct {
	out                string
	states, visited    float64
	transitions, depth float64
	errors             int
	wall, cpu          time.Duration
}

var (
	reErrors      = regexp.MustCompile(`errors: (\d+)`)
	reStored      = regexp.MustCompile(`([0-9.e+]+) states, stored(?: \(([0-9.e+]+) visited\))?`)
	reTransitions = regexp.MustCompile(`([0-9.e+]+) transitions \(`)
	reDepth       = regexp.MustCompile(`depth reached ([0-9]+)`)
)

// verify copies the model file (as text) and the include files into a
// fresh directory, generates the verifier with spin, compiles and runs it.
// It returns the directory, for a trail, and what pan reported.
func verify(t *testing.T, spin, cc, file, text string, c check) (string, result) {
	t.Helper()
	dir := t.TempDir()
	files := map[string][]byte{file: []byte(text)}
	for _, g := range model.Files {
		b, err := os.ReadFile(g.File)
		if err != nil {
			t.Fatal(err)
		}
		files[g.File] = b
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	spinArgs := []string{"-a"}
	for _, d := range c.defines {
		spinArgs = append(spinArgs, "-D"+d)
	}
	run(spin, append(spinArgs, file)...)

	// A safety run compiles the never claim out and checks assertions
	// and end states; a liveness run searches for acceptance cycles of the
	// claim under weak fairness (NFAIR: one more than the default, for the
	// model's processes). Only the long exhaustive safety run is worth
	// an optimizing compile: the others take less time than one.
	cflags := []string{"-O0", "-DMEMLIM=2048"}
	args := []string{fmt.Sprintf("-m%d", cmp.Or(c.depth, 200000)), "-w23"}
	switch {
	case c.liveness:
		nfair := max(c.nfair, 2)
		cflags = append(cflags, fmt.Sprintf("-DNFAIR=%d", nfair))
		cflags[0] = "-O2"
		args = append(args, "-a", "-f")
		if c.claim != "" {
			args = append(args, "-N", c.claim)
		}
	case c.shorter:
		cflags = append(cflags, "-DSAFETY", "-DNOCLAIM", "-DREACH")
		args = append(args, "-I")
	default:
		cflags = append(cflags, "-DSAFETY", "-DNOCLAIM")
		cflags[0] = "-O2"
	}
	run(cc, append(cflags, "-o", "pan", "pan.c")...)

	start := time.Now()
	cmd := exec.CommandContext(t.Context(), filepath.Join(dir, "pan"), args...)
	cmd.Dir = dir
	outb, err := cmd.CombinedOutput()
	r := result{out: string(outb), wall: time.Since(start)}
	if cmd.ProcessState != nil {
		r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	// pan exits non-zero when it finds an error; the count below decides.
	if err != nil && !strings.Contains(r.out, "errors: ") {
		t.Fatalf("pan: %v\n%s", err, r.out)
	}
	for _, bad := range []string{"max search depth too small", "out of memory", "memory limit"} {
		if strings.Contains(r.out, bad) {
			t.Fatalf("pan: %s: the search was not exhaustive\n%s", bad, r.out)
		}
	}
	m := reErrors.FindStringSubmatch(r.out)
	if m == nil {
		t.Fatalf("pan reported no error count\n%s", r.out)
	}
	r.errors, _ = strconv.Atoi(m[1])
	if m := reStored.FindStringSubmatch(r.out); m != nil {
		r.states, _ = strconv.ParseFloat(m[1], 64)
		r.visited = r.states
		if m[2] != "" {
			r.visited, _ = strconv.ParseFloat(m[2], 64)
		}
	}
	if m := reTransitions.FindStringSubmatch(r.out); m != nil {
		r.transitions, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reDepth.FindStringSubmatch(r.out); m != nil {
		r.depth, _ = strconv.ParseFloat(m[1], 64)
	}
	return dir, r
}

func modelText(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSafety checks every assertion of each model in every reachable
// state, exhaustively (no bitstate hashing), and logs the state count. For
// the purchase: at most one charge per purchase, no move out of succeeded
// (and only the table's moves), never a create after the key retention
// minus the margin, never a new key, and an escalation cleared only by a
// final state. The other models' properties are in their files' headers
// and model/README.md.
func TestSafety(t *testing.T) {
	spin, cc := tools(t)
	for _, sp := range models {
		t.Run(sp.file, func(t *testing.T) {
			_, r := verify(t, spin, cc, sp.file, modelText(t, sp.file), check{depth: sp.depth})
			if r.errors != 0 {
				t.Fatalf("spin found %d error(s)\n%s", r.errors, r.out)
			}
			t.Logf("%s safety, exhaustive: %.0f states stored, %.0f transitions, depth %.0f; pan took %s of CPU (%s wall)",
				sp.file, r.states, r.transitions, r.depth, r.cpu.Round(10*time.Millisecond), r.wall.Round(10*time.Millisecond))
		})
	}
}

// TestLiveness checks each model's ltl claims under weak fairness,
// exhaustively: for the purchase, settles (every run ends terminal or
// escalated).
func TestLiveness(t *testing.T) {
	spin, cc := tools(t)
	for _, sp := range models {
		for _, claim := range sp.claims {
			t.Run(sp.file+"/"+claim, func(t *testing.T) {
				_, r := verify(t, spin, cc, sp.file, modelText(t, sp.file), check{liveness: true, claim: claim, nfair: sp.nfair, depth: sp.depth, defines: sp.liveDefines})
				if r.errors != 0 {
					t.Fatalf("spin found %d error(s)\n%s", r.errors, r.out)
				}
				t.Logf("%s liveness (%s, weak fairness%s), exhaustive: %.0f states stored (%.0f visited), %.0f transitions, depth %.0f; pan took %s of CPU (%s wall)",
					sp.file, claim, definesNote(sp.liveDefines), r.states, r.visited, r.transitions, r.depth, r.cpu.Round(10*time.Millisecond), r.wall.Round(10*time.Millisecond))
			})
		}
	}
}

// reViolation is a failed assertion in spin's replay of a trail.
var reViolation = regexp.MustCompile(`spin: ([\w.]+\.pml):(\d+), Error: assertion violated`)

// property returns the comment on line n (1-based) of text: the name of
// the property its assertion checks.
func property(text string, n int) string {
	lines := strings.Split(text, "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	_, c, ok := strings.Cut(lines[n-1], "/*")
	if !ok {
		return strings.TrimSpace(lines[n-1])
	}
	c, _, _ = strings.Cut(c, "*/")
	return strings.TrimSpace(c)
}

// TestMutants proves the model can fail: each mutant removes one guard of
// the protocol, and spin must find a counterexample that breaks the
// property the guard protects. The trail is logged.
func TestMutants(t *testing.T) {
	spin, cc := tools(t)
	for _, m := range allMutants() {
		t.Run(m.file+"/"+m.name, func(t *testing.T) {
			sp := specOf(t, m.file)
			text := m.apply(t, modelText(t, m.file))
			dir, r := verify(t, spin, cc, m.file, text, check{liveness: m.liveness, claim: m.claim, nfair: sp.nfair, depth: sp.depth, defines: mutantDefines(sp, m), shorter: !m.liveness && !m.deep})
			if r.errors == 0 {
				t.Fatalf("mutant %s (%s): spin found no counterexample\n%s", m.name, m.what, r.out)
			}
			cmd := exec.CommandContext(t.Context(), spin, "-t", "-p", m.file)
			cmd.Dir = dir
			trail, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("spin -t -p: %v\n%s", err, trail)
			}
			var found string
			if m.liveness {
				if !strings.Contains(r.out, "acceptance cycle") || !bytes.Contains(trail, []byte("START OF CYCLE")) {
					t.Fatalf("mutant %s: want an acceptance cycle\n%s", m.name, r.out)
				}
				found = fmt.Sprintf("an acceptance cycle of the claim %s", m.claim)
			} else {
				var props []string
				for _, v := range reViolation.FindAllSubmatch(trail, -1) {
					n, _ := strconv.Atoi(string(v[2]))
					src := text
					if string(v[1]) != m.file {
						src = modelText(t, string(v[1]))
					}
					props = append(props, property(src, n))
				}
				for _, w := range m.want {
					if found == "" && slices.Contains(props, w) {
						found = w
					}
				}
				if found == "" {
					t.Fatalf("mutant %s: violated %q, want one of %q\n%s", m.name, props, m.want, trail)
				}
				found = fmt.Sprintf("%q violated (all violated in the trail: %q)", found, props)
			}
			t.Logf("mutant %s: %s\nspin found %s in %.0f states (pan took %s of CPU); the trail (spin -t -p):\n%s",
				m.name, m.what, found, r.states, r.cpu.Round(10*time.Millisecond), trail)
		})
	}
}

// mutantDefines are the settings of a mutant's run: the liveness runs'
// for a liveness mutant.
func mutantDefines(sp spec, m mutant) []string {
	if m.liveness {
		return sp.liveDefines
	}
	return nil
}

// definesNote says which settings a run overrode, "" for none.
func definesNote(defines []string) string {
	if len(defines) == 0 {
		return ""
	}
	return ", with " + strings.Join(defines, " ")
}

// specOf returns the model of file.
func specOf(t *testing.T, file string) spec {
	t.Helper()
	for _, sp := range models {
		if sp.file == file {
			return sp
		}
	}
	t.Fatalf("no model %s in models", file)
	return spec{}
}
