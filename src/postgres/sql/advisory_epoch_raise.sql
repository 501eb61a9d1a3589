-- Raises advisory mode's token epoch, step 1 of 2 (advisory_backend.cpp, raise_epoch): run when
-- advisory_try.sql or advisory_note.sql found no valid count (fencelock_advisory_live empty: new,
-- or emptied by a crash or a promotion; or its count within 2^32 of 2^40, near the end of its
-- epoch's range). One autocommitted statement on a session with synchronous_commit on (or
-- remote_write, remote_apply: session_setup.sql): its commit returns once the new epoch is
-- flushed, and on the synchronous standbys. The new epoch is above the noted one, the live one
-- and the tokens of earlier versions (fencelock_advisory_tokens), so every token of it is above
-- every token handed out before. Returns the new epoch, or no row when a valid count appeared
-- meanwhile (nothing raised). Step 2 (advisory_epoch_live.sql) runs only when this commit came
-- back in time and without a warning: PostgreSQL makes a commit whose wait for a synchronous
-- standby was cancelled visible all the same, and a count of an epoch the standby lacks would
-- repeat tokens after a failover.
INSERT INTO fencelock_advisory_epoch AS e (id, epoch)
SELECT 1, greatest(coalesce(pg_sequence_last_value('fencelock_advisory_tokens'), 0) >> 40,
                   coalesce((SELECT max(l.epoch) FROM fencelock_advisory_live l), 0)) + 1
 WHERE NOT EXISTS (SELECT 1 FROM fencelock_advisory_live WHERE id = 1 AND count < 1095216660480)
    ON CONFLICT (id) DO UPDATE SET epoch = greatest(e.epoch + 1, EXCLUDED.epoch)
RETURNING epoch
