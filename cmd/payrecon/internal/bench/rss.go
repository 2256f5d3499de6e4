package bench

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

// rssEvery is how often the RSS sampler reads VmRSS.
const rssEvery = 50 * time.Millisecond

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

// RSSSampler samples the process's VmRSS until stopped, and reads VmHWM
// at the end.
type RSSSampler struct {
	stop     chan struct{}
	done     chan struct{}
	since    string // since when VmHWM counts
	mu       sync.Mutex
	min, max int64
	samples  int
}

// StartRSS returns the garbage of what ran before to the system, resets
// the peak (VmHWM) where the kernel allows it (writing 5 to
// /proc/self/clear_refs), and samples VmRSS every rssEvery until
// stopped. It returns nil where /proc/self/status cannot be read.
func StartRSS() *RSSSampler {
	if _, err := procStatus("VmRSS", "VmHWM"); err != nil {
		return nil
	}
	runtime.GC()
	debug.FreeOSMemory()
	s := &RSSSampler{stop: make(chan struct{}), done: make(chan struct{}), since: "the burn-down's start"}
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		s.since = "the process's start, the load included: it could not be reset"
	}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(rssEvery)
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

func (s *RSSSampler) sample() {
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

// Finish stops the sampler and returns what it saw; nil for a nil
// sampler.
func (s *RSSSampler) Finish() *RSS {
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
	return &RSS{PeakKiB: st["VmHWM"], PeakSince: s.since, MinKiB: s.min, MaxKiB: s.max, Samples: s.samples}
}

// RSS is the memory of the bench process during a burn-down, from
// /proc/self/status, in KiB.
type RSS struct {
	// PeakKiB is VmHWM at the end of the burn-down; PeakSince says from
	// when: the burn-down's start when the peak could be reset then, else
	// the start of the process (the load included).
	PeakKiB   int64  `json:"peak_kib"`
	PeakSince string `json:"peak_since"`
	// Sampled VmRSS, every rssEvery.
	MinKiB  int64 `json:"sampled_min_kib"`
	MaxKiB  int64 `json:"sampled_max_kib"`
	Samples int   `json:"samples"`
}
