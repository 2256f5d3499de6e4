package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The systemd units.

// unitFile is a systemd unit: section → key → values, in order.
type unitFile map[string]map[string][]string

func readUnit(t *testing.T, name string) unitFile {
	t.Helper()
	u := unitFile{}
	section := ""
	for i, line := range strings.Split(string(readFile(t, name)), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Errorf("%s:%d: %q", name, i+1, line)
				continue
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// last is a setting's effective value (the last assignment wins).
func (u unitFile) last(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// TestSystemdUnits checks the units' settings against payrecon (the
// command, its flags, the variables of the env file, the stop timeout
// against the shutdown grace), and verifies them with systemd-analyze.
func TestSystemdUnits(t *testing.T) {
	cl := cli(t)
	units, err := filepath.Glob("systemd/*.service")
	if err != nil || len(units) == 0 {
		t.Fatalf("no units: %v", err)
	}
	env := envFile(t, "systemd/payrecon.env")
	cl.checkEnv(t, "systemd/payrecon.env", env)
	if db := env["PAYRECON_DATABASE_URL"]; strings.HasPrefix(db, "sqlite:") && filepath.Dir(strings.TrimPrefix(db, "sqlite:")) != sqliteDataDir {
		t.Errorf("payrecon.env: PAYRECON_DATABASE_URL %s is outside %s, the one writable directory", db, sqliteDataDir)
	}
	grace := cl.grace
	if g, ok := env["PAYRECON_SHUTDOWN_GRACE"]; ok {
		grace, _ = time.ParseDuration(g)
	}

	for _, name := range units {
		u := readUnit(t, name)
		svc := func(k string) string { return u.last("Service", k) }
		if usr := svc("User"); usr == "" || usr == "root" || usr == "0" {
			t.Errorf("%s: User=%q: run as the dedicated payrecon user", name, usr)
		}
		if svc("EnvironmentFile") != envFilePath {
			t.Errorf("%s: EnvironmentFile=%q, want %s", name, svc("EnvironmentFile"), envFilePath)
		}
		execStart := strings.Fields(svc("ExecStart"))
		if len(execStart) < 2 || execStart[0] != installedBinary {
			t.Errorf("%s: ExecStart=%q, want %s COMMAND", name, svc("ExecStart"), installedBinary)
			continue
		}
		args := slices.Clone(execStart[1:])
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "%i", "8081")
		}
		cl.checkArgs(t, name, args)
		if filepath.Base(name) == "payrecon.service" && svc("ExecStart") != installedBinary+" serve" {
			t.Errorf("%s: ExecStart=%q, want %s serve", name, svc("ExecStart"), installedBinary)
		}
		if r := svc("Restart"); r != "on-failure" && r != "always" {
			t.Errorf("%s: Restart=%q", name, r)
		}
		if svc("KillSignal") != "SIGTERM" {
			t.Errorf("%s: KillSignal=%q, want SIGTERM", name, svc("KillSignal"))
		}
		stop, err := time.ParseDuration(svc("TimeoutStopSec"))
		if err != nil || stop < grace+30*time.Second {
			t.Errorf("%s: TimeoutStopSec=%q: want at least the shutdown grace (%s) plus 30s for the HTTP drain", name, svc("TimeoutStopSec"), grace)
		}
		for k, want := range map[string]string{
			"NoNewPrivileges": "yes",
			"ProtectSystem":   "strict",
			"ProtectHome":     "yes",
			"PrivateTmp":      "yes",
			"PrivateDevices":  "yes",
			"StateDirectory":  filepath.Base(sqliteDataDir),
			"ReadWritePaths":  sqliteDataDir,
		} {
			if svc(k) != want {
				t.Errorf("%s: %s=%q, want %s", name, k, svc(k), want)
			}
		}
		if svc("ProcSubset") == "pid" {
			t.Errorf("%s: ProcSubset=pid hides /proc/stat, which the metrics' process collector reads", name)
		}
		if u.last("Install", "WantedBy") != "multi-user.target" {
			t.Errorf("%s: WantedBy=%q", name, u.last("Install", "WantedBy"))
		}
	}

	analyze := requireTool(t, "systemd-analyze", "systemd")
	// systemd-analyze verify checks that ExecStart's binary exists: verify
	// copies whose ExecStart runs the binary built here, a template as
	// one of its instances.
	dir := t.TempDir()
	var copies []string
	for _, name := range units {
		text := strings.ReplaceAll(string(readFile(t, name)), "ExecStart="+installedBinary, "ExecStart="+payreconBinary(t))
		base := strings.Replace(filepath.Base(name), "@.service", "@8081.service", 1)
		p := filepath.Join(dir, base)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		copies = append(copies, p)
	}
	out, err := exec.Command(analyze, append([]string{"verify"}, copies...)...).CombinedOutput()
	// verify exits 0 on unknown keys and bad values, with a warning.
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	for _, p := range copies {
		// The exposure score (0–10, lower is safer) stays under 2.0.
		out, err := exec.Command(analyze, "security", "--offline=yes", "--threshold=20", p).CombinedOutput()
		if err != nil {
			t.Errorf("systemd-analyze security %s: %v: the hardening weakened\n%s", filepath.Base(p), err, out)
		}
	}
	if sysusers, err := exec.LookPath("systemd-sysusers"); err == nil {
		conf, err := filepath.Abs("systemd/payrecon.sysusers")
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(sysusers, "--dry-run", "--root="+t.TempDir(), conf).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Creating user 'payrecon'") {
			t.Errorf("systemd-sysusers --dry-run payrecon.sysusers: %v\n%s", err, out)
		}
	}
}
