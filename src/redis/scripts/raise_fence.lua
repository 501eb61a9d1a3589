-- Round 2 of a Redlock acquisition: the max-register write-back (DESIGN.md 3.1).
-- Raises this instance's counter to the token chosen over the majority, but only while this
-- attempt still holds the lock here; a later grant's counter on this instance then exceeds the token.
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] holder info
-- ARGV[1] the attempt's lock value, ARGV[2] chosen token (canonical decimal)
-- Returns 1 when confirmed, 0 when the lock is no longer ours here. A counter that is not a
-- canonical token is a script error (someone else wrote it): nothing changes.
--@include tokens.lua
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local token = fencelock_check_token(ARGV[2], 'the chosen token')
if #token == 20 or (#token == 19 and token >= '9223372036854775808') then
  error('fencelock: the chosen token ' .. token .. ' is 2^63 or more, which no counter issues')
end
local counter = fencelock_check_token(redis.call('GET', KEYS[2]) or '0', 'the fence counter ' .. KEYS[2])
if fencelock_token_less(counter, token) then
  redis.call('SET', KEYS[2], token)
end
local info = redis.call('GET', KEYS[3])
if info then
  local meta = string.match(info, '^%d+ (.*)$') or ''
  redis.call('SET', KEYS[3], token .. ' ' .. meta, 'KEEPTTL')
end
return 1
