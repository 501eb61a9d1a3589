-- The Redis fence's write (include/fencelock/fence.h): write only with a token at least as new as
-- every token this key has admitted (by a write or a fenced read).
-- KEYS[1] data key, KEYS[2] fence record; ARGV[1] token (canonical decimal), ARGV[2] value
-- Returns {1, token} when written, {0, highest} when the token is stale. A token or a fence
-- record that is not a canonical decimal token is a script error: nothing is written.
--@include tokens.lua
local token, highest = fencelock_fence_start(KEYS, ARGV)
if fencelock_token_less(token, highest) then
  return {0, highest}
end
redis.call('SET', KEYS[2], token)
redis.call('SET', KEYS[1], ARGV[2])
return {1, token}
