package main

import (
	"slices"
	"testing"
	"time"
)

func TestParseStatus(t *testing.T) {
	cur, peak, err := parseStatus([]byte("Name:\ttrawl\nVmPeak:\t  900 kB\nVmHWM:\t   2048 kB\nVmRSS:\t   1024 kB\nThreads:\t9\n"))
	if err != nil || cur != 1024<<10 || peak != 2048<<10 {
		t.Fatalf("parseStatus = %d, %d, %v; want %d, %d, nil", cur, peak, err, 1024<<10, 2048<<10)
	}
	if _, _, err := parseStatus([]byte("Name:\tzombie\n")); err == nil {
		t.Error("parseStatus without VmRSS: no error")
	}
}

func TestParseStat(t *testing.T) {
	// A command name with a space and a parenthesis, as /proc prints it.
	line := "4242 (beam.smp (x) y) S 4200 4242 4242 0 -1 4194560 1 0 0 0 250 50 3 4 20 0 30 0 100 1 1 0\n"
	st, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != 4200 || st.cpu != 3*time.Second {
		t.Errorf("parseStat = ppid %d, cpu %v; want 4200, 3s (utime 250 + stime 50 ticks)", st.ppid, st.cpu)
	}
}

func TestCgroupCPUFiles(t *testing.T) {
	v1 := "2:cpu,cpuacct:/docker/abc\n1:memory:/docker/abc\n0::/docker/abc\n"
	got := cgroupCPUFiles(v1)
	want := []string{
		"/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpuacct.usage",
		"/sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage",
		"/sys/fs/cgroup/docker/abc/cpu.stat",
	}
	if !slices.Equal(got, want) {
		t.Errorf("cgroupCPUFiles(v1) = %q, want %q", got, want)
	}
	if got := cgroupCPUFiles("0::/system.slice/docker-abc.scope\n"); !slices.Equal(got, []string{"/sys/fs/cgroup/system.slice/docker-abc.scope/cpu.stat"}) {
		t.Errorf("cgroupCPUFiles(v2) = %q", got)
	}
}

func TestCPUOver(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s := []sample{
		{at: at(0), cpu: 1 * time.Second},
		{at: at(100), cpu: 2 * time.Second},
		{at: at(200), cpu: 4 * time.Second},
		{at: at(300), cpu: 8 * time.Second},
	}
	// From 150 ms to 250 ms: the readings at 100 and 300 bracket it.
	if got, err := cpuOver(s, at(150), at(250)); err != nil || got != 6*time.Second {
		t.Errorf("cpuOver(150, 250) = %v, %v; want 6s", got, err)
	}
	if _, err := cpuOver(s, at(150), at(400)); err == nil {
		t.Error("cpuOver past the last reading: no error")
	}
}

func TestJudge(t *testing.T) {
	mk := func(reqs int, mb int64) rssSample { return rssSample{requests: reqs, rss: mb << 20, peak: 200 << 20} }
	// Warm-up to 200 of 1,000 pages; early fifth 200–399, late 800–1000.
	samples := []rssSample{mk(0, 10), mk(100, 50), mk(200, 100), mk(300, 140), mk(390, 102),
		mk(500, 180), mk(800, 110), mk(900, 95), mk(1000, 119)}
	rep, err := judge(samples, 1000, 0.2, 1.2)
	if err != nil {
		t.Fatal(err)
	}
	if rep.early != 102<<20 || rep.late != 110<<20 || !rep.flat {
		t.Errorf("judge: early %d MiB, late %d MiB, flat %v; want 102, 110, flat", rep.early>>20, rep.late>>20, rep.flat)
	}
	if rep.max.rss != 180<<20 || rep.min.rss != 95<<20 || rep.after != 7 {
		t.Errorf("judge: min %d, max %d MiB over %d samples; want 95, 180 over 7", rep.min.rss>>20, rep.max.rss>>20, rep.after)
	}
	growing := slices.Clone(samples)
	growing[6], growing[7], growing[8] = mk(800, 120), mk(900, 123), mk(1000, 130)
	if rep, err := judge(growing, 1000, 0.2, 1.2); err != nil || rep.flat {
		t.Errorf("judge of a late median of 1.21× the early one: flat %v, %v; want not flat", rep.flat, err)
	}
	if _, err := judge(samples[:5], 1000, 0.2, 1.2); err == nil {
		t.Error("judge with no sample in the last fifth: no error")
	}
}

func TestMedian(t *testing.T) {
	runs := func(v ...float64) []*run {
		var rs []*run
		for _, x := range v {
			rs = append(rs, &run{fetch: x})
		}
		return rs
	}
	f := func(r *run) float64 { return r.fetch }
	if m, lo, hi := median(runs(3, 1, 2), f); m != 2 || lo != 1 || hi != 3 {
		t.Errorf("median(3, 1, 2) = %v (%v–%v), want 2 (1–3)", m, lo, hi)
	}
	if m, _, _ := median(runs(4, 1, 2, 3), f); m != 2.5 {
		t.Errorf("median(4, 1, 2, 3) = %v, want 2.5", m)
	}
}

func TestCPURatio(t *testing.T) {
	r := &run{crawl: window{Requests: 1000}, fetchCPU: 200 * time.Microsecond}
	// 1000 pages: site 0.1 s, worker 0.6 s, broker 0.1 s: 800 µs a page.
	r.windowCPU.site, r.windowCPU.worker, r.windowCPU.broker = 100*time.Millisecond, 600*time.Millisecond, 100*time.Millisecond
	if got := r.cpuRatio(); got != 0.25 {
		t.Errorf("cpuRatio = %v, want 0.25 (200 µs over 800 µs a page)", got)
	}
}

// TestHeldConns: the connections an idle worker holds are what it held for
// most of the window, not what one reading caught. The samples are those of
// a Redis run (2026-12-05 04:05): the pool's second connection, opened when
// two of the worker's timers overlapped, was open at the window's end, and
// the single reading the harness took then counted 3.
func TestHeldConns(t *testing.T) {
	for _, c := range []struct {
		samples    []int
		held, most int
		over       float64
	}{
		{[]int{2, 2, 2, 2, 2, 2, 2, 2, 3, 3}, 2, 3, 0.2},
		{[]int{3, 3, 3, 2}, 3, 3, 0},
		{[]int{1}, 1, 1, 0},
		{[]int{2, 3}, 2, 3, 0.5}, // half the window is enough to hold
		{nil, 0, 0, 0},
	} {
		held, most, over := heldConns(c.samples)
		if held != c.held || most != c.most || over != c.over {
			t.Errorf("heldConns(%v) = %d, %d, %v; want %d, %d, %v", c.samples, held, most, over, c.held, c.most, c.over)
		}
	}
}
