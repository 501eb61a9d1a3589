-- Advisory mode's epoch tokens (docs/PROTOCOLS.md, advisory "Tokens"): the durable epoch and the
-- unlogged count. Run by postgres_backend.cpp (ensure_advisory_epoch) where
-- catalog_advisory_epoch.sql says they are missing, and by `fencelock migrate`; a holders table
-- of an earlier version is then made UNLOGGED apart (it may belong to another role).
BEGIN;
SET LOCAL client_min_messages = warning;  -- no "already exists, skipping" notices
CREATE TABLE IF NOT EXISTS fencelock_advisory_epoch (
  id    smallint PRIMARY KEY CHECK (id = 1),
  epoch bigint NOT NULL CHECK (epoch >= 0)
);
CREATE UNLOGGED TABLE IF NOT EXISTS fencelock_advisory_live (
  id    smallint PRIMARY KEY CHECK (id = 1),
  epoch bigint NOT NULL CHECK (epoch > 0),
  count bigint NOT NULL CHECK (count >= 0)
);
COMMIT;
