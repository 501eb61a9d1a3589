-- Where advisory mode's epoch tokens stand (advisory_epoch.sql). One row: whether the epoch table
-- exists; the persistence ('p' logged, 'u' unlogged) of the token sequence and of the holders
-- table; whether the server can make a sequence unlogged (PostgreSQL 15 and later).
SELECT to_regclass('fencelock_advisory_epoch') IS NOT NULL,
       (SELECT relpersistence FROM pg_class WHERE oid = to_regclass('fencelock_advisory_tokens')),
       (SELECT relpersistence FROM pg_class WHERE oid = to_regclass('fencelock_advisory_holders')),
       current_setting('server_version_num')::int >= 150000
