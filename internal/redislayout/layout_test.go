package redislayout

import "testing"

func TestKeys(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Crawl("books", "start_urls"), "{books}:start_urls"},
		{Crawl("books", ""), "{books}"},
		{Of("books:requests"), "{books}:requests"},
		{Of("a:b:requests"), "{a:b}:requests"},
		{Of("jobs"), "{jobs}"},
		{Pattern("books"), "{books}:*"},
		{Pattern(`a*b?[c]\`), `{a\*b\?\[c\]\\}:*`},
		{QueueKeys("books:requests").Dead, "{books}:requests:dead"},
		{StartKeys("books").Dead, "{books}:start_urls:dead"},
		{HostKeys("books", "a.example:8080").Lease, "{books}:host:a.example:8080:lease"},
		{Robots("books", "https://a.example:8443"), "{books}:robots:https:a.example:8443"},
		{FilterKeys(FilterName("books")).Meta, "{books}:dupefilter:meta"},
		{FilterKeys(FilterName("books")).Shard(31), "{books}:dupefilter:1f"},
		{FilterKeys(FilterName("books")).BloomPart(2), "{books}:dupefilter:bloom:2"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestMatch checks that every key the constructors build is in the layout
// with the right entry, and that keys beside it are not.
func TestMatch(t *testing.T) {
	q, s, h, f := QueueKeys("c:requests"), StartKeys("c"), HostKeys("c", "h.example:80"), FilterKeys(FilterName("c"))
	for key, part := range map[string]string{
		q.Ready: "requests", q.Inflight: "requests:inflight", q.Delayed: "requests:delayed",
		q.Dead: "requests:dead", q.Notify: "requests:notify", q.Seq: "requests:seq",
		s.List: "start_urls", s.Dead: "start_urls:dead",
		Items("c"): "items", Stats("c"): "stats", Meta("c"): "meta", Workers("c"): "workers",
		h.Lease: "host:*:lease", h.Next: "host:*:next", h.Throttle: "host:*:throttle", h.Want: "host:*:want",
		Robots("c", "https://h.example:8443"): "robots:*",
		f.Meta:                                "dupefilter:meta", f.Shard(0xab): "dupefilter:*", f.BloomPart(3): "dupefilter:bloom:*",
	} {
		k, ok := Match("c", key)
		if !ok || k.Part != part {
			t.Errorf("Match(%q) = %q, %v; want %q", key, k.Part, ok, part)
		}
	}
	for _, key := range []string{
		"{c}:mine", "{c}", "{c}:dupefilter:zz", "{cc}:items", "{c}:items:x", "c:start_urls",
		"{c}:requests:dead:x", "{d}:requests", "{c}:start_urls:taken", "{c}:start_urls:leased",
	} {
		if k, ok := Match("c", key); ok {
			t.Errorf("Match(%q) = %q; want no entry", key, k.Part)
		}
	}
}
