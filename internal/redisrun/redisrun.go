// Package redisrun tells when a Redis server restarted under its clients
// (its run_id changed), and whether it keeps anything on disk: what a crawl
// needs to know to tell a server that lost or rolled back its state from one
// that did not (see broker.Incarnations and engine.ErrStateLost).
package redisrun

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// Watch tells a server's incarnation: the run_id of INFO server, which a
// restart changes. It asks the server only when its client opened a
// connection since it last asked: a restart breaks every connection, so a
// client that opened none still talks to the server it asked.
type Watch struct {
	client *goredis.Client // nil: a Cluster, which it cannot tell
	dials  atomic.Uint64   // connections the client opened

	mu      sync.Mutex
	checked uint64 // dials when runID was read
	runID   string
}

// NewWatch watches c's server. It adds a hook to c counting the
// connections it opens. A Cluster client is not watched: its Incarnation is
// always "".
func NewWatch(c goredis.UniversalClient) *Watch {
	w := &Watch{}
	if cl, ok := c.(*goredis.Client); ok {
		w.client = cl
		cl.AddHook(dialCounter{&w.dials})
	}
	return w
}

// Incarnation returns the server's run_id, or "" for a Cluster.
func (w *Watch) Incarnation(ctx context.Context) (string, error) {
	if w == nil || w.client == nil {
		return "", nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.dials.Load()
	if w.runID != "" && d == w.checked {
		return w.runID, nil
	}
	info, err := w.client.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("redis: info server: %w", err)
	}
	id := infoField(info, "run_id")
	if id == "" {
		return "", fmt.Errorf("redis: info server: no run_id")
	}
	w.checked, w.runID = d, id
	return id, nil
}

// infoField returns field's value in an INFO reply, or "".
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// dialCounter is a hook counting the connections a client opens.
type dialCounter struct{ n *atomic.Uint64 }

func (h dialCounter) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err == nil {
			h.n.Add(1)
		}
		return c, err
	}
}

func (dialCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (dialCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// NoPersistenceWarning is the warning of WarnNoPersistence.
const NoPersistenceWarning = "the Redis server keeps nothing on disk (appendonly no, no save): a restart loses the crawl's frontier, " +
	"filter and settings, and the workers stop saying so; give it persistence (docs/deploy.md)"

// WarnNoPersistence logs NoPersistenceWarning at Warn when c's server keeps
// nothing on disk (CONFIG GET: appendonly no and save ""). A server that
// does not answer CONFIG (a managed one may not) is logged at Debug.
func WarnNoPersistence(ctx context.Context, c goredis.UniversalClient, log *slog.Logger) {
	aof, err := c.ConfigGet(ctx, "appendonly").Result()
	if err != nil {
		log.Debug("cannot tell whether the Redis server persists: CONFIG GET failed", "err", err)
		return
	}
	save, err := c.ConfigGet(ctx, "save").Result()
	if err != nil {
		log.Debug("cannot tell whether the Redis server persists: CONFIG GET failed", "err", err)
		return
	}
	if strings.EqualFold(aof["appendonly"], "no") && strings.TrimSpace(save["save"]) == "" {
		log.Warn(NoPersistenceWarning)
	}
}
