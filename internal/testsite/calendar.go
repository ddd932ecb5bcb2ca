package testsite

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// CalendarStart is the month /calendar/ links to.
const CalendarStart = "/calendar/2026/1"

// calendarMaxYear bounds the years the calendar serves: far beyond any
// crawl (one month a link), but a finite key space.
const calendarMaxYear = 1_000_000

// serveCalendar serves the infinite calendar under /calendar/ and counts
// its requests apart from the rest of the site, so Verify of a crawl from
// / is unaffected. Every month links to the months before and after it and
// to its event days (the 1st and the 15th), which link back to it: a
// crawler without a depth or page limit never finishes it.
func (s *Site) serveCalendar(w http.ResponseWriter, r *http.Request) {
	key := canonicalKey(r.URL)
	s.mu.Lock()
	s.calHits[key]++
	s.mu.Unlock()
	if s.latency > 0 && !wait(r.Context(), s.latency) {
		return
	}
	parts := strings.Split(strings.Trim(strings.TrimPrefix(key, "/calendar"), "/"), "/")
	if key == "/calendar/" || key == "/calendar" {
		parts = nil
	}
	var nums []int
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || strconv.Itoa(n) != p {
			serveText(w, http.StatusNotFound, ctText, "404 not found\n")
			return
		}
		nums = append(nums, n)
	}
	var b strings.Builder
	b.WriteString("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Calendar</title></head><body>\n")
	link := func(t time.Time, day bool, text string) {
		if t.Year() < 1 || t.Year() > calendarMaxYear {
			return
		}
		if day {
			fmt.Fprintf(&b, "<a href=\"/calendar/%d/%d/%d\">%s</a>\n", t.Year(), int(t.Month()), t.Day(), text)
		} else {
			fmt.Fprintf(&b, "<a href=\"/calendar/%d/%d\">%s</a>\n", t.Year(), int(t.Month()), text)
		}
	}
	switch len(nums) {
	case 0:
		fmt.Fprintf(&b, "<h1>Calendar</h1><a href=\"%s\">January 2026</a>\n", CalendarStart)
	case 2:
		y, m := nums[0], nums[1]
		if m > 12 || y > calendarMaxYear {
			serveText(w, http.StatusNotFound, ctText, "404 not found\n")
			return
		}
		t := time.Date(y, time.Month(m), 1, 0, 0, 0, 0, time.UTC)
		fmt.Fprintf(&b, "<h1>%s %d</h1>\n", t.Month(), y)
		link(t.AddDate(0, -1, 0), false, "previous month")
		link(t.AddDate(0, 1, 0), false, "next month")
		link(t, true, "1")
		link(t.AddDate(0, 0, 14), true, "15")
	case 3:
		y, m, d := nums[0], nums[1], nums[2]
		t := time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC)
		if m > 12 || y > calendarMaxYear || t.Day() != d {
			serveText(w, http.StatusNotFound, ctText, "404 not found\n")
			return
		}
		fmt.Fprintf(&b, "<h1>%s</h1><p>No events.</p>\n", t.Format("2 January 2006"))
		link(t, false, "month")
	default:
		serveText(w, http.StatusNotFound, ctText, "404 not found\n")
		return
	}
	b.WriteString("</body></html>\n")
	writeHTML(w, []byte(b.String()))
}

// CalendarServed returns how often each path under /calendar/ was
// requested since New or Reset. Calendar requests are not counted by
// Served.
func (s *Site) CalendarServed() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.calHits))
	for k, n := range s.calHits {
		m[k] = n
	}
	return m
}
