package redislayout

import (
	"fmt"
	"testing"
)

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
		{HostKeys("books", "a.example:8080").Slots, "{books}:host:a.example:8080:slots"},
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
	moving, dead := RepartitionQueues("c:requests")
	rq, rd := QueueKeys(moving), QueueKeys(dead)
	for key, part := range map[string]string{
		rq.Ready: "requests~repartition*", rq.Inflight: "requests~repartition*:inflight", rq.Delayed: "requests~repartition*:delayed",
		rq.Dead: "requests~repartition*:dead", rq.Notify: "requests~repartition*:notify", rq.Seq: "requests~repartition*:seq",
		rd.Ready: "requests~repartition*", rd.Inflight: "requests~repartition*:inflight", rd.Dead: "requests~repartition*:dead",
		rd.Seq:  "requests~repartition*:seq",
		q.Ready: "requests", q.Inflight: "requests:inflight", q.Delayed: "requests:delayed",
		q.Dead: "requests:dead", q.Notify: "requests:notify", q.Seq: "requests:seq",
		s.List: "start_urls", s.Dead: "start_urls:dead",
		Items("c"): "items", Stats("c"): "stats", Meta("c"): "meta", Workers("c"): "workers",
		h.Slots: "host:*:slots", h.Next: "host:*:next", h.Throttle: "host:*:throttle", h.Want: "host:*:want",
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
		"{c}:requests~repartitionx", "{c}:requests~repartition-deadx:inflight", "{c}:requests~repartition:x",
		"{c}:requests~repartition:dead:x", "{c}:requests~", "{c#5.1}:requests~repartition",
	} {
		if k, ok := Match("c", key); ok {
			t.Errorf("Match(%q) = %q; want no entry", key, k.Part)
		}
	}
}

// TestPartitions checks the partitions' tags: one partition keeps the
// crawl's names, the slots are Redis's (CLUSTER KEYSLOT), and the tags of
// N partitions fall one in each N-th of the slots, so that a Cluster of
// three primaries with equal slot ranges serves four of twelve each.
func TestPartitions(t *testing.T) {
	for key, want := range map[string]uint16{"foo": 12182, "123456789": 12739, "a{foo}b": 12182} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if q := PartitionQueueKeys("books:requests", 0, 1); q != QueueKeys("books:requests") {
		t.Errorf("one partition: %+v, want today's keys", q)
	}
	if f := PartitionFilterKeys(FilterName("books"), 0, 1); f != FilterKeys(FilterName("books")) {
		t.Errorf("one partition's filter: %+v, want today's keys", f)
	}
	for _, tc := range []struct{ got, want string }{
		{PartitionTag("books", 3, 12), "books#3.43"},
		{PartitionQueueKeys("books:requests", 3, 12).Dead, "{books#3.43}:requests:dead"},
		{PartitionFilterKeys(FilterName("books"), 3, 12).Shard(31), "{books#3.43}:dupefilter:1f"},
		{PartitionFilterKeys(FilterName("books"), 3, 12).Meta, "{books}:dupefilter:meta"},
		{PartitionPattern(`a*b`), `{a\*b#*}:*`},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	for _, n := range []int{2, 3, 8, 12, 256} {
		masters := map[int]int{}
		for p := range n {
			slot := int(Slot(PartitionTag("c", p, n)))
			if slot*n/16384 != p {
				t.Errorf("partition %d of %d: slot %d, not in its %d-th of the slots", p, n, slot, p)
			}
			masters[slot*3/16384]++
		}
		if n == 12 && (masters[0] != 4 || masters[1] != 4 || masters[2] != 4) {
			t.Errorf("12 partitions over 3 equal slot ranges: %v, want 4 each", masters)
		}
	}
	q, f := PartitionQueueKeys("c:requests", 5, 8), PartitionFilterKeys(FilterName("c"), 5, 8)
	for key, part := range map[string]string{q.Ready: "requests", q.Inflight: "requests:inflight", q.Seq: "requests:seq",
		f.Shard(0xab): "dupefilter:*", f.BloomPart(1): "dupefilter:bloom:*"} {
		if k, ok := Match("c", key); !ok || k.Part != part || !k.Partitioned {
			t.Errorf("Match(%q) = %+v, %v; want %q", key, k, ok, part)
		}
	}
	for _, key := range []string{"{c#5.1}:items", "{c#5.1}:dupefilter:meta", "{c#5}:requests", "{c#x.1}:requests", "{c#5.1x}:requests", "{cc#5.1}:requests"} {
		if k, ok := Match("c", key); ok {
			t.Errorf("Match(%q) = %q; want no entry", key, k.Part)
		}
	}
}

// TestRetired checks which partitions a change of count leaves behind: a
// count of one is the crawl's own tag, which no larger count uses; a
// partition whose tag the new count shares stays.
func TestRetired(t *testing.T) {
	for _, tc := range []struct {
		from, to int
		want     string
	}{
		{1, 4, "[0]"}, {4, 1, "[0 1 2 3]"}, {4, 4, "[]"}, {1, 1, "[]"}, {1, 0, "[0]"}, {3, 0, "[0 1 2]"},
	} {
		if got := fmt.Sprint(Retired("c:requests", tc.from, tc.to)); got != tc.want {
			t.Errorf("Retired(%d to %d) = %s, want %s", tc.from, tc.to, got, tc.want)
		}
	}
	for _, counts := range [][2]int{{4, 8}, {8, 4}, {2, 12}, {12, 3}} {
		from, to := counts[0], counts[1]
		retired := map[int]bool{}
		for _, p := range Retired("c:dupefilter", from, to) {
			retired[p] = true
		}
		used := map[string]bool{}
		for q := range to {
			used[PartitionTag("c", q, to)] = true
		}
		for p := range from {
			if shared := used[PartitionTag("c", p, from)]; shared == retired[p] {
				t.Errorf("%d to %d: partition %d's tag shared %v, retired %v", from, to, p, shared, retired[p])
			}
		}
	}
}
