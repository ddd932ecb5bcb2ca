package main

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/pflag"

	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/header"
)

// session are the flags of how requests are sent: headers, cookies, proxy
// and timeout.
type session struct {
	headers   []string
	noCookies bool
	proxy     string
	timeout   time.Duration
}

func (s *session) addFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&s.headers, "header", nil, `header "Name: value" sent with every request, robots.txt included (repeat the flag for more)`)
	fs.BoolVar(&s.noCookies, "no-cookies", false, "do not keep cookies (by default each worker keeps the cookies sites set, per host, as a browser does)")
	fs.StringVar(&s.proxy, "proxy", "", "proxy URL for every request (http://, https:// or socks5://, user:password allowed; default: HTTP_PROXY, HTTPS_PROXY and NO_PROXY)")
	fs.DurationVar(&s.timeout, "timeout", 30*time.Second, "time limit of each request, body included")
}

// check validates the flags.
func (s *session) check() []error {
	var errs []error
	for _, h := range s.headers {
		if _, _, err := header.Parse(h); err != nil {
			errs = append(errs, fmt.Errorf("--header: %w", err))
		}
	}
	if err := checkURLs("--proxy", s.proxy, []string{"http", "https", "socks5", "socks5h"}); err != nil {
		errs = append(errs, err)
	}
	if s.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %v: want a positive duration", s.timeout))
	}
	return errs
}

// apply sets the fetch options of the flags (checked already).
func (s *session) apply(fo *engine.FetchConfig) {
	for _, line := range s.headers {
		name, value, _ := header.Parse(line)
		if fo.Header == nil {
			fo.Header = make(http.Header)
		}
		fo.Header.Add(name, value)
	}
	fo.NoCookies = s.noCookies
	if s.proxy != "" {
		fo.Proxy, _ = url.Parse(s.proxy)
	}
	fo.Timeout = s.timeout
}
