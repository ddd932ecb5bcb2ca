package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// fetchMain is the fetch limit's process: conc goroutines GET /, then
// /page/0 … /page/pages-1 of base, each page once, with a plain
// http.Client, and exit non-zero on the first failure.
func fetchMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("fetch", flag.ContinueOnError)
	base := fs.String("base", "", "the site's base URL")
	pages := fs.Int("pages", 0, "content pages")
	conc := fs.Int("concurrency", 32, "goroutines")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *base == "" || *pages < 1 || *conc < 1 {
		return errors.New("fetch: want -base, -pages ≥ 1 and -concurrency ≥ 1")
	}
	tr := &http.Transport{MaxIdleConnsPerHost: *conc}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, *conc)
	for range *conc {
		wg.Go(func() {
			for {
				i := next.Add(1) - 2 // -1 is /
				if i >= int64(*pages) || ctx.Err() != nil {
					return
				}
				u := *base + "/"
				if i >= 0 {
					u = *base + "/page/" + strconv.FormatInt(i, 10)
				}
				if err := get(ctx, client, u); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(ctx.Err(), <-errs)
}

func get(ctx context.Context, client *http.Client, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return nil
}

// fetched is what one measure of the fetch limit saw.
type fetched struct {
	window
	cpu  time.Duration // the site's (this process's) and the loop's
	site time.Duration // the site's alone
}

// perPage is the CPU per request.
func (f fetched) perPage() time.Duration { return f.cpu / time.Duration(f.Requests) }

// fetchLimit runs the fetch limit in a process of its own (this program,
// with the fetch subcommand) against s and returns what the site saw.
func fetchLimit(ctx context.Context, s *site, pages, conc int) (fetched, error) {
	self, err := os.Executable()
	if err != nil {
		return fetched{}, err
	}
	s.reset()
	cmd := exec.CommandContext(ctx, self, "fetch", "-base", s.URL, "-pages", strconv.Itoa(pages), "-concurrency", strconv.Itoa(conc))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	siteCPU := procCPU(os.Getpid())
	c0, err := siteCPU()
	if err != nil {
		return fetched{}, err
	}
	if err := cmd.Run(); err != nil {
		return fetched{}, fmt.Errorf("fetch limit: %w", err)
	}
	c1, err := siteCPU()
	if err != nil {
		return fetched{}, err
	}
	f := fetched{window: s.window(), site: c1 - c0}
	f.cpu = f.site + cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if want := pages + 1; f.Requests != want {
		return f, fmt.Errorf("fetch limit: the site served %d requests, want %d", f.Requests, want)
	}
	return f, nil
}
