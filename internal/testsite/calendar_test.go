package testsite

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCalendar checks the calendar's links and that its requests are
// counted apart from Served and Verify.
func TestCalendar(t *testing.T) {
	s := New(Config{Pages: 10})
	get := func(path string) (int, string) {
		t.Helper()
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		b, _ := io.ReadAll(w.Result().Body)
		return w.Code, string(b)
	}
	code, body := get("/calendar/")
	if code != 200 || !strings.Contains(body, `href="`+CalendarStart+`"`) {
		t.Errorf("/calendar/: %d %q", code, body)
	}
	code, body = get("/calendar/2026/1")
	for _, want := range []string{"/calendar/2025/12", "/calendar/2026/2", "/calendar/2026/1/1", "/calendar/2026/1/15"} {
		if code != 200 || !strings.Contains(body, `href="`+want+`"`) {
			t.Errorf("/calendar/2026/1 (%d) has no link to %s", code, want)
		}
	}
	if _, body = get("/calendar/1/1"); strings.Contains(body, `"/calendar/0/12"`) {
		t.Error("year 0 linked")
	}
	if code, body = get("/calendar/2026/1/15"); code != 200 || !strings.Contains(body, `href="/calendar/2026/1"`) {
		t.Errorf("/calendar/2026/1/15: %d %q", code, body)
	}
	for _, bad := range []string{"/calendar/2026/13", "/calendar/2026/2/30", "/calendar/x", "/calendar/2026/01", "/calendar/1/2/3/4"} {
		if code, _ := get(bad); code != 404 {
			t.Errorf("%s: %d, want 404", bad, code)
		}
	}
	if n := s.CalendarServed()["/calendar/2026/1"]; n != 1 {
		t.Errorf("CalendarServed /calendar/2026/1 = %d", n)
	}
	if len(s.Served()) != 0 {
		t.Errorf("calendar requests counted by Served: %v", s.Served())
	}
	if err := s.VerifyPartial(); err != nil {
		t.Errorf("VerifyPartial after calendar requests: %v", err)
	}
}
