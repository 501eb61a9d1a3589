-- Compare-and-delete, then wake waiters.
-- KEYS[1] lock key, KEYS[2] holder info
-- ARGV[1] owner id, ARGV[2] release channel
-- Returns 1 when this owner's lock was deleted, 0 when it was not ours (or already gone).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('PUBLISH', ARGV[2], '')
  return 1
end
return 0
