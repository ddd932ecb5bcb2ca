package nats

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
)

// ErrLocked is returned by StartEmbedded when another embedded server (in
// this or another process) uses the data directory.
var ErrLocked = errors.New("nats embedded: data directory in use")

// EmbeddedConfig configures an embedded server. Dir is required; the zero
// value of every other field is its documented default.
type EmbeddedConfig struct {
	// Dir is the directory of the JetStream file store (created if
	// missing). Messages, consumers and their acknowledgements survive a
	// restart on the same Dir. One server at a time may use it.
	Dir string
	// Listen is a loopback address to accept TCP clients on, such as
	// "127.0.0.1:0" (a random port; see ClientURL). Empty: no listener,
	// in-process connections only.
	Listen string
	// Logger receives the server's warnings and errors, and its notices
	// at Debug level (default: discarded).
	Logger *slog.Logger
	// Advertise lets other processes of this machine reach the running
	// server (ConnectRunning): it listens on Listen, by default a random
	// loopback port, requires a random token from every client, and
	// records both in Dir/client.json, readable by the owner only, until
	// Shutdown.
	Advertise bool
}

// ErrNotRunning is returned by ConnectRunning when no server advertises
// itself in the directory.
var ErrNotRunning = errors.New("nats embedded: no server running in the data directory")

// advert is the content of Dir/client.json.
type advert struct {
	URL   string `json:"url"`
	Token string `json:"token"`
	PID   int    `json:"pid"`
}

const advertFile = "client.json"

// Embedded is a NATS server with JetStream running inside this process,
// for single-node crawls that need no server: the default of trawl crawl.
type Embedded struct {
	srv    *server.Server
	nc     *natsgo.Conn
	lock   *os.File
	log    *slog.Logger
	listen bool
	token  string // clients' token, or ""
	advert string // the advert file, or ""
	dir    string

	// checkpoint is what the streams held when the store was last closed
	// (see Verify); keep: Shutdown records that again, not what they hold
	// (the store was found damaged).
	checkpoint *checkpoint
	keep       atomic.Bool

	once sync.Once
}

// StartEmbedded starts a server storing its streams in cfg.Dir and
// connects to it in-process. It returns once the server accepts
// connections and JetStream is enabled, or fails when ctx ends first.
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.Dir == "" {
		return nil, errors.New("nats embedded: no data directory")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("backend", "nats-embedded")
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("nats embedded: create data directory: %w", err)
	}
	lock, err := lockDir(filepath.Join(cfg.Dir, "trawl-nats.lock"))
	if err != nil {
		return nil, fmt.Errorf("nats embedded: %s: %w", cfg.Dir, err)
	}
	var token string
	if cfg.Advertise {
		if cfg.Listen == "" {
			cfg.Listen = "127.0.0.1:0"
		}
		var raw [32]byte
		if _, err := rand.Read(raw[:]); err != nil {
			_ = lock.Close()
			return nil, fmt.Errorf("nats embedded: token: %w", err)
		}
		token = hex.EncodeToString(raw[:])
	}
	opts := &server.Options{
		ServerName:    "trawl-embedded",
		Authorization: token,
		JetStream:     true,
		StoreDir:      cfg.Dir,
		NoSigs:        true,
		DontListen:    cfg.Listen == "",
	}
	if cfg.Listen != "" {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err == nil {
			opts.Port, err = strconv.Atoi(port)
		}
		if ip := net.ParseIP(host); err == nil && (ip == nil || !ip.IsLoopback()) {
			err = fmt.Errorf("%q is not a loopback address", host)
		}
		if err != nil {
			_ = lock.Close()
			return nil, fmt.Errorf("nats embedded: listen address %q: %w", cfg.Listen, err)
		}
		opts.Host = host
		if opts.Port == 0 {
			opts.Port = server.RANDOM_PORT
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("nats embedded: %w", err)
	}
	srv.SetLoggerV2(serverLog{l: log, ready: new(atomic.Bool)}, false, false, false)
	srv.Start()
	e := &Embedded{srv: srv, lock: lock, log: log, listen: cfg.Listen != "", token: token, dir: cfg.Dir}

	wait := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	if !srv.ReadyForConnections(wait) || ctx.Err() != nil {
		e.Shutdown()
		return nil, fmt.Errorf("nats embedded: server not ready within %v: %w", wait, context.Cause(ctx))
	}
	if !srv.JetStreamEnabled() {
		e.Shutdown()
		return nil, fmt.Errorf("nats embedded: jetstream did not start in %s (see the log)", cfg.Dir)
	}
	e.nc, err = natsgo.Connect(srv.ClientURL(), natsgo.InProcessServer(srv), natsgo.Name("trawl-embedded"), natsgo.Token(token))
	if err != nil {
		e.Shutdown()
		return nil, fmt.Errorf("nats embedded: connect in-process: %w", err)
	}
	if cfg.Advertise {
		if err := writeAdvert(filepath.Join(cfg.Dir, advertFile), advert{URL: srv.ClientURL(), Token: token, PID: os.Getpid()}); err != nil {
			e.Shutdown()
			return nil, fmt.Errorf("nats embedded: %w", err)
		}
		e.advert = filepath.Join(cfg.Dir, advertFile)
	}
	// What the streams held when the store was last closed, for Verify;
	// until Shutdown the store counts as open (a process killed leaves it
	// so, and the next start cannot check it).
	e.checkpoint = readCheckpoint(cfg.Dir, log)
	if err := saveCheckpoint(cfg.Dir, checkpoint{Open: true}); err != nil {
		log.Warn("the store's record of its streams cannot be written; the next start cannot check them", "err", err)
	}
	log.Info("embedded nats started", "dir", cfg.Dir, "url", e.ClientURL())
	return e, nil
}

// Conn returns the in-process connection to the server, for Config.Conn.
// Shutdown closes it.
func (e *Embedded) Conn() *natsgo.Conn { return e.nc }

// Connect opens another in-process connection to the server (another
// worker, say). The caller closes it.
func (e *Embedded) Connect(opts ...natsgo.Option) (*natsgo.Conn, error) {
	opts = append([]natsgo.Option{natsgo.InProcessServer(e.srv), natsgo.Token(e.token)}, opts...)
	nc, err := natsgo.Connect(e.srv.ClientURL(), opts...)
	if err != nil {
		return nil, fmt.Errorf("nats embedded: connect in-process: %w", err)
	}
	return nc, nil
}

// ClientURL returns the URL TCP clients connect to, or "" when the server
// does not listen (EmbeddedConfig.Listen is empty).
func (e *Embedded) ClientURL() string {
	if !e.listen {
		return ""
	}
	return e.srv.ClientURL()
}

// Shutdown closes the connection, stops the server (JetStream writes its
// state to disk) and releases the data directory. Close brokers first:
// they give back their deliveries through the connection. Shutdown is
// idempotent.
func (e *Embedded) Shutdown() {
	e.once.Do(func() {
		if e.advert != "" {
			if err := os.Remove(e.advert); err != nil {
				e.log.Warn("removing the server's address failed", "err", err)
			}
		}
		if e.nc != nil {
			e.writeCheckpoint()
			e.nc.Close()
		}
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
		_ = e.lock.Close()
		e.log.Info("embedded nats stopped")
	})
}

// writeAdvert writes a atomically, readable by the owner only.
func writeAdvert(path string, a advert) error {
	data, err := json.Marshal(a)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("record the address: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("record the address: %w", err)
	}
	return nil
}

// ConnectRunning connects, as a TCP client, to the server that another
// process started in dir with EmbeddedConfig.Advertise. It returns an error
// wrapping ErrNotRunning when none does: no address is recorded, or the
// one recorded (left by a process killed) refuses the connection. The
// caller closes the connection.
func ConnectRunning(ctx context.Context, dir string, o ConnectConfig) (*natsgo.Conn, error) {
	data, err := os.ReadFile(filepath.Join(dir, advertFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotRunning, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("nats embedded: %w", err)
	}
	var a advert
	if err := json.Unmarshal(data, &a); err != nil || a.URL == "" {
		return nil, fmt.Errorf("nats embedded: %s: not a server address (%v)", filepath.Join(dir, advertFile), err)
	}
	o.Token = a.Token
	nc, err := Connect(ctx, a.URL, o)
	if err != nil {
		return nil, fmt.Errorf("%w: %s (the server of process %d): %w", ErrNotRunning, a.URL, a.PID, err)
	}
	return nc, nil
}

// serverLog adapts slog to the server's logger. The start-up banner (every
// notice before "Server is ready") is dropped: "embedded nats started" says
// it; later notices go to Debug.
type serverLog struct {
	l     *slog.Logger
	ready *atomic.Bool
}

func (s serverLog) Noticef(format string, v ...any) {
	if !s.ready.Load() {
		if format == "Server is ready" {
			s.ready.Store(true)
		}
		return
	}
	s.l.Debug(fmt.Sprintf(format, v...))
}
func (s serverLog) Warnf(format string, v ...any)  { s.l.Warn(fmt.Sprintf(format, v...)) }
func (s serverLog) Fatalf(format string, v ...any) { s.l.Error(fmt.Sprintf(format, v...)) }
func (s serverLog) Errorf(format string, v ...any) { s.l.Error(fmt.Sprintf(format, v...)) }
func (s serverLog) Debugf(format string, v ...any) { s.l.Debug(fmt.Sprintf(format, v...)) }
func (s serverLog) Tracef(format string, v ...any) { s.l.Debug(fmt.Sprintf(format, v...)) }
