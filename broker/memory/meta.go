package memory

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/trawlhq/trawl/broker"
)

var (
	_ broker.Metadata = (*Broker)(nil)
	_ broker.Roster   = (*Broker)(nil)
)

// GetMeta returns the value of key in crawl, kept by the store.
func (b *Broker) GetMeta(_ context.Context, crawl, key string) ([]byte, error) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.meta[crawl][key]
	if !ok {
		return nil, fmt.Errorf("memory broker: metadata %q of %q: %w", key, crawl, broker.ErrNotFound)
	}
	return bytes.Clone(v), nil
}

// SetMeta stores a copy of value under key in crawl.
func (b *Broker) SetMeta(_ context.Context, crawl, key string, value []byte) error {
	b.s.setMeta(crawl, key, value, false)
	return nil
}

// CreateMeta stores a copy of value under key in crawl unless it has one.
func (b *Broker) CreateMeta(_ context.Context, crawl, key string, value []byte) error {
	if !b.s.setMeta(crawl, key, value, true) {
		return fmt.Errorf("memory broker: metadata %q of %q: %w", key, crawl, broker.ErrExists)
	}
	return nil
}

func (s *Store) setMeta(crawl, key string, value []byte, create bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.meta == nil {
		s.meta = make(map[string]map[string][]byte)
	}
	m := s.meta[crawl]
	if m == nil {
		m = make(map[string][]byte)
		s.meta[crawl] = m
	}
	if _, ok := m[key]; ok && create {
		return false
	}
	m[key] = bytes.Clone(value)
	return true
}

// PurgeMeta deletes crawl's metadata.
func (b *Broker) PurgeMeta(_ context.Context, crawl string) error {
	b.s.mu.Lock()
	delete(b.s.meta, crawl)
	b.s.mu.Unlock()
	return nil
}

// Announce records worker id of crawl until ttl from now.
func (b *Broker) Announce(_ context.Context, crawl, id string, ttl time.Duration) error {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workers == nil {
		s.workers = make(map[string]map[string]int64)
	}
	if s.workers[crawl] == nil {
		s.workers[crawl] = make(map[string]int64)
	}
	s.workers[crawl][id] = s.now() + int64(ttl)
	return nil
}

// Leave forgets worker id of crawl.
func (b *Broker) Leave(_ context.Context, crawl, id string) error {
	b.s.mu.Lock()
	delete(b.s.workers[crawl], id)
	b.s.mu.Unlock()
	return nil
}

// Live counts the workers of crawl whose announcement has not expired.
func (b *Broker) Live(_ context.Context, crawl string) (int, error) {
	return len(b.s.live(crawl)), nil
}

// Members returns the ids of crawl's workers whose announcement has not
// expired, sorted (broker.Roster).
func (b *Broker) Members(_ context.Context, crawl string) ([]string, error) {
	ids := b.s.live(crawl)
	slices.Sort(ids)
	return ids, nil
}

// live returns the ids of crawl's unexpired workers, and forgets the
// expired ones.
func (s *Store) live(crawl string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var ids []string
	for id, until := range s.workers[crawl] {
		if until > now {
			ids = append(ids, id)
		} else {
			delete(s.workers[crawl], id)
		}
	}
	return ids
}
