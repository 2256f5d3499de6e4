package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
)

// benchRSSEvery is how often the RSS sampler reads VmRSS.
const benchRSSEvery = 50 * time.Millisecond

// procStatus reads the named fields (VmRSS, VmHWM) of /proc/self/status,
// in KiB.
func procStatus(fields ...string) (map[string]int64, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		for _, f := range fields {
			if name == f {
				v := strings.TrimSuffix(strings.TrimSpace(rest), " kB")
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, err
				}
				out[f] = n
			}
		}
	}
	for _, f := range fields {
		if _, ok := out[f]; !ok {
			return nil, errors.New("/proc/self/status has no " + f)
		}
	}
	return out, nil
}

// rssSampler samples the process's VmRSS until stopped, and reads VmHWM
// at the end.
type rssSampler struct {
	stop     chan struct{}
	done     chan struct{}
	since    string // since when VmHWM counts
	mu       sync.Mutex
	min, max int64
	samples  int
}

// startRSS returns the garbage of what ran before to the system, resets
// the peak (VmHWM) where the kernel allows it (writing 5 to
// /proc/self/clear_refs), and samples VmRSS every benchRSSEvery until
// stopped. It returns nil where /proc/self/status cannot be read.
func startRSS() *rssSampler {
	if _, err := procStatus("VmRSS", "VmHWM"); err != nil {
		return nil
	}
	runtime.GC()
	debug.FreeOSMemory()
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{}), since: "the burn-down's start"}
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		s.since = "the process's start, the load included: it could not be reset"
	}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(benchRSSEvery)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *rssSampler) sample() {
	st, err := procStatus("VmRSS")
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v := st["VmRSS"]
	if s.samples == 0 || v < s.min {
		s.min = v
	}
	s.max = max(s.max, v)
	s.samples++
}

// finish stops the sampler and returns what it saw; nil for a nil
// sampler.
func (s *rssSampler) finish() *benchRSS {
	if s == nil {
		return nil
	}
	close(s.stop)
	<-s.done
	s.sample()
	st, err := procStatus("VmHWM")
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &benchRSS{PeakKiB: st["VmHWM"], PeakSince: s.since, MinKiB: s.min, MaxKiB: s.max, Samples: s.samples}
}
