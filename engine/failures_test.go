package engine

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestFailureStreak: a streak runs from its first failure, not its last,
// a success ends it, check reports it once it lasted the limit (wrapping
// the latest failure), bound ends a wait when it does, and a negative
// limit never stops anything.
func TestFailureStreak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f failures
		first, latest := errors.New("first"), errors.New("latest")
		if err := f.check(time.Second); err != nil {
			t.Fatalf("check with no failure: %v", err)
		}
		f.fail(first)
		time.Sleep(600 * time.Millisecond)
		f.fail(latest)
		if err := f.check(time.Second); err != nil {
			t.Fatalf("check 0.6s into the streak, limit 1s: %v", err)
		}
		ctx, cancel := f.bound(context.Background(), time.Second)
		began := time.Now()
		<-ctx.Done()
		cancel()
		if waited := time.Since(began); waited != 400*time.Millisecond {
			t.Errorf("bound ended after %v, want 400ms (1s from the first failure)", waited)
		}
		err := f.check(time.Second)
		if !errors.Is(err, latest) {
			t.Errorf("check at the limit = %v, want the latest failure wrapped", err)
		}
		if err := f.check(-1); err != nil {
			t.Errorf("check with a negative limit = %v, want nil", err)
		}
		if ctx, cancel := f.bound(context.Background(), -1); ctx.Done() != nil {
			cancel()
			t.Error("bound with a negative limit ends")
		}
		f.ok()
		if err := f.check(time.Second); err != nil {
			t.Errorf("check after a success = %v, want nil", err)
		}
		ctx, cancel = f.bound(context.Background(), time.Second)
		defer cancel()
		if ctx.Done() != nil {
			t.Error("bound with no streak ends")
		}
	})
}

// TestLastLost: the clocks keep the last error that lost a page.
func TestLastLost(t *testing.T) {
	var c failureClocks
	if err := c.lastLost(); err != nil {
		t.Fatalf("lastLost with none = %v", err)
	}
	a, b := errors.New("a"), errors.New("b")
	c.lost(a)
	c.lost(b)
	if err := c.lastLost(); err != b {
		t.Errorf("lastLost = %v, want %v", err, b)
	}
}
