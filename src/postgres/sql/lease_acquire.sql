-- Take the lease if it is free or expired, by the server's clock only.
-- $1 name, $2 owner id, $3 ttl in ms, $4 holder metadata (JSON), $5 this run's id
-- Returns one row: the new token (NULL when held, 0 when the row was missing), the holder's
-- remaining ms (when held), and a count that only makes the durability setting run.
-- Every token is drawn in the UPDATE branch, after the key's row was locked and seen to be
-- expired, so it exceeds the token of every grant completed before (also after an admin deleted
-- the row or the server's clock stepped forward). A missing row gets an expired placeholder
-- (token 0, no owner): no grant; the caller runs this statement again, which then takes the
-- UPDATE branch. (A token drawn in VALUES, before the row exists and is locked, could be granted
-- after a faster insert with a larger token had been granted and its row deleted.)
-- A late run of this statement after the client gave up on it and released it with its outcome
-- unknown (lease_release_unknown.sql recorded the run's id in `released`, under the same row
-- lock) grants nothing.
-- The commit is durable before the token is handed out: synchronous_commit is raised to on for
-- this transaction where it is off or local. Pinned for the session too where the session is
-- fencelock's own (pg_connection.h); this covers a pooler in transaction mode, where it is not.
WITH durable AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'on', true)
   WHERE current_setting('synchronous_commit') IN ('off', 'local')
), granted AS (
  INSERT INTO fencelock_leases AS l (name, owner, token, expires_at, holder)
  VALUES ($1, '', 0, 'epoch', NULL)
  ON CONFLICT (name) DO UPDATE
    SET owner = $2, token = nextval('fencelock_tokens'),
        expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond', holder = $4::jsonb
    WHERE l.expires_at <= clock_timestamp() AND NOT coalesce(l.released ? $5::text, false)
  RETURNING token
)
SELECT (SELECT token FROM granted),
       (SELECT ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
          FROM fencelock_leases WHERE name = $1),
       (SELECT count(*) FROM durable)
