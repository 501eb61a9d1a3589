-- Any session holding the advisory key (e.g. psql's pg_advisory_lock(12345)): for inspect of a
-- key that no fencelock client noted. $1 advisory key (bigint)
SELECT l.pid, coalesce(a.application_name, ''), coalesce(a.client_addr::text, 'local')
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
   AND l.classid = (($1::bigint >> 32) & 4294967295)::oid AND l.objid = ($1::bigint & 4294967295)::oid
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
 LIMIT 1
