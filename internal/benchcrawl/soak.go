package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// rssSample is one reading of the worker's memory.
type rssSample struct {
	wall      time.Time
	at        time.Duration // since the process started
	requests  int           // the site's requests so far
	rss, peak int64         // VmRSS, VmHWM
}

// soakReport is what the soak makes of its samples.
type soakReport struct {
	early, late    int64     // median RSS over the fifth of the pages after the warm-up, and over the last fifth
	nEarly, nLate  int       // samples in each
	min, max, last rssSample // after the warm-up
	after          int       // samples after the warm-up
	peak           int64     // VmHWM at the last sample
	flat           bool      // late ≤ tolerance × early
	tolerance      float64
	warmup         float64
}

// fifth is the share of the pages over which the soak takes a median.
const fifth = 0.2

// judge compares, in samples, the median RSS over the fifth of the pages
// that follows the warm-up (the first warmup×total requests) with the
// median over the last fifth: memory is flat if the later is at most
// tolerance times the earlier. Medians, not extremes: the garbage
// collector lets the heap grow to twice what is live between cycles, so a
// single reading says little; a leak moves the median.
func judge(samples []rssSample, total int, warmup, tolerance float64) (soakReport, error) {
	rep := soakReport{tolerance: tolerance, warmup: warmup}
	share := func(s rssSample) float64 { return float64(s.requests) / float64(total) }
	var early, late []int64
	for _, s := range samples {
		f := share(s)
		if f < warmup {
			continue
		}
		if rep.after == 0 || s.rss < rep.min.rss {
			rep.min = s
		}
		if rep.after == 0 || s.rss > rep.max.rss {
			rep.max = s
		}
		rep.after++
		rep.last = s
		if f < warmup+fifth {
			early = append(early, s.rss)
		}
		if f >= 1-fifth {
			late = append(late, s.rss)
		}
	}
	if len(early) == 0 || len(late) == 0 || warmup+fifth > 1-fifth {
		return rep, fmt.Errorf("%d samples after the warm-up, %d and %d in the fifths compared: too few (crawl more pages)", rep.after, len(early), len(late))
	}
	med := func(v []int64) int64 {
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	rep.nEarly, rep.nLate = len(early), len(late)
	rep.early, rep.late = med(early), med(late)
	rep.peak = rep.last.peak
	rep.flat = float64(rep.late) <= tolerance*float64(rep.early)
	return rep, nil
}

func soakMain(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	c.flags(fs, 100000)
	brokerFlag := fs.String("broker", "", "the crawl's --broker: empty for the embedded default, or memory")
	warmup := fs.Float64("warmup", 0.2, "share of the pages that is warm-up")
	tolerance := fs.Float64("tolerance", 1.2, "memory is flat if its median over the last fifth of the pages is at most this times its median over the fifth after the warm-up")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *brokerFlag != "" && *brokerFlag != "memory" {
		return errors.New("-broker: want empty (the embedded default) or memory")
	}
	if *warmup <= 0 || *warmup+2*fifth > 1 || *tolerance < 1 {
		return errors.New("-warmup must be in (0, 0.6] and -tolerance at least 1")
	}
	if err := c.setup(ctx); err != nil {
		return err
	}
	keep := true // unless all goes well
	defer func() { c.cleanup(keep) }()
	s, stopSite, err := serveSite(ctx, c.pages, c.latency)
	if err != nil {
		return err
	}
	defer stopSite()

	load := loadavg()
	mode := "embedded default"
	var flags []string
	if *brokerFlag != "" {
		flags = []string{"--broker=" + *brokerFlag}
		mode = "--broker=" + *brokerFlag
	}
	p, err := c.newCrawl(ctx, s, filepath.Join(c.dir, "soak"), "soak", 3*time.Second, flags...)
	if err != nil {
		return err
	}
	defer p.close()
	logf("soak: crawling %d pages (%s, --concurrency %d)", c.pages, mode, c.concurrency)
	if err := p.start(); err != nil {
		return err
	}
	start := time.Now()
	exited := make(chan error, 1)
	go func() { exited <- p.wait() }() // read below
	var samples []rssSample
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var runErr error
	for done := false; !done; {
		select {
		case runErr = <-exited:
			done = true
		case <-tick.C:
			cur, peak, err := rss(p.cmd.Process.Pid)
			if err != nil {
				continue // exiting: the next select sees it
			}
			samples = append(samples, rssSample{wall: time.Now(), at: time.Since(start), requests: s.requests(), rss: cur, peak: peak})
			if len(samples)%30 == 0 {
				logf("soak: %v, %d requests, RSS %.1f MiB", samples[len(samples)-1].at.Round(time.Second), s.requests(), mib(cur))
			}
		}
	}
	if runErr != nil {
		return runErr
	}
	win := s.window()
	_, problems, err := p.check(s)
	if err != nil {
		return err
	}
	// Judge the crawl, not the idle timeout and the shutdown after it.
	crawling := samples
	for len(crawling) > 0 && crawling[len(crawling)-1].wall.After(win.Last) {
		crawling = crawling[:len(crawling)-1]
	}
	rep, err := judge(crawling, win.Requests, *warmup, *tolerance)
	if err != nil {
		return err
	}
	fmt.Printf("make soak, %s, %s; load average %s before, %s after\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), c.version(ctx), load, loadavg())
	printSoak(os.Stdout, c, mode, win, crawling, rep, problems, p.summary())
	if len(problems) > 0 {
		return errors.New("the crawl was incomplete")
	}
	keep = false
	return nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func printSoak(w io.Writer, c common, mode string, win window, samples []rssSample, rep soakReport, problems []string, summary string) {
	fmt.Fprintf(w, "%s, one worker, %s, --concurrency %d --per-host %d: %d requests in %.1f s (%.0f pages/s); trawl says %s\n\n",
		c.siteDesc(), mode, c.concurrency, c.concurrency, win.Requests, win.Elapsed().Seconds(), win.Rate(), summary)
	fmt.Fprintln(w, "| pages served | time | RSS MiB |")
	fmt.Fprintln(w, "| ---: | ---: | ---: |")
	next := 0.0
	for i, s := range samples {
		if float64(s.requests) >= next*float64(win.Requests) || i == len(samples)-1 {
			fmt.Fprintf(w, "| %d (%.0f%%) | %v | %.1f |\n", s.requests, 100*float64(s.requests)/float64(win.Requests), s.at.Round(time.Second), mib(s.rss))
			for next*float64(win.Requests) <= float64(s.requests) {
				next += 0.1
			}
		}
	}
	verdict := "FLAT"
	if !rep.flat {
		verdict = "NOT FLAT"
	}
	fmt.Fprintf(w, "\nMedian RSS over pages %.0f–%.0f%% (%d samples a second apart): %.1f MiB; over pages %.0f–100%% (%d samples): %.1f MiB; ratio %.2f (flat: at most %.2f): **%s**.\n",
		100*rep.warmup, 100*(rep.warmup+fifth), rep.nEarly, mib(rep.early), 100*(1-fifth), rep.nLate, mib(rep.late), float64(rep.late)/float64(rep.early), rep.tolerance, verdict)
	fmt.Fprintf(w, "After the warm-up (the first %.0f%% of the pages) to the crawl's last page, %d samples: min %.1f MiB (at %d pages), max %.1f MiB (at %d pages), last %.1f MiB; peak (VmHWM) %.1f MiB.\n",
		100*rep.warmup, rep.after, mib(rep.min.rss), rep.min.requests, mib(rep.max.rss), rep.max.requests, mib(rep.last.rss), mib(rep.peak))
	for _, p := range problems {
		fmt.Fprintf(w, "\nincomplete crawl: %s\n", p)
	}
}
