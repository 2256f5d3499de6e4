package bench

import (
	"strings"
	"testing"
	"time"
)

// procStatSample is /proc/stat as a 2-CPU Linux machine writes it.
const procStatSample = `cpu  1000 20 300 5000 100 7 8 9 40 0
cpu0 500 10 150 2500 50 3 4 5 20 0
cpu1 500 10 150 2500 50 4 4 4 20 0
intr 123456 0 0
ctxt 987654
btime 1700000000
processes 4242
procs_running 2
procs_blocked 0
softirq 1 2 3
`

func TestParseProcStat(t *testing.T) {
	cases := []struct {
		name    string
		data    string
		want    procStat
		wantErr string
	}{
		// user+nice+system+irq+softirq+steal are busy; idle and iowait
		// are not; guest (already in user) is not added again.
		{name: "two CPUs", data: procStatSample, want: procStat{total: 6444, busy: 1344, cores: 2}},
		{name: "an older kernel's four fields", data: "cpu 10 0 5 85\ncpu0 10 0 5 85\n", want: procStat{total: 100, busy: 15, cores: 1}},
		{name: "no cpu line", data: "intr 1\nctxt 2\n", wantErr: "no cpu line"},
		{name: "a field that is not a number", data: "cpu 10 x 5 85 0\n", wantErr: "cpu field 2"},
		{name: "too few fields", data: "cpu 10 0 5\n", wantErr: "a cpu line of 4 fields"},
		{name: "cpufreq-like lines are not CPUs", data: "cpu 10 0 5 85\ncpuset 1\n", want: procStat{total: 100, busy: 15}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat([]byte(tc.data))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestCPUBetween(t *testing.T) {
	start := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	a := CPUReading{at: start, process: 3 * time.Second, hasProcess: true, machine: procStat{total: 1000, busy: 400, cores: 2}, hasStat: true}
	// 2 s later: the process used 1 s of CPU; the machine's two CPUs
	// 400 ticks, 300 of them busy.
	b := CPUReading{at: start.Add(2 * time.Second), process: 4 * time.Second, hasProcess: true, machine: procStat{total: 1400, busy: 700, cores: 2}, hasStat: true}

	c := CPUBetween(a, b, 500)
	if c == nil {
		t.Fatal("no CPU figures")
	}
	if c.Seconds != 2 || c.ProcessSeconds != 1 || c.ProcessMsPerUnit != 2 || c.ProcessCores != 0.5 {
		t.Errorf("process figures %+v, want 2 s, 1 s of CPU, 2 ms a unit, 0.5 of a core", *c)
	}
	// 75% of 2 cores for 2 s is 3 s of CPU, 6 ms for each of 500 units.
	if c.MachineCores != 2 || c.MachineBusy == nil || *c.MachineBusy != 0.75 || *c.MachineMsPerUnit != 6 {
		t.Errorf("machine figures %+v, want 2 cores 75%% busy, 6 ms a unit", *c)
	}

	noStat := b
	noStat.hasStat = false
	if c := CPUBetween(a, noStat, 500); c == nil || c.MachineBusy != nil || c.MachineMsPerUnit != nil || c.MachineCores != 0 {
		t.Errorf("without /proc/stat: %+v, want the process's figures alone", c)
	}
	noProcess := b
	noProcess.hasProcess = false
	if c := CPUBetween(a, noProcess, 500); c != nil {
		t.Errorf("without the process's time: %+v, want none", *c)
	}
	// Counters that went backwards, or did not move: no machine figures.
	for name, m := range map[string]procStat{
		"busy went backwards":  {total: 1400, busy: 300, cores: 2},
		"total went backwards": {total: 900, busy: 450, cores: 2},
		"nothing moved":        a.machine,
	} {
		odd := b
		odd.machine = m
		if c := CPUBetween(a, odd, 500); c == nil || c.MachineBusy != nil || c.MachineMsPerUnit != nil {
			t.Errorf("%s: %+v, want the process's figures alone", name, c)
		}
	}
	// Idle that fell while busy grew is clamped to all busy.
	fell := b
	fell.machine = procStat{total: 1100, busy: 700, cores: 2}
	if c := CPUBetween(a, fell, 500); c == nil || c.MachineBusy == nil || *c.MachineBusy != 1 {
		t.Errorf("idle fell: %+v, want the machine all busy", c)
	}
	if c := CPUBetween(a, b, 0); c != nil {
		t.Errorf("for no units: %+v, want none", *c)
	}
}
