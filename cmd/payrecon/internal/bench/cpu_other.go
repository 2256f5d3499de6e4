//go:build !unix

package bench

import "time"

// processCPUTime is not read on this system: the bench reports no CPU.
func processCPUTime() (time.Duration, bool) { return 0, false }
