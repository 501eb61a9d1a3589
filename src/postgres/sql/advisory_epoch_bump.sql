-- Raises advisory mode's token epoch: run when advisory_try.sql or advisory_note.sql found no
-- valid count (fencelock_advisory_live empty: new, or emptied by a crash or a promotion; or its
-- count at 2^40 - 2^32, near the end of its epoch's range). Two transactions, in this order:
-- 1. the new epoch, committed with synchronous_commit on, so it is flushed (and on a synchronous
--    standby) before any token of it exists; above the noted epoch, the live one and the tokens
--    of earlier versions (fencelock_advisory_tokens), so every token of it is above every token
--    handed out before;
-- 2. the count set to the noted epoch at 0, only where it is missing or at its end with an older
--    epoch: concurrent raises never set it back.
BEGIN;
SET LOCAL synchronous_commit = on;
INSERT INTO fencelock_advisory_epoch (id, epoch) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
UPDATE fencelock_advisory_epoch
   SET epoch = greatest(epoch,
                        coalesce(pg_sequence_last_value('fencelock_advisory_tokens'), 0) >> 40,
                        (SELECT max(l.epoch) FROM fencelock_advisory_live l)) + 1
 WHERE id = 1
   AND NOT EXISTS (SELECT 1 FROM fencelock_advisory_live WHERE id = 1 AND count < 1095216660480);
COMMIT;
INSERT INTO fencelock_advisory_live AS l (id, epoch, count)
SELECT 1, epoch, 0 FROM fencelock_advisory_epoch WHERE id = 1
    ON CONFLICT (id) DO UPDATE SET epoch = EXCLUDED.epoch, count = 0
 WHERE l.epoch < EXCLUDED.epoch AND l.count >= 1095216660480
