package nats

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// balance spreads the leaders of the partitions qs of one queue over the
// servers of the cluster: each partition is given a server among its
// stream's peers, the one that leads least of qs so far (a partition
// whose leader leads no more than its share keeps it), and the leaders
// of its work stream and consumers that sit elsewhere are asked to step
// down in favour of it (JetStream's leader stepdown with a preferred
// server). A broker that creates the streams calls it once; a server that
// fails later moves its leaders to the others, and they stay there. It
// logs, and otherwise ignores, what fails: the crawl runs the same with
// its leaders together, only on fewer servers.
func (b *Broker) balance(ctx context.Context, qs []*queue) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	type part struct {
		q      *queue
		leader string
		peers  []string
	}
	parts := make([]part, 0, len(qs))
	servers := map[string]bool{}
	for _, q := range qs {
		info, err := q.stream.Info(ctx)
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
			b.log.Warn("partition leaders left where they are: no stream info", "queue", q.queue, "stream", q.work, "error", err)
			return
		}
		p := part{q: q, leader: info.Cluster.Leader, peers: []string{info.Cluster.Leader}}
		for _, r := range info.Cluster.Replicas {
			if r.Current && !r.Offline {
				p.peers = append(p.peers, r.Name)
			}
		}
		for _, s := range p.peers {
			servers[s] = true
		}
		parts = append(parts, p)
	}
	share := (len(parts) + len(servers) - 1) / len(servers)
	load := map[string]int{}
	target := make([]string, len(parts))
	for i, p := range parts { // those whose leader is within its share keep it
		if load[p.leader] < share {
			target[i] = p.leader
			load[p.leader]++
		}
	}
	for i, p := range parts {
		if target[i] != "" {
			continue
		}
		best := slices.MinFunc(p.peers, func(a, b string) int {
			return cmp.Or(cmp.Compare(load[a], load[b]), cmp.Compare(a, b))
		})
		target[i] = best
		load[best]++
	}
	moved := 0
	for i, p := range parts {
		if target[i] != p.leader {
			if err := b.stepDown(ctx, "STREAM.LEADER.STEPDOWN."+p.q.work, target[i]); err != nil {
				b.log.Warn("moving a partition's stream leader failed", "stream", p.q.work, "to", target[i], "error", err)
				continue
			}
			moved++
		}
		for _, c := range p.q.cons {
			ci, err := c.Info(ctx)
			if err != nil || ci.Cluster == nil || ci.Cluster.Leader == target[i] {
				continue
			}
			if err := b.stepDown(ctx, "CONSUMER.LEADER.STEPDOWN."+p.q.work+"."+ci.Name, target[i]); err != nil {
				b.log.Debug("moving a partition's consumer leader failed", "stream", p.q.work, "consumer", ci.Name, "to", target[i], "error", err)
			}
		}
	}
	b.log.Info("partition leaders balanced", "queue", qs[0].queue, "partitions", len(parts), "servers", len(servers), "moved", moved)
}

// stepDown asks the leader of what api names (a JetStream API subject
// after the prefix) to step down in favour of server.
func (b *Broker) stepDown(ctx context.Context, api, server string) error {
	req, err := json.Marshal(map[string]any{"placement": map[string]string{"preferred": server}})
	if err != nil {
		return err
	}
	m, err := b.nc.RequestWithContext(ctx, b.api+api, req)
	if err != nil {
		return err
	}
	var resp struct {
		Success bool                `json:"success"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("stepdown answer: %w", err)
	}
	if resp.Error != nil {
		return resp.Error
	}
	return nil
}

// DropPartitions deletes the streams of partitions from to to-1 of queue,
// with whatever they hold (trawl repartition, once it has moved them to
// fewer partitions); from 0 deletes the whole queue (the queues a
// repartition moves through, once they are empty).
func (b *Broker) DropPartitions(ctx context.Context, queue string, from, to int) error {
	for p := max(from, 0); p < to; p++ {
		n := namesFor(queue, b.cfg.Bands, p)
		for _, name := range []string{n.work, n.dead} {
			if err := b.js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				return opErr("drop partitions", queue, err)
			}
		}
		b.mu.Lock()
		delete(b.queues, qkey{queue, p})
		b.mu.Unlock()
	}
	return nil
}
