-- fencelock lease-mode schema (DESIGN.md 3.2). Idempotent: safe to run on every start.
-- Tokens come from one sequence: strictly increasing across all grants, so per key too.
CREATE SEQUENCE IF NOT EXISTS fencelock_tokens;
CREATE TABLE IF NOT EXISTS fencelock_leases (
  name       text PRIMARY KEY,
  owner      text NOT NULL,
  token      bigint NOT NULL,
  expires_at timestamptz NOT NULL,
  holder     jsonb
)
