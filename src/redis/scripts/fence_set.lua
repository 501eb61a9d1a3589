-- The Redis fence (include/fencelock/fence.h): write only with a token at least as new as every
-- token this key has accepted. Tokens are compared as decimal strings (length, then bytes), so
-- every uint64 compares exactly (Lua numbers are doubles).
-- KEYS[1] data key, KEYS[2] fence key; ARGV[1] token (decimal, no leading zeros), ARGV[2] value
-- Returns {1, token} when written, {0, highest} when the token is stale.
local highest = redis.call('GET', KEYS[2]) or '0'
local token = ARGV[1]
if #token < #highest or (#token == #highest and token < highest) then
  return {0, highest}
end
redis.call('SET', KEYS[2], token)
redis.call('SET', KEYS[1], ARGV[2])
return {1, token}
