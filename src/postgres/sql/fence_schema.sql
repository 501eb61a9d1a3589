-- The PostgreSQL fence (include/fencelock/fence.h). Idempotent.
-- Tokens are numeric(20,0): every uint64 fits (bigint stops at 2^63 - 1).
CREATE TABLE IF NOT EXISTS fencelock_fences (
  resource text PRIMARY KEY,
  token numeric(20, 0) NOT NULL
);
-- Call inside the transaction that writes the resource, before the write:
--   BEGIN; SELECT fencelock_fence('accounts/42', 1234); UPDATE accounts ...; COMMIT;
-- Records the token when it is >= the highest seen and keeps the fence row locked until the
-- transaction ends (a concurrent writer waits, then sees the new highest). A stale token raises
-- SQLSTATE FL001 'rejected: stale token N < M' and the transaction aborts.
CREATE OR REPLACE FUNCTION fencelock_fence(p_resource text, p_token numeric)
RETURNS numeric LANGUAGE plpgsql AS $$
DECLARE
  highest numeric;
BEGIN
  INSERT INTO fencelock_fences AS f (resource, token) VALUES (p_resource, p_token)
  ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token
  RETURNING f.token INTO highest;
  IF highest IS NULL THEN
    SELECT f.token INTO highest FROM fencelock_fences f WHERE f.resource = p_resource;
    RAISE EXCEPTION 'rejected: stale token % < %', p_token, highest USING ERRCODE = 'FL001';
  END IF;
  RETURN highest;
END
$$;
