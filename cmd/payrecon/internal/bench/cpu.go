package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// The CPU a timed phase took: the bench process's own (its user and
// system time), and the whole machine's (/proc/stat), so that a run says
// whether the CPU bounded it and what one unit of work cost. When the
// database runs on the same machine, as in a bench on one host, the
// machine's figure includes the database's work; the difference between
// the two is roughly what the database cost.

// CPU is the CPU time of the measured phase.
type CPU struct {
	// Seconds is the phase's wall time, as the meter saw it.
	Seconds float64 `json:"seconds"`
	// ProcessSeconds is the bench process's user and system CPU time:
	// the worker, the server, the clients and the fake together.
	ProcessSeconds float64 `json:"process_seconds"`
	// ProcessMsPerUnit is ProcessSeconds a purchase, event or request, in
	// milliseconds, and ProcessCores ProcessSeconds a second of the phase:
	// how many cores the process kept busy.
	ProcessMsPerUnit float64 `json:"process_ms_per_unit"`
	ProcessCores     float64 `json:"process_cores"`
	// MachineCores is how many CPUs /proc/stat lists, and MachineBusy
	// the share of their time the phase kept them busy (anything but
	// idle and iowait), from 0 to 1; MachineMsPerUnit is that CPU time a
	// unit, in milliseconds. Absent where /proc/stat cannot be read.
	MachineCores     int      `json:"machine_cores,omitempty"`
	MachineBusy      *float64 `json:"machine_busy,omitempty"`
	MachineMsPerUnit *float64 `json:"machine_ms_per_unit,omitempty"`
}

// CPUReading is one reading of the meter's sources.
type CPUReading struct {
	at         time.Time
	process    time.Duration // the process's user and system time
	hasProcess bool          // whether process was read
	machine    procStat
	hasStat    bool // whether machine was read
}

// ReadCPU reads the process's CPU time and /proc/stat, each where it can.
func ReadCPU() CPUReading {
	r := CPUReading{at: time.Now()}
	r.process, r.hasProcess = processCPUTime()
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		if s, err := parseProcStat(data); err == nil {
			r.machine, r.hasStat = s, true
		}
	}
	return r
}

// CPUBetween is the CPU the process and the machine took from a to b,
// for n units of work. It returns nil when the process's time could not
// be read or n is not positive. It leaves the machine's figures out when
// /proc/stat could not be read, did not move, or went backwards (the
// kernel does not promise that its idle and iowait counters only grow).
func CPUBetween(a, b CPUReading, n int) *CPU {
	if !a.hasProcess || !b.hasProcess || n <= 0 {
		return nil
	}
	c := &CPU{Seconds: b.at.Sub(a.at).Seconds(), ProcessSeconds: (b.process - a.process).Seconds()}
	c.ProcessMsPerUnit = c.ProcessSeconds * 1000 / float64(n)
	if c.Seconds > 0 {
		c.ProcessCores = c.ProcessSeconds / c.Seconds
	}
	if a.hasStat && b.hasStat && b.machine.total > a.machine.total && b.machine.busy >= a.machine.busy && b.machine.cores > 0 {
		busy := min(1, float64(b.machine.busy-a.machine.busy)/float64(b.machine.total-a.machine.total))
		ms := busy * float64(b.machine.cores) * c.Seconds * 1000 / float64(n)
		c.MachineCores, c.MachineBusy, c.MachineMsPerUnit = b.machine.cores, &busy, &ms
	}
	return c
}

// procStat is what the meter takes from /proc/stat: the CPUs' time,
// summed over them, in the kernel's ticks, and how many CPUs there are.
type procStat struct {
	total, busy uint64
	cores       int
}

// parseProcStat reads /proc/stat's content: its "cpu" line (user, nice,
// system, idle, iowait, irq, softirq, steal; guest time is already in
// user) and its per-CPU lines, which it counts. Idle and iowait are
// idle; the rest is busy.
func parseProcStat(data []byte) (procStat, error) {
	var s procStat
	found := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || !strings.HasPrefix(fields[0], "cpu") {
			continue
		}
		if fields[0] != "cpu" {
			if _, err := strconv.Atoi(fields[0][len("cpu"):]); err == nil {
				s.cores++
			}
			continue
		}
		if len(fields) < 5 {
			return procStat{}, fmt.Errorf("/proc/stat: a cpu line of %d fields", len(fields))
		}
		ticks := fields[1:min(len(fields), 9)]
		for i, f := range ticks {
			v, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return procStat{}, fmt.Errorf("/proc/stat: cpu field %d: %w", i+1, err)
			}
			s.total += v
			if i != 3 && i != 4 { // idle, iowait
				s.busy += v
			}
		}
		found = true
	}
	if err := sc.Err(); err != nil {
		return procStat{}, err
	}
	if !found {
		return procStat{}, errors.New("/proc/stat has no cpu line")
	}
	return s, nil
}
