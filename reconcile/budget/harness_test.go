package budget_test

import (
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/internal/testing/testclock"
)

// The stores the shared budget's tests run against, and the helpers they
// share with reconcile's own tests.

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// newClock returns the manual clock shared by the store and the budget.
func newClock() *testclock.Clock { return testclock.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)) }

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
