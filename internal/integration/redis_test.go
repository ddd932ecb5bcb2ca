package integration

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

func TestRedis(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := RedisClient(t)
	key := Name(t)
	if err := c.Set(ctx, key, "v", time.Minute).Err(); err != nil {
		t.Fatalf("set: %v", err)
	}
	if got, err := c.Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("get = %q, %v; want v", got, err)
	}
	// The second call returns the same, already running server.
	if a, b := Redis(t), Redis(t); a != b {
		t.Fatalf("Redis returned %q, then %q; want one shared server", a, b)
	}
}

func TestRedisCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs := RedisCluster(t)
	if len(addrs) != 3 {
		t.Fatalf("RedisCluster returned %d nodes, want 3: %v", len(addrs), addrs)
	}
	c := RedisClusterClient(t)
	// Keys in different slots land on different nodes, and all are reachable.
	masters := map[string]bool{}
	for i := range 30 {
		key := Name(t) + "-" + string(rune('a'+i%26)) + strings.Repeat("x", i)
		if err := c.Set(ctx, key, i, time.Minute).Err(); err != nil {
			t.Fatalf("set %s: %v", key, err)
		}
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			t.Fatalf("master for %s: %v", key, err)
		}
		masters[n.Options().Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("30 keys all on %v; want them spread over the cluster's nodes", masters)
	}
	// A multi-key command works on keys that share a hash tag.
	tag := "{" + Name(t) + "}"
	if err := c.MSet(ctx, tag+":a", 1, tag+":b", 2).Err(); err != nil {
		t.Fatalf("mset with one hash tag: %v", err)
	}
}

func TestName(t *testing.T) {
	a, b := Name(t), Name(t)
	if a == b {
		t.Fatalf("Name returned %q twice", a)
	}
	if !strings.HasPrefix(a, "testname-") {
		t.Fatalf("Name = %q, want it to begin with the test's name", a)
	}
	for _, r := range a {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			t.Fatalf("Name = %q has %q", a, r)
		}
	}
}
