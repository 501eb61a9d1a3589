-- Raises advisory mode's token epoch: run when advisory_try.sql or advisory_note.sql found the
-- token sequence without one (a new sequence, or an unlogged one that a crash or a promotion
-- reset) or near the end of its count. Two transactions, in this order:
-- 1. the new epoch, committed with synchronous_commit on, so it is flushed (and on a synchronous
--    standby) before any token of it exists: above the sequence's own epoch and every epoch
--    noted before, so every token of it is above every token handed out before;
-- 2. the sequence set to the first token of the noted epoch, only while it still has no valid
--    epoch, under the epoch row's lock, so that concurrent bumps never set it back.
-- The validity rule (the same in advisory_try.sql and advisory_note.sql): the sequence's last
-- value is at least 2^40 (an epoch above 0) and its count below 2^40 - 2^32.
BEGIN;
SET LOCAL synchronous_commit = on;
INSERT INTO fencelock_advisory_epoch (id, epoch) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
UPDATE fencelock_advisory_epoch
   SET epoch = greatest(epoch, coalesce(pg_sequence_last_value('fencelock_advisory_tokens'), 0) >> 40) + 1
 WHERE id = 1
   AND NOT coalesce(pg_sequence_last_value('fencelock_advisory_tokens') >= 1099511627776
                    AND pg_sequence_last_value('fencelock_advisory_tokens') & 1099511627775
                        < 1095216660480, false);
COMMIT;
BEGIN;
SELECT setval('fencelock_advisory_tokens', epoch << 40)
  FROM (SELECT epoch FROM fencelock_advisory_epoch WHERE id = 1 FOR UPDATE) e
 WHERE NOT coalesce(pg_sequence_last_value('fencelock_advisory_tokens') >= 1099511627776
                    AND pg_sequence_last_value('fencelock_advisory_tokens') & 1099511627775
                        < 1095216660480, false)
   AND epoch << 40 > coalesce(pg_sequence_last_value('fencelock_advisory_tokens'), 0);
COMMIT
