package engine

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestCodecRoundTrip(t *testing.T) {
	cases := []*Request{
		{URL: "http://example.com/"},
		{
			URL: "https://example.com/p?q=1", Method: "POST", Body: []byte{0, 1, 2, 255},
			Priority: -7, Depth: 3, Retries: 2, Callback: "detail", DontFilter: true,
			Meta: map[string]string{"a": "1", "": "empty key", "ü": "\x00"}, Scope: "example.com",
			Header: http.Header{"X-A": {"1", "2"}, "Cookie": {""}},
		},
		{URL: "http://x/", Priority: 1 << 40},
		{URL: "http://x/", Deferrals: 3, Retries: 1},
	}
	for _, want := range cases {
		b, err := want.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got Request
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("decode %q: %v", want.URL, err)
		}
		if !reflect.DeepEqual(&got, want) {
			t.Errorf("round trip:\n got %#v\nwant %#v", got, *want)
		}
	}
}

// TestCodecVersions: a request without deferrals is written as version 1,
// which older workers read; one with deferrals as version 2, one with a
// referrer as version 3.
func TestCodecVersions(t *testing.T) {
	b, _ := (&Request{URL: "http://x/"}).MarshalBinary()
	if b[0] != 1 {
		t.Errorf("version %d without deferrals, want 1", b[0])
	}
	b, _ = (&Request{URL: "http://x/", Deferrals: 1}).MarshalBinary()
	if b[0] != 2 {
		t.Errorf("version %d with deferrals, want 2", b[0])
	}
	b, _ = (&Request{URL: "http://x/", Referrer: "http://x/from"}).MarshalBinary()
	var got Request
	if b[0] != 3 || got.UnmarshalBinary(b) != nil || got.Referrer != "http://x/from" {
		t.Errorf("version %d with a referrer, want 3; decoded %+v", b[0], got)
	}
	b[0] = 4
	var r Request
	if err := r.UnmarshalBinary(b); !errors.Is(err, ErrBadPayload) {
		t.Errorf("version 4: err = %v", err)
	}
}

func TestCodecRejects(t *testing.T) {
	good, _ := (&Request{URL: "http://example.com/", Meta: map[string]string{"k": "v"}}).MarshalBinary()
	cases := map[string][]byte{
		"empty":         nil,
		"json":          []byte(`{"url":"http://example.com/"}`),
		"pickle":        []byte("\x80\x04\x95"),
		"version 2":     append([]byte{2}, good[1:]...),
		"truncated":     good[:len(good)-1],
		"trailing":      append(append([]byte{}, good...), 0),
		"no url":        mustMarshal(t, &Request{}),
		"huge length":   {1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"huge meta len": {1, 0, 0, 0, 0, 1, 'x', 0, 0, 0, 0xff, 0xff, 0x03},
	}
	for name, p := range cases {
		var r Request
		err := r.UnmarshalBinary(p)
		if !errors.Is(err, ErrBadPayload) {
			t.Errorf("%s: err = %v, want ErrBadPayload", name, err)
		}
	}
}

func mustMarshal(t *testing.T, r *Request) []byte {
	t.Helper()
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzUnmarshalRequest(f *testing.F) {
	f.Add(mustMarshalF(&Request{URL: "http://example.com/", Meta: map[string]string{"a": "b"}}))
	f.Add(mustMarshalF(&Request{URL: "http://e/", Header: http.Header{"A": {"b"}}, Body: []byte("x")}))
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		var r Request
		if err := r.UnmarshalBinary(p); err != nil {
			if !errors.Is(err, ErrBadPayload) {
				t.Fatalf("error does not wrap ErrBadPayload: %v", err)
			}
			return
		}
		// What decodes re-encodes to something that decodes to the same request.
		b, err := r.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var r2 Request
		if err := r2.UnmarshalBinary(b); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("unstable: %#v vs %#v", r, r2)
		}
	})
}

func mustMarshalF(r *Request) []byte { b, _ := r.MarshalBinary(); return b }

// TestParseStartURLTypeErrors: a JSON start URL with a value of the wrong
// type is refused naming the field and what it wants, in JSON's words
// (it said "cannot unmarshal number into Go struct field StartURL.meta of
// type string").
func TestParseStartURLTypeErrors(t *testing.T) {
	for in, want := range map[string]string{
		`{"url": "http://a.example/", "meta": {"a": 1}}`:    `"meta" holds a number, want strings as its values`,
		`{"url": "http://a.example/", "priority": "high"}`:  `"priority" is a string, want a whole number`,
		`{"url": "http://a.example/", "headers": ["X: 1"]}`: `"headers" is an array, want an object of strings, {"name": "value"}`,
		`{"url": 5}`: `"url" is a number, want a string`,
	} {
		_, err := ParseStartURL([]byte(in))
		if err == nil || !errors.Is(err, ErrBadPayload) || !strings.HasSuffix(err.Error(), "start url json: "+want) {
			t.Errorf("ParseStartURL(%s): %v; want ErrBadPayload ending %q", in, err, want)
		}
	}
}
