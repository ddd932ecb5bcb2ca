package rediskey

import "testing"

func TestKeys(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Crawl("books", "start_urls"), "{books}:start_urls"},
		{Crawl("books", "start_urls:dead"), "{books}:start_urls:dead"},
		{Crawl("books", ""), "{books}"},
		{Of("books:requests"), "{books}:requests"},
		{Of("a:b:requests"), "{a:b}:requests"},
		{Of("jobs"), "{jobs}"},
		{Of("books:dupefilter"), "{books}:dupefilter"},
		{Pattern("books"), "{books}:*"},
		{Pattern(`a*b?[c]\`), `{a\*b\?\[c\]\\}:*`},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
