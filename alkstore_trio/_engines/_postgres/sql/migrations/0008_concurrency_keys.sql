-- Migration 8: per-key concurrency (Q18.8). The schema placeholder is replaced by the
-- quoted schema name.

-- Each job's concurrency key (NULL for none), kept for the job's life like the unique
-- key: dead rows carry it too, and a redrive brings it back. Nullable columns without a
-- default: catalog-only changes, no table rewrite.
ALTER TABLE @schema@.jobs ADD COLUMN concurrency_key text;
ALTER TABLE @schema@.dead_jobs ADD COLUMN concurrency_key text;

-- The per-key claim (claim_per_key in queries.sql) finds its rows per key, never by a
-- walk of one key's backlog: the distinct keys with pending rows and, per key, its best
-- ready rows in claim order (a loose scan, then one probe per key), and the keys with
-- processing rows and, per key, its live and lapsed leases. Only keyed rows have
-- entries: a keyless insert or claim costs one predicate test per index. The builds
-- read the whole table once (every row is keyless) under a SHARE lock: enqueues wait
-- for them, reads do not (see docs/how-to/migrate.md).
CREATE INDEX jobs_key_claim_idx ON @schema@.jobs (queue, concurrency_key, priority DESC, run_at, id)
    WHERE state = 'pending' AND concurrency_key IS NOT NULL;
CREATE INDEX jobs_key_lease_idx ON @schema@.jobs (queue, concurrency_key, claim_expires_at)
    WHERE state = 'processing' AND concurrency_key IS NOT NULL;

-- The queue's max_running_per_key and how many claims it throttled. `limited` is a
-- generated column, and PostgreSQL cannot change a generated column's expression in
-- place: it is dropped and added again with the per-key limit in it, in the same
-- statement (one catalog change under the table's lock, so no claim ever reads the
-- row without it; the table holds one small row per controlled queue, and the new
-- column is computed for each).
ALTER TABLE @schema@.queue_controls
    ADD COLUMN max_running_per_key integer CHECK (max_running_per_key >= 1),
    ADD COLUMN throttled_per_key bigint NOT NULL DEFAULT 0,
    DROP COLUMN limited,
    ADD COLUMN limited boolean NOT NULL GENERATED ALWAYS AS (
        max_running IS NOT NULL OR rate_per_s IS NOT NULL OR max_running_per_key IS NOT NULL
    ) STORED;
