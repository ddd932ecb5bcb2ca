package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/trawlhq/trawl/broker"
	"github.com/trawlhq/trawl/dedup"
	dedupredis "github.com/trawlhq/trawl/dedup/redis"
	"github.com/trawlhq/trawl/internal/redislayout"
)

// claimPublishScript claims fingerprints in the crawl's duplicate filter
// and publishes the messages of those new to it, as Publish does, in one
// atomic step: no other client sees a link claimed and not published.
// Set filter: one SADD per link, new if it added the member. Bloom
// filter: the bits of all links set by one BITFIELD per bitmap part (in
// chunks), a link new if any of its bits was 0. Links with no ops are
// unfiltered: published whatever the filter holds, nothing claimed.
//
// If publishing fails (a ready key of another type: workers of one crawl
// with another --order), the claims this call made are undone (SREM, or
// the bits that were 0 cleared again): the script is atomic, so nobody
// saw them, and the links are not claimed without being published.
//
// KEYS: ready, notify, seq, then the filter's keys
// ARGV: mode, kind ('s' set, 'b' Bloom), then per link:
// nops, nops pairs (filter key index from 1, member or bit offset),
// priority, record (priority ":" body)
// Returns: per link 1 (published) or 0 (claimed before).
var claimPublishScript = goredis.NewScript(luaLib + `
local ready, notify, seq = KEYS[1], KEYS[2], KEYS[3]
local mode, kind = ARGV[1], ARGV[2]

-- the links: where their ops start, how many, and their priority and record
local at, nops, prio, rec = {}, {}, {}, {}
local i = 3
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  at[#at + 1] = i + 1
  nops[#nops + 1] = n
  prio[#prio + 1] = ARGV[i + 1 + 2 * n]
  rec[#rec + 1] = ARGV[i + 2 + 2 * n]
  i = i + 3 + 2 * n
end

local fresh = {}
local undo = {} -- key, member or offset, pairs of what this call claimed
if kind == 's' then
  for l = 1, #at do
    if nops[l] == 0 then
      fresh[l] = true
    else
      local key, m = KEYS[3 + tonumber(ARGV[at[l]])], ARGV[at[l] + 1]
      fresh[l] = redis.call('SADD', key, m) == 1
      if fresh[l] then undo[#undo + 1] = key; undo[#undo + 1] = m end
    end
  end
else
  -- per part: BITFIELD SET ops and the link each bit is of
  local ops, owner = {}, {}
  for l = 1, #at do
    fresh[l] = nops[l] == 0
    for o = 0, nops[l] - 1 do
      local p = tonumber(ARGV[at[l] + 2 * o])
      if not ops[p] then ops[p] = {}; owner[p] = {} end
      local t = ops[p]
      t[#t + 1] = 'SET'; t[#t + 1] = 'u1'; t[#t + 1] = ARGV[at[l] + 2 * o + 1]; t[#t + 1] = 1
      owner[p][#owner[p] + 1] = l
    end
  end
  for p, t in pairs(ops) do
    local key = KEYS[3 + p]
    for first = 1, #t, 4000 do
      local old = redis.call('BITFIELD', key, unpack(t, first, math.min(first + 3999, #t)))
      for x, v in ipairs(old) do
        if v == 0 then
          fresh[owner[p][(first - 1) / 4 + x]] = true
          undo[#undo + 1] = key; undo[#undo + 1] = t[first + 4 * (x - 1) + 2]
        end
      end
    end
  end
end

local out, pub = {}, {}
for l = 1, #at do
  if fresh[l] then pub[#pub + 1] = l; out[l] = 1 else out[l] = 0 end
end
if #pub == 0 then return out end

local ok, err = pcall(function()
  local first = redis.call('INCRBY', seq, #pub) - #pub + 1
  local zero = struct.pack('>I4', 0)
  local members, scores = {}, {}
  for j, l in ipairs(pub) do
    members[j] = struct.pack('>I8', first + j - 1) .. zero .. rec[l]
    scores[j] = -tonumber(prio[l])
  end
  push(ready, mode, members, scores, false)
end)
if not ok then
  for u = 1, #undo, 2 do
    if kind == 's' then
      redis.call('SREM', undo[u], undo[u + 1])
    else
      redis.call('SETBIT', undo[u], undo[u + 1], 0)
    end
  end
  if type(err) == 'table' and err.err then err = err.err end
  return redis.error_reply('publish: ' .. tostring(err) .. ' (claims undone)')
end
wake(notify)
return out
`)

// Link is a message for ClaimPublish: published unless its fingerprint
// was claimed in the filter before.
type Link struct {
	Fingerprint dedup.Fingerprint
	// Unfiltered links are published whatever the filter holds, and
	// claim nothing (a request's DontFilter).
	Unfiltered bool
	Message    broker.Message
}

// ClaimPublish claims the links' fingerprints in f and publishes to queue
// the messages of those new to it, and of the unfiltered ones, in one
// script call: claim and publish are one atomic step, so no link is ever
// claimed and not published, and a batch sent twice publishes nothing
// the second time. It returns, per link, whether it was published. The
// messages are published in the links' order, as by Publish; a fingerprint
// twice in links is published once, the first time.
//
// f's keys must be in queue's crawl (the same Cluster hash tag: the
// queue NAME:requests, the filter NAME:dupefilter); else ClaimPublish
// fails with broker.ErrInvalid. More than 1,000 links are sent in parts,
// each atomic.
//
// With partitions (Config.Partitions > 1) the links are split by the
// partition of their message's Key, and each partition's are claimed in
// its filter (f.Partition) and published to its queue by a script of
// their own, atomic in that partition; the scripts of one call are
// pipelined. An error may leave some partitions' links published: a call
// sent again then says they were claimed before.
func (b *Broker) ClaimPublish(ctx context.Context, queue string, f dedupredis.Claimer, links []Link) ([]bool, error) {
	if err := b.check("claim and publish", queue); err != nil {
		return nil, err
	}
	if tag, ftag := hashTag(keysFor(queue).ready), hashTag(redislayout.FilterKeys(f.Key()).Base); tag != ftag {
		return nil, opErr("claim and publish", queue, fmt.Errorf("%w: filter %q is not of the queue's crawl (%s, not %s)",
			broker.ErrInvalid, f.Key(), ftag, tag))
	}
	// A fingerprint again in links goes to the script once: the first
	// claims it, the others would find it claimed.
	first := make(map[dedup.Fingerprint]bool, len(links))
	send := make([]int, 0, len(links)) // indexes in links
	for i, l := range links {
		if !l.Unfiltered {
			if first[l.Fingerprint] {
				continue
			}
			first[l.Fingerprint] = true
		}
		send = append(send, i)
	}
	ks := b.queueKeys(queue)
	n := len(ks)
	var calls []*claimCall
	for p, at := range b.byPartition(len(send), func(j int) string { return links[send[j]].Message.Key }) {
		idx := make([]int, len(at))
		for j, a := range at {
			idx[j] = send[a]
		}
		for chunk := range slices.Chunk(idx, publishChunk) {
			c, err := b.claimCall(ks[p], f.Partition(p, n), links, chunk)
			if err != nil {
				return nil, err
			}
			calls = append(calls, c)
		}
	}
	if err := b.runClaims(ctx, queue, calls); err != nil {
		return nil, err
	}
	out := make([]bool, len(links))
	for _, c := range calls {
		for j, i := range c.idx {
			out[i] = c.res[j] == 1
		}
	}
	return out, nil
}

// claimCall is one run of claimPublishScript: on keys with args, for the
// links idx; res is its reply.
type claimCall struct {
	k    *keys
	idx  []int
	keys []string
	args []any
	res  []int64
}

// runClaims runs calls, pipelined when there are several (each script is
// atomic on its own: a pipeline is no transaction).
func (b *Broker) runClaims(ctx context.Context, queue string, calls []*claimCall) error {
	check := func(c *claimCall, res []int64, err error) error {
		if err == nil && len(res) != len(c.idx) {
			err = fmt.Errorf("unexpected script reply of %d values for %d links", len(res), len(c.idx))
		}
		if err != nil {
			return opErr("claim and publish", queue, err)
		}
		c.res = res
		return nil
	}
	if len(calls) == 1 {
		c := calls[0]
		res, err := claimPublishScript.Run(ctx, b.client, c.keys, c.args...).Int64Slice()
		return check(c, res, err)
	}
	cmds := make([]*goredis.Cmd, len(calls))
	_, _ = b.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = claimPublishScript.EvalSha(ctx, p, c.keys, c.args...)
		}
		return nil
	})
	for i, c := range calls {
		res, err := cmds[i].Int64Slice()
		if goredis.HasErrorPrefix(err, "NOSCRIPT") {
			// Not loaded on that server yet: Run loads it.
			res, err = claimPublishScript.Run(ctx, b.client, c.keys, c.args...).Int64Slice()
		}
		if err := check(c, res, err); err != nil {
			return err
		}
	}
	return nil
}

// claimCall prepares claimPublishScript for the links idx (at most
// publishChunk) of one partition, whose queue keys are k and filter f.
func (b *Broker) claimCall(k *keys, f dedupredis.Claimer, all []Link, idx []int) (*claimCall, error) {
	links := make([]Link, len(idx))
	for j, i := range idx {
		links[j] = all[i]
	}
	fps := make([]dedup.Fingerprint, 0, len(links))
	for _, l := range links {
		if !l.Unfiltered {
			fps = append(fps, l.Fingerprint)
		}
	}
	claims, err := f.Claims(fps...)
	if err != nil {
		return nil, opErr("claim and publish", k.queue, err)
	}
	kind := "s"
	if claims.Kind == dedupredis.ClaimBloom {
		kind = "b"
	}
	keys := make([]string, 0, 3+len(claims.Keys))
	keys = append(keys, k.ready, k.notify, k.seq)
	keys = append(keys, claims.Keys...)
	args := make([]any, 0, 2+4*len(links))
	args = append(args, b.mode, kind)
	c := 0
	for _, l := range links {
		if l.Unfiltered {
			args = append(args, 0)
		} else {
			ops := claims.Ops[c]
			c++
			args = append(args, len(ops))
			for _, op := range ops {
				args = append(args, op.Key+1, op.Arg)
			}
		}
		args = append(args, l.Message.Priority, record(l.Message))
	}
	return &claimCall{k: k, idx: idx, keys: keys, args: args}, nil
}

// record encodes m as a member's record: priority ":" body.
func record(m broker.Message) string {
	b := make([]byte, 0, len(m.Body)+8)
	b = strconv.AppendInt(b, int64(m.Priority), 10)
	b = append(b, ':')
	b = append(b, m.Body...)
	return string(b)
}

// hashTag returns the Cluster hash tag of key, "{crawl}", or key itself
// when it has none.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i : i+j+2]
		}
	}
	return key
}
