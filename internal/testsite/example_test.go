package testsite_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/trawlhq/trawl/internal/testsite"
)

func Example() {
	site := testsite.New(testsite.Config{Pages: 100, Seed: 1})
	ctx, cancel := context.WithCancel(context.Background())
	base, wait, err := site.Serve(ctx, "")
	if err != nil {
		panic(err)
	}
	defer func() { cancel(); _ = wait() }()

	resp, err := http.Get(base + "/page/%33#top") // /page/3, spelled differently
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, site.Served()["/page/3"])
	fmt.Println("partial crawl correct:", site.VerifyPartial() == nil)
	fmt.Println("complete crawl correct:", site.Verify() == nil)
	fmt.Println("a complete crawl keeps", site.Expected(), "responses")
	// Output:
	// 200 1
	// partial crawl correct: true
	// complete crawl correct: false
	// a complete crawl keeps 118 responses
}
