-- Batched renewal: every lease this client holds on this instance, in one call.
-- KEYS: lock key and holder-info key of lease 1, then of lease 2, ...
-- ARGV: lock value (the attempt that was granted) and ttl in ms of lease 1, then of lease 2, ...
-- Returns one integer per lease: 1 extended, 0 no longer ours (expired or taken over).
-- GET through pcall: a lock key someone replaced with a hash or a list answers 0 for that lease
-- alone (redis.call's WRONGTYPE would fail the whole call, and so every lease of the batch).
local result = {}
for i = 1, #KEYS, 2 do
  local value = ARGV[i]
  local ttl = ARGV[i + 1]
  if redis.pcall('GET', KEYS[i]) == value then
    redis.call('PEXPIRE', KEYS[i], ttl)
    redis.call('PEXPIRE', KEYS[i + 1], ttl)
    result[#result + 1] = 1
  else
    result[#result + 1] = 0
  end
end
return result
