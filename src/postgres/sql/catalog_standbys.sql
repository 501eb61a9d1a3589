-- The servers this one streams to (physical or logical), and synchronous_standby_names.
SELECT count(*), current_setting('synchronous_standby_names') FROM pg_stat_replication
