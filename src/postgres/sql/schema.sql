-- fencelock lease-mode schema (DESIGN.md 3.2). Idempotent: safe to run on every start.
-- Tokens come from one sequence: strictly increasing across all grants, so per key too.
CREATE SEQUENCE IF NOT EXISTS fencelock_tokens;
CREATE TABLE IF NOT EXISTS fencelock_leases (
  name       text PRIMARY KEY,
  owner      text NOT NULL,
  token      bigint NOT NULL,
  expires_at timestamptz NOT NULL,
  holder     jsonb,
  released   jsonb
)
;
-- `released`: ids of acquire runs (lease_acquire.sql) released while their outcome was unknown,
-- each with the server time (epoch ms) until which a late execution of that run grants nothing.
-- A table made before it gets it from a lease-mode Client or `fencelock migrate`
-- (postgres_backend.cpp, kAddReleased).
-- Advisory mode: who holds which advisory key (for inspect/list; a row counts only while pg_locks
-- shows its session holding the key, so rows of dead sessions are harmless), and the tokens:
-- epoch * 2^40 + a count (docs/PROTOCOLS.md, advisory "Tokens"). The epoch grows durably in
-- fencelock_advisory_epoch; the count in the UNLOGGED fencelock_advisory_live, which a crash or a
-- standby's promotion empties (the next grant then raises the epoch): no grant waits for a WAL
-- flush; advisory_epoch.sql makes the two tables (advisory mode and migrate run it after this).
-- fencelock_advisory_tokens drew the tokens of earlier versions; the first epoch starts above
-- them.
CREATE SEQUENCE IF NOT EXISTS fencelock_advisory_tokens;
CREATE UNLOGGED TABLE IF NOT EXISTS fencelock_advisory_holders (
  key    bigint PRIMARY KEY,
  name   text NOT NULL,
  owner  text NOT NULL,
  token  bigint NOT NULL,
  ttl_ms bigint NOT NULL,
  holder jsonb,
  pid    integer NOT NULL
)

