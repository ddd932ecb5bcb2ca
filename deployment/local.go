package deployment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/trawlhq/trawl/broker"
	natsbroker "github.com/trawlhq/trawl/broker/nats"
	"github.com/trawlhq/trawl/engine"
)

// The default mode keeps a crawl in its data directory (./.trawl/NAME):
// the embedded NATS store (nats/), the duplicate filter and the counters
// (stats.json). One process at a time opens the store (a lock in nats/);
// while a crawl runs, its server listens on loopback and records where in
// nats/client.json, and the admin commands connect to it as clients.

// statsFile holds the default mode's counters, in the data directory.
const statsFile = "stats.json"

// lockWait is how long a command waits for a data directory that another
// process holds without serving it: a crawl starting or stopping, or
// another command.
const lockWait = 10 * time.Second

// openDefault opens the default mode's crawl for an administration
// command: the store itself when no crawl runs, else through the running
// crawl's server. purge needs the duplicate filter, which the running
// crawl holds: it refuses while one runs.
func (d *Deployment) openDefault(ctx context.Context) error {
	what, dir := d.cfg.Admin, d.dir()
	if _, err := os.Stat(filepath.Join(dir, "nats")); errors.Is(err, os.ErrNotExist) && what != "seed" {
		// Not a typo's new empty crawl: say there is none.
		return fmt.Errorf("%s: %w in %s (check --name or --data-dir)", what, ErrNoCrawl, dir)
	}
	var waitSaid bool
	deadline := time.Now().Add(lockWait)
	for {
		err := d.openEmbedded(ctx, false, what == "purge")
		if err == nil {
			d.Shared = true // the store outlives this process
			return nil
		}
		d.reset()
		if !errors.Is(err, natsbroker.ErrLocked) {
			return err
		}
		err = d.openRunning(ctx)
		switch {
		case err == nil && what == "purge":
			d.Close()
			return fmt.Errorf("%w in %s: stop it before purging (--force cannot help: the running crawl holds the duplicate filter, which only it can empty)", ErrCrawlRunning, dir)
		case err == nil:
			d.log.Debug("connected to the running crawl", "dir", dir)
			return nil
		case !errors.Is(err, natsbroker.ErrNotRunning):
			return err
		}
		d.reset()
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is in use by another process that serves no broker (a trawl command, or a program using the library): try again when it is done", dir)
		}
		if !waitSaid {
			fmt.Fprintf(d.stderr(), "trawl: waiting up to %v for %s: another process holds it (a crawl starting or stopping, or another command)\n", lockWait, dir)
			waitSaid = true
		}
		if err := pause(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// openRunning connects to the server of the crawl running in the data
// directory; its counters are read from the file it keeps.
func (d *Deployment) openRunning(ctx context.Context) error {
	dir := d.dir()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nc, err := natsbroker.ConnectRunning(cctx, filepath.Join(dir, "nats"), natsbroker.ConnectConfig{Name: "trawl " + d.crawl.Name, Logger: d.crawl.Logger})
	if err != nil {
		return err
	}
	d.closes = append(d.closes, func() error { nc.Close(); return nil })
	// Open the queues as the running crawl does, whatever the settings
	// here: the last broker to open a queue sets its AckWait.
	cfg := natsbroker.Config{Conn: nc, Order: d.cfg.Order, Lease: d.lease(), MaxDeliveries: MaxDeliveries(d.crawl), Logger: d.crawl.Logger}
	if st, err := readBrokerSettings(dir); err == nil {
		if cfg.Order, err = broker.ParseOrder(st.Order); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(dir, brokerFile), err)
		}
		cfg.Lease, cfg.MaxDeliveries = st.Lease, st.MaxDeliveries
	} else {
		d.log.Warn("the running crawl's broker settings are unknown; using the flags", "err", err)
	}
	nb, err := natsbroker.New(ctx, cfg)
	if err != nil {
		return fmt.Errorf("the crawl running in %s: %w", dir, err)
	}
	d.Broker, d.Shared = nb, true
	d.closes = append(d.closes, nb.Close)
	d.Stats = &fileStats{path: filepath.Join(dir, statsFile)}
	// Seeding, counting and dead letters need no filter; a placeholder
	// keeps the deployment whole.
	return d.volatileFilter()
}

// openEmbeddedWaiting opens the default mode's store for a crawl, waiting
// (and saying so) while a short-lived command holds it; a crawl already
// running there is an error at once.
func (d *Deployment) openEmbeddedWaiting(ctx context.Context) error {
	dir := d.dir()
	deadline := time.Now().Add(lockWait)
	var waitSaid bool
	for {
		err := d.openEmbedded(ctx, true, d.cfg.Flush)
		if !errors.Is(err, natsbroker.ErrLocked) {
			return err
		}
		d.reset()
		running := d.openRunning(ctx) == nil
		d.reset()
		if running {
			return fmt.Errorf("%w in %s: one crawl at a time per data directory (another --name or --data-dir runs another)", ErrCrawlRunning, dir)
		}
		if time.Now().After(deadline) {
			return err
		}
		if !waitSaid {
			fmt.Fprintf(d.stderr(), "trawl: waiting up to %v for %s: another process holds it\n", lockWait, dir)
			waitSaid = true
		}
		if err := pause(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// reset closes what was opened and forgets it, for another try.
func (d *Deployment) reset() {
	d.Close()
	*d = Deployment{cfg: d.cfg, crawl: d.crawl, log: d.log}
}

// brokerFile records, in the data directory, how the crawl running there
// opened its queues.
const brokerFile = "broker.json"

// brokerSettings are the broker settings of the crawl of a data directory.
type brokerSettings struct {
	Order         string        `json:"order"`
	Lease         time.Duration `json:"lease"`
	MaxDeliveries int           `json:"max_deliveries"`
}

func writeBrokerSettings(dir string, s brokerSettings) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, brokerFile)
	if err := os.WriteFile(path+".tmp", data, 0o644); err != nil {
		return fmt.Errorf("broker settings: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("broker settings: %w", err)
	}
	return nil
}

func readBrokerSettings(dir string) (brokerSettings, error) {
	var s brokerSettings
	data, err := os.ReadFile(filepath.Join(dir, brokerFile))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("%s: %w", filepath.Join(dir, brokerFile), err)
	}
	return s, nil
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// fileStats are the default mode's counters, kept in a JSON file of the
// data directory: the crawl adds to it (it alone, holding the directory),
// commands read it.
type fileStats struct {
	path string
	mu   sync.Mutex
}

var _ engine.SharedStats = (*fileStats)(nil)

// Load returns the counters; none before the first crawl.
func (f *fileStats) Load(context.Context) (map[string]int64, error) {
	m := map[string]int64{}
	data, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("stats: %s: %w: %v", f.path, errDamagedStats, err)
	}
	return m, nil
}

// errDamagedStats is the error of a counters file that does not decode.
var errDamagedStats = errors.New("damaged")

// Add adds deltas to the counters, replacing the file atomically.
func (f *fileStats) Add(ctx context.Context, deltas map[string]int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, err := f.Load(ctx)
	if errors.Is(err, errDamagedStats) {
		// Set aside, so that the crawl says it once, not at every flush;
		// the caller adds these deltas again to a new file.
		if rerr := os.Rename(f.path, f.path+".damaged"); rerr != nil {
			return fmt.Errorf("stats: %w", rerr)
		}
		return fmt.Errorf("%w; moved to %s, counting again from this run's counters", err, f.path+".damaged")
	}
	if err != nil {
		return err
	}
	for k, v := range deltas {
		if v != 0 {
			m[k] += v
		}
	}
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	if err := os.Rename(tmp, f.path); err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	return nil
}

// Purge deletes the counters.
func (f *fileStats) Purge(context.Context) error {
	if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("stats: %w", err)
	}
	return nil
}
