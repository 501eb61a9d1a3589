-- Advisory locks on bigint keys held by sessions that no fencelock client noted (psql's
-- pg_advisory_lock(12345), another library): for a list without a prefix. A bigint key shows in
-- pg_locks as classid = high half, objid = low half, objsubid = 1 (two-int4 keys, objsubid = 2,
-- are another key space, which fencelock never uses).
SELECT ((l.classid::bigint << 32) | l.objid::bigint)::text, l.pid,
       coalesce(a.application_name, ''), coalesce(a.client_addr::text, 'local')
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND NOT EXISTS (SELECT 1 FROM fencelock_advisory_holders h
                    WHERE h.pid = l.pid AND h.key = ((l.classid::bigint << 32) | l.objid::bigint))
 ORDER BY 1
