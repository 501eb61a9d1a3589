-- fencelock's objects that already exist and belong to a role the migrating role may not trust:
-- no superuser, and neither the migrating role itself nor one it is a member of (pg_has_role()
-- would be true for every role when the migrating role is a superuser). Rows: kind, name,
-- owner, the migrating role; the first is reported.
WITH RECURSIVE mine(oid) AS (
  SELECT oid FROM pg_roles WHERE rolname = current_user
  UNION SELECT m.roleid FROM pg_auth_members m JOIN mine ON m.member = mine.oid)
SELECT o.kind, o.name, pg_get_userbyid(o.owner), current_user
  FROM (SELECT CASE c.relkind WHEN 'S' THEN 'sequence' ELSE 'table' END AS kind,
               c.relname::text AS name, c.relowner AS owner
          FROM pg_class c
         WHERE c.oid IN (to_regclass('fencelock_leases'), to_regclass('fencelock_tokens'),
                         to_regclass('fencelock_advisory_tokens'),
                         to_regclass('fencelock_advisory_holders'),
                         to_regclass('fencelock_advisory_epoch'),
                         to_regclass('fencelock_advisory_live'),
                         to_regclass('fencelock_fences'))
        UNION ALL
        SELECT 'function', p.proname::text, p.proowner
          FROM pg_proc p
         WHERE p.oid IN (to_regprocedure('fencelock_fence(text,numeric)'),
                         to_regprocedure('fencelock_fence(text,numeric,text)'))) o
  JOIN pg_roles r ON r.oid = o.owner
 WHERE NOT r.rolsuper AND o.owner NOT IN (SELECT oid FROM mine)
 ORDER BY 2
