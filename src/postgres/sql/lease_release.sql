-- Compare owner and free the lease, then wake waiters (delivered when the statement commits).
-- $1 name, $2 owner id
-- The row is kept (expired, not deleted): once a key has a row, every later grant goes through
-- the UPDATE of lease_acquire.sql and draws its token after the row lock, so a statement that
-- drew a token early and stalled can never insert it after a later grant.
-- The commit is durable, as in lease_acquire.sql: a release that a crash took back would keep
-- the freed lock from everyone for its TTL.
WITH durable AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'on', true)
   WHERE current_setting('synchronous_commit') IN ('off', 'local')
), freed AS (
  UPDATE fencelock_leases SET expires_at = 'epoch', owner = '', holder = NULL
   WHERE name = $1 AND owner = $2
  RETURNING name
)
SELECT pg_notify('fencelock_release', name) FROM freed WHERE (SELECT count(*) FROM durable) >= 0
