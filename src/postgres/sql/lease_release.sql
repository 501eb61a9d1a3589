-- Compare owner and free the lease, then wake waiters (delivered when the statement commits).
-- $1 name, $2 owner id
-- The row is kept (expired, not deleted): once a key has a row, every later grant goes through
-- the UPDATE of lease_acquire.sql and draws its token after the row lock, so a statement that
-- drew a token early and stalled can never insert it after a later grant.
WITH freed AS (
  UPDATE fencelock_leases SET expires_at = 'epoch', owner = '', holder = NULL
   WHERE name = $1 AND owner = $2
  RETURNING name
)
SELECT pg_notify('fencelock_release', name) FROM freed
