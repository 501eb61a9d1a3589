-- fencelock's token sequences that hand each session a block of values (CACHE > 1): tokens
-- drawn by different sessions would not follow grant order. Rows: sequence, its cache.
SELECT seqrelid::regclass::text, seqcache
  FROM pg_sequence
 WHERE seqrelid IN (to_regclass('fencelock_tokens'), to_regclass('fencelock_advisory_tokens'))
   AND seqcache > 1
