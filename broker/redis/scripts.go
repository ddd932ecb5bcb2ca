package redis

import goredis "github.com/redis/go-redis/v9"

// Storage of one queue (see keys.go for the key names):
//
//	ready     the messages waiting: a sorted set in priority mode (score
//	          -priority, so ZPOPMIN takes the highest; equal scores order by
//	          member, which begins with the 8-byte big-endian id, so they
//	          come out FIFO), a list in FIFO and LIFO mode (LPUSH; RPOP or
//	          LPOP)
//	inflight  sorted set of leased messages, scored by lease deadline (ms)
//	delayed   sorted set of nacked messages waiting out their delay, scored
//	          by the time (ms) they become ready again
//	dead      list of dead letters, oldest first
//	notify    list Receive blocks on (BLPOP); holds at most one token
//	seq       counter the ids come from; never deleted, so ids of a queue
//	          are never reused
//
// Every message is one member, wherever it is:
//
//	id (8 bytes, big-endian) | n (4 bytes, big-endian) | record
//
// where record is priority (decimal) ":" body, and n counts the message's
// deliveries before: Receive moves a member from ready to inflight as it
// is (its delivery is number n+1), and giving it back (Nack, an expired
// lease, Close) rewrites n to n+1. So each delivery of a message has a
// member of its own, which is its lease token: a consumer whose lease
// expired and was handed on finds its member gone. Keeping the record in
// the member spares a separate hash of bodies and three commands per
// message, and Receive touches no member's bytes.
//
// Publish reserves ids with INCRBY and adds members with plain ZADD or
// LPUSH; Ack is a plain ZREM of the member (a pipeline of them for
// AckBatch). The rest are the scripts below. Plain commands cost the server
// a fraction of what a script spends per member on its arguments.
//
// A dead letter is len(reason) ":" reason record.
//
// All times are the server's (TIME), so that workers' clocks do not matter.

// luaLib is prepended to the scripts that need it.
const luaLib = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- deliveries counted in member m
local function count(m)
  return (struct.unpack('>I4', m, 9))
end

-- m with its delivery count set to n
local function with_count(m, n)
  return string.sub(m, 1, 8) .. struct.pack('>I4', n) .. string.sub(m, 13)
end

-- priority of member m
local function priority(m)
  local c = string.find(m, ':', 13, true)
  return tonumber(string.sub(m, 13, c - 1)) or 0
end

-- well_formed tells whether m was written by this package.
local function well_formed(m)
  return string.len(m) > 12 and string.find(m, ':', 13, true) ~= nil
end

-- bury moves member m to the dead letters with reason.
local function bury(dead, m, reason)
  redis.call('RPUSH', dead, string.len(reason) .. ':' .. reason .. string.sub(m, 13))
end

-- push puts members on ready: where mode takes them from next if front
-- (a message given back), else last (a new one). scores is used in
-- priority mode only.
local function push(ready, mode, members, scores, front)
  local args = {}
  for i, m in ipairs(members) do
    if mode == 'p' then
      args[#args + 1] = scores[i]
    end
    args[#args + 1] = m
    if #args >= 1000 or i == #members then
      if mode == 'p' then
        redis.call('ZADD', ready, unpack(args))
      elseif mode == 'f' and front then
        redis.call('RPUSH', ready, unpack(args))
      else
        redis.call('LPUSH', ready, unpack(args))
      end
      args = {}
    end
  end
end

-- give_back puts member m, delivered n times, back on ready: at its old
-- place in priority mode, next in line otherwise.
local function give_back(ready, mode, m, n)
  push(ready, mode, {with_count(m, n)}, {-priority(m)}, true)
end

-- wake leaves one token on notify (one command when it is there)
local function wake(notify)
  if redis.call('LLEN', notify) == 0 then redis.call('LPUSH', notify, '1') end
end
`

// receiveScript gives expired leases back (or buries them after
// maxDeliveries), makes due delayed messages ready, and leases up to max
// messages.
//
// KEYS: ready, inflight, delayed, dead, notify
// ARGV: mode, max, lease (ms), maxDeliveries
// Returns: {expired, malformed, next, member1, member2, ...} where expired
// counts leases that ran out, malformed counts entries of ready not
// written by this package (moved to the dead letters as they were), next
// is the number of ms until the earliest lease or delay ends (-1: none;
// always -1 when a member is leased: only a caller that leased nothing
// waits), and the members are those leased (now inflight).
//
// Commands count, those a script runs too: a call that leases, with no
// lease or delay over, runs TIME, a ZRANGE of the earliest lease and one
// of the earliest delay, the pop (ZPOPMIN in priority mode) and one ZADD,
// and, when it popped as many as it asked for, the wake-up (LLEN, and
// LPUSH when there is no token).
var receiveScript = goredis.NewScript(luaLib + `
local ready, inflight, delayed, dead, notify = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local mode, max, lease, maxdel = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()

-- the earliest lease and delay: the sets are scanned only when one is over
local first_in = redis.call('ZRANGE', inflight, 0, 0, 'WITHSCORES')
local first_de = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
local expired, due = {}, {}
if first_in[2] and tonumber(first_in[2]) <= now then
  expired = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, 1000)
  redis.call('ZREM', inflight, unpack(expired))
  for _, m in ipairs(expired) do
    local n = count(m) + 1
    if n >= maxdel then
      bury(dead, m, 'lease expired on delivery ' .. n .. ' of at most ' .. maxdel)
    else
      give_back(ready, mode, m, n)
    end
  end
end
if first_de[2] and tonumber(first_de[2]) <= now then
  due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, 1000)
  redis.call('ZREM', delayed, unpack(due))
  for _, m in ipairs(due) do push(ready, mode, {m}, {-priority(m)}, true) end
end

local popped
if mode == 'p' then
  popped = {}
  local zs = redis.call('ZPOPMIN', ready, max)
  for i = 1, #zs, 2 do popped[#popped + 1] = zs[i] end
elseif mode == 'f' then
  popped = redis.call('RPOP', ready, max) or {}
else
  popped = redis.call('LPOP', ready, max) or {}
end

local out = {#expired, 0, -1}
if #popped > 0 then
  local deadline = string.format('%d', now + lease)
  local z = {}
  for _, m in ipairs(popped) do
    if well_formed(m) then
      z[#z + 1] = deadline
      z[#z + 1] = m
      out[#out + 1] = m
      if #z >= 1000 then
        redis.call('ZADD', inflight, unpack(z))
        z = {}
      end
    else
      local reason = 'malformed queue entry'
      redis.call('RPUSH', dead, string.len(reason) .. ':' .. reason .. '0:' .. m)
      out[2] = out[2] + 1
    end
  end
  if #z > 0 then redis.call('ZADD', inflight, unpack(z)) end
  -- as many as max popped: more may be ready, for another consumer
  -- (fewer: ready is empty). Counting them would cost a command more
  -- than the rare wake-up for nothing.
  if #popped >= max then wake(notify) end
end

-- next matters only to a caller that leased nothing
if #out == 3 then
  if #expired > 0 then first_in = redis.call('ZRANGE', inflight, 0, 0, 'WITHSCORES') end
  if #due > 0 then first_de = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES') end
  if first_in[2] then out[3] = math.max(0, tonumber(first_in[2]) - now) end
  if first_de[2] then
    local d = math.max(0, tonumber(first_de[2]) - now)
    if out[3] < 0 or d < out[3] then out[3] = d end
  end
end
return out
`)

// nackScript gives leased messages back: to ready (delay 0), to delayed,
// or, when a message has been delivered maxDeliveries times, to the dead
// letters. maxDeliveries 0 never buries (a closing broker gives back what
// it holds); -1 never buries and keeps the delivery count (a consumer's
// read-ahead, never delivered, goes back as it was).
//
// KEYS: ready, inflight, delayed, dead, notify
// ARGV: mode, maxDeliveries, delay (ms), inflight members
// Returns: per member 0 (lease lost), 1 (ready), 2 (delayed) or 3 (dead).
var nackScript = goredis.NewScript(luaLib + `
local ready, inflight, delayed, dead, notify = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local mode, maxdel, delay = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local out, woke = {}, false
for i = 4, #ARGV do
  local m = ARGV[i]
  local r = 0
  if redis.call('ZREM', inflight, m) == 1 then
    local n = count(m) + 1
    if maxdel < 0 then n = count(m) end
    if maxdel > 0 and n >= maxdel then
      bury(dead, m, 'nacked on delivery ' .. n .. ' of at most ' .. maxdel)
      r = 3
    elseif delay > 0 then
      redis.call('ZADD', delayed, now_ms() + delay, with_count(m, n))
      woke = true -- a waiting consumer then waits until the delay ends
      r = 2
    else
      give_back(ready, mode, m, n)
      woke = true
      r = 1
    end
  end
  out[#out + 1] = r
end
if woke then wake(notify) end
return out
`)

// rejectScript moves a leased message to the dead letters.
//
// KEYS: inflight, dead
// ARGV: inflight member, reason
// Returns: 1, or 0 if the lease was lost.
var rejectScript = goredis.NewScript(luaLib + `
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
bury(KEYS[2], ARGV[1], ARGV[2])
return 1
`)

// extendScript moves the deadlines of leases to now + d.
//
// KEYS: inflight
// ARGV: d (ms), inflight members
// Returns: per member 1, or 0 if its lease was lost.
//
// A lease held is removed and added again, not updated in place (ZADD
// XX): a server out of memory (maxmemory, noeviction) refuses a script
// whose first write may grow its memory, as ZADD may, but not one whose
// first write is a ZREM, and runs the rest of a script that has written.
// So leases are kept while the server refuses writes, and the pages they
// stand for are not handed on, their deliveries counted, while their
// worker waits for the server to accept writes again.
var extendScript = goredis.NewScript(luaLib + `
local deadline = now_ms() + tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    redis.call('ZADD', KEYS[1], deadline, ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
`)

// countScript counts a queue.
//
// KEYS: ready, inflight, delayed, dead
// ARGV: mode
// Returns: {ready + delayed, inflight, dead, delayed}
var countScript = goredis.NewScript(`
local ready
if ARGV[1] == 'p' then ready = redis.call('ZCARD', KEYS[1]) else ready = redis.call('LLEN', KEYS[1]) end
local delayed = redis.call('ZCARD', KEYS[3])
return {ready + delayed, redis.call('ZCARD', KEYS[2]), redis.call('LLEN', KEYS[4]), delayed}
`)

// requeueScript moves the oldest dead letters back to ready as new
// messages (first delivery next).
//
// KEYS: dead, ready, seq, notify
// ARGV: mode, max
// Returns: the number moved.
var requeueScript = goredis.NewScript(luaLib + `
local dead, ready, seq, notify = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local mode = ARGV[1]
local es = redis.call('LPOP', dead, tonumber(ARGV[2]))
if not es then return 0 end
local first = redis.call('INCRBY', seq, #es) - #es + 1
local zero = struct.pack('>I4', 0)
local members, scores = {}, {}
for i, e in ipairs(es) do
  local c = string.find(e, ':', 1, true)
  local n = c and tonumber(string.sub(e, 1, c - 1))
  local rec = n and string.sub(e, c + 1 + n) or ''
  if not string.find(rec, ':', 1, true) then rec = '0:' .. e end
  members[i] = struct.pack('>I8', first + i - 1) .. zero .. rec
  scores[i] = -priority(members[i])
end
push(ready, mode, members, scores, false)
wake(notify)
return #es
`)
