package syncbuf_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/trawlhq/trawl/internal/syncbuf"
)

// TestConcurrent: writes from many goroutines, read while they run, are
// all kept whole (the race detector checks the locking).
func TestConcurrent(t *testing.T) {
	var b syncbuf.Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("line\n"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("line\n", 800) {
		t.Errorf("%d bytes, want 800 whole lines (4000 bytes)", len(got))
	}
}
