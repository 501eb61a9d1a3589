-- Fencing counters seeded from the server's clock (docs/PROTOCOLS.md, "Tokens after data loss"),
-- included by acquire.lua after tokens.lua (cmake/embed_generate.cmake).
-- The next counter of a lock is max(stored + 1, server_ms * 2^20): a counter that lost its data
-- (a restart without persistence, a failover to a replica that missed the newest writes) starts
-- above every token issued before the loss, as long as the loss lasted longer than the clocks
-- can disagree. 20 bits below the milliseconds leave room for 2^20 grants of one key per
-- millisecond (far more than one Redis can run); the milliseconds above them last until the year
-- 2248 within Redis's signed 64-bit integers.
local FENCELOCK_GRANTS_PER_MS = 1048576 -- 2^20

-- The canonical decimal text of a canonical token plus one (exact: no Lua numbers, which are
-- doubles). REQUIRES: s is below the largest token (fencelock_counter_start checked it).
local function fencelock_token_increment(s)
  local digits = {string.byte(s, 1, -1)}
  local i = #digits
  while i >= 1 and digits[i] == 57 do -- '9' carries
    digits[i] = 48
    i = i - 1
  end
  if i == 0 then
    return '1' .. string.char(unpack(digits))
  end
  digits[i] = digits[i] + 1
  return string.char(unpack(digits))
end

-- Reads and checks everything the next counter depends on, before the calling script writes
-- anything (a script error does not undo the writes before it): the counter stored at `key`
-- (false when absent; a script error unless it is a canonical token this instance could have
-- issued) and
-- the clock floor at server time now_ms, now_ms * 2^20 as canonical text. The floor is exact: the
-- milliseconds are an integer below 2^53 and the product a power of two times it, below 2^63
-- (checked), which string.format('%d') prints without rounding.
local function fencelock_counter_start(key, now_ms)
  if now_ms < 0 or now_ms >= 8796093022208 then -- 2^43 ms: the year 2248
    error('fencelock: the server clock reads ' .. tostring(now_ms) .. ' ms since 1970, outside '
      .. 'what clock-seeded fencing counters can represent; set the server clock right')
  end
  local stored = redis.call('GET', key)
  local floor = string.format('%d', now_ms * FENCELOCK_GRANTS_PER_MS)
  if stored then
    fencelock_check_token(stored, 'the fence counter ' .. key)
    -- No counter this instance issued can be 2^63 or more (the clock check above), nor more than
    -- a day ahead of its clock: such a value was written by someone else, and taking it would
    -- let one instance push every later token (round 2 copies the largest) up to the largest
    -- 64-bit token, where no key can be granted again. The instance fails this round instead.
    local day_ahead = string.format('%d', (now_ms + 86400000) * FENCELOCK_GRANTS_PER_MS)
    if #stored == 20 or (#stored == 19 and stored >= '9223372036854775808')
        or fencelock_token_less(day_ahead, stored) then
      error('fencelock: the fence counter ' .. key .. ' holds ' .. stored .. ', which this '
        .. 'instance cannot have issued (2^63 or more, or over a day ahead of its clock): someone '
        .. 'else wrote it. Once nobody holds the lock, delete it on this instance (DEL ' .. key
        .. '); the clock floor and the other instances keep later tokens increasing')
    end
  end
  return stored, floor
end

-- Stores and returns the next token, max(stored + 1, floor) (the values fencelock_counter_start
-- returned), and how many milliseconds the stored counter was ahead of this server's clock (0
-- when the floor decided): a large lead means the clock stepped back, another instance's clock
-- runs ahead (its counters reached this one through round 2), or someone else wrote the counter.
local function fencelock_counter_advance(key, stored, floor, now_ms)
  if not stored or fencelock_token_less(stored, floor) then
    redis.call('SET', key, floor)
    return floor, 0
  end
  local token = fencelock_token_increment(stored)
  redis.call('SET', key, token)
  return token, math.max(math.floor(tonumber(stored) / FENCELOCK_GRANTS_PER_MS) - now_ms, 0)
end
