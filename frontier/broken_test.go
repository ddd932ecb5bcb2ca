package frontier_test

import (
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/frontier"
	"github.com/trawlhq/trawl/frontier/frontiertest"
)

// brokenEnv names the broken frontier TestBrokenFrontier runs the suite
// on, in the process TestSuiteCatchesBrokenFrontiers starts.
const brokenEnv = "FRONTIERTEST_BROKEN"

// The suite fails each broken frontier in the promise it breaks: each runs
// in a process of its own (a failing suite fails its test), which must
// fail, in that subtest.
func TestSuiteCatchesBrokenFrontiers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a test process per broken frontier")
	}
	for _, c := range []struct{ broken, catches string }{
		{"forgetful", "ExpandedAgain"},        // publishes every link, whatever the filter holds
		{"unlocked", "SharedLinks"},           // Memory without its lock: check, publish, claim
		{"norecheck", "KilledExpander"},       // Compose that never finds a page expanded before
		{"publishfirst", "StartURLsTogether"}, // Compose publishing what the filter lacks, then claiming it
	} {
		t.Run(c.broken, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^TestBrokenFrontier$/^"+c.catches+"$", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+c.broken)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite's %s passed the %s frontier:\n%s", c.catches, c.broken, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestBrokenFrontier/"+c.catches) {
				t.Fatalf("the %s frontier did not fail in %s:\n%s", c.broken, c.catches, out)
			}
		})
	}
}

// TestBrokenFrontier runs the suite on the broken frontier brokenEnv
// names; it is skipped without it.
func TestBrokenFrontier(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip("run by TestSuiteCatchesBrokenFrontiers")
	}
	frontiertest.Run(t, frontiertest.Harness{Faulty: true, SamePageRaces: name != "unlocked",
		New: func(t *testing.T, _ string, faults *frontiertest.Faults) frontier.Frontier {
			b, f := newStores(t)
			fb, ff := faults.Broker(b), faults.Filter(f).(frontier.CheckingFilter)
			composed := frontier.Compose(fb, ff, frontier.ComposeConfig{ClaimWait: 2 * time.Second})
			switch name {
			case "forgetful":
				return forgetful{composed}
			case "unlocked":
				return &unlocked{Frontier: composed, b: fb, f: ff}
			case "norecheck":
				return norecheck{composed}
			case "publishfirst":
				return &unlocked{Frontier: composed, b: fb, f: ff, marks: true}
			}
			t.Fatalf("no broken frontier %q", name)
			return nil
		}})
}

// forgetful publishes every link, claimed before or not.
type forgetful struct{ frontier.Frontier }

func (f forgetful) Expand(ctx context.Context, queue string, pages []frontier.Page) ([][]frontier.Outcome, error) {
	out := make([][]frontier.Outcome, len(pages))
	var msgs []broker.Message
	for i, p := range pages {
		out[i] = make([]frontier.Outcome, len(p.Links))
		for j, l := range p.Links {
			out[i][j], msgs = frontier.Published, append(msgs, l.Message)
		}
	}
	return out, f.Broker().Publish(ctx, queue, msgs...)
}

// unlocked asks the filter which links are new, publishes them, then
// claims them, with nothing to keep other expansions out in between (and,
// with marks, adds each page's expanded mark first, as Compose does).
type unlocked struct {
	frontier.Frontier
	b     broker.Broker
	f     frontier.CheckingFilter
	marks bool
}

func (u *unlocked) Expand(ctx context.Context, queue string, pages []frontier.Page) ([][]frontier.Outcome, error) {
	out := make([][]frontier.Outcome, len(pages))
	for i, p := range pages {
		out[i] = make([]frontier.Outcome, len(p.Links))
		if u.marks && !p.Start {
			if _, err := u.f.Add(ctx, dedup.ExpandedMark(p.Parent)); err != nil {
				return nil, err
			}
		}
		var fps []dedup.Fingerprint
		for _, l := range p.Links {
			fps = append(fps, l.Fingerprint)
		}
		held, err := u.f.Contains(ctx, fps...)
		if err != nil {
			return nil, err
		}
		var msgs []broker.Message
		var claims []dedup.Fingerprint
		for j, l := range p.Links {
			out[i][j] = frontier.Filtered
			if !held[j] && !l.Known {
				out[i][j], msgs, claims = frontier.Published, append(msgs, l.Message), append(claims, l.Fingerprint)
			}
		}
		if len(msgs) == 0 {
			continue
		}
		if err := u.b.Publish(ctx, queue, msgs...); err != nil {
			return nil, err
		}
		if _, err := u.f.Add(ctx, claims...); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// norecheck gives every expansion a parent never seen before: a page
// expanded again is taken for new, and the links its dead first
// expansion claimed for other pages' links.
type norecheck struct{ frontier.Frontier }

func (n norecheck) Expand(ctx context.Context, queue string, pages []frontier.Page) ([][]frontier.Outcome, error) {
	renamed := make([]frontier.Page, len(pages))
	for i, p := range pages {
		renamed[i] = p
		rand.Read(renamed[i].Parent[:])
	}
	return n.Frontier.Expand(ctx, queue, renamed)
}
