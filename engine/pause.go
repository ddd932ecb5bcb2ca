package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/trawlhq/trawl/broker"
)

// pauseKey is the Metadata key that says whether the crawl is paused:
// "1" paused, anything else (or none) running.
const pauseKey = "paused"

// pausePoll is how often a worker that holds pages reads whether the
// crawl is paused: it stops taking requests within about that long of a
// pause. An idle worker reads it every pausePollIdle: one more command
// every second would keep a second pooled connection of its Redis client
// in use (a FIFO pool takes the oldest; see cmd/trawl's redisConnMaxIdle).
const (
	pausePoll     = time.Second
	pausePollIdle = 5 * time.Second
)

// SetPaused pauses (or resumes) every worker of crawl, whose state m
// keeps: a paused worker takes no new request, finishes the pages it has
// in progress and keeps (with their leases) the deliveries it holds; its
// consumer's read-ahead goes back to the queue. Workers see it within
// a second while they hold pages, 5 seconds while idle (one that starts
// on a paused crawl takes nothing), and go on after resume.
func SetPaused(ctx context.Context, m broker.Metadata, crawl string, paused bool) error {
	v := "0"
	if paused {
		v = "1"
	}
	if err := m.SetMeta(ctx, crawl, pauseKey, []byte(v)); err != nil {
		return fmt.Errorf("crawl %q: set paused: %w", crawl, err)
	}
	return nil
}

// Paused reports whether crawl is paused (see SetPaused).
func Paused(ctx context.Context, m broker.Metadata, crawl string) (bool, error) {
	v, err := m.GetMeta(ctx, crawl, pauseKey)
	if errors.Is(err, broker.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("crawl %q: read paused: %w", crawl, err)
	}
	return string(v) == "1", nil
}

// pauser is a worker's view of the crawl's pause: set by watchPause,
// waited on by the receiver.
type pauser struct {
	mu      sync.Mutex
	paused  bool
	resumed chan struct{} // closed when paused turns false
	parked  bool          // the receiver waits for resume
	wake    func()        // ends the receiver's wait for a delivery, or nil

	lastRead time.Time // pollPause's: the receiver's before its feeder starts, then the feeder's alone
}

func (p *pauser) set(paused bool) (changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if paused == p.paused {
		return false
	}
	p.paused = paused
	if paused {
		p.resumed = make(chan struct{})
		if p.wake != nil {
			p.wake()
		}
	} else {
		close(p.resumed)
	}
	return true
}

// wait returns at once unless paused; else it marks the receiver parked
// and waits for resume. It returns false if ctx ended first.
func (p *pauser) wait(ctx context.Context, parked func()) bool {
	p.mu.Lock()
	if !p.paused {
		p.mu.Unlock()
		return true
	}
	ch := p.resumed
	p.parked = true
	p.mu.Unlock()
	parked()
	defer func() {
		p.mu.Lock()
		p.parked = false
		p.mu.Unlock()
	}()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// wakeOnPause makes a pause call wake (at once if the crawl is paused
// already), so that a receiver waiting for a delivery parks; nil: no
// more.
func (p *pauser) wakeOnPause(wake func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wake = wake
	if p.paused && wake != nil {
		wake()
	}
}

func (p *pauser) isPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// isParked reports whether the receiver waits for resume: this worker
// takes nothing new.
func (p *pauser) isParked() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parked
}

// pollPause reads whether the crawl is paused, at most every pausePoll:
// the receiver calls it once before it takes anything, then the feeder
// on each of its ticks, so that the read adds no connection of its own
// to an idle worker's. A failed read keeps the last state.
func (c *Crawler) pollPause(ctx context.Context) {
	m := c.metadata()
	every := pausePoll
	if c.leases.inFlight() == 0 {
		every = pausePollIdle
	}
	if m == nil || time.Since(c.pause.lastRead) < every {
		return
	}
	c.pause.lastRead = time.Now()
	paused, err := Paused(ctx, m, c.cfg.Name)
	switch {
	case err != nil:
		c.log.Debug("reading whether the crawl is paused failed", "err", err)
	case !c.pause.set(paused):
	case paused:
		c.log.Warn("the crawl is paused: taking no new request until it is resumed", "crawl", c.cfg.Name,
			"resume", "trawl dashboard's Resume button, its POST /api/resume, or engine.SetPaused")
	default:
		c.log.Warn("the crawl is resumed", "crawl", c.cfg.Name)
	}
}
