package crashtest

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/pgtest"
)

// EnvRun turns the crash and chaos tests on outside CI.
const EnvRun = "PAYRECON_CRASHTEST"

var (
	crashRuns     = flag.Int("crash.runs", 1, "runs of each crash point per store; run i crashes at the point's i-th hit")
	chaosDuration = flag.Duration("chaos.duration", 0, "how long the chaos test kills processes (default 60s under CI, 20s otherwise)")
	keepJournal   = flag.Bool("crash.journal", false, "print every run's journal, not only a failing one's")
)

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := pgtest.Run(m)
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// enabled skips t unless the crash tests are asked for: under CI they
// always run.
func enabled(t *testing.T) {
	t.Helper()
	if os.Getenv("CI") == "" && os.Getenv(EnvRun) == "" {
		t.Skipf("the crash and chaos tests run real processes for minutes: set %s=1 (CI runs them always)", EnvRun)
	}
	if runtime.GOOS != "linux" {
		// Pdeathsig, and pg_ctl as "nobody" when root, are Linux's.
		if os.Getenv("CI") != "" {
			t.Fatalf("the crash tests need Linux; CI is set, so this is a failure, not a skip")
		}
		t.Skipf("the crash tests need Linux")
	}
}

// binary builds payrecon with the failpoints tag, once per test binary,
// and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "payrecon-crashtest-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "payrecon")
		start := time.Now()
		cmd := exec.Command("go", "build", "-tags", "failpoints", "-o", binPath, "github.com/payrecon/payrecon/cmd/payrecon")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build -tags failpoints: %v\n%s", err, out)
			return
		}
		fmt.Fprintf(os.Stderr, "crashtest: built payrecon with -tags failpoints in %s\n", time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}
