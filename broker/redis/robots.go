package redis

import (
	"context"
	"errors"
	"fmt"
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
func (l *HostLimiter) Robots(ctx context.Context, key string) ([]byte, bool, error) {
	b, err := l.cfg.Client.Get(ctx, redislayout.Robots(l.cfg.Crawl, key)).Bytes()
	switch {
	case errors.Is(err, goredis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("redis: robots.txt of %s: %w", key, err)
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
