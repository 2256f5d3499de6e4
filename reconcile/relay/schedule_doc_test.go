package relay

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDocumentedRetrySchedule: the retry schedule in docs/protocol.md is
// the one the relay's defaults give.
func TestDocumentedRetrySchedule(t *testing.T) {
	data, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n### The retry schedule\n")
	if !ok {
		t.Fatal("docs/protocol.md has no section \"The retry schedule\"")
	}
	section, _, _ = strings.Cut(section, "\n#")
	cfg, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{cfg: cfg}
	rows := regexp.MustCompile(`(?m)^\| (\d+)( and later)? \| (\S+) \|$`).FindAllStringSubmatch(section, -1)
	if len(rows) == 0 {
		t.Fatal("the retry schedule has no rows")
	}
	for i, row := range rows {
		n, _ := strconv.Atoi(row[1])
		if n != i+1 {
			t.Errorf("row %d is failure %d", i+1, n)
		}
		if got := r.backoff(n).String(); got != row[3] {
			t.Errorf("failure %d: documented %s, the relay waits %s", n, row[3], got)
		}
	}
	last := rows[len(rows)-1]
	if last[2] == "" || r.backoff(len(rows)) != cfg.MaxBackoff || r.backoff(len(rows)-1) == cfg.MaxBackoff {
		t.Errorf("the last row must be the first capped wait, \"and later\"")
	}
	if cfg.RetryWindow != 72*time.Hour || !strings.Contains(section, "(3 days)") {
		t.Errorf("the documented retry window differs from %s", cfg.RetryWindow)
	}
}
