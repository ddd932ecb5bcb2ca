package trawl

import "testing"

// TestCallbackName: the name requests carry depends on the handlers' kinds,
// selectors and order, and on nothing else (not on the closures), so that
// workers running the same program agree and others do not.
func TestCallbackName(t *testing.T) {
	reg := func(sels ...string) string {
		c := New(Config{})
		for _, s := range sels {
			if s == "" {
				c.OnResponse(func(*Response) {})
			} else {
				c.OnHTML(s, func(*Element) {})
			}
		}
		if len(c.errs) > 0 {
			t.Fatal(c.errs)
		}
		return callbackName(c.handlers)
	}
	a := reg("a.next", "h1")
	if b := reg("a.next", "h1"); a != b {
		t.Errorf("same registrations named %q and %q", a, b)
	}
	for _, other := range [][]string{{"h1", "a.next"}, {"a.next"}, {"a.next", "h1", "h1"}, {"a.next", "h2"}, {"", "a.next", "h1"}} {
		if b := reg(other...); b == a {
			t.Errorf("registrations %q share the name %q of [a.next h1]", other, a)
		}
	}
	if len(a) != len("trawl:")+12 || a[:6] != "trawl:" {
		t.Errorf("name %q, want trawl: and 12 hex digits", a)
	}
}
