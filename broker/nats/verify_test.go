package nats_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trawlhq/trawl/broker/nats"
)

// TestEmbeddedVerify (issue 28, row 4): a store whose request stream was
// truncated, deleted or garbled while it was closed is found damaged when
// it is opened again, naming the stream's directory and --flush; it stays
// so on every later start until Reset, after which the store, emptied,
// is checked again. A store opened and closed cleanly, with messages
// consumed in between, and one whose last user was killed, are not
// (before: JetStream recovered what it could read and said nothing; the
// crawl found the frontier short or empty and said "crawl done" or
// "already crawled").
func TestEmbeddedVerify(t *testing.T) {
	const q = "books:requests"
	damage := map[string]func(t *testing.T, blk string){
		"truncated": func(t *testing.T, blk string) {
			fi, err := os.Stat(blk)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(blk, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		},
		"deleted": func(t *testing.T, blk string) {
			if err := os.Remove(blk); err != nil {
				t.Fatal(err)
			}
		},
		"garbled": func(t *testing.T, blk string) {
			f, err := os.OpenFile(blk, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fi, _ := f.Stat()
			if _, err := f.WriteAt([]byte(strings.Repeat("x", int(fi.Size()/2))), fi.Size()/4); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, harm := range damage {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			start := func() *nats.Embedded {
				e, err := nats.StartEmbedded(ctx, nats.EmbeddedConfig{Dir: dir})
				if err != nil {
					t.Fatal(err)
				}
				return e
			}
			e := start()
			b := newBroker(t, e.Conn(), nats.Config{Lease: time.Minute})
			for i := range 10 {
				if err := b.Publish(ctx, q, msg(fmt.Sprintf("page %d %s", i, strings.Repeat("p", 100)), 0)); err != nil {
					t.Fatal(err)
				}
			}
			for _, d := range receiveN(t, b, q, 3, 5*time.Second) {
				if err := d.Ack(ctx); err != nil {
					t.Fatal(err)
				}
			}
			b.Close()
			e.Shutdown()

			// Consumed in a session that closed: not damage.
			e = start()
			if err := e.Verify(ctx); err != nil {
				t.Fatalf("a store closed cleanly: Verify = %v, want nil", err)
			}
			e.Shutdown()

			// The request stream's block: the largest.
			blks, _ := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", "*", "msgs", "*.blk"))
			var hit string
			var size int64
			for _, p := range blks {
				if fi, err := os.Stat(p); err == nil && fi.Size() > size {
					hit, size = p, fi.Size()
				}
			}
			if hit == "" {
				t.Fatalf("no message block among %v", blks)
			}
			harm(t, hit)
			stream := filepath.Dir(filepath.Dir(hit))
			for i := range 2 { // and again: the record is kept
				e = start()
				err := e.Verify(ctx)
				if !errors.Is(err, nats.ErrDamaged) || !strings.Contains(err.Error(), stream) || !strings.Contains(err.Error(), "--flush") {
					t.Fatalf("Verify after the stream's block was %s = %v, want ErrDamaged naming %s and --flush", name, err, stream)
				}
				if i == 0 {
					t.Logf("%s: %v", name, err)
				}
				e.Shutdown()
			}
			// Emptied (--flush): checked again from then on.
			e = start()
			e.Verify(ctx)
			e.Reset()
			b = newBroker(t, e.Conn(), nats.Config{Lease: time.Minute})
			if err := b.Purge(ctx, q); err != nil {
				t.Fatal(err)
			}
			b.Close()
			e.Shutdown()
			e = start()
			if err := e.Verify(ctx); err != nil {
				t.Fatalf("after Reset and a purge: Verify = %v, want nil", err)
			}
			e.Shutdown()
		})
	}
}
