package main

import (
	"fmt"
	"net"
	"strings"

	"github.com/trawlhq/trawl/internal/header"
)

// checkValues validates flags whose bad values would otherwise fail late
// (at fetch time), or be taken for something else: --name, --user-agent,
// --allow-domain, --metrics-addr.
func (o *options) checkValues() []error {
	var errs []error
	if strings.ContainsAny(o.name, `/\`) || o.name == "." || o.name == ".." {
		// It names the data directory .trawl/NAME: ../x would be outside.
		errs = append(errs, fmt.Errorf("--name %q: want a name without / or \\, not . or .. (it names the folder .trawl/NAME and the broker's keys)", o.name))
	}
	if _, _, err := header.Parse("User-Agent: " + o.userAgent); err != nil || o.userAgent == "" || o.userAgent != strings.TrimSpace(o.userAgent) {
		errs = append(errs, fmt.Errorf("--user-agent %q: want one line of text, not empty, without control characters (CR, LF)", o.userAgent))
	}
	for _, d := range o.allowDomains {
		if !validDomain(d) {
			errs = append(errs, fmt.Errorf("--allow-domain %q: want a domain name such as example.com, which allows its subdomains too (no scheme, path, port or wildcard)", d))
		}
	}
	if o.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(o.metricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-addr %q: want HOST:PORT, such as 127.0.0.1:9090", o.metricsAddr))
		}
	}
	return errs
}

// validDomain tells whether d is a host name or an IP address: labels of
// letters (any script), digits, - and _, separated by dots.
func validDomain(d string) bool {
	if net.ParseIP(d) != nil {
		return true
	}
	d = strings.TrimSuffix(d, ".")
	if d == "" {
		return false
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" {
			return false
		}
		for _, r := range label {
			if r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r > 0x7f {
				continue
			}
			return false
		}
	}
	return true
}

// everyInterface tells whether addr, a valid HOST:PORT, listens on every
// interface: no host, or an unspecified address (0.0.0.0, ::).
func everyInterface(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}
