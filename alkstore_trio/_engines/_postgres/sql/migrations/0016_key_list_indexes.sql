-- Migration 16: the filtered listings by key (D26.1). The schema placeholder is replaced
-- by the quoted schema name.

-- A listing of the rows whose unique or concurrency key is a given key walks one of
-- these, in id order, and stops after a page: never a scan of the table, never a sort
-- of a key's whole backlog. Only keyed rows have entries, so a keyless enqueue, claim,
-- dead-letter move or kept ack costs one predicate test per index. The live rows'
-- unique key already has its lookup (jobs_unique_key_idx, migration 4); their
-- concurrency key gets jobs_key_list_idx (the per-key claim indexes of migration 8 are
-- in claim order, not id order: a key of 100,000 pending rows had to be sorted whole
-- for each page). Each build reads its table once under a SHARE lock: the one on jobs
-- makes enqueues, claims and acks wait while it runs, as migration 8's builds did; the
-- others make dead-letter moves, redrives, purges and kept acks wait (see
-- docs/how-to/migrate.md).
CREATE INDEX jobs_key_list_idx ON @schema@.jobs (queue, concurrency_key, state, id)
    WHERE concurrency_key IS NOT NULL;
CREATE INDEX dead_jobs_unique_key_idx ON @schema@.dead_jobs (queue, unique_key, id)
    WHERE unique_key IS NOT NULL;
CREATE INDEX dead_jobs_concurrency_key_idx ON @schema@.dead_jobs (queue, concurrency_key, id)
    WHERE concurrency_key IS NOT NULL;
CREATE INDEX completed_jobs_unique_key_idx
    ON @schema@.completed_jobs (queue, state, unique_key, id)
    WHERE unique_key IS NOT NULL;
CREATE INDEX completed_jobs_concurrency_key_idx
    ON @schema@.completed_jobs (queue, state, concurrency_key, id)
    WHERE concurrency_key IS NOT NULL;
