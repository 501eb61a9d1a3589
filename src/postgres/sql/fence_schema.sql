-- The PostgreSQL fence (include/fencelock/fence.h). Idempotent; run by the role that is to own
-- the fence (an administrator), in the schema it belongs in (the first one of search_path).
-- Tokens are numeric(20,0): every uint64 fits (bigint stops at 2^63 - 1).
--
-- Privileges: writers get no right on the table, only EXECUTE on the functions, which run as
-- their owner (SECURITY DEFINER) with search_path pinned to pg_catalog, the fence's schema, then
-- pg_temp (so no object a caller creates can stand in for the table or an operator). So no
-- writer can lower a token (UPDATE ... SET token = 0 is refused); only the owner can. EXECUTE is
-- granted explicitly: GRANT EXECUTE ON FUNCTION fencelock_fence(text, numeric, text) TO
-- writer_role (and fencelock_fence(text, numeric) for writers that present bare tokens).
--
-- Call inside the transaction that writes the resource, before the write:
--   BEGIN; SELECT fencelock_fence('accounts/42', 1234, '<issuer>'); UPDATE accounts ...; COMMIT;
-- A token is a whole number from 0 to 18446744073709551615 (anything else: SQLSTATE FL002,
-- nothing recorded). The record remembers the lock that issued its token (issuer, the text of
-- Fencing::issuer; '' for a bare token, the two-argument form, and for rows written before
-- issuers were recorded). A named record refuses the token of another issuer and a bare token
-- (FL003); then a token older than the record's is stale (FL001 'rejected: stale token N < M');
-- an unnamed record is named by the first named token that passes. Otherwise the record takes
-- the token and its row stays locked until the transaction ends (a concurrent writer waits, then
-- sees the new record). A record that holds no token (NaN, a negative number or one above
-- 2^64 - 1, which the first version of this function accepted) is FL004, with the fix.
--
-- Moving a resource to another lock (administrators, as the owner, once every writer of the old
-- lock has stopped): UPDATE fencelock_fences SET token = <newest token of the new lock>,
-- issuer = '<its issuer>' WHERE resource = '...'; or DELETE the row (any lock's next token is
-- then admitted).
--
-- Upgrades: `fencelock migrate` runs this file again when the installed function is not this
-- version (the COMMENT below); every record is kept.
DO $install$
DECLARE
  s text := current_schema();
BEGIN
  IF s IS NULL THEN
    RAISE EXCEPTION 'no schema to create the fence in: search_path names no existing schema';
  END IF;
  EXECUTE format('CREATE TABLE IF NOT EXISTS %I.fencelock_fences ('
                 'resource text PRIMARY KEY, token numeric(20, 0) NOT NULL)', s);
  -- Each ALTER only when needed: ALTER TABLE waits for every transaction that holds a fence row.
  IF NOT EXISTS (SELECT 1 FROM pg_attribute
                 WHERE attrelid = format('%I.fencelock_fences', s)::regclass
                   AND attname = 'issuer' AND NOT attisdropped) THEN
    EXECUTE format('ALTER TABLE %I.fencelock_fences '
                   'ADD COLUMN issuer text NOT NULL DEFAULT %L', s, '');
  END IF;
  -- New rows hold tokens; NOT VALID leaves rows an older version wrote to the function's FL004.
  IF NOT EXISTS (SELECT 1 FROM pg_constraint
                 WHERE conrelid = format('%I.fencelock_fences', s)::regclass
                   AND conname = 'fencelock_fences_token_is_uint64') THEN
    EXECUTE format('ALTER TABLE %I.fencelock_fences ADD CONSTRAINT '
                   'fencelock_fences_token_is_uint64 '
                   'CHECK (token >= 0 AND token <= 18446744073709551615) NOT VALID', s);
  END IF;
  EXECUTE format('REVOKE ALL ON TABLE %I.fencelock_fences FROM PUBLIC', s);
  EXECUTE format($create$
    CREATE OR REPLACE FUNCTION %1$I.fencelock_fence(p_resource text, p_token numeric,
                                                    p_issuer text)
    RETURNS numeric LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, %1$I, pg_temp AS $body$
    DECLARE
      recorded numeric;
      recorded_issuer text;
    BEGIN
      -- NaN compares above every number and scale(NaN) is NULL: both fail the test below.
      IF p_token IS NULL OR NOT coalesce(p_token >= 0 AND p_token <= 18446744073709551615
                                         AND scale(p_token) = 0, false) THEN
        RAISE EXCEPTION 'fencelock_fence: %% is not a fencing token (a whole number from 0 to '
                        '18446744073709551615, without a fraction); nothing was recorded',
                        coalesce(p_token::text, 'NULL') USING ERRCODE = 'FL002';
      END IF;
      IF p_issuer IS NULL OR p_issuer !~ '^[ -~]*$' OR length(p_issuer) > 32768 THEN
        RAISE EXCEPTION 'fencelock_fence: the issuer is not printable ASCII of at most 32768 '
                        'bytes (pass what Lease::fencing() returns, or use the two-argument '
                        'form for a bare token); nothing was recorded' USING ERRCODE = 'FL002';
      END IF;
      FOR attempt IN 1..10 LOOP
        SELECT f.token, f.issuer INTO recorded, recorded_issuer
          FROM %1$I.fencelock_fences f WHERE f.resource = p_resource FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO %1$I.fencelock_fences (resource, token, issuer)
          VALUES (p_resource, p_token, p_issuer) ON CONFLICT (resource) DO NOTHING;
        IF FOUND THEN
          RETURN p_token;
        END IF;
      END LOOP;
      IF recorded IS NULL THEN
        RAISE EXCEPTION 'fencelock_fence: the fence row of %% was deleted as it was read, 10 '
                        'times in a row', quote_literal(p_resource);
      END IF;
      IF NOT coalesce(recorded >= 0 AND recorded <= 18446744073709551615, false) THEN
        RAISE EXCEPTION 'fencelock_fence: the fence record of %% holds %%, which is no fencing '
                        'token (an older version of fencelock_fence accepted it), so no token '
                        'can be compared with it; the fence''s owner repairs it: UPDATE '
                        'fencelock_fences SET token = <the newest token issued for it> WHERE '
                        'resource = %% (or DELETE the row)',
                        quote_literal(p_resource), recorded, quote_literal(p_resource)
                        USING ERRCODE = 'FL004';
      END IF;
      IF recorded_issuer <> '' AND recorded_issuer <> p_issuer THEN
        IF p_issuer = '' THEN
          RAISE EXCEPTION 'rejected: token %% names no lock (a bare token), but lock %% fences '
                          'this resource (its highest token is %%): call fencelock_fence('
                          'resource, token, issuer) with the lease''s fencing()',
                          p_token, quote_literal(left(recorded_issuer, 512)), recorded
                          USING ERRCODE = 'FL003';
        END IF;
        RAISE EXCEPTION 'rejected: token %% of lock %% cannot be compared with the tokens of '
                        'lock %%, which fences this resource (its highest token is %%): one '
                        'resource is fenced by one lock; to move it to another on purpose, the '
                        'fence''s owner adopts it once every writer of the old lock has stopped: '
                        'UPDATE fencelock_fences SET token = <newest token of the new lock>, '
                        'issuer = <its issuer> WHERE resource = %%',
                        p_token, quote_literal(left(p_issuer, 512)),
                        quote_literal(left(recorded_issuer, 512)), recorded,
                        quote_literal(p_resource) USING ERRCODE = 'FL003';
      END IF;
      IF p_token < recorded THEN
        RAISE EXCEPTION 'rejected: stale token %% < %%', p_token, recorded USING ERRCODE = 'FL001';
      END IF;
      IF p_token <> recorded OR recorded_issuer <> p_issuer THEN
        UPDATE %1$I.fencelock_fences f SET token = p_token, issuer = p_issuer
          WHERE f.resource = p_resource;
      END IF;
      RETURN p_token;
    END
    $body$ $create$, s);
  -- The bare-token form of the first version, kept with its grants: an unnamed token.
  EXECUTE format($create$
    CREATE OR REPLACE FUNCTION %1$I.fencelock_fence(p_resource text, p_token numeric)
    RETURNS numeric LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, %1$I, pg_temp AS $body$
    BEGIN
      RETURN %1$I.fencelock_fence(p_resource, p_token, '');
    END
    $body$ $create$, s);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.fencelock_fence(text, numeric) FROM PUBLIC', s);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.fencelock_fence(text, numeric, text) FROM PUBLIC', s);
  -- The version `fencelock migrate` looks for (src/postgres/postgres_backend.cpp).
  EXECUTE format('COMMENT ON FUNCTION %I.fencelock_fence(text, numeric, text) IS %L', s,
                 'fencelock fence 2');
END
$install$;
