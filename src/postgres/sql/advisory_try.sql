-- Try the session-level advisory lock once; only if granted, draw the token in the same
-- statement and note the holder. Nothing is tried without a valid count (a row in
-- fencelock_advisory_live below 2^40 - 2^32; advisory_epoch_raise.sql and advisory_epoch_live.sql make one).
-- $1 advisory key (bigint), $2 lock name, $3 owner id, $4 ttl in ms, $5 holder metadata (JSON),
-- $6 the session's mark (session_pool.h): nothing is tried in a server session without it.
-- Returns one row: the token, or NULL when the lock is held by another session or nothing was
-- tried; whether the statement ran in the marked session (false: a pooler moved it, nothing was
-- tried); whether there was a valid count (false: nothing was tried; raise the epoch and try
-- again); whether the lock was granted (with a NULL token: the count row vanished in between, the
-- lock must be given back). The token is epoch * 2^40 + count, the count raised after the grant.
WITH valid AS MATERIALIZED (
  SELECT EXISTS (SELECT 1 FROM fencelock_advisory_live WHERE id = 1 AND count < 1095216660480) AS ok
),
     granted AS MATERIALIZED (
  SELECT pg_try_advisory_lock($1::bigint) AS ok
   WHERE current_setting('fencelock.session', true) = $6 AND (SELECT ok FROM valid)
),
     token AS (
  UPDATE fencelock_advisory_live SET count = count + 1
   WHERE id = 1 AND coalesce((SELECT ok FROM granted), false)
  RETURNING (epoch << 40) + count AS value
),
     noted AS (
       INSERT INTO fencelock_advisory_holders AS h (key, name, owner, token, ttl_ms, holder, pid)
       SELECT $1::bigint, $2, $3, value, $4::bigint, $5::jsonb, pg_backend_pid() FROM token
       ON CONFLICT (key) DO UPDATE
         SET name = EXCLUDED.name, owner = EXCLUDED.owner, token = EXCLUDED.token,
             ttl_ms = EXCLUDED.ttl_ms, holder = EXCLUDED.holder, pid = EXCLUDED.pid)
SELECT (SELECT value FROM token), current_setting('fencelock.session', true) IS NOT DISTINCT FROM $6,
       (SELECT ok FROM valid), coalesce((SELECT ok FROM granted), false)
