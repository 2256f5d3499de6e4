package http_test

import (
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/pgtest"
	"github.com/payrecon/payrecon/reconcile"
)

// TestMain starts one throwaway PostgreSQL cluster for the package's
// tests; each test gets its own database.
func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// testClock is a manual clock. Safe for concurrent use.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock { return &testClock{now: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newStore returns a migrated store over a fresh database.
func newStore(t testing.TB) reconcile.Store { return pgtest.NewStore(t) }

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
