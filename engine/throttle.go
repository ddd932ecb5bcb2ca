package engine

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Defaults of AutoThrottle.
const (
	// DefaultThrottleStartDelay is AutoThrottle.StartDelay's default.
	// Scrapy starts at 5s; trawl starts at 1s, since the first response
	// of a host sets its delay to at least that response's latency
	// anyway, and 5s makes the second request to every host of a wide
	// crawl wait for nothing.
	DefaultThrottleStartDelay = time.Second
	// DefaultThrottleMaxDelay is AutoThrottle.MaxDelay's default.
	DefaultThrottleMaxDelay = time.Minute
)

// AutoThrottle adapts each host's delay between request starts to the
// host's latency, like Scrapy's AutoThrottle: aiming at TargetConcurrency
// requests in progress per host, a response that took latency L moves the
// delay d to max(L/TargetConcurrency, (d + L/TargetConcurrency)/2) (up at
// once, down by halves), kept within [the minimum delay, MaxDelay]. The
// minimum delay is Config.Delay or the host's robots.txt Crawl-delay,
// whichever is larger: the adapted delay never goes below it (even when
// it exceeds MaxDelay). A response with a status outside 2xx never
// lowers the delay (error pages are small and fast). Latency is the time
// from sending a request to its response headers (Response.Latency). The
// per-host cap (Config.PerHost) still applies.
//
// The zero value gives the defaults.
type AutoThrottle struct {
	// TargetConcurrency is the number of requests to a host the delay
	// aims to keep in progress at once. 0 = 1.
	TargetConcurrency float64
	// StartDelay is a host's delay until its first response arrives.
	// 0 = DefaultThrottleStartDelay.
	StartDelay time.Duration
	// MaxDelay caps the adapted delay. 0 = DefaultThrottleMaxDelay.
	MaxDelay time.Duration
}

// ErrBadThrottle is wrapped by the errors of an invalid AutoThrottle.
var ErrBadThrottle = errors.New("invalid autothrottle settings")

// WithDefaults returns a with its zero fields set to their defaults.
func (a AutoThrottle) WithDefaults() AutoThrottle {
	if a.TargetConcurrency == 0 {
		a.TargetConcurrency = 1
	}
	if a.StartDelay == 0 {
		a.StartDelay = DefaultThrottleStartDelay
	}
	if a.MaxDelay == 0 {
		a.MaxDelay = DefaultThrottleMaxDelay
	}
	return a
}

// Validate reports what is wrong with a (after its defaults).
func (a AutoThrottle) Validate() error {
	a = a.WithDefaults()
	var errs []error
	if !(a.TargetConcurrency > 0) || math.IsInf(a.TargetConcurrency, 0) {
		errs = append(errs, fmt.Errorf("%w: target concurrency %v: want a number above 0", ErrBadThrottle, a.TargetConcurrency))
	}
	if a.StartDelay < 0 || a.MaxDelay < 0 {
		errs = append(errs, fmt.Errorf("%w: delays must not be negative", ErrBadThrottle))
	} else if a.StartDelay > a.MaxDelay {
		errs = append(errs, fmt.Errorf("%w: start delay %v is above the max delay %v", ErrBadThrottle, a.StartDelay, a.MaxDelay))
	}
	return errors.Join(errs...)
}

// Next returns a host's delay after a response that took latency and had
// status, given its delay old and its minimum delay floor (Config.Delay or
// Crawl-delay). a must have its defaults (WithDefaults). It is the rule
// every limiter applies; the Redis limiter applies it in a script.
func (a AutoThrottle) Next(old, floor, latency time.Duration, status int) time.Duration {
	old = max(old, floor)
	// Capped before the conversion, which could overflow.
	target := time.Duration(min(float64(latency)/a.TargetConcurrency, float64(a.MaxDelay)))
	d := max(target, (old+target)/2)
	d = max(floor, min(d, a.MaxDelay))
	if (status < 200 || status > 299) && d <= old {
		return old
	}
	return d
}
