-- Fence records (include/fencelock/fence.h), for fence_set.lua and fence_get.lua, included by
-- the build after tokens.lua. The record KEYS[2] of data key KEYS[1] is '<token>' (unnamed:
-- written with a bare token, or before records named their issuer) or '<token> <issuer>' (the
-- lock that issued the token: 1..32768 bytes of printable ASCII, Fencing::issuer). No record is
-- the same as the unnamed record '0'. The one rule (src/core/fence_issuer.h, judge_fencing): a
-- named record refuses the token of another issuer and a bare token; then an older token is
-- stale; an unnamed record is named by the first named token that passes.
local FENCELOCK_MAX_ISSUER = 32768

local function fencelock_is_issuer(s)
  return type(s) == 'string' and #s <= FENCELOCK_MAX_ISSUER and string.find(s, '^[ -~]*$') ~= nil
end

-- Checks the data key (outside fencelock's namespace: a write to a fence record, lock key or
-- counter would reset it), the presented token and issuer (absent: '') and the record.
-- Returns the token, the issuer, the record's highest token and the record's issuer.
local function fencelock_fence_open(keys, token, issuer)
  if string.sub(keys[1], 1, 10) == 'fencelock:' then
    error('fencelock: the data key ' .. string.sub(keys[1], 1, 60) .. ' is in fencelock\'s own '
      .. 'namespace (fencelock:); choose another name')
  end
  -- The record is the data key's own: a caller of RedisFence::script() that named another key
  -- as KEYS[2] would compare its token with that key's record and bypass the real one.
  if keys[2] ~= 'fencelock:fence:' .. keys[1] then
    error('fencelock: the fence record of ' .. string.sub(keys[1], 1, 60) .. ' is '
      .. 'fencelock:fence:' .. string.sub(keys[1], 1, 60) .. ', not the record key passed as '
      .. 'KEYS[2]')
  end
  fencelock_check_token(token, 'the presented token')
  issuer = issuer or ''
  if not fencelock_is_issuer(issuer) then
    error('fencelock: the presented issuer is not printable ASCII of at most '
      .. FENCELOCK_MAX_ISSUER .. ' bytes')
  end
  local record = redis.call('GET', keys[2])
  if not record then
    return token, issuer, '0', ''
  end
  local space = string.find(record, ' ', 1, true)
  if not space then
    return token, issuer, fencelock_check_token(record, 'the fence record ' .. keys[2]), ''
  end
  local highest = string.sub(record, 1, space - 1)
  local recorded = string.sub(record, space + 1)
  fencelock_check_token(highest, 'the token of the fence record ' .. keys[2])
  if recorded == '' or not fencelock_is_issuer(recorded) then
    error('fencelock: the fence record ' .. keys[2] .. ' names no valid issuer after its token')
  end
  return token, issuer, highest, recorded
end

-- nil when the token passes, else the reply: {0, highest} stale, {2, highest, record's issuer}
-- another lock's token (or a bare token against a named record).
local function fencelock_fence_refusal(token, issuer, highest, recorded)
  if recorded ~= '' and recorded ~= issuer then
    return {2, highest, recorded}
  end
  if fencelock_token_less(token, highest) then
    return {0, highest}
  end
  return nil
end

-- The record that admits `token` of `issuer`.
local function fencelock_fence_record(token, issuer)
  if issuer == '' then
    return token
  end
  return token .. ' ' .. issuer
end
