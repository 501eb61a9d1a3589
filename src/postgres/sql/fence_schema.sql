-- The PostgreSQL fence (include/fencelock/fence.h). Idempotent; run by the role that is to own
-- the fence (an administrator), in the schema it belongs in (the first one of search_path).
-- Tokens are numeric(20,0): every uint64 fits (bigint stops at 2^63 - 1).
--
-- Privileges: writers get no right on the table, only EXECUTE on the function, which runs as its
-- owner (SECURITY DEFINER) with search_path pinned to pg_catalog, the fence's schema, then
-- pg_temp (so no object a caller creates can stand in for the table or an operator). So no
-- writer can lower a token (UPDATE ... SET token = 0 is refused); only the owner can. EXECUTE is
-- granted explicitly: GRANT EXECUTE ON FUNCTION fencelock_fence(text, numeric) TO writer_role.
--
-- Call inside the transaction that writes the resource, before the write:
--   BEGIN; SELECT fencelock_fence('accounts/42', 1234); UPDATE accounts ...; COMMIT;
-- Records the token when it is >= the highest seen and keeps the fence row locked until the
-- transaction ends (a concurrent writer waits, then sees the new highest). A stale token raises
-- SQLSTATE FL001 'rejected: stale token N < M' and the transaction aborts.
DO $install$
DECLARE
  s text := current_schema();
BEGIN
  IF s IS NULL THEN
    RAISE EXCEPTION 'no schema to create the fence in: search_path names no existing schema';
  END IF;
  EXECUTE format('CREATE TABLE IF NOT EXISTS %I.fencelock_fences ('
                 'resource text PRIMARY KEY, token numeric(20, 0) NOT NULL)', s);
  EXECUTE format('REVOKE ALL ON TABLE %I.fencelock_fences FROM PUBLIC', s);
  EXECUTE format($create$
    CREATE OR REPLACE FUNCTION %1$I.fencelock_fence(p_resource text, p_token numeric)
    RETURNS numeric LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, %1$I, pg_temp AS $body$
    DECLARE
      highest numeric;
    BEGIN
      INSERT INTO %1$I.fencelock_fences AS f (resource, token) VALUES (p_resource, p_token)
      ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token
      RETURNING f.token INTO highest;
      IF highest IS NULL THEN
        SELECT f.token INTO highest FROM %1$I.fencelock_fences f WHERE f.resource = p_resource;
        RAISE EXCEPTION 'rejected: stale token %% < %%', p_token, highest USING ERRCODE = 'FL001';
      END IF;
      RETURN highest;
    END
    $body$ $create$, s);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.fencelock_fence(text, numeric) FROM PUBLIC', s);
END
$install$;
