-- The cluster's system identifier, which a physical standby shares.
SELECT system_identifier::text FROM pg_catalog.pg_control_system()
