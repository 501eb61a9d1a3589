-- The fair wait queue's first live waiter (docs/PROTOCOLS.md, "Fair waiting"), included by
-- acquire.lua and release.lua. A place lives while its own expiry (the queue_exp score, set by
-- the waiter's last try) has not passed, or while its Client is alive: the Client keeps the key
-- "<its wake channel>:alive" (a few seconds' TTL) refreshed while it has waiters, so a waiter
-- need not refresh its own place and a waiting Client costs one command per instance every
-- couple of seconds whatever its number of waiters. Places before the first live one are
-- removed. Returns the owner id of the first live waiter (nil when none) and how long its place
-- lasts at least, in ms.
--
-- A place whose Client heard no wake-up (fencelock_queue_wake_first) has a negative expiry, minus
-- the moment its grace ends: until then it lives whatever its Client's key says (a Client whose
-- subscriber connection is being made again retries once it is back, which sets its expiry
-- again); after that it goes, even if that key is still there (a killed Client's key lasts a
-- few seconds more).
local FENCELOCK_DEAF_GRACE_MS = 2000
local function fencelock_queue_head(queue, expiry, wake, now)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if head == nil then
      return nil, 0
    end
    local expires = tonumber(redis.call('ZSCORE', expiry, head) or '0')
    if expires < 0 then
      if -expires > now then
        return head, -expires - now
      end
    elseif expires > now then
      return head, expires - now
    else
      local channel = redis.call('HGET', wake, head)
      if channel then
        local alive = redis.call('PTTL', channel .. ':alive')
        if alive > 0 then
          return head, alive
        end
      end
    end
    redis.call('ZREM', queue, head)
    redis.call('ZREM', expiry, head)
    redis.call('HDEL', wake, head)
  end
end

-- Wakes `owner`: publishes "<owner id> <lock key>" on its Client's channel. A Client that has no
-- such waiter any more (its leave never arrived) answers by sending the leave again. Returns
-- whether a Client heard it: none did when its Client is gone (killed: its subscriber connection
-- closed) or its subscriber connection is being made again.
local function fencelock_queue_publish(wake, owner, lock)
  local channel = redis.call('HGET', wake, owner)
  return channel ~= false and redis.call('PUBLISH', channel, owner .. ' ' .. lock) > 0
end

-- Wakes the first live waiter, unless it is `self` (the calling waiter; nil: none). A first
-- waiter whose wake-up no Client hears gets FENCELOCK_DEAF_GRACE_MS to try again, after which
-- fencelock_queue_head drops it. Returns the first live waiter (nil: none) and how long its place
-- lasts at least.
local function fencelock_queue_wake_first(queue, expiry, wake, lock, now, self)
  local head, lasts = fencelock_queue_head(queue, expiry, wake, now)
  if head == nil or head == self or fencelock_queue_publish(wake, head, lock) then
    return head, lasts
  end
  if tonumber(redis.call('ZSCORE', expiry, head) or '0') >= 0 then
    redis.call('ZADD', expiry, -(now + FENCELOCK_DEAF_GRACE_MS), head)
    lasts = FENCELOCK_DEAF_GRACE_MS
  end
  return head, lasts
end

-- After a release, wakes the waiter after the first too, as a standby: if the first does not take
-- the lock (its Client is stopped, killed or deaf, so its place lapses), the standby's try finds
-- the lock free but kept for it, and tries again when that place can lapse instead of at the old
-- holder's TTL.
local function fencelock_queue_wake_standby(wake, queue, lock)
  local second = redis.call('ZRANGE', queue, 1, 1)[1]
  if second ~= nil then
    fencelock_queue_publish(wake, second, lock)
  end
end
