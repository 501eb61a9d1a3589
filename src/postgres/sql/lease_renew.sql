-- Renew every lease of one Client in one statement.
-- $1 JSON array of {"name","owner","ttl"}; returns the (name, owner) pairs renewed. The owner id
-- is unique per grant (128 random bits), so comparing it is comparing the grant; the caller
-- matches both, since one batch may hold a lost grant and a newer one of the same name.
-- The commit is durable before the holder counts on it, as in lease_acquire.sql: a renewal that
-- a crash took back would let the lease expire on the server before the holder's validity ends
-- (through a pooler in transaction mode fencelock's session setting does not apply).
WITH durable AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'on', true)
   WHERE current_setting('synchronous_commit') IN ('off', 'local')
), renewed AS (
  UPDATE fencelock_leases AS l
     SET expires_at = clock_timestamp() + v.ttl * interval '1 millisecond'
    FROM json_to_recordset($1::json) AS v(name text, owner text, ttl bigint)
   WHERE l.name = v.name AND l.owner = v.owner
     AND l.expires_at > clock_timestamp()
  RETURNING l.name, l.owner
)
SELECT name, owner FROM renewed WHERE (SELECT count(*) FROM durable) >= 0
