package redis_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/dedup/deduptest"
	"github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/internal/integration"
)

func TestMain(m *testing.M) { integration.Main(m) }

// keyFor returns one filter key per test: filters made within one test
// share it, as deduptest wants.
type keyFor struct {
	mu   sync.Mutex
	keys map[*testing.T]string
}

func newKeyFor(*testing.T) *keyFor { return &keyFor{keys: map[*testing.T]string{}} }

func (k *keyFor) get(t *testing.T) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if key, ok := k.keys[t]; ok {
		return key
	}
	key := integration.Name(t) + ":dupefilter"
	k.keys[t] = key
	return key
}

func setSuite(c goredis.UniversalClient, kf *keyFor) deduptest.Config {
	return deduptest.Config{New: func(t *testing.T) dedup.Filter {
		f, err := redis.NewSet(t.Context(), redis.SetConfig{Client: c, Key: kf.get(t), Capacity: 100_000})
		if err != nil {
			t.Fatalf("NewSet: %v", err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}}
}

const suiteFPRate = 0.01

func bloomSuite(c goredis.UniversalClient, kf *keyFor) deduptest.Config {
	return deduptest.Config{
		FalsePositiveRate: suiteFPRate,
		New: func(t *testing.T) dedup.Filter {
			f, err := redis.NewBloom(t.Context(), redis.BloomConfig{Client: c, Key: kf.get(t), Capacity: 100_000, FPRate: suiteFPRate})
			if err != nil {
				t.Fatalf("NewBloom: %v", err)
			}
			t.Cleanup(func() { _ = f.Close() })
			return f
		},
	}
}

func TestSet(t *testing.T) { deduptest.Run(t, setSuite(integration.RedisClient(t), newKeyFor(t))) }

func TestSetCluster(t *testing.T) {
	deduptest.Run(t, setSuite(integration.RedisClusterClient(t), newKeyFor(t)))
}

func TestBloom(t *testing.T) { deduptest.Run(t, bloomSuite(integration.RedisClient(t), newKeyFor(t))) }

func TestBloomCluster(t *testing.T) {
	deduptest.Run(t, bloomSuite(integration.RedisClusterClient(t), newKeyFor(t)))
}

func TestBloomParams(t *testing.T) {
	for _, tc := range []struct {
		n     uint
		p     float64
		m     uint64 // within 1%
		k     int
		bytes float64 // per item
	}{
		{1_000_000, 0.01, 9_585_059, 7, 1.198},
		{1_000_000, 0.001, 14_377_588, 10, 1.797},
		{1000, 0.1, 4793, 3, 0.599},
	} {
		m, k := redis.BloomParams(tc.n, tc.p)
		if math.Abs(float64(m)-float64(tc.m)) > float64(tc.m)/100 || k != tc.k {
			t.Errorf("BloomParams(%d, %v) = %d, %d; want about %d, %d", tc.n, tc.p, m, k, tc.m, tc.k)
		}
		if m%8 != 0 {
			t.Errorf("BloomParams(%d, %v): m = %d is not whole bytes", tc.n, tc.p, m)
		}
	}
}

func TestBloomLayoutMismatch(t *testing.T) {
	c := integration.RedisClient(t)
	key := integration.Name(t) + ":dupefilter"
	if _, err := redis.NewBloom(t.Context(), redis.BloomConfig{Client: c, Key: key, Capacity: 1000, FPRate: 0.01}); err != nil {
		t.Fatalf("NewBloom: %v", err)
	}
	if _, err := redis.NewBloom(t.Context(), redis.BloomConfig{Client: c, Key: key, Capacity: 1000, FPRate: 0.01}); err != nil {
		t.Fatalf("NewBloom with the same settings: %v", err)
	}
	_, err := redis.NewBloom(t.Context(), redis.BloomConfig{Client: c, Key: key, Capacity: 5000, FPRate: 0.01})
	if !errors.Is(err, redis.ErrLayout) || !strings.Contains(err.Error(), "capacity 5000") {
		t.Fatalf("NewBloom with another capacity = %v; want ErrLayout naming the capacity", err)
	}
	_, err = redis.NewSet(t.Context(), redis.SetConfig{Client: c, Key: key})
	if !errors.Is(err, redis.ErrLayout) {
		t.Fatalf("NewSet on a Bloom filter's key = %v; want ErrLayout", err)
	}
}

func TestSetAdoptsStoredLayout(t *testing.T) {
	c := integration.RedisClient(t)
	key := integration.Name(t) + ":dupefilter"
	small, err := redis.NewSet(t.Context(), redis.SetConfig{Client: c, Key: key, Capacity: 1000})
	if err != nil {
		t.Fatalf("NewSet: %v", err)
	}
	big, err := redis.NewSet(t.Context(), redis.SetConfig{Client: c, Key: key, Capacity: 10_000_000})
	if err != nil {
		t.Fatalf("NewSet with another capacity: %v", err)
	}
	fps := randomFingerprints(rand.New(rand.NewPCG(1, 2)), 500)
	if _, err := small.Add(t.Context(), fps...); err != nil {
		t.Fatalf("Add: %v", err)
	}
	isNew, err := big.Add(t.Context(), fps...)
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	for i, n := range isNew {
		if n {
			t.Fatalf("fingerprint %d added by one worker was new to another configured with another capacity", i)
		}
	}
}

// TestStored: Stored opens the filter a key holds as it was made (a Set
// of its shard count, a Bloom filter of its bit and hash counts), with no
// size given: what one filter adds, the other finds; a key that holds
// none is ErrNoFilter, and Stored creates nothing.
func TestStored(t *testing.T) {
	ctx := t.Context()
	c := integration.RedisClient(t)
	fps := randomFingerprints(rand.New(rand.NewPCG(3, 4)), 200)
	for _, kind := range []string{"set", "bloom"} {
		key := integration.Name(t) + "-" + kind + ":dupefilter"
		if _, err := redis.Stored(ctx, c, key); !errors.Is(err, redis.ErrNoFilter) {
			t.Fatalf("Stored on an empty key = %v; want ErrNoFilter", err)
		}
		var made redis.Claimer
		var err error
		if kind == "set" {
			made, err = redis.NewSet(ctx, redis.SetConfig{Client: c, Key: key, Capacity: 1000})
		} else {
			made, err = redis.NewBloom(ctx, redis.BloomConfig{Client: c, Key: key, Capacity: 5000, FPRate: 0.02})
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := made.Add(ctx, fps...); err != nil {
			t.Fatal(err)
		}
		got, err := redis.Stored(ctx, c, key)
		if err != nil {
			t.Fatalf("Stored(%s) = %v", kind, err)
		}
		if fmt.Sprintf("%T", got) != fmt.Sprintf("%T", made) {
			t.Errorf("Stored on a %s filter's key = %T, want %T", kind, got, made)
		}
		if b, ok := got.(*redis.Bloom); ok {
			gm, gk := b.Params()
			wm, wk := made.(*redis.Bloom).Params()
			if gm != wm || gk != wk {
				t.Errorf("Stored Bloom filter of m=%d k=%d, want m=%d k=%d", gm, gk, wm, wk)
			}
		}
		isNew, err := got.Add(ctx, fps...)
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range isNew {
			if n {
				t.Fatalf("%s: fingerprint %d added through the filter made was new to the one Stored opened", kind, i)
			}
		}
	}
}

// TestSetIsIntset checks the memory layout the package relies on: shard
// sets of integers, encoded as intsets.
func TestSetIsIntset(t *testing.T) {
	c := integration.RedisClient(t)
	name := integration.Name(t)
	f, err := redis.NewSet(t.Context(), redis.SetConfig{Client: c, Key: name + ":dupefilter", Capacity: 10_000})
	if err != nil {
		t.Fatalf("NewSet: %v", err)
	}
	if _, err := f.Add(t.Context(), randomFingerprints(rand.New(rand.NewPCG(3, 4)), 10_000)...); err != nil {
		t.Fatalf("Add: %v", err)
	}
	keys, err := c.Keys(t.Context(), "{"+name+"}:dupefilter:*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	// 10,000 at 384 a shard: 32 shards, and the meta key.
	if len(keys) != 33 {
		t.Errorf("%d keys, want 32 shards and meta: %q", len(keys), keys)
	}
	for _, k := range keys {
		if strings.HasSuffix(k, ":meta") {
			continue
		}
		enc, err := c.ObjectEncoding(t.Context(), k).Result()
		if err != nil || enc != "intset" {
			t.Errorf("shard %q encoded as %q (%v), want intset", k, enc, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (redis.SetConfig{}).Validate(); err == nil || !strings.Contains(err.Error(), "Client") || !strings.Contains(err.Error(), "Key") {
		t.Errorf("SetConfig{}.Validate() = %v, want it to name Client and Key", err)
	}
	err := redis.BloomConfig{FPRate: 0.7}.Validate()
	for _, want := range []string{"Client", "Key", "FPRate"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("BloomConfig.Validate() = %v, want it to name %s", err, want)
		}
	}
}

func randomFingerprints(r *rand.Rand, n int) []dedup.Fingerprint {
	fps := make([]dedup.Fingerprint, n)
	for i := range fps {
		for j := range fps[i] {
			fps[i][j] = byte(r.Uint32())
		}
	}
	return fps
}

func TestBloomContains(t *testing.T) {
	c := integration.RedisClient(t)
	f, err := redis.NewBloom(t.Context(), redis.BloomConfig{Client: c, Key: integration.Name(t) + ":dupefilter", Capacity: 10_000, FPRate: 0.01})
	if err != nil {
		t.Fatalf("NewBloom: %v", err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	added, fresh := randomFingerprints(r, 10_000), randomFingerprints(r, 10_000)
	if _, err := f.Add(t.Context(), added...); err != nil {
		t.Fatalf("Add: %v", err)
	}
	in, err := f.Contains(t.Context(), added...)
	if err != nil {
		t.Fatalf("Contains: %v", err)
	}
	for i, ok := range in {
		if !ok {
			t.Fatalf("Contains: added fingerprint %d is not in the filter", i)
		}
	}
	in, err = f.Contains(t.Context(), fresh...)
	if err != nil {
		t.Fatalf("Contains: %v", err)
	}
	fp := 0
	for _, ok := range in {
		if ok {
			fp++
		}
	}
	// 1% of 10,000 at capacity; allow 1.5x.
	if fp > 150 {
		t.Errorf("%d of 10000 fresh fingerprints reported contained, want about 100 (1%%)", fp)
	}
	// Contains added nothing.
	isNew, err := f.Add(t.Context(), fresh[:100]...)
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	n := 0
	for _, ok := range isNew {
		if ok {
			n++
		}
	}
	if n < 90 {
		t.Errorf("only %d of 100 fingerprints passed to Contains were new to Add", n)
	}
}
