-- Fencing tokens in every fencelock script: one comparison rule (and the fence scripts' common
-- start), included by cmake/embed_generate.cmake where a script asks for this file on a line of
-- its own.
-- A token is a canonical decimal string: '0' or [1-9][0-9]*, at most 20 digits and at most
-- 18446744073709551615 (every uint64, nothing else: no sign, no leading zeros, no spaces).
-- Canonical strings compare exactly by length, then byte by byte; Lua numbers are doubles and
-- are exact only up to 2^53, so tonumber() is never used on a token.
local FENCELOCK_MAX_TOKEN = '18446744073709551615'

local function fencelock_is_token(s)
  if type(s) ~= 'string' or #s == 0 or #s > 20 then
    return false
  end
  if s == '0' then
    return true
  end
  if not string.find(s, '^[1-9][0-9]*$') then
    return false
  end
  return #s < 20 or s <= FENCELOCK_MAX_TOKEN
end

-- true when canonical token a is older than canonical token b.
local function fencelock_token_less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

-- Raises a script error unless s is a canonical token; `what` names it in the message.
local function fencelock_check_token(s, what)
  if not fencelock_is_token(s) then
    error('fencelock: ' .. what .. ' is not a canonical decimal token (0 or 1-9 then digits, '
      .. 'at most 18446744073709551615): ' .. string.sub(tostring(s), 1, 40))
  end
  return s
end

-- The start of both fence scripts (fence_set.lua, fence_get.lua): KEYS[1] must be a data key
-- outside fencelock's own namespace (writing a fence record, lock key or counter would reset it).
-- Returns the presented token ARGV[1] and the highest token admitted for KEYS[1] (its record
-- KEYS[2]), both checked.
local function fencelock_fence_start(keys, argv)
  if string.sub(keys[1], 1, 10) == 'fencelock:' then
    error('fencelock: the data key ' .. string.sub(keys[1], 1, 60) .. ' is in fencelock\'s own '
      .. 'namespace (fencelock:); choose another name')
  end
  return fencelock_check_token(argv[1], 'the presented token'),
    fencelock_check_token(redis.call('GET', keys[2]) or '0', 'the fence record ' .. keys[2])
end
