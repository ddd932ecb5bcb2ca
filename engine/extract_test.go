package engine

import (
	"errors"
	"net/url"
	"slices"
	"testing"
)

const extractPage = `<html><head><base href="/shop/"><title>T</title></head><body>
<h1> Title </h1><p class="price">£1</p><p class="price">£2</p>
<a href="page/2#top">next</a><a href="https://other.example/x">out</a><a>no href</a><a href="mailto:a@b">mail</a>
<img src="../img/a.png"><div id="d"><b>bold</b></div>
</body></html>`

// TestExtraction: each suffix takes what it says; href and src come back
// absolute (against <base href>, without the fragment); a selector group
// with commas is one rule; every match is one value, in document order.
func TestExtraction(t *testing.T) {
	page, _ := url.Parse("http://site.test/dir/page")
	for _, tc := range []struct {
		rule string
		want []string
	}{
		{"h1", []string{"Title"}},
		{"h1::text", []string{"Title"}},
		{"h1, .price", []string{"Title", "£1", "£2"}},
		{".price::text", []string{"£1", "£2"}},
		{"a::attr(href)", []string{"http://site.test/shop/page/2", "https://other.example/x", "mailto:a@b"}},
		{"img::attr( SRC )", []string{"http://site.test/img/a.png"}},
		{"#d::html", []string{`<div id="d"><b>bold</b></div>`}},
		{"a[href*='::']", nil},
		{"table", nil},
	} {
		e, err := parseExtraction("f", tc.rule)
		if err != nil {
			t.Errorf("parseExtraction(%q): %v", tc.rule, err)
			continue
		}
		got := extractFields([]*extraction{e}, page, []byte(extractPage))["f"]
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q gave %q, want %q", tc.rule, got, tc.want)
		}
	}
	for _, bad := range []string{"h1::txt", "::text", "::attr(href)", "h1[", "a::attr()"} {
		if _, err := parseExtraction("f", bad); !errors.Is(err, ErrBadExtract) {
			t.Errorf("parseExtraction(%q) = %v, want ErrBadExtract", bad, err)
		}
	}
}

// TestValidateExtract: Config.Validate reports a bad extraction rule, so
// the front door reports it before it opens anything.
func TestValidateExtract(t *testing.T) {
	err := Config{Extract: map[string]string{"a": "h1::txt"}}.Validate()
	if !errors.Is(err, ErrBadExtract) {
		t.Errorf("Validate: %v, want ErrBadExtract", err)
	}
}
