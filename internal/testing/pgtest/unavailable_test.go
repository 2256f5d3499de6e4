package pgtest

import (
	"errors"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a helper ended it.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skipf(format string, args ...any)  { r.skipped = format }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = format }

func TestFindBinariesNone(t *testing.T) {
	old := binGlob
	binGlob = t.TempDir() + "/*/bin"
	t.Cleanup(func() { binGlob = old })
	t.Setenv("PATH", t.TempDir())
	if dir, err := findBinaries(); !errors.Is(err, errNoPostgres) {
		t.Fatalf("findBinaries() = %q, %v; want errNoPostgres", dir, err)
	}
}

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name, ci   string
		err        error
		skip, fail bool
	}{
		{"no binaries, developer", "", errNoPostgres, true, false},
		{"no binaries, CI", "true", errNoPostgres, false, true},
		{"start failed, developer", "", errors.New("initdb failed"), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			r := &recorder{TB: t}
			unavailable(r, tc.err)
			if (r.skipped != "") != tc.skip || (r.failed != "") != tc.fail {
				t.Fatalf("skipped %q, failed %q; want skip %v, fail %v", r.skipped, r.failed, tc.skip, tc.fail)
			}
			if tc.ci != "" && !strings.Contains(r.failed, "CI is set") {
				t.Fatalf("the CI failure does not say why: %q", r.failed)
			}
		})
	}
}
