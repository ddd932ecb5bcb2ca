package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/trawlhq/trawl/engine"
)

// encodeHint says how to write a password that breaks a URL: generated
// secrets often hold these characters.
const encodeHint = "a user or password holding / # ? @ % , or a space must be percent-encoded (/ as %2F, # as %23, ? as %3F, @ as %40, % as %25, , as %2C, space as %20)"

// checkURLs checks the URL (or the comma-separated URLs, for NATS and
// RabbitMQ) of a flag. Its errors never print the user information of a
// URL that does not parse, which may hold the password (or a part of it,
// when a password's "/" or "#" made the parser end the host early), and
// say what to fix.
func checkURLs(flag, value string, schemes []string) error {
	if value == "" {
		return nil
	}
	list := []string{value}
	if flag == "--nats-url" || flag == "--amqp-url" {
		list = strings.Split(value, ",")
	}
	hasAt := strings.Contains(value, "@")
	for i, raw := range list {
		raw = strings.TrimSpace(raw)
		nth := ""
		if len(list) > 1 {
			nth = fmt.Sprintf(" (URL %d of %d)", i+1, len(list))
		}
		u, err := parseURL(raw)
		if err != nil {
			if hasAt && !strings.Contains(err.Error(), encodeHint) {
				err = fmt.Errorf("%w; %s", err, encodeHint)
			}
			return fmt.Errorf("%s %s%s: %w", flag, shownURL(raw, hasAt), nth, err)
		}
		if !slices.Contains(schemes, u.Scheme) || (u.Host == "" && u.Scheme != "unix") {
			return fmt.Errorf("%s %s%s: want scheme://host:port with scheme %s", flag, u.Redacted(), nth, strings.Join(schemes, ", "))
		}
	}
	return nil
}

// errBadURL is the error of a URL that does not parse, or that parses as
// something else than was meant (a password's "/" ending the host).
var errBadURL = errors.New("not a valid URL")

// parseURL parses raw, a URL that may hold a password. Its error says why
// in words of its own, never with a part of raw: url.Parse's errors quote
// the part that failed, which may be the password.
func parseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", errBadURL, badURLReason(raw, err))
	}
	if u.User == nil && atAfterHost(raw) {
		// "redis://bob:12/x@host": the host parsed as bob, port 12, and
		// the rest of the password and the real host as the path.
		return nil, fmt.Errorf("%w: an @ after the host (write an @ of a path as %%40); %s", errBadURL, encodeHint)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%w: port %s: want 1 to 65535", errBadURL, p)
		}
	}
	return u, nil
}

// badURLReason says why raw did not parse, and what to do.
func badURLReason(raw string, err error) string {
	why := "malformed"
	var ue *url.Error
	if errors.As(err, &ue) {
		switch msg := ue.Err.Error(); {
		case strings.HasPrefix(msg, "invalid port"):
			why = "invalid port"
		case strings.HasPrefix(msg, "invalid URL escape"):
			why = "invalid %-escape"
		case strings.Contains(msg, "invalid character"), strings.Contains(msg, "invalid userinfo"):
			why = "invalid character"
		case strings.Contains(msg, "missing ']'"):
			why = "an IPv6 host without its closing ]"
		}
	}
	host := raw
	if _, rest, ok := strings.Cut(raw, "://"); ok {
		host = rest
	}
	host = host[strings.LastIndexByte(host, '@')+1:]
	if end := strings.IndexAny(host, "/?#"); end >= 0 {
		host = host[:end]
	}
	if strings.Count(host, ":") > 1 && !strings.HasPrefix(host, "[") {
		return why + ": an IPv6 host goes in brackets, as in [::1]:6379"
	}
	if strings.Contains(raw, "@") || strings.Contains(raw, "%") || strings.Contains(raw, " ") {
		return why + "; " + encodeHint
	}
	return why
}

// atAfterHost tells whether raw, which parsed without user information,
// has an "@" in its first path segment or, with no path, in its query or
// fragment: where a password with "/", "?" or "#" puts the real host.
// "https://host/@user" and "https://host/p?mail=a@b" are left alone.
func atAfterHost(raw string) bool {
	_, rest, ok := strings.Cut(raw, "//")
	if !ok {
		return false
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		return false
	}
	rest = rest[end:]
	if rest[0] == '/' {
		rest = rest[1:]
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			rest = rest[:i]
		}
		return strings.IndexByte(rest, '@') > 0
	}
	return strings.Contains(rest, "@")
}

// shownURL is raw, a URL that did not parse, as an error may show it: its
// scheme and what follows its last "@", never what precedes it. When the
// flag's whole value holds an "@" (hasAt) and raw none, raw may be a
// piece of a password cut at a comma: only its scheme is shown.
func shownURL(raw string, hasAt bool) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		if hasAt {
			return "(hidden: it may hold a password)"
		}
		return strconv.Quote(raw)
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		return scheme + "://xxxxx@" + rest[i+1:]
	}
	if hasAt {
		return scheme + "://…"
	}
	return raw
}

// parseStartURL parses arg, a start URL or its JSON, as
// engine.ParseStartURL does, and refuses, as a usage error that prints no
// password, a URL that parses as something else than was meant.
func parseStartURL(arg string) (engine.StartURL, error) {
	s, err := engine.ParseStartURL([]byte(arg))
	if err != nil {
		return s, startURLError(arg, err)
	}
	raw := startURLText(arg)
	if _, err := parseURL(raw); err != nil {
		return s, usageError("bad start URL %s: %v", shownURL(raw, false), err)
	}
	return s, nil
}

// startURLText is the URL of arg, a start URL or its JSON.
func startURLText(arg string) string {
	raw := strings.TrimSpace(arg)
	if strings.HasPrefix(raw, "{") {
		var v struct {
			URL string `json:"url"`
		}
		if json.Unmarshal([]byte(raw), &v) == nil {
			return v.URL
		}
	}
	return raw
}

// startURLError is the usage error of arg, a start URL (or its JSON) that
// engine.ParseStartURL refused with err: it says why without printing the
// URL's password, which err may quote when the URL does not parse.
func startURLError(arg string, err error) error {
	want := "want an absolute http or https URL, or JSON {\"url\": ...}"
	raw := strings.TrimSpace(arg)
	if strings.HasPrefix(raw, "{") {
		want = `JSON {"url": "http…", "meta": {"name": "value"}, "priority": N, "headers": {"Name": "value"}}`
		var v struct {
			URL string `json:"url"`
		}
		if jerr := json.Unmarshal([]byte(raw), &v); jerr != nil {
			return usageError("bad start URL: not valid JSON (%s): %v", want, jerr)
		}
		raw = v.URL
	}
	u, perr := parseURL(raw)
	if perr != nil {
		return usageError("bad start URL %s: %v", shownURL(raw, false), perr)
	}
	msg := strings.TrimPrefix(err.Error(), engine.ErrBadPayload.Error()+": ")
	shown := raw // as given: Redacted escapes it ("not a url" as not%20a%20url)
	if u.User != nil {
		shown = u.Redacted()
	}
	return usageError("bad start URL %s: %s (%s)", strconv.Quote(shown), hidePassword(msg, u), want)
}

// hidePassword replaces u's password in msg, whatever quotes or escapes
// surround it, by xxxxx.
func hidePassword(msg string, u *url.URL) string {
	msg = engine.Redact(msg)
	if u.User == nil {
		return msg
	}
	if p, ok := u.User.Password(); ok && p != "" {
		msg = strings.ReplaceAll(msg, p, "xxxxx")
		msg = strings.ReplaceAll(msg, url.PathEscape(p), "xxxxx")
		msg = strings.ReplaceAll(msg, url.QueryEscape(p), "xxxxx")
	}
	return msg
}
