-- Where advisory mode's epoch tokens stand (advisory_epoch.sql). One row: whether the epoch and
-- live tables exist; the persistence of the holders table ('p' logged, 'u' unlogged).
SELECT to_regclass('fencelock_advisory_epoch') IS NOT NULL
       AND to_regclass('fencelock_advisory_live') IS NOT NULL,
       (SELECT relpersistence FROM pg_class WHERE oid = to_regclass('fencelock_advisory_holders'))
