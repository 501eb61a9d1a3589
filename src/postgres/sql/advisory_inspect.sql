-- Locks held now by fencelock clients: noted holders whose session still holds the advisory key
-- (a bigint key shows in pg_locks as classid = high half, objid = low half, objsubid = 1).
-- $1 name (or prefix), $2 true for an exact name
SELECT h.name, h.owner, h.token, h.ttl_ms,
       jsonb_set(coalesce(h.holder, '{}'::jsonb), '{advisory_key}', to_jsonb(h.key))::text
  FROM fencelock_advisory_holders h
  JOIN pg_locks l
    ON l.locktype = 'advisory' AND l.granted AND l.pid = h.pid AND l.objsubid = 1
   AND l.classid = ((h.key >> 32) & 4294967295)::oid AND l.objid = (h.key & 4294967295)::oid
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
 WHERE CASE WHEN $2::bool THEN h.name = $1 ELSE starts_with(h.name, $1) END
 ORDER BY h.name
