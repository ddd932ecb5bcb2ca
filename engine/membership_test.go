package engine

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestMembershipJoinsOnce: a crawler joins its crawl once, however many
// call at once; a failed join is tried again; a worker whose settings
// are not the crawl's (no metadata) is not shared.
func TestMembershipJoinsOnce(t *testing.T) {
	var m membership
	boom := errors.New("boom")
	if err := m.join(func() (bool, error) { return true, boom }); !errors.Is(err, boom) {
		t.Fatalf("join = %v, want the adopter's error", err)
	}
	if m.isShared() {
		t.Fatal("shared after a failed join")
	}
	var mu sync.Mutex
	calls := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			err := m.join(func() (bool, error) {
				mu.Lock()
				calls++
				mu.Unlock()
				return true, nil
			})
			if err != nil {
				t.Errorf("join: %v", err)
			}
		})
	}
	wg.Wait()
	if calls != 1 {
		t.Errorf("adopted %d times, want once", calls)
	}
	if !m.isShared() {
		t.Error("not shared after a join that said so")
	}
	var own membership
	if err := own.join(func() (bool, error) { return false, nil }); err != nil || own.isShared() {
		t.Errorf("a join with no shared settings: err %v, shared %v; want nil, false", err, own.isShared())
	}
}

// TestMembershipTrustGrew: the trust grew since a time only if it grew
// after it.
func TestMembershipTrustGrew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var m membership
		before := time.Now()
		if m.trustGrewSince(before) {
			t.Fatal("trust grew before it ever did")
		}
		time.Sleep(time.Millisecond)
		m.trustGrown()
		if !m.trustGrewSince(before) {
			t.Error("trust grown after a time did not grow since it")
		}
		if m.trustGrewSince(time.Now()) {
			t.Error("trust grew since now")
		}
	})
}
