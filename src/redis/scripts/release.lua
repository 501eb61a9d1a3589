-- Compare-and-delete, leave the wait queue, then wake the next waiter.
-- KEYS[1] lock key, KEYS[2] holder info, KEYS[3] queue, KEYS[4] queue expiry
-- ARGV[1] owner id, ARGV[2] release channel, ARGV[3] '1' to leave the wait queue too ('0' keeps
-- the place: a Redlock attempt that failed its majority keeps waiting in line)
-- Publishes the owner id of the first waiter (or '' when none queued), so that only it retries.
-- Returns 1 when this owner's lock was deleted, 0 when it was not ours (or already gone).
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('PUBLISH', ARGV[2], redis.call('ZRANGE', KEYS[3], 0, 0)[1] or '')
  return 1
end
return 0
