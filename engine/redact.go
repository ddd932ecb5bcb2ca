package engine

import (
	"net/url"
	"regexp"
	"strings"
)

// userinfo matches the user information of URLs written in free text:
// the scheme, then everything up to the last "@" before the host ends.
var userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)([^/?#\s"'<>]*)@`)

// Redact replaces the password of every URL in s with "xxxxx", as
// url.URL.Redacted does, whether or not the URL parses: a message about a
// malformed URL must not print its password either.
func Redact(s string) string {
	if !strings.Contains(s, "@") {
		return s // no user information: the common case, without a regexp
	}
	return userinfo.ReplaceAllStringFunc(s, func(m string) string {
		sub := userinfo.FindStringSubmatch(m)
		scheme, info := sub[1], sub[2]
		for i := 0; i < len(info); i++ {
			if info[i] == ':' {
				return scheme + info[:i] + ":xxxxx@"
			}
		}
		return m // a user name alone is no secret
	})
}

// StripCredentials returns u without its user information, for items:
// a page's identity does not include the credentials used to fetch it.
func StripCredentials(u *url.URL) string {
	if u.User == nil {
		return u.String()
	}
	v := *u
	v.User = nil
	return v.String()
}

// redactedError is an error whose message has its URLs' passwords
// redacted; errors.Is and As still see the original.
type redactedError struct{ err error }

func (e redactedError) Error() string { return Redact(e.err.Error()) }
func (e redactedError) Unwrap() error { return e.err }

// redactErr wraps err so that its message names no password.
func redactErr(err error) error {
	if err == nil {
		return nil
	}
	return redactedError{err}
}
