-- The Redis fence's read (include/fencelock/fence.h): a fenced read admits its token like a write
-- does, so a holder that read before a newer holder's read can no longer write: the guard of a
-- read-modify-write.
-- KEYS[1] data key, KEYS[2] fence record; ARGV[1] token (canonical decimal)
-- Returns {1, value} (value nil when the key is missing) when admitted, {0, highest} when the
-- token is stale. A malformed token or fence record is a script error: nothing changes.
--@include tokens.lua
local token, highest = fencelock_fence_start(KEYS, ARGV)
if fencelock_token_less(token, highest) then
  return {0, highest}
end
if fencelock_token_less(highest, token) then
  redis.call('SET', KEYS[2], token)
end
return {1, redis.call('GET', KEYS[1])}
