-- Migration 4: unique jobs (Q15). The schema placeholder is replaced by the quoted
-- schema name.

-- Each job's unique key (NULL for none), kept for the job's life like the payload: dead
-- rows carry it too. A nullable column without a default: a catalog-only change, no
-- table rewrite.
ALTER TABLE @schema@.jobs ADD COLUMN unique_key text;
ALTER TABLE @schema@.dead_jobs ADD COLUMN unique_key text;

-- At most one live job per (queue, unique_key), under any concurrency: an insert of a
-- second live row with a key waits for the first one's transaction, then fails or (ON
-- CONFLICT DO NOTHING) creates nothing. Only keyed rows have an entry, so keyless jobs
-- cost one predicate test per insert; the claim never reads this index and never
-- changes its columns. The build reads the whole table once (every row is keyless)
-- under a SHARE lock: enqueues wait for it, reads do not (see docs/how-to/migrate.md).
CREATE UNIQUE INDEX jobs_unique_key_idx ON @schema@.jobs (queue, unique_key)
    WHERE unique_key IS NOT NULL;

-- The unique_for_s windows: while expires_at is ahead, an enqueue of the key creates
-- nothing and gets job_id, the last job created with the key. Written only by keyed
-- enqueues, read only by them; the expiry sweep deletes the closed ones of its queue.
CREATE TABLE @schema@.unique_windows (
    queue text NOT NULL,
    unique_key text NOT NULL,
    job_id bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue, unique_key)
);
CREATE INDEX unique_windows_expiry_idx ON @schema@.unique_windows (queue, expires_at);
