-- The Redis fence's read (include/fencelock/fence.h): a fenced read admits its token like a write
-- does, so a holder that read before a newer holder's read can no longer write: the guard of a
-- read-modify-write.
-- KEYS[1] data key, KEYS[2] fence record; ARGV[1] token (canonical decimal), ARGV[2] issuer
-- (absent or empty: a bare token).
-- Returns {1, value} (value nil when the key is missing) when admitted, {0, highest} when the
-- token is stale, {2, highest, issuer} when the record belongs to another lock. A malformed
-- token, issuer or fence record is a script error: nothing changes.
--@include tokens.lua
--@include fence_record.lua
local token, issuer, highest, recorded = fencelock_fence_open(KEYS, ARGV[1], ARGV[2])
local refused = fencelock_fence_refusal(token, issuer, highest, recorded)
if refused then
  return refused
end
if fencelock_token_less(highest, token) or recorded ~= issuer then
  redis.call('SET', KEYS[2], fencelock_fence_record(token, issuer))
end
return {1, redis.call('GET', KEYS[1])}
