-- Round 1 of an acquisition on one instance (DESIGN.md 3.1), with a fair FIFO wait queue.
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] holder info,
-- KEYS[4] queue (zset: owner -> ticket), KEYS[5] queue expiry (zset: owner -> server ms),
-- KEYS[6] queue wake channels (hash: owner -> the waiter Client's wake channel),
-- KEYS[7] this attempt's tombstone (redis_keys.h tombstone_key: the lock key, ':dead:', the value)
-- ARGV[1] owner id, ARGV[2] ttl in ms, ARGV[3] holder metadata (JSON text),
-- ARGV[4] how long to keep a place in the queue in ms (0: do not queue, e.g. try-once),
-- ARGV[5] ticket: the waiter's place (the same on every instance, so every instance agrees on
--         who is first; ties are broken by owner id, as zsets order equal scores),
-- ARGV[6] the waiter Client's wake channel,
-- ARGV[7] the lock value: fresh for every attempt (the owner id names the waiter, not the grant),
--         so that a late release or renewal of an earlier attempt can never touch this grant,
-- ARGV[8] m: how many releases of this lock the calling Client still owes this instance (values
--         of its earlier attempts that some instance did not confirm releasing), ARGV[9] how long
--         their tombstones live in ms, ARGV[10..9+m] those values, KEYS[8..7+m] their tombstones:
--         each is released here first, as release.lua would (compare, delete, wake the first
--         waiter; else a tombstone), so that a Client taking the same lock again is not refused
--         by its own release still on the way
-- Returns {1, counter, ahead_ms} when granted: the counter as canonical decimal text (it only
-- grows; seeded from this server's clock, counter.lua) and how far the stored counter was ahead
-- of this server's clock; {0, retry_ms} when not: the holder's PTTL, or, when the lock is free but
-- reserved for an earlier waiter, how long that waiter's place lasts at least (queue.lua; that
-- waiter is woken too).
-- An attempt whose release came first (its tombstone exists: release.lua) does nothing at all and
-- returns {0, 1}: nobody waits for that reply any more, and a lock or a place in line taken now
-- would be held by nobody.
--@include tokens.lua
--@include counter.lua
--@include queue.lua
if redis.call('EXISTS', KEYS[7]) == 1 then
  return {0, 1}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owed = tonumber(ARGV[8] or '0')
for i = 1, owed do
  local released = ARGV[9 + i]
  if redis.call('GET', KEYS[1]) == released then
    redis.call('DEL', KEYS[1], KEYS[3])
    fencelock_queue_wake_first(KEYS[4], KEYS[5], KEYS[6], KEYS[1], now, ARGV[1])
  elseif redis.call('PTTL', KEYS[7 + i]) < tonumber(ARGV[9]) then
    -- Never shortens a tombstone that a release with a longer TTL left.
    redis.call('SET', KEYS[7 + i], '1', 'PX', ARGV[9])
  end
end
local owner = ARGV[1]
-- Checked before the lock is written: an error after the SET would leave it held by nobody.
local stored, floor = fencelock_counter_start(KEYS[2], now)
-- Places of waiters that are gone (their place expired and their Client is not alive) go.
local head, head_lasts = fencelock_queue_head(KEYS[4], KEYS[5], KEYS[6], now)
if head ~= nil and head ~= owner and redis.call('EXISTS', KEYS[1]) == 0 then
  -- Free, but kept for an earlier waiter: wake it (it may be asleep, or gone without its leave
  -- arriving: its Client then sends the leave again). A waiter whose wake-up nobody hears has a
  -- short grace to try again (queue.lua), after which its place goes.
  head, head_lasts = fencelock_queue_wake_first(KEYS[4], KEYS[5], KEYS[6], KEYS[1], now, owner)
end
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
  -- The queue lives until its waiters' next try at the latest: the holder's remaining TTL (when
  -- they retry if no release woke them) and twice the place's hold after it. Only ever extended
  -- (a waiter that gives up sends a short queue_ms and must not take everyone's place with it).
  local keep = queue_ms * 2 + math.max(redis.call('PTTL', KEYS[1]), 0)
  for i = 4, 6 do
    -- PTTL is -1 for a key the ZADD/HSET above just created (no expiry yet).
    if redis.call('PTTL', KEYS[i]) < keep then
      redis.call('PEXPIRE', KEYS[i], keep)
    end
  end
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 and head ~= nil and head ~= owner then
  -- Free, but kept for an earlier waiter (woken above): try again when its place could lapse.
  pttl = math.max(head_lasts, 1)
end
return {0, pttl}
