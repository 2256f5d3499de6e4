package model_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/model"
)

// TestTransitionsUpToDate fails when the checked-in transitions.pml is not
// what `go generate ./model` writes from the Go table, so that the model
// and the code cannot disagree about the purchase's moves.
func TestTransitionsUpToDate(t *testing.T) {
	got, err := os.ReadFile(model.TransitionsFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := model.Transitions(); !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with statemachine.Transitions(); run `go generate ./model`\n got:\n%s\nwant:\n%s",
			model.TransitionsFile, got, want)
	}
}

// TestModelUsesOnlyTheTable checks that the model includes the generated
// moves and changes a purchase's state only through move(), which asserts
// them.
func TestModelUsesOnlyTheTable(t *testing.T) {
	src, err := os.ReadFile("model.pml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	if !strings.Contains(text, `#include "`+model.TransitionsFile+`"`) {
		t.Errorf("model.pml does not include %s", model.TransitionsFile)
	}
	if !strings.Contains(text, "assert(ALLOWED(f, t));") {
		t.Error("model.pml's move() does not assert ALLOWED(f, t)")
	}
	// pstate is assigned in move() and nowhere else (but its declaration).
	assign := regexp.MustCompile(`\bpstate\s*=[^=]`)
	n := 0
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "byte pstate") {
			n += len(assign.FindAllString(l, -1))
		}
	}
	if n != 1 {
		t.Errorf("pstate is assigned %d times in model.pml; only move() may assign it", n)
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

// check is one verification run.
type check struct {
	liveness bool
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

// verify copies the model (as text) and transitions.pml into a fresh
// directory, generates the verifier with spin, compiles and runs it. It
// returns the directory, for a trail, and what pan reported.
func verify(t *testing.T, spin, cc, text string, c check) (string, result) {
	t.Helper()
	dir := t.TempDir()
	trans, err := os.ReadFile(model.TransitionsFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"model.pml": []byte(text), model.TransitionsFile: trans} {
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
	run(spin, "-a", "model.pml")

	// A safety run compiles the never claim out and checks assertions
	// and end states; a liveness run searches for acceptance cycles of the
	// claim under weak fairness (NFAIR: one more than the default, for the
	// model's processes). Only the long exhaustive safety run is worth
	// an optimizing compile: the others take less time than one.
	cflags := []string{"-O0", "-DMEMLIM=2048"}
	args := []string{"-m200000", "-w23"}
	switch {
	case c.liveness:
		cflags = append(cflags, "-DNFAIR=3")
		args = append(args, "-a", "-f")
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

func modelText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("model.pml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSafety checks every assertion of the model in every reachable state:
// at most one charge per purchase, no move out of succeeded (and only the
// table's moves), never a create after the key retention minus the margin,
// never a new key, and an escalation cleared only by a final state.
func TestSafety(t *testing.T) {
	spin, cc := tools(t)
	_, r := verify(t, spin, cc, modelText(t), check{})
	if r.errors != 0 {
		t.Fatalf("spin found %d error(s)\n%s", r.errors, r.out)
	}
	t.Logf("safety, exhaustive: %.0f states stored, %.0f transitions, depth %.0f; pan took %s of CPU (%s wall)",
		r.states, r.transitions, r.depth, r.cpu.Round(10*time.Millisecond), r.wall.Round(10*time.Millisecond))
}

// TestLiveness checks the claim settles under weak fairness: every run
// ends terminal or escalated.
func TestLiveness(t *testing.T) {
	spin, cc := tools(t)
	_, r := verify(t, spin, cc, modelText(t), check{liveness: true})
	if r.errors != 0 {
		t.Fatalf("spin found %d error(s)\n%s", r.errors, r.out)
	}
	t.Logf("liveness (<> terminal or escalated, weak fairness), exhaustive: %.0f states stored (%.0f visited), %.0f transitions, depth %.0f; pan took %s of CPU (%s wall)",
		r.states, r.visited, r.transitions, r.depth, r.cpu.Round(10*time.Millisecond), r.wall.Round(10*time.Millisecond))
}
