package main

import (
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/dburl"
	"github.com/payrecon/payrecon/reconcile/cron"
)

// Fuzz targets for what parses untrusted text in this command: the
// settings (flags, environment, config file); internal/dburl fuzzes the
// database URL. Their seed corpora are in testdata/fuzz/<target>/; CI
// runs each for 10s:
//
//	go test -run=XXX -fuzz=FuzzSettings -fuzztime=10s ./cmd/payrecon/

// FuzzSettings resolves the settings from a fuzzed config file and one
// fuzzed environment variable. Whatever they hold, resolving never
// panics; when it succeeds, every value passes its kind's check and every
// component the commands build from the settings accepts it (the
// protocol's and the sweeps' configs, the scheduler, the logger, the
// fake's faults, the database URL); when it fails, the error shows no
// secret's value.
func FuzzSettings(f *testing.F) {
	dir := f.TempDir()
	names := newSettings().list
	f.Fuzz(func(t *testing.T, config string, which uint8, value string) {
		conf := filepath.Join(dir, "payrecon.conf")
		if err := os.WriteFile(conf, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		st := names[int(which)%len(names)]
		for _, other := range names {
			os.Unsetenv(other.env)
		}
		value = strings.ReplaceAll(value, "\x00", "") // no environment holds a NUL
		os.Setenv(st.env, value)
		defer os.Unsetenv(st.env)

		s := newSettings()
		fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		s.register(fs)
		if err := fs.Parse([]string{"--config", conf}); err != nil {
			t.Fatal(err)
		}
		err := s.resolve(fs, "serve")
		if err != nil {
			for _, secret := range secretValues(config, value, st) {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error shows the secret %q: %v", secret, err)
				}
			}
			return
		}
		for _, st := range s.list {
			if st.kind.check != nil && !st.envOnly {
				if err := st.kind.check(st.value); err != nil {
					t.Fatalf("--%s = %q was accepted but fails its check: %v", st.name, st.value, err)
				}
			}
		}
		if _, err := s.reconcileConfig(); err != nil {
			t.Fatalf("reconcileConfig: %v", err)
		}
		sc, err := s.sweepConfig()
		if err != nil {
			t.Fatalf("sweepConfig: %v", err)
		}
		for name, schedule := range map[string]string{"rescue": sc.RescueSchedule, "escalate": sc.EscalateSchedule, "gauges": sc.GaugesSchedule,
			"unmatched": sc.UnmatchedSchedule, "retention": sc.RetentionSchedule, "audit": sc.AuditSchedule} {
			run := func(context.Context) (int, error) { return 0, nil }
			if _, err := cron.New(nil, []cron.Sweep{{Name: name, Schedule: schedule, Run: run}}, cron.Config{}); err != nil {
				t.Fatalf("the scheduler refuses the accepted schedule %q: %v", schedule, err)
			}
		}
		for _, name := range []string{"webhook-tolerance"} {
			if _, err := s.duration(name); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range []string{"worker", "webhooks", "api"} {
			if _, err := s.boolean(name); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := newLogger(io.Discard, s.str("log-level"), s.str("log-format")); err != nil {
			t.Fatalf("newLogger: %v", err)
		}
		if _, _, err := fakeprovider.ParseSpec(s.str("fake-faults")); err != nil {
			t.Fatalf("fake faults: %v", err)
		}
		if _, err := dburl.Parse(s.str("database-url")); err != nil {
			t.Fatalf("database URL: %v", err)
		}
	})
}

// secretMarker marks the secrets of the seeds of FuzzSettings.
const secretMarker = "S3KR1T"

// secretValues are the values a fuzzed config file and variable give to
// secret settings that hold secretMarker.
func secretValues(config, value string, st *setting) []string {
	var out []string
	// Only a value with the marker is looked for: no message text holds
	// it, so a match is a leak, not a word of the message.
	add := func(v string) {
		if strings.Contains(v, secretMarker) {
			out = append(out, v)
		}
	}
	if st.secret && st.kind != kindDatabaseURL {
		add(value)
	}
	for _, line := range strings.Split(config, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if i := strings.Index(v, " #"); i >= 0 {
			v = v[:i]
		}
		v = strings.TrimSpace(v)
		for _, s := range newSettings().list {
			if s.secret && s.kind != kindDatabaseURL && (name == s.name || name == s.env) {
				add(v)
			}
		}
	}
	return out
}

// FuzzFormatDuration: a duration written by formatDuration (the settings'
// defaults) reads back as itself.
func FuzzFormatDuration(f *testing.F) {
	f.Fuzz(func(t *testing.T, n int64) {
		d := time.Duration(n)
		s := formatDuration(d)
		back, err := time.ParseDuration(s)
		if err != nil || back != d {
			t.Fatalf("formatDuration(%d) = %q, which reads back as %v, %v", n, s, back, err)
		}
		if d > 0 && d%time.Second == 0 {
			if back, err := time.ParseDuration(formatSeconds(d)); err != nil || back != d {
				t.Fatalf("formatSeconds(%v) = %q: %v, %v", d, formatSeconds(d), back, err)
			}
		}
	})
}
