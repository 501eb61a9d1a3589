-- Whether the lease table has the column `released` (lease_release_unknown.sql), which lease
-- tables made by versions before it lack (one boolean).
SELECT EXISTS (SELECT 1 FROM pg_attribute
                WHERE attrelid = to_regclass('fencelock_leases') AND attname = 'released'
                  AND NOT attisdropped)
