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

// fetchLimit runs the fetch limit in a process of its own (this program,
// with the fetch subcommand) against s and returns what the site saw.
func fetchLimit(ctx context.Context, s *site, pages, conc int) (window, error) {
	self, err := os.Executable()
	if err != nil {
		return window{}, err
	}
	s.reset()
	cmd := exec.CommandContext(ctx, self, "fetch", "-base", s.URL, "-pages", strconv.Itoa(pages), "-concurrency", strconv.Itoa(conc))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return window{}, fmt.Errorf("fetch limit: %w", err)
	}
	w := s.window()
	if want := pages + 1; w.Requests != want {
		return w, fmt.Errorf("fetch limit: the site served %d requests, want %d", w.Requests, want)
	}
	return w, nil
}
