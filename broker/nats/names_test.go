package nats

import (
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"crawl:requests", "crawl_3arequests"},
		{"a.example.com", "a_2eexample_2ecom"},
		{"x-1", "x-1"},
		{"A_b", "_41_5fb"},
		{"sp ace*>", "sp_20ace_2a_3e"},
		{"", ""},
	} {
		if got := escape(tc.in); got != tc.want {
			t.Errorf("escape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Distinct names stay distinct, including ones that look escaped.
	seen := map[string]string{}
	for _, q := range []string{"a:b", "a_3ab", "a.b", "a_2eb", "a\xdeadb", "a_deadb", "A", "a"} {
		e := escape(q)
		if prev, ok := seen[e]; ok {
			t.Errorf("escape(%q) = escape(%q) = %q", q, prev, e)
		}
		seen[e] = q
		if strings.ContainsAny(e, " \t\r\n.*>/\\") {
			t.Errorf("escape(%q) = %q is not a valid stream name or subject token", q, e)
		}
	}
	long := strings.Repeat("q", 500)
	if e := escape(long); len(e) > maxToken || e == escape(long+"x") {
		t.Errorf("long names: %d bytes, distinct: %v", len(e), e != escape(long+"x"))
	}
}

func TestBandOf(t *testing.T) {
	for _, tc := range []struct{ prio, bands, want int }{
		{0, 5, 2}, {-2, 5, 0}, {-100, 5, 0}, {2, 5, 4}, {100, 5, 4}, {1, 5, 3},
		{0, 1, 0}, {7, 1, 0},
		{0, 4, 1}, {-1, 4, 0}, {2, 4, 3}, {3, 4, 3},
	} {
		if got := bandOf(tc.prio, tc.bands); got != tc.want {
			t.Errorf("bandOf(%d, %d) = %d, want %d", tc.prio, tc.bands, got, tc.want)
		}
	}
}

func TestNames(t *testing.T) {
	n := namesFor("books:requests", 5, 0)
	if n.work != "TRAWL_Q_books_3arequests" || n.dead != "TRAWL_D_books_3arequests" {
		t.Errorf("streams %q %q", n.work, n.dead)
	}
	if n.bands[4] != "trawl.books_3arequests.b4" || n.delay != "trawl.books_3arequests.delay" ||
		n.grave != "trawl.books_3arequests.dead" {
		t.Errorf("subjects %v %q %q", n.bands, n.delay, n.grave)
	}
	if len(n.consumers) != 6 || n.consumers[0] != "b0" || n.consumers[n.delayIdx()] != "delay" {
		t.Errorf("consumers %v", n.consumers)
	}
	p := namesFor("books:requests", 5, 2)
	if p.work != "TRAWL_Q_books_3arequests_p2" || p.dead != "TRAWL_D_books_3arequests_p2" || p.bands[0] != "trawl.books_3arequests_p2.b0" {
		t.Errorf("partition 2: streams %q %q, subject %q", p.work, p.dead, p.bands[0])
	}
	if q := namesFor("books:requests_p2", 5, 0); q.work == p.work {
		t.Errorf("queue books:requests_p2 has partition 2's stream %q", q.work)
	}
}

// TestUnescape: unescape gives back what escape made, and refuses a name
// escape shortened with a hash and what escape never makes.
func TestUnescape(t *testing.T) {
	for _, s := range []string{"", "w-1", "host.example-4242-ab12", "A_b:c d", "a\xdeadb", "é"} {
		if got, ok := unescape(escape(s)); !ok || got != s {
			t.Errorf("unescape(escape(%q)) = %q, %v", s, got, ok)
		}
	}
	long := strings.Repeat("x.", 100)
	for _, tok := range []string{escape(long), "a_", "a_4", "a_zz", "a_4A", "a_+1"} {
		if got, ok := unescape(tok); ok {
			t.Errorf("unescape(%q) = %q, true; want false", tok, got)
		}
	}
}
