package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawlhq/trawl/broker"
)

// metaBucket is the JetStream key-value bucket that keeps the crawls'
// metadata, under "<crawl>.meta.<key>", and their workers'
// announcements, under "<crawl>.w.<worker>" with the announcement's
// expiry (Unix milliseconds) as the value; crawl, key and worker escaped
// as queue names are (see escape). A worker id too long for a key, which
// escape cuts and completes with a hash, follows the expiry in the value,
// after a space, so that Members returns it as it was announced.
const metaBucket = "trawl-meta"

var (
	_ broker.Metadata = (*Broker)(nil)
	_ broker.Roster   = (*Broker)(nil)
)

// kv returns the metadata bucket, created on first use.
func (b *Broker) kv(ctx context.Context) (jetstream.KeyValue, error) {
	b.mu.Lock()
	kv := b.meta
	b.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	storage := jetstream.FileStorage
	if b.cfg.Storage == MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	// Created, not updated: a bucket that exists keeps its storage and
	// replicas, so that a command opened with defaults (trawl stats) does
	// not scale an R3 bucket down.
	kv, err := b.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: metaBucket, Description: "trawl crawls' settings and workers", History: 1, Storage: storage,
		Replicas: b.cfg.Replicas,
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = b.js.KeyValue(ctx, metaBucket)
	}
	if err != nil {
		return nil, fmt.Errorf("nats broker: metadata bucket %q: %w", metaBucket, err)
	}
	b.mu.Lock()
	b.meta = kv
	b.mu.Unlock()
	return kv, nil
}

func metaKey(crawl, key string) string { return escape(crawl) + ".meta." + escape(key) }

// GetMeta returns the value of key in crawl.
func (b *Broker) GetMeta(ctx context.Context, crawl, key string) ([]byte, error) {
	kv, err := b.kv(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, metaKey(crawl, key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("nats broker: metadata %q of %q: %w", key, crawl, broker.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("nats broker: read metadata %q of %q: %w", key, crawl, err)
	}
	return e.Value(), nil
}

// SetMeta stores value under key in crawl.
func (b *Broker) SetMeta(ctx context.Context, crawl, key string, value []byte) error {
	kv, err := b.kv(ctx)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, metaKey(crawl, key), value); err != nil {
		return fmt.Errorf("nats broker: write metadata %q of %q: %w", key, crawl, err)
	}
	return nil
}

// CreateMeta stores value under key in crawl unless it has one.
func (b *Broker) CreateMeta(ctx context.Context, crawl, key string, value []byte) error {
	kv, err := b.kv(ctx)
	if err != nil {
		return err
	}
	_, err = kv.Create(ctx, metaKey(crawl, key), value)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("nats broker: metadata %q of %q: %w", key, crawl, broker.ErrExists)
	}
	if err != nil {
		return fmt.Errorf("nats broker: write metadata %q of %q: %w", key, crawl, err)
	}
	return nil
}

// keys lists the keys of the bucket under prefix.
func keys(ctx context.Context, kv jetstream.KeyValue, prefix string) ([]string, error) {
	l, err := kv.ListKeysFiltered(ctx, prefix+">")
	if err != nil {
		return nil, err
	}
	defer l.Stop()
	var out []string
	for k := range l.Keys() {
		out = append(out, k)
	}
	return out, nil
}

// PurgeMeta deletes crawl's metadata.
func (b *Broker) PurgeMeta(ctx context.Context, crawl string) error {
	kv, err := b.kv(ctx)
	if err != nil {
		return err
	}
	ks, err := keys(ctx, kv, escape(crawl)+".meta.")
	if err != nil {
		return fmt.Errorf("nats broker: list metadata of %q: %w", crawl, err)
	}
	for _, k := range ks {
		if err := kv.Purge(ctx, k); err != nil {
			return fmt.Errorf("nats broker: purge metadata of %q: %w", crawl, err)
		}
	}
	return nil
}

func workerKey(crawl, id string) string { return escape(crawl) + ".w." + escape(id) }

// Announce records worker id of crawl until ttl from now (this host's
// clock).
func (b *Broker) Announce(ctx context.Context, crawl, id string, ttl time.Duration) error {
	kv, err := b.kv(ctx)
	if err != nil {
		return err
	}
	value := strconv.FormatInt(time.Now().Add(ttl).UnixMilli(), 10)
	if _, ok := unescape(escape(id)); !ok {
		value += " " + id // the key keeps a hash of it
	}
	if _, err := kv.PutString(ctx, workerKey(crawl, id), value); err != nil {
		return fmt.Errorf("nats broker: announce worker of %q: %w", crawl, err)
	}
	return nil
}

// Leave withdraws worker id's announcement.
func (b *Broker) Leave(ctx context.Context, crawl, id string) error {
	kv, err := b.kv(ctx)
	if err != nil {
		return err
	}
	if err := kv.Purge(ctx, workerKey(crawl, id)); err != nil {
		return fmt.Errorf("nats broker: withdraw worker of %q: %w", crawl, err)
	}
	return nil
}

// Live counts the workers of crawl whose announcement has not expired,
// and forgets the expired ones.
func (b *Broker) Live(ctx context.Context, crawl string) (int, error) {
	ids, err := b.Members(ctx, crawl)
	return len(ids), err
}

// Members returns the ids of the workers of crawl whose announcement has
// not expired, sorted, and forgets the expired ones.
func (b *Broker) Members(ctx context.Context, crawl string) ([]string, error) {
	kv, err := b.kv(ctx)
	if err != nil {
		return nil, err
	}
	prefix := escape(crawl) + ".w."
	ks, err := keys(ctx, kv, prefix)
	if err != nil {
		return nil, fmt.Errorf("nats broker: list workers of %q: %w", crawl, err)
	}
	now := time.Now().UnixMilli()
	ids := []string{}
	for _, k := range ks {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // withdrawn meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("nats broker: read worker of %q: %w", crawl, err)
		}
		expiry, id, long := strings.Cut(string(e.Value()), " ")
		until, err := strconv.ParseInt(expiry, 10, 64)
		if err == nil && until > now {
			if !long {
				token := strings.TrimPrefix(k, prefix)
				var ok bool
				if id, ok = unescape(token); !ok {
					id = token // a hashed key without its id: not trawl's
				}
			}
			ids = append(ids, id)
			continue
		}
		kv.Purge(ctx, k) // expired (or garbage): best effort
	}
	slices.Sort(ids)
	return ids, nil
}
