-- Whether fencelock's tables and sequences exist in the schema this session uses (one boolean).
SELECT to_regclass('fencelock_leases') IS NOT NULL
   AND to_regclass('fencelock_tokens') IS NOT NULL
   AND to_regclass('fencelock_advisory_tokens') IS NOT NULL
   AND to_regclass('fencelock_advisory_holders') IS NOT NULL
