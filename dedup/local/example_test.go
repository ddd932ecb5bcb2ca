package local_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/dedup/local"
)

func Example() {
	dir, err := os.MkdirTemp("", "trawl-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	cfg := local.Config{Capacity: 100_000, Path: filepath.Join(dir, "books.dupefilter")}

	var fpr dedup.Fingerprinter
	fp := func(raw string) dedup.Fingerprint {
		u, err := url.Parse(raw)
		if err != nil {
			panic(err)
		}
		return fpr.Fingerprint("GET", u, nil, nil)
	}
	home, page := fp("http://example.com/"), fp("http://example.com/page?b=2&a=1")
	samePage := fp("http://example.com/page?a=1&b=2#top")

	f, err := local.New(cfg)
	if err != nil {
		panic(err)
	}
	fmt.Println(f.Add(ctx, home))
	fmt.Println(f.Add(ctx, home, page, samePage))
	if err := f.Close(); err != nil { // saves to cfg.Path
		panic(err)
	}

	// A later run resumes with what the first one saw.
	f, err = local.New(cfg)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	fmt.Println(f.Len(), "fingerprints loaded")
	fmt.Println(f.Add(ctx, samePage, fp("http://example.com/other")))
	// Output:
	// [true] <nil>
	// [false true false] <nil>
	// 2 fingerprints loaded
	// [false true] <nil>
}
