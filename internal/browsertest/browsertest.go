// Package browsertest opens pages in a headless Debian chromium, driven
// over the DevTools protocol (chromedp), for the tests of the dashboard.
package browsertest

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Chromium returns the path of Debian's chromium. It skips t, saying
// why, when there is none and the run is -short; otherwise a missing
// browser fails t: CI (.ci/run) installs it.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if testing.Short() {
		t.Skip("chromium is not installed (apt-get install chromium); the dashboard's browser tests run without -short, as in make test")
	}
	t.Fatal("chromium is not installed: apt-get install chromium (.ci/run does)")
	return ""
}

// Open starts a headless chromium for t (closed when it ends), opens url
// in it and returns the tab's context, bounded by timeout.
func Open(t testing.TB, url string, timeout time.Duration) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(Chromium(t)), chromedp.NoSandbox, chromedp.WindowSize(1280, 1500))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	ctx, cancel := context.WithTimeout(bctx, timeout)
	t.Cleanup(func() { cancel(); cancelBrowser(); cancelAlloc() })
	if _, err := chromedp.Run(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("opening %s: %v", url, err)
	}
	return ctx
}

// Eval evaluates a JavaScript expression on the page.
func Eval[T any](t testing.TB, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s on the page: %v", expr, err)
	}
	return v
}

// Number reads a figure the page shows (1,234) in the element of id; -1
// while it shows none.
func Number(t testing.TB, ctx context.Context, id string) int64 {
	t.Helper()
	s := Eval[string](t, ctx, `document.getElementById("`+id+`").textContent`)
	n, err := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// Click clicks the element sel (a CSS selector) selects.
func Click(t testing.TB, ctx context.Context, sel string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Click(sel)); err != nil {
		t.Fatalf("clicking %s: %v", sel, err)
	}
}

// Screenshot returns a PNG of the whole page.
func Screenshot(t testing.TB, ctx context.Context) []byte {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	return png
}

// WaitFor polls cond, an observable state, until it holds or timeout
// passes.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond) // polling an observable condition
	}
}
