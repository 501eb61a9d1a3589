-- Makes advisory mode's grants write nothing to the WAL (docs/PROTOCOLS.md, advisory "Tokens"):
-- the epoch table, and the token sequence and the holders table UNLOGGED. A crash, or a standby's
-- promotion, resets both to empty (the sequence to its start, which advisory_try.sql reads as "no
-- epoch"); the next grant then raises the epoch (advisory_epoch_bump.sql) above every token
-- handed out before. One transaction: never an unlogged sequence beside a logged table's flushes
-- alone, nor the reverse. Run by advisory_backend.cpp where catalog_advisory_epoch.sql says it is
-- needed and the server is PostgreSQL 15 or later, and by `fencelock migrate`.
BEGIN;
CREATE TABLE IF NOT EXISTS fencelock_advisory_epoch (
  id    smallint PRIMARY KEY CHECK (id = 1),
  epoch bigint NOT NULL CHECK (epoch >= 0)
);
ALTER SEQUENCE fencelock_advisory_tokens SET UNLOGGED;
ALTER TABLE fencelock_advisory_holders SET UNLOGGED;
COMMIT;
