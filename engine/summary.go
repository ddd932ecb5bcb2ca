package engine

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Summary is what a crawl (or one worker of it) did, read from its
// counters: the one source of truth for every report of a crawl.
type Summary struct {
	Pages           int64            // responses received (StatResponses)
	Items           int64            // items written (StatItems)
	Errors          int64            // pages lost to errors (StatErrors)
	ErrorKinds      map[string]int64 // Errors by kind (StatErrorKindPrefix)
	Retries         int64            // retries scheduled (StatRetries)
	DeadLetters     int64            // StatDeadLetters: this worker's; trawl shows the crawl's, as its broker counts them
	Filtered        int64            // duplicates filtered (StatFiltered)
	RobotsForbidden int64            // StatRobotsForbidden
	StartURLs       int64            // start URLs taken (StatStartURLs)
	Requests        int64            // fetches started (StatRequests)
	Statuses        map[int]int64    // responses by status code
	Elapsed         time.Duration
}

// Summarize builds a Summary from a Stats snapshot.
func Summarize(snapshot map[string]int64, elapsed time.Duration) Summary {
	s := Summary{
		Pages: snapshot[StatResponses], Items: snapshot[StatItems], Errors: snapshot[StatErrors], Retries: snapshot[StatRetries],
		DeadLetters: snapshot[StatDeadLetters], Filtered: snapshot[StatFiltered],
		RobotsForbidden: snapshot[StatRobotsForbidden], StartURLs: snapshot[StatStartURLs],
		Requests: snapshot[StatRequests], Elapsed: elapsed,
		ErrorKinds: map[string]int64{}, Statuses: map[int]int64{},
	}
	for k, v := range snapshot {
		if kind, ok := strings.CutPrefix(k, StatErrorKindPrefix); ok && v > 0 {
			s.ErrorKinds[kind] = v
		}
		if code, ok := strings.CutPrefix(k, StatStatusPrefix); ok && v > 0 {
			if n, err := strconv.Atoi(code); err == nil {
				s.Statuses[n] = v
			}
		}
	}
	return s
}

// Rate is pages per second over Elapsed.
func (s Summary) Rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Pages) / s.Elapsed.Seconds()
}

// String is the summary on one line, for example
// "12 pages fetched, 11 items written, 1 error (fetch 1), 3 retries,
// 0 dead letters, 40 duplicates filtered, 1.2s, 10.0 pages/s".
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s fetched, %d %s written, %d %s", s.Pages, plural(s.Pages, "page"),
		s.Items, plural(s.Items, "item"), s.Errors, plural(s.Errors, "error"))
	if len(s.ErrorKinds) > 0 {
		kinds := make([]string, 0, len(s.ErrorKinds))
		for k := range s.ErrorKinds {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for i, k := range kinds {
			kinds[i] = fmt.Sprintf("%s %d", k, s.ErrorKinds[k])
		}
		fmt.Fprintf(&b, " (%s)", strings.Join(kinds, ", "))
	}
	retries := "retries"
	if s.Retries == 1 {
		retries = "retry"
	}
	fmt.Fprintf(&b, ", %d %s, %d dead %s, %d %s filtered, %s, %.1f pages/s", s.Retries, retries,
		s.DeadLetters, plural(s.DeadLetters, "letter"), s.Filtered, plural(s.Filtered, "duplicate"),
		s.Elapsed.Round(time.Millisecond), s.Rate())
	return b.String()
}

// Empty explains, for a person, why a crawl wrote no item; it returns ""
// when the crawl wrote items.
func (s Summary) Empty() string {
	if s.Items > 0 {
		return ""
	}
	if why := s.idle(); why != "" {
		return why
	}
	var parts []string
	if len(s.Statuses) > 0 {
		parts = append(parts, s.statuses())
	}
	if s.RobotsForbidden > 0 {
		parts = append(parts, fmt.Sprintf("%d disallowed by robots.txt", s.RobotsForbidden))
	}
	if s.Errors > 0 {
		parts = append(parts, fmt.Sprintf("%d %s", s.Errors, plural(s.Errors, "error")))
	}
	if len(parts) == 0 {
		return "no page produced an item"
	}
	return strings.Join(parts, "; ")
}

// idle explains a crawl that fetched nothing and lost nothing: it had
// nothing to do, or robots.txt disallowed all it had. It returns "" for
// any other crawl.
func (s Summary) idle() string {
	if s.Pages != 0 || s.Errors != 0 {
		return ""
	}
	switch {
	case s.Requests == 0 && s.RobotsForbidden == 0 && s.StartURLs > 0 && s.Filtered > 0:
		return "already crawled: nothing to do (use --flush to start again)"
	case s.Requests == 0 && s.RobotsForbidden == 0:
		return "nothing to do: no start URL and an empty frontier"
	case s.RobotsForbidden == 1:
		return "the start URL is disallowed by robots.txt"
	case s.RobotsForbidden > 1:
		return fmt.Sprintf("%d URLs disallowed by robots.txt", s.RobotsForbidden)
	}
	return ""
}

// statuses describes the statuses of a crawl whose pages answered none
// with 2xx.
func (s Summary) statuses() string {
	codes := make([]int, 0, len(s.Statuses))
	for c := range s.Statuses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	if s.Pages == 1 && len(codes) == 1 {
		return fmt.Sprintf("the start URL answered %d %s", codes[0], http.StatusText(codes[0]))
	}
	desc := make([]string, len(codes))
	for i, c := range codes {
		desc[i] = fmt.Sprintf("%d %s ×%d", c, http.StatusText(c), s.Statuses[c])
	}
	return "no page answered 2xx: " + strings.Join(desc, ", ")
}

func plural(n int64, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
