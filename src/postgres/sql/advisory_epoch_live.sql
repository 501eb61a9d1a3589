-- Raises advisory mode's token epoch, step 2 of 2: the count row at the epoch that step 1
-- (advisory_epoch_raise.sql) raised and saw committed durably, at 0; only where the row is missing
-- or at the end of its count with an older epoch, so that concurrent raises never set it back.
-- $1 the epoch step 1 returned.
INSERT INTO fencelock_advisory_live AS l (id, epoch, count) VALUES (1, $1::bigint, 0)
    ON CONFLICT (id) DO UPDATE SET epoch = EXCLUDED.epoch, count = 0
 WHERE l.epoch < EXCLUDED.epoch AND l.count >= 1095216660480
