-- After a blocking pg_advisory_lock() was granted on this session: draw the token (after the
-- grant, so tokens follow grant order) and note the holder.
-- $1 advisory key (bigint), $2 lock name, $3 owner id, $4 ttl in ms, $5 holder metadata (JSON),
-- $6 the session's mark (session_pool.h). Returns the token, or NULL (nothing drawn or noted)
-- when the statement ran in a server session without the mark or there was no valid count; and
-- whether there was one (false: raise the epoch, advisory_epoch_raise.sql, and run this again; the
-- session still holds the lock).
WITH valid AS MATERIALIZED (
  SELECT EXISTS (SELECT 1 FROM fencelock_advisory_live WHERE id = 1 AND count < 1095216660480) AS ok
),
     token AS (
  UPDATE fencelock_advisory_live SET count = count + 1
   WHERE id = 1 AND current_setting('fencelock.session', true) = $6 AND (SELECT ok FROM valid)
  RETURNING (epoch << 40) + count AS value
),
     noted AS (
       INSERT INTO fencelock_advisory_holders AS h (key, name, owner, token, ttl_ms, holder, pid)
       SELECT $1::bigint, $2, $3, value, $4::bigint, $5::jsonb, pg_backend_pid() FROM token
       ON CONFLICT (key) DO UPDATE
         SET name = EXCLUDED.name, owner = EXCLUDED.owner, token = EXCLUDED.token,
             ttl_ms = EXCLUDED.ttl_ms, holder = EXCLUDED.holder, pid = EXCLUDED.pid)
SELECT (SELECT value FROM token), (SELECT ok FROM valid)
