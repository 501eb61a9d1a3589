-- The holder of one lock on this instance.
-- KEYS[1] lock key, KEYS[2] holder info
-- Returns {owner, pttl, info} or nil when free. info is "TOKEN METADATA", or '' when the holder
-- is a foreign Redlock client that wrote no info.
local owner = redis.call('GET', KEYS[1])
if not owner then
  return nil
end
return {owner, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or ''}
