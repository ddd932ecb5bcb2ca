package engine

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// TestActions: each action names its outcome, only an ack and a reject
// are final, and a page that yields nothing is acknowledged, not written.
func TestActions(t *testing.T) {
	w := &write{items: []any{1}}
	for _, tc := range []struct {
		a     action
		name  string
		final bool
	}{
		{ack(), "ack", true},
		{reject("r"), "reject", true},
		{nack(time.Second), "nack", false},
		{giveBack(), "give back", false},
		{written(w), "write, then ack", false},
	} {
		if got := tc.a.String(); got != tc.name {
			t.Errorf("%#v: String() = %q, want %q", tc.a, got, tc.name)
		}
		if got := isFinal(tc.a); got != tc.final {
			t.Errorf("isFinal(%v) = %v, want %v", tc.a, got, tc.final)
		}
	}
	if a := written(&write{}); a != ack() {
		t.Errorf("written(nothing) = %v, want ack", a)
	}
	if a, ok := written(w).(writeAction); !ok || a.w != w {
		t.Errorf("written(w) = %#v, want a write of w", a)
	}
	if a, ok := nack(time.Second).(nackAction); !ok || a.delay != time.Second {
		t.Errorf("nack(1s) = %#v, want a nack after 1s", a)
	}
}

// TestFailedTellsFinalOnly: Config.OnFailure hears of a page whose
// action is final, with the dead letter's reason wrapping the failure,
// and not of a page to be retried or given back.
func TestFailedTellsFinalOnly(t *testing.T) {
	var told []error
	c := &Crawler{cfg: &compiled{Config: Config{OnFailure: func(_ context.Context, _ *Request, _ *Response, why error) {
		told = append(told, why)
	}}}}
	req := &Request{URL: "http://example.com/"}
	cause := errors.New("cause")
	for _, a := range []action{nack(0), giveBack(), written(&write{items: []any{1}})} {
		if got := c.failed(context.Background(), req, nil, cause, a); got != a {
			t.Errorf("failed(%v) = %v, want it back", a, got)
		}
	}
	if len(told) != 0 {
		t.Fatalf("OnFailure told of %v, pages not failed for good", told)
	}
	c.failed(context.Background(), req, nil, cause, reject("retries exhausted"))
	c.failed(context.Background(), req, &Response{StatusCode: 404}, nil, ack())
	if len(told) != 2 {
		t.Fatalf("OnFailure told %d times, want 2", len(told))
	}
	if !errors.Is(told[0], cause) || told[0].Error() != "retries exhausted" {
		t.Errorf("a reject told as %q (wrapping the cause: %v), want the reason wrapping the cause", told[0], errors.Is(told[0], cause))
	}
	if want := "404 " + http.StatusText(404); told[1].Error() != want {
		t.Errorf("a 404 told as %q, want %q", told[1], want)
	}
}
