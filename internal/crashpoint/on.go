//go:build failpoints

package crashpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Enabled reports whether this build can crash at its points.
const Enabled = true

var (
	armed Point            // the point named by Env, "" for none
	at    int64        = 1 // crash at the at-th hit
	hits  atomic.Int64     // hits of armed so far
)

func init() {
	spec := os.Getenv(Env)
	if spec == "" {
		return
	}
	p, n, err := Parse(spec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "payrecon: %s: %v\n", Env, err)
		os.Exit(2)
	}
	armed, at = p, n
}

// Parse reads a spec "name[:n]": a known point and the hit to crash at
// (default 1).
func Parse(spec string) (Point, int64, error) {
	name, count, hasCount := strings.Cut(spec, ":")
	p := Point(name)
	known := false
	for _, q := range Points {
		known = known || q == p
	}
	if !known {
		return "", 0, fmt.Errorf("unknown crash point %q", name)
	}
	n := int64(1)
	if hasCount {
		var err error
		if n, err = strconv.ParseInt(count, 10, 64); err != nil || n < 1 {
			return "", 0, fmt.Errorf("crash point %q: hit %q: want a positive number", name, count)
		}
	}
	return p, n, nil
}

// Hit kills the process with SIGKILL if p is the armed point and this is
// its at-th hit. It first says so on stderr, for the crash test's journal.
func Hit(p Point) {
	if p != armed || armed == "" {
		return
	}
	if hits.Add(1) != at {
		return
	}
	fmt.Fprintf(os.Stderr, "payrecon: crash point %s reached (hit %d): SIGKILL\n", p, at)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never returns: the signal is on its way
}
