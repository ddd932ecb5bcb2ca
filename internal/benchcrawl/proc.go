package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on
// every Linux platform Go supports).
const userHZ = 100

// rss returns the resident set size of process pid (VmRSS) and its peak
// (VmHWM), in bytes.
func rss(pid int) (cur, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	return parseStatus(b)
}

// parseStatus reads VmRSS and VmHWM from the text of /proc/PID/status.
func parseStatus(b []byte) (cur, peak int64, err error) {
	var found int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("/proc status: %s: %q", k, v)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc status: %s: %w", k, err)
		}
		if k == "VmRSS" {
			cur = n << 10
		} else {
			peak = n << 10
		}
		found++
	}
	if found != 2 {
		return 0, 0, errors.New("/proc status: no VmRSS and VmHWM")
	}
	return cur, peak, nil
}

// cpuMeter reads the CPU time used so far by the processes it measures.
type cpuMeter func() (time.Duration, error)

// containerCPU measures the processes of the container whose main process
// is pid: its cgroup's CPU usage (cgroup v1 cpuacct.usage or v2 cpu.stat)
// where readable, else the CPU of pid and its descendants from /proc
// (which misses descendants that have exited).
func containerCPU(pid int) (cpuMeter, string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, "", err
	}
	for _, path := range cgroupCPUFiles(string(b)) {
		m := func() (time.Duration, error) { return readCgroupCPU(path) }
		if _, err := m(); err == nil {
			return m, path, nil
		}
	}
	m := func() (time.Duration, error) { return treeCPU(pid) }
	if _, err := m(); err != nil {
		return nil, "", err
	}
	return m, fmt.Sprintf("/proc/%d and its descendants", pid), nil
}

// cgroupCPUFiles returns the files that may hold the CPU usage of the
// cgroup described by the text of /proc/PID/cgroup, best first.
func cgroupCPUFiles(cgroup string) []string {
	var v1, v2 []string
	for line := range strings.Lines(cgroup) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, path := parts[1], parts[2]
		if ctrls == "" && parts[0] == "0" {
			v2 = append(v2, filepath.Join("/sys/fs/cgroup", path, "cpu.stat"))
			continue
		}
		for c := range strings.SplitSeq(ctrls, ",") {
			if c == "cpuacct" {
				v1 = append(v1,
					filepath.Join("/sys/fs/cgroup", ctrls, path, "cpuacct.usage"),
					filepath.Join("/sys/fs/cgroup/cpuacct", path, "cpuacct.usage"))
			}
		}
	}
	return append(v1, v2...)
}

// readCgroupCPU reads cpuacct.usage (nanoseconds) or cpu.stat's
// usage_usec.
func readCgroupCPU(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	if filepath.Base(path) == "cpuacct.usage" {
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return time.Duration(n), err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "usage_usec "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return time.Duration(n) * time.Microsecond, err
		}
	}
	return 0, fmt.Errorf("%s: no usage_usec", path)
}

// procStat is what treeCPU needs of /proc/PID/stat.
type procStat struct {
	ppid int
	cpu  time.Duration // utime + stime
}

// parseStat parses the text of /proc/PID/stat.
func parseStat(b []byte) (procStat, error) {
	// The command name, in parentheses, may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("/proc stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); ppid is field 4, utime 14, stime 15.
	if len(f) < 13 {
		return procStat{}, errors.New("/proc stat: too few fields")
	}
	ppid, err1 := strconv.Atoi(f[1])
	ut, err2 := strconv.ParseInt(f[11], 10, 64)
	st, err3 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return procStat{}, fmt.Errorf("/proc stat: %w", err)
	}
	return procStat{ppid: ppid, cpu: time.Duration(ut+st) * time.Second / userHZ}, nil
}

// treeCPU sums the CPU time of pid and its descendants.
func treeCPU(root int) (time.Duration, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	stats := map[int]procStat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		if st, err := parseStat(b); err == nil {
			stats[pid] = st
		}
	}
	if _, ok := stats[root]; !ok {
		return 0, fmt.Errorf("process %d not found in /proc", root)
	}
	var sum time.Duration
	for pid, st := range stats {
		for p, hops := pid, 0; p > 0 && hops < 64; p, hops = stats[p].ppid, hops+1 {
			if p == root {
				sum += st.cpu
				break
			}
		}
	}
	return sum, nil
}

// procCPU measures process pid alone.
func procCPU(pid int) cpuMeter {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	return func() (time.Duration, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		st, err := parseStat(b)
		return st.cpu, err
	}
}
