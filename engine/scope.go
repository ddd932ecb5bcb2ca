package engine

import (
	"net/url"
	"strings"

	"github.com/trawlhq/trawl/internal/linkscan"
)

// scope decides which discovered URLs a crawl follows: allowed domains
// (and their subdomains), depth, include and exclude patterns.
type scope struct {
	cfg *compiled

	domains map[string]bool // lower-case hostnames without port; read-only
}

func newScope(cfg *compiled) *scope {
	s := &scope{cfg: cfg, domains: make(map[string]bool)}
	for _, d := range cfg.AllowedDomains {
		s.domains[strings.ToLower(strings.TrimPrefix(d, "."))] = true
	}
	return s
}

// domainAllowed reports whether host is an allowed domain or a subdomain of
// one: of Config.AllowedDomains if set, else of origin (a request's Scope).
func (s *scope) domainAllowed(host, origin string) bool {
	if len(s.domains) == 0 && host == origin && host != "" {
		return true // most links: to their page's host (the loop's first answer, without lower-casing)
	}
	host = strings.ToLower(host)
	origin = strings.ToLower(origin)
	for h := host; h != ""; {
		if len(s.domains) > 0 && s.domains[h] || len(s.domains) == 0 && h == origin {
			return true
		}
		i := strings.IndexByte(h, '.')
		if i < 0 {
			break
		}
		h = h[i+1:]
	}
	return false
}

// outcome of a scope check, for stats.
type verdict int

const (
	inScope verdict = iota
	offsite
	tooDeep
	excluded
	tooLong // over MaxURLLength
)

// check says whether link lk, whose String() is str (the URL published for
// it), at depth, found on a page of scope origin, is to be followed.
func (s *scope) check(lk *linkscan.Link, str string, depth int, origin string) verdict {
	if sc := lk.Scheme(); sc != "http" && sc != "https" {
		return excluded
	}
	if len(str) > MaxURLLength {
		return tooLong
	}
	if !s.domainAllowed(hostname(lk.Host()), origin) {
		return offsite
	}
	if s.cfg.MaxDepth > 0 && depth > s.cfg.MaxDepth {
		return tooDeep
	}
	if len(s.cfg.include) > 0 {
		ok := false
		for _, re := range s.cfg.include {
			if re.MatchString(str) {
				ok = true
				break
			}
		}
		if !ok {
			return excluded
		}
	}
	for _, re := range s.cfg.exclude {
		if re.MatchString(str) {
			return excluded
		}
	}
	return inScope
}

// hostname is url.URL.Hostname of a URL whose Host is host: without
// port, and without the brackets of an IPv6 literal.
func hostname(host string) string {
	return (&url.URL{Host: host}).Hostname()
}
