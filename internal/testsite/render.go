package testsite

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// getBuf and putBuf recycle the page buffers, so that serving a page does
// not allocate its body.
func (s *Site) getBuf() *[]byte { return s.bufs.Get().(*[]byte) }

func (s *Site) putBuf(p *[]byte, b []byte) {
	if cap(b) > 1<<20 {
		return
	}
	*p = b[:0]
	s.bufs.Put(p)
}

// writeHTML sends b as a complete 200 text/html response.
func writeHTML(w http.ResponseWriter, b []byte) {
	h := w.Header()
	h["Content-Type"] = ctHTML
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func appendInt(b []byte, i int) []byte { return strconv.AppendInt(b, int64(i), 10) }

// appendOrigin appends "scheme://host" with the host upper-cased if upper.
func appendOrigin(b []byte, r *http.Request, upper bool) []byte {
	b = append(b, scheme(r)...)
	b = append(b, "://"...)
	for i := 0; i < len(r.Host); i++ {
		c := r.Host[i]
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

// appendPageHref appends the href of link j from page `from` to page `to`,
// spelled one of several equivalent ways chosen by the seed. base tells
// whether the page has a <base href> naming the site root.
func (s *Site) appendPageHref(b []byte, r *http.Request, from, to, j int, base bool) []byte {
	form := s.h(famSpelling, uint64(from), uint64(j)) % 100
	if r.Host == "" && form >= 70 && form < 78 {
		form = 0
	}
	switch {
	case form < 60: // root-relative
		b = append(b, "/page/"...)
		b = appendInt(b, to)
	case form < 65: // relative to /page/ (or to the base)
		if base {
			b = append(b, "page/"...)
		}
		b = appendInt(b, to)
	case form < 70: // with a dot-dot segment
		if base {
			b = append(b, "./page/"...)
		} else {
			b = append(b, "../page/"...)
		}
		b = appendInt(b, to)
	case form < 75: // absolute
		b = appendOrigin(b, r, false)
		b = append(b, "/page/"...)
		b = appendInt(b, to)
	case form < 78: // absolute, upper-case host
		b = appendOrigin(b, r, true)
		b = append(b, "/page/"...)
		b = appendInt(b, to)
	case form < 85: // with a fragment
		b = append(b, "/page/"...)
		b = appendInt(b, to)
		b = append(b, "#section-2"...)
	case form < 90: // first digit percent-encoded
		b = append(b, "/page/%3"...)
		b = appendInt(b, to)
	default: // with a dot segment
		if base {
			b = append(b, "page/./"...)
		} else {
			b = append(b, "./"...)
		}
		b = appendInt(b, to)
	}
	return b
}

// appendLink appends the href of a trap link.
func appendLink(b []byte, r *http.Request, l link) []byte {
	if l.abs && r.Host != "" {
		b = appendOrigin(b, r, false)
	}
	return append(b, l.href...)
}

const pageHead1 = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>`

const pageHead2 = ` · trawl test site</title>
<meta name="description" content="A synthetic page of the trawl test site.">
<link rel="stylesheet" href="/static/site.css">
<script src="/static/app.js" defer></script>
`

// servePage writes content page i: 10 to 20 KB of HTML.
func (s *Site) servePage(w http.ResponseWriter, r *http.Request, i int) {
	bp, tp := s.getBuf(), s.getBuf()
	b, t := (*bp)[:0], (*tp)[:0]
	e := s.extras[i]
	var ex pageExtra
	if e != nil {
		ex = *e
	}
	base := ex.base != 0

	b = append(b, pageHead1...)
	b = append(b, "Page "...)
	b = appendInt(b, i)
	b = append(b, pageHead2...)
	switch {
	case ex.base == 1, ex.base == 2 && r.Host == "":
		b = append(b, "<base href=\"/\">\n"...)
	case ex.base == 2:
		b = append(b, "<base href=\""...)
		b = appendOrigin(b, r, false)
		b = append(b, "/\">\n"...)
	}
	if ex.nextLeaf {
		b = append(b, "<link rel=\"next\" href=\"/leaf/next\">\n"...)
	} else if i+1 < s.pages {
		b = append(b, "<link rel=\"next\" href=\"/page/"...)
		b = appendInt(b, i+1)
		b = append(b, "\">\n"...)
	}
	if i > 0 {
		b = append(b, "<link rel=\"prev\" href=\"/page/"...)
		b = appendInt(b, i-1)
		b = append(b, "\">\n"...)
	}
	b = append(b, "</head>\n<body id=\"top\">\n<header><a href=\"/\"><img src=\"/static/logo.png\" alt=\"trawl\" width=\"32\" height=\"32\"></a>\n<nav><a href=\"/\">Home</a> <a href=\"/page/0\">First</a>"...)
	if i > 0 {
		b = append(b, " <a href=\"/page/"...)
		b = appendInt(b, i-1)
		b = append(b, "\" rel=\"prev\">Previous</a>"...)
	}
	if i+1 < s.pages {
		b = append(b, " <a href=\"/page/"...)
		b = appendInt(b, i+1)
		b = append(b, "\">Next</a>"...)
	}
	b = append(b, " <a href=\"#top\">Top</a></nav></header>\n<main>\n<article>\n<h1>Page "...)
	b = appendInt(b, i)
	b = append(b, "</h1>\n"...)

	// The tail: content links, trap links, external links.
	t = append(t, "</article>\n<section class=\"related\">\n<h2>Related pages</h2>\n<ul>\n"...)
	for j, to := range s.graph[i] {
		t = append(t, "<li><a href=\""...)
		t = s.appendPageHref(t, r, i, int(to), j, base)
		t = append(t, "\">Page "...)
		t = appendInt(t, int(to))
		t = append(t, "</a></li>\n"...)
	}
	t = append(t, "</ul>\n</section>\n"...)
	if len(ex.a) > 0 {
		t = append(t, "<aside>\n<h2>See also</h2>\n<ul>\n"...)
		for _, l := range ex.a {
			t = append(t, "<li><a href=\""...)
			t = appendLink(t, r, l)
			t = append(t, "\">"...)
			t = append(t, l.text...)
			t = append(t, "</a></li>\n"...)
		}
		t = append(t, "</ul>\n</aside>\n"...)
	}
	if len(ex.area) > 0 {
		t = append(t, "<img src=\"/static/logo.png\" usemap=\"#regions\" alt=\"Regions\" width=\"64\" height=\"32\">\n<map name=\"regions\">\n"...)
		for k, l := range ex.area {
			t = append(t, "<area shape=\"rect\" coords=\""...)
			t = appendInt(t, 32*k)
			t = append(t, ",0,"...)
			t = appendInt(t, 32*k+32)
			t = append(t, ",32\" href=\""...)
			t = appendLink(t, r, l)
			t = append(t, "\" alt=\""...)
			t = append(t, l.text...)
			t = append(t, "\">\n"...)
		}
		t = append(t, "</map>\n"...)
	}
	t = append(t, "</main>\n<footer>\n<p>Elsewhere: <a href=\"http://external.invalid/page/"...)
	t = appendInt(t, i)
	t = append(t, "\">mirror</a> · <a href=\"https://example.org/ref/"...)
	t = appendInt(t, i)
	t = append(t, "\">reference</a> · <a href=\"//external.invalid/cdn/"...)
	t = appendInt(t, i)
	t = append(t, "\">cdn</a> · <a href=\"mailto:webmaster@example.org\">mail</a> · <a href=\"tel:+15550100\">call</a> · <a href=\"javascript:void(0)\">menu</a> · <a>no href</a></p>\n</footer>\n</body>\n</html>\n"...)

	// Filler paragraphs up to the page's size, 10 to 18 KiB plus at most
	// one paragraph (< 1 KiB).
	target := 10<<10 + int(s.h(famSize, uint64(i), 0)%(8<<10))
	for k := 0; len(b)+len(t) < target; k++ {
		if k > 0 && k%4 == 0 {
			b = append(b, "<h2 id=\"section-"...)
			b = appendInt(b, k/4+1)
			b = append(b, "\">Section "...)
			b = appendInt(b, k/4+1)
			b = append(b, "</h2>\n"...)
		}
		b = append(b, s.paras[s.h(famPara, uint64(i), uint64(k))%uint64(len(s.paras))]...)
	}
	b = append(b, t...)
	writeHTML(w, b)
	s.putBuf(bp, b)
	s.putBuf(tp, t)
}

// serveHome writes /, which links to the first content pages.
func (s *Site) serveHome(w http.ResponseWriter, r *http.Request) {
	bp := s.getBuf()
	b := (*bp)[:0]
	b = append(b, pageHead1...)
	b = append(b, "Home"...)
	b = append(b, pageHead2...)
	b = append(b, "</head>\n<body>\n<header><nav><a href=\"/\">Home</a></nav></header>\n<main>\n<h1>trawl test site</h1>\n"...)
	b = append(b, s.paras[0]...)
	b = append(b, s.paras[1]...)
	b = append(b, "<h2>Start here</h2>\n<ul>\n"...)
	for i := range min(s.links, s.pages) {
		b = append(b, "<li><a href=\"/page/"...)
		b = appendInt(b, i)
		b = append(b, "\">Page "...)
		b = appendInt(b, i)
		b = append(b, "</a></li>\n"...)
	}
	b = append(b, "</ul>\n</main>\n</body>\n</html>\n"...)
	writeHTML(w, b)
	s.putBuf(bp, b)
}

// serveSmall writes a short HTML page with one link.
func (s *Site) serveSmall(w http.ResponseWriter, _ *http.Request, title, text, href string) {
	bp := s.getBuf()
	b := (*bp)[:0]
	b = append(b, pageHead1...)
	b = append(b, title...)
	b = append(b, pageHead2...)
	b = append(b, "</head>\n<body>\n<h1>"...)
	b = append(b, title...)
	b = append(b, "</h1>\n<p>"...)
	b = append(b, text...)
	b = append(b, "</p>\n<p><a href=\""...)
	b = append(b, href...)
	b = append(b, "\">Continue</a></p>\n</body>\n</html>\n"...)
	writeHTML(w, b)
	s.putBuf(bp, b)
}

const streamHead = "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>Archive</title></head>\n<body>\n<h1>Archive</h1>\n<p><a href=\"/\">Home</a></p>\n"

// serveHuge streams HugeSize bytes of HTML from the shared chunk, stopping
// early when the client goes away.
func (s *Site) serveHuge(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h["Content-Type"] = ctHTML
	h.Set("Content-Length", strconv.Itoa(HugeSize))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write([]byte(streamHead)); err != nil {
		return
	}
	ctx := r.Context()
	for left := HugeSize - len(streamHead); left > 0; {
		c := s.chunk[:min(left, len(s.chunk))]
		if ctx.Err() != nil {
			return
		}
		if _, err := w.Write(c); err != nil {
			return
		}
		left -= len(c)
	}
}

// serveEndless streams HTML until the client goes away or the server stops
// (its request context ends or a write fails). It never ends the body
// cleanly: a response cut short must not look complete to the client. When
// the context ends, a write blocked on a client that stopped reading fails
// at once, and the response is aborted (no terminating chunk).
func (s *Site) serveEndless(w http.ResponseWriter, r *http.Request) {
	w.Header()["Content-Type"] = ctHTML
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write([]byte(streamHead)); err != nil {
		return
	}
	ctx := r.Context()
	rc := http.NewResponseController(w)
	unblocked := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = rc.SetWriteDeadline(time.Now())
		close(unblocked)
	})
	defer func() {
		if !stop() {
			<-unblocked // no call on rc after the handler returns
		}
	}()
	for {
		if _, err := w.Write(s.chunk); err != nil {
			return
		}
		if ctx.Err() != nil {
			panic(http.ErrAbortHandler)
		}
	}
}

// serveFile writes /files/j.pdf: a PDF whose bytes contain HTML links that a
// crawler must not follow.
func (s *Site) serveFile(w http.ResponseWriter, j int) {
	body := "%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n" +
		"2 0 obj\n<< /Length 120 >>\nstream\n" +
		"<html><body><a href=\"/from-pdf/" + strconv.Itoa(j) + "\">appendix</a> " +
		"<a href=\"" + pagePath(min(1, s.pages-1)) + "\">page</a></body></html>\n" +
		"endstream\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n"
	serveText(w, http.StatusOK, "application/pdf", body)
}

// brokenHTML is /broken: unclosed and stray tags, bad entities, links in a
// script and a comment (not links), one real link to /leaf/broken, and an
// unterminated comment at the end.
const brokenHTML = `<html><head><title>Legacy page</title><meta charset=utf-8>
<body bgcolor=white>
<div><p><b><i>Unclosed tags everywhere
<table><tr><td>cell<td>cell <span>stray</div></span></b>
&bogus; &amp &#xZZ; <<<>>> <p <p> </ p> <a href>empty</a>
<script>document.write("<a href='/from-script'>generated</a>")</script>
<!-- <a href="/commented-out">old link</a> -->
<ul><li>item<li><a class=legacy href=/leaf/broken>the one good link</a>
<li>more <font color=red>text
</table></table></td>
<!-- this comment never ends <a href="/commented-out">
` + "\x00\xff\xfe garbage"
