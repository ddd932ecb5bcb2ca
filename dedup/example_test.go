package dedup_test

import (
	"fmt"
	"net/url"

	"github.com/trawlhq/trawl/dedup"
)

func ExampleCanonicalURL() {
	for _, raw := range []string{
		"HTTP://Example.COM:80/a/./b/../c",
		"http://example.com/p?b=2&a=1#top",
		"https://bücher.example/%7euser/",
	} {
		c, err := dedup.CanonicalURL(raw)
		fmt.Println(c, err)
	}
	_, err := dedup.CanonicalURL("ftp://example.com/")
	fmt.Println(err)
	// Output:
	// http://example.com/a/c <nil>
	// http://example.com/p?a=1&b=2 <nil>
	// https://xn--bcher-kva.example/~user/ <nil>
	// canonicalize url "ftp://example.com/": dedup: bad url: scheme "ftp" is not http or https
}

func ExampleFingerprinter() {
	var f dedup.Fingerprinter
	fp := func(method, raw, body string) dedup.Fingerprint {
		u, err := url.Parse(raw)
		if err != nil {
			panic(err)
		}
		return f.Fingerprint(method, u, []byte(body), nil)
	}
	a := fp("GET", "http://example.com/p?a=1&b=2", "")
	b := fp("", "http://example.com/p?b=2&a=1", "")
	c := fp("get", "http://EXAMPLE.com/p?a=1&b=2#top", "")
	d := fp("POST", "http://example.com/p?a=1&b=2", "q=1")
	fmt.Println(a)
	fmt.Println(a == b, a == c, a == d)
	// Output:
	// 9a49ab2cdd8d76e561c5f55b8c170308
	// true true false
}
