-- Release an attempt whose outcome is unknown (its acquire was sent; no answer came in time),
-- then wake waiters. $1 name, $2 owner id, $3 how long (ms) a late run of the acquire is refused,
-- $4 the id of that run of lease_acquire.sql.
-- The acquire may still be on its way (a slow network, a stalled session) and run after this
-- statement. Both lock the key's row (this one creates it, expired, if it is missing), so one of
-- them runs after the other has committed: if the acquire granted first, the grant is freed here;
-- if this runs first, the run's id recorded in `released` makes the acquire's UPDATE branch (the
-- only one that grants; lease_acquire.sql) refuse it. Entries whose time has passed are dropped.
-- Durable, as lease_release.sql.
WITH durable AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'on', true)
   WHERE current_setting('synchronous_commit') IN ('off', 'local')
), marked AS (
  INSERT INTO fencelock_leases AS l (name, owner, token, expires_at, holder, released)
  VALUES ($1, '', 0, 'epoch', NULL,
          jsonb_build_object($4::text,
            floor(extract(epoch FROM clock_timestamp()) * 1000) + $3::bigint))
  ON CONFLICT (name) DO UPDATE
    SET owner = CASE WHEN l.owner = $2 THEN '' ELSE l.owner END,
        expires_at = CASE WHEN l.owner = $2 THEN 'epoch' ELSE l.expires_at END,
        holder = CASE WHEN l.owner = $2 THEN NULL ELSE l.holder END,
        released = coalesce((SELECT jsonb_object_agg(e.key, e.value)
                               FROM jsonb_each(l.released) AS e
                              WHERE (e.value #>> '{}')::numeric
                                    > extract(epoch FROM clock_timestamp()) * 1000), '{}'::jsonb)
                   || EXCLUDED.released
  RETURNING name
)
SELECT pg_notify('fencelock_release', name) FROM marked WHERE (SELECT count(*) FROM durable) >= 0
