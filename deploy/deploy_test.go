// Package deploy holds no code: its tests check the deploy kit in this
// directory against payrecon itself. There is no Docker on the machines
// that run them, so instead of running the stack they check that
//
//   - every PromQL query of the Grafana dashboard and of the alert rules
//     names metrics and labels that reconcile/prometheus exports;
//   - the dashboard, its provisioning, the Prometheus config and the
//     compose file agree with each other (services, ports, mounts, paths);
//   - every payrecon command, flag and environment variable in the compose
//     file, the Dockerfile, the systemd units and their env file is one
//     that `payrecon help` (and `payrecon COMMAND -h`) knows;
//   - the binary the Dockerfile builds, built here with the same command
//     from the same build context, is static and runs;
//   - the Prometheus config passes promtool and the systemd units pass
//     systemd-analyze.
//
// This file builds the binary and reads payrecon's command line;
// metrics_test.go and promql_test.go read what payrecon exports and what
// the queries use; dashboard_test.go, compose_test.go (with Prometheus and
// Grafana), dockerfile_test.go and systemd_test.go check each piece.
//
// A test that needs a tool (promtool, systemd-analyze) skips without it
// on a developer machine, and fails under CI.
package deploy

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The build the Dockerfile runs (its RUN line must contain dockerGoBuild
// and cgoOff) and this test repeats.
const (
	dockerGoBuild = `go build -trimpath -ldflags="-s -w"`
	cgoOff        = "CGO_ENABLED=0"
	mainPackage   = "./cmd/payrecon"
)

var buildArgs = []string{"build", "-trimpath", "-ldflags=-s -w"}

// Where the kit installs payrecon, and the names it relies on.
const (
	installedBinary = "/usr/local/bin/payrecon"
	envFilePath     = "/etc/payrecon/payrecon.env"
	sqliteDataDir   = "/var/lib/payrecon"
	scrapeJobName   = "payrecon"
	payreconImage   = "payrecon:local"
)

var tmpDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "payrecon-deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tmpDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireTool returns the path of a command-line tool. Without it the
// test skips on a developer machine and fails under CI, as the other
// tool-dependent tests of this repository do.
func requireTool(t *testing.T, name, debianPackage string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found; CI must install Debian's %s package", name, debianPackage)
		}
		t.Skipf("%s not found: install Debian's %s package to run this test", name, debianPackage)
	}
	return p
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeYAML(t *testing.T, name string, v any, strict bool) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, name)))
	dec.KnownFields(strict)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// ---------------------------------------------------------------------
// The binary, built as the Dockerfile builds it.

var (
	buildOnce sync.Once
	builtPath string
	buildErr  error
)

// payreconBinary builds payrecon once, with the Dockerfile's command, from
// a copy of the repository filtered by deploy/Dockerfile.dockerignore (the
// Docker build context), and returns its path.
func payreconBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		ctx := filepath.Join(tmpDir, "context")
		if buildErr = copyBuildContext("..", ctx, "Dockerfile.dockerignore"); buildErr != nil {
			return
		}
		out := filepath.Join(tmpDir, "payrecon")
		cmd := exec.Command("go", append(slices.Clone(buildArgs), "-o", out, mainPackage)...)
		cmd.Dir = ctx
		cmd.Env = append(os.Environ(), cgoOff)
		if msg, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%s go %q: %v\n%s", cgoOff, cmd.Args[1:], err, msg)
			return
		}
		builtPath = out
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtPath
}

// copyBuildContext copies the files of root that Docker would send as the
// build context, given the ignore file, to dst. It knows the ignore
// syntax this kit uses: one pattern a line, a leading "/" for the root,
// "**/" for any depth; "!" exceptions are refused.
func copyBuildContext(root, dst, ignoreFile string) error {
	raw, err := os.ReadFile(ignoreFile)
	if err != nil {
		return err
	}
	var patterns []string
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			return fmt.Errorf("%s: exceptions (%s) are not understood by this test", ignoreFile, line)
		}
		patterns = append(patterns, path.Clean(strings.TrimPrefix(line, "/")))
	}
	ignored := func(rel string) bool {
		segs := strings.Split(rel, "/")
		for _, p := range patterns {
			if rest, ok := strings.CutPrefix(p, "**/"); ok {
				for i := range segs {
					if m, _ := path.Match(rest, strings.Join(segs[i:], "/")); m {
						return true
					}
				}
				continue
			}
			if m, _ := path.Match(p, rel); m {
				return true
			}
		}
		return false
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return os.MkdirAll(dst, 0o755)
		}
		if ignored(filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, src); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// runPayrecon runs the built binary with a clean environment.
func runPayrecon(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(payreconBinary(t), args...)
	home := filepath.Join(tmpDir, "home")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_DATA_HOME=" + home}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("payrecon %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// TestStaticBinary: the binary the Dockerfile builds is statically linked
// (distroless static has no libc) and runs.
func TestStaticBinary(t *testing.T) {
	bin := payreconBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a PT_INTERP program header: it is dynamically linked")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v (%v)", libs, err)
	}
	if file, err := exec.LookPath("file"); err == nil {
		out, err := exec.Command(file, bin).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "statically linked") {
			t.Errorf("file %s: %s %v", bin, out, err)
		}
	}
	help := cli(t).help
	if !strings.Contains(help, "Usage: payrecon") {
		t.Errorf("payrecon help:\n%s", help)
	}
	if cli(t).commands["version"] {
		if out, errOut, code := runPayrecon(t, "version"); code != 0 || out == "" {
			t.Errorf("payrecon version: exit %d\n%s%s", code, out, errOut)
		}
	}
}

// ---------------------------------------------------------------------
// payrecon's command line, read from its help.

type cliModel struct {
	help     string
	commands map[string]bool
	env      map[string]bool
	grace    time.Duration // --shutdown-grace's default

	mu    sync.Mutex
	flags map[string]map[string]bool // by command: flag name → is boolean
}

var (
	cliOnce sync.Once
	cliVal  *cliModel
)

var (
	envName       = regexp.MustCompile(`\b(?:PAYRECON|STRIPE)_[A-Z0-9_]+\b`)
	commandLine   = regexp.MustCompile(`^  ([a-z][a-z0-9-]*)\s{2,}\S`)
	durationToken = regexp.MustCompile(`(?:^|\s)((?:\d+(?:\.\d+)?(?:ms|h|m|s))+)(?:\s|$)`)
)

// cli runs `payrecon help` and `payrecon help settings` and reads the
// commands, the environment variables and the default of
// --shutdown-grace.
func cli(t *testing.T) *cliModel {
	t.Helper()
	payreconBinary(t)
	cliOnce.Do(func() {
		out, errOut, code := runPayrecon(t, "help")
		if code != 0 {
			t.Fatalf("payrecon help: exit %d\n%s%s", code, out, errOut)
		}
		// The commands are in help, the settings in help settings.
		settings, errOut, code := runPayrecon(t, "help", "settings")
		if code != 0 {
			t.Fatalf("payrecon help settings: exit %d\n%s%s", code, settings, errOut)
		}
		out += "\n" + settings
		c := &cliModel{help: out, commands: map[string]bool{}, env: map[string]bool{}, flags: map[string]map[string]bool{}}
		inCommands := false
		for _, line := range strings.Split(out, "\n") {
			switch {
			case strings.HasPrefix(line, "Commands:"):
				inCommands = true
			case strings.TrimSpace(line) == "":
				inCommands = false
			case inCommands:
				if m := commandLine.FindStringSubmatch(line); m != nil {
					c.commands[m[1]] = true
				}
			}
			if strings.Contains(line, "shutdown-grace") && c.grace == 0 {
				if m := durationToken.FindStringSubmatch(line); m != nil {
					c.grace, _ = time.ParseDuration(m[1])
				}
			}
		}
		for _, e := range envName.FindAllString(out, -1) {
			c.env[e] = true
		}
		cliVal = c
	})
	if cliVal == nil {
		t.Fatal("payrecon help failed in another test")
	}
	for _, want := range []string{"migrate", "serve", "worker", "fakeprovider"} {
		if !cliVal.commands[want] {
			t.Fatalf("payrecon help lists no %q command; the help's format changed? Commands read: %v\n%s", want, keys(cliVal.commands), cliVal.help)
		}
	}
	if len(cliVal.env) < 10 || !cliVal.env["PAYRECON_DATABASE_URL"] {
		t.Fatalf("payrecon help lists only these variables: %v\n%s", keys(cliVal.env), cliVal.help)
	}
	if cliVal.grace <= 0 {
		t.Fatalf("no default of --shutdown-grace in payrecon help:\n%s", cliVal.help)
	}
	return cliVal
}

// flagLine matches a flag in `payrecon COMMAND -h` (Go's flag package:
// "  -name type", a boolean without a type; also "  --name ..." forms).
var flagLine = regexp.MustCompile(`^\s{1,4}-{1,2}([A-Za-z0-9][A-Za-z0-9_-]*)(?:[ =](\S+))?`)

// settingEntry matches a setting in the "Settings it reads" part of
// `payrecon COMMAND -h`: "--name" or "--name=default".
var settingEntry = regexp.MustCompile(`(?:^|\s)--([A-Za-z0-9][A-Za-z0-9_-]*)(?:=(\S*))?`)

// commandFlags runs `payrecon COMMAND -h` and returns its flags, each
// with whether it is boolean. It also learns the variables the output
// names.
func (c *cliModel) commandFlags(t *testing.T, command string) map[string]bool {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.flags[command]; ok {
		return f
	}
	out, errOut, code := runPayrecon(t, command, "-h")
	text := out + errOut
	if code != 0 {
		t.Fatalf("payrecon %s -h: exit %d\n%s", command, code, text)
	}
	flags := map[string]bool{}
	inSettings := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "Settings it reads") {
			inSettings = true
		}
		if inSettings {
			// Two settings a line, each with its default: a boolean's is
			// true or false.
			for _, m := range settingEntry.FindAllStringSubmatch(line, -1) {
				flags[m[1]] = m[2] == "true" || m[2] == "false"
			}
			continue
		}
		if m := flagLine.FindStringSubmatch(line); m != nil {
			flags[m[1]] = m[2] == ""
		}
	}
	if len(flags) < 5 {
		t.Fatalf("payrecon %s -h: read only the flags %v; its format changed?\n%s", command, keys(flags), text)
	}
	for _, e := range envName.FindAllString(text, -1) {
		c.env[e] = true
	}
	c.flags[command] = flags
	return flags
}

// checkArgs checks a payrecon command line (without the program name):
// the command exists, and so does every flag. It returns the flags given,
// with their values.
func (c *cliModel) checkArgs(t *testing.T, where string, args []string) map[string]string {
	t.Helper()
	given := map[string]string{}
	if len(args) == 0 {
		t.Errorf("%s: no payrecon command", where)
		return given
	}
	command := args[0]
	if !c.commands[command] || command == "help" {
		t.Errorf("%s: payrecon has no command %q (payrecon help lists %v)", where, command, keys(c.commands))
		return given
	}
	known := c.commandFlags(t, command)
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue // a positional argument
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		isBool, ok := known[name]
		if !ok {
			t.Errorf("%s: payrecon %s has no flag --%s (payrecon %s -h)", where, command, name, command)
			continue
		}
		if !hasValue && !isBool && i+1 < len(args) {
			i++
			value = args[i]
		}
		given[name] = value
	}
	return given
}

// checkEnv checks that every PAYRECON_* and STRIPE_* variable is one
// payrecon reads.
func (c *cliModel) checkEnv(t *testing.T, where string, env map[string]string) {
	t.Helper()
	for k := range env {
		if (strings.HasPrefix(k, "PAYRECON_") || strings.HasPrefix(k, "STRIPE_")) && !c.env[k] {
			t.Errorf("%s: payrecon knows no variable %s (payrecon help lists %v)", where, k, keys(c.env))
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
