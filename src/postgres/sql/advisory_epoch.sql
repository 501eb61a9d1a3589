-- Upgrades a database of an earlier version to advisory mode's epoch tokens (docs/PROTOCOLS.md,
-- advisory "Tokens"): the epoch table, the unlogged count, and the holders table UNLOGGED, so
-- that no grant writes WAL that must be flushed. Run by postgres_backend.cpp where
-- catalog_advisory_epoch.sql says it is needed, and by `fencelock migrate`.
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
ALTER TABLE fencelock_advisory_holders SET UNLOGGED;
COMMIT;
