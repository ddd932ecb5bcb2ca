package redis_test

import (
	"context"
	"fmt"
	"log"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/dedup"
	"github.com/trawlhq/trawl/dedup/redis"
)

// Workers of the crawl "books" share an exact filter. (No output: it needs
// a Redis server.)
func ExampleNewSet() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	f, err := redis.NewSet(ctx, redis.SetConfig{Client: client, Key: "books:dupefilter", Capacity: 5_000_000})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	a, b := dedup.Fingerprint{1}, dedup.Fingerprint{2}
	isNew, err := f.Add(ctx, a, b, a)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(isNew) // [true true false] on an empty filter
}

// A Bloom filter sized for 10 million requests at a 0.1% false-positive
// rate takes about 18 MB of Redis memory.
func ExampleNewBloom() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	f, err := redis.NewBloom(ctx, redis.BloomConfig{Client: client, Key: "books:dupefilter", Capacity: 10_000_000, FPRate: 0.001})
	if err != nil {
		log.Fatal(err) // errors.Is(err, redis.ErrLayout): the crawl's filter was made with other settings
	}
	defer f.Close()
	m, k := f.Params()
	fmt.Printf("%d bits, %d hashes\n", m, k)
}
