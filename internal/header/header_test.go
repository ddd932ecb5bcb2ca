package header

import "testing"

// TestParse: --header lines parse, the name made canonical and both sides
// trimmed, or are refused with a reason.
func TestParse(t *testing.T) {
	for line, want := range map[string][2]string{
		"X-Test: yes":               {"X-Test", "yes"},
		"accept-language:  fr, en ": {"Accept-Language", "fr, en"},
		"Authorization: Bearer a:b": {"Authorization", "Bearer a:b"},
		"X-Empty:":                  {"X-Empty", ""},
	} {
		n, v, err := Parse(line)
		if err != nil || n != want[0] || v != want[1] {
			t.Errorf("Parse(%q) = %q, %q, %v; want %q", line, n, v, err, want)
		}
	}
	for _, bad := range []string{"no colon", ": no name", "Bad Name: x", "X-A: a\nX-B: b", "X-A: a\rb", "accept-encoding: gzip"} {
		if _, _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
