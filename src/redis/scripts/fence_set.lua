-- The Redis fence's write (include/fencelock/fence.h): write only with a token at least as new as
-- every token this key has admitted (by a write or a fenced read), and of the lock that fences it.
-- KEYS[1] data key, KEYS[2] fence record; ARGV[1] token (canonical decimal), ARGV[2] value,
-- ARGV[3] issuer (absent or empty: a bare token; fence_record.lua says how records treat one).
-- Returns {1, token} when written, {0, highest} when the token is stale, {2, highest, issuer}
-- when the record belongs to another lock. A token, an issuer or a fence record that is not
-- what fencelock writes is a script error: nothing is written.
--@include tokens.lua
--@include fence_record.lua
local token, issuer, highest, recorded = fencelock_fence_open(KEYS, ARGV[1], ARGV[3])
local refused = fencelock_fence_refusal(token, issuer, highest, recorded)
if refused then
  return refused
end
redis.call('SET', KEYS[2], fencelock_fence_record(token, issuer))
redis.call('SET', KEYS[1], ARGV[2])
return {1, token}
