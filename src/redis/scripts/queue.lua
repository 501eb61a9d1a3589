-- The fair wait queue's first live waiter (docs/PROTOCOLS.md, "Fair waiting"), included by
-- acquire.lua and release.lua. A place lives while its own expiry (the queue_exp score, set by
-- the waiter's last try) has not passed, or while its Client is alive: the Client keeps the key
-- "<its wake channel>:alive" (a few seconds' TTL) refreshed while it has waiters, so a waiter
-- need not refresh its own place and a waiting Client costs one command per instance every
-- couple of seconds whatever its number of waiters. Places before the first live one are
-- removed. Returns the owner id of the first live waiter (nil when none) and how long its place
-- lasts at least, in ms.
local function fencelock_queue_head(queue, expiry, wake, now)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if head == nil then
      return nil, 0
    end
    local expires = tonumber(redis.call('ZSCORE', expiry, head) or '0')
    if expires > now then
      return head, expires - now
    end
    local channel = redis.call('HGET', wake, head)
    if channel then
      local alive = redis.call('PTTL', channel .. ':alive')
      if alive > 0 then
        return head, alive
      end
    end
    redis.call('ZREM', queue, head)
    redis.call('ZREM', expiry, head)
    redis.call('HDEL', wake, head)
  end
end

-- Removes `owner`'s place.
local function fencelock_queue_remove(queue, expiry, wake, owner)
  redis.call('ZREM', queue, owner)
  redis.call('ZREM', expiry, owner)
  redis.call('HDEL', wake, owner)
end

-- Wakes `owner`: publishes "<owner id> <lock key>" on its Client's channel. A Client that has no
-- such waiter any more (its leave never arrived) answers by sending the leave again. Returns
-- whether a Client heard it: none did when its Client is gone (killed: its subscriber connection
-- closed) or not subscribed just now (it then retries and takes its place again).
local function fencelock_queue_publish(wake, owner, lock)
  local channel = redis.call('HGET', wake, owner)
  return channel ~= false and redis.call('PUBLISH', channel, owner .. ' ' .. lock) > 0
end

-- Wakes the first live waiter that a Client hears, removing the places before it whose wake-up
-- nobody heard, and stops at `self` (the calling waiter, which needs no wake-up; nil: none).
-- Returns that waiter (nil: none) and how long its place lasts at least.
local function fencelock_queue_wake_first(queue, expiry, wake, lock, now, self)
  while true do
    local head, lasts = fencelock_queue_head(queue, expiry, wake, now)
    if head == nil or head == self or fencelock_queue_publish(wake, head, lock) then
      return head, lasts
    end
    fencelock_queue_remove(queue, expiry, wake, head)
  end
end

-- After a release, wakes the waiter after the first too, as a standby: if the first does not take
-- the lock (its Client is stopped and its place lapses), the standby's try finds the lock free but
-- kept for it, and tries again when that place can lapse instead of at the old holder's TTL.
local function fencelock_queue_wake_standby(queue, expiry, wake, lock, now)
  local second = redis.call('ZRANGE', queue, 1, 1)[1]
  if second == nil then
    return
  end
  local expires = tonumber(redis.call('ZSCORE', expiry, second) or '0')
  local channel = redis.call('HGET', wake, second)
  local alive = channel and (expires > now or redis.call('PTTL', channel .. ':alive') > 0)
  if alive then
    fencelock_queue_publish(wake, second, lock)
  end
end
