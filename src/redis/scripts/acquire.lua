-- Round 1 of an acquisition on one instance (DESIGN.md 3.1), with a fair FIFO wait queue.
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] holder info,
-- KEYS[4] queue (zset: owner -> ticket), KEYS[5] queue expiry (zset: owner -> server ms),
-- KEYS[6] queue wake channels (hash: owner -> the waiter Client's wake channel)
-- ARGV[1] owner id, ARGV[2] ttl in ms, ARGV[3] holder metadata (JSON text),
-- ARGV[4] how long to keep a place in the queue in ms (0: do not queue, e.g. try-once),
-- ARGV[5] ticket: the waiter's place (the same on every instance, so every instance agrees on
--         who is first; ties are broken by owner id, as zsets order equal scores),
-- ARGV[6] the waiter Client's wake channel,
-- ARGV[7] the lock value: fresh for every attempt (the owner id names the waiter, not the grant),
--         so that a late release or renewal of an earlier attempt can never touch this grant
-- Returns {1, counter, ahead_ms} when granted: the counter as canonical decimal text (it only
-- grows; seeded from this server's clock, counter.lua) and how far the stored counter was ahead
-- of this server's clock; {0, retry_ms} when not: the holder's PTTL, or, when the lock is free but
-- reserved for an earlier waiter, how long that waiter's place lasts.
--@include tokens.lua
--@include counter.lua
local owner = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Waiters that stopped refreshing their place (crashed, gave up) lose it.
for _, stale in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)) do
  redis.call('ZREM', KEYS[4], stale)
  redis.call('ZREM', KEYS[5], stale)
  redis.call('HDEL', KEYS[6], stale)
end
-- Checked before the lock is written: an error after the SET would leave it held by nobody.
local stored, floor = fencelock_counter_start(KEYS[2], now)
local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
if (head == nil or head == owner) and redis.call('SET', KEYS[1], ARGV[7], 'NX', 'PX', ARGV[2]) then
  if head ~= nil then
    redis.call('ZREM', KEYS[4], owner)
    redis.call('ZREM', KEYS[5], owner)
    redis.call('HDEL', KEYS[6], owner)
  end
  local counter, ahead = fencelock_counter_advance(KEYS[2], stored, floor, now)
  redis.call('SET', KEYS[3], counter .. ' ' .. ARGV[3], 'PX', ARGV[2])
  return {1, counter, ahead}
end
local queue_ms = tonumber(ARGV[4])
if queue_ms > 0 then
  redis.call('ZADD', KEYS[4], ARGV[5], owner)
  redis.call('ZADD', KEYS[5], now + queue_ms, owner)
  redis.call('HSET', KEYS[6], owner, ARGV[6])
  -- The queue lives as long as its longest place: only ever extend its expiry (a waiter that
  -- gives up sends a short queue_ms and must not take everyone's place with it).
  for i = 4, 6 do
    -- PTTL is -1 for a key the ZADD/HSET above just created (no expiry yet).
    if redis.call('PTTL', KEYS[i]) < queue_ms * 2 then
      redis.call('PEXPIRE', KEYS[i], queue_ms * 2)
    end
  end
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 and head ~= nil then
  pttl = math.max(tonumber(redis.call('ZSCORE', KEYS[5], head) or now) - now, 1)
end
return {0, pttl}
