-- Whether the fence of this version exists (fence_schema.sql marks its function with the
-- COMMENT 'fencelock fence 2'); false for none or an older one (one boolean).
SELECT to_regclass('fencelock_fences') IS NOT NULL
   AND coalesce(obj_description(to_regprocedure('fencelock_fence(text,numeric,text)'), 'pg_proc'),
                '') = 'fencelock fence 2'
