-- Round 1 of an acquisition on one instance (DESIGN.md 3.1).
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] holder info
-- ARGV[1] owner id, ARGV[2] ttl in ms, ARGV[3] holder metadata (JSON text)
-- Returns {1, counter} when granted (the counter only grows), {0, pttl} when held.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local counter = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[3], counter .. ' ' .. ARGV[3], 'PX', ARGV[2])
  return {1, counter}
end
return {0, redis.call('PTTL', KEYS[1])}
