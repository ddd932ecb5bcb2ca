package engine

import (
	"fmt"
	"testing"
)

// TestHostTallyCounts: pages are responses of any status; errors are
// fetches with no response or a status of 400 or more; hosts are told
// apart case-insensitively.
func TestHostTallyCounts(t *testing.T) {
	var tl hostTally
	for _, f := range []struct {
		host   string
		status int
	}{{"a.example", 200}, {"A.example", 404}, {"a.example", 0}, {"a.example", 503}, {"b.example", 301}, {"a.example", 200}} {
		tl.fetched(f.host, f.status)
	}
	got := tl.top(10)
	want := []HostStatus{
		{Host: "a.example", Pages: 4, Errors: 3, DelayMs: -1},
		{Host: "b.example", Pages: 1, DelayMs: -1},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("top = %+v, want %+v", got, want)
	}
	if got := tl.top(1); len(got) != 1 || got[0].Host != "a.example" {
		t.Errorf("top(1) = %+v, want a.example only", got)
	}
}

// TestHostTallyBounded: past hostTallyCap hosts the tally keeps
// hostTallyCap entries, and a host with more fetches than total /
// hostTallyCap stays in it with every page it had since it came in
// (space-saving's guarantee), among ten times as many hosts seen once.
func TestHostTallyBounded(t *testing.T) {
	var tl hostTally
	const heavy, once = 500, 10 * hostTallyCap
	for i := range once {
		tl.fetched(fmt.Sprintf("h%d.example", i), 200)
		if i%(once/heavy) == 0 {
			tl.fetched("busy.example", 200)
		}
	}
	if n := len(tl.heap); n != hostTallyCap || len(tl.byKey) != hostTallyCap {
		t.Fatalf("the tally holds %d entries (%d keys), want %d", n, len(tl.byKey), hostTallyCap)
	}
	top := tl.top(hostsInRecord)
	if len(top) != hostsInRecord {
		t.Fatalf("top(%d) gave %d", hostsInRecord, len(top))
	}
	if top[0].Host != "busy.example" || top[0].Pages+top[0].Untallied < heavy || top[0].Pages != heavy {
		t.Errorf("top[0] = %+v, want busy.example with its %d pages", top[0], heavy)
	}
	for _, h := range top[1:] {
		if h.Pages != 1 || h.Untallied < 0 {
			t.Errorf("%+v: a host seen once has 1 page", h)
		}
	}
}
