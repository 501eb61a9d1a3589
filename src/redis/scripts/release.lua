-- Compare-and-delete, optionally leave the wait queue, then wake the first waiter in line.
-- KEYS[1] lock key, KEYS[2] holder info, KEYS[3] queue, KEYS[4] queue expiry,
-- KEYS[5] queue wake channels, KEYS[6] the tombstone of ARGV[3] (acquire.lua)
-- ARGV[1] owner id (the waiter's place in the queue), ARGV[2] '1' to leave the wait queue too
-- ('0' keeps the place: a Redlock attempt that failed its majority keeps waiting in line),
-- ARGV[3] the lock value of the grant or attempt to release ('' when there is none: an
-- acquisition that gives up only leaves the queue). Values are fresh per attempt, so a late
-- release of an earlier attempt never deletes a later grant.
-- ARGV[4] how long to keep a tombstone in ms ('0': none): when the lock does not hold ARGV[3],
-- the attempt's acquire may still be on its way (sent on a connection the client gave up on:
-- a delaying proxy, a server that had not read it yet); the tombstone makes it do nothing when it
-- runs, instead of taking the lock for nobody.
-- When the lock is free after this, wakes the first live waiter in line whose Client hears it
-- (queue.lua) on that Client's own wake channel, and the waiter after it as a standby: one
-- release wakes one waiter to take the lock (the standby's try finds it kept for the first). A
-- leave of a free lock wakes them too (the one leaving may have been the one woken).
-- Returns 1 when the lock was deleted, 0 when it was not this value's (or already gone).
--@include queue.lua
local function wake_first()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if fencelock_queue_wake_first(KEYS[3], KEYS[4], KEYS[5], KEYS[1], now, nil) then
    fencelock_queue_wake_standby(KEYS[5], KEYS[3], KEYS[1])
  end
end
if ARGV[2] == '1' then
  local left = redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
  if left == 1 and ARGV[3] == '' and redis.call('EXISTS', KEYS[1]) == 0 then
    wake_first()
  end
end
-- GET through pcall: a lock key someone replaced with another type is not this value's (a
-- WRONGTYPE error reply would have the release sent again for the tombstone's whole life).
if ARGV[3] ~= '' and redis.pcall('GET', KEYS[1]) == ARGV[3] then
  redis.call('DEL', KEYS[1], KEYS[2])
  wake_first()
  return 1
end
if ARGV[3] ~= '' and ARGV[4] ~= '0' and redis.call('PTTL', KEYS[6]) < tonumber(ARGV[4]) then
  redis.call('SET', KEYS[6], '1', 'PX', ARGV[4])
end
return 0
