-- Migration 16: the filtered listings by key (D26.1). The schema placeholder is replaced
-- by the quoted schema name.

-- A listing of the dead or kept rows whose unique or concurrency key is a given key
-- walks one of these, in id order, and stops after a page: never a scan of the table.
-- Only keyed rows have entries, so a keyless dead-letter move or kept ack costs one
-- predicate test per index. No index is added to jobs: its key listings use the unique
-- index and the per-key partial indexes it already has (migration 4 and 8). Each build
-- reads its table once under a SHARE lock: dead-letter moves, redrives, purges and kept
-- acks wait for it, claims and plain acks do not (see docs/how-to/migrate.md).
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
