package testsite

import (
	"strconv"
	"strings"
)

// Trap families, mixed into the hash that places their links.
const (
	famGraph uint64 = iota + 1
	famSpelling
	famSize
	famPara
	famPrivate
	famMissing
	famFlaky
	famRedirect
	famLoop
	famQuery
	famSingle // /slow, /huge, /endless, /binary, /broken
	famFile
	famArea
	famNext
	famBase
	famFiller
)

// Trap family sizes.
const (
	nPrivate  = 3
	nMissing  = 3
	nFlaky    = 3
	nRedirect = 3
	nQuery    = 5
	nFile     = 2
)

// mix is the splitmix64 finalizer: a cheap, well-spread 64-bit hash.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// h hashes (a, b, c) under the site's seed. Everything random about the
// site comes from here, so it is a pure function of the options.
func (s *Site) h(a, b, c uint64) uint64 {
	return mix(s.seed ^ mix(a^mix(b^mix(c+0x9e3779b97f4a7c15))))
}

// buildGraph chooses the content links of every page: page i links to i+1
// (so every page is reachable from /page/0) and to pseudo-random others,
// all distinct and none to itself.
func (s *Site) buildGraph() {
	s.graph = make([][]int32, s.pages)
	want := min(s.links, s.pages-1)
	for i := range s.pages {
		l := make([]int32, 0, want)
		if i+1 < s.pages && want > 0 {
			l = append(l, int32(i+1))
		}
		for j := 0; len(l) < want; j++ {
			t := int32(s.h(famGraph, uint64(i), uint64(j)) % uint64(s.pages))
			if j > 64*want { // pathological Links close to Pages: fill in order
				t = int32((i + j) % s.pages)
			}
			if int(t) != i && !containsInt32(l, t) {
				l = append(l, t)
			}
		}
		s.graph[i] = l
	}
}

func containsInt32(l []int32, v int32) bool {
	for _, x := range l {
		if x == v {
			return true
		}
	}
	return false
}

var words = strings.Fields(`lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod
tempor incididunt ut labore et dolore magna aliqua enim ad minim veniam quis nostrud
exercitation ullamco laboris nisi aliquip ex ea commodo consequat duis aute irure in
reprehenderit voluptate velit esse cillum fugiat nulla pariatur excepteur sint occaecat
cupidatat non proident sunt culpa qui officia deserunt mollit anim id est laborum crawler
frontier broker queue fingerprint politeness harbour trawl net catch tide current shoal`)

// buildFiller makes the shared filler: 256 paragraphs of 300 to 900 bytes,
// a 64 KiB chunk of them for the streamed bodies, and the /binary body.
func (s *Site) buildFiller() {
	s.paras = make([][]byte, 256)
	var n uint64
	next := func() uint64 { n++; return s.h(famFiller, n, 0) }
	for p := range s.paras {
		target := 300 + int(next()%600)
		b := []byte("<p>")
		for len(b) < target {
			sl := 6 + int(next()%10)
			for w := range sl {
				word := words[next()%uint64(len(words))]
				if w == 0 {
					b = append(b, word[0]-'a'+'A')
					b = append(b, word[1:]...)
					continue
				}
				b = append(b, ' ')
				if next()%23 == 0 {
					b = append(b, "<em>"+word+"</em>"...)
				} else {
					b = append(b, word...)
				}
			}
			b = append(b, ". "...)
		}
		b = append(b[:len(b)-1], "</p>\n"...)
		s.paras[p] = b
	}
	for i := 0; len(s.chunk) < 64<<10; i++ {
		s.chunk = append(s.chunk, s.paras[i%len(s.paras)]...)
	}
	s.chunk = s.chunk[:64<<10]
	s.binary = make([]byte, 64<<10)
	for i := 0; i < len(s.binary); i += 8 {
		v := next()
		for k := range 8 {
			c := byte(v >> (8 * k))
			if c == '<' { // no tags, hence no links, whatever the parser
				c = 0
			}
			s.binary[i+k] = c
		}
	}
}

// add registers a resource under its canonical key.
func (s *Site) add(key string, r *resource) { s.res[key] = r }

// extra returns the trap decorations of page i, creating them.
func (s *Site) extra(i int) *pageExtra {
	if s.extras[i] == nil {
		s.extras[i] = &pageExtra{}
	}
	return s.extras[i]
}

// place puts the links mk(0..copies-1) of trap j of a family on pages
// chosen by the seed, and returns a hint naming those pages.
func (s *Site) place(fam uint64, j, copies int, mk func(c int) link) string {
	var pages []string
	for c := range copies {
		p := int(s.h(fam, uint64(j), uint64(c)) % uint64(s.pages))
		e := s.extra(p)
		e.a = append(e.a, mk(c))
		pages = append(pages, pagePath(p))
	}
	return "linked from " + strings.Join(pages, " and ")
}

// buildTraps registers every trap resource and places the links to it.
func (s *Site) buildTraps() {
	itoa := strconv.Itoa
	for j := range nPrivate {
		key := "/private/" + itoa(j)
		hint := s.place(famPrivate, j, 2, func(c int) link { return link{abs: c == 1, href: key, text: "Members area"} })
		s.add(key, &resource{kind: kPrivate, n: j, rule: ruleForbidden, hint: hint})
	}
	for j := range nMissing {
		key := "/missing/" + itoa(j)
		hint := s.place(famMissing, j, 2, func(int) link { return link{href: key, text: "Old article"} })
		s.add(key, &resource{kind: kMissing, n: j, rule: ruleOnce, hint: hint})
	}
	for j := range nFlaky {
		key := "/flaky/" + itoa(j)
		hint := s.place(famFlaky, j, 2, func(int) link { return link{href: key, text: "Busy page"} })
		s.add(key, &resource{kind: kFlaky, n: j, rule: ruleFlaky, hint: hint})
	}
	for j := range nRedirect {
		key := "/redirect/" + itoa(j)
		t := int(s.h(famRedirect, uint64(j), 9) % uint64(s.pages))
		hint := s.place(famRedirect, j, 2, func(int) link { return link{href: key, text: "Moved page"} })
		s.add(key, &resource{kind: kRedirect, n: t, target: key + "/2", rule: ruleOnce, hint: hint})
		r2 := &resource{kind: kRedirect2, n: t, rule: ruleOnce, hint: "301 redirect target of " + key}
		if j%2 == 0 {
			r2.target, r2.abs = pagePath(t)+"#from-redirect", true
		} else {
			r2.target = "../.." + pagePath(t)
		}
		s.add(key+"/2", r2)
	}
	hint := s.place(famLoop, 0, 2, func(int) link { return link{href: "/loop/a", text: "Round trip"} })
	s.add("/loop/a", &resource{kind: kLoop, target: "/loop/b", rule: ruleOnce, hint: hint})
	s.add("/loop/b", &resource{kind: kLoop, target: "/loop/a", abs: true, rule: ruleOnce, hint: "302 redirect target of /loop/a"})

	for j := range nQuery {
		p, n := "/q/"+itoa(j), itoa(j)
		spell := []string{
			p + "?id=" + n + "&amp;sort=asc&amp;view=full",
			p + "?view=full&amp;sort=asc&amp;id=" + n,
			p + "?sort=asc&view=full&id=" + n + "#results",
			p + "?view=%66ull&amp;id=" + n + "&amp;sort=asc",
		}
		hint := s.place(famQuery, j, len(spell), func(c int) link {
			return link{abs: c == 3, href: spell[c], text: "Search results"}
		})
		s.add(p+"?id="+n+"&sort=asc&view=full", &resource{kind: kQuery, n: j, rule: ruleOnce200,
			hint: hint + ", spelled with its parameters in different orders"})
	}

	single := []struct {
		key  string
		kind kind
		rule rule
		text string
	}{
		{"/slow", kSlow, ruleOnce200, "Slow page"},
		{"/huge", kHuge, ruleHostile, "Complete archive"},
		{"/endless", kEndless, ruleHostile, "Live feed"},
		{"/binary", kBinary, ruleOnce200, "Raw data"},
		{"/broken", kBroken, ruleOnce200, "Legacy page"},
	}
	for j, x := range single {
		hint := s.place(famSingle, j, 2, func(int) link { return link{href: x.key, text: x.text} })
		s.add(x.key, &resource{kind: x.kind, rule: x.rule, hint: hint})
	}
	for j := range nFile {
		key := "/files/" + itoa(j) + ".pdf"
		hint := s.place(famFile, j, 2, func(int) link { return link{href: key, text: "Annual report (PDF)"} })
		s.add(key, &resource{kind: kFile, n: j, rule: ruleOnce200, hint: hint})
		s.add("/from-pdf/"+itoa(j), &resource{kind: kBait, rule: ruleNotLinked,
			hint: "it appears only inside " + key + " (application/pdf), and links are not extracted from non-HTML bodies"})
	}

	pa := int(s.h(famArea, 0, 0) % uint64(s.pages))
	s.extra(pa).area = []link{{href: "/leaf/area", text: "Map region"}, {href: pagePath((pa + 1) % s.pages), text: "Map region 2"}}
	s.add("/leaf/area", &resource{kind: kLeaf, rule: ruleOnce200, hint: "linked only by an <area href> on " + pagePath(pa)})

	pn := int(s.h(famNext, 0, 0) % uint64(s.pages))
	s.extra(pn).nextLeaf = true
	s.add("/leaf/next", &resource{kind: kLeaf, rule: ruleOnce200, hint: `linked only by <link rel="next"> on ` + pagePath(pn)})

	b1 := int(s.h(famBase, 0, 0) % uint64(s.pages))
	b2 := (b1 + s.pages/2) % s.pages
	s.extra(b1).base = 1
	s.extra(b1).a = append(s.extra(b1).a, link{href: "leaf/base", text: "Relative to base"})
	bhint := `linked only by the relative link "leaf/base" on ` + pagePath(b1) + `, whose <base href="/"> resolves it`
	if b2 != b1 {
		s.extra(b2).base = 2
		s.extra(b2).a = append(s.extra(b2).a, link{href: "leaf/base", text: "Relative to base"})
		bhint += `, and on ` + pagePath(b2) + ` (absolute <base href>)`
	}
	s.add("/leaf/base", &resource{kind: kLeaf, rule: ruleOnce200, hint: bhint})
	s.add("/leaf/broken", &resource{kind: kLeaf, rule: ruleOnce200, hint: "linked only from the broken HTML of /broken"})
	s.add("/from-script", &resource{kind: kBait, rule: ruleNotLinked, hint: "it appears only inside a <script> of /broken"})
	s.add("/commented-out", &resource{kind: kBait, rule: ruleNotLinked, hint: "it appears only inside HTML comments of /broken"})
}

// addAssets registers the stylesheet, script and image every page refers to.
func (s *Site) addAssets() {
	const hint = "it is referenced only by <link rel=stylesheet>, <script src> or <img src>, which are not links to follow"
	s.add("/static/site.css", &resource{kind: kAsset, target: "text/css", rule: ruleNotLinked, hint: hint})
	s.add("/static/app.js", &resource{kind: kAsset, target: "text/javascript", rule: ruleNotLinked, hint: hint})
	s.add("/static/logo.png", &resource{kind: kAsset, target: "image/png", rule: ruleNotLinked, hint: hint})
}
