-- Held leases whose name starts with $1 (exactly $1 when $2 is true), by server time.
SELECT name, owner, token,
       ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint,
       coalesce(holder::text, '')
  FROM fencelock_leases
 WHERE expires_at > clock_timestamp()
   AND (CASE WHEN $2::bool THEN name = $1 ELSE starts_with(name, $1) END)
 ORDER BY name
