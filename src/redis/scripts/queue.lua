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

-- Wakes `head` (an owner id in the queue `wake`): publishes "<owner id> <lock key>" on that
-- waiter's Client's channel. A Client that has no such waiter any more (its leave never arrived)
-- answers by sending the leave again.
local function fencelock_queue_wake(wake, head, lock)
  local channel = redis.call('HGET', wake, head)
  if channel then
    redis.call('PUBLISH', channel, head .. ' ' .. lock)
  end
end
