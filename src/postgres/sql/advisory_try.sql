-- Try the session-level advisory lock once; only if granted, draw the token in the same
-- statement and note the holder. Nothing is tried while the token sequence has no valid epoch
-- (advisory_epoch_bump.sql: its last value at least 2^40, its count below 2^40 - 2^32).
-- $1 advisory key (bigint), $2 lock name, $3 owner id, $4 ttl in ms, $5 holder metadata (JSON),
-- $6 the session's mark (session_pool.h): nothing is tried in a server session without it.
-- Returns one row: the token, or NULL when the lock is held by another session or nothing was
-- tried; whether the statement ran in the marked session (false: a pooler moved it, nothing was
-- tried); whether the sequence had a valid epoch (false: nothing was tried; raise it and try
-- again).
WITH valid AS MATERIALIZED (
  SELECT coalesce(v >= 1099511627776 AND v & 1099511627775 < 1095216660480, false) AS ok
    FROM pg_sequence_last_value('fencelock_advisory_tokens') AS v
),
     granted AS (
  SELECT pg_try_advisory_lock($1::bigint) AS ok
   WHERE current_setting('fencelock.session', true) = $6 AND (SELECT ok FROM valid)
),
     token AS (SELECT nextval('fencelock_advisory_tokens') AS value FROM granted WHERE ok),
     noted AS (
       INSERT INTO fencelock_advisory_holders AS h (key, name, owner, token, ttl_ms, holder, pid)
       SELECT $1::bigint, $2, $3, value, $4::bigint, $5::jsonb, pg_backend_pid() FROM token
       ON CONFLICT (key) DO UPDATE
         SET name = EXCLUDED.name, owner = EXCLUDED.owner, token = EXCLUDED.token,
             ttl_ms = EXCLUDED.ttl_ms, holder = EXCLUDED.holder, pid = EXCLUDED.pid)
SELECT (SELECT value FROM token), current_setting('fencelock.session', true) IS NOT DISTINCT FROM $6,
       (SELECT ok FROM valid)
