-- Take the lease if it is free or expired, by the server's clock only.
-- $1 name, $2 owner id, $3 ttl in ms, $4 holder metadata (JSON)
-- Returns one row: the new token (NULL when held) and the holder's remaining ms (when held).
-- The token of a takeover is drawn in the UPDATE itself, after the previous holder's row was
-- locked and seen to be expired, so it exceeds every earlier grant's token. The VALUES token is
-- used only by the very first grant of a key (rows are never deleted: see lease_release.sql).
-- The commit is durable before the token is handed out: synchronous_commit is raised to on for
-- this transaction where it is off or local. Pinned for the session too where the session is
-- fencelock's own (pg_connection.h); this covers a pooler in transaction mode, where it is not.
WITH durable AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'on', true)
   WHERE current_setting('synchronous_commit') IN ('off', 'local')
), granted AS (
  INSERT INTO fencelock_leases AS l (name, owner, token, expires_at, holder)
  VALUES ($1, $2, nextval('fencelock_tokens'), clock_timestamp() + $3::bigint * interval '1 millisecond', $4::jsonb)
  ON CONFLICT (name) DO UPDATE
    SET owner = EXCLUDED.owner, token = nextval('fencelock_tokens'),
        expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond', holder = EXCLUDED.holder
    WHERE l.expires_at <= clock_timestamp()
  RETURNING token
)
SELECT (SELECT token FROM granted),
       (SELECT ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
          FROM fencelock_leases WHERE name = $1),
       (SELECT count(*) FROM durable)
