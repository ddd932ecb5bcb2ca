package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/internal/redislayout"
)

var _ engine.RobotsStore = (*HostLimiter)(nil)

// Robots returns the robots.txt of key (scheme://host[:port]) that a
// worker of the crawl stored (see engine.RobotsStore): the limiter keeps
// a crawl's per-host state, and the file is part of it.
//
// The calls that come together are read together, in one MGET of up to
// maxRobotsRead files (robotsReader): a worker starting on new hosts
// asks for the robots.txt of each at once from its --concurrency
// fetches, and one GET each took a pooled connection each, 130-150 of
// them dialled in a worker's first second, and closed idle seconds later.
func (l *HostLimiter) Robots(ctx context.Context, key string) ([]byte, bool, error) {
	r := &robotsRead{key: redislayout.Robots(l.cfg.Crawl, key), done: make(chan struct{})}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		r.file, r.ok, r.err = getRobots(ctx, l.cfg.Client, r.key)
	} else {
		l.robots = append(l.robots, r)
		if !l.reading {
			l.reading = true
			l.wg.Add(1)
			go l.robotsReader()
		}
		l.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
			return nil, false, fmt.Errorf("redis: robots.txt of %s: %w", key, ctx.Err())
		}
	}
	if r.err != nil {
		return nil, false, fmt.Errorf("redis: robots.txt of %s: %w", key, r.err)
	}
	return r.file, r.ok, nil
}

// maxRobotsRead bounds the files of one read of robotsReader.
const maxRobotsRead = 64

// robotsRead is a Robots call for the reader: the file's key, and what
// the reader found, once done is closed.
type robotsRead struct {
	key  string
	file []byte
	ok   bool
	err  error
	done chan struct{}
}

// robotsReader reads the files the Robots calls wait for, those queued
// together in one MGET, until none waits. It runs while l.reading, owned
// by the limiter (Close waits for it).
func (l *HostLimiter) robotsReader() {
	defer l.wg.Done()
	for {
		l.mu.Lock()
		n := min(len(l.robots), maxRobotsRead)
		if n == 0 {
			l.reading = false
			l.mu.Unlock()
			return
		}
		batch := slices.Clone(l.robots[:n])
		l.robots = slices.Delete(l.robots, 0, n)
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
		if len(batch) == 1 {
			r := batch[0]
			r.file, r.ok, r.err = getRobots(ctx, l.cfg.Client, r.key)
		} else {
			keys := make([]string, len(batch))
			for i, r := range batch {
				keys[i] = r.key
			}
			vals, err := l.cfg.Client.MGet(ctx, keys...).Result()
			if err == nil && len(vals) != len(batch) {
				err = fmt.Errorf("MGET answered %d values for %d keys", len(vals), len(batch))
			}
			for i, r := range batch {
				switch {
				case err != nil:
					r.err = err
				case vals[i] != nil:
					s, ok := vals[i].(string)
					r.file, r.ok = []byte(s), ok
					if !ok {
						r.err = fmt.Errorf("MGET answered a %T", vals[i])
					}
				}
			}
		}
		cancel()
		for _, r := range batch {
			close(r.done)
		}
	}
}

// getRobots reads the file at key alone.
func getRobots(ctx context.Context, c goredis.UniversalClient, key string) ([]byte, bool, error) {
	b, err := c.Get(ctx, key).Bytes()
	switch {
	case errors.Is(err, goredis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return b, true, nil
}

// StoreRobots keeps file as the robots.txt of key for ttl, for the
// crawl's other workers.
func (l *HostLimiter) StoreRobots(ctx context.Context, key string, file []byte, ttl time.Duration) error {
	if err := l.cfg.Client.Set(ctx, redislayout.Robots(l.cfg.Crawl, key), file, ttl).Err(); err != nil {
		return fmt.Errorf("redis: store robots.txt of %s: %w", key, err)
	}
	return nil
}

// Purge deletes the crawl's per-host state: the hosts' leases, next
// starts and throttle delays, and the robots.txt files stored for the
// other workers. A crawl started clean (--flush) fetches robots.txt
// again and starts every host afresh, as a new crawl would.
func (l *HostLimiter) Purge(ctx context.Context) error {
	home := strings.TrimSuffix(redislayout.Pattern(l.cfg.Crawl), "*") // "{NAME}:"
	if _, err := purgeMatching(ctx, l.cfg.Client, l.cfg.Crawl, home+"host:*", home+"robots:*"); err != nil {
		return fmt.Errorf("redis: purge the hosts' state of %s: %w", l.cfg.Crawl, err)
	}
	return nil
}
