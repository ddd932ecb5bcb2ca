package dedup

import (
	"context"
	"crypto/sha256"
)

// Checker is implemented by filters that can tell whether fingerprints were
// added without adding them. The engine uses it for publication marks (see
// PublishedMark): deciding whether to republish a link must not claim the
// link's mark, or a crash between the check and the publish would lose it.
type Checker interface {
	// Contains reports, for each fingerprint, whether it was added. It never
	// changes the filter. A fingerprint added before is always reported
	// true; a probabilistic filter may report true for one never added (at
	// its false-positive rate), an exact filter never does.
	Contains(ctx context.Context, fps ...Fingerprint) ([]bool, error)
}

// Mark domains: each names one kind of record kept in the filter beside
// the request fingerprints. They are part of the stored format: changing
// one makes every stored mark of that kind unknown.
const (
	publishedDomain = "trawl/published"
	expandedDomain  = "trawl/expanded"
)

// PublishedMark returns the fingerprint of the record "the request with
// fingerprint fp was published to the frontier". The engine adds a
// request's fingerprint to the filter (claiming it), publishes the request,
// and then adds its PublishedMark. A request whose fingerprint is in the
// filter but whose mark is not was claimed by a worker that may have died
// before publishing it; a page that is processed again publishes such
// links again (see ExpandedMark).
//
// A mark is SHA-256(fp || "trawl/published") truncated to Size bytes, so
// every filter, worker and tool derives the same mark, and a mark never
// equals a request fingerprint (those hash a different, length-prefixed
// layout).
func PublishedMark(fp Fingerprint) Fingerprint { return mark(fp, publishedDomain) }

// ExpandedMark returns the fingerprint of the record "the page of the
// request with fingerprint fp reached the point of claiming its links".
// The engine adds it in a call of its own before it claims the links (a
// batch need not be all or nothing), so the filter holds it whenever it
// holds any link of that page. When it was
// already there, the page is being processed again (a redelivery after a
// crash, a requeued dead letter, a duplicate message), and the engine
// publishes the links that are in the filter without a PublishedMark.
func ExpandedMark(fp Fingerprint) Fingerprint { return mark(fp, expandedDomain) }

func mark(fp Fingerprint, domain string) Fingerprint {
	d := sha256.New()
	d.Write(fp[:])
	d.Write([]byte(domain))
	var sum [sha256.Size]byte
	var m Fingerprint
	copy(m[:], d.Sum(sum[:0]))
	return m
}
