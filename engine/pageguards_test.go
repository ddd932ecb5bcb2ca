package engine

import (
	"testing"
)

// TestPageGuardsMaxPages: a worker starts at most MaxPages pages (0: no
// limit); a page past the limit stays counted, so the worker has reached
// it; a page taken back (refused before its request) frees its place.
func TestPageGuardsMaxPages(t *testing.T) {
	g := newPageGuards()
	for i := range 2 {
		if !g.startPage(2) {
			t.Fatalf("page %d of 2 refused", i+1)
		}
	}
	if g.reached(0) {
		t.Error("reached with no limit")
	}
	if !g.reached(2) {
		t.Error("not reached after 2 pages of 2")
	}
	if g.startPage(2) {
		t.Error("a third page of 2 started")
	}
	g.unstartPage()
	if !g.reached(2) {
		t.Error("not reached after a page past the limit was refused: it must stay counted")
	}
	g.unstartPage()
	if g.reached(2) || !g.startPage(2) {
		t.Error("a page taken back did not free its place")
	}
	free := newPageGuards()
	for range 100 {
		if !free.startPage(0) {
			t.Fatal("a page refused with no limit")
		}
	}
	if free.started.Load() != 100 {
		t.Errorf("counted %d pages with no limit, want 100", free.started.Load())
	}
}

// TestPageGuardsConfigure: the trap guard and the host budget are those
// of the configuration, afresh each time (a worker adopting the crawl's
// settings), the sitemaps' budget is kept.
func TestPageGuardsConfigure(t *testing.T) {
	g := newPageGuards()
	g.configure(&compiled{})
	if g.traps != nil || g.hosts != nil {
		t.Fatal("guards without a limit configured")
	}
	g.sitemaps.reserve("a")
	g.configure(&compiled{Config: Config{MaxQueryValues: 3, MaxPagesPerHost: 1}})
	if g.traps == nil || g.hosts == nil {
		t.Fatal("no trap guard or host budget with their limits configured")
	}
	if ok, _ := g.hosts.reserve("h"); !ok {
		t.Fatal("first page of a host refused")
	}
	if ok, _ := g.hosts.reserve("h"); ok {
		t.Error("second page of a host with a budget of 1 allowed")
	}
	g.configure(&compiled{Config: Config{MaxPagesPerHost: 1}})
	if ok, _ := g.hosts.reserve("h"); !ok {
		t.Error("a configured budget kept the old count")
	}
	if g.traps != nil {
		t.Error("the trap guard outlived its limit")
	}
	if g.sitemaps.count["a"] != 1 {
		t.Error("configuring forgot the sitemaps' budget")
	}
}

// TestPageGuardsOnce: each warning is first once; each unknown callback
// name is first once.
func TestPageGuardsOnce(t *testing.T) {
	g := newPageGuards()
	for _, f := range []func() bool{g.firstLinksDropped, g.firstUndecodable, func() bool { return g.firstUnknown("x") }} {
		if !f() || f() {
			t.Error("a warning not first exactly once")
		}
	}
	if !g.firstUnknown("y") {
		t.Error("a second unknown callback name is not first")
	}
}
