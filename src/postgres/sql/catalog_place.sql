-- Where this session's tokens come from: whether it may read the cluster's system identifier
-- (catalog_system.sql), its database, and its schema (the first of search_path).
SELECT has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE'),
       current_database(), coalesce(current_schema(), '')
