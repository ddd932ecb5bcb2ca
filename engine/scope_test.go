package engine

import "testing"

// TestDomainAllowed: a host is in scope if it is the origin or a
// subdomain of it, in any case, unless allowed domains are set, which
// then decide alone (the origin's own host included).
func TestDomainAllowed(t *testing.T) {
	for _, tc := range []struct {
		allowed      []string
		host, origin string
		want         bool
	}{
		{nil, "example.com", "example.com", true},
		{nil, "Example.COM", "example.com", true},
		{nil, "example.com", "EXAMPLE.com", true},
		{nil, "a.b.example.com", "example.com", true},
		{nil, "notexample.com", "example.com", false},
		{nil, "example.com", "a.example.com", false},
		{nil, "", "", false}, // no host: never in scope
		{[]string{"other.org"}, "example.com", "example.com", false},
		{[]string{"other.org"}, "x.Other.org", "example.com", true},
		{[]string{".example.com"}, "example.com", "other.org", true},
	} {
		cc, err := Config{Name: "scope", AllowedDomains: tc.allowed}.compile()
		if err != nil {
			t.Fatal(err)
		}
		if got := newScope(cc).domainAllowed(tc.host, tc.origin); got != tc.want {
			t.Errorf("allowed %q: domainAllowed(%q, %q) = %v, want %v", tc.allowed, tc.host, tc.origin, got, tc.want)
		}
	}
}
