package http_test

import (
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/internal/testing/testclock"
)

// TestMain starts one throwaway PostgreSQL cluster for the package's
// tests; each test gets its own database.
func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// testClock is the manual clock of the package's fixtures.
type testClock = testclock.Clock

func newTestClock() *testClock { return testclock.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)) }

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
